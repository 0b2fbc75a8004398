"""Combining readers: chain (one after another) and compose (side by side).

Each is indexed when every input is indexed, so a global shuffle or a
vectorised batch still works over the combination; otherwise it streams.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from readers.checks import check_reader
from readers.errors import BadType, BadValue
from readers.graph import describe
from readers.parents import as_indexed, is_indexed, iterate
from readers.stage import Stage

__all__ = ["ComposeNotAligned", "chain", "compose"]


def _inputs(readers: tuple, where: str) -> tuple[tuple, str]:
    """The readers as parents (user objects with len and [i] adapted), and the access they allow."""
    for i, r in enumerate(readers):
        check_reader(r, f"{where} reader {i}")
    indexed = tuple(as_indexed(r) for r in readers)
    if readers and all(r is not None for r in indexed):
        return indexed, "index"
    return readers, "stream"


# -- chain ---------------------------------------------------------------------


class Chained(Stage):
    """All of the first reader, then all of the second, ... (see ``chain``)."""

    name = "chain"

    def __init__(self, *readers: Any, access: str = "stream"):
        super().__init__(*readers)
        self.access = access

    def _offsets(self) -> np.ndarray:
        return np.cumsum([0] + [len(r) for r in self.parents])

    def __len__(self) -> int:
        if not is_indexed(self):
            raise BadType("a chain of streams has no length")
        return sum(len(r) for r in self.parents)

    def _get(self, i: int) -> Any:
        offsets = self._offsets()
        k = int(np.searchsorted(offsets, i, side="right")) - 1
        return self.parents[k].at(i - int(offsets[k]))

    def gather(self, indices: np.ndarray) -> Iterator:
        offsets = self._offsets()
        owner = np.searchsorted(offsets, indices, side="right") - 1
        # each input reads its own indices in their order, so an entry is the next of its owner's
        parts = []
        for k, reader in enumerate(self.parents):
            mine = owner == k
            parts.append(iter(reader.gather(indices[mine] - offsets[k])) if mine.any() else iter(()))
        return map(next, map(parts.__getitem__, owner.tolist()))

    def _stream(self, pass_id: int) -> Iterator:
        for reader in self.parents:  # a generator, so closing the pass closes the input it is in
            yield from iterate(reader, pass_id)


def chain(*readers: Any) -> Chained:
    """Concatenate readers: all of the first, then all of the second, ...

    Chaining indexed readers gives an indexed reader over the concatenation.

    >>> list(chain(lambda: [1, 2], lambda: [3])())
    [1, 2, 3]
    >>> from readers import from_sequence
    >>> c = chain(from_sequence("ab"), from_sequence("cde"))
    >>> len(c), c[3]
    (5, 'd')
    """
    parents, access = _inputs(readers, "chain")
    return Chained(*parents, access=access)


# -- compose -------------------------------------------------------------------


class ComposeNotAligned(BadValue):
    """Raised by ``compose`` when its readers do not have the same length."""


def _flatten(parts: tuple) -> tuple:
    out: tuple = ()
    for p in parts:
        out += p if isinstance(p, tuple) else (p,)
    return out


def _misaligned(readers: tuple, detail: str) -> ComposeNotAligned:
    names = ", ".join(f"{k}: {describe(r)}" for k, r in enumerate(readers, 1))
    return ComposeNotAligned(
        f"compose: readers are not aligned ({detail}; readers {names}); give readers of "
        "equal length, or pass check_alignment=False to stop at the shortest"
    )


class Composed(Stage):
    """The readers zipped, tuple entries flattened one level (see ``compose``)."""

    name = "compose"

    def __init__(self, readers: tuple, check_alignment: bool, access: str = "stream"):
        super().__init__(*readers)
        self.check_alignment, self.access = check_alignment, access

    def __len__(self) -> int:
        if not is_indexed(self):
            raise BadType("a compose of streams has no length")
        lengths = [len(r) for r in self.parents]
        if self.check_alignment and len(set(lengths)) > 1:
            raise _misaligned(self.parents, f"lengths {lengths}")
        return min(lengths)

    def _get(self, i: int) -> tuple:
        return _flatten(tuple(r.at(i) for r in self.parents))

    def gather(self, indices: np.ndarray) -> Iterator:
        return map(_flatten, zip(*(r.gather(indices) for r in self.parents)))

    def _stream(self, pass_id: int) -> Iterator:
        iterators = [iterate(r, pass_id) for r in self.parents]
        if not self.check_alignment:
            return map(_flatten, zip(*iterators))
        return self._strict(iterators)

    def _strict(self, iterators: list) -> Iterator:
        try:
            for parts in zip(*iterators, strict=True):
                yield _flatten(parts)
        except ValueError as exc:
            if not str(exc).startswith("zip() argument"):
                raise
            detail = str(exc).replace("zip() argument", "reader").replace("than argument", "than reader")
            raise _misaligned(self.parents, detail) from None

    def _options(self) -> str:
        return f"check_alignment={self.check_alignment}"


def compose(*readers: Any, check_alignment: bool = True) -> Composed:
    """Zip readers into one, flattening tuple entries one level.

    With ``check_alignment`` (the default) readers of different lengths raise
    ``ComposeNotAligned`` (a ``ValueError``) when the shortest ends; without it
    the pass stops at the shortest. ``None`` entries are ordinary data.

    >>> list(compose(lambda: [(1, 2), (3, 4)], lambda: "ab")())
    [(1, 2, 'a'), (3, 4, 'b')]
    >>> list(compose(lambda: [1, 2], lambda: [None, None])())
    [(1, None), (2, None)]
    >>> list(compose(lambda: [1, 2, 3], lambda: [4])())
    Traceback (most recent call last):
    ...
    readers.ops.combine.ComposeNotAligned: compose: readers are not aligned (reader 2 is shorter than reader 1; ...
    >>> list(compose(lambda: [1, 2, 3], lambda: [4], check_alignment=False)())
    [(1, 4)]
    """
    parents, access = _inputs(readers, "compose")
    return Composed(parents, bool(check_alignment), access)
