"""The memory tier of ``readers.cached``: least recently used entries within a byte budget.

A hit hands out what the tier holds, so ``keep`` makes it safe to hand out
again: its arrays read-only and its own (a copy of one the function could
still write into, or of a small view of a bigger array, which would keep the
big one alive unseen by the budget); and an entry that holds lists, dicts,
sets or bytearrays is handed out as a fresh copy of those containers on each
hit (its arrays shared, read-only), so that changing what one pass got
changes nothing later. Other objects an entry holds are handed out as they
are.
"""
from __future__ import annotations

import copy
import operator
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from readers.storage.codec import size_of

__all__ = ["MISSING", "MemoryTier"]

#: What ``MemoryTier.get_many`` gives for a key it does not hold.
MISSING: Any = type("Missing", (), {"__repr__": lambda self: "MISSING"})()
_first = operator.itemgetter(0)


def _frozen(a: np.ndarray) -> np.ndarray:
    """``a`` as the tier keeps it: read-only, and its own. An array func can still write into (a buffer it
    reuses, one of its tables) is copied, and so is a small view of a bigger array, which would keep the big
    one alive unseen by the budget; one already read-only and compact (from the disk tier) is kept as it is."""
    base = a.base if isinstance(a.base, np.ndarray) else None
    if a.flags.writeable or (base is not None and base.nbytes > 2 * a.nbytes):
        a = a.copy()
        a.flags.writeable = False
    return a


_CONTAINERS = (list, dict, set, bytearray)


def _freeze(value: Any) -> tuple[Any, bool]:
    """(``value`` with every array in it ``_frozen``, whether it holds a list, dict, set or bytearray anywhere:
    such an entry is handed out as a fresh copy of its containers on each hit, ``_thaw``)."""
    if isinstance(value, np.ndarray):
        return _frozen(value), False
    if isinstance(value, tuple):
        if not value:
            return value, False
        items, mutable = zip(*map(_freeze, value))
        if any(i is not v for i, v in zip(items, value)):
            value = type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
        return value, any(mutable)
    if isinstance(value, dict):
        out = copy.copy(value)  # a subclass keeps its type and state (a defaultdict its factory)
        for k, v in value.items():
            out[k] = _freeze(v)[0]
        return out, True
    if isinstance(value, list):
        out = copy.copy(value)
        out[:] = [_freeze(v)[0] for v in value]
        return out, True
    return value, isinstance(value, _CONTAINERS)  # a set's items are hashable: no arrays in it


def _thaw(value: Any) -> Any:
    """A fresh copy of ``value``'s containers (its arrays, read-only, shared): what a hit hands out."""
    if isinstance(value, tuple):
        items = [_thaw(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if isinstance(value, dict):
        out = copy.copy(value)  # a subclass keeps its type and state (a defaultdict its factory)
        for k, v in value.items():
            out[k] = _thaw(v)
        return out
    if isinstance(value, list):
        out = copy.copy(value)
        out[:] = [_thaw(v) for v in value]
        return out
    if isinstance(value, (set, bytearray)):
        return copy.copy(value)
    return value


class _Thawed:
    """An entry the tier holds whose containers each hit copies."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


_tiers: weakref.WeakSet = weakref.WeakSet()


def _new_locks() -> None:
    """In a forked child: a lock that a parent's thread held at the fork would never be released."""
    for tier in list(_tiers):
        tier._lock = threading.Lock()


os.register_at_fork(after_in_child=_new_locks)


class MemoryTier:
    """Entries by key, least recently used first out, their sizes (``readers.storage.codec.size_of``) never over
    ``budget`` bytes. An entry bigger than the whole budget is not kept. Safe to share between threads; a copy made by
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
        self.copying = False  # whether any entry holds containers to copy: hits look for them only then

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
        if self.copying:
            return [_thaw(v.value) if type(v) is _Thawed else v for v in out]
        return out

    def keep(self, key: Hashable, value: Any) -> Any:
        """Keep ``value`` (see the module doc) and return what to hand out for it now: what a hit will give.

        >>> m = MemoryTier(budget=1 << 20)
        >>> got = m.keep("a", {"ids": [1, 2]})
        >>> got["ids"].append(3)
        >>> m.get_many(["a"])
        [{'ids': [1, 2]}]
        """
        value, mutable = _freeze(value)
        if not mutable:
            self.put(key, value)
            return value
        self.copying = True
        self.put(key, _Thawed(value), size_of(value) + 64)
        return _thaw(value)

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
