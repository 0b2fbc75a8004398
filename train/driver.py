"""train(): passes over a provider, minibatches through a mapping, steps of a model, events.

The position in the data is the pass and the number of entries consumed in
it. A checkpoint saves it with the model after every pass and every N steps;
resuming restores both and skips the consumed entries (for an indexed
pipeline by index arithmetic, for a stream by reading past them), so every
training entry of the interrupted pass is trained on exactly once.
"""
from __future__ import annotations

import math
import operator
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np  # noqa: F401 (the doctests use np)

import batching
import readers
from batching.collate import Padded
from readers.allocator import tune_allocator
from readers.checks import check_reader, whole
from readers.position import check_resumable, start_of
from readers.registry import find_model
from readers.sharding import check_equalize, is_sharded
from train.checkpoint import (
    CheckpointError,
    load_for_rank,
    rank_folder,
    save_checkpoint,
)
from train.events import BeginIteration, BeginPass, EndIteration, EndPass, TestResult

__all__ = ["columns_of", "evaluate", "feeds", "train"]

EventHandler = Callable[[Any], None]


def columns_of(mapping: Mapping[str, Any] | Sequence[str]) -> dict[str, Any]:
    """A mapping as ``{input name: column}``; a list of names maps column i to name i.

    >>> columns_of(["image", "label"])
    {'image': 0, 'label': 1}
    >>> columns_of({"label": 1, "image": 0, "again": 0})
    {'label': 1, 'image': 0, 'again': 0}
    >>> columns_of("image")
    Traceback (most recent call last):
    ...
    TypeError: mapping must be a dict {name: column} or a list of names, got str 'image'
    """
    if isinstance(mapping, Mapping):
        out = dict(mapping)
    elif isinstance(mapping, Sequence) and not isinstance(mapping, (str, bytes)):
        out = {name: i for i, name in enumerate(mapping)}
        if len(out) != len(mapping):
            raise ValueError(f"mapping lists a name twice: {list(mapping)!r}; give each input one column")
    else:
        raise TypeError(f"mapping must be a dict {{name: column}} or a list of names, got {type(mapping).__name__} {mapping!r}")
    if not out:
        raise ValueError("mapping is empty; name at least one input, e.g. ['image', 'label']")
    for name, column in out.items():
        if not isinstance(name, str):
            raise TypeError(f"mapping: input names must be str, got {name!r}")
        if not isinstance(column, (str, bool)):
            try:  # numpy integers are column numbers too
                out[name] = operator.index(column)
            except TypeError:
                pass
    return out


def _pick(columns: Any, column: Any, name: str) -> Any:
    if isinstance(columns, tuple):
        if isinstance(column, bool) or not isinstance(column, int) or not -len(columns) <= column < len(columns):
            raise ValueError(
                f"mapping sends column {column!r} to input {name!r}, but entries have {len(columns)} "
                f"columns (0..{len(columns) - 1}); fix the mapping"
            )
        return columns[column]
    if isinstance(columns, dict):
        if column == -1 and column not in columns:  # the last column, as for tuples: where a pad weight goes
            return columns[next(reversed(columns))]
        if column not in columns:
            raise ValueError(f"mapping sends column {column!r} to input {name!r}, but entries have keys {sorted(columns)}; fix the mapping")
        return columns[column]
    if column != 0:
        raise ValueError(f"mapping sends column {column!r} to input {name!r}, but entries are single values (column 0 only)")
    return columns


