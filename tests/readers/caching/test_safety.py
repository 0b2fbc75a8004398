"""readers.cached guarding what it hands out and what it keeps: against mutation, changed callables, forked
workers that end, rows another process rewrote, a folder's bound, damaged files and bad folders."""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import sqlite3
import threading
import warnings

import numpy as np
import pytest

import readers
from readers.caching import database, disk
from readers.caching.database import (
    FILE,
    aside_files,
    damage_of,
    database_bytes,
    open_database,
    set_aside_cache,
)
from tests.conftest import HANG
from tests.helpers import cache_jobs
from tests.helpers.cache_jobs import change, overwrite_page


def source(n=20):
    return readers.from_arrays(np.arange(n * 4, dtype=np.float32).reshape(n, 4), np.arange(n))


def quiet_pass(r):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        return list(r())


@pytest.mark.parametrize("on_disk", [False, True])
def test_changing_a_dict_or_list_one_pass_got_changes_nothing_later(on_disk, tmp_path):
    r = readers.cached(source(), lambda e: {"x": e[0] * 2, "ids": [int(e[1])]},
                       directory=tmp_path if on_disk else None)
    first = list(r())
    first[3]["ids"].append(99)
    first[3]["x"] = None
    for _ in range(2):
        again = list(r())
        assert again[3]["ids"] == [3] and again[3]["x"].tolist() == [24.0, 26.0, 28.0, 30.0]
        assert not again[3]["x"].flags.writeable
    assert r.stats()["misses"] == 20


def test_the_arrays_func_returns_stay_as_writable_as_they_were():
    table = np.zeros(3)  # a function may hand back an array of its own
    r = readers.cached(source(), lambda e: (table, int(e[1])))
    got = list(r())
    assert table.flags.writeable and not got[0][0].flags.writeable
    table[0] = 1.0  # the user's array is still theirs


def test_a_small_view_of_a_big_array_is_kept_as_a_copy_within_the_budget():
    r = readers.cached(source(), lambda e: np.repeat(e[0], 10_000)[:4], memory_bytes=1 << 20)
    got = list(r())
    assert all(v.base is None or v.base.nbytes <= 2 * v.nbytes for v in got)
    assert r.stats()["memory_bytes"] <= 1 << 20 and r.stats()["memory_entries"] == 20


class Scale:
    def __init__(self, k):
        self.k = k

    def __call__(self, e):
        return e[0] * self.k


def test_a_callable_changed_between_readers_misses_instead_of_serving_its_old_results(tmp_path):
    scale = Scale(2)
    first = readers.cached(source(), scale, directory=tmp_path)
    list(first())
    first.close()
    scale.k = 10
    second = readers.cached(source(), scale, directory=tmp_path)
    got = list(second())
    assert second.stats()["misses"] == 20 and got[1].tolist() == [40.0, 50.0, 60.0, 70.0]


def test_cached_above_a_shuffle_is_keyed_by_the_data_not_by_the_seed(tmp_path):
    for seed in (1, 2, None):
        r = readers.cached(readers.shuffle(source(), seed=seed), lambda e: e[0] + 1, directory=tmp_path)
        list(r())
        r.close()
    with contextlib.closing(sqlite3.connect(tmp_path / "cache.sqlite3")) as db:
        assert db.execute("SELECT ns, entries FROM spaces").fetchall() == [(1, 20)]


def triple(e):
    return e[0] * 3


def _compute_and_end(directory):
    r = readers.cached(source(300), triple, directory=directory)
    for i in range(300):
        r[i]  # no pass ends here: the process ending must write what it computed


def test_a_forked_worker_that_ends_leaves_what_it_computed_on_disk(tmp_path, no_leaks):
    p = multiprocessing.get_context("fork").Process(target=_compute_and_end, args=(str(tmp_path),))
    p.start()
    p.join(3 * HANG)
    assert p.exitcode == 0
    r = readers.cached(source(300), triple, directory=tmp_path)
    list(r())
    assert (r.stats()["disk_hits"], r.stats()["misses"]) == (300, 0)


NOISE = {"now": 0.0}  # read by its global name: the function's digest does not see it change


def noisy(e):
    """A function that is not bit-exact (a GPU's, say): another run computes a slightly other value."""
    return e[0] + NOISE["now"]


