"""readers.plans: index plans, and the chunk arithmetic that slices and regroups them."""
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import readers
from readers.parents import as_indexed
from readers.plans import (
    Plan,
    index_chunks,
    rechunk,
    slice_chunks,
    take_rows,
    taken_rows,
)

chunkings = st.lists(st.integers(0, 9), max_size=8)


def chunked(sizes):
    """Chunks of consecutive indices 0.. of the given sizes."""
    bounds = np.cumsum([0, *sizes])
    return [np.arange(lo, hi, dtype=np.int64) for lo, hi in zip(bounds[:-1], bounds[1:])]


def flat(chunks):
    return [int(i) for c in chunks for i in c]


@settings(max_examples=100, deadline=None)
@given(n=st.integers(0, 50), size=st.integers(1, 9), start=st.integers(0, 60))
def test_index_chunks_cover_start_to_n_in_chunks_of_size(n, size, start):
    chunks = list(index_chunks(n, size, start=start))
    assert flat(chunks) == list(range(start, n))
    assert all(0 < len(c) <= size and c.dtype == np.int64 for c in chunks)


@settings(max_examples=100, deadline=None)
@given(sizes=chunkings, start=st.integers(0, 60), count=st.one_of(st.none(), st.integers(0, 60)))
def test_slice_chunks_is_a_slice_of_the_flat_stream(sizes, start, count):
    whole = flat(chunked(sizes))
    stop = None if count is None else start + count
    got = list(slice_chunks(iter(chunked(sizes)), start, count))
    assert flat(got) == whole[start:stop] and all(len(c) for c in got)


def test_slice_chunks_stops_reading_once_the_slice_is_complete():
    def endless():
        k = 0
        while True:
            yield np.arange(k, k + 4)
            k += 4

    assert flat(slice_chunks(endless(), 3, 6)) == [3, 4, 5, 6, 7, 8]


@settings(max_examples=100, deadline=None)
@given(sizes=chunkings, size=st.integers(1, 9))
def test_rechunk_regroups_into_chunks_of_exactly_size(sizes, size):
    got = list(rechunk(iter(chunked(sizes)), size))
    assert flat(got) == flat(chunked(sizes))
    assert all(len(c) == size for c in got[:-1]) and (not got or 0 < len(got[-1]) <= size)


def test_plan_entries_gather_chunk_by_chunk_in_order():
    plan = Plan(readers.from_sequence("abcdef"), iter([np.array([4, 0]), np.array([], dtype=np.int64),
                                                       np.array([5])]))
    assert list(plan.entries()) == ["e", "a", "f"]


@pytest.mark.parametrize("wrap", [
    lambda r: r,
    lambda r: readers.shuffle(r, seed=3),
    lambda r: readers.skip(r, 2),
    lambda r: readers.compose(r, readers.from_sequence(range(10_000))),
    readers.with_index,
    lambda r: readers.shard(r, 1, 2),
    lambda r: readers.shard(r, 0, 3, equalize="pad"),
    lambda r: readers.chain(r, readers.from_sequence(range(5))),
    lambda r: readers.shuffle(readers.chain(readers.from_sequence(range(5)), r), seed=1),
])
@pytest.mark.parametrize("kind", ["map", "user", "sequence"])
def test_indexed_pass_does_per_entry_work_only_for_entries_read(wrap, kind):
    calls = []

    class Loud:  # a user's indexed object whose r[i] is the work
        def __len__(self):
            return 10_000

        def __getitem__(self, i):
            calls.append(i)
            return i

        def __call__(self):
            return iter(range(10_000))

    def record(x):
        calls.append(x)
        return x

    base = {"map": lambda: readers.map_readers(record, readers.from_sequence(range(10_000))),
            "user": lambda: as_indexed(Loud()),
            "sequence": lambda: readers.from_sequence(Loud())}[kind]()
    it = iter(wrap(base)())
    first = [next(it) for _ in range(3)]
    assert len(calls) == 3, f"{len(calls)} entries made for the first 3 read (a plan chunk ahead)"
    assert first == list(wrap(base)())[:3]


@settings(max_examples=100, deadline=None)
@given(sizes=chunkings, size=st.integers(1, 9))
def test_rechunk_drop_short_leaves_out_only_a_short_last_chunk(sizes, size):
    whole = flat(chunked(sizes))
    got = list(rechunk(iter(chunked(sizes)), size, drop_short=True))
    assert all(len(c) == size for c in got) and flat(got) == whole[:len(whole) - len(whole) % size]


def test_rechunk_reads_no_chunk_before_it_is_needed():
    pulled = []

    def chunks():
        for k in range(3):
            pulled.append(k)
            yield np.arange(4 * k, 4 * k + 4)

    it = rechunk(chunks(), 2)
    assert next(it).tolist() == [0, 1] and pulled == [0]
    assert next(it).tolist() == [2, 3] and pulled == [0]
    assert next(it).tolist() == [4, 5] and pulled == [0, 1]


def _row_arrays(tmp_path):
    """Arrays whose rows a pass takes: every layout take_rows must give exactly as indexing does."""
    base = np.arange(7 * 6, dtype=np.int64).reshape(7, 6)
    mapped = np.memmap(tmp_path / "rows.bin", dtype=np.uint8, mode="w+", shape=(7, 5))
    mapped[:] = np.arange(35, dtype=np.uint8).reshape(7, 5)
    windows = np.lib.stride_tricks.as_strided(np.arange(30, dtype=np.int32), shape=(7, 4), strides=(12, 4))
    return {
        "2-d int64": base, "3-d uint8": np.arange(7 * 8, dtype=np.uint8).reshape(7, 2, 4),
        "1-d float": np.linspace(0, 1, 7), "objects": np.array([[i, "x"] for i in range(7)], dtype=object),
        "fortran order": np.asfortranarray(base), "every other column": base[:, ::2], "a memmap": mapped,
        "overlapping windows": windows, "read-only view": np.frombuffer(bytes(range(28)), np.uint8).reshape(7, 4),
    }


@pytest.mark.parametrize("indices, dtype", [
    (i, d) for i in ([3, 0, 6, 3], [-1, 2], [], [5]) for d in (np.int64, np.int32, np.uint64)
    if d is not np.uint64 or min(i, default=0) >= 0  # (no negative uint64)
])
def test_take_rows_is_indexing_for_every_layout(tmp_path, indices, dtype):
    idx = np.array(indices, dtype=dtype)
    for name, array in _row_arrays(tmp_path).items():
        want = array[idx]
        got = take_rows(array, idx)
        assert type(got) is type(want) and got.dtype == want.dtype and got.shape == want.shape, name
        assert np.array_equal(got, want), name
        assert got.flags.writeable, name  # a copy, never a view into the array's memory
        if dtype is np.int64:
            (batch,) = taken_rows(array, [idx])
            assert type(batch) is type(want) and np.array_equal(batch, want), name


def test_take_rows_does_not_copy_a_whole_strided_array():
    # numpy's take makes a non-contiguous array contiguous first: for a token file's window view, every window
    tokens = np.zeros(1 << 20, np.int32)
    windows = np.lib.stride_tricks.as_strided(tokens, shape=((1 << 20) // 8 - 1, 9), strides=(32, 4))
    tracemalloc.start()
    try:
        take_rows(windows, np.array([5, 1]))
        list(taken_rows(windows, [np.array([5, 1])]))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 16, peak


def test_take_rows_out_of_range_names_the_index():
    with pytest.raises(IndexError, match="index 7 is out of bounds for axis 0 with size 7"):
        take_rows(np.zeros((7, 3)), np.array([1, 7]))
