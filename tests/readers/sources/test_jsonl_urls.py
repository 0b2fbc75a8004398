"""jsonl over URLs (issue 29): files served by a real HTTP server (tests/helpers/http_server.py) give the local
entries, digest and fingerprint; the index is one streamed pass, a batch's lines of a file few merged range
requests; shuffle, 3 shards, process workers and resume give each line once; a changed file and a bad line are
named by the redacted URL (and the line)."""
import contextlib
import pickle
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

import readers  # noqa: E402
from readers.identity import fingerprint  # noqa: E402
from readers.sources import locations  # noqa: E402
from readers.sources.jsonl import JsonlError, jsonl  # noqa: E402
from readers.sources.locations import FileChanged, redact  # noqa: E402
from readers.testing import assert_resumes_at_every_step  # noqa: E402
from tests.helpers.behind_url import behind_a_url  # noqa: E402
from tests.helpers.fsspec_io import stop_io  # noqa: E402
from tests.readers.sources.test_jsonl import ROWS, ids, write_jsonl  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _no_fsspec_thread_after():
    yield
    stop_io()  # a later test's process workers would spawn while it runs (tests/helpers/fsspec_io.py)


class Served(NamedTuple):
    folder: Path  # the local files
    url: str  # the same folder behind a URL, ending in "/"
    server: Any  # the HTTP server (its request log), or None for S3
    put: Callable[[str], None]  # send the local file of this name to the store again (S3)


@contextlib.contextmanager
def serving(kind: str, request, tmp_path) -> Iterator[Served]:
    """Two files of ROWS at tmp_path/rows, behind an HTTP URL with user:secret@ or an S3 prefix."""
    folder = tmp_path / "rows"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", ROWS[:10])
    write_jsonl(folder / "b.jsonl", ROWS[10:])
    with behind_a_url(kind, request, tmp_path, "rows") as (url, server, put):
        yield Served(folder, url + "/", server, put)


@pytest.fixture(params=["http", "s3"])
def served(request, tmp_path):
    with serving(request.param, request, tmp_path) as where:
        yield where


@pytest.fixture
def http_served(request, tmp_path):
    with serving("http", request, tmp_path) as where:
        yield where


@pytest.fixture(autouse=True)
def short_retries(monkeypatch):
    """A failure these tests do not expect fails in seconds, not after the minute of retries users get."""
    monkeypatch.setattr(locations, "RETRY", locations.Retry(deadline=5.0))


def test_jsonl_url_gives_the_local_entries_digest_and_fingerprint(served):
    folder, url = served.folder, served.url
    remote, local = jsonl(url), jsonl(folder)
    assert len(remote) == len(ROWS) and list(remote()) == list(local()) == ROWS
    assert remote[12] == ROWS[12]
    assert remote.digest() == local.digest() and fingerprint(remote) == fingerprint(local)
    assert list(jsonl(url + "{a,b}.jsonl", fields=["id"])()) == [(row["id"],) for row in ROWS]


def test_jsonl_url_indexes_in_one_pass_then_reads_a_batch_in_one_range_a_file(http_served):
    url, server = http_served.url, http_served.server
    r = jsonl(url)
    before = len(server.requests)
    len(r)
    gets = [q for q in server.requests[before:] if q.method == "GET"]
    assert len(gets) == 2  # one streamed read of each (small) file
    before = len(server.requests)
    assert list(r.gather(np.array([12, 3, 1, 15]))) == [ROWS[12], ROWS[3], ROWS[1], ROWS[15]]
    gets = [q for q in server.requests[before:] if q.method == "GET"]
    assert sorted(q.path for q in gets) == ["/rows/a.jsonl", "/rows/b.jsonl"]


def test_jsonl_url_repr_holds_no_credentials(http_served):
    url = http_served.url
    r = jsonl(url + "a.jsonl?token=secret", fields=["id"])
    assert repr(r) == f"jsonl({url.replace('user:secret@', '') + 'a.jsonl'!r}, fields=['id'])"
    assert "secret" not in r.identity()


def test_jsonl_url_shuffle_and_three_shards_give_each_line_once(served):
    url = served.url
    shuffled = readers.shuffle(jsonl(url), seed=3)
    parts = [ids(readers.shard(shuffled, i, 3)()) for i in range(3)]
    assert sorted(sum(parts, [])) == list(range(len(ROWS)))


def test_jsonl_url_process_workers_give_each_line_once(served):
    url = served.url
    r = readers.prefetch(readers.shard(readers.shuffle(jsonl(url), seed=2)), 3, mode="process", start_method="spawn")
    assert sorted(ids(r())) == list(range(len(ROWS)))


def test_jsonl_url_resumes_at_every_step(served):
    url = served.url
    indexed = jsonl(url)
    len(indexed)  # each restore starts from a copy holding the index, as a worker's does
    blob = pickle.dumps(indexed)
    assert_resumes_at_every_step(lambda: readers.shuffle(pickle.loads(blob), seed=5), max_steps=6)


def test_jsonl_url_refuses_a_file_changed_between_passes(served):
    folder, url = served.folder, served.url
    r = jsonl(url)
    assert list(r()) == ROWS
    write_jsonl(folder / "b.jsonl", ROWS[10:] + ROWS[:1])
    served.put("b.jsonl")
    with pytest.raises(FileChanged, match="^" + re.escape(redact(url) + "b.jsonl changed since")) as caught:
        list(r())
    assert "secret" not in str(caught.value)


def test_jsonl_url_bad_line_is_named_by_its_redacted_url_and_line(served):
    folder, url = served.folder, served.url
    (folder / "b.jsonl").write_text('{"id": 10}\n\n{"id": oops}\n')
    served.put("b.jsonl")
    r = jsonl(url)
    with pytest.raises(JsonlError, match="^" + re.escape(f"jsonl: {redact(url)}b.jsonl, line 3 is not JSON")) as caught:
        list(r())
    assert "secret" not in str(caught.value)
