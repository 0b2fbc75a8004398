"""Collation: turn one minibatch (a list of entries) into one array per column."""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from functools import reduce
from typing import Any, NamedTuple

import numpy as np

from readers.errors import BadValue

__all__ = ["Padded", "collate", "collate_column"]


class Padded(NamedTuple):
    """A padded batch of variable-length sequences: ``data`` (batch, max_len, ...) and ``lengths``.

    >>> p = Padded(np.array([[1, 2], [3, 0]]), np.array([2, 1]))
    >>> p.mask.tolist()
    [[True, True], [True, False]]

    See Also:
        collate
    """

    data: np.ndarray
    lengths: np.ndarray

    @property
    def mask(self) -> np.ndarray:
        """Bool (batch, max_len): True at real positions, False at padding."""
        return np.arange(self.data.shape[1]) < self.lengths[:, None]


def collate(entries: Sequence[Any], *, pad_value: Any = 0) -> Any:
    """Turn a list of entries into one array per column, padding variable-length columns.

    Tuple entries give a tuple of columns, dict entries a dict with the same
    keys, single values one column. Numbers and same-shape arrays are stacked
    into (batch, ...); sequences whose first dimension varies are padded with
    ``pad_value`` into a ``Padded(data, lengths)``; str and bytes stay a list.

    >>> images, labels = collate([(np.zeros(3, np.uint8), 0), (np.ones(3, np.uint8), 1)])
    >>> images.shape, images.dtype, labels.tolist()
    ((2, 3), dtype('uint8'), [0, 1])
    >>> tokens, text = collate([([5, 6, 7], "abc"), ([8], "d")], pad_value=-1)
    >>> tokens.data.tolist(), tokens.lengths.tolist(), text
    ([[5, 6, 7], [8, -1, -1]], [3, 1], ['abc', 'd'])
    >>> tokens.mask.tolist()
    [[True, True, True], [True, False, False]]
    >>> collate([{"x": 1.5, "y": 2}, {"x": 2.5, "y": 3}])
    {'x': array([1.5, 2.5]), 'y': array([2, 3])}
    >>> collate([np.zeros(3), np.zeros((2, 2))])
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: the single-value column cannot be stacked: shapes (3,) x1, (2, 2) x1; give values of one shape, or sequences whose shapes differ only in their first dimension (those are padded)

    See Also:
        Padded, batching.batch, batching.bucket_by_length
    """
    if not isinstance(entries, list):
        entries = list(entries)
    if not entries:
        raise BadValue(
            "collate needs at least one entry, got an empty batch; drop empty batches before collating"
        )
    first = entries[0]
    if isinstance(first, tuple):
        n = len(first)
        if not all(isinstance(e, tuple) and len(e) == n for e in entries):
            raise _structure_error(entries)
        # numpy coerces a list of arrays faster than a tuple of them.
        columns = [collate_column(c, f"column {i}", pad_value) for i, c in enumerate(map(list, zip(*entries)))]
        return type(first)._make(columns) if hasattr(first, "_fields") else tuple(columns)
    if isinstance(first, dict):
        keys = first.keys()
        if not all(isinstance(e, dict) and e.keys() == keys for e in entries):
            raise _structure_error(entries)
        return {k: collate_column([e[k] for e in entries], f"column {k!r}", pad_value) for k in first}
    if any(isinstance(e, (tuple, dict)) for e in entries):
        raise _structure_error(entries)
    return collate_column(entries, "the single-value column", pad_value)


def collate_column(values: Sequence[Any], label: str = "column", pad_value: Any = 0) -> Any:
    """One column's values as collate gives them: an array, a Padded, or a list of str / bytes.

    ``label`` names the column in error messages.

    >>> collate_column([[1, 2], [3]]).lengths.tolist()
    [2, 1]
    """
    first = values[0]
    if isinstance(first, (str, bytes)):
        text = str if isinstance(first, str) else bytes
        if all(isinstance(v, text) for v in values):
            return list(values)
        _check_kinds(values, label)
    try:
        # One C call for the common case; shapes are only analysed when it fails.
        out = np.asarray(values)
    except (ValueError, TypeError):
        return _pad(values, label, pad_value)
    if out.dtype.kind in "OUS":  # None, objects or a str mixed with numbers end up here
        _check_kinds(values, label)
        if out.dtype.kind == "O":
            if _kind(first) == "array-like":
                return _pad(values, label, pad_value)
            raise BadValue(
                f"{label} holds {type(first).__name__} values, which do not make a numeric array; "
                "map them to numbers, arrays, str or bytes before collating"
            )
    return out


