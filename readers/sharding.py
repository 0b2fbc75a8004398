"""Sharding by global worker: shard and node_shuffle (the worker comes from ``readers.launch``).

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

from readers.base import (
    IndexedReader,
    Plan,
    Stage,
    advance,
    append_column,
    as_indexed,
    check_reader,
    close_iterator,
    describe,
    is_planned,
    iterate,
    open_plan,
    rechunk,
    walk,
    whole,
    within,
)
from readers.launch import worker_info
from readers.plans import CHUNK
from readers.shuffling import GlobalShuffle, check_seed

__all__ = ["check_equalize", "follows_workers", "is_sharded", "node_shuffle", "shard"]

EQUALIZE = (None, "pad", "drop")


def check_equalize(equalize: Any, where: str) -> str | None:
    """``equalize`` when it is None, "pad" or "drop"; else a ValueError naming ``where``.

    >>> check_equalize("pad", "shard")
    'pad'
    >>> check_equalize("even", "shard")
    Traceback (most recent call last):
    ...
    ValueError: shard: equalize must be None, 'pad' or 'drop', got 'even'
    """
    if equalize not in EQUALIZE:
        raise ValueError(f"{where}: equalize must be None, 'pad' or 'drop', got {equalize!r}")
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
    split = 1
    for stage in walk(reader):
        if getattr(stage, "shards", False):
            if total is None or getattr(stage, "count", None) is None:
                return True
            split *= stage.count
    return total is not None and split >= total


def follows_workers(reader: Any) -> bool:
    """Whether a shard stage of ``reader`` takes its index from the worker it runs in.

    >>> from readers import from_sequence
    >>> follows_workers(shard(from_sequence("ab"))), follows_workers(shard(from_sequence("ab"), 0, 2))
    (True, False)
    """
    return any(getattr(s, "shards", False) and getattr(s, "count", None) is None for s in walk(reader))


def _check_seeds(shard: Any) -> None:
    """Ranks split one order only if they drew it alike: refuse a seed each process drew for itself."""
    for stage in walk(shard.parents[0]):
        if getattr(stage, "seed_drawn", False):
            raise ValueError(
                f"{describe(stage)} drew its seed from the operating system, so each of this job's processes "
                f"shuffles differently and {describe(shard)} would give some samples twice and others never; "
                "give the shuffle a seed, e.g. shuffle(reader, seed=0)")


# -- shard ---------------------------------------------------------------------------


class _Weighted(IndexedReader):
    """A plan source whose entries gain a weight column; index -1 - i is a zero-weight copy of i."""

    name = "weighted"

    def __init__(self, source: IndexedReader):
        super().__init__(source)
        self.source = source

    @staticmethod
    def _split(indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        real = indices >= 0
        return np.where(real, indices, -1 - indices), real

    def _get(self, i: int) -> tuple:
        return append_column(self.source._get(i if i >= 0 else -1 - i), 1.0 if i >= 0 else 0.0)

    def iter_gather(self, indices: np.ndarray) -> Iterator:
        idx, real = self._split(indices)
        return map(append_column, self.source.iter_gather(idx), real.astype(float).tolist())

    def gather_columns(self, indices: np.ndarray) -> tuple | None:
        idx, real = self._split(indices)
        columns = self.source.gather_columns(idx)
        if columns is None:
            return None
        return (columns if isinstance(columns, tuple) else (columns,)) + (real.astype(np.float64),)

    def sample_ids(self, indices: np.ndarray) -> np.ndarray:
        return self.source.sample_ids(self._split(indices)[0])


def _stride_chunks(chunks: Iterator[np.ndarray], k: int, count: int, equalize: str | None,
                   target: int | None, pad_index: Callable[[], int] | None) -> Iterator[np.ndarray]:
    """Positions k, k + count, ... of a chunk stream; pads are -1 - (the pass's first index).

    ``pad_index`` finds that index for a pass resumed past it (None: it is the first one read).
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
                    target: int | None, pad_entry: Callable[[], Any] | None) -> Iterator:
    """Entries k, k + count, ... of a stream, read in groups of ``count``; pads copy the pass's first entry.

    ``pad_entry`` reads that entry for a pass resumed past it (None: it is the first one read).
    """
    pad = equalize == "pad"
    given, first = 0, []  # first: the entry pads copy, once known

    def padding() -> tuple:
        if not first:
            first.append(pad_entry())
        return append_column(first[0], 0.0)

    while target is None or given < target:
        group = [e for _, e in zip(range(count), entries)]
        if not group:
            break
        if pad_entry is None and not first:
            first.append(group[0])
        if k < len(group) and (len(group) == count or equalize != "drop" or target is not None):
            yield append_column(group[k], 1.0) if pad else group[k]
        elif pad and target is None:
            yield padding()
        else:
            continue
        given += 1
        if len(group) < count:
            break
    while pad and target is not None and given < target and (first or pad_entry is not None):
        given += 1
        yield padding()


