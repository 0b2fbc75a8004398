"""How a trigger's spec is written and read: the forms ``train.parse_trigger`` accepts and the values in them.

``train.continual.triggers`` builds each trigger from the values read here. A value
that does not read is refused in the spec's own words, saying what it needs
(``every:N needs a whole number N >= 1, got '2.5'``), never with Python's
``int()`` or ``float()`` message; the trigger's own checks (a threshold in
[0, 1), bins only with ``on=feature``) come after.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from readers.errors import BadValue

__all__ = ["FORMS", "drift_options", "read_value", "spec_number"]

FORMS = ("every:N (N >= 1), time:SECONDS (SECONDS > 0), "
         "drift:window=W,threshold=X[,on=label|feature][,bins=B][,bounds=LO:HI] (W >= 1, 0 <= X < 1, B >= 1; "
         "bins and bounds with on=feature)")


def spec_number(x: float) -> str:
    """A number as a spec writes it: 86400 rather than 86400.0, and exactly (repr) otherwise.

    >>> spec_number(86400.0), spec_number(0.1), spec_number(-1)
    ('86400', '0.1', '-1')
    """
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def read_value(text: str, parse: Callable[[str], Any], needs: str) -> Any:
    """``text`` read by ``parse`` (``int``: a whole number >= 1); else a ValueError: what it ``needs``, and ``text``.

    >>> read_value(" 500", int, "every:N needs a whole number N >= 1")
    500
    >>> read_value("2.5", int, "every:N needs a whole number N >= 1")
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: every:N needs a whole number N >= 1, got '2.5'
    """
    try:
        value = parse(text.strip())
    except ValueError:
        value = None
    if value is None or (parse is int and value < 1):
        raise BadValue(f"{needs}, got {text.strip()!r}")
    return value


def _bounds(text: str) -> tuple[float, float]:
    low, sep, high = text[1:].partition(":")  # from 1: a negative LO's sign is no separator
    if not sep:
        raise BadValue("no LO:HI")
    return float(text[0] + low), float(high)


def _on(text: str) -> str:
    if text not in ("label", "feature"):
        raise BadValue("neither")
    return text


_DRIFT = {"window": (int, "window=W needs a whole number W >= 1"),
          "threshold": (float, "threshold=X needs a number X, 0 <= X < 1"),
          "on": (_on, "on= needs label or feature"),
          "bins": (int, "bins=B needs a whole number B >= 1"),
          "bounds": (_bounds, "bounds=LO:HI needs two numbers, LO < HI")}


def drift_options(text: str) -> dict[str, Any]:
    """The options of a ``drift:`` spec (what follows the colon), read: ``train.Drift``'s keyword arguments.

    >>> drift_options("window=500,threshold=0.3,on=feature,bounds=-1:1")
    {'window': 500, 'threshold': 0.3, 'on': 'feature', 'bounds': (-1.0, 1.0)}
    >>> drift_options("window=500,threshold=x")
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: threshold=X needs a number X, 0 <= X < 1, got 'x'
    """
    options: dict[str, Any] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in _DRIFT:
            raise BadValue(f"{part!r} is not one of window=, threshold=, on=, bins=, bounds=")
        if key in options:
            raise BadValue(f"{key}= is given twice")
        options[key] = read_value(value, *_DRIFT[key])
    missing = [k for k in ("window", "threshold") if k not in options]
    if missing:
        raise BadValue(f"drift needs {' and '.join(k + '=' for k in missing)}")
    return options