def _kind(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, (str, bytes)):
        return type(value).__name__
    if isinstance(value, (int, float, complex, np.generic, np.ndarray, list, tuple)):
        return "array-like"
    return type(value).__name__


def _check_kinds(values: Sequence[Any], label: str) -> None:
    """Raise when a column holds None or mixes kinds (numbers/arrays, str, bytes, objects)."""
    kinds = [_kind(v) for v in values]
    if "None" in kinds:
        raise BadValue(
            f"{label} holds None (entry {kinds.index('None')}), which collate cannot put in an "
            "array; map None to a value first (e.g. -1, or an empty sequence, which is padded)"
        )
    if len(set(kinds)) > 1:
        counts = Counter(type(v).__name__ for v in values)
        found = ", ".join(f"{name} x{n}" for name, n in counts.items())
        raise BadValue(
            f"{label} mixes kinds of value: {found}; give every entry the same kind in this "
            "column (numbers and arrays, or str, or bytes)"
        )


def _pad(values: Sequence[Any], label: str, pad_value: Any) -> Padded:
    """Pad sequences whose first dimension varies, or explain why the column cannot be stacked."""
    _check_kinds(values, label)
    arrays = []
    for i, v in enumerate(values):
        try:
            a = np.asarray(v)
        except (ValueError, TypeError) as exc:
            reason = str(exc).rstrip(".")
            raise BadValue(f"{label}, entry {i}: {reason}; give arrays or regular nested lists") from None
        if a.dtype.kind == "O":
            raise BadValue(
                f"{label}, entry {i}: the {type(v).__name__} value only makes an object array (it "
                "holds None, Python objects or ints beyond 64 bits); give numbers or arrays"
            )
        arrays.append(a)
    # A 1-D empty value (e.g. []) fits any trailing shape: it contributes no rows.
    trails = {a.shape[1:] for a in arrays if a.shape != (0,)}
    if any(a.ndim == 0 for a in arrays) or len(trails) > 1:
        shapes = Counter(a.shape for a in arrays)
        found = ", ".join(f"{shape} x{n}" for shape, n in shapes.items())
        raise BadValue(
            f"{label} cannot be stacked: shapes {found}; give values of one shape, or sequences "
            "whose shapes differ only in their first dimension (those are padded)"
        )
    trail = trails.pop() if trails else ()
    filled = {a.dtype for a in arrays if a.size} or {arrays[0].dtype}
    kinds = {d.kind for d in filled}
    if kinds & set("US"):
        # numpy would promote numbers to str, and pad_value 0 would become "0": refuse both.
        if kinds - set("US"):
            found = sorted(map(str, filled))
            raise BadValue(f"{label} mixes numbers and strings (dtypes {found}); give one kind")
        raise BadValue(
            f"{label} holds variable-length sequences of strings, which collate does not pad; "
            "map the strings to numbers (e.g. token ids) first"
        )
    try:
        dtype = reduce(np.promote_types, filled)
    except TypeError:
        found = sorted(map(str, filled))
        raise BadValue(f"{label} mixes dtypes {found}; cast them to one dtype") from None
    lengths = np.array([len(a) for a in arrays], dtype=np.int64)
    try:
        data = np.full((len(arrays), int(lengths.max()), *trail), pad_value, dtype=dtype)
    except (ValueError, TypeError, OverflowError) as exc:
        raise BadValue(
            f"pad_value {pad_value!r} does not fit {label}'s dtype {dtype} ({exc}); "
            "choose a pad_value that does, or cast the column"
        ) from None
    padded = Padded(data, lengths)
    data[padded.mask] = np.concatenate([a.reshape(len(a), *trail) for a in arrays])
    return padded


def _signature(entry: Any) -> tuple:
    if isinstance(entry, tuple):
        return ("tuple", len(entry))
    if isinstance(entry, dict):
        return ("dict", frozenset(entry))
    return ("single",)


def _shown(entry: Any) -> str:
    if isinstance(entry, tuple):
        return f"a tuple of {len(entry)}"
    if isinstance(entry, dict):
        return f"a dict with keys {list(entry)}"
    return f"a single {type(entry).__name__}"


def _structure_error(entries: Sequence[Any]) -> ValueError:
    first = entries[0]
    want = _signature(first)
    i = next(k for k, e in enumerate(entries) if _signature(e) != want)
    detail = ""
    if isinstance(first, dict) and isinstance(entries[i], dict):
        missing = [k for k in first if k not in entries[i]]
        extra = [k for k in entries[i] if k not in first]
        detail = f" (missing {missing}, extra {extra})"
    return BadValue(
        f"collate needs entries of one structure: entry 0 is {_shown(first)} but entry {i} is "
        f"{_shown(entries[i])}{detail}; make every entry the same tuple length or dict keys"
    )