def _first_index(reader: Any, pass_id: int) -> int:
    """The first sample index of pass ``pass_id`` of a planned reader (its pads copy it)."""
    for chunk in open_plan(reader, pass_id).chunks:
        if len(chunk):
            return int(chunk[0])
    raise ValueError(f"shard: pass {pass_id} of {describe(reader)} is empty, so it has no entry to pad with")


def _first_entry(reader: Any, pass_id: int) -> Any:
    """The first entry of pass ``pass_id`` of a stream, read afresh (its pads copy it)."""
    it = iterate(reader, pass_id)
    try:
        for entry in it:
            return entry
    finally:
        close_iterator(it)
    raise ValueError(f"shard: pass {pass_id} of {describe(reader)} is empty, so it has no entry to pad with")


class Shard(Stage):
    """One shard of a pipeline: positions index, index + count, ... of every pass."""

    name = "shard"
    shards = True

    def __init__(self, reader: Any, index: int | None, count: int | None, equalize: str | None,
                 scope: str = "global", span: Any = None):
        super().__init__(reader)
        self.index, self.count, self.equalize, self.scope, self.span = index, count, equalize, scope, span

    def _resolved(self) -> tuple[int, int]:
        info = worker_info()
        if info.world_size > 1:
            _check_seeds(self)
        if self.count is not None:
            return self.index, self.count
        if self.scope == "local":
            wpp = info.workers_per_process
            return info.local_rank * wpp + info.worker_id, info.local_world_size * wpp
        return info.global_id, info.total

    def _layout(self) -> list:
        """This shard as a state's layout records it (see ``readers.state.fixed_layout``)."""
        return list(self._resolved())

    def _target(self, cursor: int) -> int | None:
        """For a node's workers: equal counts over the whole job, not just this node."""
        if self.span is None or self.equalize is None:
            return None
        n, nodes = len(self.span.source), self.span._resolved()[1]
        info = worker_info()
        if info.world_size != nodes * info.local_world_size:
            raise ValueError(f"node_shuffle(equalize={self.equalize!r}) needs the same number of processes on every "
                             f"node to give every rank equal steps, and this job has {info.world_size} processes "
                             f"over {nodes} nodes ({info.local_world_size} on this one); give every node as many, "
                             "or use equalize=None")
        total = nodes * self._resolved()[1]
        rest = max(0, n - nodes * cursor)
        return -(-rest // total) if self.equalize == "pad" else rest // total

    def _planned(self) -> bool:
        return is_planned(self.parents[0])

    def _native(self) -> bool:
        return False

    def __len__(self) -> int:
        k, count = self._resolved()
        n = len(self.parents[0])
        target = self._target(0)
        if target is not None:
            return target
        base, rem = divmod(n, count)
        return base + (k < rem if self.equalize is None else rem > 0 if self.equalize == "pad" else 0)

    def _advance(self, start: int, consumed: int) -> int:
        parent = self.parents[0]
        cursor = advance(parent, start, consumed * self._resolved()[1])
        # not for a node's block: blocks differ in size, and the pads still due on this node
        # (``_target``) follow from the steps taken, which a clamped cursor no longer tells
        return cursor if self.span is not None else within(parent, cursor)

    def _plan(self, pass_id: int, cursor: int = 0) -> Plan:
        k, count = self._resolved()
        plan = open_plan(self.parents[0], pass_id, cursor)
        source = _Weighted(plan.source) if self.equalize == "pad" else plan.source
        if count == 1 and self.span is None:
            return Plan(source, plan.chunks)
        # a pad copies the pass's first entry, whatever the cursor, so a resumed pass pads alike
        pad_index = functools.partial(_first_index, self.parents[0], pass_id) if cursor else None
        return Plan(source, _stride_chunks(plan.chunks, k, count, self.equalize, self._target(cursor), pad_index))

    def _stream(self, pass_id: int) -> Iterator:
        return self._seek(pass_id, 0)

    def _seek(self, pass_id: int, cursor: int) -> Iterator:
        k, count = self._resolved()
        parent = self.parents[0]
        below = getattr(parent, "per_entry", None)
        if self.span is None and count > 1 and (below == "same" or below == "map" and self.equalize != "pad"):
            # Split below a stage that takes entries one by one (a map, a prefetch), so that it
            # works only on this shard's entries. Not below a map when padding: the map would
            # see the weight column.
            inner = Shard(parent.parents[0], k, count, self.equalize)
            return iterate(parent._with_parent(inner), pass_id, cursor)
        entries = iterate(parent, pass_id, cursor)
        if self.equalize is None and self.span is None:
            return itertools.islice(entries, k, None, count)  # each entry as soon as it is read
        pad_entry = None
        if cursor and self.equalize == "pad":
            pad_entry = functools.partial(_first_entry, self.parents[0], pass_id)
        return _stride_entries(entries, k, count, self.equalize, self._target(cursor), pad_entry)

    def _options(self) -> str:
        where = (f"index={self.index}, count={self.count}" if self.count is not None
                 else "this node's workers" if self.scope == "local" else "global worker")
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
        raise ValueError(f"shard: give both index and count, or neither (for this global worker); got "
                         f"index={index!r}, count={count!r}")
    if count is not None:
        count = whole(count, "count", "shard", 1, floats=False)
        index = whole(index, "index", "shard", floats=False)
        if index >= count:
            raise ValueError(f"shard: index {index} is not below count={count}; shards are numbered 0..{count - 1}")
    return Shard(reader, index, count, equalize)


class _NodeBlock(IndexedReader):
    """This node's fixed, contiguous block of an indexed reader: the same samples every pass."""

    name = "node_block"
    shards = True

    def __init__(self, source: IndexedReader):
        super().__init__(source)
        self.source = source

    def _resolved(self) -> tuple[int, int]:
        info = worker_info()
        return info.node_rank, info.num_nodes

    def _layout(self) -> list:
        # every node's ranks take the same steps through a block of their own, so a position
        # counts alike on each node: it depends on the number of nodes, not on which node
        return [None, self._resolved()[1]]

    def _bounds(self) -> tuple[int, int]:
        node, nodes = self._resolved()
        n = len(self.source)
        return node * n // nodes, (node + 1) * n // nodes

    def __len__(self) -> int:
        lo, hi = self._bounds()
        return hi - lo

    def _get(self, i: int) -> Any:
        return self.source._get(self._bounds()[0] + i)

    def iter_gather(self, indices: np.ndarray) -> Iterator:
        return self.source.iter_gather(indices + self._bounds()[0])

    def gather_columns(self, indices: np.ndarray) -> Any:
        return self.source.gather_columns(indices + self._bounds()[0])

    def sample_ids(self, indices: np.ndarray) -> np.ndarray:
        return self.source.sample_ids(indices + self._bounds()[0])

    def _options(self) -> str:
        return "this node's block"


def node_shuffle(reader: Any, seed: int, *, equalize: str | None = None) -> Shard:
    """A cache-friendly shuffle: each node keeps one fixed block of samples and shuffles inside it.

    With ``node_rank`` and ``num_nodes`` from ``worker_info()``, node n keeps
    the contiguous block ``[n * N // num_nodes, (n + 1) * N // num_nodes)`` in
    every pass, so it reads (and caches) only that block; each pass shuffles
    the block anew, and the node's local workers (``local_rank`` and its
    DataLoader or readerkit workers) split it with ``shard``. Over all nodes
    each pass is still exactly once, and ``equalize`` evens the counts over the
    whole job. The price is randomness: a sample only ever shares minibatches
    with samples of its own node's block, and a node's gradient steps see a
    fixed 1/num_nodes of the data, so with few nodes or a block-ordered source
    (sorted by class, by time) it differs from a global shuffle; a global
    ``shuffle`` followed by ``shard`` has no such bias but reads from all the data.
    A position in it resumes on the same number of nodes only.

    >>> import os
    >>> from readers import from_sequence
    >>> os.environ.update(RANK="1", WORLD_SIZE="2", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    >>> r = node_shuffle(from_sequence(range(10)), seed=0)
    >>> first, second = list(r()), list(r())
    >>> sorted(first), sorted(second) == sorted(first), first != second
    ([5, 6, 7, 8, 9], True, True)
    >>> for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
    ...     del os.environ[name]
    """
    check_reader(reader)
    indexed = as_indexed(reader)
    if indexed is None:
        raise ValueError(f"node_shuffle needs an indexed reader (len and [i]), and {describe(reader)!r} is not "
                         "one; for a stream, use shard() and shuffle(buf_size=...) after it")
    check_equalize(equalize, "node_shuffle")
    if seed is None:
        raise ValueError("node_shuffle needs a seed, the same in every process: the ranks of a node split "
                         "one shuffled order, e.g. node_shuffle(reader, seed=0)")
    block = _NodeBlock(indexed)
    return Shard(GlobalShuffle(block, check_seed(seed, "node_shuffle")), None, None, equalize, "local", block)
