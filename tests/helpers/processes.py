"""Processes as Linux's /proc shows them: what runs below a process or in its session, whether one has ended,
and what this process's descriptors point at.

A process is named by its identity, ``(pid, start time)``: a pid alone may
be taken by a later process once the first has gone. A zombie has ended
(only its exit status is left for its parent to collect). Where there is no
/proc (not Linux) the walkers find nothing and every process looks ended.

Imports only the standard library: tests/helpers/torchrun_job.py, run as a
script, imports it too.
"""
from __future__ import annotations

import os
import signal
from collections.abc import Iterable

PROC = os.path.exists("/proc/self/stat")

Identity = tuple[int, str]  # (pid, start time in clock ticks since boot)


def _stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, session, ...); None if none."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def identity(pid: int) -> Identity | None:
    """``(pid, start time)`` of the live process ``pid``; None when it has ended (a zombie has ended too)."""
    fields = _stat(pid)
    return None if fields is None or fields[0] in ("Z", "X") else (pid, fields[19])


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended: no such process, or a zombie waiting for its parent to reap it."""
    return identity(pid) is None


def waiting(pid: int) -> bool:
    """Whether process ``pid`` is asleep, waiting for something (a pipe, a lock, a timer), rather than running."""
    fields = _stat(pid)
    return fields is not None and fields[0] == "S"


def still_running(processes: Iterable[Identity]) -> list[int]:
    """The pids of ``processes`` that still run (the same processes: a pid taken since has another start time)."""
    return [pid for pid, started in processes if identity(pid) == (pid, started)]


def _live() -> dict[int, list[str]]:
    """Every live process's stat fields, by pid."""
    found = {}
    for entry in os.listdir("/proc") if PROC else ():
        if entry.isdigit() and (fields := _stat(entry)) is not None and fields[0] not in ("Z", "X"):
            found[int(entry)] = fields
    return found


def descendants(pid: int) -> list[Identity]:
    """Every live process below ``pid``, each before its own children.

    A process whose parent has ended is re-parented (to init or a subreaper) and
    is no longer found here: look before a parent is stopped, or use ``session``.
    """
    live = _live()
    children: dict[int, list[int]] = {}
    for child, fields in live.items():
        children.setdefault(int(fields[1]), []).append(child)
    found, todo = [], [pid]
    while todo:
        for child in sorted(children.get(todo.pop(0), ())):
            found.append((child, live[child][19]))
            todo.append(child)
    return found


def session(sid: int) -> list[Identity]:
    """Every live process of session ``sid``: a child started with ``start_new_session`` leads one of its own,
    whose id is its pid, and whatever it starts stays in it (unless it starts a session of its own)."""
    return [(pid, fields[19]) for pid, fields in _live().items() if int(fields[3]) == sid]


def kill(processes: Iterable[Identity]) -> None:
    """SIGKILL each of ``processes`` that still runs (a pid taken since by another process is left alone)."""
    for pid in still_running(processes):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:  # ended meanwhile
            pass


def open_descriptors() -> list[str]:
    """What this process's open file descriptors point at: paths, ``socket:[inode]``, ``/memfd:name``, ..."""
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # the descriptor listdir itself used, closed by now
            continue
    return targets
