import errno
import multiprocessing
import os
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import warnings

import numpy as np
import pytest

import readers
from readers.caching import dense
from readers.caching.dense import DenseFile, dense_files, layout_of
from readers.caching.disk import DiskStore, row_keys
from tests.conftest import HANG, wait_until
from tests.helpers.child_processes import started
from tests.helpers.paths import ROOT


def entry(i):
    return (np.full(784, i, dtype=np.float32), i % 10)


def dense_store(d, n=100, limit=None):
    store = DiskStore(d, limit)
    ns = store.space("demo", {"func": "f"}, ids=(0, n))
    return store, ns


def put_all(store, ns, ids, make=entry):
    ks, names = row_keys(ns, np.asarray(ids))
    for k, name, i in zip(ks, names, ids):
        store.put(k, ns, name, make(i), cost=0.0)
    return ks, names


def test_layouts():
    assert layout_of(np.zeros((2, 3), np.uint8)) == [["array", "|u1", [2, 3]]]
    assert layout_of((np.zeros(2), np.float32(1.0), 3, 2.5, True)) == [
        ["tuple"], ["array", "<f8", [2]], ["scalar", "<f4", []], ["int", "<i8", []], ["float", "<f8", []],
        ["bool", "|b1", []]]
    for none in ("x", [np.zeros(2)], (), (np.zeros(2), "label"), np.array([object()]), (1 << 70,), {"a": 1}):
        assert layout_of(none) is None


def test_fixed_shape_entries_go_to_a_dense_file_and_read_back_exactly(tmp_path):
    store, ns = dense_store(tmp_path)
    ks, names = put_all(store, ns, range(0, 100, 3))
    store.flush()
    assert sorted(p for p in os.listdir(tmp_path) if p.startswith("dense-")) == [
        f"dense-demo-{c}.npy" for c in (0, 1)]
    with sqlite3.connect(tmp_path / "cache.sqlite3") as db:
        assert db.execute("SELECT count(*), count(v) FROM entries").fetchone() == (len(ks), 0)  # no blobs
    reader, _ = dense_store(tmp_path)
    found, corrupt = reader.get_many(*row_keys(ns, np.arange(100)))
    assert corrupt == [] and len(found) == len(ks)
    for k, i in zip(ks, range(0, 100, 3)):
        x, label = found[k]
        assert x.dtype == np.float32 and x.shape == (784,) and (x == i).all() and label == i % 10
        assert type(label) is int and not x.flags.writeable
    store.close(), reader.close()


def test_entries_that_do_not_fit_the_layout_are_blobs(tmp_path):
    store, ns = dense_store(tmp_path, n=10)
    put_all(store, ns, [0])  # decides the layout
    odd = {1: (np.zeros(5, np.float32), 1), 2: (np.zeros(784, np.float64), 2), 3: "text", 4: entry(4) + (0,)}
    for i, value in odd.items():
        ks, names = row_keys(ns, [i])
        store.put(ks[0], ns, names[0], value, cost=0.0)
    ks, names = row_keys(ns, [12])  # outside the range the file was made for
    store.put(ks[0], ns, names[0], entry(12), cost=0.0)
    store.flush()
    with sqlite3.connect(tmp_path / "cache.sqlite3") as db:
        assert db.execute("SELECT count(*) FROM entries WHERE v IS NOT NULL").fetchone() == (5,)
    found, _ = dense_store(tmp_path, n=10)[0].get_many(*row_keys(ns, [1, 2, 3, 4, 12]))
    got = [found[k] for k in row_keys(ns, [1, 2, 3, 4, 12])[0]]
    assert got[0][0].shape == (5,) and got[1][0].dtype == np.float64 and got[2] == "text" and len(got[3]) == 3
    assert (got[4][0] == 12).all()
    store.close()


def test_a_size_limit_keeps_entries_out_of_dense_files(tmp_path):
    store, ns = dense_store(tmp_path, limit=1 << 30)
    put_all(store, ns, range(5))
    store.flush()
    assert not [p for p in os.listdir(tmp_path) if p.startswith("dense-")]
    store.close()


