"""Reader creators over data already in memory: arrays and sequences."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from readers.errors import BadType, BadValue
from readers.identity import array_digest, value_digest
from readers.parents import is_indexed
from readers.plans import take_rows
from readers.stage import IndexedReader, Stage

__all__ = ["from_arrays", "from_sequence", "np_array"]


def _shape_text(a: np.ndarray) -> str:
    inner = "x".join(str(d) for d in a.shape[1:])
    return f"{a.dtype}[{inner}]" if inner else str(a.dtype)


class FromArrays(IndexedReader):
    name = "from_arrays"

    def __init__(self, arrays: tuple[np.ndarray, ...]):
        super().__init__()
        self.arrays = arrays
        self._n = len(arrays[0])

    def __len__(self) -> int:
        return self._n

    def _get(self, i: int) -> tuple:
        return tuple(a[i] for a in self.arrays)

    def gather(self, indices: np.ndarray) -> list:
        return list(zip(*(take_rows(a, indices) for a in self.arrays)))

    def gather_columns(self, indices: np.ndarray) -> tuple:
        return tuple(take_rows(a, indices) for a in self.arrays)

    def column_arrays(self) -> tuple:
        return self.arrays

    def _options(self) -> str:
        return f"{self._n} rows: " + ", ".join(_shape_text(a) for a in self.arrays)

    def digest(self) -> str:
        return array_digest(*self.arrays)


def from_arrays(*arrays: Any) -> FromArrays:
    """An indexed reader of equal-length arrays' rows i as tuples; for one array's rows as plain values use np_array.

    Entry i is the tuple of the arrays' rows i, so with one array the entries
    are 1-tuples ``(row,)``, not the rows themselves (``np_array(x)`` gives
    those). Nothing is copied: ``r[i]`` and iteration read the arrays in place,
    and a batch over this reader is gathered with one vectorised take per array.

    >>> import numpy as np
    >>> r = from_arrays(np.arange(6).reshape(3, 2), np.array([7, 8, 9]))
    >>> image, label = r[1]
    >>> len(r), image.tolist(), int(label)
    (3, [2, 3], 8)
    >>> [int(label) for _, label in r()]
    [7, 8, 9]
    >>> from_arrays(np.zeros(3), np.zeros(4))
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: from_arrays needs arrays of equal length, got lengths [3, 4] (array 0 has 3 rows, array 1 has 4 rows)
    >>> [tuple(int(v) for v in entry) for entry in from_arrays(np.array([5, 6]))()]  # one array: 1-tuples
    [(5,), (6,)]

    See Also:
        np_array, from_sequence
    """
    if not arrays:
        raise BadValue("from_arrays needs at least one array")
    converted = []
    for k, a in enumerate(arrays):
        a = np.asarray(a)
        if a.ndim == 0:
            raise BadValue(f"from_arrays: array {k} is a scalar; give arrays with a first (row) axis")
        converted.append(a)
    lengths = [len(a) for a in converted]
    if len(set(lengths)) > 1:
        detail = ", ".join(f"array {k} has {n} rows" for k, n in enumerate(lengths))
        raise BadValue(f"from_arrays needs arrays of equal length, got lengths {lengths} ({detail})")
    return FromArrays(tuple(converted))


class NpArray(IndexedReader):
    name = "np_array"

    def __init__(self, array: np.ndarray):
        super().__init__()
        self.array = array

    def __len__(self) -> int:
        return len(self.array)

    def _get(self, i: int) -> Any:
        return self.array[i]

    def gather(self, indices: np.ndarray) -> list:
        return list(take_rows(self.array, indices))

    def gather_columns(self, indices: np.ndarray) -> np.ndarray:
        return take_rows(self.array, indices)

    def column_arrays(self) -> np.ndarray:
        return self.array

    def _options(self) -> str:
        return f"{len(self.array)} rows: {_shape_text(self.array)}"

    def digest(self) -> str | None:
        return value_digest(self.array) if self.array.dtype == object else array_digest(self.array)


def np_array(x: Any) -> NpArray:
    """An indexed reader over the rows of an array (Paddle's ``np_array``).

    >>> import numpy as np
    >>> r = np_array(np.array([[1, 2], [3, 4]]))
    >>> [row.tolist() for row in r()]
    [[1, 2], [3, 4]]
    >>> len(r), r[-1].tolist()
    (2, [3, 4])
    """
    a = np.asarray(x)
    if a.ndim == 0:
        raise BadValue(f"np_array needs an array with at least one axis, got the scalar {a!r}")
    return NpArray(a)


class FromSequence(IndexedReader):
    name = "from_sequence"

    def __init__(self, seq: Sequence):
        super().__init__()
        self.seq = seq

    def __len__(self) -> int:
        return len(self.seq)

    def _get(self, i: int) -> Any:
        return self.seq[i]

    def gather(self, indices: np.ndarray) -> Iterator:
        return map(self.seq.__getitem__, indices.tolist())

    def _options(self) -> str:
        return f"{type(self.seq).__name__} of {len(self.seq)}"

    def digest(self) -> str | None:
        if isinstance(self.seq, range):  # its repr is its content, however long
            return value_digest([repr(self.seq)])
        return value_digest(self.seq)


def from_sequence(seq: Sequence) -> FromSequence:
    """An indexed reader over any sequence (list, tuple, range, string, ...).

    >>> r = from_sequence(["a", None, ""])
    >>> list(r()), len(r), r[1] is None
    (['a', None, ''], 3, True)
    >>> from_sequence(x for x in "ab")
    Traceback (most recent call last):
    ...
    readers.errors.BadType: from_sequence needs a sequence with len and [i], got generator; for a one-shot iterable write a generator function and use it as the reader
    """
    if not (hasattr(seq, "__len__") and hasattr(seq, "__getitem__")) or isinstance(seq, Stage) and not is_indexed(seq):
        raise BadType(
            f"from_sequence needs a sequence with len and [i], got {type(seq).__name__}; for a "
            "one-shot iterable write a generator function and use it as the reader"
        )
    return FromSequence(seq)
