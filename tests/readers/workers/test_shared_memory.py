"""readers.workers.shared_memory: arrays cross from worker processes through shared-memory rings, and nothing is left behind."""
from __future__ import annotations

import collections
import functools
import gc
import multiprocessing
import os
import threading

import numpy as np
import pytest

import readers
from readers import (
    from_arrays,
    from_sequence,
    multiprocess_reader,
    np_array,
    prefetch,
)
from readers.testing import assert_same
from readers.workers import shared_memory
from tests.helpers import worker_jobs as jobs
from tests.helpers.pool_helpers import (
    METHODS,
    assert_nothing_new_in_dev_shm,
    assert_rings_gone,
    dev_shm,
    kill_a_worker,
    ring_maps,
    views_ring,
)


@pytest.fixture
def ring():
    """A consumer's ring of 16 KiB and a worker's writer on it, in this process."""
    reader = shared_memory.RingReader(size=16 << 10)
    writer = shared_memory.RingWriter(shared_memory.SharedFd(os.dup(reader.fd)), reader.size, reader.restart_at())
    yield reader, writer
    writer.close()
    reader.close()


# -- one ring ---------------------------------------------------------------------------------


def test_pack_places_large_arrays_in_the_ring_and_unpack_views_them(ring):
    reader, writer = ring
    message = ("entries", (np.arange(1024.0), np.arange(3), "label"))
    got = shared_memory.unpack(shared_memory.pack(message, writer), reader)
    assert_same(got, message)
    big, small, _ = got[1]
    assert views_ring(big) and not views_ring(small)  # a small array costs less in-band


def test_pack_without_a_ring_sends_arrays_in_band():
    message = [np.arange(1024.0), None]
    got = shared_memory.unpack(shared_memory.pack(message, None), None)
    assert_same(got, message)
    assert not views_ring(got[0])


def test_a_full_ring_sends_arrays_in_band_and_a_freed_region_is_reused(ring):
    reader, writer = ring
    kept = shared_memory.unpack(shared_memory.pack([np.full(1536, 1.0)], writer), reader)  # 12 KiB of the 16 KiB ring
    assert views_ring(kept[0])
    overflow = shared_memory.unpack(shared_memory.pack([np.full(1536, 2.0)], writer), reader)
    assert not views_ring(overflow[0]) and overflow[0][0] == 2.0  # never blocks: in-band instead
    del kept
    gc.collect()
    reader.collect()  # the consumer frees what no array views any more
    again = shared_memory.unpack(shared_memory.pack([np.full(1536, 3.0)], writer), reader)
    assert views_ring(again[0]) and (again[0] == 3.0).all()


def test_a_message_that_fails_to_pickle_leaves_no_region_taken_in_the_ring(ring):
    reader, writer = ring
    head = writer.head
    with pytest.raises(TypeError, match="cannot pickle"):
        shared_memory.pack([np.full(1024, 1.0), threading.Lock()], writer)  # the array is placed before the lock fails
    assert writer.head == head  # regression: its region was lost, so the tail stopped short of every later one
    after = shared_memory.unpack(shared_memory.pack([np.full(1024, 2.0)], writer), reader)
    del after
    gc.collect()
    reader.collect()
    assert reader.tail == writer.head  # every region is free again


def test_unpicklable_names_what_in_an_entry_cannot_cross():
    assert shared_memory.unpicklable([np.zeros(3), ("a", {"k": threading.Lock()})]) == (
        "a list whose item 1 is a tuple whose item 1 is a dict whose item 'k' is a _thread.lock")
    assert shared_memory.unpicklable((np.zeros(3), None, "")) is None
    assert shared_memory.unpicklable(lambda: 1) == "a function"


@pytest.mark.parametrize("entries", [
    [(np.zeros(3), 1), (np.ones(3), 2)],
    [np.zeros((2, 2)), np.ones((2, 2))],
    [(np.zeros(3), 1), (np.ones(4), 2)],  # shapes differ: left as they are
    [(np.zeros(3), 1), (np.ones(3), 2, "extra")],  # widths differ
    [np.array(1.0), np.array(2.0)],  # 0-d
    [np.array([None]), np.array([1])],  # objects
    [1, 2],
    [np.zeros(2)],
])
def test_unfold_gives_back_the_entries_fold_folded(entries):
    assert_same(shared_memory.unfold(shared_memory.fold(entries)), entries)


def test_fold_stacks_a_column_of_arrays_of_one_layout():
    folded = shared_memory.fold([(np.zeros(3), 1), (np.ones(3), 2)])
    assert isinstance(folded, shared_memory.Folded) and folded.width == 2 and folded.columns[0].shape == (2, 3)


# -- through worker processes -------------------------------------------------------------------


@pytest.mark.parametrize("start_method", METHODS)
@pytest.mark.parametrize("kind", ["stream", "indexed"])
def test_prefetch_arrays_arrive_as_views_of_the_ring(kind, start_method, no_leaks):
    shm_before = dev_shm()
    if kind == "stream":
        src = functools.partial(jobs.arrays, 12, 1024)  # bare 8 KiB arrays
    else:
        src = from_arrays(np.arange(12 * 256.0).reshape(12, 256), np.arange(12))  # (2 KiB row, label)
    want = list(src())
    r = prefetch(src, 2, mode="process", start_method=start_method)
    got = list(r())
    assert_same(got, want)
    arrays = [e if kind == "stream" else e[0] for e in got]
    assert all(views_ring(a) for a in arrays)
    assert all(a.base.dtype == np.uint8 for a in arrays if isinstance(a.base, np.ndarray))
    assert ring_maps() != []  # mapped while entries view it
    assert r.stats()["shm_bytes"] > 0
    del got, arrays
    assert_rings_gone()
    assert_nothing_new_in_dev_shm(shm_before)


