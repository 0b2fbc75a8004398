"""The memory tier of ``readers.cached``: least recently used entries within a byte budget."""
from __future__ import annotations

import operator
import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any

from readers.cache_codec import size_of

__all__ = ["MISSING", "MemoryTier"]

#: What ``MemoryTier.get_many`` gives for a key it does not hold.
MISSING: Any = type("Missing", (), {"__repr__": lambda self: "MISSING"})()
_first = operator.itemgetter(0)


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
        self.bytes = 0
        self.evictions = 0

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
                return list(map(_first, found))
            for k, f in zip(keys, found):
                if f is not None:
                    entries.move_to_end(k)
        return [MISSING if f is None else f[0] for f in found]

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
