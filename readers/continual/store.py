"""``PipelineStore``: continual-learning pipelines, their triggers' training sets, trainings and owners, in one file.

A pipeline process registers itself, claims the pipeline (``claim_pipeline``:
one process runs a pipeline at a time), stores each trigger's training set
and reports its trainings; any other process opens the same file to read a
set back (``readers.trigger_set``) or to ask how a training is going, by its
``training_id``, at any time. Every write is one transaction, so a process
killed mid-trigger leaves the earlier triggers whole and none of its set; a
restarted pipeline claims the pipeline again (refused while its old process's
lease runs), asks ``last_trigger`` where to go on and ``last_finished`` for the
model to go on from, and calls ``mark_abandoned`` for the trainings the dead
process left "running".

``PipelineStore`` is one class, its methods in four parts: pipelines,
triggers (their sets), owners (claims and heartbeats) and trainings (status,
progress, metrics and finished models). The tables and the file's layout are
``readers.continual.schema``'s; the rules that judge an owner (who this
process is, whether another lives) are ``readers.continual.owners``'s.

Every method runs its SQL in one ``transaction`` of the store's database
and never opens or begins anything itself: a ``readers.storage.sqlite``
``Database`` for a file's path, a ``readers.storage.postgres``
``PostgresDatabase`` for a ``postgresql://`` URL (the store that machines
share). One SQL serves both: ``?`` placeholders (translated for psycopg),
``INSERT ... RETURNING`` for a new id, no ``LIMIT -1``; what differs is the
database's to say: the tables (``schema``), the binary type of a ``CAST``
(``blob``) and the clock (``now``: the server's for PostgreSQL, so that
heartbeats and leases are judged on one clock whatever the hosts' say).
"""
from __future__ import annotations

import functools
import json
import math
import os
from typing import Any, NamedTuple

import numpy as np

from readers.checks import whole
from readers.continual import schema
from readers.continual.owners import (
    PipelineBusy,
    alive,
    busy,
    check_stale_after,
    me,
    split_owner,
)
from readers.errors import BadType, BadValue, NotFound
from readers.storage.postgres import is_postgres, redact

__all__ = ["PipelineBusy", "PipelineStore", "StoredSet"]

_NOW = object()  # a time field set to the store's clock in the transaction that writes it
_TRAINING = ("training_id", "pipeline_id", "trigger_id", "status", "progress", "metrics", "started", "ended", "error")


def _progress(progress: Any) -> str:
    """A training's progress as stored: a float from 0 to 1, or a dict (JSON)."""
    if isinstance(progress, dict):
        return schema.as_json(progress, "progress", "update_training")
    if isinstance(progress, (int, float, np.integer, np.floating)) and not isinstance(progress, (bool, np.bool_)) \
            and 0 <= progress <= 1:
        return json.dumps(float(progress))
    raise BadValue(f"update_training: progress must be a float from 0 to 1 or a dict (e.g. {{'step': 10, "
                   f"'steps': 100}}), got {progress!r}")


def _drop_models(db: Any, pipeline_id: int, keep: int) -> int:
    """Delete the pipeline's models but the ``keep`` latest, inside the caller's transaction; the number deleted."""
    ranked = "SELECT m.training_id FROM models m JOIN trainings t ON t.training_id = m.training_id WHERE " \
             "t.pipeline_id = ?"
    return db.execute(f"DELETE FROM models WHERE training_id IN ({ranked}) AND training_id NOT IN ({ranked} ORDER BY "
                      "t.trigger_id DESC, t.training_id DESC LIMIT ?)", (pipeline_id, pipeline_id, keep)).rowcount


class StoredSet(NamedTuple):
    """A stored trigger's set: its keys (int64), weights (float32), the stream position it covers, its info.

    >>> StoredSet(np.array([3]), np.ones(1, np.float32), 10, {}).position
    10
    """

    keys: np.ndarray
    weights: np.ndarray
    position: int
    info: dict


