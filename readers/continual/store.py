"""``PipelineStore``: continual-learning pipelines, their triggers' training sets and their trainings, in one file.

A pipeline process registers itself, claims the pipeline (``claim_pipeline``:
one process runs a pipeline at a time), stores each trigger's training set
and reports its trainings; any other process opens the same file to read a
set back (``readers.trigger_set``) or to ask how a training is going, by its
``training_id``, at any time. Every write is one transaction, so a process
killed mid-trigger leaves the earlier triggers whole and none of its set; a
restarted pipeline claims the pipeline again (refused while its old process
lives), asks ``last_trigger`` where to go on and ``last_finished`` for the
model to go on from, and calls ``mark_abandoned`` for the trainings the dead
process left "running". The tables and the file's layout are
``readers.continual.schema``'s; the owners' and the trainings' methods are
``readers.continual.owners``'s and ``readers.continual.trainings``'s.
"""
from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import sqlite3
import time
from typing import Any, NamedTuple

import numpy as np

from readers.checks import whole
from readers.continual.owners import OwnersMixin, PipelineBusy
from readers.continual.schema import as_json, decode_set, encode_set, listed, open_store
from readers.continual.trainings import TrainingsMixin
from readers.storage.sqlite import Database

__all__ = ["PipelineBusy", "PipelineStore", "StoredSet"]


class StoredSet(NamedTuple):
    """A stored trigger's set: its keys (int64), weights (float32), the stream position it covers, its info.

    >>> StoredSet(np.array([3]), np.ones(1, np.float32), 10, {}).position
    10
    """

    keys: np.ndarray
    weights: np.ndarray
    position: int
    info: dict


def _now() -> float:
    return time.time()


