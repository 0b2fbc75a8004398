"""Decorators that reshape a pass: map, firstn, skip, filter, repeat, with_index, cache.

Each keeps its input indexed (``len`` and ``[i]``) where that makes sense, so
a batch downstream is still gathered with vectorised takes.
"""
from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from readers.base import (
    Derived,
    IndexedReader,
    Plan,
    Stage,
    append_column,
    as_indexed,
    check_reader,
    describe,
    is_native,
    is_planned,
    iterate,
    open_plan,
    slice_chunks,
    whole,
)

__all__ = [
    "cache",
    "filter_entries",
    "firstn",
    "map_readers",
    "repeat",
    "skip",
    "with_index",
]


# -- map -----------------------------------------------------------------------


class MappedIndexed(Derived):
    name = "map_readers"

    def __init__(self, func: Callable, source: IndexedReader):
        super().__init__(source)
        self.func = func

    def _get(self, i: int) -> Any:
        return self.func(self.source._get(i))

    def iter_gather(self, indices: np.ndarray) -> Iterator:
        return map(self.func, self.source.iter_gather(indices))

    def _options(self) -> str:
        return describe(self.func)


class Mapped(Stage):
    name = "map_readers"

    def __init__(self, func: Callable, readers: tuple):
        super().__init__(*readers)
        self.func = func

    @property
    def keeps_positions(self) -> bool:
        return len(self.parents) == 1

    @property
    def per_entry(self) -> str | None:
        """"map": entry i is made from entry i of the one parent alone, so a shard may split below it."""
        return "map" if len(self.parents) == 1 else None

    def _with_parent(self, parent: Any) -> Mapped:
        return Mapped(self.func, (parent,))

    def _planned(self) -> bool:
        return len(self.parents) == 1 and is_planned(self.parents[0])

    def __len__(self) -> int:
        if len(self.parents) != 1:
            raise TypeError("map_readers of several readers has no length (it stops at the shortest)")
        return len(self.parents[0])

    def _plan(self, pass_id: int, cursor: int = 0) -> Plan:
        plan = open_plan(self.parents[0], pass_id, cursor)
        return Plan(MappedIndexed(self.func, plan.source), plan.chunks)

    def _stream(self, pass_id: int) -> Iterator:
        return map(self.func, *[iterate(r, pass_id) for r in self.parents])

    def _seek(self, pass_id: int, cursor: int) -> Iterator:
        # one parent: the cursor is in its units (keeps_positions), whatever they count
        if len(self.parents) > 1 and not all(map(is_native, self.parents)):
            return super()._seek(pass_id, cursor)
        return map(self.func, *[iterate(r, pass_id, cursor) for r in self.parents])

    def _options(self) -> str:
        return describe(self.func)


def map_readers(func: Callable, *readers: Any) -> Stage:
    """Apply ``func`` to the zipped entries of ``readers``; stops at the shortest.

    With one reader, ``func`` gets each entry; with several, one argument per
    reader. A map over an indexed reader is indexed. Without readers it
    returns a stage waiting for them, for ``toolz.pipe``.

    >>> def double(x):
    ...     return 2 * x
    >>> list(map_readers(double, lambda: range(3))())
    [0, 2, 4]
    >>> list(map_readers(lambda a, b: a + b, lambda: [1, 2, 3], lambda: [10, 20])())
    [11, 22]
    >>> from readers import from_sequence
    >>> map_readers(double, from_sequence([5, 6]))[1]
    12
    >>> list(map_readers(double)(lambda: [4])())
    [8]

    See Also:
        xmap_readers: the same in parallel threads.
    """
    if not callable(func):
        raise TypeError(f"map_readers: func must be callable, got {type(func).__name__} {func!r}")
    if not readers:
        return functools.partial(map_readers, func)
    for i, r in enumerate(readers):
        check_reader(r, f"map_readers reader {i}")
    if len(readers) == 1:
        indexed = as_indexed(readers[0])
        if indexed is not None:
            return MappedIndexed(func, indexed)
    return Mapped(func, readers)


# -- firstn and skip -------------------------------------------------------------


class Window(IndexedReader):
    """Entries start..stop-1 of an indexed reader (firstn and skip keep indexing)."""

    def __init__(self, name: str, source: IndexedReader, start: int, count: int | None):
        super().__init__(source)
        self.name, self.source, self.start, self.count = name, source, start, count

    def __len__(self) -> int:
        rest = max(0, len(self.source) - self.start)
        return rest if self.count is None else min(self.count, rest)

    def _get(self, i: int) -> Any:
        return self.source._get(i + self.start)

    def iter_gather(self, indices: np.ndarray) -> Iterator:
        return self.source.iter_gather(indices + self.start)

    def gather_columns(self, indices: np.ndarray) -> Any:
        return self.source.gather_columns(indices + self.start)

    def sample_ids(self, indices: np.ndarray) -> np.ndarray:
        return self.source.sample_ids(indices + self.start)

    def _options(self) -> str:
        return f"n={self.start if self.count is None else self.count}"