def test_a_row_another_process_rewrote_with_other_bytes_is_read_not_called_damaged(tmp_path, monkeypatch):
    feature = noisy
    a = readers.cached(source(), feature, directory=tmp_path, memory_bytes=0)
    list(a())
    a.flush()
    b = readers.cached(source(), feature, directory=tmp_path, memory_bytes=0)
    list(b())  # b notes every row's checksum
    monkeypatch.setitem(NOISE, "now", 1e-3)
    with contextlib.closing(sqlite3.connect(tmp_path / "cache.sqlite3")) as db:
        db.execute("DELETE FROM entries")  # as if both computed in the race window, a's write landing last
        db.commit()
    c = readers.cached(source(), feature, directory=tmp_path, memory_bytes=0)  # knows nothing: computes again
    list(c())
    c.flush()
    got = quiet_pass(b)  # no "damaged" warning: the database's checksum is the one that counts
    assert b.stats()["corrupt"] == 0 and got[0][0] == pytest.approx(1e-3)


def test_a_folders_bound_holds_for_a_process_that_gives_none(tmp_path):
    bounded = readers.cached(source(200), lambda e: np.repeat(e[0], 500), directory=tmp_path, disk_bytes=200_000)
    list(bounded())
    bounded.close()
    free = readers.cached(source(200), lambda e: np.repeat(e[0], 501), directory=tmp_path)  # no disk_bytes
    list(free())
    free.close()
    assert not [f for f in os.listdir(tmp_path) if f.startswith("dense-")]  # a bounded folder keeps no dense files
    with contextlib.closing(open_database(tmp_path, create=False)) as db:
        assert database_bytes(db) <= 200_000


def test_a_damaged_dense_file_is_made_again_and_its_entries_computed_again(tmp_path):
    def f(e):
        return e[0] * 2, int(e[1])

    first = readers.cached(source(), f, directory=tmp_path)
    list(first())
    first.close()
    column = next(p for p in os.listdir(tmp_path) if p.endswith("-0.npy"))
    with open(tmp_path / column, "r+b") as file:
        file.seek(10)
        file.write(b"{'descr': '|O'")
    again = readers.cached(source(), f, directory=tmp_path)
    with pytest.warns(RuntimeWarning, match=f"{column} is damaged .* made again"):
        got = list(again())
    assert got[5][0].tolist() == [40.0, 42.0, 44.0, 46.0] and again.stats()["misses"] == 20
    last = readers.cached(source(), f, directory=tmp_path)
    quiet_pass(last)
    assert last.stats()["disk_hits"] == 20


def test_folders_that_cannot_hold_a_cache_are_refused_naming_them(tmp_path):
    (tmp_path / "file").write_text("x")
    for bad in (tmp_path / "file", ""):
        with pytest.raises(ValueError, match=r"directory=.* is not a folder: give the folder to keep the cache in"):
            readers.cached(source(), abs, directory=bad)
    with pytest.raises(readers.FileError, match=r"cannot make the cache folder .*file/sub \(Not a directory\)"):
        list(readers.cached(source(), abs, directory=tmp_path / "file" / "sub")())
    (tmp_path / "taken" / "cache.sqlite3").mkdir(parents=True)  # sqlite cannot open its database there
    with pytest.raises(OSError, match=r"cannot open the cache in .*taken/cache.sqlite3 .*must be writable"):
        list(readers.cached(source(), abs, directory=tmp_path / "taken")())


def test_a_buffer_func_reuses_is_copied_not_shared_by_every_entry(tmp_path):
    buffer = np.zeros(4, dtype=np.float32)

    def into_buffer(e):
        buffer[:] = e[0]
        return buffer

    r = readers.cached(source(), into_buffer, directory=tmp_path)
    want = [e[0].tolist() for e in source()()]
    assert [v.tolist() for v in r()] == want and [v.tolist() for v in r()] == want
    r.close()
    assert [v.tolist() for v in readers.cached(source(), into_buffer, directory=tmp_path)()] == want


def test_sets_and_dict_subclasses_are_handed_out_as_fresh_copies():
    import collections

    r = readers.cached(source(), lambda e: (collections.defaultdict(list, x=[int(e[1])]), {int(e[1])}, e[0]))
    first = list(r())
    first[2][0]["x"].append(7), first[2][0]["new"].append(1), first[2][1].add(99)
    again = list(r())
    assert again[2][0] == {"x": [2]} and type(again[2][0]) is collections.defaultdict and again[2][1] == {2}
    assert again[2][0].default_factory is list and not again[2][2].flags.writeable


