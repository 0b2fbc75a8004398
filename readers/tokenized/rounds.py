"""Rounds: how a round's global batch is split among its clients, and a reader of one client's share.

A run numbers its samples 0, 1, 2, ... across passes: sample p of the run is
entry ``p % N`` of pass ``p // N`` of an indexed reader of N entries, so a
shuffled reader gives every pass a fresh order. Step s of the run reads the
global batch ``[data_index, data_index + global_batch_size)``
(``readers.tokenized.schedule.BatchSchedule`` says both for any step). The round's
coordinator splits it among the clients of the round with ``assign_batches``,
a pure function every client can compute alike, and each client reads its own
interval with ``round_share``. Clients may join or leave between rounds: each
round covers its own global batch exactly, so the run still sees every sample
once.

>>> from readers import from_sequence, shuffle
>>> data = shuffle(from_sequence(range(10)), seed=0)
>>> shares = assign_batches(["a", "b", "c"], data_index=8, global_batch_size=5, seed=7)
>>> shares
{'a': (8, 9), 'c': (10, 11), 'b': (12, 12)}
>>> mine = round_share(data, shares, "c")  # samples 10 and 11 of the run: entries 0 and 1 of pass 1
>>> list(mine()) == list(data.run(1))[:2]
True
"""
from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from readers.checks import check_reader, whole
from readers.errors import BadType, BadValue
from readers.graph import Node, Share, describe
from readers.parents import access_of, as_indexed, open_plan
from readers.plans import Plan, slice_chunks
from readers.position import is_native
from readers.stage import IndexedReader, Stage

__all__ = ["RoundShare", "assign_batches", "round_share"]

#: Sample indices are int64 in plans; a round must end below this.
LIMIT = 2 ** 63 - 1


def _sorted_clients(clients: Any) -> list:
    """The clients as a sorted list, checked: any hashable, sortable ids of one kind, none twice."""
    if isinstance(clients, (str, bytes)) or not isinstance(clients, Iterable):
        raise BadType(f"assign_batches: clients must be a collection of client ids (rank ints, names), got "
                      f"{type(clients).__name__} {clients!r}")
    ids = list(clients)
    if not ids:
        raise BadValue("assign_batches: clients is empty; a round needs at least one client to read its batch")
    try:
        unique = len(set(ids))
        ids.sort()
    except TypeError:
        kinds = sorted({type(c).__name__ for c in ids})
        raise BadType(f"assign_batches: clients must be hashable ids of one sortable kind (rank ints, or "
                      f"names), got {', '.join(kinds)}: e.g. {ids[:3]!r}; give every client an id of one "
                      "kind") from None
    if unique < len(ids):
        twice = next(a for a, b in zip(ids, ids[1:]) if a == b)
        raise BadValue(f"assign_batches: client {twice!r} is listed twice; every client of a round appears "
                       "once (drop the repeat)")
    return ids


def _check_seed(seed: Any) -> int:
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise BadValue(f"assign_batches: seed must be an int >= 0, the round's seed that every client shares, "
                       f"got {seed!r}")
    return int(seed)


def assign_batches(clients: Iterable[Hashable], *, data_index: int, global_batch_size: int,
                   seed: int) -> dict[Hashable, tuple[int, int]]:
    """Split the round's batch ``[data_index, data_index + global_batch_size)`` among ``clients``.

    Returns ``{client: (start, end)}``, inclusive intervals of sample indices
    that cover the batch contiguously, with no gap and no overlap, listed in
    the order they cover it. The clients' order is a shuffle drawn from the
    round's ``seed`` alone: the clients are sorted, client i of that order is
    keyed by the i-th 64-bit output of numpy's ``PCG64(seed)`` (its
    ``random_raw``, a stream numpy keeps the same across versions), and they
    take their intervals in the order of their keys. Sizes differ by at most
    one: the first ``global_batch_size % len(clients)`` clients of the
    shuffled order take one more. A client with nothing to do (a batch smaller
    than the number of clients) is left out. Clients are any hashable,
    sortable ids (rank ints, names), each listed once, in any order: the same
    set and seed give the same assignment on every machine.

    >>> assign_batches(range(4), data_index=100, global_batch_size=10, seed=1)
    {2: (100, 102), 0: (103, 105), 3: (106, 107), 1: (108, 109)}
    >>> assign_batches([3, 1, 2, 0], data_index=100, global_batch_size=10, seed=1)[2]
    (100, 102)
    >>> assign_batches(range(4), data_index=0, global_batch_size=2, seed=1)
    {2: (0, 0), 0: (1, 1)}
    >>> assign_batches([1, 1], data_index=0, global_batch_size=2, seed=1)
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: assign_batches: client 1 is listed twice; every client of a round appears once (drop the repeat)

    See Also:
        readers.tokenized.schedule.BatchSchedule: the data index and global batch size of every step.
        round_share: a reader of one client's interval.
    """
    ids = _sorted_clients(clients)
    data_index = whole(data_index, "data_index", "assign_batches", floats=False)
    size = whole(global_batch_size, "global_batch_size", "assign_batches", 1, floats=False)
    seed = _check_seed(seed)
    if data_index + size > LIMIT:
        raise BadValue(f"assign_batches: the batch [{data_index}, {data_index + size}) ends past sample "
                       f"{LIMIT}, the last a plan can index; check data_index and global_batch_size")
    order = np.argsort(np.random.PCG64(seed).random_raw(len(ids)), kind="stable")
    base, extra = divmod(size, len(ids))
    busy = len(ids) if base else extra
    sizes = np.full(busy, base, dtype=np.int64)
    sizes[:extra] += 1
    ends = np.cumsum(sizes) + (data_index - 1)
    starts = ends - (sizes - 1)
    return dict(zip([ids[i] for i in order[:busy].tolist()], zip(starts.tolist(), ends.tolist())))