def test_a_damaged_row_fails_its_checksum_and_is_not_served(tmp_path):
    store, ns = dense_store(tmp_path)
    ks, names = put_all(store, ns, range(4))
    store.flush()
    column = np.load(tmp_path / "dense-demo-0.npy", mmap_mode="r+")
    column[2, 100] = -1.0  # damage on disk, after the write
    column.flush()
    reader, _ = dense_store(tmp_path)
    found, corrupt = reader.get_many(ks, names)
    assert corrupt == [ks[2]] and sorted(found) == sorted(ks[:2] + ks[3:])
    found, corrupt = reader.get_many(ks[2:3], names[2:3])  # forgotten, asked of the database again: still bad
    assert corrupt == [ks[2]] and not found
    store.close(), reader.close()


def test_rows_another_store_wrote_later_are_found(tmp_path):
    a, ns = dense_store(tmp_path)
    put_all(a, ns, [0])
    a.flush()
    b, _ = dense_store(tmp_path)
    assert len(b.get_many(*row_keys(ns, [0, 1]))[0]) == 1  # b now knows the file, and row 1 is missing
    put_all(a, ns, [1])
    a.flush()
    found, corrupt = b.get_many(*row_keys(ns, [1]))
    assert corrupt == [] and (found[row_keys(ns, [1])[0][0]][0] == 1).all()
    a.close(), b.close()


def test_two_stores_making_one_file_at_once_share_it(tmp_path):
    layout = layout_of(entry(0))
    files = [DenseFile(str(tmp_path), "same", 0, 10, layout) for _ in range(2)]
    files[0].write(3, entry(3))
    assert (files[1].maps[0][3] == 3).all()  # one file under one name, seen through both maps
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_a_file_of_another_shape_is_refused_with_the_way_out(tmp_path):
    DenseFile(str(tmp_path), "x", 0, 10, layout_of(np.zeros(3)))
    with pytest.raises(ValueError, match=r"dense-x-0.npy holds float64 rows of shape \(3,\).*cache clear"):
        DenseFile(str(tmp_path), "x", 0, 10, layout_of(np.zeros(4)))


def committed(directory):
    with sqlite3.connect(directory / "cache.sqlite3") as db:
        return db.execute("SELECT count(*) FROM entries").fetchone()[0]


def _write_forever(directory, ready):
    store, ns = dense_store(directory, n=100_000)
    store.interval = 0.01
    for i in range(100_000):
        ks, names = row_keys(ns, [i])
        store.put(ks[0], ns, names[0], entry(i), cost=0.0)
        if i == 2000:
            ready.set()


