"""The memory tier of ``readers.cached``: least recently used entries within a byte budget.

A hit hands out what the tier holds, so ``keep`` makes it safe to hand out
again: its arrays read-only and its own (a copy of one the function could
still write into, or of a small view of a bigger array, which would keep the
big one alive unseen by the budget); and an entry that holds lists, dicts,
sets or bytearrays is handed out as a fresh copy of those containers on each
hit (its arrays shared, read-only), so that changing what one pass got
changes nothing later. Other objects an entry holds are handed out as they
are.

Hits are the hot path of a cached pipeline, so a tier whose keys are ints
close together (sample IDs) also files its entries in arrays indexed by key
(``_IdIndex``): ``get_ids`` then serves a whole block of sample IDs in a few
vectorised steps, where a dict costs two or three operations per key, each a
cache miss under a shuffle. Its uses are noted in the arrays and applied to
the LRU order, in the order they happened, before any other lookup or any
change (a put, an eviction), so the tier stays exactly least recently used.
No checksum is taken on a hit: what the tier holds are this process's own
objects, read-only; entries read from disk were checked there.
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


#: An ``_IdIndex`` is made when the span of the int keys is at most this many times the entries held (plus
#: ``_SLACK``): its arrays (25 bytes a key) then cost about as much per entry as the dict does; it grows while
#: it is at most ``_GROWN_PER_ENTRY`` times as long, and is dropped past that (the gap keeps it from being
#: made and dropped over and over).
_SPAN_PER_ENTRY = 4
_GROWN_PER_ENTRY = 16
_SLACK = 4096


class _IdIndex:
    """The entries of int keys ``lo <= k < lo + len(values)`` in arrays: ``values[k - lo]`` (None where
    ``held`` is False), when each was last used (``used``, a count of lookups), and the rows used since the
    LRU order was brought up to date (``log``, in order; past ``len(values)`` rows, only ``used`` says)."""

    __slots__ = ("lo", "values", "held", "used", "log", "logged", "scan", "synced")

    def __init__(self, lo: int, span: int):
        self.lo = lo
        self.values = np.full(span, None, dtype=object)
        self.held = np.zeros(span, dtype=bool)
        self.used = np.zeros(span, dtype=np.int64)
        self.log: list[np.ndarray] = []
        self.logged, self.scan, self.synced = 0, False, 0


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

    Int keys close together (sample IDs) are also looked up many at once, all held or none given:

    >>> m = MemoryTier(budget=1000)
    >>> for i in range(4): m.put(i, i * 10, size=1)
    >>> m.get_ids(np.array([3, 0, 3])), m.get_ids(np.array([1, 7]))
    ([30, 0, 30], None)
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
        self._index: _IdIndex | None = None
        self._ints: list[int] | None = None  # [least, greatest] int key put; None: none yet, or a key not an int
        self._other_keys = False  # a key that is not an int was put: no index until cleared
        self._tick = 0  # lookups by get_ids: what ``_IdIndex.used`` counts
        self._deferred = False  # whether get_ids has used entries the LRU order does not show yet
        self._evictions_seen = 0  # the evictions when get_ids last found no index

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
            if self._deferred:
                self._sync()
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

    def get_ids(self, ids: np.ndarray) -> list | None:
        """The values of the int keys ``ids`` (an int64 array) when the tier holds every one, each then the most
        recently used, in order; None (and nothing used) when it misses any, or cannot tell in a few vectorised
        steps (its int keys are too far apart to index): ask ``get_many`` then."""
        index = self._index
        if index is None:
            # made only while the tier is not evicting: a tier that holds too little for its passes misses in
            # most blocks, and would pay for the index's upkeep on every put for nothing
            if self.evictions != self._evictions_seen or not self._indexable():
                self._evictions_seen = self.evictions
                return None
            with self._lock:
                index = self._index if self._index is not None else self._build()
            if index is None:
                return None
        rows = np.asarray(ids, dtype=np.int64) - index.lo
        if len(rows) == 0 or not (rows.view(np.uint64) < len(index.values)).all():  # (a row < 0 is huge as uint64)
            return None
        with self._lock:
            if index is not self._index or not index.held[rows].all():
                return None
            out = index.values[rows].tolist()
            self._tick += 1
            index.used[rows] = self._tick
            if not index.scan:
                index.log.append(rows)
                index.logged += len(rows)
                if index.logged > len(index.values):  # too many to replay: ``used`` says which, and when
                    index.log, index.scan = [], True
            self._deferred = True
        if self.copying:
            return [_thaw(v.value) if type(v) is _Thawed else v for v in out]
        return out

    def _indexable(self) -> bool:
        ints = self._ints
        return (not self._other_keys and ints is not None and len(self._entries) > 0
                and ints[1] - ints[0] < _SPAN_PER_ENTRY * len(self._entries) + _SLACK)

    def _build(self) -> _IdIndex | None:
        """An index of every entry (under the lock), when the keys are still close enough together."""
        if not self._indexable():
            return None
        lo, hi = self._ints
        index = _IdIndex(lo, hi - lo + 1)
        values = index.values
        for k, (v, _) in self._entries.items():  # one at a time: a list of values numpy could take for rows
            values[k - lo] = v
        index.held[np.fromiter(self._entries.keys(), dtype=np.int64, count=len(self._entries)) - lo] = True
        index.synced = self._tick
        self._index = index
        return index

    def _sync(self) -> None:
        """Apply get_ids' uses to the LRU order, oldest first (under the lock): what eager moves would have
        made it. Every change to the tier syncs first, so every key used since is still held."""
        index, self._deferred = self._index, False
        if index.scan:
            rows = np.flatnonzero(index.used > index.synced)
            rows = rows[np.argsort(index.used[rows], kind="stable")]  # (ties, one lookup's rows: in key order)
        else:
            rows = np.concatenate(index.log) if len(index.log) > 1 else index.log[0]
        for k in (rows + index.lo).tolist():
            self._entries.move_to_end(k)
        index.log, index.logged, index.scan, index.synced = [], 0, False, self._tick

    def _note(self, key: Hashable, value: Any) -> None:
        """Keep the int keys' span and the index up to date with a put of ``key`` (under the lock)."""
        if type(key) is not int:
            self._other_keys, self._ints, self._index = True, None, None
            return
        ints = self._ints
        if ints is None:
            if not self._other_keys:
                self._ints = [key, key]
        elif key < ints[0]:
            ints[0] = key
        elif key > ints[1]:
            ints[1] = key
        index = self._index
        if index is None:
            return
        row = key - index.lo
        if not 0 <= row < len(index.values):
            index = self._grow(index, key)
            if index is None:
                return
            row = key - index.lo
        index.values[row] = value
        index.held[row] = True

    def _grow(self, index: _IdIndex, key: int) -> _IdIndex | None:
        """The index grown to take ``key``, at least twice as long (so a pass putting its keys in order grows it
        a few times, not at every put); dropped when that is too long for the entries held, and made again by a
        lookup once there are enough of them (under the lock, the LRU order up to date)."""
        old = len(index.values)
        lo = min(key, index.lo)
        span = max(key, index.lo + old - 1) - lo + 1
        length = max(span, 2 * old)
        if length > _GROWN_PER_ENTRY * len(self._entries) + 2 * _SLACK:
            self._index = None
            return None
        if key < index.lo:  # room below, where it grows
            lo = index.lo + old - length
        grown = _IdIndex(lo, length)
        at = index.lo - lo
        grown.values[at:at + old] = index.values
        grown.held[at:at + old] = index.held
        grown.used[at:at + old] = index.used
        grown.synced = index.synced
        self._index = grown
        return grown

    def _drop(self, key: Hashable) -> None:
        """Take ``key`` out of the index (under the lock)."""
        index = self._index
        if index is not None and type(key) is int and 0 <= key - index.lo < len(index.values):
            index.values[key - index.lo] = None
            index.held[key - index.lo] = False

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
            if self._deferred:
                self._sync()
            old = self._entries.pop(key, None)  # a new value replaces the old, kept or not
            if old is not None:
                self.bytes -= old[1]
                self._drop(key)
            if size > self.budget or self.budget <= 0:
                return
            self._entries[key] = (value, size)
            self._note(key, value)
            self.bytes += size
            if self.bytes > self.budget:
                self._index = None  # evicting: made again once the tier has stopped (see get_ids)
            while self.bytes > self.budget:
                _, (_, dropped) = self._entries.popitem(last=False)
                self.bytes -= dropped
                self.evictions += 1

    def clear(self) -> None:
        """Drop every entry (the counts of evictions stay)."""
        with self._lock:
            self._entries.clear()
            self.bytes = 0
            self._index, self._ints, self._other_keys, self._deferred = None, None, False, False
