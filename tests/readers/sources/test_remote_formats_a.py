"""tar_shards, parquet and arrow over URLs (issue 29): files served by a real HTTP server (tests/helpers/http_server.py)
and by moto's S3 server give the local entries and fingerprint; shuffle, 3 shards, process workers and resume give
each entry once; dropped connections and a 503 storm are retried; a cut or changed object is named by its URL; a
cache_dir holds whole files only, within its bound."""
import os

import numpy as np
import pytest

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
feather = pytest.importorskip("pyarrow.feather")
wds = pytest.importorskip("webdataset")

import readers  # noqa: E402
from readers.identity import fingerprint  # noqa: E402
from readers.sources import locations  # noqa: E402
from readers.sources.locations import FileChanged, RemoteReadError  # noqa: E402
from readers.sources.tar_shards import TarShardError  # noqa: E402
from readers.testing import assert_resumes_at_every_step  # noqa: E402
from tests.conftest import S3_LIBRARIES  # noqa: E402
from tests.helpers.fsspec_io import stop_io  # noqa: E402
from tests.helpers.http_server import Request, serve_folder  # noqa: E402

N = 40  # rows of each Parquet file, of the Arrow file; samples of the tar shards
SHARDS = 4


def write_data(folder):
    """Two Parquet files (row groups of 8), an Arrow file (batches of 8), and N samples in SHARDS tar shards."""
    folder.mkdir(exist_ok=True)
    for k, name in enumerate(["a", "b"]):
        ids = np.arange(N) + k * N
        table = pa.table({"id": ids, "name": [f"row {i}" for i in ids],
                          "x": pa.FixedSizeListArray.from_arrays(pa.array(np.repeat(ids, 4).astype(np.float32)), 4)})
        pq.write_table(table, folder / f"{name}.parquet", row_group_size=8)
    feather.write_feather(pa.table({"id": np.arange(N), "name": [f"row {i}" for i in range(N)]}),
                          str(folder / "a.arrow"), chunksize=8)
    with wds.ShardWriter(str(folder / "shard-%03d.tar"), maxcount=N // SHARDS, verbose=0) as sink:
        for i in range(N):
            sink.write({"__key__": f"s{i:03d}", "cls": i, "txt": f"sample {i}"})


@pytest.fixture(autouse=True, scope="module")
def _no_fsspec_thread_after():
    """fsspec's IO thread, left running, would make later tests' process workers spawn (see the helper)."""
    yield
    stop_io()


@pytest.fixture
def served(tmp_path):
    """(the local folder, the server serving it)."""
    folder = tmp_path / "data"
    write_data(folder)
    with serve_folder(folder) as server:
        yield folder, server


@pytest.fixture
def quick_retries(monkeypatch):
    monkeypatch.setattr(locations, "RETRY", locations.Retry(deadline=5.0, first=0.01, most=0.05))


def ids(entries):
    return [int(e["cls"]) if isinstance(e, dict) else int(e[0]) for e in entries]


READERS = {  # name: (make(where), the local path under the folder, the path under the URL)
    "parquet": (lambda where, **kw: readers.parquet(where, columns=["id", "name", "x"], **kw), "", "/"),
    "parquet-glob": (lambda where, **kw: readers.parquet(where, **kw), "*.parquet", "/*.parquet"),
    "arrow": (lambda where, **kw: readers.arrow(where, **kw), "a.arrow", "/a.arrow"),
    "tar_shards": (lambda where, **kw: readers.tar_shards(where, **kw), "shard-{000..003}.tar",
                   "/shard-{000..003}.tar"),
}


def same_entries(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        if isinstance(a, dict):
            assert a == b
        else:
            assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("name", sorted(READERS))
def test_formats_over_http_give_the_local_entries_and_fingerprint(served, name):
    folder, server = served
    make, local, remote = READERS[name]
    here, there = make(os.path.join(folder, local) if local else folder), make(server.url + remote)
    same_entries(list(there()), list(here()))
    assert fingerprint(there) == fingerprint(here)  # by content: a checkpoint moves between them
    assert "127.0.0.1" in repr(there) or name == "tar_shards"


@pytest.fixture(scope="module")
def s3_here():
    """A moto S3 server for this module only: the session's (tests/conftest.py) keeps a thread running after the
    module, which makes later tests' process workers spawn, so their lambdas no longer pickle."""
    for name in S3_LIBRARIES:
        pytest.importorskip(name)
    from tests.helpers.s3_server import serve_s3

    with serve_s3() as server:
        yield server


def test_formats_over_s3_give_the_local_entries_and_fingerprint(tmp_path, s3_here):
    folder = tmp_path / "data"
    write_data(folder)
    with s3_here.environment():
        bucket = s3_here.make_bucket()
        s3_here.upload(folder, bucket, "set")
        base = f"s3://{bucket}/set"
        for name, (make, local, remote) in READERS.items():
            here, there = make(os.path.join(folder, local) if local else folder), make(base + remote)
            same_entries(list(there()), list(here()))
            assert fingerprint(there) == fingerprint(here), name
        shards = readers.tar_shards(base + "/", seed=1)  # a prefix: its .tar objects
        assert sorted(ids(shards())) == list(range(N))
        assert sorted(ids(readers.prefetch(readers.tar_shards(base + "/"), 2, mode="process")())) == list(range(N))


@pytest.mark.parametrize("kind,shuffled", [("parquet", "global"), ("parquet", "row_groups"), ("arrow", "global")])
def test_columns_over_http_shuffle_shard_workers_and_resume_give_each_entry_once(served, kind, shuffled):
    _, server = served
    url = server.url + ("/{a,b}.parquet" if kind == "parquet" else "/a.arrow")

    def make():
        r = getattr(readers, kind)(url, columns=["id"])
        return readers.shuffle(r, seed=3) if shuffled == "global" else readers.shuffle_row_groups(r, window=2, seed=3)

    want = list(range(2 * N if kind == "parquet" else N))
    whole = ids(make()())
    assert sorted(whole) == want and whole != want
    assert sorted(sum((ids(readers.shard(make(), k, 3)()) for k in range(3)), [])) == want
    assert sorted(ids(readers.prefetch(make(), 2, mode="process")())) == want
    assert_resumes_at_every_step(make, max_steps=6)


def test_tar_shards_over_http_shuffle_shard_workers_and_resume_give_each_entry_once(served):
    _, server = served
    url = server.url + "/shard-{000..003}.tar"
    make = lambda: readers.shuffle(readers.tar_shards(url, decode=False, seed=1), 4, seed=2)  # noqa: E731
    r = make()
    first, second = ids(r()), ids(r())
    assert sorted(first) == sorted(second) == list(range(N)) and first != second
    assert sorted(sum((ids(readers.shard(make(), k, 3)()) for k in range(3)), [])) == list(range(N))
    workers = readers.prefetch(readers.tar_shards(url, seed=0), 2, mode="process")
    assert sorted(ids(workers())) == list(range(N))
    assert_resumes_at_every_step(make, max_steps=8)


def test_parquet_over_http_reads_a_footer_and_a_row_group_with_one_request_each(served):
    folder, server = served
    url = server.url + "/a.parquet"
    before = len(server.requests)
    r = readers.parquet(url, columns=["id", "name"])  # adjacent columns: one coalesced range
    gets = [q for q in server.requests[before:] if q.method == "GET"]
    assert len(gets) == 1 and gets[0].range is not None  # the footer: one range at the end
    r.group(0)  # opens the file (its footer again) and reads one row group
    before = len(server.requests)
    r.group(3)
    gets = [q for q in server.requests[before:] if q.method == "GET"]
    chunks = [pq.read_metadata(folder / "a.parquet").row_group(3).column(c) for c in range(2)]
    start = min(c.dictionary_page_offset or c.data_page_offset for c in chunks)
    size = sum(c.total_compressed_size for c in chunks)
    assert gets == [Request("GET", "/a.parquet", f"bytes={start}-{start + size - 1}")]  # its two chunks, no more


def test_formats_over_http_retry_connections_dropped_mid_range(served, quick_retries):
    _, server = served
    for name in ["parquet", "arrow", "tar_shards"]:
        make, _, remote = READERS[name]
        want = list(make(server.url + remote)())
        server.drop_next(2, after_bytes=100)  # two answers cut off 100 bytes into their body
        same_entries(list(make(server.url + remote)()), want)


def test_formats_over_http_outlast_a_503_storm_shorter_than_the_deadline(served, quick_retries):
    _, server = served
    for name in ["parquet", "arrow", "tar_shards"]:
        make, _, remote = READERS[name]
        want = list(make(server.url + remote)())
        server.fail_next(4, 503)
        same_entries(list(make(server.url + remote)()), want)


def test_tar_shards_object_cut_short_is_named_by_its_url(served):
    folder, server = served
    path = folder / "shard-002.tar"
    path.write_bytes(path.read_bytes()[:2000])
    with pytest.raises(TarShardError, match=rf"tar_shards: {server.url}/shard-002.tar is cut short"):
        list(readers.tar_shards(server.url + "/shard-{000..003}.tar")())


def rewrite(path):
    """Rewrite a served file with other bytes of the same length: its ETag (size and mtime) changes."""
    data = path.read_bytes()
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 10**9))


