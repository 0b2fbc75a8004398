"""train(): passes over a provider, minibatches through a mapping, steps of a model, events.

The position in the data is the pass and the number of entries consumed in
it. A checkpoint saves it with the model after every pass and every N steps;
resuming restores both and skips the consumed entries (for an indexed
pipeline by index arithmetic, for a stream by reading past them), so every
training entry of the interrupted pass is trained on exactly once.
"""
from __future__ import annotations

import functools
import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

import batching
import readers
from readers.allocator import tune_allocator
from readers.checks import check_reader, whole
from readers.errors import BadType, BadValue
from readers.graph import describe
from readers.inspection import Inspection, inspect_pipeline
from readers.ops.sharding import check_equalize
from readers.plugins.registry import find_model
from readers.position import start_of
from train.blas import AUTO, check_threads, limit_blas, threads_for
from train.checkpoints.files import (
    CheckpointError,
    rank_folder,
    remove_checkpoints,
    save_checkpoint,
)
from train.checkpoints.resume import check_meta, claim, this_job
from train.checkpoints.settings import Checkpoints, checkpoints_of
from train.events import BeginIteration, BeginPass, EndIteration, EndPass, TestResult
from train.feeds import columns_of, feeds, infer_sizes, warn_unscaled

__all__ = ["evaluate", "train"]

EventHandler = Callable[[Any], None]


def _entries_in(feed: dict[str, Any]) -> int:
    return len(next(iter(feed.values())))


class _Totals:
    """Weighted sums of a pass's metrics, small enough to live in a checkpoint."""

    def __init__(self, saved: dict[str, float] | None = None):
        self.sums = dict(saved or {"loss": 0.0, "accuracy": 0.0, "weight": 0.0, "samples": 0, "batches": 0, "seconds": 0.0})

    def add(self, metrics: dict[str, Any], entries: int) -> None:
        weight = float(metrics.get("weight", entries))
        self.sums["loss"] += float(metrics.get("loss", math.nan)) * weight
        self.sums["accuracy"] += float(metrics.get("accuracy", math.nan)) * weight
        self.sums["weight"] += weight
        self.sums["samples"] += int(metrics.get("count", entries))
        self.sums["batches"] += 1

    def summary(self) -> dict[str, float]:
        w = self.sums["weight"] or math.nan
        seconds = self.sums["seconds"]
        return {
            "loss": self.sums["loss"] / w,
            "accuracy": self.sums["accuracy"] / w,
            "samples": self.sums["samples"],
            "seconds": seconds,
            "samples_per_s": self.sums["samples"] / seconds if seconds > 0 else math.nan,
        }


def _minibatches(reader: Any, batch_size: int, drop_last: bool, pad_value: Any) -> Any:
    return batching.collated(batching.batch(reader, batch_size, drop_last), pad_value=pad_value)


def evaluate(model: Any, provider: Any, mapping: Mapping[str, Any] | Sequence[str], batch_size: int = 1024,
             *, pad_value: Any = 0) -> dict[str, float]:
    """Run ``model.evaluate`` over every minibatch of ``provider``; weighted pass metrics.

    >>> import readers
    >>> from train.models.classifiers import SoftmaxRegression
    >>> x, y = np.zeros((10, 3), np.float32), np.zeros(10, np.int64)
    >>> metrics = evaluate(SoftmaxRegression(3, 2), readers.from_arrays(x, y), ["image", "label"], 4)
    >>> metrics["samples"], round(metrics["accuracy"], 2)
    (10, 1.0)
    """
    totals = _Totals()
    start = time.perf_counter()
    for feed in feeds(iter(_minibatches(provider, batch_size, False, pad_value)()), columns_of(mapping)):
        totals.add(_metrics(model.evaluate(feed), model), _entries_in(feed))
    totals.sums["seconds"] = time.perf_counter() - start
    return totals.summary()


def _resolve_model(model: Any, seed: int, mapping: dict[str, Any], checkpoints: bool, provider: Any) -> Any:
    if isinstance(model, str):  # a built-in model is built for the data: sizes from its first entries
        n_inputs, n_classes, _ = infer_sizes(provider, mapping)
        model = find_model(model)(n_inputs, n_classes=n_classes, seed=seed)
    needed = ("step", "evaluate") + (("state_dict", "load_state_dict") if checkpoints else ())
    for method in needed:
        if not callable(getattr(model, method, None)):
            raise BadType(f"model {type(model).__name__} has no {method}() method; a model needs step and "
                          "evaluate, and state_dict and load_state_dict for checkpoints")
    declared = getattr(model, "inputs", None)
    if declared is not None:  # a model that declares its inputs: a misspelt name must not be ignored
        known = set(declared) | set(getattr(model, "optional_inputs", ()))
        unknown = sorted(set(mapping) - known)
        if unknown:
            raise BadValue(f"mapping names {unknown}, which {type(model).__name__} does not take (its inputs: "
                           f"{sorted(known)}); fix the mapping")
    return model


