"""readers.sources.locations: the paths a format reader is given, expanded, and its files opened."""
import contextlib
import os
import re
import traceback
from collections.abc import Iterator
from typing import Any

import pytest

from readers.errors import BadType, MissingFile, ReaderkitError
from readers.sources import locations
from readers.sources.locations import (
    RemoteReadError,
    expand_braces,
    expand_paths,
    read_range,
)


def test_brace_ranges_keep_their_padding_and_nest_with_alternatives():
    assert expand_braces("s-{08..11}.tar") == ["s-08.tar", "s-09.tar", "s-10.tar", "s-11.tar"]
    assert expand_braces("{a,b}-{1..2}") == ["a-1", "a-2", "b-1", "b-2"]
    assert expand_braces("{3..1}") == ["3", "2", "1"]


def test_folders_globs_braces_and_lists_expand_in_order(tmp_path):
    (tmp_path / "sub").mkdir()
    for name in ["b.tar", "a.tar", "sub/c.tar", "skip.txt", ".hidden.tar"]:
        (tmp_path / name).write_bytes(b"x")
    names = lambda paths: [os.path.relpath(p, tmp_path) for p in paths]  # noqa: E731
    assert names(expand_paths(tmp_path, suffixes=[".tar"])) == ["a.tar", "b.tar", "sub/c.tar"]
    assert names(expand_paths(str(tmp_path / "*.tar"))) == ["a.tar", "b.tar"]
    assert names(expand_paths([tmp_path / "b.tar", str(tmp_path / "{a,b}.tar")])) == ["b.tar", "a.tar", "b.tar"]


def test_what_matches_nothing_is_named(tmp_path):
    (tmp_path / "shard-0.tar").write_bytes(b"")
    with pytest.raises(MissingFile, match=r"shard-1\.tar: no tar shards there"):
        expand_paths(str(tmp_path / "shard-{0..1}.tar"), what="tar shards")
    with pytest.raises(BadType, match="not a path"):
        expand_paths([3])


def test_read_range_reads_bytes_from_an_offset(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(10)))
    assert read_range(str(path), 8, 5) == bytes([8, 9])


# -- URLs (issue 29): a real HTTP server (tests/helpers/http_server.py) and moto's S3 server ---------------------

NAMES = ["a/x-0.bin", "a/x-1.bin", "a/y.txt", "b/x-2.bin", "top.bin"]


def write_tree(root) -> None:
    for k, name in enumerate(NAMES):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(bytes(range(256)) * (k + 1))


@pytest.fixture(autouse=True, scope="module")
def _no_fsspec_thread_after():
    yield
    from tests.helpers.fsspec_io import stop_io

    stop_io()  # a later test's process workers would spawn while it runs (tests/helpers/fsspec_io.py)


@contextlib.contextmanager
def store(kind: str, request, tmp_path) -> Iterator[tuple[str, Any]]:
    """(the URL of tmp_path/tree behind HTTP, with user:secret@ and no trailing "/", or in S3; the HTTP server)."""
    pytest.importorskip("fsspec")
    root = tmp_path / "tree"
    write_tree(root)
    if kind == "http":
        pytest.importorskip("aiohttp")
        from tests.helpers.http_server import serve_folder

        with serve_folder(tmp_path, auth=("user", "secret")) as server:
            yield server.url.replace("http://", "http://user:secret@") + "/tree", server
        return
    pytest.importorskip("s3fs")
    s3 = request.getfixturevalue("s3_server")
    bucket = s3.make_bucket()
    s3.upload(root, bucket, "tree")
    yield f"s3://{bucket}/tree", None


@pytest.fixture(params=["http", "s3"])
def remote(request, tmp_path):
    with store(request.param, request, tmp_path) as where:
        yield where


@pytest.fixture
def http(request, tmp_path):
    with store("http", request, tmp_path) as where:
        yield where


@pytest.fixture
def short_deadline(monkeypatch):
    monkeypatch.setattr(locations, "RETRY", locations.Retry(deadline=0.5, first=0.01, most=0.05))


def below(url: str, found: list[str]) -> list[str]:
    return [locations.redact(p)[len(locations.redact(url)) + 1:] for p in found]


@pytest.mark.parametrize("given, want", [
    ("top.bin", ["top.bin"]),  # one object
    ("a", ["a/x-0.bin", "a/x-1.bin", "a/y.txt"]),  # a folder (prefix): every object below it
    ("a/", ["a/x-0.bin", "a/x-1.bin", "a/y.txt"]),
    ("a/*.bin", ["a/x-0.bin", "a/x-1.bin"]),  # a glob
    ("{a/x-0,b/x-2}.bin", ["a/x-0.bin", "b/x-2.bin"]),  # braces
    ("a/x-{0..1}.bin", ["a/x-0.bin", "a/x-1.bin"]),
])
def test_expand_paths_url_object_prefix_glob_and_braces(remote, given, want):
    url, _ = remote
    assert below(url, expand_paths(f"{url}/{given}")) == want


def test_expand_paths_url_folder_keeps_the_suffixes_asked_for(remote):
    url, _ = remote
    assert below(url, expand_paths(url, suffixes=[".bin"])) == ["a/x-0.bin", "a/x-1.bin", "b/x-2.bin", "top.bin"]


