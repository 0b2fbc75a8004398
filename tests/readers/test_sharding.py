"""Sharding: worker_info, shard and node_shuffle; exactly-once coverage, equalizing, elastic resume."""
import collections
import os
import subprocess
import sys
import threading
import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import batching
import readers
from readers.launch import worker_context, worker_info
from readers.stage import IndexedReader

LAUNCHER_PREFIXES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                     "SLURM_", "OMPI_", "PMI_", "MPI_LOCAL")


def _clear_launchers(environ):
    for name in list(environ):
        if name.startswith(LAUNCHER_PREFIXES):
            del environ[name]


@pytest.fixture(autouse=True)
def no_launcher():
    """No launcher variables from the machine running the tests (tests/fixtures.py restores os.environ)."""
    _clear_launchers(os.environ)


def set_env(monkeypatch, **variables):
    for name, value in variables.items():
        monkeypatch.setenv(name, str(value))


def as_rank(rank, world, local_world=None, node=None):
    """os.environ of a torchrun rank (no monkeypatch: hypothesis reuses the test's fixtures)."""
    local_world = world if local_world is None else local_world
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank % local_world),
                      LOCAL_WORLD_SIZE=str(local_world), GROUP_RANK=str(rank // local_world if node is None else node))


def numbers_to(n):
    def numbers():
        yield from range(n)
    return numbers


def source(kind, n, seed):
    """range(n) as an index-planned pipeline or as a stream, shuffled (seed) or in order (None)."""
    if kind == "planned":
        base = readers.from_sequence(range(n))
        return base if seed is None else readers.shuffle(base, seed=seed)
    stream = numbers_to(n)
    return stream if seed is None else readers.shuffle(stream, 7, seed=seed)


def real(entries, equalize):
    """The sample values of a shard's entries, without pads (weight 0.0) when padded."""
    if equalize != "pad":
        return list(entries)
    return [value for value, weight in entries if weight == 1.0]


def flatten(batches):
    return [entry for b in batches for entry in b]


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


# -- node_shuffle ---------------------------------------------------------------------


def node_passes(n, world, local_world, passes=2, equalize=None, seed=4):
    """{rank: [pass 0 entries, pass 1 entries, ...]} of node_shuffle over range(n), rank by rank."""
    out = {}
    saved = os.environ.copy()
    try:
        for rank in range(world):
            as_rank(rank, world, local_world)
            r = readers.node_shuffle(readers.from_sequence(range(n)), seed=seed, equalize=equalize)
            out[rank] = [list(r()) for _ in range(passes)]
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return out


@pytest.mark.parametrize("n, world, local_world", [(100, 4, 2), (23, 6, 2), (10, 3, 1), (31, 4, 4)])
def test_node_shuffle_each_pass_is_exactly_once_over_all_nodes(n, world, local_world):
    runs = node_passes(n, world, local_world, passes=3)
    for p in range(3):
        assert sorted(sum((runs[rank][p] for rank in runs), [])) == list(range(n))


@pytest.mark.parametrize("n, world, local_world", [(100, 4, 2), (23, 6, 2)])
def test_node_shuffle_a_node_sees_the_same_samples_every_pass_in_a_new_order(n, world, local_world):
    runs = node_passes(n, world, local_world, passes=3)
    nodes = world // local_world
    for node in range(nodes):
        ranks = range(node * local_world, (node + 1) * local_world)
        per_pass = [sum((runs[rank][p] for rank in ranks), []) for p in range(3)]
        # node n keeps the contiguous block [n * N // nodes, (n + 1) * N // nodes)
        assert sorted(per_pass[0]) == list(range(node * n // nodes, (node + 1) * n // nodes))
        assert sorted(per_pass[1]) == sorted(per_pass[2]) == sorted(per_pass[0])
        assert per_pass[0] != per_pass[1] != per_pass[2]


@pytest.mark.parametrize("n, world, local_world", [(10, 3, 1), (23, 6, 2), (101, 4, 2), (7, 4, 2)])
def test_node_shuffle_pad_gives_every_rank_the_same_count_when_blocks_differ(n, world, local_world):
    runs = node_passes(n, world, local_world, equalize="pad")
    for p in range(2):
        counts = [len(runs[rank][p]) for rank in runs]
        assert counts == [-(-n // world)] * world
        entries = sum((runs[rank][p] for rank in runs), [])
        assert sorted(real(entries, "pad")) == list(range(n))
        assert all(w in (0.0, 1.0) for _, w in entries)


@pytest.mark.parametrize("n, world, local_world", [(10, 3, 1), (23, 6, 2), (101, 4, 2)])
def test_node_shuffle_drop_gives_every_rank_floor_of_n_over_world(n, world, local_world):
    runs = node_passes(n, world, local_world, equalize="drop")
    for p in range(2):
        assert [len(runs[rank][p]) for rank in runs] == [n // world] * world
        entries = sum((runs[rank][p] for rank in runs), [])
        assert len(set(entries)) == len(entries)


def test_node_shuffle_splits_a_node_among_its_local_workers():
    r = readers.node_shuffle(readers.from_sequence(range(40)), seed=1)
    seen = []
    for rank in (2, 3):  # node 1, local ranks 0 and 1, of 2 nodes with 2 processes each
        as_rank(rank, 4, 2)
        for worker in range(2):
            with worker_context(worker, 2):  # local shard local_rank * 2 + worker of 4 on the node
                r.set_pass(0)
                part = list(r())
                assert len(part) == 5
                seen += part
    assert sorted(seen) == list(range(20, 40))


@pytest.mark.parametrize("equalize", [None, "pad"])
@pytest.mark.parametrize("n, steps", [(37, 2), (37, 5), (10, 1), (64, 8)])
def test_node_shuffle_state_of_rank_0_resumes_every_node_and_other_local_sizes(n, steps, equalize):
    """Regression: the state recorded the node index, so rank 0's state refused the other nodes."""
    def make():
        return batching.batch(readers.node_shuffle(readers.from_sequence(range(n)), seed=3, equalize=equalize), 2)

    saved = os.environ.copy()
    try:
        seen, states = [], []
        for rank in range(4):  # 2 nodes of 2 processes
            as_rank(rank, 4, 2)
            it = make()()
            for _ in range(steps):
                seen += real(next(it, []), equalize)
            states.append(it.get_state())
            it.close()
        assert all(state == states[0] for state in states)
        for rank in range(6):  # still 2 nodes, now of 3 processes
            as_rank(rank, 6, 3)
            r = make()
            r.set_state(states[0])
            seen += real(flatten(r()), equalize)
        assert sorted(seen) == list(range(n))
        as_rank(0, 6, 2)  # 3 nodes: a position inside a node's block means something else
        r = make()
        r.set_state(states[0])
        if states[0]["cursor"]:
            with pytest.raises(ValueError, match=r"saved by a node_shuffle over 2 nodes, and this job has 3 nodes"):
                next(iter(r()))
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_node_shuffle_needs_an_indexed_reader():
    with pytest.raises(ValueError, match="node_shuffle needs an indexed reader.*use shard"):
        readers.node_shuffle(numbers_to(3), seed=0)
    with pytest.raises(ValueError, match="node_shuffle: equalize must be None, 'pad' or 'drop', got 'even'"):
        readers.node_shuffle(readers.from_sequence(range(3)), seed=0, equalize="even")


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


# -- worker_info -----------------------------------------------------------------------


def test_worker_info_defaults_to_rank_0_of_1():
    assert worker_info() == readers.WorkerInfo(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, "none")


def test_worker_info_reads_torchrun(monkeypatch):
    set_env(monkeypatch, RANK=5, WORLD_SIZE=8, LOCAL_RANK=1, LOCAL_WORLD_SIZE=4, GROUP_RANK=1)
    info = worker_info()
    assert info == readers.WorkerInfo(rank=5, world_size=8, worker_id=0, workers_per_process=1, global_id=5,
                                      total=8, node_rank=1, num_nodes=2, local_rank=1, local_world_size=4,
                                      launcher="torchrun")
    with worker_context(2, 3):
        info = worker_info()
        assert (info.worker_id, info.workers_per_process, info.global_id, info.total) == (2, 3, 17, 24)


def test_worker_info_torchrun_without_local_variables_is_one_node(monkeypatch):
    set_env(monkeypatch, RANK=2, WORLD_SIZE=3)
    info = worker_info()
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size, info.node_rank, info.num_nodes) == (
        2, 3, 2, 3, 0, 1)


@pytest.mark.parametrize("launcher, env, expected", [
    # rank, world, local rank, local world, node, nodes
    ("slurm", dict(SLURM_PROCID=4, SLURM_STEP_NUM_TASKS=6, SLURM_LOCALID=0, SLURM_NODEID=2, SLURM_TASKS_PER_NODE="2(x3)"),
     (4, 6, 0, 2, 2, 3)),
    ("slurm", dict(SLURM_PROCID=3, SLURM_STEP_NUM_TASKS=8, SLURM_LOCALID=3, SLURM_NODEID=0, SLURM_NNODES=2), (3, 8, 3, 4, 0, 2)),
    ("slurm", dict(SLURM_PROCID=1, SLURM_STEP_NUM_TASKS=2), (1, 2, 0, 2, 0, 1)),
    ("slurm", dict(SLURM_PROCID=1, SLURM_STEP_NUM_TASKS=4, SLURM_NTASKS_PER_NODE=2, SLURM_NODEID=0), (1, 4, 0, 2, 0, 2)),
    ("slurm", dict(SLURM_PROCID=0, SLURM_STEP_NUM_TASKS=5, SLURM_LOCALID=0, SLURM_NODEID=2, SLURM_TASKS_PER_NODE="2(x2),1"),
     (0, 5, 0, 1, 2, 3)),
    ("mpi", dict(OMPI_COMM_WORLD_RANK=3, OMPI_COMM_WORLD_SIZE=4, OMPI_COMM_WORLD_LOCAL_RANK=1,
          OMPI_COMM_WORLD_LOCAL_SIZE=2), (3, 4, 1, 2, 1, 2)),
    ("mpi", dict(PMI_RANK=2, PMI_SIZE=3), (2, 3, 0, 1, 2, 3)),
    ("mpi", dict(PMI_RANK=5, PMI_SIZE=6, MPI_LOCALRANKID=2, MPI_LOCALNRANKS=3), (5, 6, 2, 3, 1, 2)),
])
def test_worker_info_reads_slurm_and_mpi(monkeypatch, launcher, env, expected):
    set_env(monkeypatch, **env)
    info = worker_info()
    assert info.launcher == launcher
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size, info.node_rank,
            info.num_nodes) == expected


def test_worker_info_prefers_torchrun_then_slurm_then_mpi(monkeypatch):
    set_env(monkeypatch, OMPI_COMM_WORLD_RANK=1, OMPI_COMM_WORLD_SIZE=2)
    assert worker_info().launcher == "mpi"
    set_env(monkeypatch, SLURM_PROCID=2, SLURM_STEP_NUM_TASKS=3)
    assert worker_info()[:2] == (2, 3)
    set_env(monkeypatch, RANK=0, WORLD_SIZE=1)
    assert worker_info().launcher == "torchrun"


@pytest.mark.parametrize("env, message", [
    (dict(RANK="one", WORLD_SIZE=2), r"environment variable RANK='one' is not an int; fix or unset it"),
    (dict(RANK=0, WORLD_SIZE="2.0"), r"environment variable WORLD_SIZE='2.0' is not an int"),
    (dict(RANK=0, WORLD_SIZE=2, LOCAL_RANK="x"), r"environment variable LOCAL_RANK='x'"),
    (dict(SLURM_PROCID="a", SLURM_STEP_NUM_TASKS=2), r"environment variable SLURM_PROCID='a'"),
    (dict(SLURM_PROCID=0, SLURM_STEP_NUM_TASKS=2, SLURM_TASKS_PER_NODE="2(x"),
     r"SLURM_TASKS_PER_NODE='2\(x' is not in SLURM's '2\(x3\),1' form"),
    (dict(OMPI_COMM_WORLD_RANK=0, OMPI_COMM_WORLD_SIZE="many"), r"environment variable OMPI_COMM_WORLD_SIZE='many'"),
    (dict(PMI_RANK="?", PMI_SIZE=2), r"environment variable PMI_RANK='\?'"),
])
def test_worker_info_names_a_bad_variable(monkeypatch, env, message):
    set_env(monkeypatch, **env)
    with pytest.raises(ValueError, match=message):
        worker_info()


@pytest.mark.parametrize("env, message", [
    (dict(RANK=4, WORLD_SIZE=4), r"torchrun environment says rank 4 of world size 4.*check RANK and WORLD_SIZE"),
    (dict(RANK=-1, WORLD_SIZE=4), r"rank -1 of world size 4"),
    (dict(RANK=0, WORLD_SIZE=0), r"rank 0 of world size 0"),
    (dict(SLURM_PROCID=2, SLURM_STEP_NUM_TASKS=2), r"slurm environment says rank 2 of world size 2.*SLURM_PROCID"),
    (dict(OMPI_COMM_WORLD_RANK=3, OMPI_COMM_WORLD_SIZE=3), r"mpi environment says rank 3 of world size 3"),
    (dict(RANK=0, WORLD_SIZE=4, LOCAL_RANK=2, LOCAL_WORLD_SIZE=2), r"local rank 2 of 2 processes"),
    (dict(RANK=0, WORLD_SIZE=4, LOCAL_RANK=0, LOCAL_WORLD_SIZE=2, GROUP_RANK=2), r"node 2 of 2"),
])
def test_worker_info_rejects_a_rank_outside_the_world(monkeypatch, env, message):
    set_env(monkeypatch, **env)
    with pytest.raises(ValueError, match=message):
        worker_info()


def test_worker_info_a_slurm_batch_script_without_srun_is_one_process(monkeypatch):
    """Review of issue 4: an sbatch script is SLURM_PROCID=0 of SLURM_NTASKS, and would read 1/n of the data."""
    set_env(monkeypatch, SLURM_PROCID=0, SLURM_NTASKS=4, SLURM_NODEID=0)
    assert worker_info()[:2] == (0, 1)


@pytest.mark.parametrize("env", [dict(WORLD_SIZE=4), dict(RANK=1)])
def test_worker_info_refuses_half_a_torchrun_layout(monkeypatch, env):
    """Review of issue 4: WORLD_SIZE without RANK made every process rank 0, reading shard 0 four times."""
    set_env(monkeypatch, **env)
    with pytest.raises(ValueError, match="set both or neither"):
        worker_info()


def test_worker_context_nests_and_stays_in_its_thread():
    seen = []
    with worker_context(1, 3):
        with worker_context(0, 2):
            assert worker_info()[2:4] == (0, 2)
        assert worker_info()[2:4] == (1, 3)
        t = threading.Thread(target=lambda: seen.append(worker_info()[2:4]))
        t.start()
        t.join()
    assert seen == [(0, 1)]
    assert worker_info()[2:4] == (0, 1)


@pytest.mark.parametrize("worker_id, workers, message", [
    (2, 2, r"worker_id 2 is not below workers=2"),
    (0, 0, r"workers must be an int >= 1, got 0"),
    (-1, 2, r"worker_id must be an int >= 0, got -1"),
    (0, 1.0, r"workers must be an int >= 1, got 1.0"),
])
def test_worker_context_rejects_bad_arguments(worker_id, workers, message):
    with pytest.raises(ValueError, match=message):
        with worker_context(worker_id, workers):
            pass


def test_worker_info_asks_torch_for_the_dataloader_worker_when_torch_is_loaded(monkeypatch):
    fake = types.ModuleType("torch.utils.data")
    fake.get_worker_info = lambda: types.SimpleNamespace(id=2, num_workers=3)
    monkeypatch.setitem(sys.modules, "torch.utils.data", fake)
    set_env(monkeypatch, RANK=1, WORLD_SIZE=2)
    info = worker_info()
    assert (info.worker_id, info.workers_per_process, info.global_id, info.total) == (2, 3, 5, 6)
    with worker_context(0, 1):  # readerkit's own workers take precedence
        assert worker_info().global_id == 1
    fake.get_worker_info = lambda: None  # the main process of a DataLoader
    assert worker_info()[2:4] == (0, 1)


def test_worker_info_never_imports_torch():
    code = ("import sys, readers; info = readers.worker_info(); "
            "list(readers.shard(readers.from_sequence(range(4)))()); "
            "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch')); "
            "print(info.total)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_PREFIXES)}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"


def test_worker_info_counts_each_global_worker_once():
    ids = collections.Counter()
    saved = os.environ.copy()
    try:
        for rank in range(3):
            as_rank(rank, 3, local_world=3)
            for w in range(2):
                with worker_context(w, 2):
                    info = worker_info()
                    ids[info.global_id] += 1
                    assert info.total == 6
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert sorted(ids) == list(range(6)) and set(ids.values()) == {1}


# -- readerkit's own workers set the worker (review of issue 4) ------------------------------


def test_multiprocess_reader_workers_take_their_own_shard():
    """Each process of multiprocess_reader is local worker i of n: shard() splits them without extra code."""
    r = readers.shard(readers.from_sequence(range(10)))
    assert sorted(readers.multiprocess_reader([r, r])()) == list(range(10))


@pytest.mark.parametrize("make", [lambda r: readers.buffered(r, 2),
                                  lambda r: readers.xmap_readers(abs, r, 2, 4, order=True)])
def test_helper_threads_keep_the_consumers_worker(make):
    """buffered/xmap threads read the source for the worker that consumes them (the context was lost)."""
    with worker_context(1, 2):
        assert list(make(readers.shard(readers.from_sequence(range(6))))()) == [1, 3, 5]


def test_shard_refuses_a_drawn_seed_across_processes(monkeypatch):
    """Review of issue 4: shard(shuffle(r)) gave each rank its own order: samples twice and never."""
    set_env(monkeypatch, RANK=1, WORLD_SIZE=2)
    r = readers.shard(readers.shuffle(readers.from_sequence(range(10))))
    with pytest.raises(ValueError, match=r"drew its seed from the operating system.*give the shuffle a seed"):
        list(r())
    assert sorted(readers.shard(readers.shuffle(readers.from_sequence(range(10)), seed=0))()) != []


def test_node_shuffle_needs_a_seed():
    with pytest.raises(TypeError):
        readers.node_shuffle(readers.from_sequence(range(4)))
    with pytest.raises(ValueError, match="node_shuffle needs a seed"):
        readers.node_shuffle(readers.from_sequence(range(4)), None)


def test_node_shuffle_equalize_refuses_nodes_of_different_sizes(monkeypatch):
    """Review of issue 4: SLURM nodes with 2 and 1 tasks gave ranks 3, 3 and 5 entries: a collective hangs."""
    set_env(monkeypatch, SLURM_PROCID=2, SLURM_STEP_NUM_TASKS=3, SLURM_LOCALID=0, SLURM_NODEID=1,
            SLURM_STEP_TASKS_PER_NODE="2,1")
    r = readers.node_shuffle(readers.from_sequence(range(10)), 0, equalize="pad")
    with pytest.raises(ValueError, match="needs the same number of processes on every node"):
        list(r())
