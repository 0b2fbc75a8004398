"""What a continual pipeline reads of a timestamped stream: its columns, chunk by chunk, and its test tasks.

A timestamped stream's entries end in ``(key, time)`` (see
``readers.sources.split_mnist``); the pipeline also reads each entry's label (the
column the mapping names ``"label"``) and, for a trigger that watches the
features, the column it names ``"image"``. ``stream_chunks`` gives those as
arrays, through an indexed stream's vectorised ``gather_columns`` when it has
one and entry by entry otherwise. ``split_by_task`` groups a timestamped test
split into tasks by data time, so each trigger is evaluated on the tasks its
stream has reached.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

import readers
from readers.parents import as_indexed

__all__ = ["Chunk", "entry_problem", "seen_tasks", "split_by_task", "stream_chunks"]


class Chunk(NamedTuple):
    """Consecutive entries of a stream as arrays: keys int64, times float64, labels int64, features (or None)."""

    keys: np.ndarray
    times: np.ndarray
    labels: np.ndarray
    features: np.ndarray | None


def entry_problem(entry: Any, label: int, feature: int | None) -> str | None:
    """What is wrong with a timestamped stream's entry for a pipeline, or None: it must be a tuple ending in an
    int key and a number time, with an int label at column ``label`` (and an array at ``feature`` when given).

    >>> entry_problem((np.zeros(3), 1, 7, 0.5), 1, 0) is None
    True
    >>> entry_problem((np.zeros(3), 1), 1, None)
    'its entries must end in the columns (key, time), after the mapped ones: got 2 columns, so columns 0-1 would be the key and time'
    """
    if not isinstance(entry, tuple):
        return f"its entries must be tuples ending in (key, time), got a {type(entry).__name__}: {entry!r:.80}"
    if len(entry) < 3 or max(label, feature or 0) >= len(entry) - 2:
        return (f"its entries must end in the columns (key, time), after the mapped ones: got {len(entry)} columns, "
                f"so columns {len(entry) - 2}-{len(entry) - 1} would be the key and time")
    key, time = entry[-2], entry[-1]
    if isinstance(key, (bool, np.bool_)) or not isinstance(key, (int, np.integer)) or key < 0:
        return f"an entry's key (its next-to-last column) must be an int >= 0 naming the sample, got {key!r:.60}"
    if isinstance(time, (bool, np.bool_)) or not isinstance(time, (int, float, np.number)) or not math.isfinite(time):
        return f"an entry's time (its last column) must be a finite number of seconds, got {time!r:.60}"
    value = entry[label]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) and not (
            isinstance(value, np.ndarray) and value.shape == () and value.dtype.kind in "iu"):
        return f"an entry's label (column {label}) must be an int class, got {value!r:.60}"
    if feature is not None and np.asarray(entry[feature]).dtype.kind not in "iuf":
        return f"an entry's features (column {feature}) must be numbers, got {entry[feature]!r:.60}"
    return None


def _as_chunk(entries: list, label: int, feature: int | None) -> Chunk:
    keys = np.fromiter((e[-2] for e in entries), np.int64, len(entries))
    times = np.fromiter((e[-1] for e in entries), np.float64, len(entries))
    labels = np.fromiter((e[label] for e in entries), np.int64, len(entries))
    features = None
    if feature is not None:
        features = np.stack([np.asarray(e[feature], np.float64).ravel() for e in entries])
    return Chunk(keys, times, labels, features)


def _columns_chunk(columns: Any, label: int, feature: int | None) -> Chunk | None:
    """A chunk from ``gather_columns``' arrays, or None when they are not one array per column."""
    if not isinstance(columns, tuple) or len(columns) < 3 or max(label, feature or 0) >= len(columns) - 2:
        return None
    keys, times, labels = columns[-2], columns[-1], columns[label]
    if any(not isinstance(c, np.ndarray) or c.ndim != 1 for c in (keys, times, labels)) or \
            keys.dtype.kind not in "iu" or labels.dtype.kind not in "iu" or times.dtype.kind not in "iuf":
        return None
    features = None
    if feature is not None:
        features = np.asarray(columns[feature], np.float64).reshape(len(keys), -1)
    return Chunk(keys.astype(np.int64), times.astype(np.float64), labels.astype(np.int64), features)


def stream_chunks(stream: Any, size: int, label: int, feature: int | None = None) -> Iterator[Chunk]:
    """A pass of ``stream`` in chunks of ``size`` entries: their keys, times, labels (column ``label``) and, when
    ``feature`` is a column, its values flattened to one float64 row per entry.

    >>> stream = readers.from_sequence([(np.full(2, k, np.float32), k % 2, k, float(k)) for k in range(5)])
    >>> [(c.keys.tolist(), c.labels.tolist(), c.features[:, 0].tolist()) for c in stream_chunks(stream, 3, 1, 0)]
    [([0, 1, 2], [0, 1, 0], [0.0, 1.0, 2.0]), ([3, 4], [1, 0], [3.0, 4.0])]
    """
    indexed = as_indexed(stream)
    if indexed is not None:
        n = len(indexed)
        for start in range(0, n, size):
            indices = np.arange(start, min(start + size, n))
            chunk = _columns_chunk(indexed.gather_columns(indices), label, feature)
            yield chunk if chunk is not None else _as_chunk(list(indexed.gather(indices)), label, feature)
        return
    entries = iter(stream())
    while block := list(itertools.islice(entries, size)):
        yield _as_chunk(block, label, feature)


def split_by_task(test: Any, task_seconds: float | None) -> dict[int, Any]:
    """A timestamped test split as one reader per task: task ``t`` holds the entries whose time is in
    ``[t * task_seconds, (t + 1) * task_seconds)`` (all in task 0 when ``task_seconds`` is None).

    The entries are read once, here (a test split is small), in the split's order.

    >>> test = readers.from_sequence([("a", 0, 0, 10.0), ("b", 1, 1, 100.0), ("c", 1, 2, 150.0)])
    >>> {t: [e[0] for e in r()] for t, r in split_by_task(test, 100.0).items()}
    {0: ['a'], 1: ['b', 'c']}
    """
    grouped: dict[int, list] = {}
    for entry in test():
        time = float(entry[-1])
        grouped.setdefault(0 if task_seconds is None else math.floor(time / task_seconds), []).append(entry)
    return {task: readers.from_sequence(entries) for task, entries in sorted(grouped.items())}


def seen_tasks(tasks: dict[int, Any], time: float, task_seconds: float | None) -> list[int]:
    """The tasks of ``split_by_task`` that a stream has reached at data time ``time``: those starting at or before it.

    >>> seen_tasks({0: None, 1: None, 2: None}, 86400.0 + 5, 86400.0)
    [0, 1]
    """
    if task_seconds is None:
        return sorted(tasks)
    return [t for t in sorted(tasks) if t * task_seconds <= time]

