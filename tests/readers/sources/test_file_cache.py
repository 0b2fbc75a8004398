"""readers.sources.file_cache: whole remote files kept on local disk by URL (issue 29), with local files only.

A "fetch" here writes bytes it was given into the path the cache hands it,
as the fsspec download will; other processes are forked, and every wait on
them is bounded by ``WAIT``.
"""
import fcntl
import multiprocessing
import os
import pickle
import sqlite3
import threading
import time

import pytest

from readers.errors import BadType, BadValue, TimedOut
from readers.sources.file_cache import INDEX, FileCache, FileCacheStats

WAIT = 30.0  # seconds: a bound for another process or thread to finish, never a measure of speed
SECRETS = (b"s3cret", b"topsecret")
FORK = multiprocessing.get_context("fork")


def url(i: int) -> str:
    return f"https://ann:s3cret@example.com/data/shard-{i}.tar?X-Amz-Signature=topsecret"


def shown(i: int) -> str:
    return f"https://example.com/data/shard-{i}.tar"


def data(i: int, size: int = 10) -> bytes:
    return bytes((i + k) % 256 for k in range(size))


class Store:
    """A fake remote store: ``fetch(i)`` writes object i's bytes, and ``calls`` counts the fetches of each object."""

    def __init__(self, size: int = 10):
        self.size, self.calls = size, {}

    def fetch(self, i: int):
        def write(dest: str) -> None:
            self.calls[i] = self.calls.get(i, 0) + 1
            with open(dest, "wb") as f:
                f.write(data(i, self.size))
        return write

    def get(self, cache: FileCache, i: int, version: str = "v1") -> str:
        return cache.get(url(i), version, self.size, self.fetch(i))


def entries(folder) -> list[str]:
    """The folder's files other than the index's (temporaries and locks included)."""
    return sorted(n for n in os.listdir(folder) if not n.startswith(INDEX))


def index_rows(folder) -> list[tuple]:
    """(redacted url, version, size) of the index's rows, least recently used first."""
    with sqlite3.connect(os.path.join(folder, INDEX)) as db:
        return db.execute("SELECT url, version, size FROM files ORDER BY used").fetchall()


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


@pytest.fixture
def folder(tmp_path):
    return str(tmp_path / "cache")


def test_file_cache_fetches_once_then_hits(folder):
    store = Store()
    with FileCache(folder, 100) as cache:
        first = store.get(cache, 0)
        assert store.get(cache, 0) == first
        assert read(first) == data(0)
        assert store.calls == {0: 1}
        assert cache.stats() == FileCacheStats(hits=1, misses=1, bytes=10)
        assert entries(folder) == [os.path.basename(first)] and first.endswith(".tar")
        assert index_rows(folder) == [(shown(0), "v1", 10)]


@pytest.mark.parametrize("failure", [ConnectionResetError("connection reset by peer"), KeyboardInterrupt()],
                         ids=["error", "interrupt"])
def test_file_cache_fetch_failing_half_way_leaves_nothing(folder, failure):
    def half_then_fail(dest):
        with open(dest, "wb") as f:
            f.write(data(0)[:5])
        raise failure

    store = Store()
    with FileCache(folder, 100) as cache:
        with pytest.raises(type(failure)):
            cache.get(url(0), "v1", 10, half_then_fail)
        assert entries(folder) == [] and index_rows(folder) == []
        assert cache.stats() == FileCacheStats(hits=0, misses=0, bytes=0)
        assert read(store.get(cache, 0)) == data(0)  # fetched again, whole
        assert store.calls == {0: 1}


@pytest.mark.parametrize("written, said", [(b"0123", "4 bytes"), (None, "no file"), (b"0" * 11, "11 bytes")])
def test_file_cache_refuses_a_fetch_of_the_wrong_size(folder, written, said):
    def fetch(dest):
        if written is None:
            os.unlink(dest)
        else:
            with open(dest, "wb") as f:
                f.write(written)

    with FileCache(folder, 100) as cache:
        with pytest.raises(BadValue) as caught:
            cache.get(url(0), "v1", 10, fetch)
        assert str(caught.value) == (f"{shown(0)}: the fetch wrote {said}, not the 10 bytes of version 'v1': the "
                                     "object may have changed while it was fetched; read it again")
        assert entries(folder) == [] and index_rows(folder) == []