class Sliced(Stage):
    """firstn / skip over a planned or streamed reader."""

    def __init__(self, name: str, reader: Any, start: int, count: int | None):
        super().__init__(reader)
        self.name, self.start, self.count = name, start, count

    def _planned(self) -> bool:
        return is_planned(self.parents[0])

    def __len__(self) -> int:
        rest = max(0, len(self.parents[0]) - self.start)
        return rest if self.count is None else min(self.count, rest)

    def _left(self, cursor: int) -> int | None:
        """How many entries the window still gives from ``cursor`` on (None: to the end)."""
        return None if self.count is None else max(0, self.count - cursor)

    def _plan(self, pass_id: int, cursor: int = 0) -> Plan:
        count = self._left(cursor)
        if is_native(self.parents[0]):  # jump straight to the parent's position
            plan = open_plan(self.parents[0], pass_id, self.start + cursor)
            return Plan(plan.source, slice_chunks(plan.chunks, 0, count))
        plan = open_plan(self.parents[0], pass_id)
        return Plan(plan.source, slice_chunks(plan.chunks, self.start + cursor, count))

    def _stream(self, pass_id: int) -> Iterator:
        return self._seek(pass_id, 0)

    def _seek(self, pass_id: int, cursor: int) -> Iterator:
        count = self._left(cursor)
        if is_native(self.parents[0]):
            return itertools.islice(iterate(self.parents[0], pass_id, self.start + cursor), count)
        stop = None if count is None else self.start + cursor + count
        return itertools.islice(iterate(self.parents[0], pass_id), self.start + cursor, stop)

    def _options(self) -> str:
        return f"n={self.start if self.count is None else self.count}"


def _window(name: str, reader: Any, start: int, count: int | None) -> Stage:
    check_reader(reader)
    indexed = as_indexed(reader)
    if indexed is not None:
        return Window(name, indexed, start, count)
    return Sliced(name, reader, start, count)


def firstn(reader: Any, n: int) -> Stage:
    """The first ``n`` entries of each pass, pulling no more than ``n`` from the source.

    >>> from itertools import count
    >>> list(firstn(lambda: count(), 3)())
    [0, 1, 2]
    >>> list(firstn(lambda: [1], 5)())
    [1]
    """
    return _window("firstn", reader, 0, whole(n, "n", "firstn"))


def skip(reader: Any, n: int) -> Stage:
    """Each pass without its first ``n`` entries.

    >>> list(skip(lambda: range(5), 3)())
    [3, 4]
    >>> from readers import from_sequence
    >>> s = skip(from_sequence("abcd"), 1)
    >>> len(s), s[0]
    (3, 'b')
    """
    return _window("skip", reader, whole(n, "n", "skip"), None)


# -- filter and repeat ------------------------------------------------------------


class Filtered(Stage):
    name = "filter_entries"

    def __init__(self, reader: Any, predicate: Callable[[Any], bool]):
        super().__init__(reader)
        self.predicate = predicate

    def _stream(self, pass_id: int) -> Iterator:
        return filter(self.predicate, iterate(self.parents[0], pass_id))

    def _options(self) -> str:
        return describe(self.predicate)


def filter_entries(reader: Any, predicate: Callable[[Any], bool]) -> Stage:
    """Keep the entries for which ``predicate(entry)`` is true.

    >>> def even(x):
    ...     return x % 2 == 0
    >>> list(filter_entries(lambda: range(7), even)())
    [0, 2, 4, 6]
    """
    check_reader(reader)
    if not callable(predicate):
        raise TypeError(f"filter_entries: predicate must be callable, got {predicate!r}")
    return Filtered(reader, predicate)


class Repeated(Stage):
    name = "repeat"

    def __init__(self, reader: Any, times: int | None):
        super().__init__(reader)
        self.times = times

    def _stream(self, pass_id: int) -> Iterator:
        if self.times is not None:
            # repetition j of pass k is the parent's pass k * times + j: passes never overlap
            return itertools.chain.from_iterable(
                iterate(self.parents[0], pass_id * self.times + j) for j in range(self.times))
        return self._forever(pass_id)

    def _forever(self, pass_id: int) -> Iterator:
        for j in itertools.count():
            # pass k owns the parent passes k * 2**32 + j: disjoint for any realistic count
            empty = True
            for entry in iterate(self.parents[0], (pass_id << 32) + j):
                empty = False
                yield entry
            if empty:
                raise ValueError(
                    f"repeat: pass {j} of {describe(self.parents[0])} gave no entries, so repeating "
                    "it forever would never yield; check the reader (or a filter before repeat)"
                )

    def _options(self) -> str:
        return f"times={self.times}"