def _metrics(value: Any, model: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise BadType(f"{type(model).__name__}.step() returned {type(value).__name__}; it must return a dict of metrics")
    return value


def _distribute(provider: Any, facts: Inspection, columns: dict[str, Any], model: Any, shard: bool,
                equalize: str | None) -> tuple[Any, dict[str, Any]]:
    """Shard the provider over the job's workers when there are several and it is not sharded yet."""
    if not shard or facts.sharded or readers.worker_info().total == 1:
        return provider, columns
    provider = readers.shard(provider, equalize=equalize)
    if equalize != "pad":
        return provider, columns
    if "weight" in columns:
        raise BadValue("train: the mapping already feeds 'weight', and equalize='pad' adds a weight column of "
                       "its own; shard the provider yourself (readers.shard(...)) or use equalize='drop'")
    declared = getattr(model, "inputs", None)
    if declared is not None and "weight" not in (*declared, *getattr(model, "optional_inputs", ())):
        raise BadValue(f"train: equalize='pad' marks padding with weight 0, but {type(model).__name__} takes "
                       "no 'weight' input; use equalize='drop' or a model that takes per-entry weights")
    return provider, {**columns, "weight": -1}  # the pad column is each entry's last


def _length(reader: Any) -> int | None:
    """Entries in a pass when the reader knows (indexed readers and the stages that keep a length)."""
    try:
        return len(reader)
    except TypeError:
        return None


def train(
    provider: Any,
    mapping: Mapping[str, Any] | Sequence[str],
    batch_size: int,
    passes: int,
    *,
    model: Any,
    event_handler: EventHandler | None = None,
    test_provider: Any = None,
    seed: int = 0,
    checkpoints: Checkpoints | str | os.PathLike | None = None,
    drop_last: bool = False,
    test_batch_size: int = 1024,
    pad_value: Any = 0,
    shard: bool = True,
    equalize: str | None = "pad",
    blas_threads: int | str | None = AUTO,
) -> list[dict[str, Any]]:
    """Train ``model`` for ``passes`` passes over ``provider``; return one record per pass.

    ``provider()`` is called once per pass (readerkit readers are told the pass
    number, so a seeded shuffle gives pass k the same order on every run). Each
    minibatch of ``batch_size`` entries is collated and fed to ``model.step``
    as ``{name: array}`` through ``mapping``. ``model`` is an object with
    step/evaluate/state_dict/load_state_dict, or a registered name ("mlp")
    built with ``seed`` for the data: its input size from the first entry's
    ``image``, its classes from the largest ``label`` (``train.feeds.infer_sizes``:
    of 10,000 entries spread over an indexed provider, else of its first 10,000).
    An input far outside [0, 1] (raw uint8 pixels) draws one RuntimeWarning.

    With ``checkpoints`` (a ``train.Checkpoints``, or a folder's path for its
    defaults) the model and the position are saved after every pass and every
    ``checkpoints.every`` steps. The folder is locked for the run (a second
    run into it fails at once). A new run into a folder that holds a
    checkpoint is refused unless ``overwrite`` (which replaces it at the first
    save); ``resume`` continues from the last checkpoint there (refusing a
    folder without one), and refuses one made with another batch size, seed,
    drop_last, model (its class, and what its ``settings()`` returns: the
    built-in models' sizes and learning rate), ``config`` (a JSON-able dict of
    the caller's own settings) or data, since any of them would break "every
    sample once per pass" or the run's results. The data is known by
    ``readers.fingerprint``: the pipeline, the length and the sources'
    content, not the paths it was read from, so the same files in another
    folder resume.

    Before the first pass it calls ``readers.tune_allocator()``, which tunes
    glibc malloc for the process so that per-batch arrays reuse heap pages
    (``READERKIT_MALLOC=system`` opts out).

    The run's numpy BLAS uses ``blas_threads`` threads (``train.blas``). The
    default, ``"auto"``, gives readerkit's built-in models (SoftmaxRegression,
    MLP, NextTokenMLP) one thread, the fastest and steadiest for their small
    matrix products (a thread per core made a run 2 to 3 times slower on a
    busy machine), and leaves any other model with the library's own setting
    (a thread per core unless ``OPENBLAS_NUM_THREADS`` says otherwise), as
    ``None`` does for every model. A number sets that many for any model. The
    process's setting is put back when train() returns.

    Checkpoints hold the reader's state (``{"pass", "cursor", "seed"}``, see
    ``readers.position``), so a run resumes on another number of processes and
    still trains every sample of the interrupted pass exactly once.

    Under a launcher with several processes (torchrun, SLURM, MPI: see
    ``readers.worker_info``) and ``shard`` true, a provider that has no
    ``readers.shard`` of its own is sharded over the processes. The default
    ``equalize="pad"`` gives every process ceil(N / processes) entries, the
    padding marked with weight 0 (fed to the model's ``weight`` input, which
    the built-in models take): every sample is still trained on exactly once
    per pass, and every process takes the same number of steps, so a model
    that averages gradients across processes never waits on one that ran out.
    ``"drop"`` costs no padding but leaves up to processes - 1 samples out of
    each pass; ``None`` keeps every sample, unpadded, with uneven step counts.

    >>> import readers
    >>> from train.models.classifiers import SoftmaxRegression
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(512, 4)).astype(np.float32)
    >>> y = (x[:, 0] > 0).astype(np.int64)
    >>> data = readers.shuffle(readers.from_arrays(x, y), seed=0)
    >>> history = train(data, ["image", "label"], 32, 3, model=SoftmaxRegression(4, 2, lr=0.05))
    >>> [sorted(history[-1])[:3], history[-1]["train_accuracy"] > 0.9]
    [['pass', 'samples_per_s', 'seconds'], True]
    """
    check_reader(provider)
    facts = inspect_pipeline(provider)  # every later check reads these facts, not the pipeline
    if facts.batched:
        raise BadType(f"train: the provider is batched already (it holds {facts.batched}); give it the reader of "
                      "single entries and pass the batch size to train")
    check_equalize(equalize, "train")
    check_threads(blas_threads, "train")
    columns = columns_of(mapping)
    batch_size = whole(batch_size, "batch_size", "train", 1, floats=False)
    passes = whole(passes, "passes", "train", floats=False)
    checkpoints = checkpoints_of(checkpoints, "train")
    model = _resolve_model(model, seed, columns, checkpoints is not None, provider)
    blas_threads = threads_for(blas_threads, model)
    test = None
    if test_provider is not None:  # the test data is not sharded: no pad weights in its mapping
        test = functools.partial(evaluate, model, test_provider, dict(columns), test_batch_size, pad_value=pad_value)
    reader, columns = _distribute(provider, facts, columns, model, shard, equalize)
    minibatches = _minibatches(reader, batch_size, drop_last, pad_value)
    length = _length(reader)
    batches_in = None if length is None else length // batch_size if drop_last else -(-length // batch_size)
    passes_of = functools.partial(_passes, model, minibatches, columns, passes, batches_in, event_handler, test)

    def loop(saved: _Saved | None) -> list[dict[str, Any]]:
        with limit_blas(blas_threads):
            return passes_of(saved)

    if checkpoints is None:
        return loop(None)
    _check_checkpointable(facts)  # before any work, not at the first checkpoint
    settings = _as_json({"batch_size": batch_size, "seed": seed, "drop_last": bool(drop_last),
                         "model": _model_settings(model), "config": checkpoints.config})
    info = readers.worker_info()
    with claim(checkpoints.folder, resume=checkpoints.resume, overwrite=checkpoints.overwrite, rank=info.rank,
               world_size=info.world_size) as found:
        saved = _Saved(checkpoints.folder, info, model, {**settings, "data": _data_of(facts)}, checkpoints.every,
                       replace=checkpoints.overwrite)
        if found is not None:
            saved.restore(*found)
        return loop(saved)


def _check_checkpointable(facts: Inspection) -> None:
    """Refuse checkpoints of a pipeline that cannot say where it is, or that another run would not repeat."""
    if facts.unresumable:
        raise BadValue(f"cannot save or restore a position of {describe(facts.reader)}: {facts.unresumable}")
    if facts.unrepeatable:
        raise BadValue(f"train: the provider's {facts.unrepeatable}, so a resume could not continue its order; "
                       "give it a seed (e.g. seed=0) to checkpoint the run")


def _data_of(facts: Inspection) -> dict[str, Any]:
    """What a checkpoint records of the data: the fingerprint, taken under the folder's lock (it may read a
    source's first entries), less a shard's length, which depends on the number of processes."""
    data = dict(facts.fingerprint)
    if facts.sharded:
        data["length"] = None
    return data


def _as_json(run: dict[str, Any]) -> dict[str, Any]:
    """The run's settings as a checkpoint holds them (tuples as lists, numpy numbers as numbers), so that
    the same settings compare equal on a resume; a value JSON cannot hold is an error now, not at a save."""
    def plain(value: Any) -> Any:
        if isinstance(value, np.generic):
            return value.item()
        raise BadType(f"train: the run's settings (Checkpoints' config=, the model's settings()) must be JSON data; "
                      f"{value!r} ({type(value).__name__}) is not: give numbers, strings, lists or dicts")
    return json.loads(json.dumps(run, default=plain))


def _model_settings(model: Any) -> dict[str, Any]:
    """The model's class and, when it says (``settings()``), what it was built with: a resume compares them."""
    settings = getattr(model, "settings", None)
    return {"class": type(model).__qualname__, **(settings() if callable(settings) else {})}


class _Saved:
    """A run's checkpoints: the position, the pass totals and history saved with the model.

    A run that replaces (``overwrite``) removes the checkpoints it replaces at
    its first save, not before: a run that fails first leaves them.
    """

    def __init__(self, directory: str, info: Any, model: Any, run: dict[str, Any], every: int | None, *,
                 replace: bool):
        self.directory, self.rank, self.world_size = directory, info.rank, info.world_size
        self.folder = rank_folder(directory, info.rank, info.world_size)
        self.model, self.run, self.every, self.replace = model, run, every, replace
        self.first_pass, self.reader_state, self.totals, self.history = 0, None, None, []

    def restore(self, state: dict[str, Any], meta: dict[str, Any]) -> None:
        check_meta(self.folder, meta, self.run)
        try:
            self.model.load_state_dict(state)
        except (KeyError, ValueError, TypeError) as exc:
            raise CheckpointError(f"{self.folder}: the checkpoint's model state does not fit "
                                  f"{type(self.model).__name__} ({exc}); resume with the model it was made "
                                  "with") from None
        self.first_pass, self.reader_state = meta["pass"], meta["reader_state"]
        self.totals, self.history = meta["totals"], meta["history"]

    def save(self, state: dict[str, Any], totals: dict[str, float] | None) -> None:
        meta = {"pass": state["pass"], "cursor": state["cursor"], "reader_state": state, "totals": totals,
                "history": self.history, "job": this_job(self.world_size), **self.run}
        save_checkpoint(self.folder, self.model.state_dict(), meta)
        if self.replace:  # now that this run has a checkpoint, the ones it replaces go
            remove_checkpoints(self.directory, self.rank, self.world_size, keep_own=True)
            self.replace = False


def _start(minibatches: Any, pass_id: int, saved: _Saved | None) -> None:
    if saved is not None and saved.reader_state is not None and saved.reader_state["pass"] == pass_id:
        try:  # the pass resumes where the checkpoint was taken
            minibatches.set_state(saved.reader_state)
        except ValueError as exc:
            raise CheckpointError(f"{saved.folder}: field 'reader_state' does not fit this pipeline ({exc})") from None
    else:
        minibatches.set_pass(pass_id)  # the outermost stage's pass reaches every stage below
    if saved is not None:
        saved.reader_state = None


def _passes(model: Any, minibatches: Any, columns: dict[str, Any], passes: int, batches_in: int | None,
            event_handler: EventHandler | None, test: Callable[[], dict[str, float]] | None,
            saved: _Saved | None) -> list[dict[str, Any]]:
    """The training loop: ``passes`` passes of ``minibatches``, checkpointed through ``saved``."""
    emit = event_handler or (lambda event: None)
    history = saved.history if saved is not None else []
    every = saved.every if saved is not None else None
    tune_allocator()  # per-batch arrays then reuse heap pages instead of faulting in fresh ones (readers.allocator)
    first = True
    for pass_id in range(saved.first_pass if saved is not None else 0, passes):
        _start(minibatches, pass_id, saved)
        totals = _Totals(saved.totals if saved is not None else None)
        if saved is not None:
            saved.totals = None
        emit(BeginPass(pass_id, batches_in, totals.sums["batches"]))
        tick = time.perf_counter()
        batches = minibatches()
        for feed in feeds(batches, columns):
            if first:  # raw pixels are seen in the first minibatch or not at all
                warn_unscaled(feed)
                first = False
            batch_id = totals.sums["batches"]
            emit(BeginIteration(pass_id, batch_id))
            metrics = _metrics(model.step(feed), model)
            totals.add(metrics, _entries_in(feed))
            emit(EndIteration(pass_id, batch_id, metrics))
            if every and (batch_id + 1) % every == 0:
                now = time.perf_counter()
                totals.sums["seconds"] += now - tick
                tick = now
                saved.save(batches.get_state(), totals.sums)
        totals.sums["seconds"] += time.perf_counter() - tick
        summary = totals.summary()
        emit(EndPass(pass_id, summary))
        record = {"pass": pass_id, "train_loss": summary["loss"], "train_accuracy": summary["accuracy"],
                  "test_loss": None, "test_accuracy": None, "samples_per_s": summary["samples_per_s"],
                  "seconds": summary["seconds"]}
        if test is not None:
            tested = test()
            emit(TestResult(pass_id, tested))
            record["test_loss"], record["test_accuracy"] = tested["loss"], tested["accuracy"]
        history.append(record)
        if saved is not None:
            saved.save(start_of(minibatches, pass_id + 1), None)
    return history