def test_file_cache_evicts_the_least_recently_used_first(folder):
    store = Store()
    with FileCache(folder, 30) as cache:
        for i in (0, 1, 2):
            store.get(cache, i)
        store.get(cache, 0)  # a hit: 1 is now the least recently used
        store.get(cache, 3)
        assert [row[0] for row in index_rows(folder)] == [shown(2), shown(0), shown(3)]
        assert len(entries(folder)) == 3 and cache.stats().bytes == 30
        store.get(cache, 1)  # fetched again; 2 goes
        assert [row[0] for row in index_rows(folder)] == [shown(0), shown(3), shown(1)]
        assert store.calls == {0: 1, 1: 2, 2: 1, 3: 1}


def test_file_cache_never_evicts_the_entry_it_returns(folder):
    store = Store()
    with FileCache(folder, 10) as cache:
        first = store.get(cache, 0)
        second = store.get(cache, 1)  # as big as the bound: everything else goes
        assert not os.path.exists(first) and read(second) == data(1)
        assert index_rows(folder) == [(shown(1), "v1", 10)]


def test_file_cache_fetches_a_new_version_and_drops_the_old(folder):
    store = Store()
    with FileCache(folder, 100) as cache:
        old = store.get(cache, 0, "etag-1")
        new = store.get(cache, 0, "etag-2")
        assert new != old and not os.path.exists(old) and entries(folder) == [os.path.basename(new)]
        assert index_rows(folder) == [(shown(0), "etag-2", 10)]
        store.get(cache, 0, "etag-1")  # the old version is gone: fetched again
        assert store.calls == {0: 3}


def test_file_cache_too_large_object_names_url_and_sizes(folder):
    with FileCache(folder, 1000) as cache, pytest.raises(BadValue) as caught:
        cache.get(url(0), "v1", 1001, Store().fetch(0))
    assert str(caught.value) == (f"{shown(0)} is 1,001 bytes, more than the file cache's bound of 1,000 bytes "
                                 f"({folder}): raise the bound (cache_dir_bytes=) or drop cache_dir= to read it uncached")
    assert entries(folder) == []


@pytest.mark.parametrize("damage", ["deleted", "truncated", "grown"])
def test_file_cache_fetches_again_a_file_changed_behind_its_back(folder, damage):
    store = Store()
    with FileCache(folder, 100) as cache:
        path = store.get(cache, 0)
        if damage == "deleted":
            os.unlink(path)
        else:
            with open(path, "r+b") as f:
                f.truncate(4) if damage == "truncated" else f.write(data(0) + b"more")
        again = store.get(cache, 0)
        assert read(again) == data(0) and store.calls == {0: 2}
        assert entries(folder) == [os.path.basename(again)] and index_rows(folder) == [(shown(0), "v1", 10)]


def test_file_cache_keeps_no_credentials_in_names_or_files(folder):
    store = Store()
    with FileCache(folder, 100) as cache:
        store.get(cache, 0)
        store.get(cache, 1, "v2")
        for name in os.listdir(folder):
            assert not any(secret.decode() in name for secret in SECRETS)
            assert not any(secret in read(os.path.join(folder, name)) for secret in SECRETS)


def test_file_cache_tells_urls_apart_by_their_credentials_and_query(folder):
    store = Store()
    with FileCache(folder, 100) as cache:
        a = cache.get("https://example.com/x.tar?part=1", "v1", 10, store.fetch(0))
        b = cache.get("https://example.com/x.tar?part=2", "v1", 10, store.fetch(1))
        assert read(a) == data(0) and read(b) == data(1)


def test_file_cache_repr_shows_folder_and_bound_and_pickles(folder):
    store = Store()
    cache = FileCache(folder, 1 << 20, wait_s=5)
    path = store.get(cache, 0)
    assert repr(cache) == f"FileCache({folder!r}, max_bytes=1048576)"
    copy = pickle.loads(pickle.dumps(cache))
    assert (copy.folder, copy.max_bytes, copy.wait_s) == (folder, 1 << 20, 5.0)
    assert store.get(copy, 0) == path and store.calls == {0: 1}
    cache.close(), copy.close(), cache.close()
    with pytest.raises(BadValue, match="is closed: make a new FileCache"):
        store.get(cache, 0)


