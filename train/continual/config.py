"""Checking a continual pipeline's configuration before it starts, all of it at once (``check_pipeline``).

As Modyn's supervisor validates a pipeline before running it, every argument
of ``train.run_pipeline`` is checked here and everything wrong is reported
in one ``PipelineConfigError``, one line per problem: a pipeline never
fails at its third trigger over a setting it was given at the start. The
result is a ``CheckedPipeline``: the arguments resolved (specs parsed, the source
found, the test split grouped by task) and the config the store keeps, which
a resumed pipeline must match.
"""
from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import readers
from readers.checks import check_reader, whole
from readers.continual.schema import as_json
from readers.continual.store import PipelineStore
from readers.errors import BadValue
from readers.graph import Node, describe
from readers.parents import as_indexed
from train.checkpoints.resume import Difference
from train.continual.strategies import Strategy, parse_strategy
from train.continual.stream_columns import entry_problem, split_by_task, stream_chunks
from train.continual.triggers import Trigger, parse_trigger
from train.driver import evaluate
from train.feeds import columns_of

__all__ = ["CheckedPipeline", "PipelineConfigError", "changed_lines", "check_pipeline"]

#: What a resumed pipeline must have as it had: the settings that decide its sets and trainings.
RESUMED_KEYS = ("data", "source", "test_data", "trigger", "strategy", "seed", "model", "mapping", "batch_size",
                "passes", "min_steps", "task_seconds", "user")


class PipelineConfigError(BadValue):
    """Everything wrong with a pipeline's configuration (``problems``, one line each), found before it starts.

    A refused resume also carries its ``changes`` as data: a
    ``train.checkpoints.resume.Difference`` per setting that differs (dotted
    for a key of the model's settings or of the data's fingerprint), whose
    lines (``changed_lines``) are its problems.

    >>> print(PipelineConfigError(["batch_size must be an int >= 1, got 0", "no test split"]))
    the pipeline's configuration has 2 problems:
      - batch_size must be an int >= 1, got 0
      - no test split
    """

    def __init__(self, problems: Sequence[str], advice: str = "", changes: Sequence[Difference] = (),
                 unknown: tuple[int, str] | None = None):
        self.problems, self.advice, self.changes = list(problems), advice, [Difference(*d) for d in changes]
        self.unknown = unknown  # (pipeline_id, why): a resume of a pipeline the store does not hold
        shown = self.problems + ([f"resume={unknown[0]}: {unknown[1]}"] if unknown else [])
        lines = "\n".join(f"  - {p}" for p in shown)
        count = "a problem" if len(shown) == 1 else f"{len(shown)} problems"
        super().__init__(f"the pipeline's configuration has {count}:\n{lines}" + (f"\n{advice}" if advice else ""))

    def __reduce__(self) -> tuple:  # the default passes only the message back to __init__
        return type(self), (self.problems, self.advice, self.changes, self.unknown)


@dataclass
class CheckedPipeline:
    """A checked pipeline: what ``run_pipeline`` runs (see ``check_pipeline``)."""

    stream: Any
    trigger: Trigger
    strategy: Strategy
    model: Callable[[int], Any]
    source: Any
    mapping: dict[str, Any]
    label_column: int
    feature_column: int | None
    first_entry: Any  # the source's first entry (a set's weight column comes after its columns)
    test_tasks: dict[int, Any]
    task_seconds: float | None
    batch_size: int
    passes: int
    min_steps: int
    seed: int
    chunk: int
    keep_models: int | None = 1
    config: dict[str, Any] = field(default_factory=dict)

    def check_resumable(self, store: Any, pipeline_id: Any) -> int:
        """``pipeline_id`` when the store holds it with these settings; else a ``PipelineConfigError``
        naming each setting that differs."""
        pipeline_id = whole(pipeline_id, "resume", "run_pipeline", 1, floats=False)
        try:
            stored = store.pipeline(pipeline_id)["config"]
        except LookupError as exc:
            raise PipelineConfigError([], "leave resume out to start a new pipeline",
                                      unknown=(pipeline_id, str(exc))) from None
        changes = [d for key in RESUMED_KEYS for d in _changes(key, stored.get(key), self.config.get(key))]
        if changes:
            raise PipelineConfigError(changed_lines(changes), f"pipeline {pipeline_id} in {store.path} ran with "
                                      "other settings: resume it with the ones it started with, or start a new "
                                      "pipeline", changes)
        return pipeline_id