@pytest.mark.parametrize("cache", [False, True])
def test_tar_shards_object_changed_between_passes_is_refused_naming_it(served, tmp_path, cache):
    folder, server = served
    options = {"cache_dir": tmp_path / "cache"} if cache else {}
    r = readers.tar_shards(server.url + "/shard-{000..003}.tar", decode=False, **options)
    assert ids(r()) == list(range(N))
    rewrite(folder / "shard-001.tar")
    with pytest.raises(FileChanged, match=rf"{server.url}/shard-001.tar changed since the reader first read it"):
        list(r())


def test_parquet_object_changed_between_passes_is_refused_naming_it(served):
    folder, server = served
    r = readers.parquet(server.url + "/a.parquet", cache_bytes=1)  # keeps one converted row group: reads again
    assert ids(r()) == list(range(N))
    rewrite(folder / "a.parquet")
    with pytest.raises(FileChanged, match=rf"{server.url}/a.parquet changed since the reader first read it"):
        list(r())


def test_tar_shards_cache_dir_downloads_each_shard_once(served, tmp_path):
    pytest.importorskip("readers.sources.file_cache")
    _, server = served
    r = readers.tar_shards(server.url + "/shard-{000..003}.tar", decode=False, cache_dir=tmp_path / "cache")
    assert ids(r()) == list(range(N))
    before = len(server.requests)
    assert ids(r()) == list(range(N))
    assert [q.method for q in server.requests[before:]] == ["HEAD"] * SHARDS  # only each shard's version asked
    assert fingerprint(r) == fingerprint(readers.tar_shards(server.url + "/shard-{000..003}.tar", decode=False))