def test_an_error_opening_a_dense_file_is_raised_not_taken_for_damage(tmp_path, monkeypatch):
    def f(e):
        return e[0] * 2

    first = readers.cached(source(), f, directory=tmp_path)
    list(first())
    first.close()

    def too_many(*args, **kwargs):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(np, "load", too_many)
    with pytest.raises(OSError, match="Too many open files"):
        list(readers.cached(source(), f, directory=tmp_path)())
    monkeypatch.undo()
    again = readers.cached(source(), f, directory=tmp_path)
    quiet_pass(again)
    assert again.stats()["disk_hits"] == 20  # nothing was deleted


def test_a_keyed_stream_gives_its_first_entry_at_once_and_every_entry_read_before_an_error():
    read = []

    def stream():
        for i in range(10):
            read.append(i)
            yield i
        raise RuntimeError("the source broke")

    it = iter(readers.cached(stream, lambda e: e * 2, key=lambda e: e)())
    assert next(it) == 0 and read == [0]
    got = []
    with pytest.raises(RuntimeError, match="the source broke"):
        for v in it:
            got.append(v)
    assert got == [2 * i for i in range(1, 10)]


def test_a_bound_too_small_to_keep_anything_is_refused_and_clear_lifts_a_folders_bound(tmp_path):
    from readers.caching.admin import clear_cache

    with pytest.raises(ValueError, match=r"disk_bytes=1,000 is less than the database's own pages take"):
        readers.cached(source(), abs, directory=tmp_path, disk_bytes=1000)
    bounded = readers.cached(source(), lambda e: e[0] + 1, directory=tmp_path, disk_bytes=1 << 20)
    list(bounded())
    bounded.close()
    clear_cache(tmp_path)
    free = readers.cached(source(), lambda e: e[0] + 1, directory=tmp_path)
    list(free())
    free.close()
    assert [f for f in os.listdir(tmp_path) if f.startswith("dense-")]  # unbounded again: dense files


# -- a damaged database (issue 27, item 14) ----------------------------------------------------------------------


def word(e):
    return f"word {int(e[0])}"  # a blob


def row(e):
    return np.full(4, e[0], np.float32)  # a row of a dense file


def _damaged_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning) and "damaged" in str(w.message)]


