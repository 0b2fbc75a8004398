"""The iterator of one pass: what a call of a readerkit reader returns, and where it is."""
from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator
from typing import Any

from readers.position import state_of

__all__ = ["PassIterator", "close_iterator"]


def _end_of(flag: list) -> Iterator:
    """Chained after a pass's entries: runs once, when they run out, and yields nothing."""
    flag.append(True)  # a list, not the PassIterator: a cycle would delay closing an abandoned pass
    return
    yield


_first = operator.itemgetter(0)
_MANY = 1 << 62  # more entries than any pass gives: the counter below never runs out


class PassIterator:
    """The iterator of one pass of a readerkit reader; ``get_state()`` says where it is.

    It counts what it hands out at C speed (``zip`` with a range iterator,
    whose ``length_hint`` tells how far it got), so a ``for`` loop over it
    costs no Python call per entry.

    >>> from readers import from_sequence
    >>> it = from_sequence("abc")()
    >>> next(it), it.get_state()
    ('a', {'pass': 0, 'cursor': 1, 'seed': None})
    >>> list(it), it.get_state()
    (['b', 'c'], {'pass': 1, 'cursor': 0, 'seed': None})
    """

    __slots__ = ("reader", "pass_id", "start", "_ended", "_raw", "_counter", "_fast")

    def __init__(self, reader: Any, pass_id: int, start: int):
        self.reader, self.pass_id, self.start, self._ended = reader, pass_id, start, []
        self._raw = reader.run(pass_id, start)
        self._counter = iter(range(_MANY))
        # zip takes the entry first, so the counter moves only for entries handed out
        self._fast = map(_first, zip(itertools.chain(self._raw, _end_of(self._ended)), self._counter))

    @property
    def done(self) -> bool:
        """Whether the pass has run out."""
        return bool(self._ended)

    @property
    def consumed(self) -> int:
        """Entries handed out so far in this pass."""
        return _MANY - operator.length_hint(self._counter)

    def __iter__(self) -> Iterator:
        return self._fast

    def __next__(self) -> Any:
        return next(self._fast)

    def close(self) -> None:
        close_iterator(self._raw)

    def get_state(self) -> dict:
        """Where this pass is, as a small JSON-able dict for ``reader.set_state``.

        >>> from readers import from_sequence
        >>> it = from_sequence(range(5))()
        >>> [next(it) for _ in range(2)] and it.get_state()
        {'pass': 0, 'cursor': 2, 'seed': None}
        """
        return state_of(self.reader, self.pass_id, self.start, self.consumed, self.done)


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