def _changes(key: str, then: Any, now: Any) -> list[Difference]:
    """What a resume changes of the setting ``key``: a dict (the model's settings, the data's fingerprint) key by
    key, less the model's seed, which is the pipeline's own setting (compared once, as ``seed``).

    >>> _changes("model", {"n_inputs": 784, "lr": 0.003, "seed": 1}, {"n_inputs": 784, "lr": 0.01, "seed": 2})
    [Difference(setting='model.lr', then=0.003, now=0.01)]
    """
    if isinstance(then, dict) and isinstance(now, dict):
        return [Difference(f"{key}.{k}", then.get(k), now.get(k)) for k in {**then, **now}
                if then.get(k) != now.get(k) and not (key == "model" and k == "seed")]
    return [] if then == now else [Difference(key, then, now)]


def changed_lines(changes: Sequence[Difference], names: Mapping[str, str] | None = None) -> list[str]:
    """A line per setting a resume changes; the keys of a dict setting (``model.lr``) share their setting's line.
    ``names`` words a setting otherwise (the command line's options); a key it names gets a line of its own.

    >>> changes = [Difference("batch_size", 32, 16), Difference("model.lr", 0.003, 0.01),
    ...            Difference("model.hidden", 8, 16)]
    >>> changed_lines(changes)
    ['batch_size was 32, now 16', 'model: its lr was 0.003, now 0.01; its hidden was 8, now 16']
    >>> changed_lines(changes, {"batch_size": "--batch-size", "model.lr": "--lr"})
    ['--batch-size was 32, now 16', '--lr was 0.003, now 0.01', 'model: its hidden was 8, now 16']
    """
    names = names or {}
    lines: dict[str, list[str]] = {}  # a setting's line, or a dict setting's line: the parts said of its keys
    for setting, then, now in changes:
        key, dot, part = setting.partition(".")
        was = f"was {then!r:.80}, now {now!r:.80}"
        if dot and setting not in names:
            lines.setdefault(f"{names.get(key, key)}:", []).append(f"its {part} {was}")
        else:
            lines[f"{names.get(setting, setting)} {was}"] = []
    return [f"{line} {'; '.join(parts)}" if parts else line for line, parts in lines.items()]


def _number(problems: list[str], value: Any, name: str, low: int) -> int:
    try:
        return whole(value, name, "run_pipeline", low, floats=False)
    except (TypeError, ValueError) as exc:
        problems.append(str(exc))
        return low


def _parsed(problems: list[str], value: Any, kind: type, parse: Callable, what: str) -> Any:
    if isinstance(value, kind):
        return value
    if isinstance(value, type) and issubclass(value, kind):
        problems.append(f"{what} must be an instance of {value.__name__}, e.g. {value.__name__}(...), not the class")
        return None
    if not isinstance(value, str):
        problems.append(f"{what} must be a train.{kind.__name__} (subclass it to make your own) or its spec, got "
                        f"{type(value).__name__} {value!r:.60}")
        return None
    try:
        return parse(value)
    except (TypeError, ValueError) as exc:
        problems.append(f"{what}: {exc}")
        return None


def _first(reader: Any, role: str, problems: list[str]) -> Any:
    """The first entry of a pass of ``reader``, or None with a problem noted."""
    try:
        check_reader(reader, role)
        for entry in reader():
            return entry
        problems.append(f"{role} {describe(reader)} gave no entries")
    except Exception as exc:  # a reader that cannot even start: its own message, and where it came from
        problems.append(f"{role} {describe(reader)} failed to give its first entry: {type(exc).__name__}: {exc}")
    return None


def _mapping(problems: list[str], mapping: Any) -> tuple[dict[str, Any], int]:
    try:
        columns = columns_of(mapping)
    except (TypeError, ValueError) as exc:
        problems.append(f"mapping: {exc}")
        return {}, 0
    if not all(isinstance(c, int) for c in columns.values()):
        problems.append(f"mapping must name entry columns by number (entries are tuples), got {columns!r}")
    elif "label" not in columns:
        problems.append(f"mapping must name the label column 'label' (a pipeline's triggers and strategies count "
                        f"classes), got {list(columns)!r}")
    else:
        return columns, columns["label"]
    return {}, 0


