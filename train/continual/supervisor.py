"""``run_pipeline``: a continual-learning pipeline over a timestamped stream (Modyn's training supervisor).

The pipeline reads the stream in chunks and feeds each to its trigger and
strategy. At every trigger point the strategy's set is stored in the
``readers.PipelineStore`` under ``(pipeline_id, trigger_id)``; a training
with a new ``training_id`` trains a model on that set (read back with
``readers.trigger_set``), reporting its progress to the store as it goes,
and is evaluated on the test split of every task the stream has reached.
Any process can ask the store how a training is going, by its id.

A strategy that trains ``from_scratch`` (GDumb) gets a new model per
trigger; the others go on training the previous trigger's model. A training
runs at least ``min_steps`` steps: passes are added over a small set until
it has, so a 500-sample memory is fitted, not just shown once.

Restart: ``run_pipeline(..., resume=pipeline_id)`` replays the stream through
the trigger and strategy (both deterministic) and checks each replayed set
against the stored one; it trains nothing up to the last trigger whose
training finished, takes that training's model from the store and goes on
from the next trigger. A killed pipeline's "running" training is marked
failed ("interrupted"); Ctrl-C marks it so itself, and stops.
"""
from __future__ import annotations

import contextlib
import math
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

import readers
from readers.continual.store import PipelineStore
from readers.errors import BadValue
from train.continual.config import CheckedPipeline, PipelineConfigError, check_pipeline
from train.continual.rank_jobs import RankJobs, check_ranks
from train.continual.stream_columns import seen_tasks, stream_chunks
from train.driver import evaluate, train
from train.events import EndIteration

__all__ = ["PipelineConfigError", "PipelineReplayError", "run_pipeline"]

#: Seconds between two progress reports of a training to the store.
PROGRESS_EVERY = 1.0


#: Seconds the pipeline's lease lasts without a heartbeat (claim_pipeline's stale_after): another process, on any
#: host, takes the pipeline over once it has run out. While it holds the pipeline, run_pipeline beats every
#: quarter of it from a thread, so a long training never loses it.
LEASE_S = 120.0


class _Lease:
    """This process's lease on a pipeline, kept by a heartbeat every ``LEASE_S / 4`` seconds from a thread."""

    def __init__(self, store: PipelineStore, pipeline_id: int):
        self.store, self.pipeline_id, self.every = store, pipeline_id, LEASE_S / 4
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"readerkit-lease-{pipeline_id}", daemon=True)

    def _beat(self) -> None:
        while not self._stop.wait(self.every):
            with contextlib.suppress(Exception):  # (a server restarting: the next beat reconnects)
                self.store.heartbeat(self.pipeline_id)

    def __enter__(self) -> _Lease:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class PipelineReplayError(BadValue):
    """A resumed pipeline's stream, trigger or strategy gave another set than the one stored at a trigger."""


def _derived_seed(seed: int, trigger_id: int) -> int:
    """Trigger ``trigger_id``'s seed (its model's and its shuffle's): distinct per trigger and per pipeline seed."""
    return seed * 1_000_003 + trigger_id


class _Labels:
    """The label of every key the stream has given (keys index the source), for a set's class counts."""

    def __init__(self, size: int):
        self._of = np.full(size, -1, np.int64)  # -1: not given yet

    def add(self, keys: np.ndarray, labels: np.ndarray, position: int) -> None:
        if len(keys) and (keys.min() < 0 or keys.max() >= len(self._of)):
            i = int(np.flatnonzero((keys < 0) | (keys >= len(self._of)))[0])
            raise BadValue(f"the stream's entry at position {position + i} has key {int(keys[i])}, but keys index "
                           f"the source, which has {len(self._of)} entries: give keys 0..{len(self._of) - 1}")
        self._of[keys] = labels

    def counts(self, keys: np.ndarray) -> dict[str, int]:
        """``{str(label): count}`` over ``keys``, each with the label the stream gave it last."""
        labels = self._of[keys]
        if (labels < 0).any():
            raise BadValue(f"the strategy selected key {int(keys[labels < 0][0])}, which the stream has not given "
                           "yet: a strategy selects among the keys it was informed of")
        counts = np.bincount(labels)
        return {str(v): int(counts[v]) for v in np.flatnonzero(counts).tolist()}