def repeat(reader: Any, times: int | None = None) -> Stage:
    """Run ``times`` passes of ``reader`` back to back (forever when None).

    Each repetition is a new pass of the reader, so a shuffle below reorders.

    >>> list(repeat(lambda: [1, 2], 3)())
    [1, 2, 1, 2, 1, 2]
    >>> from itertools import islice
    >>> list(islice(repeat(lambda: "ab")(), 5))
    ['a', 'b', 'a', 'b', 'a']
    """
    check_reader(reader)
    if times is not None:
        times = whole(times, "times", "repeat")
    return Repeated(reader, times)


# -- with_index -------------------------------------------------------------------


#: a dict entry gains the key "index"; a tuple, a last column
_add_id = functools.partial(append_column, key="index")


class IndexedWithId(Derived):
    name = "with_index"

    def _get(self, i: int) -> tuple:
        return _add_id(self.source._get(i), int(self.source.sample_ids(np.array([i]))[0]))

    def iter_gather(self, indices: np.ndarray) -> Iterator:
        return map(_add_id, self.source.iter_gather(indices), self.source.sample_ids(indices).tolist())

    def gather_columns(self, indices: np.ndarray) -> tuple | None:
        columns = self.source.gather_columns(indices)
        if columns is None:
            return None
        columns = columns if isinstance(columns, tuple) else (columns,)
        return columns + (np.array(self.source.sample_ids(indices), dtype=np.int64),)


class WithId(Stage):
    name = "with_index"

    @property
    def keeps_positions(self) -> bool:
        return self._planned()  # a stream's IDs count its own entries

    def _planned(self) -> bool:
        return is_planned(self.parents[0])

    def __len__(self) -> int:
        return len(self.parents[0])

    def _plan(self, pass_id: int, cursor: int = 0) -> Plan:
        plan = open_plan(self.parents[0], pass_id, cursor)
        return Plan(IndexedWithId(plan.source), plan.chunks)

    def _stream(self, pass_id: int) -> Iterator:
        return map(_add_id, iterate(self.parents[0], pass_id), itertools.count())

    def _seek(self, pass_id: int, cursor: int) -> Iterator:
        if not is_native(self.parents[0]):
            return super()._seek(pass_id, cursor)
        return map(_add_id, iterate(self.parents[0], pass_id, cursor), itertools.count(cursor))


def with_index(reader: Any) -> Stage:
    """Append each entry's sample index (its unique ID) as a last column.

    For an indexed pipeline the ID is the sample's index in its source, the
    same through firstn, skip, maps and shuffles; for a stream it is the
    entry's position in the pass, so put ``with_index`` before any shuffle of
    a stream. Appending keeps existing column numbers (and mappings) valid.

    >>> list(with_index(lambda: [("a", 1), ("b", 0)])())
    [('a', 1, 0), ('b', 0, 1)]
    >>> from readers import from_sequence, shuffle
    >>> pairs = list(with_index(shuffle(from_sequence("abcd"), seed=3))())
    >>> all("abcd"[i] == letter for letter, i in pairs)
    True
    """
    check_reader(reader)
    indexed = as_indexed(reader)
    if indexed is not None:
        return IndexedWithId(indexed)
    return WithId(reader)


# -- cache --------------------------------------------------------------------------


class Cached(Stage):
    name = "cache"

    def __init__(self, reader: Any):
        super().__init__(reader)
        self._entries: list | None = None

    def _stream(self, pass_id: int) -> Iterator:
        if self._entries is not None:
            return iter(self._entries)
        # always the parent's pass 0, whichever pass fills it: every pass of a cache is the
        # same, so a reader restored at pass k (empty in a new process) matches one that replays
        return self._fill(0)

    def _fill(self, pass_id: int) -> Iterator:
        entries = []
        for entry in iterate(self.parents[0], pass_id):
            entries.append(entry)
            yield entry
        # only a complete first pass is kept; a pass stopped early is read again
        self._entries = entries

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_entries"] = None  # a copy in another process reads its own
        return state

    def _options(self) -> str:
        return "filled" if self._entries is not None else "empty"


def cache(reader: Any) -> Stage:
    """Keep every entry of the first complete pass in memory and replay it afterwards.

    Nothing is read when ``cache`` is applied; the first call reads the source.

    >>> calls = []
    >>> def numbers():
    ...     calls.append(1)
    ...     yield from range(3)
    >>> r = cache(numbers)
    >>> calls
    []
    >>> list(r()), list(r()), len(calls)
    ([0, 1, 2], [0, 1, 2], 1)
    """
    return Cached(check_reader(reader))
