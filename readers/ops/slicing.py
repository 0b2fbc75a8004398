"""Decorators that choose which entries a pass keeps: firstn, skip and filter_entries.

firstn and skip keep their parent's access: a window of an indexed reader is
indexed, of an index-planned pipeline is planned (it slices the plan), and of
a stream reads only as far as it must.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from readers.checks import check_reader, whole
from readers.errors import BadType
from readers.graph import describe
from readers.identity import function_identity
from readers.parents import access_of, as_indexed, iterate, open_plan
from readers.plans import Plan, slice_chunks
from readers.position import is_native
from readers.stage import Stage

__all__ = ["filter_entries", "firstn", "skip"]


class Sliced(Stage):
    """Entries ``start`` .. ``start + count - 1`` of each pass (to the end when ``count`` is None)."""

    def __init__(self, name: str, reader: Any, start: int, count: int | None):
        super().__init__(reader)
        self.name, self.start, self.count = name, start, count

    @property
    def access(self) -> str:
        return access_of(self.parents[0])

    def __len__(self) -> int:
        rest = max(0, len(self.parents[0]) - self.start)
        return rest if self.count is None else min(self.count, rest)

    def _get(self, i: int) -> Any:
        return self.parents[0].at(i + self.start)

    def gather(self, indices: np.ndarray) -> Iterable:
        return self.parents[0].gather(indices + self.start)

    def gather_columns(self, indices: np.ndarray) -> Any:
        return self.parents[0].gather_columns(indices + self.start)

    def sample_ids(self, indices: np.ndarray) -> np.ndarray:
        return self.parents[0].sample_ids(indices + self.start)

    def _left(self, cursor: int) -> int | None:
        """How many entries the window still gives from ``cursor`` on (None: to the end)."""
        return None if self.count is None else max(0, self.count - cursor)

    def _plan(self, pass_id: int, cursor: int) -> Plan:
        if self.access == "index":
            return super()._plan(pass_id, cursor)
        count = self._left(cursor)
        if is_native(self.parents[0]):  # jump straight to the parent's position
            plan = open_plan(self.parents[0], pass_id, self.start + cursor)
            return Plan(plan.source, slice_chunks(plan.chunks, 0, count))
        # the parent counts other things (cursor is 0 here: run() reads past one): slice its whole pass
        plan = open_plan(self.parents[0], pass_id)
        return Plan(plan.source, slice_chunks(plan.chunks, self.start, count))

    def _seek(self, pass_id: int, cursor: int) -> Iterator:
        count = self._left(cursor)
        if is_native(self.parents[0]):
            return itertools.islice(iterate(self.parents[0], pass_id, self.start + cursor), count)
        # the parent counts other things (cursor is 0 here: run() reads past one): read past its first entries
        return itertools.islice(iterate(self.parents[0], pass_id), self.start, None if count is None else self.start + count)

    def _options(self) -> str:
        return f"n={self.start if self.count is None else self.count}"


def _window(name: str, reader: Any, start: int, count: int | None) -> Sliced:
    check_reader(reader)
    return Sliced(name, as_indexed(reader) or reader, start, count)


def firstn(reader: Any, n: int) -> Sliced:
    """The first ``n`` entries of each pass, pulling no more than ``n`` from the source.

    >>> from itertools import count
    >>> list(firstn(lambda: count(), 3)())
    [0, 1, 2]
    >>> list(firstn(lambda: [1], 5)())
    [1]
    """
    return _window("firstn", reader, 0, whole(n, "n", "firstn"))


def skip(reader: Any, n: int) -> Sliced:
    """Each pass without its first ``n`` entries.

    >>> list(skip(lambda: range(5), 3)())
    [3, 4]
    >>> from readers import from_sequence
    >>> s = skip(from_sequence("abcd"), 1)
    >>> len(s), s[0]
    (3, 'b')
    """
    return _window("skip", reader, whole(n, "n", "skip"), None)


class Filtered(Stage):
    """The entries for which ``predicate`` is true (see ``filter_entries``)."""

    name = "filter_entries"

    def __init__(self, reader: Any, predicate: Callable[[Any], bool]):
        super().__init__(reader)
        self.predicate = predicate

    def _stream(self, pass_id: int) -> Iterator:
        return filter(self.predicate, iterate(self.parents[0], pass_id))

    def _options(self) -> str:
        return describe(self.predicate)

    def identity(self) -> str:
        """The filter by its predicate's name and code, so that another predicate is other data.

        >>> from readers import from_sequence
        >>> filter_entries(from_sequence([1]), lambda e: e > 0).identity()
        'filter_entries(<lambda> ...)'
        """
        return f"{self.name}({function_identity(self.predicate)})"


def filter_entries(reader: Any, predicate: Callable[[Any], bool]) -> Filtered:
    """Keep the entries for which ``predicate(entry)`` is true.

    >>> def even(x):
    ...     return x % 2 == 0
    >>> list(filter_entries(lambda: range(7), even)())
    [0, 2, 4, 6]
    """
    check_reader(reader)
    if not callable(predicate):
        raise BadType(f"filter_entries: predicate must be callable, got {predicate!r}")
    return Filtered(reader, predicate)
