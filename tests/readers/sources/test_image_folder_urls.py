"""image_folder over URLs (issue 29): a folder served by a real HTTP server (tests/helpers/http_server.py) and
a prefix in a local S3 server give the local folder's entries, digest and fingerprint; each image is one GET;
shuffle, 3 shards, process workers and resume give each image once; a changed or undecodable image is named
by its redacted URL."""
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
Image = pytest.importorskip("PIL.Image")

import readers  # noqa: E402
from readers.identity import fingerprint  # noqa: E402
from readers.sources import locations  # noqa: E402
from readers.sources.image_folder import ImageDecodeError, image_folder  # noqa: E402
from readers.sources.locations import FileChanged, redact  # noqa: E402
from readers.testing import assert_resumes_at_every_step  # noqa: E402
from tests.helpers.behind_url import behind_a_url  # noqa: E402
from tests.helpers.fsspec_io import stop_io  # noqa: E402
from tests.readers.sources.test_image_folder import every_key, key, write_folder  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _no_fsspec_thread_after():
    yield
    stop_io()  # a later test's process workers would spawn while it runs (tests/helpers/fsspec_io.py)


class Served(NamedTuple):
    root: Path  # the local folder
    url: str  # the same folder behind a URL
    server: Any  # the HTTP server (its request log), or None for S3
    written: list
    put: Callable[[str], None]  # send the local file at this path below root to the store again (S3)


@contextlib.contextmanager
def serving(kind: str, request, tmp_path) -> Iterator[Served]:
    """The images at tmp_path/images, behind an HTTP URL with user:secret@ or an S3 prefix."""
    root = tmp_path / "images"
    written = write_folder(root)
    (root / "notes.txt").write_text("not an image")  # neither listed nor read
    with behind_a_url(kind, request, tmp_path, "images", prefix="data/images") as (url, server, put):
        yield Served(root, url, server, written, put)


@pytest.fixture(params=["http", "s3"])
def served(request, tmp_path):
    with serving(request.param, request, tmp_path) as where:
        yield where


@pytest.fixture
def http_served(request, tmp_path):
    with serving("http", request, tmp_path) as where:
        yield where


def test_image_folder_url_gives_the_local_entries_digest_and_fingerprint(served):
    root, url = served.root, served.url
    remote, local = image_folder(url, size=(5, 7)), image_folder(root, size=(5, 7))
    assert len(remote) == len(local) and remote.classes == local.classes
    for (a, la), (b, lb) in zip(remote(), local()):
        assert la == lb and np.array_equal(a, b)
    assert remote.digest() == local.digest()
    assert fingerprint(remote) == fingerprint(local)
    assert remote.path(0).startswith(url + "/bird/")


def test_image_folder_url_reads_each_image_with_one_get(http_served):
    url, server = http_served.url, http_served.server
    r = image_folder(url)
    len(r)  # the listing: index pages and each image's stat
    before = len(server.requests)
    for i in range(len(r)):
        r[i]
    gets = [q for q in server.requests[before:] if q.method == "GET"]
    assert len(gets) == len(r) and len({q.path for q in gets}) == len(r)


def test_image_folder_url_repr_and_messages_hold_no_credentials(http_served):
    url = http_served.url
    r = image_folder(url, size=3)
    assert repr(r) == f"image_folder({url.replace('user:secret@', '')!r}, size=(3, 3))"
    assert "secret" not in repr(r) and "secret" not in r.identity()


def test_image_folder_url_shuffle_and_three_shards_give_each_image_once(served):
    url, written = served.url, served.written
    shuffled = readers.shuffle(image_folder(url), seed=3)
    got = [key(e) for i in range(3) for e in readers.shard(shuffled, i, 3)()]
    assert sorted(got) == every_key(written)


def test_image_folder_url_process_workers_give_each_image_once(served):
    url, written = served.url, served.written
    r = readers.prefetch(readers.shard(readers.shuffle(image_folder(url), seed=2)), 3, mode="process",
                         start_method="spawn")
    assert sorted(key(e) for e in r()) == every_key(written)


def test_image_folder_url_resumes_at_every_step(served):
    url = served.url
    listed = image_folder(url)
    len(listed)  # each restore starts from a copy holding the listing, as a worker's does
    blob = pickle.dumps(listed)
    assert_resumes_at_every_step(lambda: readers.shuffle(pickle.loads(blob), seed=5), max_steps=6)


def test_image_folder_url_pickles_with_its_listing(http_served):
    url, server = http_served.url, http_served.server
    r = image_folder(url)
    len(r)
    again = pickle.loads(pickle.dumps(r))
    before = len(server.requests)
    assert len(again) == len(r) and len(server.requests) == before  # not listed again


def test_image_folder_url_refuses_an_image_changed_since_listed(served):
    root, url = served.root, served.url
    r = image_folder(url)
    list(r())
    Image.new("RGB", (9, 9)).save(root / "cat" / "001.png")
    served.put("cat/001.png")
    with pytest.raises(FileChanged, match="^" + re.escape(redact(url) + "/cat/001.png changed since")) as caught:
        list(r())
    assert "secret" not in str(caught.value)


def test_image_folder_url_undecodable_image_is_named_by_its_redacted_url(served):
    root, url = served.root, served.url
    (root / "dog" / "000.png").write_bytes(b"not a png")
    served.put("dog/000.png")
    r = image_folder(url)
    with pytest.raises(ImageDecodeError, match="^" + re.escape(redact(url) + "/dog/000.png does not decode")) as caught:
        list(r())
    assert "secret" not in str(caught.value)


@pytest.fixture(autouse=True)
def short_retries(monkeypatch):
    """A failure these tests do not expect fails in seconds, not after the minute of retries users get."""
    monkeypatch.setattr(locations, "RETRY", locations.Retry(deadline=5.0))