@pytest.mark.parametrize("options, error, message", [
    ({"max_bytes": 0}, BadValue, "max_bytes=0: give the cache's bound in bytes, an int > 0"),
    ({"max_bytes": 1.5}, BadValue, "max_bytes=1.5: give the cache's bound in bytes, an int > 0"),
    ({"max_bytes": 10, "wait_s": 0}, BadValue, "wait_s=0: give the seconds to wait for another process's fetch, > 0"),
])
def test_file_cache_refuses_bad_options(folder, options, error, message):
    with pytest.raises(error) as caught:
        FileCache(folder, **options)
    assert str(caught.value) == message


def test_file_cache_refuses_bad_arguments_to_get(folder):
    with FileCache(folder, 100) as cache:
        with pytest.raises(BadValue, match=r"^https://example.com/data/shard-0.tar: size=-1: give the object's size"):
            cache.get(url(0), "v1", -1, Store().fetch(0))
        with pytest.raises(BadType, match="url and version must be str, got str and int"):
            cache.get(url(0), 7, 10, Store().fetch(0))


def test_file_cache_refuses_a_folder_holding_another_database(folder):
    os.makedirs(folder)
    with sqlite3.connect(os.path.join(folder, INDEX)) as db:
        db.execute("CREATE TABLE notes (text TEXT)")
    with pytest.raises(BadValue) as caught:
        FileCache(folder, 100)
    assert str(caught.value) == f"{os.path.join(folder, INDEX)} is not a readerkit file cache: give another cache_dir"


def test_file_cache_threads_fetching_one_url_fetch_it_once(folder):
    store, started = Store(), threading.Barrier(3, timeout=WAIT)

    def slow(dest):
        time.sleep(0.2)  # (so that the others ask meanwhile; no figure is asserted)
        store.fetch(0)(dest)

    paths = []
    with FileCache(folder, 100) as cache:
        def one():
            started.wait()
            paths.append(cache.get(url(0), "v1", 10, slow))
        threads = [threading.Thread(target=one) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT)
        assert len(set(paths)) == 1 and len(paths) == 3 and store.calls == {0: 1}
        assert cache.stats() == FileCacheStats(hits=2, misses=1, bytes=10)


def test_file_cache_gives_up_waiting_for_another_fetch_after_wait_s(folder):
    release, fetching = threading.Event(), threading.Event()

    def stuck(dest):
        fetching.set()
        release.wait(WAIT)
        Store().fetch(0)(dest)

    with FileCache(folder, 100) as cache, FileCache(folder, 100, wait_s=0.1) as impatient:
        thread = threading.Thread(target=cache.get, args=(url(0), "v1", 10, stuck))
        thread.start()
        try:
            assert fetching.wait(WAIT)
            with pytest.raises(TimedOut) as caught:
                impatient.get(url(0), "v1", 10, Store().fetch(0))
        finally:
            release.set()
            thread.join(WAIT)
        assert str(caught.value) == (f"{shown(0)}: another process has been fetching it into {folder} for over 0.1 s: "
                                     "raise wait_s=, or look for a process stuck in its fetch")
        assert read(impatient.get(url(0), "v1", 10, Store().fetch(0))) == data(0)  # the first fetch's file


def _fetch_in_child(cache: FileCache | None, folder: str, calls: str, start, results) -> None:
    """One process of the concurrent test: wait for the start, get object 0 (slowly), report path and bytes."""
    cache = cache or FileCache(folder, 1 << 20)

    def slow(dest):
        with open(calls, "a") as log:
            log.write(f"{os.getpid()}\n")
        with open(dest, "wb") as f:
            for k in range(4):  # (slow, so that the others ask meanwhile; no figure is asserted)
                f.write(data(0, 4000)[k * 1000:(k + 1) * 1000])
                f.flush()
                time.sleep(0.05)

    start.wait(WAIT)
    path = cache.get(url(0), "v1", 4000, slow)
    results.put((path, read(path)))


