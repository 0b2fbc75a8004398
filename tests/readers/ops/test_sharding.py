"""readers.ops.sharding: shard; exactly-once coverage, equalizing, elastic resume, and reading only its own samples."""
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import batching
import readers
from readers.launch import worker_context
from readers.stage import IndexedReader
from tests.helpers.layouts import flatten, numbers_to, real, set_env


def source(kind, n, seed):
    """range(n) as an index-planned pipeline or as a stream, shuffled (seed) or in order (None)."""
    if kind == "planned":
        base = readers.from_sequence(range(n))
        return base if seed is None else readers.shuffle(base, seed=seed)
    stream = numbers_to(n)
    return stream if seed is None else readers.shuffle(stream, 7, seed=seed)


kinds = st.sampled_from(["planned", "stream"])
seeds = st.one_of(st.none(), st.integers(0, 2**32))


# -- coverage --------------------------------------------------------------------


@settings(max_examples=250, deadline=None)
@given(n=st.integers(0, 300), count=st.integers(1, 9), kind=kinds, seed=seeds)
def test_shard_covers_every_sample_exactly_once(n, count, kind, seed):
    below = source(kind, n, seed)
    whole_pass = list(readers.shard(below, 0, 1)())
    parts = [list(readers.shard(below, k, count)()) for k in range(count)]
    assert sorted(whole_pass) == list(range(n))
    assert sorted(sum(parts, [])) == list(range(n))
    assert [len(p) for p in parts] == [n // count + (k < n % count) for k in range(count)]
    # shard k holds positions k, k + count, ... of the unsharded pass
    assert parts == [whole_pass[k::count] for k in range(count)]


@settings(max_examples=250, deadline=None)
@given(n=st.integers(0, 300), count=st.integers(1, 9), kind=kinds, seed=seeds)
def test_shard_drop_gives_every_shard_floor_of_n_over_count(n, count, kind, seed):
    below = source(kind, n, seed)
    parts = [list(readers.shard(below, k, count, equalize="drop")()) for k in range(count)]
    assert [len(p) for p in parts] == [n // count] * count
    seen = sum(parts, [])
    assert len(set(seen)) == len(seen) == n - n % count
    whole_pass = list(below()) if kind == "stream" else list(readers.shard(below, 0, 1)())
    assert sorted(seen) == sorted(whole_pass[:n - n % count])  # what is dropped is the tail


@settings(max_examples=250, deadline=None)
@given(n=st.integers(0, 300), count=st.integers(1, 9), kind=kinds, seed=seeds)
def test_shard_pad_gives_every_shard_ceil_of_n_over_count_with_zero_weight_pads(n, count, kind, seed):
    below = source(kind, n, seed)
    parts = [list(readers.shard(below, k, count, equalize="pad")()) for k in range(count)]
    assert [len(p) for p in parts] == [-(-n // count)] * count
    entries = sum(parts, [])
    assert all(type(e) is tuple and len(e) == 2 and type(e[1]) is float for e in entries)
    assert sorted(real(entries, "pad")) == list(range(n))
    pads = [e for e in entries if e[1] != 1.0]
    assert all(weight == 0.0 for _, weight in pads) and len(pads) == -n % count
    # a pad copies a real entry: the first of the pass
    first = next(iter(below()), None)
    assert all(value == first for value, _ in pads)


def test_shard_pad_over_columns_appends_a_weight_column():
    r = readers.from_arrays(np.arange(5) * 10, np.arange(5))
    parts = [list(readers.shard(r, k, 3, equalize="pad")()) for k in range(3)]
    assert [[(int(x), int(y), w) for x, y, w in p] for p in parts] == [
        [(0, 0, 1.0), (30, 3, 1.0)], [(10, 1, 1.0), (40, 4, 1.0)], [(20, 2, 1.0), (0, 0, 0.0)]]
    images, labels, weights = next(iter(batching.collated(batching.batch(readers.shard(r, 2, 3, equalize="pad"), 2))()))
    assert images.tolist() == [20, 0] and weights.tolist() == [1.0, 0.0] and weights.dtype == np.float64


# -- elastic resume and dynamic partition ------------------------------------------------


def sharded(kind, n, seed, index, count, equalize, batch_size):
    return batching.batch(readers.shard(source(kind, n, seed), index, count, equalize=equalize), batch_size)


@settings(max_examples=300, deadline=None)
@given(n=st.integers(0, 300), before=st.integers(1, 9), after=st.integers(1, 9), batch_size=st.integers(1, 8),
       kind=kinds, seed=st.integers(0, 2**32), equalize=st.sampled_from([None, "pad"]), data=st.data())
def test_shard_elastic_resume_mid_pass_is_exactly_once(n, before, after, batch_size, kind, seed, equalize, data):
    old = [sharded(kind, n, seed, k, before, equalize, batch_size) for k in range(before)]
    steps = min(len(list(r())) for r in old)
    for r in old:
        r.set_pass(0)
    s = data.draw(st.integers(0, steps), label="steps before the resize")
    seen, states = [], []
    for r in old:
        it = r()
        for _ in range(s):
            seen += real(next(it), equalize)
        states.append(it.get_state())
        it.close()
    assert all(state == states[0] for state in states), "ranks at the same step report the same state"
    for k in range(after):
        r = sharded(kind, n, seed, k, after, equalize, batch_size)
        r.set_state(states[0])
        seen += real(flatten(r()), equalize)
    assert sorted(seen) == list(range(n))


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 300), first=st.integers(1, 9), second=st.integers(1, 9), kind=kinds,
       seed=st.integers(0, 2**32), equalize=st.sampled_from([None, "pad", "drop"]))
def test_shard_dynamic_partition_covers_each_pass_exactly_once(n, first, second, kind, seed, equalize):
    """Pass 0 with ``first`` shards and pass 1 with ``second``: each pass is whole on its own."""
    passes = []
    for pass_id, count in enumerate([first, second]):
        seen = []
        for k in range(count):
            r = readers.shard(source(kind, n, seed), k, count, equalize=equalize)
            r.set_pass(pass_id)
            seen += real(r(), equalize)
        keep = n - n % count if equalize == "drop" else n
        assert len(seen) == len(set(seen)) == keep
        passes.append(seen)
    if equalize != "drop":
        assert sorted(passes[0]) == sorted(passes[1]) == list(range(n))


def test_shard_defaults_to_the_global_worker(monkeypatch):
    set_env(monkeypatch, RANK=1, WORLD_SIZE=2)
    r = readers.shard(readers.from_sequence(range(20)))
    assert list(r()) == list(range(1, 20, 2))
    with worker_context(1, 2):  # global worker 1 + 2 * 1 = 3 of 4
        assert list(r()) == list(range(3, 20, 4))
    # looked up as each pass starts: a job that changes size repartitions the next pass
    set_env(monkeypatch, RANK=0, WORLD_SIZE=5)
    assert list(r()) == list(range(0, 20, 5))


def test_shard_reads_from_worker_context_in_a_thread():
    r = readers.shard(readers.from_sequence(range(12)))
    got = {}

    def worker(k):
        with worker_context(k, 3):
            got[k] = list(r())

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == {k: list(range(k, 12, 3)) for k in range(3)}


# -- reads --------------------------------------------------------------------------


class CountingSource(IndexedReader):
    """range(n) as an indexed reader that records every sample index it reads."""

    name = "counting"

    def __init__(self, n):
        super().__init__()
        self.n, self.read = n, []

    def __len__(self):
        return self.n

    def _get(self, i):
        self.read.append(i)
        return i

    def gather(self, indices):
        self.read += indices.tolist()
        return indices.tolist()


@pytest.mark.parametrize("equalize", [None, "drop"])
@pytest.mark.parametrize("shuffled", [False, True])
def test_shard_of_an_indexed_pipeline_reads_only_its_own_samples(shuffled, equalize):
    count, n = 4, 1003
    for k in range(count):
        counting = CountingSource(n)
        below = readers.shuffle(counting, seed=3) if shuffled else counting
        got = list(readers.shard(below, k, count, equalize=equalize)())
        assert sorted(counting.read) == sorted(got)
        assert len(got) == n // count + (k < n % count and equalize is None)


def test_shard_pad_reads_only_its_own_samples_and_the_pad():
    counting = CountingSource(10)
    got = list(readers.shard(readers.shuffle(counting, seed=3), 3, 4, equalize="pad")())
    first = next(iter(readers.shuffle(CountingSource(10), seed=3)()))
    assert got[-1] == (first, 0.0)
    assert sorted(counting.read) == sorted(value for value, _ in got)


def test_shard_resumed_reads_only_the_rest_of_its_samples():
    counting = CountingSource(100)
    r = batching.batch(readers.shard(readers.shuffle(counting, seed=3), 1, 4), 5)
    r.set_state({"pass": 0, "cursor": 60, "seed": 3})
    rest = flatten(r())
    assert sorted(counting.read) == sorted(rest) and len(rest) == 10


# -- shard arguments -------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, message", [
    (dict(index=1), r"give both index and count, or neither.*index=1, count=None"),
    (dict(count=3), r"give both index and count, or neither.*index=None, count=3"),
    (dict(index=3, count=3), r"index 3 is not below count=3; shards are numbered 0..2"),
    (dict(index=0, count=0), r"count must be an int >= 1, got 0"),
    (dict(index=-1, count=2), r"index must be an int >= 0, got -1"),
    (dict(index=0, count=2.0), r"count must be an int >= 1, got 2.0"),
    (dict(index=0, count=2, equalize="even"), r"equalize must be None, 'pad' or 'drop', got 'even'"),
    (dict(equalize=True), r"equalize must be None, 'pad' or 'drop', got True"),
])
def test_shard_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        readers.shard(readers.from_sequence(range(3)), **kwargs)


def test_shard_rejects_a_non_reader():
    with pytest.raises(TypeError, match="reader must be a zero-argument callable"):
        readers.shard([1, 2, 3], 0, 2)


# -- seeds across processes (review of issue 4) -------------------------------------------


def test_shard_refuses_a_drawn_seed_across_processes(monkeypatch):
    """Review of issue 4: shard(shuffle(r)) gave each rank its own order: samples twice and never."""
    set_env(monkeypatch, RANK=1, WORLD_SIZE=2)
    r = readers.shard(readers.shuffle(readers.from_sequence(range(10))))
    with pytest.raises(ValueError, match=r"drew its seed from the operating system.*give the shuffle a seed"):
        list(r())
    assert sorted(readers.shard(readers.shuffle(readers.from_sequence(range(10)), seed=0))()) != []