def _shifted(chunks: Iterable[np.ndarray], offset: int) -> Iterator[np.ndarray]:
    return (chunk + offset for chunk in chunks)


class _PassSpan(IndexedReader):
    """The source of a share that crosses passes whose entries are drawn per pass: ``parents`` are the
    parent's source bound to each pass in turn, all of length n; index ``j * n + i`` is entry i of the j-th."""

    name = "passes"

    def __len__(self) -> int:
        return len(self.parents[0]) * len(self.parents)

    def _owners(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.divmod(indices, len(self.parents[0]))

    def _get(self, i: int) -> Any:
        j, k = divmod(i, len(self.parents[0]))
        return self.parents[j].at(k)

    def _split(self, indices: np.ndarray, read: Callable[[Any, np.ndarray], Any]) -> list[tuple[np.ndarray, Any]]:
        """(where in ``indices``, what ``read`` gives) for each pass the indices fall in."""
        owner, local = self._owners(indices)
        return [(owner == j, read(self.parents[j], local[owner == j])) for j in np.unique(owner).tolist()]

    def gather(self, indices: np.ndarray) -> Iterator:
        owner, local = self._owners(indices)
        parts = {j: iter(self.parents[j].gather(local[owner == j])) for j in np.unique(owner).tolist()}
        return map(next, map(parts.__getitem__, owner.tolist()))  # each pass's entries in their order

    def gather_columns(self, indices: np.ndarray) -> tuple | np.ndarray | None:
        parts = self._split(indices, lambda source, local: source.gather_columns(local))
        if any(columns is None for _, columns in parts):
            return None
        if len(parts) == 1:
            return parts[0][1]
        tupled = isinstance(parts[0][1], tuple)
        out = []
        for c in range(len(parts[0][1]) if tupled else 1):
            pieces = [(mine, columns[c] if tupled else columns) for mine, columns in parts]
            column = np.empty((len(indices), *pieces[0][1].shape[1:]), dtype=np.result_type(*(p for _, p in pieces)))
            for mine, piece in pieces:
                column[mine] = piece
            out.append(column)
        return tuple(out) if tupled else out[0]

    def sample_ids(self, indices: np.ndarray) -> np.ndarray:
        ids = np.empty(len(indices), np.int64)
        for mine, found in self._split(indices, lambda source, local: source.sample_ids(local)):
            ids[mine] = found
        return ids


class RoundShare(Stage):
    """Samples ``start`` .. ``end`` of the run, read from an indexed reader's passes (see ``round_share``)."""

    name = "round_share"
    access = "plan"

    def __init__(self, reader: Any, start: int, end: int, index: int, count: int):
        super().__init__(reader)
        self.start, self.end, self.index, self.count = start, end, index, count

    def share(self) -> Share:
        return Share(self.index, self.count, False)  # share index of count: train() shards it no more

    def __len__(self) -> int:
        return self.end - self.start + 1

    def _part(self, pass_id: int, first: int, stop: int) -> Plan:
        """Entries ``first`` .. ``stop - 1`` of the parent's pass ``pass_id``, as a plan."""
        parent = self.parents[0]
        if is_native(parent):  # jump straight to the parent's position
            plan = open_plan(parent, pass_id, first)
            return Plan(plan.source, slice_chunks(plan.chunks, 0, stop - first))
        plan = open_plan(parent, pass_id)  # the parent's cursor counts other things (a shard's): slice its pass
        return Plan(plan.source, slice_chunks(plan.chunks, first, stop - first))

    def _plan(self, pass_id: int, cursor: int) -> Plan:
        # The share's own pass does not matter: sample p of the run is entry p % n of the parent's pass p // n.
        n = len(self.parents[0])
        lo, hi = self.start + cursor, self.end + 1
        first_pass, last_pass = min(lo, hi - 1) // n, (hi - 1) // n
        head = self._part(first_pass, lo - first_pass * n, min(hi - first_pass * n, n))
        if first_pass == last_pass:
            return head
        parts = [self._part(q, 0, min(hi - q * n, n)) for q in range(first_pass + 1, last_pass + 1)]
        for q, part in enumerate(parts, first_pass + 1):
            self._check_source(q, part.source, head.source)
        if all(part.source is head.source for part in parts):  # one source serves every pass the share crosses
            return Plan(head.source, itertools.chain(head.chunks, *(part.chunks for part in parts)))
        # each pass reads its own copy of the source (one bound to its pass: its entries are drawn per pass):
        # one source over them all, pass j's entry i at j * n + i
        span = _PassSpan(head.source, *(part.source for part in parts))
        return Plan(span, itertools.chain(head.chunks, *(_shifted(part.chunks, j * n)
                                                         for j, part in enumerate(parts, 1))))

    def _check_source(self, pass_id: int, source: Any, before: Any) -> None:
        """Refuse a parent whose pass ``pass_id`` reads other data than the pass before it."""
        same = source is before or (isinstance(source, Node) and isinstance(before, Node)
                                    and source.identity() == before.identity())
        if not same:
            raise BadValue(f"round_share: {describe(self.parents[0])} reads pass {pass_id} from "
                           f"{describe(source)} and the pass before from {describe(before)}, so a share "
                           "that crosses passes cannot gather both with one source; give round_share a reader "
                           "whose passes differ only in their order (a shuffle of an indexed reader)")

    def identity(self) -> str:
        """The share by its samples alone: which client reads them is no part of the data.

        >>> from readers import from_sequence
        >>> round_share(from_sequence("abcd"), {"a": (0, 1), "b": (2, 5)}, "b").identity()
        'round_share(samples 2..5)'
        """
        return f"{self.name}(samples {self.start}..{self.end})"

    def _options(self) -> str:
        return f"samples {self.start}..{self.end}, index={self.index}, count={self.count}"


def _interval(value: Any, client: Any) -> tuple[int, int]:
    """An assignment's inclusive ``(start, end)``, checked."""
    ok = isinstance(value, (tuple, list)) and len(value) == 2 and not any(
        isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) for v in value)
    if not ok or not 0 <= value[0] <= value[1]:
        raise BadValue(f"round_share: client {client!r} has interval {value!r}; an assignment maps each client "
                       "to an inclusive (start, end) of sample indices, 0 <= start <= end, as assign_batches "
                       "gives it")
    return int(value[0]), int(value[1])


