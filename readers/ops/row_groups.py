"""shuffle_row_groups: a seeded shuffle that keeps row-group locality, for readers that decode rows in groups.

Pass k puts the groups (a Parquet file's row groups, an Arrow file's record
batches, or blocks of ``group_size`` rows) in a random order drawn from
(seed, k), cuts that order into windows of ``window`` groups, and shuffles
the rows of each window, each window from (seed, k, window). A pass so reads
every row once, a window's groups at a time, and a position in it is one
cursor: resume and shard (by stride, ``readers.shard``) keep it exactly once.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from readers.checks import check_reader, whole
from readers.errors import BadValue
from readers.graph import describe
from readers.ops.shuffling import check_seed
from readers.parents import as_indexed
from readers.plans import Plan
from readers.stage import Stage

__all__ = ["RowGroupShuffle", "shuffle_row_groups"]


def _rng(*key: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(list(key)))


class RowGroupShuffle(Stage):
    """Groups in a random order, rows shuffled within windows of ``window`` groups (see ``shuffle_row_groups``)."""

    name = "shuffle_row_groups"
    access = "plan"

    def __init__(self, source: Stage, window: int, seed: int, group_size: int | None):
        super().__init__(source)
        self.window, self.seed, self.group_size = window, seed, group_size

    def __len__(self) -> int:
        return len(self.parents[0])

    def _offsets(self, source: Stage) -> np.ndarray:
        n = len(source)
        if self.group_size is not None:
            return np.append(np.arange(0, n, self.group_size, dtype=np.int64), np.int64(n))
        offsets = np.asarray(source.groups(), np.int64)
        if offsets[-1] != n:
            raise BadValue(f"shuffle_row_groups: {describe(source)}'s groups end at row {int(offsets[-1])}, but it "
                           f"has {n} rows; its groups() must cover every row")
        return offsets

    def _plan(self, pass_id: int, cursor: int) -> Plan:
        source = self.parents[0].for_pass(pass_id)
        offsets = self._offsets(source)
        order = _rng(self.seed, pass_id).permutation(len(offsets) - 1)
        sizes = np.diff(offsets)[order]
        firsts = np.arange(0, len(order), self.window)
        ends = np.cumsum(np.add.reduceat(sizes, firsts)) if len(order) else np.zeros(0, np.int64)
        return Plan(source, self._windows(pass_id, cursor, offsets, order, ends))

    def _windows(self, pass_id: int, cursor: int, offsets: np.ndarray, order: np.ndarray,
                 ends: np.ndarray) -> Iterator[np.ndarray]:
        first = int(np.searchsorted(ends, cursor, side="right"))  # the window that holds position cursor
        for w in range(first, len(ends)):
            groups = order[w * self.window:(w + 1) * self.window]
            rows = np.concatenate([np.arange(offsets[g], offsets[g + 1], dtype=np.int64) for g in groups.tolist()])
            rows = rows[_rng(self.seed, pass_id, w).permutation(len(rows))]
            skip = cursor - (int(ends[w - 1]) if w else 0)
            yield rows[skip:] if w == first and skip > 0 else rows

    def _options(self) -> str:
        groups = "" if self.group_size is None else f", group_size={self.group_size}"
        return f"window={self.window}{groups}, seed={self.seed}"


def shuffle_row_groups(reader: Any, *, window: int = 4, seed: int | None = None,
                       group_size: int | None = None) -> RowGroupShuffle:
    """Shuffle an indexed reader group by group: groups in a random order, rows shuffled within ``window`` groups.

    The groups are the reader's own (``readers.parquet``'s row groups,
    ``readers.arrow``'s record batches, ``readers.from_hf``'s table chunks),
    or consecutive blocks of ``group_size`` rows of any indexed reader. Each
    pass orders the groups anew from (seed, pass) and shuffles rows within
    each run of ``window`` consecutive groups of that order, so a pass reads
    each group once, ``window`` at a time. Resume, ``shard`` and process
    workers keep it exactly once, as the global shuffle.

    When to use it instead of ``readers.shuffle(r, seed=...)``: the global
    shuffle draws each sample from anywhere, so once the decoded data is
    larger than the reader's cache (``cache_bytes``), nearly every sample
    decodes a whole row group. This one decodes each group once a pass. The
    price is randomness: a minibatch holds rows of ``window`` groups only, so
    rows written in an order (by class, by time) should be spread across row
    groups, or ``window`` raised; with data that fits the cache, prefer the
    global shuffle.

    >>> from readers import from_sequence
    >>> r = shuffle_row_groups(from_sequence(range(12)), window=2, seed=0, group_size=3)
    >>> first, second = list(r()), list(r())
    >>> sorted(first) == list(range(12)), first != second
    (True, True)
    >>> [len({x // 3 for x in first[k:k + 6]}) for k in (0, 6)]  # 6 rows at a time: of 2 groups of 3
    [2, 2]

    See Also:
        readers.shuffle: the global shuffle; readers.parquet
    """
    check_reader(reader)
    indexed = as_indexed(reader)
    if indexed is None:
        raise BadValue(f"shuffle_row_groups needs an indexed reader (len and [i]), and {describe(reader)!r} is "
                       "not one; for a stream, use shuffle(reader, buf_size=...)")
    window = whole(window, "window", "shuffle_row_groups", 1)
    if group_size is not None:
        group_size = whole(group_size, "group_size", "shuffle_row_groups", 1)
    elif indexed.groups() is None:
        raise BadValue(f"shuffle_row_groups: {describe(reader)!r} has no groups of rows (only readers.parquet, "
                       "readers.arrow, readers.from_hf and readers.tokens over URLs do); give group_size=N to shuffle "
                       "blocks of N rows")
    return RowGroupShuffle(indexed, window, check_seed(seed, "shuffle_row_groups"), group_size)