def _source(problems: list[str], stream: Any, source: Any, entry: Any, label: int) -> tuple[Any, Any]:
    """The indexed reader the keys index, and its entry for the stream's first key (or Nones, noted)."""
    if source is None:
        source = stream.by_key() if isinstance(stream, Node) else None
        if source is None:
            problems.append(f"source: the stream {describe(stream)} has no by_key(); give source=, the indexed reader "
                            "its keys index: entry source[key] is the sample named key, with the mapped columns "
                            "(e.g. readers.from_arrays(images, labels), whose entry i is (images[i], labels[i]))")
            return None, None
    indexed = as_indexed(source)
    if indexed is None:
        problems.append(f"source must be an indexed reader (len and [i]) that the stream's keys index, got "
                        f"{describe(source)}")
        return None, None
    if entry is None:
        return indexed, None
    key = int(entry[-2])
    if key >= len(indexed):
        problems.append(f"source {indexed.title()} has {len(indexed)} entries, but the stream's first key is {key}: "
                        "give the reader the stream's keys index")
        return indexed, None
    found = indexed.at(key)
    if not isinstance(found, tuple) or label >= len(found) or np.ndim(found[label]) or \
            int(found[label]) != int(entry[label]):
        shown = found[label] if isinstance(found, tuple) and label < len(found) else found
        problems.append(f"source[{key}] gives label {shown!r:.40}, but the stream's entry of key {key} has label "
                        f"{entry[label]!r}: give as source the reader the stream's keys index")
    return indexed, found


def _scan(stream: Any, chunk: int, label: int, source: Any, problems: list[str]) -> int | None:
    """Read the stream's keys, times and labels once: note a key outside the source, a time going back or a
    negative label; return the key of an entry with the largest label (None when a problem was noted)."""
    before, position, largest, key_of = -math.inf, 0, -1, None
    for part in stream_chunks(stream, chunk, label):
        times = np.concatenate(([before], part.times))
        checks = ((part.keys < 0) | (part.keys >= len(source)), np.diff(times) < 0, part.labels < 0)
        for bad, what in zip(checks, ("key", "time", "label")):
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                shown = {"key": f"key {int(part.keys[i])}, but the source {source.title()} has {len(source)} "
                                "entries: keys index the source",
                         "time": f"time {float(part.times[i])!r} after {float(times[i])!r}: a timestamped stream's "
                                 "times never go back (sort it by time)",
                         "label": f"label {int(part.labels[i])}: labels are classes from 0"}[what]
                problems.append(f"stream: the entry at position {position + i} has {shown}")
                return None
        if len(part.labels) and part.labels.max() > largest:
            i = int(part.labels.argmax())
            largest, key_of = int(part.labels[i]), int(part.keys[i])
        before, position = float(part.times[-1]) if len(part.times) else before, position + len(part.keys)
    return key_of


