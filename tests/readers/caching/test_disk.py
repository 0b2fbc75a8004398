"""readers.caching.disk: the sqlite3 disk tier. What is put is read back exactly, by this process at once and by
others soon; damage is reported, never returned; the size limit holds; failures, forks and a SIGKILL leave a
working cache.

Other processes run jobs from cache_jobs.py; every wait is bounded.
"""
from __future__ import annotations

import multiprocessing
import os
import pickle
import re
import signal
import sqlite3
import threading
import warnings
import zlib

import numpy as np
import pytest

from readers.caching import disk
from readers.caching.database import database_bytes
from readers.caching.disk import DiskStore, evict, open_database, row_keys
from readers.storage import codec
from readers.storage.codec import encode
from tests.conftest import HANG, finishes, wait_until
from tests.helpers import cache_jobs as jobs
from tests.helpers.cache_jobs import ask, change, put_keys, read_back, stored
from tests.helpers.child_processes import exit_codes, started


@pytest.fixture
def stores(tmp_path):
    """Make DiskStores (in tmp_path unless told), all closed after the test."""
    made: list[DiskStore] = []

    def make(directory=tmp_path, **options) -> DiskStore:
        made.append(DiskStore(directory, **options))
        return made[-1]

    yield make
    for store in made:
        store.close()


# -- the database -----------------------------------------------------------------------------


def test_the_database_is_made_in_wal_mode_with_its_tables(tmp_path):
    folder = tmp_path / "made" / "here"
    open_database(folder).close()
    assert ask(folder, "PRAGMA journal_mode") == [("wal",)]  # kept in the file: every process is in WAL mode
    assert ask(folder, "PRAGMA user_version") == [(1,)]
    tables = {name for (name,) in ask(folder, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"spaces", "entries", "meta"} <= tables


WAY_OUT = r"(`python cli.py cache clear .*`|give another directory)"


def test_a_file_that_is_not_a_database_names_itself_and_the_way_out(tmp_path):
    path = tmp_path / jobs.FILE
    path.write_bytes(b"not a database at all " * 200)
    for attempt in (lambda: open_database(tmp_path), lambda: DiskStore(tmp_path).space("x", {})):
        with pytest.raises(ValueError, match=rf"^{re.escape(str(path))} .*{WAY_OUT}"):
            attempt()
    assert path.read_bytes() == b"not a database at all " * 200  # left alone


@pytest.mark.parametrize("create", [True, False])
def test_a_cache_of_another_schema_version_is_refused(tmp_path, create):
    open_database(tmp_path).close()
    change(tmp_path, "PRAGMA user_version = 7")
    with pytest.raises(ValueError, match=rf"^{re.escape(str(tmp_path / jobs.FILE))} .*7.*{WAY_OUT}"):
        open_database(tmp_path, create=create)
    assert ask(tmp_path, "PRAGMA user_version") == [(7,)]


@pytest.mark.parametrize("folder", ["empty", "missing"])
def test_opening_without_create_needs_a_cache_there(tmp_path, folder):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / folder))):
        open_database(tmp_path / folder, create=False)
    assert os.listdir(tmp_path) == ["empty"] and os.listdir(tmp_path / "empty") == []


# -- keys -------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint16, np.uint64])
def test_row_keys_of_sample_ids_are_the_same_from_arrays_and_lists(dtype):
    ids = np.array([0, 1, 5, 65535] + ([jobs.ID_MASK] if np.dtype(dtype).itemsize == 8 else []), dtype=dtype)
    ks, names = row_keys(3, ids)
    assert ks == [3 << 40 | int(i) for i in ids] and names == [None] * len(ids)
    assert all(type(k) is int for k in ks)
    assert row_keys(3, ids.tolist()) == (ks, names)
    assert row_keys(4, ids)[0] != ks and row_keys(3, ids[:0]) == ([], []) == row_keys(3, [])


def test_row_keys_of_numpy_integers_in_a_list_are_sample_ids():
    # IDs taken one by one from an array are numpy ints; they must land on the same rows as the array's
    assert row_keys(3, [np.int64(5), np.uint32(7)]) == row_keys(3, [5, 7]) == row_keys(3, np.array([5, 7]))


