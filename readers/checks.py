"""Argument checks shared by the decorators: eager, and saying what to change."""
from __future__ import annotations

import operator
from typing import Any

import numpy as np

__all__ = ["whole"]


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
