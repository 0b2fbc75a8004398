"""Training by steps over rounds: every step reads its share of the step's global batch.

A language-model run is counted in steps, not passes. Step s reads the
samples ``[data_index(s), data_index(s) + batch_size(s))`` of the run
(``readers.tokenized.schedule.BatchSchedule``), sample p being entry ``p % N`` of pass
``p // N`` of the reader, so a shuffled reader gives every pass a fresh order.
The round's coordinator (``readers.tokenized.rounds.assign_batches``, seeded per step by
``round_seed``) splits that batch among the job's processes, and each trains
on its own share (``readers.tokenized.rounds.round_share``). The position is the step:
a checkpoint holds the model and the step, and a resume on any number of
processes starts at the same data index.
"""
from __future__ import annotations

import math
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

import batching
import readers
from readers.errors import BadValue
from readers.identity import differences
from readers.inspection import inspect_pipeline
from readers.tokenized.rounds import assign_batches, round_share
from readers.tokenized.schedule import BatchSchedule
from train.blas import AUTO, check_threads, limit_blas, threads_for
from train.checkpoints.files import (
    CheckpointError,
    rank_folder,
    remove_checkpoints,
    save_checkpoint,
)
from train.checkpoints.folders import START_OVER
from train.checkpoints.resume import ResumeRefused, claim, setting_differences, this_job
from train.checkpoints.settings import Checkpoints, checkpoints_of

__all__ = ["round_seed", "train_steps"]


def round_seed(seed: int, step: int) -> int:
    """The seed of step ``step``'s round: every process derives the same one from the run's seed alone.

    >>> round_seed(0, 5) == round_seed(0, 5) != round_seed(0, 6)
    True
    """
    return int(np.random.SeedSequence([int(seed), int(step)]).generate_state(1, np.uint64)[0])


def _window(reader: Any, schedule: BatchSchedule, step: int, seed: int, info: Any) -> np.ndarray | None:
    """This process's windows of step ``step``, as one array; None when the round leaves it out."""
    assignment = assign_batches(range(info.world_size), data_index=schedule.data_index(step),
                                global_batch_size=schedule.batch_size(step), seed=round_seed(seed, step))
    if info.rank not in assignment:
        return None
    share = round_share(reader, assignment, info.rank)
    return next(iter(batching.collated(batching.batch(share, len(share)))()))


class _Log:
    """Loss and speed summed over the steps since the last line: one record every ``every`` steps."""

    def __init__(self, every: int):
        self.every, self.loss, self.weight, self.tokens, self.seconds = every, 0.0, 0.0, 0, 0.0

    def add(self, metrics: Mapping[str, Any], seconds: float) -> None:
        weight = float(metrics.get("weight", 0.0))
        if weight:
            self.loss += float(metrics["loss"]) * weight
            self.weight += weight
        self.tokens += int(metrics.get("tokens", 0))
        self.seconds += seconds

    def record(self, steps_done: int) -> dict[str, Any]:
        loss = self.loss / self.weight if self.weight else math.nan
        record = {"step": steps_done, "loss": loss, "perplexity": math.exp(loss) if loss < 700 else math.inf,
                  "tokens_per_s": self.tokens / self.seconds if self.seconds > 0 else math.nan}
        self.loss = self.weight = self.seconds = 0.0
        self.tokens = 0
        return record


def _check(folder: str, meta: dict[str, Any], run: dict[str, Any], steps: int) -> None:
    """Refuse a checkpoint that is not of a step run, or was made with other settings or data."""
    path = f"{folder}/checkpoint.npz"
    for key in ("step", "history", *run):
        if key not in meta:
            raise CheckpointError(f"{path}: the checkpoint does not record {key!r} (made by a pass-based run, or "
                                  f"another version?); {START_OVER}")
    step = meta["step"]
    if isinstance(step, bool) or not isinstance(step, int) or step < 0 or not isinstance(meta["history"], list):
        raise CheckpointError(f"{path}: field 'step' must be a whole number >= 0 and 'history' a list, got "
                              f"{step!r}; the file was damaged or edited: {START_OVER}")
    settings = [d for key in run if key != "data" for d in setting_differences(key, meta[key], run[key])]
    data = differences(meta["data"], run["data"]) if isinstance(meta["data"], dict) else ["data: not recorded"]
    if settings or data:
        raise ResumeRefused(folder, settings, data)


