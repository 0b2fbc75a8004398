"""A keyed bijection on [0, n): the global shuffle without an index array.

An unbalanced Feistel network over the smallest power-of-two domain that
holds n (so fewer than 2n), with cycle-walking to stay inside [0, n). Each
round mixes one half with a multiply-shift hash of the other; the round keys
come from (seed, pass) through numpy's SeedSequence. Memory is O(1) in n:
positions are mapped chunk by chunk.
"""
from __future__ import annotations

import numpy as np

from readers.errors import BadValue

__all__ = ["KeyedPermutation"]

ROUNDS = 8
_U64 = np.uint64


class KeyedPermutation:
    """The permutation of [0, n) keyed by ``(seed, pass_id)``.

    >>> p = KeyedPermutation(10, seed=0, pass_id=0)
    >>> out = p(np.arange(10))
    >>> sorted(out.tolist()) == list(range(10))
    True
    >>> bool((KeyedPermutation(10, seed=0, pass_id=0)(np.arange(10)) == out).all())
    True
    >>> bool((KeyedPermutation(10, seed=0, pass_id=1)(np.arange(10)) == out).all())
    False
    """

    __slots__ = ("n", "bits", "keys", "muls")

    def __init__(self, n: int, seed: int, pass_id: int):
        if n < 0:
            raise BadValue(f"permutation size must be >= 0, got {n}")
        self.n = n
        self.bits = max(2, int(n - 1).bit_length())
        state = np.random.SeedSequence([seed, pass_id, 0x5EED]).generate_state(2 * ROUNDS, np.uint64)
        self.keys = state[:ROUNDS]
        self.muls = state[ROUNDS:] | _U64(1)  # odd multipliers

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        a = self.bits // 2  # width of the left half
        b = self.bits - a   # width of the right half
        left = x >> _U64(b)
        right = x & _U64((1 << b) - 1)
        for k in range(ROUNDS):
            # the high bits of a multiply are the well-mixed ones
            h = ((right ^ self.keys[k]) * self.muls[k]) >> _U64(64 - a)
            left, right = right, left ^ h
            a, b = b, a
        return (left << _U64(b)) | right

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        """Map positions (each in [0, n)) to sample indices, as int64."""
        with np.errstate(over="ignore"):
            y = self._encrypt(positions.astype(_U64))
            out = y >= _U64(self.n)
            while out.any():  # cycle-walk: stays a bijection on [0, n)
                y[out] = self._encrypt(y[out])
                out = y >= _U64(self.n)
        return y.astype(np.int64)