def test_row_keys_of_other_keys_are_negative_digests_that_keep_the_key():
    keys = ["cat.jpg", "", "ünï", "5", b"5", b"\x00\xff", -1, -(2 ** 70), 2 ** 40, 2 ** 100]
    ks, names = row_keys(2, keys)
    assert names == ["s:cat.jpg", "s:", "s:ünï", "s:5", "b:35", "b:00ff", "i:-1", f"i:{-(2 ** 70)}",
                     f"i:{2 ** 40}", f"i:{2 ** 100}"]
    assert all(-(2 ** 63) <= k < 0 for k in ks) and len(set(ks)) == len(ks)
    assert row_keys(2, keys) == (ks, names) and set(row_keys(9, keys)[0]).isdisjoint(ks)
    mixed = np.array([5, -1, 2 ** 40])  # one out of range: each key on its own
    assert row_keys(2, mixed) == row_keys(2, [5, -1, 2 ** 40]) and row_keys(2, mixed)[0][0] == 2 << 40 | 5


@pytest.mark.parametrize("key", [1.5, None, True, np.bool_(False), (1, 2), np.float32(1), [1], {"a": 1}])
def test_row_keys_refuse_other_key_types(key):
    with pytest.raises(TypeError, match="a cache key must be an int, str or bytes"):
        row_keys(1, [key])
    with pytest.raises(TypeError, match="got bool"):
        row_keys(1, np.array([True, False]))


# -- reading and writing ----------------------------------------------------------------------


def test_put_flush_then_a_fresh_store_reads_every_kind_of_key(stores, tmp_path):
    store = stores()
    ns = store.space(jobs.SPACE, jobs.ABOUT)
    put_keys(store, ns, range(100))
    odd = ["cat.jpg", b"\x00raw", -3, 2 ** 41]
    odd_ks, odd_names = put_keys(store, ns, odd, make=lambda key: {"key": key})
    store.flush()
    assert stored(tmp_path) == 104
    assert store.written_bytes == sum(len(encode(jobs.value(k))) for k in range(100)) + sum(
        len(encode({"key": key})) for key in odd)
    fresh = stores()
    read_back(fresh, ns, range(100))
    found, corrupt = fresh.get_many(odd_ks, odd_names)
    assert [found[k] for k in odd_ks] == [{"key": key} for key in odd] and corrupt == []
    jobs.assert_counters_true(tmp_path)


def test_reads_see_this_processs_writes_before_they_are_committed(stores, tmp_path):
    store = stores(interval=60)
    ns = store.space(jobs.SPACE, jobs.ABOUT)
    ks, names = put_keys(store, ns, range(10))
    read_back(store, ns, range(10))
    assert stored(tmp_path) == 0 and stores().get_many(ks, names) == ({}, [])
    store.flush()
    assert stored(tmp_path) == 10
    read_back(stores(), ns, range(10))


def test_entries_reach_other_connections_without_a_flush(stores, tmp_path):
    store = stores()  # commits every 0.5 s
    ns = store.space(jobs.SPACE, jobs.ABOUT)
    put_keys(store, ns, range(10))
    wait_until(lambda: stored(tmp_path) == 10, 5.0, lambda: f"10 entries committed, not {stored(tmp_path)}")
    read_back(stores(), ns, range(10))


def test_rewriting_keys_keeps_the_counters_true(stores, tmp_path):
    store = stores(interval=60)
    ns = store.space(jobs.SPACE, jobs.ABOUT)
    put_keys(store, ns, range(10), make=lambda k: np.zeros(100))
    store.flush()
    put_keys(store, ns, range(5))
    store.flush()
    assert jobs.assert_counters_true(tmp_path)[0] == 10
    read_back(stores(), ns, range(5))


def test_spaces_are_shared_by_name_and_keep_the_mean_cost(stores, tmp_path):
    a, b = stores(interval=60), stores()
    one, two = a.space("one", {"x": 1}), a.space("two", {})
    assert one != two and b.space("one", {"other": 2}) == one
    assert ask(tmp_path, "SELECT about FROM spaces WHERE ns = ?", one) == [('{"x": 1}',)]
    ks, names = row_keys(one, range(4))
    for k, cost in zip(ks, [0.1, 0.2, 0.3, 0.4]):
        a.put(k, one, None, k, cost=cost)
    a.flush()
    assert a.mean_cost(one) == pytest.approx(0.25) and b.mean_cost(one) == pytest.approx(0.25)
    assert b.mean_cost(two) == 0.0


