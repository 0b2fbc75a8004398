"""Small readers and functions the decorator tests share (module level, so pipelines of them pickle)."""
from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import Any


def ten(offset: int = 0) -> Iterator[int]:
    """Paddle's test reader: entries offset..offset+9."""
    yield from range(offset, offset + 10)


def ten_reader(offset: int = 0):
    return functools.partial(ten, offset)


def double(x: Any) -> Any:
    return 2 * x


def add_one(x: Any) -> Any:
    return x + 1


def is_odd(x: int) -> bool:
    return x % 2 == 1


class CountingReader:
    """A stream that counts the passes started and entries pulled."""

    def __init__(self, items: Iterable):
        self.items = list(items)
        self.calls = 0
        self.pulled = 0

    def __call__(self) -> Iterator:
        self.calls += 1
        for item in self.items:
            self.pulled += 1
            yield item


def is_vowel(x: str) -> bool:
    return x in {"a", "e", "i", "o", "u", "y"}  # compiled to a frozenset constant, whose order follows the hash seed


def tag_draw(entry: Any, rng: Any) -> tuple:
    """An augmentation for random_map's tests: the entry with one draw of its generator beside it."""
    return entry, float(rng.random())


def named_entries(n: int = 20) -> Iterator[tuple[str, int]]:
    """A stream whose entries name their sample: (file name, value), as a WebDataset shard's do."""
    for i in range(n):
        yield f"{i:04d}.jpg", i


def name_of(entry: tuple) -> str:
    return entry[0]
