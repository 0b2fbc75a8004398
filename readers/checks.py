"""Argument checks shared by the decorators: eager, and saying what to change."""
from __future__ import annotations

import inspect
import operator
from typing import Any

import numpy as np

from readers.errors import BadType, BadValue
from readers.graph import Node, describe

__all__ = ["check_reader", "whole"]


def whole(value: Any, name: str, where: str, minimum: int = 0, *, floats: bool = True) -> int:
    """``value`` as an int >= ``minimum``; integral floats are accepted (as Paddle does) unless not ``floats``.

    >>> whole(32.0, "batch_size", "batch", 1)
    32
    >>> whole(2.5, "n", "firstn")
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: firstn: n must be an int >= 0, got 2.5
    >>> whole(3.0, "passes", "train", floats=False)
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: train: passes must be an int >= 0, got 3.0
    """
    ok = not isinstance(value, (bool, np.bool_))
    if ok and isinstance(value, (float, np.floating)):
        ok = floats and float(value).is_integer()
    elif ok:
        try:
            value = operator.index(value)
        except TypeError:
            ok = False
    if not ok or value < minimum:
        raise BadValue(f"{where}: {name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def _rows(value: Any) -> int | None:
    """The rows of an array (numpy's, or any with a ``shape``), or None for anything else or a 0-d array."""
    shape = getattr(value, "shape", None)
    return shape[0] if isinstance(shape, tuple) and shape and isinstance(shape[0], int) else None


def _wrapping(data: Any) -> str:
    """How to make a reader of ``data`` given where a reader was due."""
    if _rows(data) is not None:
        return "wrap the array with readers.np_array(x) (its rows as entries) or readers.from_arrays(x)"
    rows = [_rows(a) for a in data] if isinstance(data, (tuple, list)) and data else [None]
    if None not in rows and len(set(rows)) == 1:  # (x, y): what from_arrays zips row by row
        names = ", ".join("xyzw"[:len(rows)]) if len(rows) <= 4 else "*arrays"
        return (f"it holds {len(rows)} arrays of {rows[0]} rows: wrap them with readers.from_arrays({names}), "
                "whose entry i is the tuple of their rows i")
    return "wrap data with readers.from_sequence(...) or pass the generator function itself"


def check_reader(reader: Any, role: str = "reader") -> Any:
    """Check eagerly that ``reader`` is a zero-argument callable; return it.

    >>> check_reader(lambda: [1, 2]) is not None
    True
    >>> check_reader([1, 2])
    Traceback (most recent call last):
    ...
    readers.errors.BadType: reader must be a zero-argument callable returning an iterable, got list [1, 2]; wrap data with readers.from_sequence(...) or pass the generator function itself
    >>> check_reader((np.zeros((3, 2)), np.zeros(3)))
    Traceback (most recent call last):
    ...
    readers.errors.BadType: reader must be ...; it holds 2 arrays of 3 rows: wrap them with readers.from_arrays(x, y), whose entry i is the tuple of their rows i
    """
    if inspect.isgenerator(reader):
        raise BadType(
            f"{role} must be a zero-argument callable, got a generator object "
            f"{describe(reader)!r}; pass the generator function itself (without "
            "calling it) so every pass can start afresh"
        )
    if not callable(reader):
        shown = " ".join(repr(reader).split())  # an array's repr spans lines
        if len(shown) > 60:
            shown = shown[:57] + "..."
        raise BadType(
            f"{role} must be a zero-argument callable returning an iterable, got "
            f"{type(reader).__name__} {shown}; {_wrapping(reader)}"
        )
    if not isinstance(reader, Node):
        try:
            inspect.signature(reader).bind()
        except TypeError:
            raise BadType(
                f"{role} {describe(reader)!r} cannot be called with no arguments; a reader "
                "takes none (use functools.partial or a reader creator to bind them)"
            ) from None
        except ValueError:  # builtins without a signature: accept and find out later
            pass
    return reader