def test_a_row_whose_stored_name_differs_is_a_miss(stores, tmp_path):
    store = stores()
    ns = store.space(jobs.SPACE, jobs.ABOUT)
    ks, names = put_keys(store, ns, ["cat", 3], make=lambda key: str(key))
    store.flush()
    change(tmp_path, "UPDATE entries SET name = 's:dog' WHERE k = ?", ks[0])  # as if "dog" had the same digest
    change(tmp_path, "UPDATE entries SET name = 'i:3' WHERE k = ?", ks[1])
    fresh = stores()
    assert fresh.get_many(ks, names) == ({}, [])
    assert fresh.get_many([ks[0]], ["s:dog"]) == ({ks[0]: "cat"}, [])


def test_a_damaged_blob_is_reported_corrupt_never_returned(stores, tmp_path):
    store = stores()
    ns = store.space(jobs.SPACE, jobs.ABOUT)
    ks, names = put_keys(store, ns, range(6))
    store.flush()
    for k, how in zip(ks, ["flip", "cut", "garbage", "magic", "longer"]):
        (blob,) = ask(tmp_path, "SELECT v FROM entries WHERE k = ?", k)[0]
        bad = {"flip": blob[:-1] + bytes([blob[-1] ^ 1]), "cut": blob[:-3], "garbage": b"garbage" * 9,
               "magic": b"X" + blob[1:], "longer": blob + b"\x00"}[how]
        crc = zlib.crc32(blob) if how == "flip" else zlib.crc32(bad)  # past the checksum too, but for "flip"
        change(tmp_path, "UPDATE entries SET v = ?, crc = ?, size = ? WHERE k = ?", bad, crc, len(bad), k)
    for reader in (store, stores()):
        found, corrupt = reader.get_many(ks, names)
        assert list(found) == [ks[5]] and sorted(corrupt) == sorted(ks[:5])
    jobs.assert_counters_true(tmp_path)


# -- the size limit ---------------------------------------------------------------------------


def used_bytes(directory) -> int:
    db = open_database(directory, create=False)
    try:
        return database_bytes(db)
    finally:
        db.close()


def test_over_the_limit_the_oldest_written_entries_go_first(stores, tmp_path):
    limit = 400_000  # the database's pages in use, about fifty entries of 8 KB
    store = stores(limit=limit, interval=60)
    ns = store.space(jobs.SPACE, jobs.ABOUT)
    for batch in range(25):  # about 5 times the limit, in 25 transactions
        put_keys(store, ns, range(batch * 10, batch * 10 + 10), make=lambda k: np.full(1000, k))
        store.flush()
        assert used_bytes(tmp_path) <= limit
        jobs.assert_counters_true(tmp_path)
    kept = sorted(k & jobs.ID_MASK for (k,) in ask(tmp_path, "SELECT k FROM entries"))
    gone = sorted(set(range(250)) - set(kept))
    assert gone and max(gone) // 10 <= min(kept) // 10 and set(range(240, 250)) <= set(kept)
    assert 25 <= len(kept) <= 50 and store.evictions == len(gone)
    assert ask(tmp_path, "SELECT value FROM meta WHERE key = 'disk_bytes'") == [(str(limit),)]
    found, corrupt = stores().get_many(*row_keys(ns, range(250)))
    assert sorted(k & jobs.ID_MASK for k in found) == kept and corrupt == []
    assert all(found[k].tolist() == [k & jobs.ID_MASK] * 1000 for k in found)
    ask(tmp_path, "PRAGMA wal_checkpoint(TRUNCATE)")
    assert os.path.getsize(tmp_path / "cache.sqlite3") <= 1.2 * limit  # the free pages went back to the disk


