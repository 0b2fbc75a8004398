"""readers.tokenized.rounds: assign_batches (the coordinator's split of a round) and round_share (one client's share)."""
import collections
import pickle

import numpy as np
import pytest
import toolz
from hypothesis import given, settings
from hypothesis import strategies as st

import batching
import readers
from readers.identity import fingerprint
from readers.ops.sharding import is_sharded
from readers.plans import Plan, index_chunks
from readers.stage import Stage
from readers.testing import assert_resumes_at_every_step, assert_same
from readers.tokenized.rounds import assign_batches, round_share
from readers.tokenized.schedule import BatchSchedule
from tests.helpers.layouts import as_rank
from tests.helpers.toys import tag_draw
from train import train

clients_of = st.one_of(st.sets(st.integers(-1000, 10 ** 6), min_size=1, max_size=40),
                       st.sets(st.text(max_size=6), min_size=1, max_size=40))
seeds = st.integers(0, 2 ** 64)


def check_cover(assignment: dict, data_index: int, size: int, clients: int) -> None:
    """The intervals cover [data_index, data_index + size) in the dict's order, sizes within one."""
    intervals = list(assignment.values())
    assert len(intervals) == min(clients, size)
    assert intervals[0][0] == data_index and intervals[-1][1] == data_index + size - 1
    for (_, end), (start, _) in zip(intervals, intervals[1:]):
        assert start == end + 1
    sizes = [end - start + 1 for start, end in intervals]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)  # the first size % clients take one more
    assert sizes.count(size // clients + 1) == size % clients


@settings(max_examples=200, deadline=None)
@given(clients=clients_of, data_index=st.integers(0, 10 ** 15), size=st.integers(1, 300), seed=seeds)
def test_assign_batches_covers_the_batch_exactly(clients, data_index, size, seed):
    assignment = assign_batches(clients, data_index=data_index, global_batch_size=size, seed=seed)
    check_cover(assignment, data_index, size, len(clients))
    assert set(assignment) <= set(clients)


@settings(max_examples=100, deadline=None)
@given(clients=clients_of, size=st.integers(1, 100), seed=seeds, order=st.randoms(use_true_random=False))
def test_assign_batches_same_seed_same_assignment_in_any_client_order(clients, size, seed, order):
    listed = sorted(clients)
    order.shuffle(listed)
    first = assign_batches(clients, data_index=5, global_batch_size=size, seed=seed)
    again = assign_batches(listed, data_index=5, global_batch_size=size, seed=seed)
    assert list(first.items()) == list(again.items())


def test_assign_batches_shuffles_clients_evenly_over_seeds():
    firsts = collections.Counter(next(iter(assign_batches(range(4), data_index=0, global_batch_size=8, seed=s)))
                                 for s in range(4000))
    assert sorted(firsts) == [0, 1, 2, 3]
    assert all(850 < n < 1150 for n in firsts.values()), firsts


def test_assign_batches_gives_more_to_the_first_clients_of_the_shuffled_order():
    # the reference's examples: 23 trainers share 384 (7 of 16, 16 of 17); 5 share 13 (3 of 3, 2 of 2)
    sizes = [e - s + 1 for s, e in assign_batches(range(23), data_index=0, global_batch_size=384, seed=9).values()]
    assert sizes == [17] * 16 + [16] * 7
    sizes = [e - s + 1 for s, e in assign_batches(list("abcde"), data_index=0, global_batch_size=13, seed=9).values()]
    assert sizes == [3, 3, 3, 2, 2]


@settings(max_examples=60, deadline=None)
@given(config=st.tuples(st.integers(1, 40), st.integers(1, 40), st.integers(0, 3000), st.integers(1, 16)),
       rounds=st.lists(st.tuples(st.sets(st.integers(0, 30), min_size=1, max_size=12), seeds), min_size=1,
                       max_size=25))
def test_rounds_with_clients_joining_and_leaving_see_every_index_once(config, rounds):
    schedule = BatchSchedule(*config)
    seen = []
    for step, (clients, seed) in enumerate(rounds):
        assignment = assign_batches(clients, data_index=schedule.data_index(step),
                                    global_batch_size=schedule.batch_size(step), seed=seed)
        seen += [i for start, end in assignment.values() for i in range(start, end + 1)]
    assert sorted(seen) == list(range(schedule.data_index(len(rounds))))


@pytest.mark.parametrize("clients, kwargs, error, message", [
    ([1, 2, 1], {}, ValueError, "client 1 is listed twice"),
    ([], {}, ValueError, "clients is empty"),
    ([1, "a"], {}, TypeError, "one sortable kind .* got int, str"),
    ([[1], [2]], {}, TypeError, "hashable ids .* got list"),
    ("abc", {}, TypeError, "clients must be a collection of client ids .* got str 'abc'"),
    ([1], {"seed": -1}, ValueError, "seed must be an int >= 0, .* got -1"),
    ([1], {"seed": None}, ValueError, "seed must be an int >= 0, .* got None"),
    ([1], {"global_batch_size": 0}, ValueError, "global_batch_size must be an int >= 1, got 0"),
    ([1], {"data_index": -3}, ValueError, "data_index must be an int >= 0, got -3"),
    ([1], {"data_index": 2 ** 63}, ValueError, "ends past sample"),
])
def test_assign_batches_refuses_what_cannot_be_split(clients, kwargs, error, message):
    with pytest.raises(error, match=message):
        assign_batches(clients, **{"data_index": 0, "global_batch_size": 4, "seed": 0, **kwargs})


# -- round_share --------------------------------------------------------------------------

def shuffled(n: int = 10, seed: int = 4):
    x = np.arange(2 * n).reshape(n, 2) / (2 * n)  # values in [0, 1), as a model wants them
    return readers.shuffle(readers.from_arrays(x, np.arange(n)), seed=seed)


def labels(entries) -> list[int]:
    return [int(label) for _, label in entries]


def test_round_shares_of_a_run_read_every_pass_once_in_its_order():
    data, n = shuffled(), 10
    schedule = BatchSchedule(start=3, end=7, warmup_tokens=40, seq_len=2)
    members = [{0, 1, 2}, {0, 2}, {5}, {0, 1, 2, 3, 4, 5, 6, 7, 8}, {1, 3}, {2, 9}, {4, 1, 7}, {0}, {3, 8}]
    samples = {}  # sample index of the run -> label read
    for step, clients in enumerate(members):
        assignment = assign_batches(clients, data_index=schedule.data_index(step),
                                    global_batch_size=schedule.batch_size(step), seed=100 + step)
        for client, (start, end) in assignment.items():
            got = labels(round_share(data, assignment, client)())
            assert len(got) == end - start + 1
            for p, label in zip(range(start, end + 1), got):
                assert p not in samples
                samples[p] = label
    total = schedule.data_index(len(members))
    assert sorted(samples) == list(range(total)) and total >= 3 * n
    for q in range(total // n):  # each whole pass: every sample once, in that pass's shuffled order
        assert [samples[p] for p in range(q * n, (q + 1) * n)] == labels(data.run(q))


@pytest.mark.parametrize("start, end", [(0, 9), (7, 12), (13, 38), (20, 20), (9, 10)])
def test_round_share_crosses_passes(start, end):
    data = shuffled()
    run = [label for q in range(4) for label in labels(data.run(q))]
    share = round_share(data, {"me": (start, end)}, "me")
    assert len(share) == end - start + 1
    assert labels(share()) == run[start:end + 1]
    assert labels(share()) == run[start:end + 1]  # every pass of a share reads the same samples


def test_round_share_batches_through_the_collated_fast_path():
    data = shuffled()
    share = round_share(data, {"a": (0, 7), "b": (8, 20)}, "b")
    fast = list(batching.collated(batching.batch(share, 4))())
    slow = [batching.collate(b) for b in batching.batch(share, 4)()]
    assert_same(fast, slow)
    assert [len(b[1]) for b in fast] == [4, 4, 4, 1]
    assert len(batching.batch(share, 4)) == 4


def test_round_share_counts_as_sharded_among_the_clients_with_work():
    assignment = assign_batches(range(5), data_index=0, global_batch_size=3, seed=0)  # 3 clients with work
    share = round_share(shuffled(), assignment, next(iter(assignment)))
    assert share.share() == (0, 3, False)
    assert is_sharded(share) and is_sharded(share, 3) and not is_sharded(share, 4)
    assert is_sharded(batching.batch(share, 2))
    last = round_share(shuffled(), assignment, list(assignment)[-1])
    assert last.share().index == 2


@pytest.mark.parametrize("make", [
    lambda: round_share(shuffled(), {"a": (3, 16)}, "a"),
    lambda: batching.batch(round_share(shuffled(), {"a": (3, 16)}, "a"), 3),
    lambda: batching.collated(batching.batch(round_share(shuffled(), {"a": (5, 27)}, "a"), 4)),
    lambda: round_share(readers.from_sequence(range(7)), {"a": (2, 12)}, "a"),
    lambda: round_share(readers.shard(shuffled(), 1, 2), {"a": (1, 8)}, "a"),  # a parent that counts others'
    lambda: readers.shuffle(round_share(shuffled(), {"a": (4, 15)}, "a"), 4, seed=2),
], ids=["share", "batched", "collated", "indexed", "over-a-shard", "buffer-shuffled"])
def test_round_share_resumes_mid_share(make):
    assert_resumes_at_every_step(make)


def test_round_share_state_refuses_another_clients_share():
    assignment = {"a": (0, 4), "b": (5, 9)}
    it = round_share(shuffled(), assignment, "a")()
    next(it)
    state = it.get_state()
    assert state["layout"] == [[0, 2]]
    other = round_share(shuffled(), assignment, "b")
    other.set_state(state)
    with pytest.raises(ValueError, match="saved with shards"):
        list(other())


def test_round_share_over_a_shard_reads_the_shards_passes():
    data = shuffled()
    half = readers.shard(data, 1, 2)
    run = [label for q in range(3) for label in labels(half.run(q))]
    assert labels(round_share(half, {"a": (3, 11)}, "a")()) == run[3:12]


def test_round_share_identity_is_its_samples():
    assignment = {"a": (0, 4), "b": (5, 9)}
    a, b = (fingerprint(round_share(shuffled(), assignment, c)) for c in "ab")
    assert a["pipeline"][0] == "round_share(samples 0..4)" and b["pipeline"][0] == "round_share(samples 5..9)"
    moved = fingerprint(round_share(shuffled(), {"x": (0, 4), "a": (5, 9)}, "x"))
    assert moved["pipeline"] == a["pipeline"]  # another client, another place in the round: the same data
    assert repr(round_share(shuffled(), assignment, "b")).splitlines()[0] == \
        "round_share(samples 5..9, index=1, count=2)"


def test_round_share_pickles():
    share = round_share(shuffled(), {"a": (6, 14)}, "a")
    assert labels(pickle.loads(pickle.dumps(share))()) == labels(share())


class _TwoSources(Stage):
    """A planned reader whose passes read from different sources (no reader of readerkit does)."""

    name = "two_sources"
    access = "plan"

    def __init__(self):
        super().__init__()
        self.sources = [readers.from_sequence("abc"), readers.from_sequence(["x", "y", "z"])]

    def __len__(self):
        return 3

    def _plan(self, pass_id, cursor):
        return Plan(self.sources[pass_id % 2], index_chunks(3, start=cursor))


def test_round_share_refuses_passes_of_different_sources():
    share = round_share(_TwoSources(), {"a": (1, 4)}, "a")
    assert list(round_share(_TwoSources(), {"a": (1, 2)}, "a")()) == ["b", "c"]
    with pytest.raises(ValueError, match="reads pass 1 from from_sequence"):
        list(share())


def numbers():
    yield from range(3)


@pytest.mark.parametrize("reader, assignment, client, error, message", [
    (numbers, {"a": (0, 1)}, "a", ValueError, "needs an indexed reader"),
    (readers.from_sequence([]), {"a": (0, 1)}, "a", ValueError, "has no entries"),
    (readers.from_sequence("ab"), [(0, 1)], "a", TypeError, "assignment must be the dict"),
    (readers.from_sequence("ab"), {"a": (0, 1)}, "b", ValueError, "client 'b' has no share .*its clients: 'a'"),
    (readers.from_sequence("ab"), {"a": (2, 1)}, "a", ValueError, r"client 'a' has interval \(2, 1\)"),
    (readers.from_sequence("ab"), {"a": (0, 1), "b": "x"}, "a", ValueError, "client 'b' has interval 'x'"),
    ([1, 2], {"a": (0, 1)}, "a", TypeError, "reader must be a zero-argument callable"),
])
def test_round_share_refuses_what_it_cannot_read(reader, assignment, client, error, message):
    with pytest.raises(error, match=message):
        round_share(reader, assignment, client)


class _Recorder:
    """A model that keeps the labels it was trained on."""

    def __init__(self):
        self.seen = []

    def step(self, batch):
        self.seen += batch["label"].tolist()
        return {}

    def evaluate(self, batch):
        return {}


def test_train_reads_each_ranks_whole_share_without_sharding_it_again():
    data = shuffled()
    assignment = assign_batches([0, 1], data_index=4, global_batch_size=13, seed=3)
    run = [label for q in range(2) for label in labels(data.run(q))]
    for rank, (start, end) in assignment.items():
        as_rank(rank, 2)
        model = _Recorder()
        train(round_share(data, assignment, rank), ["x", "label"], 4, 1, model=model)
        assert model.seen == run[start:end + 1]


def test_round_share_curries_for_toolz_pipe():
    share = readers.Curried(round_share)(assignment={"a": (2, 6)}, client="a")
    assert labels(toolz.pipe(shuffled(), share)()) == labels(round_share(shuffled(), {"a": (2, 6)}, "a")())


def test_a_share_that_crosses_passes_reads_each_pass_with_its_own_draws():
    """Review of issue 26: samples 10..13 of a run over 10 entries are pass 1's, and drew pass 0's draws."""
    data = readers.random_map(tag_draw, readers.from_sequence(list(range(10))), seed=5)
    run = [entry for p in range(3) for entry in data.run(p)]  # sample p of the run: entry p % 10 of pass p // 10
    for assignment, client in (({"a": (6, 13), "b": (14, 19)}, "a"), ({"a": (0, 9), "b": (10, 13)}, "b"),
                               ({"a": (3, 25)}, "a")):
        start, end = assignment[client]
        share = readers.round_share(data, assignment, client)
        assert list(share()) == run[start:end + 1]
        collated = list(batching.collated(batching.batch(share, 4))())
        assert [d for _, draws in collated for d in draws.tolist()] == [d for _, d in run[start:end + 1]]
        assert [i for *_, i in readers.with_index(share)()] == [p % 10 for p in range(start, end + 1)]
    assert_resumes_at_every_step(lambda: readers.round_share(data, {"a": (3, 25)}, "a"))
