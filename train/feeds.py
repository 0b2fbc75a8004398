"""From a reader's entries to a model's inputs: the mapping, the feeds, and what the entries tell.

``columns_of`` reads a mapping, ``feeds`` turns collated minibatches into
``{input name: array}`` dicts. Before training, ``infer_sizes`` reads the
input size and the class count of a built-in model from up to 10,000
entries, and ``warn_unscaled`` warns once when an input looks unscaled (raw
pixels).
"""
from __future__ import annotations

import inspect
import itertools
import operator
import os
import reprlib
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from batching.collate import Padded
from readers.errors import BadType, BadValue
from readers.plans import CHUNK
from readers.stage import Stage

__all__ = ["columns_of", "feeds", "infer_sizes", "user_stacklevel", "warn_unscaled"]

#: Entries read to find the classes of a built-in model, and the largest |value| an input is expected to have.
SCAN = 10_000
FAR = 10.0
_HERE = os.path.dirname(os.path.abspath(__file__))


def columns_of(mapping: Mapping[str, Any] | Sequence[str]) -> dict[str, Any]:
    """A mapping as ``{input name: column}``; a list of names maps column i to name i.

    >>> columns_of(["image", "label"])
    {'image': 0, 'label': 1}
    >>> columns_of({"label": 1, "image": 0, "again": 0})
    {'label': 1, 'image': 0, 'again': 0}
    >>> columns_of("image")
    Traceback (most recent call last):
    ...
    readers.errors.BadType: mapping must be a dict {name: column} or a list of names, got str 'image'
    """
    if isinstance(mapping, Mapping):
        out = dict(mapping)
    elif isinstance(mapping, Sequence) and not isinstance(mapping, (str, bytes)):
        out = {name: i for i, name in enumerate(mapping)}
        if len(out) != len(mapping):
            raise BadValue(f"mapping lists a name twice: {list(mapping)!r}; give each input one column")
    else:
        raise BadType(f"mapping must be a dict {{name: column}} or a list of names, got {type(mapping).__name__} {mapping!r}")
    if not out:
        raise BadValue("mapping is empty; name at least one input, e.g. ['image', 'label']")
    for name, column in out.items():
        if not isinstance(name, str):
            raise BadType(f"mapping: input names must be str, got {name!r}")
        if not isinstance(column, (str, bool)):
            try:  # numpy integers are column numbers too
                out[name] = operator.index(column)
            except TypeError:
                pass
    return out


def _pick(columns: Any, column: Any, name: str) -> Any:
    if isinstance(columns, tuple):
        if isinstance(column, bool) or not isinstance(column, int) or not -len(columns) <= column < len(columns):
            raise BadValue(
                f"mapping sends column {column!r} to input {name!r}, but entries have {len(columns)} "
                f"columns (0..{len(columns) - 1}); fix the mapping"
            )
        return columns[column]
    if isinstance(columns, dict):
        if column == -1 and column not in columns:  # the last column, as for tuples: where a pad weight goes
            return columns[next(reversed(columns))]
        if column not in columns:
            raise BadValue(f"mapping sends column {column!r} to input {name!r}, but entries have keys {sorted(columns)}; fix the mapping")
        return columns[column]
    if column != 0:
        raise BadValue(f"mapping sends column {column!r} to input {name!r}, but entries are single values (column 0 only)")
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


def _shown(value: Any) -> str:
    """A label as a user would recognise it: its value, short, and its type."""
    if isinstance(value, np.ndarray):
        return f"{reprlib.repr(value.tolist())} (a {value.dtype} array of shape {value.shape})"
    if isinstance(value, np.generic):
        return f"{value.item()!r} ({value.dtype})"
    return f"{reprlib.repr(value)} ({type(value).__name__})"