def test_parquet_and_arrow_cache_dir_read_the_same_and_download_once(served, tmp_path):
    pytest.importorskip("readers.sources.file_cache")
    folder, server = served
    for make, where in [(readers.parquet, "/{a,b}.parquet"), (readers.arrow, "/a.arrow")]:
        cached = make(server.url + where, cache_dir=tmp_path / "cache")
        plain = make(server.url + where)
        same_entries(list(cached()), list(plain()))
        assert fingerprint(cached) == fingerprint(plain)
        before = len(server.requests)
        copy = make(server.url + where, cache_dir=tmp_path / "cache")
        same_entries(list(copy()), list(plain()))
        assert {q.method for q in server.requests[before:]} == {"HEAD"}


def test_cache_dir_keeps_whole_files_only_when_a_download_fails_half_way(served, tmp_path, monkeypatch):
    pytest.importorskip("readers.sources.file_cache")
    _, server = served
    monkeypatch.setattr(locations, "RETRY", locations.Retry(deadline=0.3, first=0.05, most=0.05))
    cache = tmp_path / "cache"
    r = readers.tar_shards(server.url + "/shard-{000..003}.tar", decode=False, cache_dir=cache)
    # more cut answers than 0.3 s of retries (waits of 25-50 ms) can ask for: the first download fails half way
    server.drop_next(16, after_bytes=500)
    with pytest.raises(RemoteReadError, match=r"shard-000.tar: reading bytes"):
        list(r())
    assert [n for n in os.listdir(cache) if n.endswith(".tar") or n.startswith(".partial")] == []
    monkeypatch.setattr(locations, "RETRY", locations.Retry(deadline=10.0, first=0.01, most=0.02))
    assert ids(r()) == list(range(N))  # the next pass downloads again (retrying the cuts that are left)
    assert len([n for n in os.listdir(cache) if n.endswith(".tar")]) == SHARDS


