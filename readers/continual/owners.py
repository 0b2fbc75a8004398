"""Which process runs a pipeline of ``readers.PipelineStore``: ``claim_pipeline``, its heartbeat, ``mark_abandoned``.

A pipeline's row names its owner, ``"host:pid"``, and the time of its last
write (the heartbeat, refreshed by each write of the owner's: a trigger, a
training's start, progress or end). ``claim_pipeline`` makes this process the
owner, and is refused (``PipelineBusy``) while another owner may still run:
on this host while its pid lives, on another host, which cannot be asked,
until its heartbeat is ``stale_after`` seconds old. Only the owner may mark
the pipeline's running trainings abandoned, so a live pipeline's trainings
are never failed from outside. (A pid the system has given to a new process
since the owner died looks alive: stop or wait, as the message says.) The
methods live in ``OwnersMixin``, which ``PipelineStore`` inherits.
"""
from __future__ import annotations

import math
import os
import socket
import sqlite3
import time

import numpy as np

__all__ = ["OwnersMixin", "PipelineBusy"]


class PipelineBusy(ValueError):
    """A pipeline another live process holds (``claim_pipeline``): ``host``, ``pid`` and ``seen``, seconds since
    its last write, say which and when.

    >>> error = PipelineBusy("pipeline 1 is held", pipeline_id=1, host="gpu-3", pid=4242, seen=2.5)
    >>> isinstance(error, ValueError), error.host, error.pid
    (True, 'gpu-3', 4242)
    """

    def __init__(self, message: str, *, pipeline_id: int, host: str, pid: int, seen: float):
        self.pipeline_id, self.host, self.pid, self.seen = pipeline_id, host, pid, seen
        super().__init__(message)


def _now() -> float:
    return time.time()