@pytest.mark.parametrize("inherited", [True, False], ids=["forked-cache", "own-cache"])
def test_file_cache_processes_fetching_one_url_get_one_whole_file(folder, tmp_path, inherited):
    calls = str(tmp_path / "calls")
    cache = FileCache(folder, 1 << 20) if inherited else None  # a forked child opens its own connection
    # an Event, not a Barrier: a Barrier's counters live in multiprocessing's heap, a /dev/shm mapping kept for
    # the life of this process, which later tests that check no shared memory is left would find
    start, results = FORK.Event(), FORK.Queue()
    children = [FORK.Process(target=_fetch_in_child, args=(cache, folder, calls, start, results)) for _ in range(3)]
    for child in children:
        child.start()
    start.set()  # the three ask at once
    try:
        got = [results.get(timeout=WAIT) for _ in children]
    finally:
        for child in children:
            child.join(WAIT)
            if child.is_alive():
                child.kill()
                child.join(WAIT)
    assert [child.exitcode for child in children] == [0, 0, 0]
    assert len({path for path, _ in got}) == 1 and all(content == data(0, 4000) for _, content in got)
    assert len(read(calls).splitlines()) == 1
    assert index_rows(folder) == [(shown(0), "v1", 4000)] and entries(folder) == [os.path.basename(got[0][0])]
    if cache is not None:
        cache.close()


def _crash_while_fetching(folder: str) -> None:
    def half_then_die(dest):
        with open(dest, "wb") as f:
            f.write(data(0)[:5])
        os._exit(3)

    FileCache(folder, 100).get(url(0), "v1", 10, half_then_die)


def test_file_cache_cleans_up_what_a_crash_left(folder):
    os.makedirs(folder)
    child = FORK.Process(target=_crash_while_fetching, args=(folder,))
    child.start()
    child.join(WAIT)
    assert child.exitcode == 3
    left = entries(folder)
    assert [name.split("-")[0] for name in left] == [".lock", ".partial"]
    orphan = os.path.join(folder, "0" * 32 + "-deadbeef.tar")  # renamed into place, then a crash before the commit
    with open(orphan, "wb") as f:
        f.write(b"x")
    with open(os.path.join(folder, "notes.txt"), "w") as f:
        f.write("not the cache's")
    store = Store()
    with FileCache(folder, 100) as cache:
        assert entries(folder) == ["notes.txt"]
        assert read(store.get(cache, 0)) == data(0) and store.calls == {0: 1}
        os.unlink(store.get(cache, 0))
        assert cache.clean_up() == 0 and index_rows(folder) == []  # the row of a file gone is dropped


def test_file_cache_clean_up_leaves_a_live_fetch_alone(folder):
    with FileCache(folder, 100) as cache:
        key = "ab" * 16
        lock, partial = os.path.join(folder, ".lock-" + key), os.path.join(folder, f".partial-{key}-1-00000000")
        open(partial, "wb").close()
        fd = os.open(lock, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # as a fetching process holds it
            assert cache.clean_up() == 0 and os.path.exists(partial)
        finally:
            os.close(fd)
        assert cache.clean_up() == 1 and entries(folder) == []


def _read_while_evicted(path: str, conn) -> None:
    with open(path, "rb") as f:
        head = f.read(3)
        conn.send("opened")
        if conn.poll(WAIT):
            conn.recv()
            conn.send(head + f.read())


def test_file_cache_file_evicted_while_another_process_reads_it_stays_readable(folder):
    store = Store(size=1000)
    with FileCache(folder, 1000) as cache:
        path = store.get(cache, 0)
        ours, theirs = FORK.Pipe()
        child = FORK.Process(target=_read_while_evicted, args=(path, theirs))
        child.start()
        try:
            assert ours.poll(WAIT) and ours.recv() == "opened"
            store.get(cache, 1)  # evicts object 0 and unlinks its file
            assert not os.path.exists(path)
            ours.send("go")
            assert ours.poll(WAIT) and ours.recv() == data(0, 1000)
        finally:
            child.join(WAIT)
            if child.is_alive():
                child.kill()
                child.join(WAIT)
        assert child.exitcode == 0
