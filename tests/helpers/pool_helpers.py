"""Helpers the worker-pool tests share: sources, options, and looking at shared-memory rings.

What a spawned worker runs lives in ``tests.helpers.worker_jobs``; the
readers here are closures and run in threads or forked workers only.
"""
from __future__ import annotations

import functools
import gc
import mmap
import multiprocessing
import os
import signal
import threading

import numpy as np

from readers import from_sequence, shuffle
from tests.conftest import HANG, wait_until
from tests.helpers import worker_jobs as jobs
from tests.helpers.processes import open_descriptors

MODES = ["thread", "process"]
METHODS = ["fork", "spawn"]


def options(mode: str) -> dict:
    """prefetch options for a mode; process workers fork unless a test is about spawn (fork starts fast)."""
    return {"mode": mode, "start_method": "fork"} if mode == "process" else {"mode": mode}


def source(kind: str, n: int):
    """n entries 0..n-1: index-addressed (workers read only their own) or a stream (every worker reads all)."""
    if kind == "indexed":
        return from_sequence(list(range(n)))
    return functools.partial(jobs.count, n)


def shuffled(kind: str, n: int):
    if kind == "indexed":
        return shuffle(source(kind, n), seed=0)  # a global shuffle: a keyed permutation
    return shuffle(source(kind, n), 4, seed=0)  # a buffer shuffle of the stream


def count_to(n: int, pulled: list | None = None):
    """A reader of 0..n-1 that records in ``pulled`` what was read from it."""
    def numbers():
        for i in range(n):
            if pulled is not None:
                pulled.append(i)
            yield i
    return numbers


def endless():
    # Far more than any test reads, yet finite, so a test that fails to stop still ends.
    yield from range(1_000_000)


def closed_by_its_thread(closed_by: list):
    """A reader like ``endless`` that appends the name of the thread that closes it to ``closed_by``."""
    def reader():
        try:
            yield from endless()
        finally:
            closed_by.append(threading.current_thread().name)
    return reader


def raises_after(k: int, exc: BaseException):
    """A reader of 0..k-1 that then raises ``exc``."""
    def reader():
        for i in range(k):
            yield i
        raise exc
    return reader


def kill_a_worker() -> None:
    """SIGKILL one worker process of the running pass."""
    os.kill(min(p.pid for p in multiprocessing.active_children()), signal.SIGKILL)


# -- shared-memory rings ------------------------------------------------------------------


def ring_maps() -> list[str]:
    with open("/proc/self/maps") as maps:
        return [line.strip() for line in maps if "readerkit-ring" in line]


def ring_fds() -> list[str]:
    return [target for target in open_descriptors() if target.startswith("/memfd:readerkit-ring")]


def dev_shm() -> set[str]:
    return set(os.listdir("/dev/shm"))


def assert_nothing_new_in_dev_shm(before: set[str]) -> None:
    """Wait until /dev/shm holds nothing that was not there ``before``, or fail naming what stays. Every process of
    the machine shares it (another test's multiprocessing semaphore shows there for a moment, another may remove
    its own): only a name added that stays counts as left behind. POSIX semaphores (``sem.*``) are not counted:
    readerkit makes none (its rings are memfd), while another process's
    spawned multiprocessing holds its ``sem.mp-*`` for as long as it runs."""
    def added() -> list[str]:
        return sorted(name for name in dev_shm() - before if not name.startswith("sem."))
    wait_until(lambda: not added(), HANG, lambda: f"the names added to /dev/shm to go: {added()}")


def assert_rings_gone() -> None:
    gc.collect()
    assert ring_maps() == []
    assert ring_fds() == []
    with open("/proc/self/maps") as maps:
        # (a POSIX semaphore, /dev/shm/sem.*, is a lock of some library's: tqdm's write lock, made by the datasets
        # tests' progress bars, stays mapped for the process's life; readerkit's rings are memfd, its segments not sem.)
        assert [line for line in maps if "/dev/shm/" in line and "/dev/shm/sem." not in line] == []


def views_ring(array: np.ndarray) -> bool:
    """Whether ``array``'s memory is a shared-memory mapping (its base chain ends in an mmap), not its own."""
    if array.flags.owndata:
        return False
    base = array.base
    for _ in range(16):
        if isinstance(base, mmap.mmap):
            return True
        if isinstance(base, np.ndarray):
            base = base.base
        elif isinstance(base, memoryview):
            base = base.obj
        else:
            return False
    return False
