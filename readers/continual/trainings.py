"""The trainings part of ``readers.PipelineStore``: their status, progress and metrics, and finished models.

A training runs on one stored trigger's set: ``start_training`` makes it
"running", ``update_training`` reports how it goes, and ``finish_training``
(with the model's state, when given, in the same transaction) or
``fail_training`` ends it; a process that reads the file sees each step
whole. ``last_finished`` and ``model_state`` are how a restarted pipeline
finds the model to go on from. The methods live in ``TrainingsMixin``, which
``PipelineStore`` inherits; the tables are ``readers.continual.schema``'s.
"""
from __future__ import annotations

import json
import time
from typing import Any

import numpy as np

from readers.checks import whole
from readers.continual.schema import as_json, decode_state, encode_state, listed

__all__ = ["TrainingsMixin"]

_TRAINING = ("training_id", "pipeline_id", "trigger_id", "status", "progress", "metrics", "started", "ended", "error")


def _progress(progress: Any) -> str:
    """A training's progress as stored: a float from 0 to 1, or a dict (JSON)."""
    if isinstance(progress, dict):
        return as_json(progress, "progress", "update_training")
    if isinstance(progress, (int, float, np.integer, np.floating)) and not isinstance(progress, (bool, np.bool_)) \
            and 0 <= progress <= 1:
        return json.dumps(float(progress))
    raise ValueError(f"update_training: progress must be a float from 0 to 1 or a dict (e.g. {{'step': 10, "
                     f"'steps': 100}}), got {progress!r}")


def _drop_models(db: Any, pipeline_id: int, keep: int) -> int:
    """Delete the pipeline's models but the ``keep`` latest, inside the caller's transaction; the number deleted."""
    return db.execute("DELETE FROM models WHERE training_id IN (SELECT m.training_id FROM models m JOIN trainings t "
                      "ON t.training_id = m.training_id WHERE t.pipeline_id = ? ORDER BY t.trigger_id DESC, "
                      "t.training_id DESC LIMIT -1 OFFSET ?)", (pipeline_id, keep)).rowcount


