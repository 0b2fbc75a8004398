"""Sharding by global worker: shard (the worker comes from ``readers.launch``; node_shuffle is ``locality``'s).

A job is ``world_size`` processes (ranks), each with ``workers`` local workers
(readerkit's own worker processes or threads, or a PyTorch DataLoader's); the
worker with local id w in rank r has global id ``w + workers * r`` out of
``total = workers * world_size``. ``shard`` keeps the entries of one global
worker: entry i of a pass goes to shard ``i % total``. Uneven shards are made
even with ``equalize``, so every worker takes the same number of steps and no
collective operation waits forever on a worker that ran out of data.
"""
from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from readers.checks import check_reader, whole
from readers.errors import BadValue
from readers.graph import Node, Share, describe, walk
from readers.launch import worker_info
from readers.ops.maps import append_column
from readers.parents import access_of, iterate, open_plan
from readers.passes import close_iterator
from readers.plans import CHUNK, Plan, rechunk
from readers.stage import IndexedReader, Stage

__all__ = ["check_equalize", "follows_workers", "is_sharded", "pad_with_weights", "shard", "stride_chunks",
           "strided_plan"]

EQUALIZE = (None, "pad", "drop")


def check_equalize(equalize: Any, where: str) -> str | None:
    """``equalize`` when it is None, "pad" or "drop"; else a ValueError naming ``where``.

    >>> check_equalize("pad", "shard")
    'pad'
    >>> check_equalize("even", "shard")
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: shard: equalize must be None, 'pad' or 'drop', got 'even'
    """
    if equalize not in EQUALIZE:
        raise BadValue(f"{where}: equalize must be None, 'pad' or 'drop', got {equalize!r}")
    return equalize


def is_sharded(reader: Any, total: int | None = None) -> bool:
    """Whether a shard stage splits ``reader``'s passes; with ``total``, whether it splits them that many ways.

    A shard that follows the workers (index and count from ``worker_info``)
    splits any number of ways; explicit shards, the product of their counts.

    >>> from readers import from_sequence
    >>> is_sharded(from_sequence("ab")), is_sharded(shard(from_sequence("ab")), 8)
    (False, True)
    >>> is_sharded(shard(from_sequence("ab"), 0, 2), 2), is_sharded(shard(from_sequence("ab"), 0, 2), 4)
    (True, False)
    """
    ways = 1
    for split in _splits(reader):
        if total is None or split.follows_workers:
            return True
        ways *= split.count
    return total is not None and ways >= total


def follows_workers(reader: Any) -> bool:
    """Whether a shard stage of ``reader`` takes its index from the worker it runs in.

    >>> from readers import from_sequence
    >>> follows_workers(shard(from_sequence("ab"))), follows_workers(shard(from_sequence("ab"), 0, 2))
    (True, False)
    """
    return any(split.follows_workers for split in _splits(reader))


def _splits(reader: Any) -> Iterator[Share]:
    """The splits the stages of ``reader`` declare, top down."""
    for stage in walk(reader):
        split = stage.share() if isinstance(stage, Node) else None
        if split is not None:
            yield split


def _check_seeds(shard: Any) -> None:
    """Ranks split one order only if they drew it alike: refuse a seed each process drew for itself."""
    for stage in walk(shard.parents[0]):
        if isinstance(stage, Node) and stage.unrepeatable:
            raise BadValue(
                f"{describe(stage)} drew its seed from the operating system, so each of this job's processes "
                f"shuffles differently and {describe(shard)} would give some samples twice and others never; "
                "give the shuffle a seed, e.g. shuffle(reader, seed=0)")


# -- shard ---------------------------------------------------------------------------