@pytest.mark.parametrize("func", [word, row], ids=["blobs", "dense"])
@pytest.mark.parametrize("damage", ["page", "table"])
def test_a_damaged_database_is_set_aside_and_every_value_computed_again(tmp_path, func, damage):
    # Regression (issue 27, 14): a page overwritten raised sqlite3.DatabaseError "database disk image is
    # malformed", and a dropped entries table sqlite3.OperationalError, from every read, for good
    data = readers.from_arrays(np.arange(3000))
    first = readers.cached(data, func, directory=tmp_path)
    want = [func((i,)) for i in range(3000)]
    list(first())
    first.close()
    if damage == "page":  # (a dense file's rows are looked up in their index, a blob in the table)
        overwrite_page(tmp_path, "entries" if func is word else "dense_rows")
    else:
        change(tmp_path, "DROP TABLE entries")
    assert damage_of(tmp_path) is not None
    again = readers.cached(data, func, directory=tmp_path, memory_bytes=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            got = list(again())
            assert all(np.array_equal(g, w) for g, w in zip(got, want)) and len(got) == 3000
        again.flush()
    said = _damaged_warnings(caught)
    assert len(said) == 1, said
    assert said[0].startswith(f"the cache in {tmp_path} was damaged (")
    assert f"it is set aside as {tmp_path}/{FILE}.damaged-" in said[0] and "and a new one started" in said[0]
    assert any(f.startswith(f"{tmp_path}/{FILE}.damaged-") for f in aside_files(tmp_path))
    assert damage_of(tmp_path) is None
    again.close()
    later = readers.cached(data, func, directory=tmp_path, memory_bytes=0)
    quiet_pass(later)  # the new database serves what the last pass wrote there
    assert later.stats()["disk_hits"] == 3000
    later.close()


def test_a_table_dropped_under_an_open_cache_is_met_at_its_first_error(tmp_path):
    data = readers.from_arrays(np.arange(200))
    r = readers.cached(data, word, directory=tmp_path, memory_bytes=0)
    list(r())
    r.flush()  # its connections stay open
    change(tmp_path, "DROP TABLE entries")
    said = f"the cache in {tmp_path} was damaged \\(its table entries is missing\\): it is set aside"
    with pytest.warns(RuntimeWarning, match=said):
        assert list(r()) == [word((i,)) for i in range(200)]
    r.flush()
    assert list(r()) == [word((i,)) for i in range(200)]
    assert r.stats()["disk_hits"] > 0  # written into the new database since
    r.close()


def test_two_stores_that_meet_one_damage_set_it_aside_once_and_share_the_new_database(tmp_path):
    # (two stores of one folder stand for two processes: each has its own connections)
    data = readers.from_arrays(np.arange(300))
    want = [word((i,)) for i in range(300)]
    first, second = (readers.cached(data, word, directory=tmp_path, memory_bytes=0) for _ in range(2))
    for r in (first, second):
        list(r())
        r.flush()
    change(tmp_path, "DROP TABLE entries")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert list(first()) == want
        first.flush()
        assert list(second()) == want  # its connections still see the damaged file, set aside by the first
        second.flush()
    said = _damaged_warnings(caught)
    assert len(said) == 2 and "it is set aside as" in said[0], said
    assert "another process has set it aside; this one goes on with the new one" in said[1]
    assert len([f for f in aside_files(tmp_path) if f.endswith(tuple("0123456789"))]) == 1  # one database, once
    for r in (first, second):
        assert list(r()) == want
    assert damage_of(tmp_path) is None and second.stats()["disk_hits"] >= 300
    first.close()
    second.close()


def test_a_process_opening_the_folder_while_another_sets_its_database_aside_leaves_no_log_under_the_live_name(
        tmp_path, no_leaks):
    # Regression (issue 27's review, finding 6): set_aside renames the -wal, the -shm, then the database, and
    # only other set-asides waited for it; a process opening the folder between those renames made a new
    # cache.sqlite3-wal for the damaged file, left under the live name, whose frames the next new database
    # replayed (damaged again, set aside again). Two real processes: two stores of one process share sqlite's
    # state of a file and do not show it.
    data = readers.from_arrays(np.arange(300))
    want = [word((i,)) for i in range(300)]
    first = readers.cached(data, word, directory=tmp_path, memory_bytes=0)
    list(first())
    first.close()
    overwrite_page(tmp_path)
    spawn = multiprocessing.get_context("spawn")
    window, opened = spawn.Event(), spawn.Event()
    cache_jobs.run_all([spawn.Process(target=cache_jobs.set_aside_slowly,
                                      args=(str(tmp_path), os.stat(tmp_path / FILE).st_ino, window, opened)),
                        spawn.Process(target=cache_jobs.open_in_the_window, args=(str(tmp_path), window, opened))],
                       timeout=cache_jobs.WAIT + cache_jobs.PAUSE)
    left = sorted(f for f in os.listdir(tmp_path) if f.startswith(FILE) and ".damaged-" not in f)
    assert left == [FILE], f"files under the live name: {left}; no -wal or -shm may outlive its connections"
    assert len([f for f in aside_files(tmp_path) if f.endswith(tuple("0123456789"))]) == 1
    assert damage_of(tmp_path) is None
    later = readers.cached(data, word, directory=tmp_path, memory_bytes=0)
    assert quiet_pass(later) == want  # no damage met again, nothing set aside again
    later.close()
    assert len([f for f in aside_files(tmp_path) if f.endswith(tuple("0123456789"))]) == 1


def test_a_store_keeps_the_inode_of_the_file_it_opened_when_a_set_aside_follows_at_once(tmp_path, monkeypatch):
    # Regression (review of issue 27, finding 6): a store looked its database's inode up after the opening; a
    # set-aside landing in between gave it the new file's (or none), so damage it met later in the file it had
    # open was taken for none ("whole after all"), or the new, whole database was set aside in its place
    r = readers.cached(readers.from_arrays(np.arange(10)), word, directory=tmp_path)
    list(r())
    r.close()
    found = {}
    other = threading.Thread(target=lambda: found.update(aside=set_aside_cache(str(tmp_path), None)), daemon=True)
    real_connect, real_inode = database.connect, disk._inode

    def connect(*args, **options):
        db = real_connect(*args, **options)
        other.start()  # a set-aside at once: it waits for the folder's lock, held while the file is opened
        return db

    monkeypatch.setattr(database, "connect", connect)
    monkeypatch.setattr(disk, "_inode", lambda d: (other.join(HANG), real_inode(d))[1])  # (it lands first)
    store = disk.DiskStore(str(tmp_path))
    try:
        store.connection()
        other.join(HANG)
        assert found["aside"] is not None and store._ino == os.stat(found["aside"]).st_ino
    finally:
        store.close()