def train_steps(reader: Any, *, model: Any, schedule: BatchSchedule, steps: int, seed: int = 0,
                on_log: Callable[[dict[str, Any]], None] | None = None, log_every: int = 10,
                checkpoints: Checkpoints | str | os.PathLike | None = None,
                blas_threads: int | str | None = AUTO) -> list[dict[str, Any]]:
    """Train ``model`` for ``steps`` steps of ``schedule`` over ``reader``; return the log records.

    ``reader`` is an indexed reader of windows (``readers.tokens``, usually
    shuffled: ``readers.shuffle(tokens, seed=...)``); ``model.step`` gets
    ``{"tokens": int32 (windows, seq_len + 1)}``. Every ``log_every`` steps
    (and after the last) a record ``{"step", "loss", "perplexity",
    "tokens_per_s"}`` goes to ``on_log`` and the returned list: ``step`` the
    steps done, ``loss`` the mean cross-entropy per token over those steps.

    With ``checkpoints`` (a ``train.Checkpoints``, or a folder's path) the
    model and the step are saved every ``checkpoints.every`` steps and at the
    end, with the folder guarded as ``train.train`` guards it (a lock;
    ``resume`` and ``overwrite``); a resume refuses another schedule, seed,
    model, ``config`` or data.

    numpy's BLAS runs ``blas_threads`` threads meanwhile, as in ``train.train``:
    by default (``"auto"``) one for the built-in NextTokenMLP, the library's
    own setting for a model of your own; a number for any model; None keeps
    the library's setting.

    >>> from readers.tokenized.schedule import BatchSchedule
    >>> from train.models.language import NextTokenMLP
    >>> text = np.frombuffer(b"abcabcabc" * 30, np.uint8).astype(np.int32)
    >>> data = readers.shuffle(readers.np_array(np.lib.stride_tricks.sliding_window_view(text, 9)[::8].copy()), seed=0)
    >>> log = train_steps(data, model=NextTokenMLP(256, context=2, embed=8, hidden=32, lr=0.01),
    ...                   schedule=BatchSchedule(4, 4, 0, 8), steps=60, log_every=30)
    >>> [r["step"] for r in log], log[-1]["loss"] < log[0]["loss"]
    ([30, 60], True)
    """
    for name, value in (("steps", steps), ("log_every", log_every)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BadValue(f"train_steps: {name} must be an int >= 1, got {value!r}")
    check_threads(blas_threads, "train_steps")
    blas_threads = threads_for(blas_threads, model)
    checkpoints = checkpoints_of(checkpoints, "train_steps")
    info = readers.worker_info()
    settings = getattr(model, "settings", None)
    run = {"schedule": [schedule.start, schedule.end, schedule.warmup_tokens, schedule.seq_len], "seed": int(seed),
           "model": {"class": type(model).__qualname__, **(settings() if callable(settings) else {})},
           "config": {} if checkpoints is None else checkpoints.config}
    if checkpoints is None:
        with limit_blas(blas_threads):
            return _loop(reader, model, schedule, steps, seed, info, on_log, log_every, None)
    with claim(checkpoints.folder, resume=checkpoints.resume, overwrite=checkpoints.overwrite, rank=info.rank,
               world_size=info.world_size) as found:
        run["data"] = inspect_pipeline(reader).fingerprint
        saved = _Saved(checkpoints.folder, info, run, checkpoints.every or steps, checkpoints.overwrite)
        if found is not None:
            state, meta = found
            _check(saved.folder, meta, run, steps)
            model.load_state_dict(state)
            saved.first, saved.history = meta["step"], meta["history"]
        with limit_blas(blas_threads):
            return _loop(reader, model, schedule, steps, seed, info, on_log, log_every, saved)


class _Saved:
    """A step run's checkpoints: the model, the steps done and the log so far."""

    def __init__(self, directory: str, info: Any, run: dict[str, Any], every: int, replace: bool):
        self.directory, self.info, self.run, self.every, self.replace = directory, info, run, every, replace
        self.folder = rank_folder(directory, info.rank, info.world_size)
        self.first, self.history = 0, []

    def save(self, model: Any, steps_done: int, schedule: BatchSchedule) -> None:
        meta = {"step": steps_done, "data_index": schedule.data_index(steps_done), "history": self.history,
                "job": this_job(self.info.world_size), **self.run}
        save_checkpoint(self.folder, model.state_dict(), meta)
        if self.replace:  # now that this run has a checkpoint, the ones it replaces go
            remove_checkpoints(self.directory, self.info.rank, self.info.world_size, keep_own=True)
            self.replace = False


def _loop(reader: Any, model: Any, schedule: BatchSchedule, steps: int, seed: int, info: Any,
          on_log: Callable[[dict[str, Any]], None] | None, log_every: int, saved: _Saved | None) -> list[dict]:
    history = saved.history if saved is not None else []
    log = _Log(log_every)
    tick = time.perf_counter()
    for step, windows in _windows_ahead(reader, schedule, saved.first if saved is not None else 0, steps, seed, info):
        if windows is not None:
            log.add(model.step({"tokens": windows}), 0.0)
        log.seconds += time.perf_counter() - tick
        done = step + 1
        if done % log_every == 0 or done == steps:
            record = log.record(done)
            history.append(record)
            if on_log is not None:
                on_log(record)
        if saved is not None and (done % saved.every == 0 or done == steps):
            saved.save(model, done, schedule)
        tick = time.perf_counter()
    return history


def _windows_ahead(reader: Any, schedule: BatchSchedule, first: int, steps: int, seed: int,
                   info: Any) -> Iterator[tuple[int, np.ndarray | None]]:
    """(step, windows) for steps ``first`` .. ``steps - 1``, the next step's read under way in a thread while
    the model trains on this one (a remote reader's requests travel meanwhile). The thread is a daemon that
    reads one step at a time: a run that stops does not wait for a read still under way (a remote one may
    be retrying for its whole deadline)."""
    asked: queue.Queue = queue.Queue()
    done: queue.Queue = queue.Queue()

    def work() -> None:
        while (step := asked.get()) is not None:
            try:
                done.put((_window(reader, schedule, step, seed, info), None))
            except BaseException as exc:  # handed to the training loop, which raises it
                done.put((None, exc))

    threading.Thread(target=work, name="readerkit-steps", daemon=True).start()
    try:
        if first < steps:
            asked.put(first)
        for step in range(first, steps):
            windows, failed = done.get()
            if failed is not None:
                raise failed
            if step + 1 < steps:
                asked.put(step + 1)
            yield step, windows
    finally:
        asked.put(None)