def _me() -> str:
    """This process as a pipeline's owner: ``"host:pid"`` (worked out at each call: a forked child is another)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _split(owner: str) -> tuple[str, int]:
    host, _, pid = owner.rpartition(":")  # from the right: the pid has no colon, a host name might
    return host, int(pid) if pid.isdigit() else 0  # (0: no process, for a row changed outside readerkit)


def _alive(host: str, pid: int, heartbeat: float | None, stale_after: float) -> bool:
    """Whether the owner ``host:pid`` may still run its pipeline, this process aside: on this host, while its pid
    lives; on another, which cannot be asked, while its heartbeat is fresher than ``stale_after`` seconds."""
    if host != socket.gethostname():
        return heartbeat is not None and _now() - heartbeat < stale_after
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


def _check_stale_after(stale_after: object, where: str) -> None:
    if isinstance(stale_after, bool) or not isinstance(stale_after, (int, float, np.integer, np.floating)) or \
            not (math.isfinite(stale_after) and stale_after > 0):
        raise ValueError(f"{where}: stale_after must be a finite number of seconds > 0 (how long another host's "
                         f"owner may go without writing before it counts as dead), got {stale_after!r}")


class OwnersMixin:
    """``PipelineStore``'s owner methods (see the module); they use the store's ``path``, ``_using(write)`` (one
    transaction) and ``_known`` (a pipeline's check).

    >>> import os, tempfile
    >>> from readers.continual.store import PipelineStore
    >>> folder = tempfile.TemporaryDirectory()
    >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
    >>> isinstance(store, OwnersMixin)
    True
    >>> store.close()
    """

    path: str

    def claim_pipeline(self, pipeline_id: int, *, stale_after: float = 120.0) -> None:
        """Record this process as the one that runs the pipeline, its heartbeat now; refused while another lives.

        The owner is this host and pid. Another owner on this host is alive
        while its pid is (a pid that is this process's is not another); one
        on another host cannot be asked, so it is alive while its heartbeat,
        which each of its writes refreshes, is fresher than ``stale_after``
        seconds (so a pipeline run from several hosts reports, with
        ``update_training``, more often than that). A dead owner's claim is
        taken over. Refused with ``PipelineBusy``, naming the owner and when
        it was last seen.

        >>> import os, tempfile
        >>> from readers.continual.store import PipelineStore
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> p = store.register_pipeline({})
        >>> store.claim_pipeline(p)
        >>> store.pipeline(p)["owner"] == f"{socket.gethostname()}:{os.getpid()}"
        True
        >>> store.release_pipeline(p), store.pipeline(p)["owner"]
        (True, None)
        >>> store.close()
        """
        where = "claim_pipeline"
        _check_stale_after(stale_after, where)
        with self._using(write=True) as db:
            pipeline_id = self._known(db, pipeline_id, where)
            owner, heartbeat = db.execute("SELECT owner, heartbeat FROM pipelines WHERE pipeline_id = ?",
                                          (pipeline_id,)).fetchone()
            if owner is not None:
                host, pid = _split(owner)
                if _alive(host, pid, heartbeat, stale_after):
                    self._raise_busy(pipeline_id, host, pid, heartbeat, stale_after)
            db.execute("UPDATE pipelines SET owner = ?, heartbeat = ? WHERE pipeline_id = ?",
                       (_me(), _now(), pipeline_id))

    def _raise_busy(self, pipeline_id: int, host: str, pid: int, heartbeat: float | None, stale_after: float) -> None:
        seen = math.inf if heartbeat is None else max(0.0, _now() - heartbeat)
        held = f"claim_pipeline: pipeline {pipeline_id} in {self.path} is held by process {pid} on host {host!r}, " \
               + (f"last seen {seen:.1f} s ago" if heartbeat is not None else "with no heartbeat")
        if host == socket.gethostname():
            todo = "; that process is alive and runs the pipeline: wait for it to end, or stop it first " \
                   f"(kill {pid})"
        else:
            todo = f": wait for it to end, or stop it; if it is dead, it counts as gone once {stale_after:g} s " \
                   f"unseen ({max(0.0, stale_after - seen):.0f} s more)"
        raise PipelineBusy(held + todo, pipeline_id=pipeline_id, host=host, pid=pid, seen=seen)

    def release_pipeline(self, pipeline_id: int) -> bool:
        """Clear the pipeline's owner if it is this process (True), else leave it (False).

        >>> import os, tempfile
        >>> from readers.continual.store import PipelineStore
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> p = store.register_pipeline({})
        >>> store.release_pipeline(p)
        False
        >>> store.claim_pipeline(p); store.release_pipeline(p)
        True
        >>> store.close()
        """
        with self._using(write=True) as db:
            pipeline_id = self._known(db, pipeline_id, "release_pipeline")
            return db.execute("UPDATE pipelines SET owner = NULL, heartbeat = NULL WHERE pipeline_id = ? AND "
                              "owner = ?", (pipeline_id, _me())).rowcount == 1

    def heartbeat(self, pipeline_id: int) -> bool:
        """Refresh the pipeline's heartbeat if this process holds it (True), else change nothing (False): a
        pipeline busy with no writes for a while (replaying its stream) keeps its claim from other hosts.

        >>> import os, tempfile
        >>> from readers.continual.store import PipelineStore
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> p = store.register_pipeline({})
        >>> store.heartbeat(p), (store.claim_pipeline(p), store.heartbeat(p))[1]
        (False, True)
        >>> store.close()
        """
        with self._using(write=True) as db:
            pipeline_id = self._known(db, pipeline_id, "heartbeat")
            return db.execute("UPDATE pipelines SET heartbeat = ? WHERE pipeline_id = ? AND owner = ?",
                              (_now(), pipeline_id, _me())).rowcount == 1

    def owner_alive(self, pipeline_id: int, *, stale_after: float = 120.0) -> bool | None:
        """Whether the process that holds the pipeline is alive (this process is), as ``claim_pipeline`` judges
        it; None when no process holds it. A "running" training of a pipeline whose owner is gone never ends.

        >>> import os, tempfile
        >>> from readers.continual.store import PipelineStore
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> p = store.register_pipeline({})
        >>> store.owner_alive(p), (store.claim_pipeline(p), store.owner_alive(p))[1]
        (None, True)
        >>> store.close()
        """
        _check_stale_after(stale_after, "owner_alive")
        with self._using(write=False) as db:
            pipeline_id = self._known(db, pipeline_id, "owner_alive")
            owner, heartbeat = db.execute("SELECT owner, heartbeat FROM pipelines WHERE pipeline_id = ?",
                                          (pipeline_id,)).fetchone()
        if owner is None:
            return None
        if owner == _me():
            return True
        host, pid = _split(owner)
        return _alive(host, pid, heartbeat, stale_after)

    def _beat(self, db: sqlite3.Connection, pipeline_id: int) -> None:
        """Refresh the pipeline's heartbeat, inside the caller's transaction, if this process holds it."""
        db.execute("UPDATE pipelines SET heartbeat = ? WHERE pipeline_id = ? AND owner = ?",
                   (_now(), pipeline_id, _me()))

    def mark_abandoned(self, pipeline_id: int) -> list[int]:
        """Turn the pipeline's "running" trainings into "failed" with the error "interrupted"; return their ids.

        A restarted pipeline calls it before it trains again: whatever its
        dead process left running will never finish. Only the process that
        holds the pipeline (``claim_pipeline``, which is refused while its
        old process lives) may: a live pipeline's training is never marked.
        (A process still alive that reports on one afterwards is refused.)

        >>> import os, tempfile
        >>> from readers.continual.store import PipelineStore
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> p = store.register_pipeline({})
        >>> store.add_trigger(p, 0, [1], position=1)
        >>> t = store.start_training(p, 0)
        >>> store.mark_abandoned(p)
        Traceback (most recent call last):
        ...
        ValueError: mark_abandoned: this process (...) does not hold pipeline 1 in .../pipelines.db (no process does): call claim_pipeline(1) first, which is refused while another process runs the pipeline
        >>> store.claim_pipeline(p)
        >>> store.mark_abandoned(p), store.training(t)["status"], store.training(t)["error"]
        ([1], 'failed', 'interrupted')
        >>> store.close()
        """
        with self._using(write=True) as db:
            pipeline_id = self._known(db, pipeline_id, "mark_abandoned")
            owner, = db.execute("SELECT owner FROM pipelines WHERE pipeline_id = ?", (pipeline_id,)).fetchone()
            if owner != _me():
                host, pid = _split(owner or ":0")
                held = "no process does" if owner is None else f"process {pid} on host {host!r} does"
                raise ValueError(f"mark_abandoned: this process ({_me()}) does not hold pipeline {pipeline_id} in "
                                 f"{self.path} ({held}): call claim_pipeline({pipeline_id}) first, which is refused "
                                 "while another process runs the pipeline")
            ids = [i for i, in db.execute("SELECT training_id FROM trainings WHERE pipeline_id = ? AND status = "
                                          "'running' ORDER BY training_id", (pipeline_id,))]
            db.execute("UPDATE trainings SET status = 'failed', error = 'interrupted', ended = ? WHERE pipeline_id = ? "
                       "AND status = 'running'", (_now(), pipeline_id))
            self._beat(db, pipeline_id)
        return ids
