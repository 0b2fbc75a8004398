"""shuffle: a seeded buffer shuffle, or a global shuffle of an indexed reader.

Pass k's order is a pure function of (seed, k): the random generator of a
pass is seeded with both, never with time, pid or the global ``random``.
"""
from __future__ import annotations

import itertools
import secrets
from collections.abc import Iterator
from operator import itemgetter
from typing import Any

import numpy as np

from readers.base import (
    IndexedReader,
    Plan,
    Stage,
    as_indexed,
    check_reader,
    describe,
    index_chunks,
    is_planned,
    iterate,
    open_plan,
    rechunk,
    whole,
)
from readers.permutation import KeyedPermutation

__all__ = ["shuffle"]

#: Sample indices mapped through the permutation at a time: large enough that
#: numpy's per-call overhead vanishes, small enough to stay O(1) in memory.
PERMUTE_CHUNK = 1 << 15
#: Up to this many samples the global shuffle draws an explicit permutation (at most
#: 512 KB, a constant): exactly uniform where a keyed permutation is visibly not.
SMALL = 1 << 16


def _rng(seed: int, pass_id: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64([seed, pass_id]))


class GlobalShuffle(Stage):
    """Every pass visits all of an indexed reader in a keyed random order."""

    name = "shuffle"

    def __init__(self, source: IndexedReader, seed: int):
        super().__init__(source)
        self.source, self.seed = source, seed

    def __len__(self) -> int:
        return len(self.source)

    def _planned(self) -> bool:
        return True

    def _plan(self, pass_id: int) -> Plan:
        n = len(self.source)
        if n <= SMALL:
            # a Feistel network reaches only some orders of a tiny set (even permutations,
            # for one); an explicit permutation of at most SMALL indices is exactly uniform
            return Plan(self.source, iter([_rng(self.seed, pass_id).permutation(n)]))
        perm = KeyedPermutation(n, self.seed, pass_id)
        return Plan(self.source, map(perm, index_chunks(n, PERMUTE_CHUNK)))

    def _options(self) -> str:
        return f"buf_size=None (global), seed={self.seed}"


class BufferShuffle(Stage):
    """Shuffles consecutive blocks of ``buf_size`` entries (Paddle's buffer shuffle)."""

    name = "shuffle"

    def __init__(self, reader: Any, buf_size: int, seed: int):
        super().__init__(reader)
        self.buf_size, self.seed = buf_size, seed

    def _planned(self) -> bool:
        return is_planned(self.parents[0])

    def __len__(self) -> int:
        return len(self.parents[0])

    def _plan(self, pass_id: int) -> Plan:
        plan = open_plan(self.parents[0], pass_id)
        if self.buf_size <= 1:
            return plan
        rng = _rng(self.seed, pass_id)
        blocks = rechunk(plan.chunks, self.buf_size)
        return Plan(plan.source, (block[rng.permutation(len(block))] for block in blocks))

    def _stream(self, pass_id: int) -> Iterator:
        source = iterate(self.parents[0], pass_id)
        if self.buf_size <= 1:
            return source
        return itertools.chain.from_iterable(self._blocks(source, _rng(self.seed, pass_id)))

    def _blocks(self, source: Iterator, rng: np.random.Generator) -> Iterator[tuple]:
        while block := list(itertools.islice(source, self.buf_size)):
            if len(block) == 1:
                yield block
            else:
                yield itemgetter(*rng.permutation(len(block)).tolist())(block)

    def _options(self) -> str:
        return f"buf_size={self.buf_size}, seed={self.seed}"


def shuffle(reader: Any, buf_size: int | None = None, *, seed: int | None = None) -> Stage:
    """Shuffle a reader: in blocks of ``buf_size`` entries, or globally when indexed.

    ``buf_size`` entries are read, shuffled and yielded, then the next block
    (O(buf_size) memory); 0 or 1 keeps the order. ``buf_size=None`` on an
    indexed reader shuffles the whole pass with O(1) extra memory: a keyed
    permutation of the sample indices, with no index array. Each pass has a
    new order that depends only on (seed, pass); ``seed=None`` draws a seed
    from the operating system once, when the decorator is applied.

    >>> from readers import from_sequence
    >>> r = shuffle(from_sequence(range(8)), seed=0)
    >>> first, second = list(r()), list(r())
    >>> sorted(first) == sorted(second) == list(range(8)), first != second
    (True, True)
    >>> r2 = shuffle(from_sequence(range(8)), seed=0)
    >>> list(r2()) == first
    True
    >>> def stream():
    ...     yield from range(6)
    >>> [sorted(list(shuffle(stream, 3, seed=1)())[k:k + 3]) for k in (0, 3)]
    [[0, 1, 2], [3, 4, 5]]
    >>> list(shuffle(stream, 1)())
    [0, 1, 2, 3, 4, 5]

    See Also:
        readers.permutation.KeyedPermutation: the keyed bijection behind the global shuffle.
    """
    check_reader(reader)
    if seed is None:
        seed = secrets.randbits(63)
    elif isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"shuffle: seed must be an int >= 0 or None, got {seed!r}")
    seed = int(seed)
    if buf_size is None:
        indexed = as_indexed(reader)
        if indexed is None:
            raise ValueError(
                f"shuffle: buf_size=None (a global shuffle) needs an indexed reader with len and "
                f"[i], and {describe(reader)!r} is not one; give a buffer size, e.g. "
                "shuffle(reader, buf_size=10000)"
            )
        return GlobalShuffle(indexed, seed)
    return BufferShuffle(reader, whole(buf_size, "buf_size", "shuffle"), seed)
