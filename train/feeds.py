"""From a reader's entries to a model's inputs: the mapping, the feeds, and what the first entries tell.

``columns_of`` reads a mapping, ``feeds`` turns collated minibatches into
``{input name: array}`` dicts. Before training, ``check_unbatched`` refuses a
provider that is batched already, ``infer_sizes`` reads the input size and
the class count of a built-in model from the first entries, and
``warn_unscaled`` warns once when an input looks like raw pixels.
"""
from __future__ import annotations

import operator
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from batching.bucket import BucketByLength
from batching.collate import Padded
from batching.minibatch import Batched
from readers.pipeline import describe, walk

__all__ = ["check_unbatched", "columns_of", "feeds", "infer_sizes", "warn_unscaled"]

#: Entries read to find the classes of a built-in model, and the largest |value| an input is expected to have.
SCAN = 10_000
FAR = 10.0


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


def check_unbatched(provider: Any, where: str = "train") -> None:
    """Refuse a provider whose entries are minibatches already: train batches entries itself.

    >>> import readers, batching
    >>> check_unbatched(readers.from_sequence([1, 2]))
    >>> check_unbatched(batching.batch(readers.from_sequence([1, 2]), 2))
    Traceback (most recent call last):
    ...
    TypeError: train: the provider is batched already (it holds batch(batch_size=2, drop_last=False)); give it the reader of single entries and pass the batch size to train
    """
    for stage in walk(provider):
        if isinstance(stage, (Batched, BucketByLength)):
            raise TypeError(f"{where}: the provider is batched already (it holds {describe(stage)}); give it the "
                            f"reader of single entries and pass the batch size to {where}")


def _label_of(entry: Any, column: Any) -> Any:
    return entry[column] if isinstance(entry, (tuple, dict)) else entry


def infer_sizes(reader: Any, columns: Mapping[str, Any], image: str = "image",
                label: str = "label") -> tuple[int, int, str]:
    """(input size, class count, a line saying where they came from) of ``reader``'s entries.

    The input size is the number of values in the first entry's ``image``
    column; the class count is one more than the largest label among the
    first 10,000 entries (at least 2).

    >>> import readers
    >>> x, y = np.zeros((6, 2, 3), np.float32), np.array([0, 4, 1, 1, 2, 0])
    >>> infer_sizes(readers.from_arrays(x, y), {"image": 0, "label": 1})
    (6, 5, 'image float32[2, 3]: 6 inputs; labels 0..4 in all 6 entries: 5 classes')
    """
    missing = [name for name in (image, label) if name not in columns]
    if missing:
        raise ValueError(f"the mapping {dict(columns)!r} names no {' or '.join(map(repr, missing))} input; a "
                         f"built-in model reads {image!r} and {label!r}")
    first, top, seen = None, -1, 0
    for seen, entry in enumerate(reader(), 1):
        if first is None:
            first = entry
        value = _label_of(entry, columns[label])
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) and not (
                isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iu"):
            raise TypeError(f"entry {seen - 1}: the {label!r} column holds {value!r} ({type(value).__name__}); a "
                            "classifier needs integer labels 0..classes-1")
        top = max(top, int(value))
        if seen >= SCAN:
            break
    if first is None:
        raise ValueError("the reader gave no entries; check its data")
    x = np.asarray(_pick(first, columns[image], image))
    if x.dtype.kind not in "fiub" or x.size == 0:
        raise TypeError(f"the {image!r} column holds {x.dtype} of shape {list(x.shape)}; a model needs numbers")
    where = f"in all {seen} entries" if seen < SCAN else f"in the first {SCAN:,} entries"
    shown = (f"{image} {x.dtype}{list(x.shape)}: {x.size} inputs; labels 0..{top} {where}: "
             f"{max(top + 1, 2)} classes")
    return x.size, max(top + 1, 2), shown


def warn_unscaled(feed: Mapping[str, Any], skip: Sequence[str] = ("label", "weight")) -> bool:
    """Warn (RuntimeWarning) when an input holds raw values far outside [0, 1], such as uint8 pixels.

    Returns whether it warned; the driver calls it on the first minibatch.

    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_unscaled({"image": np.array([[0, 255]], np.uint8)})
    True
    >>> print(caught[0].message)
    input 'image' holds uint8 values up to 255, far outside [0, 1]: models train poorly on unscaled values. Scale it in the reader, e.g. readers.map_readers(lambda x, y: (x / np.float32(255), y), reader)
    """
    for name, value in feed.items():
        a = np.asarray(value) if not isinstance(value, Padded) else value.data
        # one value per entry (labels, weights, targets) is no image: only (batch, features...) inputs
        if name in skip or a.ndim < 2 or a.dtype.kind not in "fiu" or a.size == 0:
            continue
        top = float(np.abs(a).max())
        if top > FAR:
            warnings.warn(f"input {name!r} holds {a.dtype} values up to {top:g}, far outside [0, 1]: models "
                          "train poorly on unscaled values. Scale it in the reader, e.g. "
                          "readers.map_readers(lambda x, y: (x / np.float32(255), y), reader)",
                          RuntimeWarning, stacklevel=3)
            return True
    return False