def round_share(reader: Any, assignment: Mapping[Hashable, tuple[int, int]], client: Hashable) -> RoundShare:
    """``client``'s share of a round: the samples of its interval in ``assignment`` (from ``assign_batches``).

    Sample p of the run is entry ``p % len(reader)`` of pass ``p // len(reader)``
    of ``reader`` (an indexed reader, or a planned one such as a global
    shuffle of one), so a share that crosses the end of a pass reads on into
    the next pass's order. The share is planned: ``batch`` gathers it with
    vectorised takes, its state resumes mid-share, and it counts as sharded
    (index: its place in the round, count: the clients with work), so
    ``train()`` shards it no further. Every pass of the share reads the same
    samples; the next round is a new share. Its position resumes only in the
    same share (a state records its place in the round).

    >>> from readers import from_sequence, shuffle
    >>> data = shuffle(from_sequence(range(4)), seed=0)
    >>> assignment = {"a": (2, 5), "b": (6, 7)}
    >>> first, second = list(data.run(0)), list(data.run(1))
    >>> list(round_share(data, assignment, "a")()) == first[2:] + second[:2]
    True
    >>> round_share(data, assignment, "c")
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: round_share: client 'c' has no share in this assignment (its clients: 'a', 'b'); a client with nothing to do is left out of a round whose global batch is smaller than its number of clients: skip the round
    """
    check_reader(reader)
    indexed = as_indexed(reader) or reader
    try:
        n = len(indexed) if access_of(indexed) != "stream" else None
    except TypeError:
        n = None
    if n is None:
        raise BadValue(f"round_share needs an indexed reader (len and [i]), or a shuffle of one, and "
                       f"{describe(reader)!r} is not one: a round's samples are numbered by sample index")
    if n == 0:
        raise BadValue(f"round_share: {describe(reader)!r} has no entries, so no sample of the run can be read")
    if not isinstance(assignment, Mapping):
        raise BadType(f"round_share: assignment must be the dict assign_batches returns, {{client: (start, end)}}, "
                      f"got {type(assignment).__name__} {assignment!r}")
    if client not in assignment:
        known = ", ".join(map(repr, itertools.islice(assignment, 8))) + (", ..." if len(assignment) > 8 else "")
        raise BadValue(f"round_share: client {client!r} has no share in this assignment (its clients: {known}); "
                       "a client with nothing to do is left out of a round whose global batch is smaller than "
                       "its number of clients: skip the round")
    start, end = _interval(assignment[client], client)
    starts = sorted(_interval(value, other)[0] for other, value in assignment.items())
    return RoundShare(indexed, start, end, bisect.bisect_left(starts, start), len(assignment))
