"""What a stage does with its parents: start their passes, open their plans, ask what they offer.

``iterate`` starts a parent's pass (any reader, a plain generator function
too) and notes it, so closing the pass closes it; ``open_plan`` gives a
planned parent's index plan; ``access_of``, ``is_planned``, ``is_indexed``
and ``as_indexed`` tell what a parent offers (``as_indexed`` adapts a user's
own object with ``len`` and ``[i]``).
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from readers.errors import BadType
from readers.graph import describe
from readers.passes import opened
from readers.plans import Plan
from readers.stage import IndexedReader, Reader, Stage

__all__ = ["access_of", "as_indexed", "is_indexed", "is_planned", "iterate", "open_plan"]


class _UserIndexed(IndexedReader):
    """Adapter for a user's object that is callable and has len and [i]."""

    def __init__(self, obj: Any):
        super().__init__()  # the object is shown in the options, not as a parent: it is no reader
        self.obj = obj

    def __len__(self) -> int:
        return len(self.obj)

    def _get(self, i: int) -> Any:
        return self.obj[i]

    def _options(self) -> str:
        return f"{describe(self.obj)}, len={len(self.obj)}"


def iterate(reader: Reader, pass_id: int | None = None, cursor: int = 0) -> Iterator:
    """Start a pass of ``reader`` and return its iterator, checking what it returned.

    Stages start their parents' passes with their own ``pass_id``, so a whole
    pipeline's randomness follows the pass of its outermost stage. A nonzero
    ``cursor`` starts the pass there (in ``reader``'s position units, see
    ``readers.position.advance``); a plain function's pass is read past its
    first ``cursor`` entries.

    >>> list(iterate(lambda: (x * x for x in range(3))))
    [0, 1, 4]
    >>> list(iterate(lambda: iter("abcd"), cursor=3))
    ['d']
    >>> iterate(lambda: 42)
    Traceback (most recent call last):
    ...
    readers.errors.BadType: reader <lambda> returned int, which is not iterable; a reader must return a fresh iterable (a list, or a generator from a generator function)
    """
    if isinstance(reader, Stage) and (pass_id is not None or cursor):
        return opened(reader.run(reader.next_pass if pass_id is None else pass_id, cursor))
    result = opened(reader())
    try:
        it = iter(result)
        return itertools.islice(it, cursor, None) if cursor else it
    except TypeError:
        raise BadType(
            f"reader {describe(reader)} returned {type(result).__name__}, which is not "
            "iterable; a reader must return a fresh iterable (a list, or a generator "
            "from a generator function)"
        ) from None


def is_planned(reader: Any) -> bool:
    """Whether ``reader``'s passes are index plans (indexed sources and what keeps them).

    >>> from readers import from_sequence, shuffle
    >>> is_planned(shuffle(from_sequence("abc"), seed=0)), is_planned(lambda: "abc")
    (True, False)
    """
    return access_of(reader) != "stream"


def access_of(reader: Any) -> str:
    """How ``reader``'s passes run: its declared ``access``, or "stream" for a plain reader.

    >>> from readers import from_sequence
    >>> access_of(from_sequence("ab")), access_of(lambda: iter("ab"))
    ('index', 'stream')
    """
    return reader.access if isinstance(reader, Stage) else "stream"


def is_indexed(reader: Any) -> bool:
    """Whether ``reader`` is a stage with random access (``len`` and ``[i]``).

    >>> from readers import from_sequence, shuffle
    >>> is_indexed(from_sequence("ab")), is_indexed(shuffle(from_sequence("ab"), seed=0))
    (True, False)
    """
    return access_of(reader) == "index"


def open_plan(reader: Any, pass_id: int, cursor: int = 0) -> Plan | None:
    """Start pass ``pass_id`` of ``reader`` (at ``cursor``) as an index plan, or return None for a stream.

    >>> from readers import from_sequence
    >>> plan = open_plan(from_sequence("abc"), 0)
    >>> [plan.source[int(i)] for chunk in plan.chunks for i in chunk]
    ['a', 'b', 'c']
    >>> open_plan(lambda: iter("abc"), 0) is None
    True
    """
    return reader.plan(pass_id, cursor) if isinstance(reader, Stage) else None


def as_indexed(reader: Any) -> Stage | None:
    """``reader`` as a stage with random access when it has ``len`` and ``[i]``, else None.

    >>> from readers import from_sequence
    >>> r = from_sequence([3, 4])
    >>> as_indexed(r) is r
    True
    >>> as_indexed(lambda: iter([3, 4])) is None
    True
    """
    if isinstance(reader, Stage):
        return reader if is_indexed(reader) else None
    if callable(reader) and hasattr(reader, "__len__") and hasattr(reader, "__getitem__"):
        return _UserIndexed(reader)
    return None