class PipelineStore(OwnersMixin, TrainingsMixin):
    """Pipelines, their triggers' training sets and trainings, in the sqlite3 file ``path`` (see the module).

    Ids: pipelines and trainings count from 1; each pipeline's triggers, from
    0. One store serves a writer thread and reader threads (they take turns
    on one connection); other processes open the same file. It pickles as
    its path, so a worker reopens it. ``close()`` may be called again.

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
        self.path = os.path.abspath(os.fspath(path))  # a copy unpickled in another folder opens this file
        self._db = Database(open_store(self.path, create),
                            f"the pipeline store {self.path} is closed: open it again with PipelineStore(path)")

    def __repr__(self) -> str:
        return f"PipelineStore({self.path!r})"

    def __reduce__(self) -> tuple:
        return functools.partial(PipelineStore, create=False), (self.path,)  # the file exists: never made anew

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
        ValueError: the pipeline store .../pipelines.db is closed: open it again with PipelineStore(path)
        """
        self._db.close()

    def _using(self, write: bool) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """One transaction in this thread's turn on the connection (``Database.transaction``)."""
        return self._db.transaction(write)

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
        text = as_json(config, "config", "register_pipeline")
        with self._using(write=True) as db:
            return db.execute("INSERT INTO pipelines (config, created) VALUES (?, ?)", (text, _now())).lastrowid

    def _known(self, db: sqlite3.Connection, pipeline_id: Any, where: str) -> int:
        pipeline_id = whole(pipeline_id, "pipeline_id", where, floats=False)
        if db.execute("SELECT 1 FROM pipelines WHERE pipeline_id = ?", (pipeline_id,)).fetchone() is None:
            ids = [i for i, in db.execute("SELECT pipeline_id FROM pipelines ORDER BY pipeline_id")]
            raise LookupError(f"{where}: no pipeline {pipeline_id} in {self.path} (its pipelines: {listed(ids)})")
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
        with self._using(write=False) as db:
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
        with self._using(write=False) as db:
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
        ValueError: add_trigger: pipeline 1 has trigger 0, so the next trigger_id is 1, not 2 (trigger ids go up by one from 0, with no gaps)
        >>> store.add_trigger(p, 1, [5], position=10)
        Traceback (most recent call last):
        ...
        ValueError: add_trigger: position 10 is trigger 0's already; a trigger covers new samples, so give the stream's samples seen at this trigger, more than 10
        >>> store.close()
        """
        where = "add_trigger"
        trigger_id = whole(trigger_id, "trigger_id", where, floats=False)
        position = whole(position, "position", where, floats=False)
        if time is not None and not (isinstance(time, (int, float, np.number)) and math.isfinite(time)):
            raise ValueError(f"{where}: time must be a finite number (the stream's time at the trigger) or None, "
                             f"got {time!r}")
        keys_blob, weights_blob, crc = encode_set(keys, weights, where)
        info_text = as_json({} if info is None else info, "info", where)
        row = (trigger_id, len(keys_blob) // 8, keys_blob, weights_blob, crc, position, time, info_text, _now())
        with self._using(write=True) as db:
            pipeline_id = self._known(db, pipeline_id, where)
            last = db.execute("SELECT trigger_id, position, time FROM triggers WHERE pipeline_id = ? ORDER BY "
                              "trigger_id DESC LIMIT 1", (pipeline_id,)).fetchone()
            expected = 0 if last is None else last[0] + 1
            if trigger_id != expected:
                held = "no triggers yet" if last is None else f"triggers 0-{last[0]}" if last[0] else "trigger 0"
                why = "it is stored already, and a set is written once" if trigger_id < expected else \
                    "trigger ids go up by one from 0, with no gaps"
                raise ValueError(f"{where}: pipeline {pipeline_id} has {held}, so the next trigger_id is {expected}, "
                                 f"not {trigger_id} ({why})")
            if last is not None and position < last[1]:
                raise ValueError(f"{where}: position {position} is before trigger {last[0]}'s ({last[1]}); a "
                                 "trigger's position counts the stream's samples seen, which never goes back")
            if last is not None and position == last[1]:
                raise ValueError(f"{where}: position {position} is trigger {last[0]}'s already; a trigger covers new "
                                 f"samples, so give the stream's samples seen at this trigger, more than {position}")
            if last is not None and time is not None and last[2] is not None and time < last[2]:
                raise ValueError(f"{where}: time {time!r} is before trigger {last[0]}'s ({last[2]!r}); the stream's "
                                 "time never goes back: give the time of the stream at this trigger")
            self._insert_trigger(db, (pipeline_id, *row))
            self._beat(db, pipeline_id)

    def _insert_trigger(self, db: sqlite3.Connection, row: tuple) -> None:
        # (its own method, inside the transaction: the crash tests kill a process here)
        db.execute("INSERT INTO triggers (pipeline_id, trigger_id, size, keys, weights, crc, position, time, info, "
                   "created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row)

    def _stored(self, db: sqlite3.Connection, pipeline_id: Any, trigger_id: Any, columns: str, where: str) -> tuple:
        pipeline_id = self._known(db, pipeline_id, where)
        trigger_id = whole(trigger_id, "trigger_id", where, floats=False)
        row = db.execute(f"SELECT {columns} FROM triggers WHERE pipeline_id = ? AND trigger_id = ?",
                         (pipeline_id, trigger_id)).fetchone()
        if row is None:
            ids = [i for i, in db.execute("SELECT trigger_id FROM triggers WHERE pipeline_id = ? ORDER BY trigger_id",
                                          (pipeline_id,))]
            raise LookupError(f"{where}: pipeline {pipeline_id} has no trigger {trigger_id} in {self.path} (its "
                              f"triggers: {listed(ids)})")
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
        with self._using(write=False) as db:
            keys, weights, crc, position, info = self._stored(db, pipeline_id, trigger_id,
                                                              "keys, weights, crc, position, info", "trigger")
        keys, weights = decode_set(keys, weights, crc, f"trigger {trigger_id} of pipeline {pipeline_id} in {self.path}")
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
        with self._using(write=False) as db:
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
        with self._using(write=False) as db:
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
        with self._using(write=False) as db:
            pipeline_id = self._known(db, pipeline_id, "last_trigger")
            row = db.execute("SELECT trigger_id, position FROM triggers WHERE pipeline_id = ? ORDER BY trigger_id "
                             "DESC LIMIT 1", (pipeline_id,)).fetchone()
        return None if row is None else (row[0], row[1])

