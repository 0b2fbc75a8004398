"""Module-level readers and mappers for the worker-pool tests (tests/readers/workers/).

A spawned worker process imports what it runs, so whatever a test hands to a
``start_method="spawn"`` worker lives here, in an importable module (not the
test file), and is made into a reader with ``functools.partial``.
"""
from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

import readers

__all__ = [
    "arrays",
    "arrays_then_block",
    "arrays_then_fail",
    "big_bytes",
    "busy_sum",
    "count",
    "count_then_block",
    "fails_at",
    "odd_entries",
    "odd_stream",
    "plus_one",
    "remainder",
    "slow_plus_one",
    "tag_pid",
    "tag_worker",
]


def count(n: int) -> Iterator[int]:
    """A stream 0..n-1."""
    yield from range(n)


def count_then_block(n: int, block: float = 60.0, blocked: str | None = None) -> Iterator[int]:
    """A stream 0..n-1, then a long wait: the consumer is blocked on entry n when it is interrupted.

    With n equal to the number of workers, each worker has sent its one entry
    (a worker sends its first entry at once) before it blocks. With
    ``blocked``, that file is made as the wait begins, for a test to wait on.
    """
    yield from range(n)
    if blocked is not None:
        open(blocked, "a").close()
    time.sleep(block)
    yield n


def big_bytes(n: int, size: int) -> Iterator[bytes]:
    """A stream of n byte strings of ``size`` bytes (they cross in-band, as large pipe messages)."""
    for i in range(n):
        yield bytes([i % 256]) * size


def fails_at(k: int, message: str) -> Iterator[int]:
    """A stream 0..k-1, then ``ValueError(message)``."""
    yield from range(k)
    raise ValueError(message)


def arrays(n: int, size: int) -> Iterator[np.ndarray]:
    """A stream of n float64 arrays of ``size`` elements, array i filled with i."""
    for i in range(n):
        yield np.full(size, i, dtype=np.float64)


def arrays_then_fail(n: int, size: int, message: str) -> Iterator[np.ndarray]:
    yield from arrays(n, size)
    raise ValueError(message)


def arrays_then_block(n: int, size: int, block: float = 60.0) -> Iterator[np.ndarray]:
    yield from arrays(n, size)
    time.sleep(block)
    yield np.full(size, n, dtype=np.float64)


def odd_entries() -> list:
    """Entries a careless transport mangles: None, "", bytes, nested containers, every kind of array."""
    big = np.arange(256, dtype=np.float64)  # 2 KiB: large enough for the shared ring
    return [
        None,
        "",
        b"",
        b"\x00bytes",
        0,
        (),
        (big, None, "x"),
        {"a": big.reshape(16, 16), "b": [1, 2]},
        np.arange(3, dtype=np.int8),  # small: pickled in-band
        big.reshape(16, 16)[:, ::2],  # not contiguous
        np.asfortranarray(big.reshape(16, 16)),
        np.array(3.5),  # 0-d
        np.array([None, "s", 1], dtype=object),
        np.zeros((0, 4)),
        np.arange(1024, dtype=np.uint8).view([("a", "<u2"), ("b", "<u2")]),  # structured, 1 KiB
        big,
        big + 1,  # two same-shape arrays in a row: may travel stacked
    ]


def odd_stream() -> Iterator:
    yield from odd_entries()


def tag_worker(x: Any) -> tuple:
    """(x, local worker id, local workers) as the worker that maps x sees itself."""
    info = readers.worker_info()
    return x, info.worker_id, info.workers_per_process


def tag_pid(x: Any) -> tuple:
    """(x, the pid of the process that maps x)."""
    return x, os.getpid()


def plus_one(x: int) -> int:
    return x + 1


def slow_plus_one(x: int) -> int:
    time.sleep((x * 7 % 5) * 0.002)  # uneven work, so completion order differs from input order
    return x + 1


def remainder(x: int, m: int) -> int:
    return x % m


def busy_sum(x: int) -> int:
    """Pure-Python work that holds the GIL for about a millisecond (what process workers are for)."""
    total = 0
    for k in range(20_000):
        total += (x * k) % 7
    return total


def slow_in_worker_0(x: Any) -> tuple:
    """(x, local worker id) after 20 ms in worker 0 (a worker on a busy core), at once in the others."""
    info = readers.worker_info()
    if info.worker_id == 0:
        time.sleep(0.02)
    return x, info.worker_id
