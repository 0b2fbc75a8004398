"""The memory tier of ``readers.cached``: least recently used entries within a byte budget.

A hit hands out the object the tier holds, so ``keep`` makes what it holds
safe to hand out again: arrays as read-only views (a copy, when a small view
would keep a bigger array alive unseen by the budget), and an entry that
holds lists, dicts or sets as its encoded blob (``readers.cache_codec``),
decoded afresh on every hit, so that changing what one pass got changes
nothing later. An entry the codec cannot encode is kept as it is.
"""
from __future__ import annotations

import operator
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from readers.cache_codec import decode, encode, size_of

__all__ = ["MISSING", "MemoryTier"]

#: What ``MemoryTier.get_many`` gives for a key it does not hold.
MISSING: Any = type("Missing", (), {"__repr__": lambda self: "MISSING"})()
_first = operator.itemgetter(0)


def _frozen(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a`` (the array func returned, perhaps one of its own, stays as it was); a copy when
    ``a`` is a small view of a bigger array, which the memory tier's budget would not see."""
    base = a.base if isinstance(a.base, np.ndarray) else None
    view = a.copy() if base is not None and base.nbytes > 2 * a.nbytes else a.view()
    view.flags.writeable = False
    return view


def _read_only(value: Any) -> Any:
    """The entry with its arrays (an array, or the arrays of a tuple) as read-only views: a hit hands out the
    same object, and writing into it would change what every later pass reads."""
    if isinstance(value, np.ndarray):
        return _frozen(value)
    if isinstance(value, tuple) and any(isinstance(v, np.ndarray) for v in value):
        items = [_frozen(v) if isinstance(v, np.ndarray) else v for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)  # a namedtuple stays one
    return value


def _mutable(value: Any) -> bool:
    """Whether ``value`` holds a list, dict or set anywhere: such an entry is kept in memory encoded, and each
    hit decodes a fresh copy, so that changing what one pass got changes nothing later."""
    if isinstance(value, (list, dict, set, bytearray)):
        return True
    return isinstance(value, tuple) and any(map(_mutable, value))


class _Encoded(bytes):
    """An entry the memory tier keeps as its blob (``readers.cache_codec``)."""


_tiers: weakref.WeakSet = weakref.WeakSet()


def _new_locks() -> None:
    """In a forked child: a lock that a parent's thread held at the fork would never be released."""
    for tier in list(_tiers):
        tier._lock = threading.Lock()


os.register_at_fork(after_in_child=_new_locks)


class MemoryTier:
    """Entries by key, least recently used first out, their sizes (``cache_codec.size_of``) never over ``budget``
    bytes. An entry bigger than the whole budget is not kept. Safe to share between threads; a copy made by
    pickling (a worker process) starts empty.

    >>> m = MemoryTier(budget=1000)
    >>> m.put("a", b"x" * 400); m.put("b", b"y" * 400); m.get_many(["a"]) == [b"x" * 400]
    True
    >>> m.put("c", b"z" * 400)  # over budget: "b", used least recently, goes
    >>> [v is MISSING for v in m.get_many(["a", "b", "c"])], m.evictions
    ([False, True, False], 1)
    >>> m.put("big", b"w" * 2000); m.get_many(["big"])
    [MISSING]
    """

    def __init__(self, budget: int):
        self.budget = budget
        self._setup()

    def _setup(self) -> None:
        self._entries: OrderedDict = OrderedDict()  # key -> (value, size), least recently used first
        self._lock = threading.Lock()
        _tiers.add(self)
        self.bytes = 0
        self.evictions = 0
        self.encoded = False  # whether any entry is kept encoded: hits look for them only then

    def __getstate__(self) -> dict:
        return {"budget": self.budget}

    def __setstate__(self, state: dict) -> None:
        self.budget = state["budget"]
        self._setup()

    def __len__(self) -> int:
        return len(self._entries)

    def get_many(self, keys: Sequence[Hashable]) -> list:
        """The value of each key, or ``MISSING``; each one found becomes the most recently used."""
        entries = self._entries
        if not entries:
            return [MISSING] * len(keys)
        with self._lock:
            found = list(map(entries.get, keys))  # C-level loops: a hit costs a few dict operations
            if None not in found:
                list(map(entries.move_to_end, keys))
                out = list(map(_first, found))
            else:
                for k, f in zip(keys, found):
                    if f is not None:
                        entries.move_to_end(k)
                out = [MISSING if f is None else f[0] for f in found]
        if self.encoded:
            return [decode(v) if type(v) is _Encoded else v for v in out]
        return out

    def keep(self, key: Hashable, value: Any) -> Any:
        """Keep ``value`` (see the module doc) and return what to hand out for it now: what a hit will give.

        >>> m = MemoryTier(budget=1 << 20)
        >>> got = m.keep("a", {"ids": [1, 2]})
        >>> got["ids"].append(3)
        >>> m.get_many(["a"])
        [{'ids': [1, 2]}]
        """
        value = _read_only(value)
        if self.budget > 0 and _mutable(value):
            try:
                blob = _Encoded(encode(value))
            except TypeError:  # not storable: kept as it is
                pass
            else:
                self.encoded = True
                self.put(key, blob, len(blob) + 64)
                return decode(blob)
        self.put(key, value)
        return value

    def put(self, key: Hashable, value: Any, size: int | None = None) -> None:
        """Keep ``value`` under ``key`` (its size measured unless given), evicting the least recently used."""
        size = size_of(value) if size is None else size
        with self._lock:
            old = self._entries.pop(key, None)  # a new value replaces the old, kept or not
            if old is not None:
                self.bytes -= old[1]
            if size > self.budget or self.budget <= 0:
                return
            self._entries[key] = (value, size)
            self.bytes += size
            while self.bytes > self.budget:
                _, (_, dropped) = self._entries.popitem(last=False)
                self.bytes -= dropped
                self.evictions += 1

    def clear(self) -> None:
        """Drop every entry (the counts of evictions stay)."""
        with self._lock:
            self._entries.clear()
            self.bytes = 0
