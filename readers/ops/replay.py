"""Decorators that replay passes: repeat (several passes as one) and cache (the first pass kept)."""
from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from readers.checks import check_reader, whole
from readers.errors import BadValue
from readers.graph import describe, drawing_stage
from readers.parents import iterate
from readers.stage import Stage

__all__ = ["cache", "repeat"]


class Repeated(Stage):
    """``times`` passes of the parent back to back, or forever (see ``repeat``)."""

    name = "repeat"

    def __init__(self, reader: Any, times: int | None):
        super().__init__(reader)
        self.times = times

    def _stream(self, pass_id: int) -> Iterator:
        if self.times is not None:
            # repetition j of pass k is the parent's pass k * times + j: passes never overlap
            return self._passes(pass_id * self.times + j for j in range(self.times))
        return self._forever(pass_id)

    def _passes(self, passes: Iterator[int]) -> Iterator:
        for pass_id in passes:  # a generator, so closing the pass closes the repetition it is in
            yield from iterate(self.parents[0], pass_id)

    def _forever(self, pass_id: int) -> Iterator:
        for j in itertools.count():
            # pass k owns the parent passes k * 2**32 + j: disjoint for any realistic count
            empty = True
            for entry in iterate(self.parents[0], (pass_id << 32) + j):
                empty = False
                yield entry
            if empty:
                raise BadValue(
                    f"repeat: pass {j} of {describe(self.parents[0])} gave no entries, so repeating "
                    "it forever would never yield; check the reader (or a filter before repeat)"
                )

    def _options(self) -> str:
        return f"times={self.times}"


def repeat(reader: Any, times: int | None = None) -> Repeated:
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


class Cached(Stage):
    """The first complete pass of the parent, kept in memory and replayed (see ``cache``)."""

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


def cache(reader: Any) -> Cached:
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
    check_reader(reader)
    drawn = drawing_stage(reader)
    if drawn is not None:
        raise BadValue(f"cache: {describe(drawn)} below it draws its entries anew every pass, and cache replays "
                       "the first pass's for good: put the random stage above it, e.g. "
                       "random_map(augment, cache(reader), seed=0)")
    return Cached(reader)