@pytest.mark.parametrize("given", ["nothing.bin", "a/*.parquet", "{a,c}/nothing-{0..1}.bin"])
def test_expand_paths_url_missing_names_the_redacted_url(remote, given):
    url, _ = remote
    with pytest.raises(MissingFile, match="^" + re.escape(locations.redact(url))) as caught:
        expand_paths(f"{url}/{given}?token=secret", what="Parquet files")
    assert "secret" not in str(caught.value) and "no Parquet files there" in str(caught.value)


def test_read_ranges_url_gives_the_local_bytes(remote, tmp_path):
    url, _ = remote
    local = str(tmp_path / "tree" / "b" / "x-2.bin")
    ranges = [(700, 10), (0, 5), (3, 4), (760, 100), (10, 0)]
    assert locations.read_ranges(f"{url}/b/x-2.bin", ranges) == locations.read_ranges(local, ranges)
    assert locations.read_range(f"{url}/b/x-2.bin", 100, 3) == bytes([100, 101, 102])


def gets(server, since: int) -> list:
    return [q for q in server.requests[since:] if q.method == "GET"]


def test_read_ranges_merges_close_ranges_into_one_request(http):
    url, server = http
    before = len(server.requests)
    locations.read_ranges(f"{url}/b/x-2.bin", [(0, 10), (20, 10), (500, 4)], gap=64)
    assert sorted(q.range for q in gets(server, before)) == ["bytes=0-29", "bytes=500-503"]
    before = len(server.requests)
    locations.read_ranges(f"{url}/b/x-2.bin", [(0, 10), (20, 10), (500, 4)], gap=1000)
    assert [q.range for q in gets(server, before)] == ["bytes=0-503"]


def test_read_range_url_survives_a_connection_dropped_mid_range(http):
    url, server = http
    server.drop_next(2, after_bytes=100)
    assert locations.read_range(f"{url}/top.bin", 0, 1000) == (bytes(range(256)) * 5)[:1000]
    assert len(gets(server, 0)) >= 3


def test_read_range_url_survives_a_503_storm_shorter_than_the_deadline(http):
    url, server = http
    server.fail_next(4, 503)
    assert locations.read_range(f"{url}/top.bin", 256, 3) == bytes([0, 1, 2])


def test_a_503_storm_past_the_deadline_is_one_error_naming_the_url_and_status(http, short_deadline):
    url, server = http
    server.fail_next(10_000, 503)
    with pytest.raises(RemoteReadError) as caught:
        locations.read_range(f"{url}/top.bin?sig=secret", 0, 3)
    message = str(caught.value)
    assert message.startswith(locations.redact(url) + "/top.bin: ") and "(last: HTTP 503)" in message
    assert "secret" not in message and caught.value.__cause__ is None


@pytest.mark.parametrize("call", ["stat", "open", "range", "expand"])
def test_wrong_s3_credentials_fail_at_once_without_the_secret(s3_server, tmp_path, monkeypatch, call):
    pytest.importorskip("s3fs")
    bucket = s3_server.make_bucket()
    write_tree(tmp_path)
    s3_server.upload(tmp_path, bucket, "tree")
    url = f"s3://{bucket}/tree/top.bin"
    judged = []  # whether each failure was taken as transient (retried): a refusal must not be
    real = locations.transient
    monkeypatch.setattr(locations, "transient", lambda exc: judged.append(real(exc)) or judged[-1])
    with s3_server.wrong_credentials():
        secret = os.environ["AWS_SECRET_ACCESS_KEY"]
        try:
            {"stat": lambda: locations.stat(url), "open": lambda: locations.open_file(url).read(),
             "range": lambda: locations.read_range(url, 0, 3), "expand": lambda: expand_paths(url)}[call]()
        except RemoteReadError as exc:
            message, trace = str(exc), traceback.format_exc()
        else:
            pytest.fail("a wrong secret was accepted")
    assert True not in judged  # refused at once, not retried until the deadline
    assert message.startswith(url + ": ") and "check the credentials" in message
    assert secret not in message and secret not in trace and s3_server.secret not in trace


def test_every_error_shows_a_url_without_credentials_or_query(http, short_deadline):
    url, server = http
    secret_url = url + "/top.bin?X-Amz-Signature=secret"
    errors = []
    for attempt in [lambda: locations.stat(url + "/none.bin?sig=secret"),
                    lambda: locations.read_range(url + "/none.bin?sig=secret", 0, 1),
                    lambda: expand_paths(url + "/none-{0..1}.bin?sig=secret"),
                    lambda: locations.check_unchanged(secret_url, locations.Stat(1, "x")),
                    lambda: (server.fail_next(10_000, 503), locations.read_range(secret_url, 0, 1))]:
        with pytest.raises(ReaderkitError) as caught:
            attempt()
        errors.append(caught.value)
    server.fail_next(0)
    for error in errors:
        assert "secret" not in str(error) and "user:" not in str(error), error
        assert "http://127.0.0.1:" in str(error), error


def test_a_wrong_http_password_is_a_credentials_error_not_a_missing_file(http):
    url, server = http
    wrong = url.replace("user:secret@", "user:wrong-password@") + "/top.bin"
    with pytest.raises(RemoteReadError, match=r"failed \(HTTP 401\): check the credentials") as caught:
        locations.stat(wrong)
    assert "wrong-password" not in str(caught.value) and str(caught.value).startswith(locations.redact(wrong))
