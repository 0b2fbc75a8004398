"""readers.ops.row_groups: shuffle_row_groups keeps row-group locality, seeded, exactly once under shard and resume."""
import numpy as np
import pytest

import batching
import readers
from readers.testing import assert_resumes_at_every_step, assert_seeded_passes


class Grouped(readers.IndexedReader):
    """Rows 0..n-1 in groups of uneven sizes, as a Parquet file's row groups would be."""

    name = "grouped"

    def __init__(self, sizes):
        super().__init__()
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

    def __len__(self):
        return int(self.offsets[-1])

    def _get(self, i):
        return i

    def groups(self):
        return self.offsets


SIZES = [5, 3, 7, 0, 4, 6, 2]  # 27 rows, an empty group among them


def group_of(offsets, i):
    return int(np.searchsorted(offsets, i, side="right")) - 1


@pytest.mark.parametrize("window", [1, 2, 3, 10])
def test_each_window_of_a_pass_holds_rows_of_window_groups_only(window):
    source = Grouped(SIZES)
    r = readers.shuffle_row_groups(source, window=window, seed=4)
    for _ in range(3):
        rows = list(r())
        assert sorted(rows) == list(range(27))
        groups = [group_of(source.offsets, i) for i in rows]
        seen = []
        for g in groups:  # the groups in the order the pass first meets them
            if g not in seen:
                seen.append(g)
        for k in range(0, len(seen), window):  # a window's rows all come before the next window's
            members = set(seen[k:k + window])
            positions = [p for p, g in enumerate(groups) if g in members]
            assert positions == list(range(min(positions), max(positions) + 1))


def test_a_map_keeps_the_row_groups_of_its_reader():
    """Regression (issue 28's example): shuffle_row_groups over map_readers(f, parquet(...)) said the map had no
    groups of rows; a map reads row i of its reader for its entry i, so the groups are its reader's."""
    source = Grouped(SIZES)
    mapped = readers.map_readers(lambda i: -i, source)
    assert np.array_equal(mapped.groups(), source.offsets)
    plain = [-i for i in readers.shuffle_row_groups(source, window=2, seed=4)()]
    assert list(readers.shuffle_row_groups(mapped, window=2, seed=4)()) == plain
    assert readers.map_readers(lambda a, b: a, source, source).groups() is None  # a zip: no one reader's groups


def test_passes_differ_by_seed_and_pass_and_repeat_for_the_same():
    def make(seed=0):
        return readers.shuffle_row_groups(Grouped(SIZES), window=2, seed=seed)

    a = make()
    first, second = list(a()), list(a())
    assert first != second and list(make()()) == first and list(make(1)()) != first
    assert_seeded_passes(make)


@pytest.mark.parametrize("window", [1, 2, 4])
def test_resume_and_three_shards_keep_each_row_once(window):
    def make():
        return readers.shuffle_row_groups(Grouped(SIZES), window=window, seed=7)

    assert_resumes_at_every_step(make)
    shards = [list(readers.shard(make(), k, 3)()) for k in range(3)]
    assert sorted(sum(shards, [])) == list(range(27))
    for k in range(3):
        assert_resumes_at_every_step(lambda k=k: readers.shard(make(), k, 3), max_steps=12)
    batches = batching.batch(make(), 4)
    assert_resumes_at_every_step(lambda: batching.batch(make(), 4), max_steps=10)
    assert sorted(x for b in batches() for x in b) == list(range(27))


def test_process_workers_keep_each_row_once():
    r = readers.prefetch(readers.shuffle_row_groups(readers.from_sequence(range(40)), group_size=6, seed=1), 3,
                         mode="process")
    assert sorted(r()) == list(range(40))


def test_group_size_makes_groups_of_any_indexed_reader():
    r = readers.shuffle_row_groups(readers.from_sequence(range(10)), window=1, seed=0, group_size=4)
    for _ in range(3):  # with windows of one group: blocks 0-3, 4-7 and 8-9, each whole, in some order
        blocks = [x // 4 for x in r()]
        runs = [b for k, b in enumerate(blocks) if k == 0 or blocks[k - 1] != b]
        assert sorted(runs) == [0, 1, 2] and sorted(blocks) == [0] * 4 + [1] * 4 + [2] * 2
    assert repr(r).startswith("shuffle_row_groups(window=1, group_size=4, seed=0)")


@pytest.mark.parametrize("call, error, match", [
    (lambda: readers.shuffle_row_groups(readers.from_sequence(range(4)), seed=0), ValueError,
     "has no groups of rows .* give group_size=N"),
    (lambda: readers.shuffle_row_groups(lambda: iter(range(4)), seed=0, group_size=2), ValueError,
     "needs an indexed reader"),
    (lambda: readers.shuffle_row_groups(Grouped(SIZES), window=0, seed=0), ValueError, "window must be an int >= 1"),
    (lambda: readers.shuffle_row_groups(Grouped(SIZES), seed=-1), ValueError, "seed must be an int >= 0"),
])
def test_shuffle_row_groups_refuses_bad_arguments_at_once(call, error, match):
    with pytest.raises(error, match=match):
        call()