@pytest.mark.parametrize("kind, start_method, passes", [("indexed", "fork", 2), ("stream", "fork", 2),
                                                        ("indexed", "spawn", 1)])
def test_prefetch_odd_entries_arrive_intact(kind, start_method, passes, no_leaks):
    src = from_sequence(jobs.odd_entries()) if kind == "indexed" else jobs.odd_stream
    r = prefetch(src, 2, mode="process", start_method=start_method)
    for _ in range(passes):
        assert_same(list(r()), jobs.odd_entries())


@pytest.mark.parametrize("use_pipe", [True, False])
def test_multiprocess_reader_passes_odd_entries_unharmed(use_pipe, no_leaks):
    arrays = np.arange(12.0).reshape(4, 3)
    got = list(multiprocess_reader([from_sequence(jobs.odd_entries())], use_pipe)())
    assert_same(got, jobs.odd_entries())
    rows = list(multiprocess_reader([np_array(arrays)], use_pipe)())
    assert_same(rows, list(arrays))


@pytest.mark.parametrize("start_method", METHODS)
def test_prefetch_entries_kept_beyond_the_ring_arrive_intact(start_method, no_leaks):
    # 80 arrays of 1 MiB, all kept: more than the worker's 64 MiB ring, so the rest goes in-band.
    n, size = 80, 1 << 17
    r = prefetch(functools.partial(jobs.arrays, n, size), 1, mode="process", start_method=start_method)
    kept = list(r())
    assert len(kept) == n
    assert all(a.shape == (size,) and a[0] == i and a[-1] == i and a.sum() == i * size for i, a in enumerate(kept))
    in_ring = [views_ring(a) for a in kept]
    assert any(in_ring) and not all(in_ring)
    del kept
    assert_rings_gone()


def test_prefetch_ring_reuse_never_overwrites_live_entries(no_leaks):
    # 600 arrays of 256 KiB wrap the 64 MiB ring twice; the consumer keeps a sliding window of 8
    # entries, so regions are freed and reused while their neighbours are still alive.
    window: collections.deque = collections.deque(maxlen=8)
    r = prefetch(functools.partial(jobs.arrays, 600, 1 << 15), 1, mode="process", start_method="fork",
                 buffer_size=4)
    for i, a in enumerate(r()):
        assert views_ring(a)
        window.append((i, a))
        assert all(kept[0] == j and (kept == j).all() for j, kept in window)
    assert r.stats()["shm_bytes"] >= 600 << 18
    del window, a
    assert_rings_gone()


def test_multiprocess_reader_arrays_cross_through_the_ring(no_leaks):
    parts = [functools.partial(jobs.arrays, 6, 1024), functools.partial(jobs.arrays, 6, 512)]
    got = list(multiprocess_reader(parts, start_method="fork")())
    assert sorted((a.size, a[0]) for a in got) == sorted((size, i) for size in (512, 1024) for i in range(6))
    assert all(views_ring(a) for a in got)
    del got
    assert_rings_gone()


ENDINGS = {
    # ending: (reader, how the pass ends once the first entry arrived)
    "end": (functools.partial(jobs.arrays, 8, 1024), None),
    "break": (functools.partial(jobs.arrays, 10_000, 1024), None),
    "error": (functools.partial(jobs.arrays_then_fail, 4, 1024, "bad row 4"), ValueError),
    "sigkill": (functools.partial(jobs.arrays, 400, 1024), readers.WorkerDiedError),
}


@pytest.mark.parametrize("start_method", METHODS)
@pytest.mark.parametrize("ending", ENDINGS)
def test_prefetch_leaves_no_shared_memory_behind(ending, start_method, no_leaks):
    shm_before = dev_shm()
    reader, error = ENDINGS[ending]
    stage = prefetch(reader, 2, mode="process", start_method=start_method, buffer_size=4)
    it = stage()  # the stage outlives the pass: its stats must not keep entries alive
    first = next(it)
    assert views_ring(first) and ring_maps() != []
    if ending == "end":
        assert all(np.array_equal(a, np.full(1024, i + 1.0)) for i, a in enumerate(it))
    elif ending == "break":
        for entry in it:
            break
        it.close()
        assert np.array_equal(entry, np.ones(1024))
        del entry
    else:
        if ending == "sigkill":
            kill_a_worker()  # it waits for credit (buffer_size=4), mid-pass
        with pytest.raises(error):
            list(it)
    assert multiprocessing.active_children() == []
    # the workers are gone, and the entry still alive still reads right
    assert np.array_equal(first, np.zeros(1024)) and ring_maps() != []
    del first, it
    assert_rings_gone()
    assert stage.stats()["entries"] >= 1
    assert_nothing_new_in_dev_shm(shm_before)