class PipelineStore:
    """Pipelines, their triggers' training sets, trainings and owners, in the sqlite3 file ``path`` or the
    PostgreSQL database of a ``postgresql://user@host:port/dbname`` URL (see the module).

    Ids: pipelines and trainings count from 1; each pipeline's triggers, from
    0. One store serves a writer thread and reader threads (they take turns
    on one connection); other processes (on other hosts, for PostgreSQL) open
    the same store. It pickles as its path or URL, so a worker reopens it
    (a password in the URL travels with it; one from ``PGPASSWORD`` or
    ``~/.pgpass`` is the worker's to find); ``path`` and the repr show a URL
    with its password as ``***``. ``close()`` may be called again.

    >>> import os, tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
    >>> p = store.register_pipeline({"model": "mlp", "trigger": {"every": 100}})
    >>> store.claim_pipeline(p)  # this process runs it: refused while another does
    >>> store.add_trigger(p, 0, np.array([4, 1, 7]), position=100, info={"classes": {"0": 2, "1": 1}})
    >>> store.add_trigger(p, 1, np.array([7, 120]), [2.0, 1.0], position=200)
    >>> store.triggers(p), store.last_trigger(p)
    ([0, 1], (1, 200))
    >>> keys, weights, position, info = store.trigger(p, 1)
    >>> keys.tolist(), weights.tolist(), position, info
    ([7, 120], [2.0, 1.0], 200, {})
    >>> t = store.start_training(p, 1)
    >>> store.update_training(t, progress=0.5, metrics={"loss": 0.7})
    >>> store.finish_training(t, {"accuracy": 0.9}, model_state={"w": np.zeros(3), "step": 2})
    >>> {k: store.training(t)[k] for k in ("status", "progress", "metrics")}
    {'status': 'finished', 'progress': 0.5, 'metrics': {'loss': 0.7, 'accuracy': 0.9}}
    >>> store.last_finished(p)["training_id"] == t, store.model_state(t)["step"]
    (True, 2)
    >>> store.release_pipeline(p)
    True
    >>> store.close()
    """

    def __init__(self, path: str | os.PathLike, *, create: bool = True):
        if not isinstance(path, (str, os.PathLike)):
            raise BadType(f"PipelineStore: give a sqlite file's path or a postgresql:// URL, got "
                          f"{type(path).__name__}")
        if is_postgres(path):
            self._address = path  # (with its password, if the URL has one: never shown)
            self.path = redact(path)
        else:  # a copy unpickled in another folder opens this file
            self._address = self.path = os.path.abspath(os.fspath(path))
        self._db = schema.open_database(self._address, create)

    def __repr__(self) -> str:
        return f"PipelineStore({self.path!r})"

    def __reduce__(self) -> tuple:
        return functools.partial(PipelineStore, create=False), (self._address,)  # it exists: never made anew

    def __enter__(self) -> PipelineStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (a second time: nothing); later calls say the store is closed.

        >>> import os, tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> store.close(); store.close()
        >>> store.pipelines()
        Traceback (most recent call last):
        ...
        readers.errors.BadValue: the pipeline store .../pipelines.db is closed: open it again with PipelineStore(path)
        """
        self._db.close()

    # -- pipelines ------------------------------------------------------------------------
    def register_pipeline(self, config: dict) -> int:
        """Store a pipeline's config (a JSON dict) and return its new pipeline_id.

        >>> import os, tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> store.register_pipeline({"strategy": "gdumb:500"}), store.register_pipeline({})
        (1, 2)
        >>> store.close()
        """
        text = schema.as_json(config, "config", "register_pipeline")
        with self._db.transaction(write=True) as db:
            return db.execute("INSERT INTO pipelines (config, created) VALUES (?, ?) RETURNING pipeline_id",
                              (text, self._db.now(db))).fetchone()[0]

    def _known(self, db: Any, pipeline_id: Any, where: str) -> int:
        pipeline_id = whole(pipeline_id, "pipeline_id", where, floats=False)
        if db.execute("SELECT 1 FROM pipelines WHERE pipeline_id = ?", (pipeline_id,)).fetchone() is None:
            ids = [i for i, in db.execute("SELECT pipeline_id FROM pipelines ORDER BY pipeline_id")]
            raise NotFound(f"{where}: no pipeline {pipeline_id} in {self.path} (its pipelines: "
                           f"{schema.listed(ids)})")
        return pipeline_id

    def pipeline(self, pipeline_id: int) -> dict:
        """``{"pipeline_id", "config", "created", "owner", "heartbeat"}`` of a registered pipeline (times in
        seconds since the epoch; owner ``"host:pid"`` and its last heartbeat, None when no process holds it).

        >>> import os, tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> p = store.register_pipeline({"model": "mlp"})
        >>> {k: store.pipeline(p)[k] for k in ("config", "owner")}
        {'config': {'model': 'mlp'}, 'owner': None}
        >>> store.close()
        """
        with self._db.transaction(write=False) as db:
            pipeline_id = self._known(db, pipeline_id, "pipeline")
        return next(p for p in self.pipelines() if p["pipeline_id"] == pipeline_id)

    def pipelines(self) -> list[dict]:
        """Every registered pipeline, as ``pipeline(id)`` gives it, in the order registered.

        >>> import os, tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> _ = store.register_pipeline({"k": 1}), store.register_pipeline({"k": 2})
        >>> [p["config"] for p in store.pipelines()]
        [{'k': 1}, {'k': 2}]
        >>> store.close()
        """
        columns = ("pipeline_id", "config", "created", "owner", "heartbeat")
        with self._db.transaction(write=False) as db:
            rows = db.execute(f"SELECT {', '.join(columns)} FROM pipelines ORDER BY pipeline_id").fetchall()
        return [{**dict(zip(columns, row)), "config": json.loads(row[1])} for row in rows]

    # -- triggers ---------------------------------------------------------------------------
    def add_trigger(self, pipeline_id: int, trigger_id: int, keys: Any, weights: Any = None, *, position: int,
                    time: float | None = None, info: dict | None = None) -> None:
        """Store trigger ``trigger_id``'s whole set in one transaction.

        ``keys`` are ints, indices into the pipeline's source (repeats and
        keys of earlier sets are fine); ``weights`` one float each (all 1 by
        default); ``position`` the stream's samples seen at the trigger,
        greater than the last trigger's (a trigger covers new samples);
        ``time`` the stream's time then, never before the last trigger's
        when both are given; ``info`` a JSON dict (class counts, the
        strategy's state). Trigger ids go 0, 1, 2, ...

        >>> import os, tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> p = store.register_pipeline({})
        >>> store.add_trigger(p, 0, [5, 2], position=10)
        >>> store.add_trigger(p, 2, [5], position=20)
        Traceback (most recent call last):
        ...
        readers.errors.BadValue: add_trigger: pipeline 1 has trigger 0, so the next trigger_id is 1, not 2 (trigger ids go up by one from 0, with no gaps)
        >>> store.add_trigger(p, 1, [5], position=10)
        Traceback (most recent call last):
        ...
        readers.errors.BadValue: add_trigger: position 10 is trigger 0's already; a trigger covers new samples, so give the stream's samples seen at this trigger, more than 10
        >>> store.close()
        """
        where = "add_trigger"
        trigger_id = whole(trigger_id, "trigger_id", where, floats=False)
        position = whole(position, "position", where, floats=False)
        if time is not None and not (isinstance(time, (int, float, np.number)) and math.isfinite(time)):
            raise BadValue(f"{where}: time must be a finite number (the stream's time at the trigger) or None, "
                           f"got {time!r}")
        keys_blob, weights_blob, crc = schema.encode_set(keys, weights, where)
        info_text = schema.as_json({} if info is None else info, "info", where)
        row = (trigger_id, len(keys_blob) // 8, keys_blob, weights_blob, crc, position,
               None if time is None else float(time), info_text)
        with self._db.transaction(write=True) as db:
            pipeline_id = self._known(db, pipeline_id, where)
            last = db.execute("SELECT trigger_id, position, time FROM triggers WHERE pipeline_id = ? ORDER BY "
                              "trigger_id DESC LIMIT 1", (pipeline_id,)).fetchone()
            expected = 0 if last is None else last[0] + 1
            if trigger_id != expected:
                held = "no triggers yet" if last is None else f"triggers 0-{last[0]}" if last[0] else "trigger 0"
                why = "it is stored already, and a set is written once" if trigger_id < expected else \
                    "trigger ids go up by one from 0, with no gaps"
                raise BadValue(f"{where}: pipeline {pipeline_id} has {held}, so the next trigger_id is {expected}, "
                               f"not {trigger_id} ({why})")
            if last is not None and position < last[1]:
                raise BadValue(f"{where}: position {position} is before trigger {last[0]}'s ({last[1]}); a "
                               "trigger's position counts the stream's samples seen, which never goes back")
            if last is not None and position == last[1]:
                raise BadValue(f"{where}: position {position} is trigger {last[0]}'s already; a trigger covers new "
                               f"samples, so give the stream's samples seen at this trigger, more than {position}")
            if last is not None and time is not None and last[2] is not None and time < last[2]:
                raise BadValue(f"{where}: time {time!r} is before trigger {last[0]}'s ({last[2]!r}); the stream's "
                               "time never goes back: give the time of the stream at this trigger")
            self._insert_trigger(db, (pipeline_id, *row, self._db.now(db)))
            self._beat(db, pipeline_id)

    def _insert_trigger(self, db: Any, row: tuple) -> None:
        # (its own method, inside the transaction: the crash tests kill a process here)
        db.execute("INSERT INTO triggers (pipeline_id, trigger_id, size, keys, weights, crc, position, time, info, "
                   "created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row)

    def _stored(self, db: Any, pipeline_id: Any, trigger_id: Any, columns: str, where: str) -> tuple:
        pipeline_id = self._known(db, pipeline_id, where)
        trigger_id = whole(trigger_id, "trigger_id", where, floats=False)
        row = db.execute(f"SELECT {columns} FROM triggers WHERE pipeline_id = ? AND trigger_id = ?",
                         (pipeline_id, trigger_id)).fetchone()
        if row is None:
            ids = [i for i, in db.execute("SELECT trigger_id FROM triggers WHERE pipeline_id = ? ORDER BY trigger_id",
                                          (pipeline_id,))]
            raise NotFound(f"{where}: pipeline {pipeline_id} has no trigger {trigger_id} in {self.path} (its "
                           f"triggers: {schema.listed(ids)})")
        return row

    def trigger(self, pipeline_id: int, trigger_id: int) -> StoredSet:
        """A trigger's set: ``(keys, weights, position, info)``, its bytes checked against their CRC-32.

        >>> import os, tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> p = store.register_pipeline({})
        >>> store.add_trigger(p, 0, [4, 2], [0.5, 1.0], position=9, info={"note": "x"})
        >>> stored = store.trigger(p, 0)
        >>> stored.keys.tolist(), stored.weights.tolist(), stored.position, stored.info
        ([4, 2], [0.5, 1.0], 9, {'note': 'x'})
        >>> store.close()
        """
        with self._db.transaction(write=False) as db:
            keys, weights, crc, position, info = self._stored(db, pipeline_id, trigger_id,
                                                              "keys, weights, crc, position, info", "trigger")
        keys, weights = schema.decode_set(keys, weights, crc,
                                          f"trigger {trigger_id} of pipeline {pipeline_id} in {self.path}")
        return StoredSet(keys, weights, position, json.loads(info))

    def trigger_meta(self, pipeline_id: int, trigger_id: int) -> dict:
        """What a trigger covers, without reading its set: ``{"size", "weighted", "position", "time", "info",
        "created"}`` (weighted: whether weights other than all-ones were given).

        >>> import os, tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> p = store.register_pipeline({})
        >>> store.add_trigger(p, 0, [4, 2], position=9, time=86400.0)
        >>> {k: v for k, v in store.trigger_meta(p, 0).items() if k != "created"}
        {'size': 2, 'weighted': False, 'position': 9, 'time': 86400.0, 'info': {}}
        >>> store.close()
        """
        with self._db.transaction(write=False) as db:
            size, weighted, position, when, info, created = self._stored(
                db, pipeline_id, trigger_id, "size, weights IS NOT NULL, position, time, info, created", "trigger_meta")
        return {"size": size, "weighted": bool(weighted), "position": position, "time": when,
                "info": json.loads(info), "created": created}

    def triggers(self, pipeline_id: int) -> list[int]:
        """The pipeline's trigger ids: 0 to its last complete trigger.

        >>> import os, tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> p = store.register_pipeline({})
        >>> for t in range(3): store.add_trigger(p, t, [t], position=t + 1)
        >>> store.triggers(p)
        [0, 1, 2]
        >>> store.close()
        """
        with self._db.transaction(write=False) as db:
            pipeline_id = self._known(db, pipeline_id, "triggers")
            return [i for i, in db.execute("SELECT trigger_id FROM triggers WHERE pipeline_id = ? ORDER BY trigger_id",
                                           (pipeline_id,))]

    def last_trigger(self, pipeline_id: int) -> tuple[int, int] | None:
        """``(trigger_id, position)`` of the last complete trigger, or None: a restarted pipeline goes on after it.

        >>> import os, tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> p = store.register_pipeline({})
        >>> store.last_trigger(p) is None
        True
        >>> store.add_trigger(p, 0, [1], position=50); store.last_trigger(p)
        (0, 50)
        >>> store.close()
        """
        with self._db.transaction(write=False) as db:
            pipeline_id = self._known(db, pipeline_id, "last_trigger")
            row = db.execute("SELECT trigger_id, position FROM triggers WHERE pipeline_id = ? ORDER BY trigger_id "
                             "DESC LIMIT 1", (pipeline_id,)).fetchone()
        return None if row is None else (row[0], row[1])

    # -- owners ---------------------------------------------------------------------------------
    def claim_pipeline(self, pipeline_id: int, *, stale_after: float = 120.0) -> None:
        """Record this process as the one that runs the pipeline, its heartbeat now; refused while another lives.

        The owner is this host and pid, and the claim a lease: another owner,
        on any host, is alive while its heartbeat (refreshed by each of its
        writes and by ``heartbeat``) is fresher than ``stale_after`` seconds
        on the store's clock, so an owner that holds a pipeline for long
        beats more often than that (``train.run_pipeline`` does, from a
        thread). On this host, an owner whose pid is gone is dead at once (a
        pid that is this process's is not another). A dead owner's claim is
        taken over. Refused with ``PipelineBusy``, naming the owner and when
        it was last seen.

        >>> import os, socket, tempfile
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
        check_stale_after(stale_after, where)
        with self._db.transaction(write=True) as db:
            pipeline_id = self._known(db, pipeline_id, where)
            owner, age, now = self._lease(db, pipeline_id)
            if owner is not None:
                host, pid = split_owner(owner)
                if alive(host, pid, age, stale_after):
                    raise busy(pipeline_id, self.path, host, pid, age, stale_after)
            db.execute("UPDATE pipelines SET owner = ?, heartbeat = ? WHERE pipeline_id = ?", (me(), now, pipeline_id))

    def _lease(self, db: Any, pipeline_id: int) -> tuple[str | None, float | None, float]:
        """The pipeline's owner, the age of its heartbeat (None: none) and now, all on the store's clock."""
        owner, heartbeat = db.execute("SELECT owner, heartbeat FROM pipelines WHERE pipeline_id = ?",
                                      (pipeline_id,)).fetchone()
        now = self._db.now(db)
        return owner, None if heartbeat is None else max(0.0, now - heartbeat), now

    def release_pipeline(self, pipeline_id: int) -> bool:
        """Clear the pipeline's owner if it is this process (True), else leave it (False).

        >>> import os, tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> p = store.register_pipeline({})
        >>> store.release_pipeline(p)
        False
        >>> store.claim_pipeline(p); store.release_pipeline(p)
        True
        >>> store.close()
        """
        with self._db.transaction(write=True) as db:
            pipeline_id = self._known(db, pipeline_id, "release_pipeline")
            return db.execute("UPDATE pipelines SET owner = NULL, heartbeat = NULL WHERE pipeline_id = ? AND "
                              "owner = ?", (pipeline_id, me())).rowcount == 1

    def heartbeat(self, pipeline_id: int) -> bool:
        """Refresh the pipeline's heartbeat if this process holds it (True), else change nothing (False): a
        pipeline busy with no writes for a while (replaying its stream) keeps its claim from other hosts.

        >>> import os, tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> p = store.register_pipeline({})
        >>> store.heartbeat(p), (store.claim_pipeline(p), store.heartbeat(p))[1]
        (False, True)
        >>> store.close()
        """
        with self._db.transaction(write=True) as db:
            pipeline_id = self._known(db, pipeline_id, "heartbeat")
            return db.execute("UPDATE pipelines SET heartbeat = ? WHERE pipeline_id = ? AND owner = ?",
                              (self._db.now(db), pipeline_id, me())).rowcount == 1

    def owner_alive(self, pipeline_id: int, *, stale_after: float = 120.0) -> bool | None:
        """Whether the process that holds the pipeline is alive (this process is), as ``claim_pipeline`` judges
        it; None when no process holds it. A "running" training of a pipeline whose owner is gone never ends.

        >>> import os, tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> p = store.register_pipeline({})
        >>> store.owner_alive(p), (store.claim_pipeline(p), store.owner_alive(p))[1]
        (None, True)
        >>> store.close()
        """
        held = self._held(pipeline_id, stale_after, "owner_alive")
        return None if held is None else held["alive"]

    def lease(self, pipeline_id: int, *, stale_after: float = 120.0) -> dict | None:
        """Who holds the pipeline, on the store's clock: ``{"owner", "host", "pid", "age", "alive"}`` (age: seconds
        since its last heartbeat, None without one; alive as ``owner_alive`` judges it), or None when no process does.

        >>> import os, socket, tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> p = store.register_pipeline({})
        >>> store.lease(p) is None
        True
        >>> store.claim_pipeline(p)
        >>> held = store.lease(p)
        >>> (held["host"], held["pid"]) == (socket.gethostname(), os.getpid()), 0 <= held["age"] < 60, held["alive"]
        (True, True, True)
        >>> store.close()
        """
        return self._held(pipeline_id, stale_after, "lease")

    def _held(self, pipeline_id: int, stale_after: float, where: str) -> dict | None:
        """``lease``'s answer, its errors naming ``where``."""
        check_stale_after(stale_after, where)
        with self._db.transaction(write=False) as db:
            pipeline_id = self._known(db, pipeline_id, where)
            owner, age, _ = self._lease(db, pipeline_id)
        if owner is None:
            return None
        host, pid = split_owner(owner)
        return {"owner": owner, "host": host, "pid": pid, "age": age,
                "alive": owner == me() or alive(host, pid, age, stale_after)}

    def _beat(self, db: Any, pipeline_id: int) -> None:
        """Refresh the pipeline's heartbeat, inside the caller's transaction, if this process holds it."""
        db.execute("UPDATE pipelines SET heartbeat = ? WHERE pipeline_id = ? AND owner = ?",
                   (self._db.now(db), pipeline_id, me()))

    def mark_abandoned(self, pipeline_id: int) -> list[int]:
        """Turn the pipeline's "running" trainings into "failed" with the error "interrupted"; return their ids.

        A restarted pipeline calls it before it trains again: whatever its
        dead process left running will never finish. Only the process that
        holds the pipeline (``claim_pipeline``, which is refused while its
        old process lives) may: a live pipeline's training is never marked.
        (A process still alive that reports on one afterwards is refused.)

        >>> import os, tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> p = store.register_pipeline({})
        >>> store.add_trigger(p, 0, [1], position=1)
        >>> t = store.start_training(p, 0)
        >>> store.mark_abandoned(p)
        Traceback (most recent call last):
        ...
        readers.errors.BadValue: mark_abandoned: this process (...) does not hold pipeline 1 in .../pipelines.db (no process does): call claim_pipeline(1) first, which is refused while another process runs the pipeline
        >>> store.claim_pipeline(p)
        >>> store.mark_abandoned(p), store.training(t)["status"], store.training(t)["error"]
        ([1], 'failed', 'interrupted')
        >>> store.close()
        """
        with self._db.transaction(write=True) as db:
            pipeline_id = self._known(db, pipeline_id, "mark_abandoned")
            owner, = db.execute("SELECT owner FROM pipelines WHERE pipeline_id = ?", (pipeline_id,)).fetchone()
            if owner != me():
                host, pid = split_owner(owner or ":0")
                held = "no process does" if owner is None else f"process {pid} on host {host!r} does"
                raise BadValue(f"mark_abandoned: this process ({me()}) does not hold pipeline {pipeline_id} in "
                               f"{self.path} ({held}): call claim_pipeline({pipeline_id}) first, which is refused "
                               "while another process runs the pipeline")
            ids = [i for i, in db.execute("SELECT training_id FROM trainings WHERE pipeline_id = ? AND status = "
                                          "'running' ORDER BY training_id", (pipeline_id,))]
            db.execute("UPDATE trainings SET status = 'failed', error = 'interrupted', ended = ? WHERE pipeline_id = ? "
                       "AND status = 'running'", (self._db.now(db), pipeline_id))
            self._beat(db, pipeline_id)
        return ids

    # -- trainings ------------------------------------------------------------------------------
    def start_training(self, pipeline_id: int, trigger_id: int) -> int:
        """A new training on a stored trigger's set, "running" from now; return its training_id.

        >>> import os, tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> p = store.register_pipeline({})
        >>> store.add_trigger(p, 0, [1, 2], position=2)
        >>> t = store.start_training(p, 0)
        >>> store.training(t)["status"], store.training(t)["trigger_id"]
        ('running', 0)
        >>> store.close()
        """
        with self._db.transaction(write=True) as db:
            pipeline_id, trigger_id = self._stored(db, pipeline_id, trigger_id, "pipeline_id, trigger_id",
                                                   "start_training")
            training_id = db.execute("INSERT INTO trainings (pipeline_id, trigger_id, status, progress, metrics, "
                                     "started) VALUES (?, ?, 'running', '0.0', '{}', ?) RETURNING training_id",
                                     (pipeline_id, trigger_id, self._db.now(db))).fetchone()[0]
            self._beat(db, pipeline_id)
            return training_id

    def _change(self, training_id: Any, where: str, metrics: dict | None, model: tuple[bytes, int] | None = None,
                keep_models: int | None = None, **fields: Any) -> None:
        """Change a running training: ``metrics`` merged into its own, ``fields`` set, ``model`` (blob, CRC)
        stored and the pipeline's models cut to the ``keep_models`` latest, all in one transaction."""
        training_id = whole(training_id, "training_id", where, floats=False)
        added = None if metrics is None else json.loads(schema.as_json(metrics, "metrics", where))
        with self._db.transaction(write=True) as db:
            row = db.execute("SELECT status, metrics, error, pipeline_id FROM trainings WHERE training_id = ?",
                             (training_id,)).fetchone()
            if row is None:
                raise self._no_training(db, training_id, where)
            if row[0] != "running":
                raise BadValue(f"{where}: training {training_id} is {row[0]} already"
                               f"{f' ({row[2]})' if row[2] else ''}; only a running training changes")
            if added:
                fields["metrics"] = json.dumps({**json.loads(row[1]), **added})
            if fields.get("ended") is _NOW:
                fields["ended"] = self._db.now(db)
            if fields:
                sets = ", ".join(f"{name} = ?" for name in fields)
                db.execute(f"UPDATE trainings SET {sets} WHERE training_id = ?", (*fields.values(), training_id))
            if model is not None:
                self._insert_model(db, training_id, *model)
            if keep_models is not None:
                _drop_models(db, row[3], keep_models)
            self._beat(db, row[3])

    def _no_training(self, db: Any, training_id: int, where: str) -> NotFound:
        """The error for a training the store does not hold, naming those it does."""
        ids = [i for i, in db.execute("SELECT training_id FROM trainings ORDER BY training_id")]
        return NotFound(f"{where}: no training {training_id} in {self.path} (its trainings: {schema.listed(ids)})")

    def _insert_model(self, db: Any, training_id: int, blob: bytes, crc: int) -> None:
        # (its own method, inside the transaction: the crash tests kill a process here)
        db.execute("INSERT INTO models (training_id, state, crc) VALUES (?, ?, ?)", (training_id, blob, crc))

    def update_training(self, training_id: int, *, progress: float | dict | None = None,
                        metrics: dict | None = None) -> None:
        """Report a running training's progress (a float from 0 to 1, or a JSON dict) and metrics (merged into
        its own: a key given again is replaced, the others kept).

        >>> import os, tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> p = store.register_pipeline({})
        >>> store.add_trigger(p, 0, [1], position=1)
        >>> t = store.start_training(p, 0)
        >>> store.update_training(t, progress=0.25, metrics={"loss": 0.9, "lr": 0.1})
        >>> store.update_training(t, metrics={"loss": 0.5})
        >>> store.training(t)["progress"], store.training(t)["metrics"]
        (0.25, {'loss': 0.5, 'lr': 0.1})
        >>> store.close()
        """
        fields = {} if progress is None else {"progress": _progress(progress)}
        self._change(training_id, "update_training", metrics, **fields)

    def finish_training(self, training_id: int, metrics: dict | None = None, *,
                        model_state: dict | None = None, keep_models: int | None = None) -> None:
        """Mark a running training "finished", its final ``metrics`` merged into its own, and store its model.

        ``model_state``, when given, is a dict of str names to numpy arrays
        and numbers (a model's ``state_dict()``), stored in the transaction
        that marks the training finished: a finished training given a model
        always has it, and a training whose model could not be stored is
        still running. It is kept in the file (whole, as one sqlite BLOB of
        at most 1 GB); ``model_state(training_id)`` reads it back. With
        ``keep_models=k`` only the pipeline's k latest models (by trigger,
        then training) stay: the older ones are deleted in the same
        transaction (``drop_models``; the file keeps its size, and later
        writes reuse the freed pages); None keeps them all.

        >>> import os, tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> p = store.register_pipeline({})
        >>> store.add_trigger(p, 0, [1], position=1)
        >>> t = store.start_training(p, 0)
        >>> store.finish_training(t, {"accuracy": 0.9}, model_state={"w": np.eye(2), "step": 10})
        >>> store.training(t)["status"], store.model_state(t)["w"].tolist()
        ('finished', [[1.0, 0.0], [0.0, 1.0]])
        >>> store.close()
        """
        model = None if model_state is None else schema.encode_state(model_state, "finish_training")
        if keep_models is not None:
            keep_models = whole(keep_models, "keep_models", "finish_training", 1, floats=False)
        self._change(training_id, "finish_training", metrics, model, keep_models, status="finished",
                     ended=_NOW)

    def drop_models(self, pipeline_id: int, keep: int = 1) -> int:
        """Delete the pipeline's stored models but the ``keep`` latest (by trigger, then training); return how
        many went. (The file keeps its size; the freed pages are reused by later writes.)

        >>> import os, tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> p = store.register_pipeline({})
        >>> for trigger in range(3):
        ...     store.add_trigger(p, trigger, [trigger], position=trigger + 1)
        ...     store.finish_training(store.start_training(p, trigger), model_state={"w": np.zeros(2)})
        >>> store.drop_models(p), [store.model_state(t) is None for t in (1, 2, 3)]
        (2, [True, True, False])
        >>> store.close()
        """
        keep = whole(keep, "keep", "drop_models", 0, floats=False)
        with self._db.transaction(write=True) as db:
            return _drop_models(db, self._known(db, pipeline_id, "drop_models"), keep)

    def fail_training(self, training_id: int, error: str) -> None:
        """Mark a running training "failed", with ``error`` saying why.

        >>> import os, tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> p = store.register_pipeline({})
        >>> store.add_trigger(p, 0, [1], position=1)
        >>> t = store.start_training(p, 0)
        >>> store.fail_training(t, "loss is nan")
        >>> store.finish_training(t)
        Traceback (most recent call last):
        ...
        readers.errors.BadValue: finish_training: training 1 is failed already (loss is nan); only a running training changes
        >>> store.close()
        """
        self._change(training_id, "fail_training", None, status="failed", ended=_NOW, error=str(error))

    def _rows(self, db: Any, condition: str, values: tuple) -> list[dict]:
        """The trainings that meet ``condition`` (SQL, with its ORDER BY), as ``training(id)`` gives them."""
        rows = db.execute(f"SELECT {', '.join(_TRAINING)} FROM trainings WHERE {condition}", values).fetchall()
        return [{**dict(zip(_TRAINING, row)), "progress": json.loads(row[4]), "metrics": json.loads(row[5])}
                for row in rows]

    def training(self, training_id: int) -> dict:
        """A training's status: ``{"training_id", "pipeline_id", "trigger_id", "status", "progress", "metrics",
        "started", "ended", "error"}`` (times in seconds since the epoch; ended and error None while running).

        >>> import os, tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> store.training(1)
        Traceback (most recent call last):
        ...
        readers.errors.NotFound: training: no training 1 in .../pipelines.db (its trainings: none)
        >>> store.close()
        """
        training_id = whole(training_id, "training_id", "training", floats=False)
        with self._db.transaction(write=False) as db:
            found = self._rows(db, "training_id = ?", (training_id,))
            if not found:
                raise self._no_training(db, training_id, "training")
        return found[0]

    def trainings(self, pipeline_id: int | None = None) -> list[dict]:
        """Every training (of one pipeline, when given), as ``training(id)`` gives it, in the order started.

        >>> import os, tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> a, b = store.register_pipeline({}), store.register_pipeline({})
        >>> for p in (a, b): store.add_trigger(p, 0, [1], position=1); _ = store.start_training(p, 0)
        >>> [t["pipeline_id"] for t in store.trainings()], [t["training_id"] for t in store.trainings(b)]
        ([1, 2], [2])
        >>> store.close()
        """
        with self._db.transaction(write=False) as db:
            if pipeline_id is not None:
                pipeline_id = self._known(db, pipeline_id, "trainings")
            if pipeline_id is None:
                return self._rows(db, "1 = 1 ORDER BY training_id", ())
            return self._rows(db, "pipeline_id = ? ORDER BY training_id", (pipeline_id,))

    def last_finished(self, pipeline_id: int) -> dict | None:
        """The pipeline's finished training on its latest trigger (ties: the last started), as ``training(id)``
        gives it, or None: where a restarted pipeline takes its model from.

        >>> import os, tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> p = store.register_pipeline({})
        >>> store.last_finished(p) is None
        True
        >>> for t in range(2): store.add_trigger(p, t, [t], position=t + 1)
        >>> a, b = store.start_training(p, 1), store.start_training(p, 0)
        >>> store.finish_training(b); store.finish_training(a); store.last_finished(p)["training_id"]
        1
        >>> store.close()
        """
        with self._db.transaction(write=False) as db:
            pipeline_id = self._known(db, pipeline_id, "last_finished")
            found = self._rows(db, "pipeline_id = ? AND status = 'finished' ORDER BY trigger_id DESC, training_id "
                                   "DESC LIMIT 1", (pipeline_id,))
        return found[0] if found else None

    def model_state(self, training_id: int) -> dict | None:
        """The model state ``finish_training`` stored for a training (its arrays writable), or None if none was.

        >>> import os, tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> p = store.register_pipeline({})
        >>> store.add_trigger(p, 0, [1], position=1)
        >>> a, b = store.start_training(p, 0), store.start_training(p, 0)
        >>> store.finish_training(a, model_state={"b": np.zeros(3, np.float32), "step": 7})
        >>> store.model_state(a)["step"], store.model_state(b)
        (7, None)
        >>> store.model_state(3)
        Traceback (most recent call last):
        ...
        readers.errors.NotFound: model_state: no training 3 in .../pipelines.db (its trainings: 1-2)
        >>> store.close()
        """
        training_id = whole(training_id, "training_id", "model_state", floats=False)
        with self._db.transaction(write=False) as db:
            if db.execute("SELECT 1 FROM trainings WHERE training_id = ?", (training_id,)).fetchone() is None:
                raise self._no_training(db, training_id, "model_state")
            # (CAST: a state changed into text outside readerkit still comes back as bytes, and fails its CRC)
            row = db.execute(f"SELECT CAST(state AS {self._db.blob}), crc FROM models WHERE training_id = ?",
                             (training_id,)).fetchone()
        if row is None:
            return None
        return schema.decode_state(row[0], row[1], f"the model of training {training_id} in {self.path}")