class _Reporter:
    """Event handler of a training: its progress to the store at most every PROGRESS_EVERY s, then the caller's."""

    def __init__(self, store: PipelineStore, training_id: int, steps: int, handler: Callable | None):
        self.store, self.training_id, self.steps, self.handler = store, training_id, steps, handler
        self.done, self.reported, self.loss = 0, 0.0, math.nan

    def __call__(self, event: Any) -> None:
        if isinstance(event, EndIteration):
            self.done += 1
            self.loss = float(event.metrics.get("loss", math.nan))
            now = time.monotonic()
            if now - self.reported >= PROGRESS_EVERY or self.done == self.steps:
                self.report()
                self.reported = now
        if self.handler is not None:
            self.handler(event)

    def report(self) -> None:
        """Write the progress so far to the store (also when the training stops: its last step, not a stale one)."""
        self.store.update_training(self.training_id, progress={"step": self.done, "steps": self.steps,
                                                              "loss": self.loss})


class _Run:
    """One call of ``run_pipeline``: the checked pipeline, the store and where the replay stands."""

    def __init__(self, pipeline: CheckedPipeline, store: PipelineStore, pipeline_id: int, on_trigger: Callable | None,
                 event_handler: Callable | None, ranks: RankJobs | None = None):
        self.pipeline, self.store, self.pipeline_id, self.ranks = pipeline, store, pipeline_id, ranks
        self.on_trigger, self.event_handler = on_trigger, event_handler
        last = store.last_trigger(pipeline_id)
        self.stored = -1 if last is None else last[0]  # sets up to here are stored: replayed, checked
        done = store.last_finished(pipeline_id)
        self.finished = -1 if done is None else done["trigger_id"]  # trainings up to here are done: skipped
        self.model: Any = None
        if done is not None and not pipeline.strategy.from_scratch:
            self.model = pipeline.model(_derived_seed(pipeline.seed, done["trigger_id"]))
            state = store.model_state(done["training_id"])
            if state is None:
                raise PipelineReplayError(f"training {done['training_id']} of pipeline {pipeline_id} finished without "
                                          f"its model in {store.path}, so the next trigger has nothing to go on from; "
                                          "start a new pipeline")
            self.model.load_state_dict(state)
        self.labels, self.trigger_id, self.records = _Labels(len(pipeline.source)), 0, []

    def at_trigger(self, position: int, when: float) -> None:
        pipeline, store, p, t = self.pipeline, self.store, self.pipeline_id, self.trigger_id
        keys, weights = pipeline.strategy.select()
        keys = np.asarray(keys, np.int64)
        weights = np.ones(len(keys), np.float32) if weights is None else np.asarray(weights, np.float32)
        info = {"classes": self.labels.counts(keys), "strategy": pipeline.strategy.spec,
                "trigger": pipeline.trigger.spec}
        if t <= self.stored:
            self._check_replay(t, keys, weights, position)  # (a long replay keeps its claim: _Lease beats)
        else:
            store.add_trigger(p, t, keys, None if (weights == 1).all() else weights, position=position, time=when,
                              info=info)
        self.trigger_id += 1
        if t > self.finished:
            self._train(t, len(keys), bool((weights != 1).any()), when, info["classes"])

    def _check_replay(self, t: int, keys: np.ndarray, weights: np.ndarray, position: int) -> None:
        stored = self.store.trigger(self.pipeline_id, t)
        if stored.position != position or not np.array_equal(stored.keys, keys) or \
                not np.array_equal(stored.weights, weights):
            differs = f"position {position}, not {stored.position}" if stored.position != position else \
                f"{len(keys)} keys where {len(stored.keys)} are stored" if len(keys) != len(stored.keys) else \
                "other keys or weights"
            raise PipelineReplayError(
                f"resuming pipeline {self.pipeline_id}: replaying the stream gave trigger {t} another set than the "
                f"one stored in {self.store.path} ({differs}): the stream, trigger or strategy is not the one the "
                "pipeline ran with; resume with the same ones, or start a new pipeline")

    def _train(self, t: int, size: int, weighted: bool, when: float, classes: dict[str, int]) -> None:
        pipeline, store = self.pipeline, self.store
        seed = _derived_seed(pipeline.seed, t)
        steps_per_pass = max(1, -(-size // pipeline.batch_size))
        passes = max(pipeline.passes, -(-pipeline.min_steps // steps_per_pass)) if size else 0
        training_id = store.start_training(self.pipeline_id, t)
        started = time.perf_counter()
        reporter = _Reporter(store, training_id, passes * steps_per_pass, self.event_handler)
        try:
            start_from = None  # the training whose model a torchrun job goes on from
            if pipeline.strategy.from_scratch or self.model is None:
                self.model = pipeline.model(seed)
            elif self.ranks is not None:
                start_from = store.last_finished(self.pipeline_id)["training_id"]
            history: list[dict] = []
            if size and self.ranks is not None:  # nproc > 1: the ranks read the set, train, hand back the state
                history = self.ranks.train(
                    self.model, pipeline_id=self.pipeline_id, trigger_id=t, training_id=training_id, seed=seed,
                    batch_size=pipeline.batch_size, passes=passes, steps=passes * steps_per_pass,
                    mapping=pipeline.mapping, weight_column=len(pipeline.first_entry) if weighted else None,
                    start_from=start_from)
            elif size:
                data = readers.trigger_set(store, self.pipeline_id, t, source=pipeline.source, weights=weighted)
                mapping = {**pipeline.mapping, "weight": len(pipeline.first_entry)} if weighted else pipeline.mapping
                history = train(readers.shuffle(data, seed=seed), mapping, pipeline.batch_size, passes,
                                model=self.model, event_handler=reporter, seed=seed, shard=False)
            tasks = seen_tasks(pipeline.test_tasks, when, pipeline.task_seconds)
            accuracies = [float(evaluate(self.model, pipeline.test_tasks[task], pipeline.mapping)["accuracy"])
                          for task in tasks]
            record = {
                "pipeline_id": self.pipeline_id, "trigger_id": t, "training_id": training_id, "set_size": size,
                "classes": classes, "steps": passes * steps_per_pass, "passes": passes,
                "train_loss": history[-1]["train_loss"] if history else None,
                "seconds": round(time.perf_counter() - started, 3), "tasks": tasks, "accuracies": accuracies,
                "average_accuracy": float(np.mean(accuracies)) if accuracies else None,
            }
            store.finish_training(training_id, {k: record[k] for k in (
                "set_size", "steps", "passes", "train_loss", "seconds", "tasks", "accuracies", "average_accuracy")},
                model_state=self.model.state_dict(), keep_models=pipeline.keep_models)
        except BaseException as exc:
            why = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
            with contextlib.suppress(Exception):  # the store's own failure is not the one to report
                if reporter.done:
                    reporter.report()
                store.fail_training(training_id, why)
            raise
        self.records.append(record)
        if self.on_trigger is not None:
            self.on_trigger(record)

    def run(self) -> list[dict]:
        pipeline = self.pipeline
        pipeline.trigger.reset()
        when = 0.0  # the time of the last entry before the chunk: a point at a chunk's start covers up to it
        for chunk in stream_chunks(pipeline.stream, pipeline.chunk, pipeline.label_column, pipeline.feature_column):
            start = pipeline.trigger.seen
            points = pipeline.trigger.feed(chunk.times, chunk.labels, chunk.features)
            cuts = [point - start for point in points]
            done = 0
            for cut in cuts if cuts and cuts[-1] == len(chunk.keys) else [*cuts, len(chunk.keys)]:
                self.labels.add(chunk.keys[done:cut], chunk.labels[done:cut], start + done)
                pipeline.strategy.inform(chunk.keys[done:cut], chunk.labels[done:cut])
                if start + cut in points:
                    self.at_trigger(start + cut, float(chunk.times[cut - 1]) if cut else when)
                done = cut
            if len(chunk.times):
                when = float(chunk.times[-1])
        point = pipeline.trigger.finish()
        if point is not None:
            self.at_trigger(point, when)
        return self.records


def _address(db: str | os.PathLike | PipelineStore) -> str:
    """What the ranks open the store by: the path or URL given, or an open store's own (its password is
    kept out of the ranks' spec file by ``RankJobs``)."""
    if isinstance(db, PipelineStore):
        return db.__reduce__()[1][0]  # (the address it pickles as: a URL's password included)
    return os.fspath(db)


def run_pipeline(stream: Any, trigger: Any, strategy: Any, model: Callable[[int], Any], *,
                 db: str | os.PathLike | PipelineStore, test: Any = None, source: Any = None,
                 mapping: Mapping[str, Any] | Sequence[str] = ("image", "label"), batch_size: int = 32,
                 passes: int = 1, min_steps: int = 600, seed: int = 0, task_seconds: float | None = 86400.0,
                 chunk: int = 4096, resume: int | None = None, on_start: Callable[[int], None] | None = None,
                 on_trigger: Callable[[dict], None] | None = None,
                 event_handler: Callable[[Any], None] | None = None, config: Mapping[str, Any] | None = None,
                 keep_models: int | None = 1, nproc: int = 1, max_restarts: int = 2, rank_source: Any = None,
                 work_dir: str | os.PathLike | None = None, checkpoint_every: int | None = 100,
                 launcher: str | None = None) -> list[dict]:
    """Run a continual-learning pipeline over ``stream``; return one record per trigger it trained.

    ``stream``: a timestamped reader, entries ending in ``(key, time)`` (see
    ``readers.sources.split_mnist``), its label the column ``mapping`` names
    ``"label"``. ``trigger``: a ``train.Trigger`` or its spec
    (``"time:86400"``, ``"every:N"``, ``"drift:..."``). ``strategy``: a fresh
    ``train.Strategy`` or its spec (``"new"``, ``"all"``, ``"gdumb:500"``,
    seeded with ``seed``). ``model``: called as ``model(seed)`` for a new model
    (``lambda seed: MLP(784, n_classes=10, seed=seed)``): every class the
    stream will bring must be in it from the start. ``db``: the pipeline
    store's file (made if missing), a ``postgresql://`` URL, or an open ``PipelineStore``. ``test``: a
    timestamped test split, evaluated per task (the entries whose times fall
    in one ``task_seconds`` window; one task when None) for every task the
    stream has reached. ``source``: the indexed reader the keys index,
    ``stream.by_key()`` by default. Each training shuffles its set (seeded by
    ``seed`` and the trigger), runs ``passes`` passes of ``batch_size``, or
    more to reach ``min_steps`` steps. ``config``: the caller's own settings,
    stored with the pipeline's and compared on resume. ``keep_models``: how many
    of the latest trainings' models the store keeps (the last is what a resume
    goes on from; None keeps every one, about 2.4 MB each for the default MLP).

    ``nproc`` > 1 runs each trigger's training as a torchrun job of ``nproc``
    processes on this host (``train.continual.rank_jobs``, ``train.continual.ranks``),
    with a torch model (``train.models.torch_classifiers``) under
    DistributedDataParallel: each rank reads its shard of the trigger's set
    from the store and takes ``batch_size / nproc`` of each global batch, so
    the results equal one process's up to float summation order.
    ``rank_source`` says how a rank builds ``source``: ``"module:function"`` or
    ``{"call": "module:function", "kwargs": {...}}`` (JSON; checked against
    the source's fingerprint). A job whose rank died is launched again up to
    ``max_restarts`` times; the ranks resume from their checkpoints (every
    pass and every ``checkpoint_every`` steps, in ``work_dir``, a temporary
    folder by default); past that the training is marked failed, and
    ``resume=`` trains it again. The supervisor stays the pipeline's owner,
    starts and finishes each training in the store; ``event_handler`` gets
    no events of such a training (rank 0 reports its progress to the store). ``launcher`` replaces the
    local torchrun with your own command, run for each training (split like a
    shell line, no shell; ``{spec}``, ``{nproc}`` and ``{training_id}``
    filled in), e.g. ``srun`` starting torchrun on several
    hosts: then ``work_dir`` must be a folder every host shares (the README's
    continual section shows it).

    Everything is checked before anything starts; all that is wrong is
    raised as one ``PipelineConfigError``. An exception that stops a
    registered pipeline (Ctrl-C's ``KeyboardInterrupt`` too) carries its
    ``pipeline_id``, for ``resume=``. A record holds ``pipeline_id``,
    ``trigger_id``, ``training_id``, ``set_size``, ``classes`` (the set's class
    counts), ``steps``, ``passes``, ``train_loss``, ``seconds``, ``tasks``,
    ``accuracies`` (one per task, in ``tasks``' order) and
    ``average_accuracy``; ``on_trigger(record)`` is called with each as it is
    made, and ``event_handler`` gets every training's events. ``on_start(pipeline_id)``
    is called once the pipeline is registered (or resumed), before its first training.

    >>> import tempfile
    >>> from train.models.classifiers import SoftmaxRegression
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(400, 2)).astype(np.float32)
    >>> y = np.repeat([0, 1], 200)
    >>> x[:, 0] += 4 * y
    >>> entries = [(x[i], int(y[i]), i, float(i)) for i in range(400)]  # (image, label, key, time)
    >>> stream, test = readers.from_sequence(entries), readers.from_sequence(entries[::4])
    >>> folder = tempfile.TemporaryDirectory()
    >>> records = run_pipeline(stream, "time:200", "gdumb:60", lambda seed: SoftmaxRegression(2, 2, lr=0.2, seed=seed),
    ...                        db=f"{folder.name}/runs.db", test=test, source=stream, task_seconds=200, min_steps=50)
    >>> [(r["trigger_id"], r["set_size"], r["classes"], r["tasks"]) for r in records]
    [(0, 60, {'0': 60}, [0]), (1, 60, {'0': 30, '1': 30}, [0, 1])]
    >>> records[-1]["average_accuracy"] > 0.9
    True
    """
    problems = check_ranks(nproc, max_restarts, batch_size, model, seed if isinstance(seed, int) else 0, rank_source,
                           launcher)
    if problems:
        raise PipelineConfigError(problems)
    pipeline = check_pipeline(stream, trigger, strategy, model, db=db, test=test, source=source, mapping=mapping,
                              batch_size=batch_size, passes=passes, min_steps=min_steps, seed=seed,
                              task_seconds=task_seconds, chunk=chunk, resume=resume, config=config,
                              keep_models=keep_models)
    owned = not isinstance(db, PipelineStore)
    store = (PipelineStore(db, create=resume is None) if owned  # (a resume never makes an empty store to refuse)
             else db)
    try:
        if resume is None:
            pipeline_id = store.register_pipeline(pipeline.config)
        else:
            pipeline_id = pipeline.check_resumable(store, resume)
        store.claim_pipeline(pipeline_id, stale_after=LEASE_S)
        work = None
        try:
            with _Lease(store, pipeline_id):  # (it beats while a torchrun job trains too)
                store.mark_abandoned(pipeline_id)
                ranks = None
                if nproc > 1:
                    work = os.fspath(work_dir) if work_dir is not None else tempfile.mkdtemp(prefix="readerkit-ranks-")
                    ranks = RankJobs(nproc=nproc, max_restarts=max_restarts, db=_address(db),
                                     rank_source=rank_source, work_dir=work, checkpoint_every=checkpoint_every,
                                     keep_logs=work_dir is not None, launcher=launcher)
                if on_start is not None:
                    on_start(pipeline_id)
                return _Run(pipeline, store, pipeline_id, on_trigger, event_handler, ranks).run()
        except BaseException as exc:  # a notebook's Ctrl-C still says which pipeline to resume
            exc.pipeline_id = pipeline_id
            raise
        finally:
            if work is not None and work_dir is None:
                shutil.rmtree(work, ignore_errors=True)
            with contextlib.suppress(Exception):
                store.release_pipeline(pipeline_id)
    finally:
        if owned:
            store.close()