class TrainingsMixin:
    """``PipelineStore``'s trainings methods (see the module); the store gives them its connection.

    They use the store's ``path``, ``_using(write)`` (one transaction),
    ``_known`` and ``_stored`` (a pipeline's and a trigger's checks) and
    ``_beat(db, pipeline_id)`` (the heartbeat of a pipeline this process holds).

    >>> import os, tempfile
    >>> from readers.continual.store import PipelineStore
    >>> folder = tempfile.TemporaryDirectory()
    >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
    >>> isinstance(store, TrainingsMixin)
    True
    >>> store.close()
    """

    path: str

    def start_training(self, pipeline_id: int, trigger_id: int) -> int:
        """A new training on a stored trigger's set, "running" from now; return its training_id.

        >>> import os, tempfile
        >>> from readers.continual.store import PipelineStore
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> p = store.register_pipeline({})
        >>> store.add_trigger(p, 0, [1, 2], position=2)
        >>> t = store.start_training(p, 0)
        >>> store.training(t)["status"], store.training(t)["trigger_id"]
        ('running', 0)
        >>> store.close()
        """
        with self._using(write=True) as db:
            pipeline_id, trigger_id = self._stored(db, pipeline_id, trigger_id, "pipeline_id, trigger_id",
                                                   "start_training")
            training_id = db.execute("INSERT INTO trainings (pipeline_id, trigger_id, status, progress, metrics, "
                                     "started) VALUES (?, ?, 'running', '0.0', '{}', ?)",
                                     (pipeline_id, trigger_id, time.time())).lastrowid
            self._beat(db, pipeline_id)
            return training_id

    def _change(self, training_id: Any, where: str, metrics: dict | None, model: tuple[bytes, int] | None = None,
                keep_models: int | None = None, **fields: Any) -> None:
        """Change a running training: ``metrics`` merged into its own, ``fields`` set, ``model`` (blob, CRC)
        stored and the pipeline's models cut to the ``keep_models`` latest, all in one transaction."""
        training_id = whole(training_id, "training_id", where, floats=False)
        added = None if metrics is None else json.loads(as_json(metrics, "metrics", where))
        with self._using(write=True) as db:
            row = db.execute("SELECT status, metrics, error, pipeline_id FROM trainings WHERE training_id = ?",
                             (training_id,)).fetchone()
            if row is None:
                ids = [i for i, in db.execute("SELECT training_id FROM trainings ORDER BY training_id")]
                raise LookupError(f"{where}: no training {training_id} in {self.path} (its trainings: {listed(ids)})")
            if row[0] != "running":
                raise ValueError(f"{where}: training {training_id} is {row[0]} already"
                                 f"{f' ({row[2]})' if row[2] else ''}; only a running training changes")
            if added:
                fields["metrics"] = json.dumps({**json.loads(row[1]), **added})
            if fields:
                sets = ", ".join(f"{name} = ?" for name in fields)
                db.execute(f"UPDATE trainings SET {sets} WHERE training_id = ?", (*fields.values(), training_id))
            if model is not None:
                self._insert_model(db, training_id, *model)
            if keep_models is not None:
                _drop_models(db, row[3], keep_models)
            self._beat(db, row[3])

    def _insert_model(self, db: Any, training_id: int, blob: bytes, crc: int) -> None:
        # (its own method, inside the transaction: the crash tests kill a process here)
        db.execute("INSERT INTO models (training_id, state, crc) VALUES (?, ?, ?)", (training_id, blob, crc))

    def update_training(self, training_id: int, *, progress: float | dict | None = None,
                        metrics: dict | None = None) -> None:
        """Report a running training's progress (a float from 0 to 1, or a JSON dict) and metrics (merged into
        its own: a key given again is replaced, the others kept).

        >>> import os, tempfile
        >>> from readers.continual.store import PipelineStore
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
        >>> from readers.continual.store import PipelineStore
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
        model = None if model_state is None else encode_state(model_state, "finish_training")
        if keep_models is not None:
            keep_models = whole(keep_models, "keep_models", "finish_training", 1, floats=False)
        self._change(training_id, "finish_training", metrics, model, keep_models, status="finished",
                     ended=time.time())

    def drop_models(self, pipeline_id: int, keep: int = 1) -> int:
        """Delete the pipeline's stored models but the ``keep`` latest (by trigger, then training); return how
        many went. (The file keeps its size; the freed pages are reused by later writes.)

        >>> import os, tempfile
        >>> from readers.continual.store import PipelineStore
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
        with self._using(write=True) as db:
            return _drop_models(db, self._known(db, pipeline_id, "drop_models"), keep)

    def fail_training(self, training_id: int, error: str) -> None:
        """Mark a running training "failed", with ``error`` saying why.

        >>> import os, tempfile
        >>> from readers.continual.store import PipelineStore
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> p = store.register_pipeline({})
        >>> store.add_trigger(p, 0, [1], position=1)
        >>> t = store.start_training(p, 0)
        >>> store.fail_training(t, "loss is nan")
        >>> store.finish_training(t)
        Traceback (most recent call last):
        ...
        ValueError: finish_training: training 1 is failed already (loss is nan); only a running training changes
        >>> store.close()
        """
        self._change(training_id, "fail_training", None, status="failed", ended=time.time(), error=str(error))

    def _rows(self, db: Any, condition: str, values: tuple) -> list[dict]:
        """The trainings that meet ``condition`` (SQL, with its ORDER BY), as ``training(id)`` gives them."""
        rows = db.execute(f"SELECT {', '.join(_TRAINING)} FROM trainings WHERE {condition}", values).fetchall()
        return [{**dict(zip(_TRAINING, row)), "progress": json.loads(row[4]), "metrics": json.loads(row[5])}
                for row in rows]

    def training(self, training_id: int) -> dict:
        """A training's status: ``{"training_id", "pipeline_id", "trigger_id", "status", "progress", "metrics",
        "started", "ended", "error"}`` (times in seconds since the epoch; ended and error None while running).

        >>> import os, tempfile
        >>> from readers.continual.store import PipelineStore
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> store.training(1)
        Traceback (most recent call last):
        ...
        LookupError: training: no training 1 in .../pipelines.db (its trainings: none)
        >>> store.close()
        """
        training_id = whole(training_id, "training_id", "training", floats=False)
        with self._using(write=False) as db:
            found = self._rows(db, "training_id = ?", (training_id,))
            ids = [] if found else [i for i, in db.execute("SELECT training_id FROM trainings ORDER BY training_id")]
        if not found:
            raise LookupError(f"training: no training {training_id} in {self.path} (its trainings: {listed(ids)})")
        return found[0]

    def trainings(self, pipeline_id: int | None = None) -> list[dict]:
        """Every training (of one pipeline, when given), as ``training(id)`` gives it, in the order started.

        >>> import os, tempfile
        >>> from readers.continual.store import PipelineStore
        >>> folder = tempfile.TemporaryDirectory()
        >>> store = PipelineStore(os.path.join(folder.name, "pipelines.db"))
        >>> a, b = store.register_pipeline({}), store.register_pipeline({})
        >>> for p in (a, b): store.add_trigger(p, 0, [1], position=1); _ = store.start_training(p, 0)
        >>> [t["pipeline_id"] for t in store.trainings()], [t["training_id"] for t in store.trainings(b)]
        ([1, 2], [2])
        >>> store.close()
        """
        with self._using(write=False) as db:
            if pipeline_id is not None:
                pipeline_id = self._known(db, pipeline_id, "trainings")
            return self._rows(db, "? IS NULL OR pipeline_id = ? ORDER BY training_id", (pipeline_id, pipeline_id))

    def last_finished(self, pipeline_id: int) -> dict | None:
        """The pipeline's finished training on its latest trigger (ties: the last started), as ``training(id)``
        gives it, or None: where a restarted pipeline takes its model from.

        >>> import os, tempfile
        >>> from readers.continual.store import PipelineStore
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
        with self._using(write=False) as db:
            pipeline_id = self._known(db, pipeline_id, "last_finished")
            found = self._rows(db, "pipeline_id = ? AND status = 'finished' ORDER BY trigger_id DESC, training_id "
                                   "DESC LIMIT 1", (pipeline_id,))
        return found[0] if found else None

    def model_state(self, training_id: int) -> dict | None:
        """The model state ``finish_training`` stored for a training (its arrays writable), or None if none was.

        >>> import os, tempfile
        >>> from readers.continual.store import PipelineStore
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
        LookupError: model_state: no training 3 in .../pipelines.db (its trainings: 1-2)
        >>> store.close()
        """
        training_id = whole(training_id, "training_id", "model_state", floats=False)
        with self._using(write=False) as db:
            if db.execute("SELECT 1 FROM trainings WHERE training_id = ?", (training_id,)).fetchone() is None:
                ids = [i for i, in db.execute("SELECT training_id FROM trainings ORDER BY training_id")]
                raise LookupError(f"model_state: no training {training_id} in {self.path} (its trainings: "
                                  f"{listed(ids)})")
            # (CAST: a state changed into text outside readerkit still comes back as bytes, and fails its CRC)
            row = db.execute("SELECT CAST(state AS BLOB), crc FROM models WHERE training_id = ?",
                             (training_id,)).fetchone()
        return None if row is None else decode_state(row[0], row[1], f"the model of training {training_id} in "
                                                                     f"{self.path}")
