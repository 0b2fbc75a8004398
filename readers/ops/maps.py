"""Entry-by-entry decorators: map_readers and with_index.

Entry i of each is made from entry i of its parent, so each keeps its
parent's access: over an indexed reader it is indexed (``len``, ``[i]``,
vectorised gathers), over an index-planned pipeline (a shuffle, a shard) it is
planned, and over a stream it streams. One class per decorator serves all three.
"""
from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from readers.checks import check_reader
from readers.graph import describe
from readers.identity import function_identity
from readers.parents import access_of, as_indexed, iterate, open_plan
from readers.plans import Plan
from readers.stage import Stage

__all__ = ["append_column", "map_readers", "with_index"]


def append_column(entry: Any, value: Any, key: str = "weight") -> Any:
    """``entry`` with ``value`` as a new last column; a single value becomes a pair, a dict gains ``key``.

    >>> append_column(("x", 1), 0.0), append_column("x", 0.0), append_column({"x": 1}, 0.0)
    (('x', 1, 0.0), ('x', 0.0), {'x': 1, 'weight': 0.0})
    """
    if isinstance(entry, tuple):
        return entry + (value,)
    if isinstance(entry, dict):
        if key in entry:
            raise ValueError(f"entries already have a {key!r} key, so a new {key!r} column would overwrite it; "
                             f"rename that key (entry keys: {sorted(entry)})")
        return {**entry, key: value}
    return (entry, value)


class _EntryByEntry(Stage):
    """A stage whose entry i is made from its parent's entry i: it keeps the parent's access, length and IDs."""

    @property
    def access(self) -> str:
        return access_of(self.parents[0])

    def __len__(self) -> int:
        return len(self.parents[0])

    def sample_ids(self, indices: np.ndarray) -> np.ndarray:
        return self.parents[0].sample_ids(indices)

    def _plan(self, pass_id: int, cursor: int) -> Plan:
        if self.access == "index":
            return super()._plan(pass_id, cursor)
        plan = open_plan(self.parents[0], pass_id, cursor)  # the same indices, this stage over their source
        return Plan(self.with_parents(plan.source), plan.chunks)


# -- map ---------------------------------------------------------------------------


class Mapped(_EntryByEntry):
    """``func`` over the zipped entries of the parents (see ``map_readers``)."""

    name = "map_readers"
    per_entry = "map"

    def __init__(self, func: Callable, *readers: Any):
        super().__init__(*readers)
        self.func = func

    @property
    def access(self) -> str:
        return super().access if len(self.parents) == 1 else "stream"

    @property
    def positions(self) -> int | None:
        return 1 if len(self.parents) == 1 else None  # one reader: its cursor is the parent's

    def __len__(self) -> int:
        if len(self.parents) != 1:
            raise TypeError("map_readers of several readers has no length (it stops at the shortest)")
        return super().__len__()

    def _get(self, i: int) -> Any:
        return self.func(self.parents[0].at(i))

    def gather(self, indices: np.ndarray) -> Iterator:
        return map(self.func, self.parents[0].gather(indices))

    def _seek(self, pass_id: int, cursor: int) -> Iterator:
        return map(self.func, *[iterate(r, pass_id, cursor) for r in self.parents])

    def _options(self) -> str:
        return describe(self.func)

    def identity(self) -> str:
        """The map by its function's name and code, so that other preprocessing is other data.

        >>> from readers import from_sequence
        >>> map_readers(lambda e: e * 2, from_sequence([1])).identity()
        'map_readers(<lambda> ...)'
        """
        return f"{self.name}({function_identity(self.func)})"


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
    >>> import readers
    >>> list(readers.map_readers(double)(lambda: [4])())
    [8]

    See Also:
        xmap_readers: the same in parallel threads.
    """
    if not callable(func):
        raise TypeError(f"map_readers: func must be callable, got {type(func).__name__} {func!r}")
    if not readers:
        raise TypeError("map_readers needs at least one reader after func (readers.map_readers(func) waits for them)")
    for i, r in enumerate(readers):
        check_reader(r, f"map_readers reader {i}")
    if len(readers) == 1:
        readers = (as_indexed(readers[0]) or readers[0],)
    return Mapped(func, *readers)


# -- with_index ----------------------------------------------------------------------


#: a dict entry gains the key "index"; a tuple, a last column
_add_id = functools.partial(append_column, key="index")


class WithId(_EntryByEntry):
    """Each entry with its sample ID as a last column (see ``with_index``)."""

    name = "with_index"

    @property
    def positions(self) -> int | None:
        return None if self.access == "stream" else 1  # a stream's IDs count its own entries

    def _get(self, i: int) -> Any:
        return _add_id(self.parents[0].at(i), int(self.parents[0].sample_ids(np.array([i]))[0]))

    def gather(self, indices: np.ndarray) -> Iterable:
        parent = self.parents[0]
        return map(_add_id, parent.gather(indices), parent.sample_ids(indices).tolist())

    def gather_columns(self, indices: np.ndarray) -> tuple | None:
        columns = self.parents[0].gather_columns(indices)
        if columns is None:
            return None
        columns = columns if isinstance(columns, tuple) else (columns,)
        return columns + (np.array(self.parents[0].sample_ids(indices), dtype=np.int64),)

    def _seek(self, pass_id: int, cursor: int) -> Iterator:
        return map(_add_id, iterate(self.parents[0], pass_id, cursor), itertools.count(cursor))


def with_index(reader: Any) -> Stage:
    """Append each entry's sample index (its unique ID) as a last column.

    For an indexed pipeline the ID is the sample's index in its source, the
    same through firstn, skip, maps and shuffles; for a stream it is the
    entry's position in the pass, so put ``with_index`` before any shuffle of
    a stream. prefetch, filter_entries and buffer shuffles make a pipeline a
    stream: put ``with_index`` below them to get sample IDs. Appending keeps
    existing column numbers (and mappings) valid.

    >>> list(with_index(lambda: [("a", 1), ("b", 0)])())
    [('a', 1, 0), ('b', 0, 1)]
    >>> from readers import from_sequence, shuffle
    >>> pairs = list(with_index(shuffle(from_sequence("abcd"), seed=3))())
    >>> all("abcd"[i] == letter for letter, i in pairs)
    True
    """
    check_reader(reader)
    return WithId(as_indexed(reader) or reader)
