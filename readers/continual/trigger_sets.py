"""A trigger's training set, read back as an indexed reader: ``trigger_set(db, pipeline_id, trigger_id, source=...)``.

The pipeline stores each trigger's set in a ``readers.PipelineStore`` as keys
(the samples' keys in the timestamped stream: indices into the reader they
name, for Split-MNIST the MNIST split, ``stream.by_key()``) and weights; any process reads one back over the
same source, and it is then a reader like any other: shuffle, shard, batch,
resume. Entry i is ``source[keys[i]]``, so a batch over it is gathered with
the source's own vectorised takes.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from readers.continual.store import PipelineStore
from readers.digests import SHORT, hasher
from readers.errors import BadType, BadValue
from readers.graph import describe
from readers.ops.maps import append_column
from readers.parents import as_indexed
from readers.stage import IndexedReader

__all__ = ["TriggerSet", "trigger_set"]


class TriggerSet(IndexedReader):
    """The entries of ``source`` that a trigger's set names, in the set's order (see ``trigger_set``).

    >>> from readers import from_sequence
    >>> r = TriggerSet(from_sequence("abcd"), 1, 0, np.array([3, 0, 3]), np.ones(3, np.float32), False)
    >>> list(r()), r.sample_ids(np.arange(3)).tolist()
    (['d', 'a', 'd'], [3, 0, 3])
    """

    name = "trigger_set"

    def __init__(self, source: Any, pipeline_id: int, trigger_id: int, keys: np.ndarray, weights: np.ndarray,
                 with_weights: bool):
        super().__init__(source)
        self.pipeline_id, self.trigger_id, self.with_weights = pipeline_id, trigger_id, with_weights
        self.keys, self.weights = keys, weights
        h = hasher()
        h.update(keys.astype("<i8").tobytes())
        if with_weights:  # unused weights are no part of the data
            h.update(weights.astype("<f4").tobytes())
        self._digest = h.hexdigest()

    def __len__(self) -> int:
        return len(self.keys)

    def _get(self, i: int) -> Any:
        entry = self.parents[0].at(int(self.keys[i]))
        return append_column(entry, self.weights[i]) if self.with_weights else entry

    def gather(self, indices: np.ndarray) -> Any:
        entries = self.parents[0].gather(self.keys[indices])
        return map(append_column, entries, self.weights[indices]) if self.with_weights else entries

    def gather_columns(self, indices: np.ndarray) -> tuple | np.ndarray | None:
        columns = self.parents[0].gather_columns(self.keys[indices])
        if columns is None or not self.with_weights:
            return columns
        if isinstance(columns, np.ndarray):
            columns = (columns,)  # a single value per entry: with its weight, entries are pairs
        return columns + (self.weights[indices],) if isinstance(columns, tuple) else None

    def sample_ids(self, indices: np.ndarray) -> np.ndarray:
        return self.parents[0].sample_ids(self.keys[indices])

    def _options(self) -> str:
        weights = ", weights=True" if self.with_weights else ""
        return f"pipeline={self.pipeline_id}, trigger={self.trigger_id}, {len(self.keys)} keys{weights}"

    def identity(self) -> str:
        """The set by pipeline, trigger and a digest of its keys (a fingerprint asks sources alone for digests).

        >>> from readers import from_sequence
        >>> r = TriggerSet(from_sequence("ab"), 1, 0, np.array([1]), np.ones(1, np.float32), False)
        >>> r.identity()
        'trigger_set(pipeline=1, trigger=0, 1 keys ...)'
        """
        return f"{self.name}({self._options().replace(' keys', f' keys {self._digest[:SHORT]}', 1)})"

    def digest(self) -> str:
        """A digest of the whole set: its keys, and its weights when they are a column.

        >>> from readers import from_sequence
        >>> a, b = (TriggerSet(from_sequence("ab"), 1, 0, np.array([k]), np.ones(1, np.float32), False) for k in (0, 1))
        >>> a.digest() == b.digest()
        False
        """
        return self._digest


def trigger_set(db: str | os.PathLike | PipelineStore, pipeline_id: int, trigger_id: int, *, source: Any,
                weights: bool = False) -> TriggerSet:
    """A trigger's training set as an indexed reader over ``source``: entry i is ``source[keys[i]]``.

    ``db`` is the pipeline store's file or ``postgresql://`` URL (opened,
    read and closed here, never made) or an open ``PipelineStore``. ``source`` is the indexed reader the
    pipeline's keys index: the reader a stream's keys name (for Split-MNIST,
    the MNIST split: ``stream.by_key()``), not the stream itself. With
    ``weights=True`` each entry gains its weight (a float32) as a last column.
    The set is read once, here, and kept in the reader: it pickles with its
    keys, and a set stored afterwards changes nothing (a set is written once).

    >>> import os, tempfile
    >>> from readers import from_arrays
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "pipelines.db")
    >>> with PipelineStore(path) as store:
    ...     p = store.register_pipeline({"strategy": "replay"})
    ...     store.add_trigger(p, 0, [2, 0], [1.0, 0.5], position=3)
    >>> source = from_arrays(np.array([10, 11, 12]), np.array([0, 1, 0]))
    >>> r = trigger_set(path, p, 0, source=source, weights=True)
    >>> [tuple(float(v) for v in entry) for entry in r()]
    [(12.0, 0.0, 1.0), (10.0, 0.0, 0.5)]
    >>> trigger_set(path, p, 1, source=source)
    Traceback (most recent call last):
    ...
    readers.errors.NotFound: trigger: pipeline 1 has no trigger 1 in .../pipelines.db (its triggers: 0)
    """
    indexed = as_indexed(source)
    if indexed is None:
        raise BadType(f"trigger_set: source must be an indexed reader (len and [i]) whose indices the keys are, "
                      f"e.g. readers.from_arrays(x, y); got {describe(source)}")
    if isinstance(db, PipelineStore):
        stored = db.trigger(pipeline_id, trigger_id)
    elif isinstance(db, (str, os.PathLike)):
        with PipelineStore(db, create=False) as store:
            stored = store.trigger(pipeline_id, trigger_id)
    else:
        raise BadType(f"trigger_set: db must be a pipeline store's path or a PipelineStore, got {type(db).__name__}")
    n = len(indexed)
    if len(stored.keys) and stored.keys.max() >= n:
        raise BadValue(f"trigger_set: trigger {trigger_id} of pipeline {pipeline_id} holds key "
                       f"{int(stored.keys.max())}, but the source {indexed.title()} has {n} entries: give the reader "
                       "the stream's keys name (for Split-MNIST the MNIST split, stream.by_key()), not the stream")
    return TriggerSet(indexed, int(pipeline_id), int(trigger_id), stored.keys, stored.weights, bool(weights))