def test_evict_deletes_the_oldest_down_to_nine_tenths_of_the_limit(tmp_path):
    db = open_database(tmp_path)
    try:
        db.execute("INSERT INTO spaces (ns, name, about, created) VALUES (1, 'n', '{}', 0)")
        db.executemany("INSERT INTO entries (k, ns, v, crc, size, t) VALUES (?, 1, zeroblob(3000), 0, 3000, ?)",
                       [(k, 1000.0 - k) for k in range(300)])  # the highest k is the oldest
        full = database_bytes(db)
        assert evict(db, full) == 0
        gone = evict(db, full // 2)  # over several rounds of 256
        kept = [k for (k,) in db.execute("SELECT k FROM entries ORDER BY k")]
        assert kept == list(range(300 - gone)) and 0.4 * full <= database_bytes(db) <= 0.5 * full
        assert db.execute("SELECT entries, bytes FROM spaces").fetchall() == [(len(kept), 3000 * len(kept))]
    finally:
        db.close()


# -- failures, forks, pickles -----------------------------------------------------------------


def encoded_late(store: DiskStore, warned: list):
    """readers.caching.disk's encode, except that a {"late": True} entry's encoding (in put, after it saw no
    failure) has what is pending written (``flush``), and waits for that write to have failed."""
    def encode(value):
        if value == {"late": True}:
            store.flush()
            wait_until(lambda: warned and not store._writing, HANG, "the write in flight to fail")
        return codec.encode(value)
    return encode


def test_a_failed_write_warns_once_and_every_later_put_is_dropped(stores, tmp_path, monkeypatch):
    tried: list[int] = []

    def broken(self, batch, gen):
        tried.append(len(batch))
        raise OSError("disk full")

    monkeypatch.setattr(DiskStore, "_write", broken)
    # Regression (a flaky test): the interval was 0.01 s, and on a loaded machine the writer took the first
    # entries as one batch before the fourth was put ("could not write 2 entries"). Now nothing is written
    # before the late entry's encoding asks for it, so the batch is the four put before it.
    store = stores(interval=60)
    ns = store.space(jobs.SPACE, jobs.ABOUT)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        monkeypatch.setattr(disk, "encode", encoded_late(store, caught))
        ks, names = put_keys(store, ns, range(5), make=lambda k: jobs.value(k) if k < 4 else {"late": True})
        finishes(store.flush, "flush while the writes fail")
        assert store.failed == "OSError: disk full"
        later, later_names = put_keys(store, ns, range(5, 10))
        finishes(store.flush, "flush once the writes have failed")
        assert store.get_many(ks + later, names + later_names) == ({}, [])
    ours = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(ours) == 1 and tried == [4], f"writes of {tried} entries; warnings: {ours}"
    assert re.search(rf"{re.escape(str(tmp_path))} could not write 4 entries \(OSError: disk full\)", ours[0])
    monkeypatch.undo()
    assert stored(tmp_path) == 0


def test_a_full_disk_is_said_with_the_free_space_and_not_tried_again(stores, tmp_path, monkeypatch):
    # Regression (issue 27, 13): a blob write on a full disk was retried twice (3 s of sleeps) and its warning
    # gave sqlite's error (or "cannot rollback - no transaction is active") instead of saying the disk is full
    tried: list[int] = []

    def full(self, batch):
        tried.append(len(batch))
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(DiskStore, "_write_batch", full)
    store = stores(interval=60)
    ns = store.space(jobs.SPACE, jobs.ABOUT)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        put_keys(store, ns, range(3))
        finishes(store.flush, "flush while the disk is full")
    ours = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert tried == [3] and len(ours) == 1, (tried, ours)
    assert re.fullmatch(rf"the cache in {re.escape(str(tmp_path))} could not write 3 entries \(the disk is full: "
                        r"[\d,]+\.\d\d MiB free\); it writes no more in this process, .*", ours[0])


def test_close_commits_and_leaves_no_thread_behind(tmp_path):
    before = set(threading.enumerate())
    store = DiskStore(tmp_path, interval=60)
    ns = store.space(jobs.SPACE, jobs.ABOUT)
    put_keys(store, ns, range(3))
    store.close()
    assert stored(tmp_path) == 3
    store.close()  # twice is fine
    left = lambda: [t.name for t in threading.enumerate() if t not in before and t.is_alive()]  # noqa: E731
    wait_until(lambda: not left(), HANG, lambda: f"the store's threads to end; still running: {left()}")


def test_a_forked_child_writes_through_the_parents_store_and_the_parent_goes_on(no_leaks, stores, tmp_path):
    store = stores(interval=0.01)
    ns = store.space(jobs.SPACE, jobs.ABOUT)
    put_keys(store, ns, range(10))
    store.flush()
    read_back(store, ns, range(10))
    jobs.run_all([multiprocessing.get_context("fork").Process(target=jobs.use_inherited,
                                                         args=(store, ns, range(10), range(10, 20)))], HANG)
    put_keys(store, ns, range(20, 30))
    store.flush()
    read_back(store, ns, range(30))
    assert jobs.assert_counters_true(tmp_path)[0] == 30


def test_a_forked_child_reads_without_waiting_on_its_parents_locks(no_leaks, stores):
    store = stores(interval=60)
    ns = store.space(jobs.SPACE, jobs.ABOUT)
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:  # as the writer thread does while it takes a batch, or put() from another thread
        with store._cond:
            taken.set()
            release.wait(HANG)

    holder = threading.Thread(target=hold, name="test-holder")
    child = multiprocessing.get_context("fork").Process(target=jobs.read_once, args=(store, *row_keys(ns, [1])))
    holder.start()
    try:
        assert taken.wait(HANG)
        assert exit_codes([child], HANG) == [0], \
            "a forked child's get_many waited for a lock held by a thread that does not exist in it (None: it hung)"
    finally:
        release.set()
        holder.join(HANG)


def test_a_pickled_store_is_a_fresh_one_on_the_same_folder(stores, tmp_path):
    store = stores(limit=10 ** 6, interval=60)
    ns = store.space(jobs.SPACE, jobs.ABOUT)
    put_keys(store, ns, range(5))
    store.flush()
    put_keys(store, ns, range(5, 8))  # not committed: stays with the original
    copy = pickle.loads(pickle.dumps(store))
    try:
        assert copy is not store and (copy.directory, copy.limit, copy.interval) == (str(tmp_path), 10 ** 6, 60)
        assert copy.failed is None and copy.evictions == copy.written_bytes == 0
        found, _ = copy.get_many(*row_keys(ns, range(8)))
        assert sorted(k & jobs.ID_MASK for k in found) == list(range(5))
        read_back(copy, ns, range(5))
    finally:
        copy.close()


# -- other processes --------------------------------------------------------------------------


def test_two_processes_write_one_folder_at_once_and_read_each_other(no_leaks, stores, tmp_path):
    spawn = multiprocessing.get_context("spawn")
    gate = jobs.Gate(spawn, 2)
    jobs.run_all([spawn.Process(target=jobs.share, args=(str(tmp_path), mine, range(700), gate))
                  for mine in (range(0, 450), range(250, 700))], timeout=3 * jobs.WAIT, gate=gate)
    store = stores()
    read_back(store, store.space(jobs.SPACE, jobs.ABOUT), range(700))
    assert jobs.assert_counters_true(tmp_path)[0] == 700 and ask(tmp_path, "SELECT count(*) FROM spaces") == [(1,)]


def test_a_writer_killed_mid_write_leaves_only_whole_transactions(no_leaks, stores, tmp_path):
    directory, marker = tmp_path / "cache", tmp_path / "committed"
    writer = multiprocessing.get_context("spawn").Process(target=jobs.write_until_killed,
                                                          args=(str(directory), str(marker)))
    with started(writer):
        wait_until(lambda: marker.exists() or not writer.is_alive(), 2 * jobs.WAIT, "the writer's first commit")
        wait_until(lambda: stored(directory) >= 3000 or not writer.is_alive(), HANG, "3000 entries committed")
        assert writer.is_alive(), "the writer stopped before it was killed"
        os.kill(writer.pid, signal.SIGKILL)
        writer.join(HANG)
        assert writer.exitcode == -signal.SIGKILL
    count = jobs.assert_counters_true(directory)[0]
    ids = sorted(k & jobs.ID_MASK for (k,) in ask(directory, "SELECT k FROM entries"))
    assert ids == list(range(count))  # whole transactions, in order: a prefix of what was put
    assert ask(directory, "SELECT sum(computed) FROM spaces") == [(count,)]
    assert ask(directory, "PRAGMA integrity_check") == [("ok",)]
    store = stores(directory)
    ns = store.space(jobs.SPACE, jobs.ABOUT)
    read_back(store, ns, range(count))
    assert store.get_many(*row_keys(ns, range(count, count + 500))) == ({}, [])