def check_pipeline(stream: Any, trigger: Any, strategy: Any, model: Any, *, db: Any, test: Any, source: Any,
                   mapping: Mapping[str, Any] | Sequence[str], batch_size: Any, passes: Any, min_steps: Any,
                   seed: Any, task_seconds: Any, chunk: Any, resume: Any, config: Any,
                   keep_models: Any) -> CheckedPipeline:
    """Check every argument of ``run_pipeline`` (see there) and return the ``CheckedPipeline``; raise one
    ``PipelineConfigError`` listing all that is wrong. The stream is read once,
    its keys, times and labels only, so that a key outside the source, a time
    going back or a label the model has no class for is found now, not at a
    later trigger. A strategy object is copied: the pipeline informs its own.

    >>> entries = [(float(i), i % 2, i, float(i)) for i in range(4)]
    >>> check_pipeline(readers.from_sequence(entries), "time:0", "gdumb", None, db="runs.db", test=None,
    ...                source=None, mapping=["image", "label"], batch_size=0, passes=1, min_steps=10, seed=0,
    ...                task_seconds=None, chunk=64, resume=None, config=None, keep_models=1)
    Traceback (most recent call last):
    ...
    train.continual.config.PipelineConfigError: the pipeline's configuration has 5 problems:
      - run_pipeline: batch_size must be an int >= 1, got 0
      - trigger: bad trigger spec 'time:0': EveryT: seconds must be a finite number > 0, got 0.0; ...
      - strategy: unknown strategy spec 'gdumb'; ...
      - model must be called as model(seed) to make a new model, got None
      - source: the stream from_sequence(list of 4) has no by_key(); give source=, ...
    """
    problems: list[str] = []
    numbers = {name: _number(problems, value, name, low) for name, value, low in (
        ("batch_size", batch_size, 1), ("passes", passes, 1), ("min_steps", min_steps, 0), ("seed", seed, 0),
        ("chunk", chunk, 1))}
    if resume is not None:
        _number(problems, resume, "resume", 1)
    if keep_models is not None:
        keep_models = _number(problems, keep_models, "keep_models", 1)
    if not isinstance(db, (str, os.PathLike, PipelineStore)):
        problems.append(f"db must be a pipeline store's path or a readers.PipelineStore, got {type(db).__name__} "
                        f"{db!r:.60}")
    elif not isinstance(db, PipelineStore) and (os.path.isdir(db) or not os.fspath(db)):
        problems.append(f"db {os.fspath(db)!r} is {'a folder' if os.fspath(db) else 'empty'}: give the path of the "
                        "pipeline store's file, e.g. runs.db")
    if task_seconds is not None and not (isinstance(task_seconds, (int, float)) and not isinstance(task_seconds, bool)
                                         and math.isfinite(task_seconds) and task_seconds > 0):
        problems.append(f"task_seconds must be a number > 0 (the data time of one task) or None, got {task_seconds!r}")
    if config is not None and not isinstance(config, Mapping):
        problems.append(f"config must be a dict of the caller's settings, got {type(config).__name__}")
    elif config is not None:
        try:
            as_json(dict(config), "config", "run_pipeline")
        except (TypeError, ValueError) as exc:
            problems.append(str(exc))
    trigger = _parsed(problems, trigger, Trigger, parse_trigger, "trigger")
    strategy = _parsed(problems, strategy, Strategy, lambda s: parse_strategy(s, seed=numbers["seed"]), "strategy")
    if strategy is not None and strategy.informed:
        problems.append(f"strategy {strategy!r} was informed of {strategy.informed} samples already (by another "
                        "pipeline?): give a new one, or its spec")
    strategy = copy.deepcopy(strategy)  # the pipeline's own: the caller's object is left as it was
    columns, label = _mapping(problems, mapping)
    feature = columns.get("image") if trigger is not None and trigger.uses_features else None
    if trigger is not None and trigger.uses_features and feature is None:
        problems.append(f"trigger {trigger.spec} watches the features: the mapping must name them 'image'")
    built = None
    if not callable(model):
        problems.append(f"model must be called as model(seed) to make a new model, got {model!r:.60}")
    entry = _first(stream, "stream", problems)
    if entry is not None and columns and (why := entry_problem(entry, label, feature)):
        problems.append(f"stream {describe(stream)}: {why}")
        entry = None
    indexed, found = _source(problems, stream, source, entry if columns else None, label)
    tasks: dict[int, Any] = {}
    if test is not None:
        test_entry = _first(test, "test", problems)
        if test_entry is not None and columns and (why := entry_problem(test_entry, label, None)):
            problems.append(f"test {describe(test)}: {why}")
        elif test_entry is not None and not problems:
            tasks = split_by_task(test, task_seconds)
    samples = [] if found is None else [found]  # what the model is tried on: the first key's, the largest labels'
    if found is not None and not problems:
        largest = _scan(stream, numbers["chunk"], label, indexed, problems)
        samples += [indexed.at(largest)] if largest is not None else []
        samples += [max((e for r in tasks.values() for e in r()), key=lambda e: int(e[label]))] if tasks else []
    if callable(model) and samples and columns:
        try:
            built = model(numbers["seed"])
            missing = [m for m in ("step", "evaluate", "state_dict", "load_state_dict") if not hasattr(built, m)]
            if missing:
                problems.append(f"model(seed) gave {type(built).__name__}, which has no {', '.join(missing)}")
            else:  # a few samples through it: a model of the wrong size fails now, not after a training
                evaluate(built, readers.from_sequence(samples), columns, 1)
        except Exception as exc:
            problems.append(f"model: {type(exc).__name__}: {exc}")
    if problems:
        raise PipelineConfigError(problems)
    settings = getattr(built, "settings", None)
    saved = {"data": readers.fingerprint(stream), "stream": describe(stream), "test": describe(test),
             "source": readers.fingerprint(indexed), "test_data": None if test is None else readers.fingerprint(test),
             "trigger": trigger.spec, "strategy": strategy.spec, "model": settings() if callable(settings) else
             type(built).__name__, "mapping": columns, "task_seconds": task_seconds, "user": dict(config or {}),
             **{k: numbers[k] for k in ("seed", "batch_size", "passes", "min_steps")}}
    saved = json.loads(as_json(saved, "config", "run_pipeline"))  # as the store gives it back: tuples as lists
    return CheckedPipeline(stream, trigger, strategy, model, indexed, columns, label, feature, found, tasks,
                           task_seconds, numbers["batch_size"], numbers["passes"], numbers["min_steps"],
                           numbers["seed"], numbers["chunk"], keep_models, saved)
