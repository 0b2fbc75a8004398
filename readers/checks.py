"""Argument checks shared by the decorators: eager, and saying what to change."""
from __future__ import annotations

import inspect
import operator
from typing import Any

import numpy as np

from readers.pipeline import Node, describe

__all__ = ["check_reader", "whole"]


def whole(value: Any, name: str, where: str, minimum: int = 0, *, floats: bool = True) -> int:
    """``value`` as an int >= ``minimum``; integral floats are accepted (as Paddle does) unless not ``floats``.

    >>> whole(32.0, "batch_size", "batch", 1)
    32
    >>> whole(2.5, "n", "firstn")
    Traceback (most recent call last):
    ...
    ValueError: firstn: n must be an int >= 0, got 2.5
    >>> whole(3.0, "passes", "train", floats=False)
    Traceback (most recent call last):
    ...
    ValueError: train: passes must be an int >= 0, got 3.0
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
        raise ValueError(f"{where}: {name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def check_reader(reader: Any, role: str = "reader") -> Any:
    """Check eagerly that ``reader`` is a zero-argument callable; return it.

    >>> check_reader(lambda: [1, 2]) is not None
    True
    >>> check_reader([1, 2])
    Traceback (most recent call last):
    ...
    TypeError: reader must be a zero-argument callable returning an iterable, got list [1, 2]; wrap data with readers.from_sequence(...) or pass the generator function itself
    """
    if inspect.isgenerator(reader):
        raise TypeError(
            f"{role} must be a zero-argument callable, got a generator object "
            f"{describe(reader)!r}; pass the generator function itself (without "
            "calling it) so every pass can start afresh"
        )
    if not callable(reader):
        shown = repr(reader)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        raise TypeError(
            f"{role} must be a zero-argument callable returning an iterable, got "
            f"{type(reader).__name__} {shown}; wrap data with readers.from_sequence(...) "
            "or pass the generator function itself"
        )
    if not isinstance(reader, Node):
        try:
            inspect.signature(reader).bind()
        except TypeError:
            raise TypeError(
                f"{role} {describe(reader)!r} cannot be called with no arguments; a reader "
                "takes none (use functools.partial or a reader creator to bind them)"
            ) from None
        except ValueError:  # builtins without a signature: accept and find out later
            pass
    return reader