def feeds(batches: Iterator, mapping: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Collated minibatches as ``{input name: array}`` dicts, through ``mapping``.

    A padded column feeds ``name`` (the data), ``name_lengths`` and ``name_mask``.

    >>> batch = (np.zeros((2, 3)), np.array([1, 0]))
    >>> feed = next(feeds(iter([batch]), {"image": 0, "label": 1}))
    >>> sorted(feed), feed["label"].tolist()
    (['image', 'label'], [1, 0])
    """
    for columns in batches:
        feed: dict[str, Any] = {}
        for name, column in mapping.items():
            value = _pick(columns, column, name)
            if isinstance(value, Padded):
                feed[name], feed[f"{name}_lengths"], feed[f"{name}_mask"] = value.data, value.lengths, value.mask
            else:
                feed[name] = value
        yield feed


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
    >>> from train.models import SoftmaxRegression
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


def _resolve_model(model: Any, seed: int, mapping: dict[str, Any], checkpoints: bool) -> Any:
    if isinstance(model, str):
        model = find_model(model)(seed=seed)
    needed = ("step", "evaluate") + (("state_dict", "load_state_dict") if checkpoints else ())
    for method in needed:
        if not callable(getattr(model, method, None)):
            raise TypeError(f"model {type(model).__name__} has no {method}() method; a model needs step and "
                            "evaluate, and state_dict and load_state_dict for checkpoints")
    declared = getattr(model, "inputs", None)
    if declared is not None:  # a model that declares its inputs: a misspelt name must not be ignored
        known = set(declared) | set(getattr(model, "optional_inputs", ()))
        unknown = sorted(set(mapping) - known)
        if unknown:
            raise ValueError(f"mapping names {unknown}, which {type(model).__name__} does not take (its inputs: "
                             f"{sorted(known)}); fix the mapping")
    return model


def _metrics(value: Any, model: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"{type(model).__name__}.step() returned {type(value).__name__}; it must return a dict of metrics")
    return value


def _check_resume(directory: str, meta: dict[str, Any], run: dict[str, Any]) -> None:
    """Refuse a checkpoint whose run differs in anything that decides the order of samples."""
    for key in ("pass", "cursor", "reader_state", "totals", "history", *run):
        if key not in meta:
            raise CheckpointError(f"{directory}: the checkpoint does not record {key!r}; delete it to start afresh")
    for key, value in run.items():
        if meta[key] != value:
            raise CheckpointError(
                f"{directory}: the checkpoint was made with {key}={meta[key]!r}, not {value!r}; resume with the "
                "same setting, or train into another checkpoint folder")
    if run["length"] is not None and meta["cursor"] > run["length"]:
        raise CheckpointError(f"{directory}: the checkpoint is at entry {meta['cursor']} of a pass, past the "
                              f"provider's {run['length']} entries")


def _distribute(provider: Any, columns: dict[str, Any], model: Any, shard: bool,
                equalize: str | None) -> tuple[Any, dict[str, Any]]:
    """Shard the provider over the job's workers when there are several and it is not sharded yet."""
    if not shard or is_sharded(provider) or readers.worker_info().total == 1:
        return provider, columns
    provider = readers.shard(provider, equalize=equalize)
    if equalize != "pad":
        return provider, columns
    if "weight" in columns:
        raise ValueError("train: the mapping already feeds 'weight', and equalize='pad' adds a weight column of "
                         "its own; shard the provider yourself (readers.shard(...)) or use equalize='drop'")
    declared = getattr(model, "inputs", None)
    if declared is not None and "weight" not in (*declared, *getattr(model, "optional_inputs", ())):
        raise ValueError(f"train: equalize='pad' marks padding with weight 0, but {type(model).__name__} takes "
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
    checkpoint_dir: str | None = None,
    resume: bool = False,
    checkpoint_every: int | None = None,
    drop_last: bool = False,
    test_batch_size: int = 1024,
    pad_value: Any = 0,
    config: Mapping[str, Any] | None = None,
    shard: bool = True,
    equalize: str | None = "pad",
) -> list[dict[str, Any]]:
    """Train ``model`` for ``passes`` passes over ``provider``; return one record per pass.

    ``provider()`` is called once per pass (readerkit readers are told the pass
    number, so a seeded shuffle gives pass k the same order on every run). Each
    minibatch of ``batch_size`` entries is collated and fed to ``model.step``
    as ``{name: array}`` through ``mapping``. ``model`` is an object with
    step/evaluate/state_dict/load_state_dict, or a registered name ("mlp")
    built with ``seed``. With ``checkpoint_dir`` the model and the position are
    saved after every pass and every ``checkpoint_every`` steps; ``resume``
    continues from the last checkpoint there, and refuses one made with another
    batch size, seed, drop_last, provider, length or ``config`` (a JSON-able
    dict of the caller's own settings, such as the learning rate), since any of
    them would break "every sample once per pass".

    Before the first pass it calls ``readers.tune_allocator()``, which tunes
    glibc malloc for the process so that per-batch arrays reuse heap pages
    (``READERKIT_MALLOC=system`` opts out).

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
    >>> from train.models import SoftmaxRegression
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(512, 4)).astype(np.float32)
    >>> y = (x[:, 0] > 0).astype(np.int64)
    >>> data = readers.shuffle(readers.from_arrays(x, y), seed=0)
    >>> history = train(data, ["image", "label"], 32, 3, model=SoftmaxRegression(4, 2, lr=0.05))
    >>> [sorted(history[-1])[:3], history[-1]["train_accuracy"] > 0.9]
    [['pass', 'samples_per_s', 'seconds'], True]
    """
    check_reader(provider)
    check_equalize(equalize, "train")
    columns = columns_of(mapping)
    batch_size = whole(batch_size, "batch_size", "train", 1, floats=False)
    passes = whole(passes, "passes", "train", floats=False)
    if checkpoint_every is not None:
        checkpoint_every = whole(checkpoint_every, "checkpoint_every", "train", 1, floats=False)
    if resume and checkpoint_dir is None:
        raise ValueError("train: resume=True needs checkpoint_dir, the folder to resume from")
    model = _resolve_model(model, seed, columns, checkpoint_dir is not None)
    emit = event_handler or (lambda event: None)
    run = {"batch_size": batch_size, "seed": seed, "drop_last": bool(drop_last), "provider": repr(provider),
           "length": None if is_sharded(provider) else _length(provider), "config": dict(config or {})}
    reader, columns = _distribute(provider, columns, model, shard, equalize)
    minibatches = _minibatches(reader, batch_size, drop_last, pad_value)
    if checkpoint_dir is not None:
        check_resumable(minibatches)  # before any work, not at the first checkpoint

    first_pass, reader_state, saved_totals, history = 0, None, None, []
    if checkpoint_dir is not None:
        info = readers.worker_info()
        found = load_for_rank(checkpoint_dir, info.rank, info.world_size) if resume else None
        checkpoint_dir = rank_folder(checkpoint_dir, info.rank, info.world_size)
    if resume and found is not None:
        state, meta = found
        _check_resume(checkpoint_dir, meta, run)
        model.load_state_dict(state)
        first_pass, reader_state = meta["pass"], meta["reader_state"]
        saved_totals, history = meta["totals"], meta["history"]

    def checkpoint(state: dict[str, Any], totals: dict[str, float] | None) -> None:
        if checkpoint_dir is not None:
            meta = {"pass": state["pass"], "cursor": state["cursor"], "reader_state": state, "totals": totals,
                    "history": history, **run}
            save_checkpoint(checkpoint_dir, model.state_dict(), meta)

    length = _length(reader)
    tune_allocator()  # per-batch arrays then reuse heap pages instead of faulting in fresh ones (readers.allocator)
    for pass_id in range(first_pass, passes):
        if reader_state is not None and reader_state["pass"] == pass_id:
            minibatches.set_state(reader_state)  # the pass resumes where the checkpoint was taken
        else:
            minibatches.set_pass(pass_id)  # the outermost stage's pass reaches every stage below
        reader_state = None
        total = None
        if length is not None:
            total = length // batch_size if drop_last else -(-length // batch_size)
        totals = _Totals(saved_totals)
        saved_totals = None
        emit(BeginPass(pass_id, total, totals.sums["batches"]))
        tick = time.perf_counter()
        batches = minibatches()
        for feed in feeds(batches, columns):
            batch_id = totals.sums["batches"]
            emit(BeginIteration(pass_id, batch_id))
            metrics = _metrics(model.step(feed), model)
            totals.add(metrics, _entries_in(feed))
            emit(EndIteration(pass_id, batch_id, metrics))
            if checkpoint_every and (batch_id + 1) % checkpoint_every == 0:
                now = time.perf_counter()
                totals.sums["seconds"] += now - tick
                tick = now
                checkpoint(batches.get_state(), totals.sums)
        totals.sums["seconds"] += time.perf_counter() - tick
        summary = totals.summary()
        emit(EndPass(pass_id, summary))
        record = {"pass": pass_id, "train_loss": summary["loss"], "train_accuracy": summary["accuracy"],
                  "test_loss": None, "test_accuracy": None, "samples_per_s": summary["samples_per_s"],
                  "seconds": summary["seconds"]}
        if test_provider is not None:
            tested = evaluate(model, test_provider, columns, test_batch_size, pad_value=pad_value)
            emit(TestResult(pass_id, tested))
            record["test_loss"], record["test_accuracy"] = tested["loss"], tested["accuracy"]
        history.append(record)
        checkpoint(start_of(minibatches, pass_id + 1), None)
    return history
