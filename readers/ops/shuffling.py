"""shuffle: a seeded buffer shuffle, or a global shuffle of an indexed reader.

Pass k's order is a pure function of (seed, k): the random generator of a
pass is seeded with both, never with time, pid or the global ``random``.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator
from operator import itemgetter
from typing import Any

import numpy as np
import toolz

from readers.checks import check_reader, whole
from readers.errors import BadValue
from readers.graph import DrawnSeed, describe
from readers.ops.permutation import KeyedPermutation
from readers.parents import access_of, as_indexed, iterate, open_plan
from readers.plans import Plan, index_chunks, rechunk, slice_chunks
from readers.stage import Stage

__all__ = ["check_seed", "shuffle"]

#: Sample indices mapped through the permutation at a time: large enough that
#: numpy's per-call overhead vanishes, small enough to stay O(1) in memory.
PERMUTE_CHUNK = 1 << 15
#: Up to this many samples the global shuffle draws an explicit permutation (at most
#: 512 KB, a constant): exactly uniform where a keyed permutation is visibly not.
SMALL = 1 << 16


def _rng(seed: int, pass_id: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64([seed, pass_id]))


def check_seed(seed: Any, where: str) -> int:
    """A seed as an int >= 0; None draws one from the operating system, once (a ``DrawnSeed``).

    >>> check_seed(7, "shuffle")
    7
    >>> check_seed(-1, "shuffle")
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: shuffle: seed must be an int >= 0 or None, got -1
    """
    if seed is None:
        import secrets  # on first use: it loads hmac and OpenSSL

        return DrawnSeed(secrets.randbits(63))
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise BadValue(f"{where}: seed must be an int >= 0 or None, got {seed!r}")
    return int(seed)


class GlobalShuffle(Stage):
    """Every pass visits all of an indexed reader in a keyed random order."""

    name = "shuffle"
    access = "plan"

    def __init__(self, source: Stage, seed: int):
        super().__init__(source)
        self.seed = seed

    def __len__(self) -> int:
        return len(self.parents[0])

    def _plan(self, pass_id: int, cursor: int) -> Plan:
        source = self.parents[0].for_pass(pass_id)
        n = len(source)
        if n <= SMALL:
            # a Feistel network reaches only some orders of a tiny set (even permutations,
            # for one); an explicit permutation of at most SMALL indices is exactly uniform
            return Plan(source, iter([_rng(self.seed, pass_id).permutation(n)[cursor:]]))
        perm = KeyedPermutation(n, self.seed, pass_id)
        return Plan(source, map(perm, index_chunks(n, PERMUTE_CHUNK, start=cursor)))

    def _options(self) -> str:
        return f"buf_size=None (global), seed={self.seed}"


class BufferShuffle(Stage):
    """Shuffles consecutive blocks of ``buf_size`` entries (Paddle's buffer shuffle)."""

    name = "shuffle"

    def __init__(self, reader: Any, buf_size: int, seed: int):
        super().__init__(reader)
        self.buf_size, self.seed = buf_size, seed

    @property
    def access(self) -> str:
        return "stream" if access_of(self.parents[0]) == "stream" else "plan"

    @property
    def positions(self) -> int | None:
        return 1 if self.buf_size <= 1 else None  # no shuffling: its entries are its parent's

    @property
    def unrepeatable(self) -> str | None:
        return None if self.buf_size <= 1 else super().unrepeatable  # a buffer of one entry keeps the order

    def __len__(self) -> int:
        return len(self.parents[0])

    def _where(self, pass_id: int, cursor: int) -> tuple[np.random.Generator, int, int]:
        """The generator as it stands at ``cursor``'s block, that block's start, and the offset in it."""
        rng = _rng(self.seed, pass_id)
        blocks, offset = divmod(cursor, self.buf_size)
        for _ in range(blocks):  # every block before the cursor's is full; replay their draws
            rng.permutation(self.buf_size)
        return rng, cursor - offset, offset

    def _plan(self, pass_id: int, cursor: int) -> Plan:
        if self.buf_size <= 1:
            return open_plan(self.parents[0], pass_id, cursor)
        rng, start, offset = self._where(pass_id, cursor)
        plan = open_plan(self.parents[0], pass_id, start)
        return Plan(plan.source, slice_chunks(self._permuted(plan.chunks, rng), offset))

    def _permuted(self, chunks: Iterator[np.ndarray], rng: np.random.Generator) -> Iterator[np.ndarray]:
        return (block[rng.permutation(len(block))] for block in rechunk(chunks, self.buf_size))

    def _seek(self, pass_id: int, cursor: int) -> Iterator:
        parent = self.parents[0]
        if self.buf_size <= 1:
            return iterate(parent, pass_id, cursor)
        rng, start, offset = self._where(pass_id, cursor)
        blocks = toolz.concat(self._blocks(iterate(parent, pass_id, start), rng))
        return itertools.islice(blocks, offset, None) if offset else blocks

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
        readers.ops.permutation.KeyedPermutation: the keyed bijection behind the global shuffle.
    """
    check_reader(reader)
    seed = check_seed(seed, "shuffle")
    if buf_size is None:
        indexed = as_indexed(reader)
        if indexed is None:
            raise BadValue(
                f"shuffle: buf_size=None (a global shuffle) needs an indexed reader with len and "
                f"[i], and {describe(reader)!r} is not one; give a buffer size, e.g. "
                "shuffle(reader, buf_size=10000)"
            )
        return GlobalShuffle(indexed, seed)
    return BufferShuffle(reader, whole(buf_size, "buf_size", "shuffle"), seed)
