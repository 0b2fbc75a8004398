"""Index plans: a pass of an index-addressable pipeline as a source and chunks of sample indices.

A plan is what ``batch`` gathers with one vectorised take per column, what
``shard`` splits by index arithmetic and what a resumed pass jumps into.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

__all__ = ["CHUNK", "Plan", "index_chunks", "rechunk", "slice_chunks"]

#: How many sample indices a plan hands out at a time when it walks a source.
CHUNK = 4096


class Plan:
    """One pass of an index-addressable pipeline: a source and the indices to read.

    ``source`` is a stage with random access (``readers.stage``); ``chunks``
    yields 1-D int64 arrays of indices into it, and reading
    ``source.gather(chunk)`` for each chunk, in order, gives the pass's
    entries. ``entries`` reads them so, chunk by chunk; a source whose gather
    is lazy (a map, a user's ``r[i]``) does its per-entry work as entries are
    taken, not a chunk ahead.
    """

    __slots__ = ("source", "chunks")

    def __init__(self, source: Any, chunks: Iterator[np.ndarray]):
        self.source = source
        self.chunks = chunks

    def entries(self) -> Iterator:
        gather = self.source.gather
        for chunk in self.chunks:
            yield from gather(chunk)


def index_chunks(n: int, size: int = CHUNK, start: int = 0) -> Iterator[np.ndarray]:
    """Indices start..n-1 in consecutive int64 chunks of at most ``size``.

    >>> [c.tolist() for c in index_chunks(5, 2)]
    [[0, 1], [2, 3], [4]]
    >>> [c.tolist() for c in index_chunks(5, 2, start=3)]
    [[3, 4]]
    """
    for lo in range(start, n, size):
        yield np.arange(lo, min(lo + size, n), dtype=np.int64)


def slice_chunks(chunks: Iterable[np.ndarray], start: int, count: int | None = None) -> Iterator[np.ndarray]:
    """Positions ``start`` .. ``start + count - 1`` of a stream of index chunks (to the end when None).

    >>> import numpy as np
    >>> [c.tolist() for c in slice_chunks([np.arange(3), np.arange(3, 6)], 2, 3)]
    [[2], [3, 4]]
    """
    seen = 0
    for chunk in chunks:
        lo = max(0, start - seen)
        seen += len(chunk)
        hi = len(chunk) if count is None else min(len(chunk), start + count - (seen - len(chunk)))
        if hi > lo:
            yield chunk[lo:hi]
        if count is not None and seen >= start + count:
            return


def rechunk(chunks: Iterable[np.ndarray], size: int) -> Iterator[np.ndarray]:
    """Regroup a stream of index chunks into chunks of exactly ``size`` (the last may be short).

    >>> import numpy as np
    >>> [c.tolist() for c in rechunk([np.arange(3), np.arange(3, 8)], 4)]
    [[0, 1, 2, 3], [4, 5, 6, 7]]
    """
    pending: list[np.ndarray] = []
    have = 0
    for chunk in chunks:
        pending.append(chunk)
        have += len(chunk)
        if have < size:
            continue
        joined = np.concatenate(pending) if len(pending) > 1 else pending[0]
        cut = len(joined) - len(joined) % size
        for start in range(0, cut, size):
            yield joined[start:start + size]
        rest = joined[cut:]
        pending, have = ([rest], len(rest)) if len(rest) else ([], 0)
    if have:
        yield np.concatenate(pending) if len(pending) > 1 else pending[0]