def test_a_writer_killed_mid_write_leaves_only_whole_rows_marked(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    p = ctx.Process(target=_write_forever, args=(str(tmp_path), ready))
    with started(p):
        assert ready.wait(HANG * 3)
        wait_until(lambda: committed(tmp_path) >= 1000, HANG, "a thousand rows committed")
        os.kill(p.pid, signal.SIGKILL)  # while it goes on writing rows and committing them
    store, ns = dense_store(tmp_path, n=100_000)
    ids = np.arange(100_000)
    found, corrupt = store.get_many(*row_keys(ns, ids))
    assert corrupt == [] and 1000 <= len(found) < 100_000
    for k, value in found.items():
        i = k & ((1 << 40) - 1)
        assert (value[0] == i).all() and value[1] == i % 10
    with sqlite3.connect(tmp_path / "cache.sqlite3") as db:
        assert db.execute("SELECT entries FROM spaces WHERE ns = ?", (ns,)).fetchone() == (len(found),)
    store.close()


# -- a full disk (issue 27, item 13) -----------------------------------------------------------------------------


def no_room(fd, offset, length):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_at_the_reservation_stops_the_writes_with_one_warning_and_the_pass_goes_on(tmp_path,
                                                                                                monkeypatch):
    # Regression (issue 27, 13): a dense file was mapped without its room reserved, so on a full disk the writer
    # died of SIGBUS writing a row; now its room is reserved first and a full disk is an OSError there
    monkeypatch.setattr(os, "posix_fallocate", no_room)  # the one place the cache reserves space
    r = readers.cached(readers.from_arrays(np.arange(50)), lambda e: np.full(8, e[0], np.float32), directory=tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            assert [v[0] for v in r()] == list(range(50))
        r.flush()
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(said) == 1, said
    assert re.fullmatch(rf"the cache in {re.escape(str(tmp_path))} could not make room for its dense file "
                        r"dense-\w+-\*\.npy \(the disk is full: [\d,.]+ MiB free\); it writes no more in this "
                        r"process, .*", said[0])
    assert r.stats()["disk_hits"] == 0 and r.stats()["memory_hits"] == 50
    assert not dense_files(str(tmp_path)) and not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]
    r.close()


def _punch_the_tail(path, keep):
    """Cut the file at ``path`` back to ``keep`` bytes and out to its size again: a hole at its end, as an older
    readerkit left a dense file (rows not yet written), or skip where this file system keeps no holes."""
    size = os.path.getsize(path)
    os.truncate(path, keep)
    os.truncate(path, size)
    if os.stat(path).st_blocks * 512 >= size:
        pytest.skip("this file system keeps no holes in files")


def test_a_dense_file_made_without_its_room_is_reserved_when_opened(tmp_path, monkeypatch):
    # Regression (issue 27, 13: "and again on the next read"): a file an older readerkit left with holes was
    # mapped as it was, and its first row written on a full disk killed the process again
    func = lambda e: np.full(1024, e[0], np.float32)  # noqa: E731
    first = readers.cached(readers.from_arrays(np.arange(50)), func, directory=tmp_path)
    assert [v[0] for _, v in zip(range(10), first())] == list(range(10))  # rows 10 to 49 stay zeros
    first.close()
    made = dense_files(str(tmp_path))
    assert len(made) == 1
    _punch_the_tail(made[0], 128 + 10 * 4096)  # (128: the .npy header)
    monkeypatch.setattr(os, "posix_fallocate", no_room)
    again = readers.cached(readers.from_arrays(np.arange(50)), func, directory=tmp_path)
    with pytest.warns(RuntimeWarning, match="could not make room for its dense file .*the disk is full"):
        assert [v[0] for v in again()] == list(range(50))
    again.close()


def test_a_dense_file_is_reserved_again_only_while_it_has_holes(tmp_path, monkeypatch):
    # Regression (review of issue 27, finding 12): every opening of an existing dense file reserved its room
    # again, where glibc, on a file system with no fallocate, writes a byte in every block: minutes for 64 GiB,
    # racing other processes' rows written through their maps
    calls = []
    real = dense.reserve
    monkeypatch.setattr(dense, "reserve", lambda path, zeros=0: (calls.append(os.path.basename(path)),
                                                                   real(path, zeros))[1])
    layout = layout_of(np.zeros(1024, np.float32))
    made = DenseFile(str(tmp_path), "demo", 0, 50, layout)
    made.write(3, np.full(1024, 3, np.float32))
    del made
    assert len(calls) == 1 and calls[0].endswith(".tmp")  # made: its room reserved before it is in place
    calls.clear()
    DenseFile(str(tmp_path), "demo", 0, 50, layout)
    assert calls == []  # it has all its room
    _punch_the_tail(str(tmp_path / "dense-demo-0.npy"), 128 + 10 * 4096)
    again = DenseFile(str(tmp_path), "demo", 0, 50, layout)
    assert calls == ["dense-demo-0.npy"]
    stat = os.stat(tmp_path / "dense-demo-0.npy")
    assert stat.st_blocks * 512 >= stat.st_size and again.maps[0][3][0] == 3


def _small_disk(tmp_path) -> str:
    """A shell script that mounts a 1 MiB tmpfs at tmp_path/small (in a user and mount namespace of its own: no root
    needed) and runs the Python code it is given as $0 twice, one process after the other, on a folder there; or
    skip the test where this machine allows no such file system."""
    mount = tmp_path / "small"
    mount.mkdir()
    tried = subprocess.run(["unshare", "-Urm", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {mount}"],
                           capture_output=True, timeout=HANG, check=False) if shutil.which("unshare") else None
    if tried is None or tried.returncode != 0:
        pytest.skip("no small file system can be made here (unshare -Urm and a tmpfs mount are refused)")
    run = f'{shlex.quote(sys.executable)} -c "$0" {mount}/cache'
    return f"mount -t tmpfs -o size=1m tmpfs {mount} && cd {shlex.quote(str(ROOT))} && {run} && {run}"


FILL_THE_DISK = """
import sys, warnings
import numpy as np
import readers
warnings.simplefilter("always")
r = readers.cached(readers.from_arrays(np.arange(400)), lambda e: np.full(1024, e[0], np.float32), directory=sys.argv[1])
for _ in range(2):
    print(sum(float(v[0]) for v in r()), flush=True)
r.close()
"""


def test_a_full_disk_kills_no_process_that_writes_dense_rows(tmp_path):
    # Regression (issue 27, 13): 400 rows of 4 KiB (1.6 MiB) on a 1 MiB file system: the writer thread died of
    # SIGBUS (exit code 135), and the next process again; now each warns once and gives every value
    script = _small_disk(tmp_path)
    done = subprocess.run(["unshare", "-Urm", "sh", "-c", script, FILL_THE_DISK], capture_output=True, text=True,
                          timeout=6 * HANG, check=False)
    assert done.returncode == 0, f"exit code {done.returncode}: {done.stderr[-2000:]}"
    assert done.stdout.split() == ["79800.0"] * 4
    said = re.findall(r"RuntimeWarning: the cache in \S+ could not make room for its dense file \S+ \(the disk is "
                      r"full: [\d.,]+ MiB free\)", done.stderr)
    assert len(said) == 2, done.stderr[-2000:]


def every_kind(i):
    return (np.full((2, 2), i, np.float32), np.float32(i), i, float(i) / 2, bool(i % 2), np.array(i, np.int16))


def test_take_gives_a_block_of_rows_of_every_kind_as_written_and_read_only(tmp_path):
    # (issue 32, row 2: the block read that a warm pass takes instead of ``read``, with the same cells)
    f = DenseFile(str(tmp_path), "kinds", 0, 8, layout_of(every_kind(0)))
    f.know(range(8), [f.write(i, every_kind(i)) for i in range(8)])
    ids = np.array([5, 0, 7, 5])
    taken, (read, damaged) = f.take(ids), f.read(ids.tolist())
    assert damaged == [] and f.take(np.array([3, 8])) is None and f.take(np.array([], dtype=np.int64)) is None
    for i, got, again in zip(ids.tolist(), taken, [read[i] for i in ids.tolist()]):
        want = every_kind(i)
        assert [type(c) for c in got] == [type(c) for c in want] == [type(c) for c in again]
        assert all(np.array_equal(g, w) and np.asarray(g).dtype == np.asarray(w).dtype for g, w in zip(got, want))
        assert not got[0].flags.writeable and not got[5].flags.writeable and got[5].shape == ()


def test_take_refuses_a_block_with_a_damaged_row_and_read_names_it(tmp_path):
    f = DenseFile(str(tmp_path), "kinds", 0, 4, layout_of(every_kind(0)))
    f.know(range(4), [f.write(i, every_kind(i)) for i in range(4)])
    f.maps[0][2, 0, 1] = -1.0  # damage after the write
    assert f.take(np.array([0, 1])) is not None and f.take(np.array([1, 2])) is None
    found, damaged = f.read([1, 2])
    assert damaged == [2] and list(found) == [1] and f.take(np.array([2])) is None  # (forgotten)
