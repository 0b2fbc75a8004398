"""Which process runs a pipeline of ``readers.PipelineStore``: an owner's name, whether it lives, ``PipelineBusy``.

A pipeline's row is a lease: its owner, ``"host:pid"``, and the time of its
last heartbeat (refreshed by each write of the owner's: a trigger, a
training's start, progress or end, and by ``heartbeat``, which
``train.run_pipeline`` calls from a thread every ``stale_after / 4`` seconds
while it holds the pipeline). ``claim_pipeline`` makes this process the
owner, and is refused (``PipelineBusy``) while the lease runs: until the
heartbeat is ``stale_after`` seconds old, on any host. The lease decides,
so a dead owner on another host is known by it alone; ages are measured on
the store's clock (a PostgreSQL store's server's), so the hosts' clocks do
not matter. One extra on the owner's own host: an owner whose pid no longer
lives is gone at once, without waiting for its lease to run out (a pid the
system has given to a new process since looks alive, and the lease decides).
Only the owner may mark the pipeline's running trainings abandoned, so a live
pipeline's trainings are never failed from outside. The store's ``claim_pipeline``, ``release_pipeline``, ``heartbeat``,
``owner_alive`` and ``mark_abandoned`` read and write the rows; the rules
that judge an owner are these functions.
"""
from __future__ import annotations

import math
import os
import socket

import numpy as np

from readers.errors import BadValue

__all__ = ["PipelineBusy", "alive", "busy", "check_stale_after", "me", "split_owner"]


class PipelineBusy(BadValue):
    """A pipeline another live process holds (``claim_pipeline``): ``host``, ``pid`` and ``seen``, seconds since
    its last write, say which and when.

    >>> error = PipelineBusy("pipeline 1 is held", pipeline_id=1, host="gpu-3", pid=4242, seen=2.5)
    >>> isinstance(error, ValueError), error.host, error.pid
    (True, 'gpu-3', 4242)
    """

    def __init__(self, message: str, *, pipeline_id: int, host: str, pid: int, seen: float):
        self.pipeline_id, self.host, self.pid, self.seen = pipeline_id, host, pid, seen
        super().__init__(message)


def me() -> str:
    """This process as a pipeline's owner: ``"host:pid"`` (worked out at each call: a forked child is another).

    >>> me() == f"{socket.gethostname()}:{os.getpid()}"
    True
    """
    return f"{socket.gethostname()}:{os.getpid()}"


def split_owner(owner: str) -> tuple[str, int]:
    """``(host, pid)`` of an owner ``"host:pid"``.

    >>> split_owner("gpu-3:4242"), split_owner("fe80::1:77"), split_owner("gpu-3:x")
    (('gpu-3', 4242), ('fe80::1', 77), ('gpu-3', 0))
    """
    host, _, pid = owner.rpartition(":")  # from the right: the pid has no colon, a host name might
    return host, int(pid) if pid.isdigit() else 0  # (0: no process, for a row changed outside readerkit)


def alive(host: str, pid: int, age: float | None, stale_after: float) -> bool:
    """Whether the owner ``host:pid``, whose last heartbeat is ``age`` seconds old (None: none), may still run its
    pipeline, this process aside: while its lease runs (``age < stale_after``), on any host; on this host, only
    while its pid lives too (the extra the module describes).

    >>> alive("far-away", 4242, 10.0, 120.0), alive("far-away", 4242, 300.0, 120.0), alive("far-away", 1, None, 1.0)
    (True, False, False)
    >>> alive(socket.gethostname(), os.getpid(), 0.0, 120.0)  # this process is no other owner
    False
    """
    if age is None or age >= stale_after:
        return False
    if host != socket.gethostname():
        return True
    if pid == os.getpid() or pid <= 0:  # (0 and below would signal process groups)
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    except (OverflowError, OSError):
        return False
    return True


def check_stale_after(stale_after: object, where: str) -> None:
    """Refuse a ``stale_after`` that is not a finite number of seconds > 0.

    >>> check_stale_after(0, "claim_pipeline")
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: claim_pipeline: stale_after must be a finite number of seconds > 0 (how long an owner may go without a heartbeat before its lease runs out), got 0
    """
    if isinstance(stale_after, bool) or not isinstance(stale_after, (int, float, np.integer, np.floating)) or \
            not (math.isfinite(stale_after) and stale_after > 0):
        raise BadValue(f"{where}: stale_after must be a finite number of seconds > 0 (how long an owner "
                       f"may go without a heartbeat before its lease runs out), got {stale_after!r}")


def busy(pipeline_id: int, path: str, host: str, pid: int, age: float | None, stale_after: float) -> PipelineBusy:
    """The refusal of a claim on pipeline ``pipeline_id`` of the store ``path``, which ``host:pid`` holds (its last
    heartbeat ``age`` seconds old): who holds it, when it was last seen, and what to do.

    >>> str(busy(1, "/d/pipelines.db", "far-away", 4242, 20.0, 120.0))
    "claim_pipeline: pipeline 1 in /d/pipelines.db is held by process 4242 on host 'far-away', last seen 20.0 s ago: wait for it to end, or stop it; if it is dead, it counts as gone once 120 s unseen (100 s more)"
    """
    seen = math.inf if age is None else max(0.0, age)
    held = f"claim_pipeline: pipeline {pipeline_id} in {path} is held by process {pid} on host {host!r}, " \
           + (f"last seen {seen:.1f} s ago" if age is not None else "with no heartbeat")
    if host == socket.gethostname():
        todo = "; that process is alive and runs the pipeline: wait for it to end, or stop it first " \
               f"(kill {pid}); its lease runs out once {stale_after:g} s unseen"
    else:
        todo = f": wait for it to end, or stop it; if it is dead, it counts as gone once {stale_after:g} s " \
               f"unseen ({max(0.0, stale_after - seen):.0f} s more)"
    return PipelineBusy(held + todo, pipeline_id=pipeline_id, host=host, pid=pid, seen=seen)
