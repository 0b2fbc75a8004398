"""The iterator of one pass: what a call of a readerkit reader returns, and where it is."""
from __future__ import annotations

import itertools
import operator
import threading
from collections.abc import Iterator
from typing import Any

from readers.graph import Node, walk
from readers.position import state_of

__all__ = ["PassIterator", "close_iterator", "end_pass", "opened"]

_starting = threading.local()  # .opened: what the pass being started in this thread opens, to close with it


def opened(it: Any) -> Any:
    """Note that the pass being started opened ``it`` (a parent's pass), so closing the pass closes it; return it.

    ``readers.parents.iterate`` notes every pass it starts. A stage's pass is
    often a C-level ``map`` or ``islice`` over its parents', which has no
    ``close``: without this, closing it would leave a generator (a file, a
    worker pool) below it running until the pass is garbage-collected.
    """
    found = getattr(_starting, "opened", None)
    if found is not None and hasattr(it, "close"):
        found.append(it)
    return it


def end_pass(reader: Any) -> None:
    """Tell every stage of ``reader``'s pipeline that a pass of it ran out or was closed: each stage's
    ``finish_pass()`` runs (a cache that buffers writes ends them). Pass iterators and workers call it.

    >>> from readers import from_sequence
    >>> end_pass(from_sequence("ab"))
    """
    for stage in walk(reader):
        if isinstance(stage, Node):
            stage.finish_pass()


def _end_of(flag: list, reader: Any) -> Iterator:
    """Chained after a pass's entries: runs once, when they run out, and yields nothing."""
    flag.append(True)  # a list, not the PassIterator: a cycle would delay closing an abandoned pass
    end_pass(reader)
    return
    yield


_first = operator.itemgetter(0)
_MANY = 1 << 62  # more entries than any pass gives: the counter below never runs out


class PassIterator(map):
    """The iterator of one pass of a readerkit reader; ``get_state()`` says where it is.

    It is a ``map`` over its entries zipped with a range iterator, whose
    ``length_hint`` tells how many were handed out: ``iter(it)`` is ``it``
    itself, and a ``for`` loop over it runs at C speed, with no Python call
    per entry.

    >>> from readers import from_sequence
    >>> it = from_sequence("abc")()
    >>> iter(it) is it
    True
    >>> next(it), it.get_state()
    ('a', {'pass': 0, 'cursor': 1, 'seed': None})
    >>> list(it), it.get_state()
    (['b', 'c'], {'pass': 1, 'cursor': 0, 'seed': None})
    """

    __slots__ = ("reader", "pass_id", "start", "_ended", "_raw", "_opened", "_counter")

    def __new__(cls, reader: Any, pass_id: int, start: int) -> PassIterator:
        outer, found = getattr(_starting, "opened", None), []
        _starting.opened = found
        try:
            raw = reader.run(pass_id, start)
        finally:
            _starting.opened = outer
        ended, counter = [], iter(range(_MANY))
        # zip takes the entry first, so the counter moves only for entries handed out
        self = super().__new__(cls, _first, zip(itertools.chain(raw, _end_of(ended, reader)), counter))
        self.reader, self.pass_id, self.start = reader, pass_id, start
        self._ended, self._raw, self._opened, self._counter = ended, raw, found, counter
        return self

    @property
    def done(self) -> bool:
        """Whether the pass has run out.

        >>> from readers import from_sequence
        >>> it = from_sequence("a")()
        >>> it.done, list(it), it.done
        (False, ['a'], True)
        """
        return bool(self._ended)

    @property
    def consumed(self) -> int:
        """Entries handed out so far in this pass.

        >>> from readers import from_sequence
        >>> it = from_sequence("abc")()
        >>> next(it) and it.consumed
        1
        """
        return _MANY - operator.length_hint(self._counter)

    def close(self) -> None:
        """Stop the pass: close it and every pass it opened, outermost first (files, worker pools...).

        Afterwards ``next`` ends the pass, and so does a ``for`` loop that
        closed its own pass midway.

        >>> from readers import map_readers
        >>> def numbers():
        ...     try:
        ...         yield from range(5)
        ...     finally:
        ...         print("numbers closed")
        >>> it = map_readers(str, numbers)()
        >>> next(it)
        '0'
        >>> it.close()
        numbers closed
        >>> list(it), it.get_state()["cursor"]
        ([], 1)
        """
        if self._opened is None:
            return
        opened, self._opened = self._opened, None  # None: closed
        self._ended = list(self._ended)  # what the closed chain does now changes nothing: done stays as it was
        # map's own __next__ would go on reading the closed pipeline: the closed class ends the pass
        # instead, and a for loop already running over this object sees it at its next step
        self.__class__ = _ClosedPass
        close_iterator(self._raw)
        for it in reversed(opened):
            close_iterator(it)
        if not self._ended:
            end_pass(self.reader)

    def get_state(self) -> dict:
        """Where this pass is, as a small JSON-able dict for ``reader.set_state``.

        >>> from readers import from_sequence
        >>> it = from_sequence(range(5))()
        >>> [next(it) for _ in range(2)] and it.get_state()
        {'pass': 0, 'cursor': 2, 'seed': None}
        """
        return state_of(self.reader, self.pass_id, self.start, self.consumed, self.done)


class _ClosedPass(PassIterator):
    """A closed pass: it gives no more entries (``PassIterator.close`` moves a pass to this class)."""

    __slots__ = ()

    def __next__(self) -> Any:
        raise StopIteration


def close_iterator(it: Any) -> None:
    """Close ``it`` when it can be closed (a generator, a pass iterator); plain iterators need nothing.

    >>> def numbers():
    ...     yield 1
    ...     yield 2
    >>> g = numbers(); next(g); close_iterator(g); list(g)
    1
    []
    >>> close_iterator(iter([1]))
    """
    close = getattr(it, "close", None)
    if close is not None:
        close()