class _Weighted(IndexedReader):
    """A plan source whose entries gain a weight column; index -1 - i is a zero-weight copy of i."""

    name = "weighted"

    def __len__(self) -> int:
        return len(self.parents[0])

    @staticmethod
    def _split(indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        real = indices >= 0
        return np.where(real, indices, -1 - indices), real

    def _get(self, i: int) -> tuple:
        return append_column(self.parents[0].at(i), 1.0)

    def gather(self, indices: np.ndarray) -> Iterator:
        idx, real = self._split(indices)
        return map(append_column, self.parents[0].gather(idx), real.astype(float).tolist())

    def gather_columns(self, indices: np.ndarray) -> tuple | None:
        idx, real = self._split(indices)
        columns = self.parents[0].gather_columns(idx)
        if columns is None:
            return None
        return (columns if isinstance(columns, tuple) else (columns,)) + (real.astype(np.float64),)

    def sample_ids(self, indices: np.ndarray) -> np.ndarray:
        return self.parents[0].sample_ids(self._split(indices)[0])


def pad_with_weights(source: Stage) -> Stage:
    """A plan source for a padding split: entries gain a weight column, and index -1 - i reads i with weight 0.

    >>> from readers import from_sequence
    >>> list(pad_with_weights(from_sequence("ab")).gather(np.array([1, -1])))
    [('b', 1.0), ('a', 0.0)]
    """
    return _Weighted(source)


def stride_chunks(chunks: Iterator[np.ndarray], k: int, count: int, equalize: str | None,
                   target: int | None, pad_index: Callable[[], int] | None) -> Iterator[np.ndarray]:
    """Positions k, k + count, ... of a chunk stream; pads are -1 - (the pass's first index).

    ``equalize`` evens the shards' counts ("pad" adds pads, "drop" drops a last short round);
    ``target``, when given, is the exact count this shard gives, padded up to it.
    ``pad_index`` finds the first index for a pass resumed past it (None: it is the first one read).

    >>> [c.tolist() for c in stride_chunks(iter([np.arange(10, 17)]), 1, 3, None, None, None)]
    [[11, 14]]
    >>> [c.tolist() for c in stride_chunks(iter([np.arange(10, 17)]), 1, 3, "pad", None, None)]
    [[11, 14, -11]]
    """
    first, given = None, 0

    def pad() -> int:
        return -1 - (first if pad_index is None else pad_index())

    for block in rechunk(chunks, count * max(1, CHUNK // count)):
        if first is None:
            first = int(block[0])
        cut = len(block) - len(block) % count
        mine = block[k:cut:count]
        rest = block[cut:]
        if len(rest) and equalize != "drop" or target is not None:
            if k < len(rest):
                mine = np.append(mine, rest[k])
            elif len(rest) and equalize == "pad" and target is None:
                mine = np.append(mine, pad())
        if target is not None:
            mine = mine[:max(0, target - given)]
        given += len(mine)
        if len(mine):
            yield mine
    if target is not None and given < target and (first is not None or pad_index is not None):
        yield np.full(target - given, pad(), dtype=np.int64)


def _stride_entries(entries: Iterator, k: int, count: int, equalize: str | None,
                    pad_entry: Callable[[], Any] | None) -> Iterator:
    """Entries k, k + count, ... of a stream, read in groups of ``count``; pads copy the pass's first entry.

    ``pad_entry`` reads that entry for a pass resumed past it (None: it is the first one read).
    """
    pad = equalize == "pad"
    first = []  # the entry pads copy, once known
    while group := list(itertools.islice(entries, count)):
        if pad_entry is None and not first:
            first.append(group[0])
        if k < len(group) and (len(group) == count or equalize != "drop"):
            yield append_column(group[k], 1.0) if pad else group[k]
        elif pad:
            yield append_column(first[0] if first else pad_entry(), 0.0)
        if len(group) < count:
            return


def strided_plan(reader: Any, pass_id: int, cursor: int, k: int, count: int, equalize: str | None,
                 target: int | None = None) -> Plan:
    """Shard ``k`` of ``count`` of the plan of pass ``pass_id`` of ``reader`` from ``cursor`` (see ``stride_chunks``).

    >>> from readers import from_sequence
    >>> plan = strided_plan(from_sequence("abcdefg"), 0, 0, 2, 3, "pad")
    >>> list(plan.entries())
    [('c', 1.0), ('f', 1.0), ('a', 0.0)]
    """
    plan = open_plan(reader, pass_id, cursor)
    source = pad_with_weights(plan.source) if equalize == "pad" else plan.source
    if count == 1 and target is None:
        return Plan(source, plan.chunks)
    # a pad copies the pass's first entry, whatever the cursor, so a resumed pass pads alike
    pad_index = functools.partial(first_index, reader, pass_id) if cursor else None
    return Plan(source, stride_chunks(plan.chunks, k, count, equalize, target, pad_index))


def first_index(reader: Any, pass_id: int) -> int:
    """The first sample index of pass ``pass_id`` of a planned reader (its pads copy it)."""
    for chunk in open_plan(reader, pass_id, 0).chunks:
        if len(chunk):
            return int(chunk[0])
    raise BadValue(f"shard: pass {pass_id} of {describe(reader)} is empty, so it has no entry to pad with")


def _first_entry(reader: Any, pass_id: int) -> Any:
    """The first entry of pass ``pass_id`` of a stream, read afresh (its pads copy it)."""
    it = iterate(reader, pass_id)
    try:
        for entry in it:
            return entry
    finally:
        close_iterator(it)
    raise BadValue(f"shard: pass {pass_id} of {describe(reader)} is empty, so it has no entry to pad with")


class Shard(Stage):
    """One shard of a pipeline: positions index, index + count, ... of every pass (see ``shard``)."""

    name = "shard"

    def __init__(self, reader: Any, index: int | None, count: int | None, equalize: str | None):
        super().__init__(reader)
        self.index, self.count, self.equalize = index, count, equalize
        self._below: dict = {}  # (id(parent), k, count): (parent, its copy over its share), see _split_below

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_below": {}}

    @property
    def access(self) -> str:
        return "stream" if access_of(self.parents[0]) == "stream" else "plan"

    def _split_below(self, parent: Node, k: int, count: int) -> Node:
        """``parent`` reading shard k of ``count`` of its own parent: the same copy every pass, so a
        stage in it that keeps something between passes (``prefetch(persistent=True)``'s workers) keeps it."""
        key = (id(parent), k, count)
        kept = self._below.get(key)
        if kept is None or kept[0] is not parent:
            kept = self._below[key] = (parent, parent.with_parents(Shard(parent.parents[0], k, count, self.equalize)))
        return kept[1]

    @property
    def positions(self) -> int:
        return self.share().count  # its cursor is the parent's: count positions per entry

    def share(self) -> Share:
        if self.count is not None:
            return Share(self.index, self.count, False)
        info = worker_info()
        return Share(info.global_id, info.total, True)

    def _resolved(self) -> tuple[int, int]:
        """(index, count) for a pass, once the seeds are checked: ranks split one shared order."""
        if worker_info().world_size > 1:
            _check_seeds(self)
        split = self.share()
        return split.index, split.count

    def __len__(self) -> int:
        k, count = self._resolved()
        base, rem = divmod(len(self.parents[0]), count)
        return base + (k < rem if self.equalize is None else rem > 0 if self.equalize == "pad" else 0)

    def _plan(self, pass_id: int, cursor: int) -> Plan:
        k, count = self._resolved()
        return strided_plan(self.parents[0], pass_id, cursor, k, count, self.equalize)

    def _seek(self, pass_id: int, cursor: int) -> Iterator:
        k, count = self._resolved()
        parent = self.parents[0]
        below = parent.per_entry if isinstance(parent, Node) and parent.positions == 1 else None
        if count > 1 and (below == "same" or below == "map" and self.equalize != "pad"):
            # Split below a stage that takes entries one by one (a map, a prefetch), so that it
            # works only on this shard's entries. Not below a map when padding: the map would
            # see the weight column.
            return iterate(self._split_below(parent, k, count), pass_id, cursor)
        entries = iterate(parent, pass_id, cursor)
        if self.equalize is None:
            return itertools.islice(entries, k, None, count)  # each entry as soon as it is read
        pad_entry = None
        if cursor and self.equalize == "pad":
            pad_entry = functools.partial(_first_entry, self.parents[0], pass_id)
        return _stride_entries(entries, k, count, self.equalize, pad_entry)

    def _options(self) -> str:
        where = f"index={self.index}, count={self.count}" if self.count is not None else "global worker"
        return where + (f", equalize={self.equalize!r}" if self.equalize else "")


def shard(reader: Any, index: int | None = None, count: int | None = None, *,
          equalize: str | None = None) -> Shard:
    """Keep shard ``index`` of ``count``: entry i of each pass goes to shard ``i % count``.

    Without ``index`` and ``count`` the shard is this global worker's
    (``worker_info()``), looked up as each pass starts, so a reader built in
    the main process shards correctly inside DataLoader or readerkit workers,
    and a job that changes size between passes repartitions the next pass.
    An index-addressed pipeline is split by index arithmetic and reads only its
    own samples; a stream is read whole and every ``count``-th entry kept.
    With N entries, shards get N // count or one more; ``equalize="drop"`` gives
    every shard N // count, ``"pad"`` gives every shard ceil(N / count), and
    then every entry gains a last column, its weight: 1.0, or 0.0 for the
    padding (a copy of a real entry), which the numpy models and a weighted
    loss ignore. Put ``shard`` after the shuffle so one seed orders the whole
    pass: then a position saved on one shard layout resumes on any other.

    >>> from readers import from_sequence, shuffle
    >>> [list(shard(from_sequence(range(7)), i, 3)()) for i in range(3)]
    [[0, 3, 6], [1, 4], [2, 5]]
    >>> [list(shard(from_sequence(range(7)), i, 3, equalize="drop")()) for i in range(3)]
    [[0, 3], [1, 4], [2, 5]]
    >>> list(shard(from_sequence(range(7)), 2, 3, equalize="pad")())
    [(2, 1.0), (5, 1.0), (0, 0.0)]
    >>> whole_pass = shuffle(from_sequence(range(10)), seed=0)
    >>> parts = [list(shard(whole_pass, i, 4)()) for i in range(4)]
    >>> sorted(sum(parts, [])) == list(range(10))
    True
    """
    check_reader(reader)
    check_equalize(equalize, "shard")
    if (index is None) != (count is None):
        raise BadValue(f"shard: give both index and count, or neither (for this global worker); got "
                       f"index={index!r}, count={count!r}")
    if count is not None:
        count = whole(count, "count", "shard", 1, floats=False)
        index = whole(index, "index", "shard", floats=False)
        if index >= count:
            raise BadValue(f"shard: index {index} is not below count={count}; shards are numbered 0..{count - 1}")
    return Shard(reader, index, count, equalize)
