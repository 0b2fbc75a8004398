"""Module-level functions and jobs for tests/readers/caching/test_cached.py: what worker and spawned processes run.

A spawned process imports what it runs, so the cached functions, and the job
that two processes run at once over one cache folder, live here rather than in
the test file. ``feature`` notes each call it makes in ``COMPUTED`` (a global,
which a function's digest sees only by name, so counting does not change it).
"""
from __future__ import annotations

import json
import time
from typing import Any

import numpy as np

import readers

__all__ = ["COMPUTED", "SLEEP", "feature", "features_of", "pass_at_once", "share_folder", "shuffled", "slow_feature",
           "source"]

#: The sample of each call of ``feature`` in this process, in order.
COMPUTED: list[int] = []
#: Seconds ``slow_feature`` takes per sample.
SLEEP = 0.01


def source(n: int) -> Any:
    """Samples 0..n-1 as an indexed reader of 1-tuples: sample i's value is its ID."""
    return readers.from_arrays(np.arange(n))


def features_of(entry: tuple) -> np.ndarray:
    """A sample's "hidden features": a small int64 array made from its value."""
    i = int(entry[0])
    return np.full(3, i * i, dtype=np.int64)


def feature(entry: tuple) -> np.ndarray:
    """``features_of``, each call noted in ``COMPUTED``."""
    COMPUTED.append(int(entry[0]))
    return features_of(entry)


def slow_feature(entry: tuple) -> np.ndarray:
    """``feature`` that takes ``SLEEP`` seconds, so that two processes computing at once overlap."""
    time.sleep(SLEEP)
    return feature(entry)


def shuffled(directory: Any, n: int, seed: int, func: Any = feature, **options: Any) -> Any:
    """``shuffle(cached(source(n), func, directory=directory, **options), seed=seed)``."""
    return readers.shuffle(readers.cached(source(n), func, directory=directory, **options), seed=seed)


def share_folder(directory: str, n: int, seed: int, passes: int, gate: Any, out: str) -> None:
    """One of several processes over one cache folder: wait for the others, run ``passes`` passes of
    ``shuffled(directory, n, seed, slow_feature)``, and write to ``out`` (JSON) the first column of every entry
    of each pass and what this process computed."""
    r = shuffled(directory, n, seed, slow_feature)
    gate.wait(60)
    seen = [[int(v[0]) for v in r()] for _ in range(passes)]
    with open(out, "w") as f:
        json.dump({"seen": seen, "computed": COMPUTED}, f)


def pass_at_once(directory: str, n: int, gate: Any) -> None:
    """Wait for the other processes, then read a pass of ``shuffled(directory, n, 0)``: all open the folder at once."""
    r = shuffled(directory, n, 0)
    gate.wait(60)
    for _ in r():
        pass