def test_cache_dir_stays_within_its_byte_bound(served, tmp_path):
    pytest.importorskip("readers.sources.file_cache")
    folder, server = served
    size = os.path.getsize(folder / "shard-000.tar")
    cache = tmp_path / "cache"
    r = readers.tar_shards(server.url + "/shard-{000..003}.tar", decode=False, cache_dir=cache,
                           cache_dir_bytes=2 * size + 100)
    assert ids(r()) == ids(r()) == list(range(N))
    kept = [n for n in os.listdir(cache) if n.endswith(".tar")]
    assert len(kept) == 2 and sum(os.path.getsize(cache / n) for n in kept) <= 2 * size + 100
    with pytest.raises(ValueError, match=r"shard-000.tar is .* bytes, more than the file cache's bound"):
        list(readers.tar_shards(server.url + "/shard-000.tar", cache_dir=tmp_path / "small", cache_dir_bytes=100)())


def test_local_paths_are_never_cached(served, tmp_path):
    folder, _ = served
    r = readers.tar_shards(str(folder / "shard-{000..003}.tar"), decode=False, cache_dir=tmp_path / "cache")
    assert ids(r()) == list(range(N)) and not (tmp_path / "cache").exists()


def test_stat_of_an_http_url_outlasts_a_503_storm(served, quick_retries):
    """Regression: fsspec's HTTP info raises FileNotFoundError for a 503 (the 503 as its cause), which
    locations took for a missing object ("no such file or object") instead of trying again."""
    folder, server = served
    server.fail_next(4, 503)  # fsspec asks HEAD, then GET: two storms' worth of requests
    assert locations.stat(server.url + "/a.arrow").size == os.path.getsize(folder / "a.arrow")


def test_credentials_in_a_url_are_in_no_repr_or_message(tmp_path):
    folder = tmp_path / "data"
    write_data(folder)
    with serve_folder(folder, auth=("user", "s3cret")) as server:
        base = server.url.replace("http://", "http://user:s3cret@")
        for make, where in [(readers.parquet, "/a.parquet"), (readers.arrow, "/a.arrow"),
                            (readers.tar_shards, "/shard-000.tar")]:
            r = make(base + where)
            assert len(list(r())) and "s3cret" not in repr(r) and "s3cret" not in str(fingerprint(r))
        (folder / "shard-000.tar").write_bytes(b"not a tar" * 200)
        with pytest.raises(TarShardError) as info:
            list(readers.tar_shards(base + "/shard-000.tar")())
        assert f"{server.url}/shard-000.tar is not a tar file" in str(info.value) and "s3cret" not in str(info.value)
