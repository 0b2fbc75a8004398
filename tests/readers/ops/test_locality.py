"""readers.ops.locality: node_shuffle keeps each node on one block, shuffled anew every pass, exactly once overall."""
import os

import pytest

import batching
import readers
from readers.launch import worker_context
from tests.helpers.layouts import as_rank, flatten, numbers_to, real, set_env


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


def test_node_shuffle_needs_a_seed():
    """Review of issue 4: ranks must split one shuffled order."""
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
