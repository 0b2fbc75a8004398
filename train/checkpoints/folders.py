"""A run's checkpoint folders: where each process saves, and who is using them now.

A one-process run saves in its folder; rank r of a job of several saves in
the folder's ``rank<r>`` subfolder. Locks (``fcntl.flock``, released by the
system however a process ends) keep runs apart: a one-process run holds its
folder exclusively; the ranks of a job share the folder, each holding its own
rank folder exclusively, and a job of another size cannot start there while
one is running.
"""
from __future__ import annotations

import fcntl
import glob
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager

from readers.errors import BadValue, make_folder

__all__ = ["CheckpointError", "FolderInUse", "folder_in_use", "held_by_this_process", "hold_run", "lock_folder",
           "rank_folder", "rank_folders"]

FILE = "checkpoint.npz"
LOCK = ".readerkit.lock"
_JOB_LOCK = re.compile(r"^\.readerkit\.world(\d+)\.lock$")
#: Seconds a lock is retried before the folder counts as in use: another process's ``folder_in_use``
#: probe holds a lock for microseconds, and must not make a rank's start fail.
PATIENCE = 0.5
_held: set[str] = set()  # folders this process holds exclusively


#: What to do about a checkpoint that cannot be used: the end of every such message.
START_OVER = "delete it, or start over with overwrite=True (--overwrite)"


class CheckpointError(BadValue):
    """A checkpoint that cannot be read or does not fit; the message names the file."""


class FolderInUse(CheckpointError):
    """Another run holds the checkpoint folder's lock; the message names the folder and its pid."""


def rank_folder(directory: str, rank: int, world_size: int) -> str:
    """Where this process saves its checkpoints: ``directory``, or ``directory/rank<r>`` for one of several.

    >>> rank_folder("ck", 0, 1), rank_folder("ck", 2, 3)
    ('ck', 'ck/rank2')
    """
    return directory if world_size == 1 else os.path.join(directory, f"rank{rank}")


def rank_folders(directory: str) -> list[str]:
    """The ``rank<r>`` folders in ``directory``, by name; none when it does not exist.

    >>> rank_folders("/nonexistent")
    []
    """
    if not os.path.isdir(directory):
        return []
    return [os.path.join(directory, name) for name in sorted(os.listdir(directory))
            if name.startswith("rank") and name[4:].isdigit() and os.path.isdir(os.path.join(directory, name))]


def _flock(path: str, shared: bool, what: str) -> int:
    """An open descriptor of ``path`` holding its lock, retried for PATIENCE seconds; FolderInUse naming
    ``what`` (and the pid the file records) if another process keeps it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + PATIENCE
    while True:
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() < deadline:
                time.sleep(0.02)
                continue
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise FolderInUse(f"{what} (pid {holder}); wait for it to end, or give this run another checkpoint "
                              "folder") from None
    os.pwrite(fd, f"{os.getpid():<10}\n".encode(), 0)  # one width: shared holders overwrite, never mix
    return fd


@contextmanager
def lock_folder(directory: str, *, shared: bool = False) -> Iterator[None]:
    """Hold ``directory`` for this run: a second run into it fails at once, naming this one's pid.

    The lock is ``fcntl.flock`` on ``directory/.readerkit.lock``, so the
    system releases it when the process dies, however it dies; the file keeps
    a holder's pid for the message. ``shared`` locks coexist with each other
    (the ranks of one job share their top folder) but not with an exclusive
    one (a one-process run there).

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> with lock_folder(folder.name):
    ...     with lock_folder(folder.name):
    ...         pass
    Traceback (most recent call last):
    ...
    train.checkpoints.folders.FolderInUse: another run is using .../... (pid ...); wait for it to end, or give this run another checkpoint folder
    """
    make_folder(directory, "the checkpoint folder")
    fd = _flock(os.path.join(directory, LOCK), shared, f"another run is using {directory}")
    key = os.path.realpath(directory)
    added = not shared and key not in _held
    if added:
        _held.add(key)
    try:
        yield
    finally:
        if added:
            _held.discard(key)
        os.close(fd)  # closing the only descriptor releases the lock


def held_by_this_process(directory: str) -> bool:
    """Whether this process holds ``directory`` exclusively (``lock_folder``): no other run writes there.

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> with lock_folder(folder.name):
    ...     held_by_this_process(folder.name)
    True
    """
    return os.path.realpath(directory) in _held


def _probe(path: str, exclusive: bool) -> bool:
    """Whether another process holds the lock of ``path`` (exclusively; or, probing ``exclusive``, at all).
    The probe's own lock is released at close, microseconds later."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # no lock file: no run ever held it
        return False
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def folder_in_use(directory: str) -> bool:
    """Whether a live run holds ``directory`` exclusively (its lock file is locked), on this or any machine
    that shares the file system's locks.

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> folder_in_use(folder.name)
    False
    """
    return _probe(os.path.join(directory, LOCK), exclusive=False)


def _other_job(directory: str, world_size: int) -> int | None:
    """The size of a live job of another size in ``directory`` (it holds its ``.readerkit.world<N>.lock``)."""
    for path in glob.glob(os.path.join(directory, ".readerkit.world*.lock")):
        match = _JOB_LOCK.match(os.path.basename(path))
        if match is not None and int(match.group(1)) != world_size and _probe(path, exclusive=True):
            return int(match.group(1))
    return None


@contextmanager
def hold_run(directory: str, rank: int, world_size: int) -> Iterator[None]:
    """Lock a run's checkpoint folders: ``directory`` for a one-process run; for rank ``rank`` of a job of
    several, ``directory`` shared with the job's other ranks and its own ``rank_folder`` exclusively.

    So the ranks of one job run side by side, while a one-process run and a
    job, or two jobs of different sizes, never share a folder (one could
    remove or resume the other's checkpoints).

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> with hold_run(folder.name, 0, 2), hold_run(folder.name, 1, 2):
    ...     folder_in_use(folder.name + "/rank1")
    True
    >>> with hold_run(folder.name, 0, 2), hold_run(folder.name, 3, 4):
    ...     pass
    Traceback (most recent call last):
    ...
    train.checkpoints.folders.FolderInUse: a job of 2 processes is using ...; wait for it to end, or give this run another checkpoint folder
    """
    if world_size == 1:
        with lock_folder(directory):
            yield
        return
    with lock_folder(directory, shared=True):
        fd = _flock(os.path.join(directory, f".readerkit.world{world_size}.lock"), True,
                    f"a job of another size is using {directory}")
        try:
            other = _other_job(directory, world_size)
            if other is not None:
                raise FolderInUse(f"a job of {other} processes is using {directory}; wait for it to end, or give "
                                  "this run another checkpoint folder")
            with lock_folder(rank_folder(directory, rank, world_size)):
                yield
        finally:
            os.close(fd)