def _label_int(value: Any, index: int, name: str) -> int:
    """Entry ``index``'s label as an int >= 0, or an error that says what it holds and what is needed."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    need = "a classifier needs one int label per entry, 0..classes-1"
    if isinstance(value, (bool, np.bool_)):
        raise BadType(f"entry {index}: the {name!r} column holds {_shown(value)}; {need}: convert it in "
                      "the reader, e.g. readers.map_readers(lambda e: (e[0], int(e[1])), reader)")
    if isinstance(value, (list, tuple, np.ndarray)):
        raise BadType(f"entry {index}: the {name!r} column holds {_shown(value)}, not one int; {need}: for "
                      "one-hot labels give the index of the 1, e.g. "
                      "readers.map_readers(lambda e: (e[0], int(np.argmax(e[1]))), reader)")
    if not isinstance(value, (int, np.integer)):
        raise BadType(f"entry {index}: the {name!r} column holds {_shown(value)}; a classifier needs integer "
                      "labels 0..classes-1")
    if value < 0:
        raise BadValue(f"entry {index}: the {name!r} column holds the label {int(value)}; labels must be "
                       "0..classes-1: renumber them in the reader (e.g. -1/1 labels as 0/1)")
    return int(value)


def _check_shape(x: Any, index: int, first: tuple[int, tuple], name: str) -> None:
    """Refuse entry ``index``'s image unless it has the shape of entry ``first[0]``'s, ``first[1]``."""
    shape = np.shape(x)
    if shape != first[1]:
        raise BadValue(f"entry {index}: the {name!r} column has shape {list(shape)}, but entry {first[0]}'s has "
                       f"{list(first[1])}; a model needs one shape for every entry: resize or pad the images "
                       "in the reader")


def _scan_entries(entries: Iterable[tuple[int, Any]], columns: Mapping[str, Any], image: str,
                  label: str) -> tuple[Any, int, int]:
    """(the first image, the largest label, entries read) of ``(index, entry)`` pairs, checking each."""
    first, top, seen = None, -1, 0
    for index, entry in entries:
        x = _pick(entry, columns[image], image)
        if first is None:
            first = (index, np.shape(x), x)
        _check_shape(x, index, first[:2], image)
        top = max(top, _label_int(_pick(entry, columns[label], label), index, label))
        seen += 1
    return None if first is None else first[2], top, seen


def _scan_columns(reader: Any, indices: np.ndarray, columns: Mapping[str, Any], image: str,
                  label: str) -> tuple[Any, int] | None:
    """(the first image, the largest label) from ``gather_columns`` chunk by chunk, or None without it."""
    first, top = None, -1
    for lo in range(0, len(indices), CHUNK):
        chunk = indices[lo:lo + CHUNK]
        gathered = reader.gather_columns(chunk)
        if gathered is None:
            return None
        xs, ys = np.asarray(_pick(gathered, columns[image], image)), np.asarray(_pick(gathered, columns[label], label))
        if first is None:
            first = (int(chunk[0]), np.shape(xs[0]), xs[0])
        if xs.dtype == object:  # collated columns have one shape; an object column holds one array per entry
            for index, x in zip(chunk.tolist(), xs):
                _check_shape(x, index, first[:2], image)
        if ys.dtype.kind in "iu" and ys.ndim == 1:
            below = ys < 0
            if below.any():
                k = int(below.argmax())
                _label_int(ys[k], int(chunk[k]), label)
            top = max(top, int(ys.max()))
        else:  # not one int per entry: the per-entry check names the first entry at fault
            top = max(top, *(_label_int(y, index, label) for index, y in zip(chunk.tolist(), ys)))
    return None if first is None else first[2], top


def _spread(n: int) -> np.ndarray:
    """Indices of at most SCAN entries of n, evenly spaced from the first to the last."""
    return np.arange(n, dtype=np.int64) if n <= SCAN else np.linspace(0, n - 1, SCAN).round().astype(np.int64)


def infer_sizes(reader: Any, columns: Mapping[str, Any], image: str = "image",
                label: str = "label") -> tuple[int, int, str]:
    """(input size, class count, a line saying where they came from) of ``reader``'s entries.

    The input size is the number of values in the first entry's ``image``
    column; the class count is one more than the largest label (at least 2).
    An indexed reader's labels are read at 10,000 entries spread evenly over
    it (all of them when it has fewer), so labels sorted by class still
    count every class; a stream's are read from its first 10,000 entries.
    Labels must be ints >= 0 and images of one shape: an error names the
    first entry (its index in the reader) that is not.

    >>> import readers
    >>> x, y = np.zeros((6, 2, 3), np.float32), np.array([0, 4, 1, 1, 2, 0])
    >>> infer_sizes(readers.from_arrays(x, y), {"image": 0, "label": 1})
    (6, 5, 'image float32[2, 3]: 6 inputs; labels 0..4 in all 6 entries: 5 classes')
    >>> x, y = np.zeros((60_000, 4), np.float32), np.repeat(np.arange(10), 6_000)
    >>> infer_sizes(readers.from_arrays(x, y), ["image", "label"])[2]
    'image float32[4]: 4 inputs; labels 0..9 in 10,000 entries spread over all 60,000: 10 classes'
    >>> infer_sizes(readers.from_sequence([(x[0], 1), (x[1], -1)]), ["image", "label"])
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: entry 1: the 'label' column holds the label -1; labels must be 0..classes-1: renumber them in the reader (e.g. -1/1 labels as 0/1)
    """
    columns = columns_of(columns)
    missing = [name for name in (image, label) if name not in columns]
    if missing:
        raise BadValue(f"the mapping {dict(columns)!r} names no {' or '.join(map(repr, missing))} input; a "
                       f"built-in model reads {image!r} and {label!r}")
    if isinstance(reader, Stage) and reader.access == "index":  # random access: read all of it, spread out
        n = len(reader)
        indices = _spread(n)
        found = _scan_columns(reader, indices, columns, image, label)
        if found is None:  # entries that are not columnar: one at a time
            found = _scan_entries(((i, reader.at(i)) for i in indices.tolist()), columns, image, label)[:2]
        first, top = found
        where = f"in all {n:,} entries" if n <= SCAN else f"in {SCAN:,} entries spread over all {n:,}"
    else:
        first, top, seen = _scan_entries(itertools.islice(enumerate(reader()), SCAN), columns, image, label)
        where = f"in all {seen:,} entries" if seen < SCAN else f"in the first {SCAN:,} entries"
    if first is None:
        raise BadValue("the reader gave no entries; check its data")
    x = np.asarray(first)
    if x.dtype.kind not in "fiub" or x.size == 0:
        raise BadType(f"the {image!r} column holds {x.dtype} of shape {list(x.shape)}; a model needs numbers")
    shown = (f"{image} {x.dtype}{list(x.shape)}: {x.size} inputs; labels 0..{top} {where}: "
             f"{max(top + 1, 2)} classes")
    return x.size, max(top + 1, 2), shown


def user_stacklevel() -> int:
    """The stacklevel, for a warning raised by our caller, of the first frame outside the train package.

    That is the user's line: their call of ``train(...)`` however deep the
    driver calls the code that warns, or their own call of it.

    >>> def warns():
    ...     return user_stacklevel()
    >>> warns()  # called from outside the train package: the caller's own line
    1
    """
    here = inspect.currentframe()
    frame, level = here.f_back if here is not None else None, 1  # our caller, the function that warns: stacklevel 1
    if frame is None:  # an interpreter without frames: the caller's caller
        return 2
    while frame.f_back is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _HERE:
        frame, level = frame.f_back, level + 1
    return level


def warn_unscaled(feed: Mapping[str, Any], skip: Sequence[str] = ("label", "weight"), *,
                  stacklevel: int | None = None) -> bool:
    """Warn (RuntimeWarning) when an input holds raw values far outside [0, 1], such as uint8 pixels.

    Returns whether it warned; the driver calls it on the first minibatch.
    The advice fits the values: divide 8-bit pixels (uint8, or 0..255) by
    255, standardise anything else. The warning points at the first line
    outside the train package (the user's call of ``train``), or
    ``stacklevel`` levels up from here when given.

    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_unscaled({"image": np.array([[0, 255]], np.uint8)})
    ...     warn_unscaled({"image": np.array([[-900.0, 1200.0]])})
    True
    True
    >>> print(caught[0].message)
    input 'image' holds uint8 values up to 255, far outside [0, 1]: models train poorly on unscaled values. These look like 8-bit pixels: divide them by 255 in the reader, e.g. readers.map_readers(lambda e: (e[0] / np.float32(255), e[1]), reader)
    >>> print(caught[1].message)
    input 'image' holds float64 values from -900 to 1200, far outside [0, 1]: models train poorly on unscaled values. Standardise them in the reader: subtract the training data's mean and divide by its standard deviation, e.g. readers.map_readers(lambda e: ((e[0] - mean) / std, e[1]), reader)
    """
    for name, value in feed.items():
        a = np.asarray(value) if not isinstance(value, Padded) else value.data
        # one value per entry (labels, weights, targets) is no image: only (batch, features...) inputs
        if name in skip or a.ndim < 2 or a.dtype.kind not in "fiu" or a.size == 0:
            continue
        low, high = float(a.min()), float(a.max())
        if max(-low, high) <= FAR:
            continue
        if a.dtype == np.uint8 or 0 <= low and high <= 255:
            seen, advice = (f"up to {high:g}", "These look like 8-bit pixels: divide them by 255 in the reader, e.g. "
                            "readers.map_readers(lambda e: (e[0] / np.float32(255), e[1]), reader)")
        else:
            seen, advice = (f"from {low:g} to {high:g}", "Standardise them in the reader: subtract the training "
                            "data's mean and divide by its standard deviation, e.g. "
                            "readers.map_readers(lambda e: ((e[0] - mean) / std, e[1]), reader)")
        warnings.warn(f"input {name!r} holds {a.dtype} values {seen}, far outside [0, 1]: models train poorly on "
                      f"unscaled values. {advice}", RuntimeWarning,
                      stacklevel=user_stacklevel() if stacklevel is None else stacklevel)
        return True
    return False
