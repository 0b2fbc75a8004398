"""Bucketing by length: batches of entries of similar length, so padding stays small."""
from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from readers.checks import check_reader
from readers.errors import BadType, BadValue
from readers.graph import describe
from readers.parents import iterate
from readers.stage import Reader, Stage

__all__ = ["bucket_by_length"]


def _entry_length(entry: Any) -> int:
    """``len`` of a tuple entry's first column, or of the entry itself (the default length)."""
    value = entry[0] if isinstance(entry, tuple) else entry
    try:
        return len(value)
    except TypeError:
        raise BadType(
            "bucket_by_length takes len() of each entry (of its first column for tuple "
            f"entries), but got a {type(value).__name__}, which has none; pass length=..."
        ) from None


class BucketByLength(Stage):
    name = "bucket_by_length"
    batched = True

    def __init__(
        self,
        reader: Reader,
        boundaries: tuple[int, ...],
        batch_size: int | tuple[int, ...],
        length: Callable[[Any], int],
        drop_last: bool,
    ):
        super().__init__(reader)
        self.boundaries = boundaries
        self.batch_size = batch_size
        self.length = length
        self.drop_last = drop_last

    def _stream(self, pass_id: int) -> Iterator[list]:
        sizes = self.batch_size
        if isinstance(sizes, int):
            sizes = (sizes,) * (len(self.boundaries) + 1)
        return _buckets(iterate(self.parents[0], pass_id), self.boundaries, sizes, self.length, self.drop_last)

    def _options(self) -> str:
        shown = list(self.batch_size) if isinstance(self.batch_size, tuple) else self.batch_size
        options = f"boundaries={list(self.boundaries)}, batch_size={shown}"
        if self.length is not _entry_length:
            options += f", length={describe(self.length)}"
        return options + (", drop_last=True" if self.drop_last else "")


def _buckets(
    entries: Iterator,
    boundaries: tuple[int, ...],
    sizes: tuple[int, ...],
    length: Callable[[Any], int],
    drop_last: bool,
) -> Iterator[list]:
    pending: list[list] = [[] for _ in sizes]
    for position, entry in enumerate(entries):
        n = length(entry)
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise BadValue(
                f"bucket_by_length: length function {describe(length)} returned {n!r} for entry "
                f"{position}; it must return an int >= 0"
            )
        b = bisect.bisect_right(boundaries, n)
        bucket = pending[b]
        bucket.append(entry)
        if len(bucket) == sizes[b]:
            pending[b] = []  # a fresh list: the consumer owns the one it got
            yield bucket
    if not drop_last:
        for bucket in pending:
            if bucket:
                yield bucket


def _positive_int(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, np.integer)) and value >= 1


def bucket_by_length(
    reader: Reader,
    boundaries: Sequence[int],
    batch_size: int | Sequence[int],
    *,
    length: Callable[[Any], int] | None = None,
    drop_last: bool = False,
) -> BucketByLength:
    """Batch entries of similar length together, like tf.data's ``bucket_by_sequence_length``.

    ``boundaries`` (strictly increasing) split lengths into ``len(boundaries) + 1``
    buckets: bucket i holds lengths in ``[boundaries[i-1], boundaries[i])``. A
    bucket is yielded as a batch (a list of entries) as soon as it holds its
    ``batch_size`` (one int, or one per bucket); at the end of a pass the
    partial buckets follow in bucket order, unless ``drop_last``. ``length``
    defaults to ``len`` of the entry's first column (of the entry if not a tuple).

    >>> def sentences():
    ...     yield from ["a", "bb", "ccccc", "d", "eeeeee", "ff", "g"]
    >>> r = bucket_by_length(sentences, [3], 2)
    >>> list(r())
    [['a', 'bb'], ['ccccc', 'eeeeee'], ['d', 'ff'], ['g']]
    >>> list(bucket_by_length(sentences, [3], [3, 2], drop_last=True)())
    [['a', 'bb', 'd'], ['ccccc', 'eeeeee']]
    >>> r
    bucket_by_length(boundaries=[3], batch_size=2)
    └─ sentences
    >>> bucket_by_length(sentences, [3, 2], 4)
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: bucket_by_length: boundaries must be strictly increasing, got [3, 2] (boundaries[1] = 2 <= 3); sort them and drop duplicates

    See Also:
        batching.batch, batching.collate
    """
    check_reader(reader)
    where = "bucket_by_length"
    try:
        bounds = tuple(boundaries)
    except TypeError:
        raise BadValue(f"{where}: boundaries must be a list of ints, got {boundaries!r}") from None
    for i, b in enumerate(bounds):
        if isinstance(b, bool) or not isinstance(b, (int, np.integer)):
            raise BadValue(f"{where}: boundaries must be ints, got {b!r} at boundaries[{i}]")
    bounds = tuple(int(b) for b in bounds)
    if bounds and bounds[0] < 1:
        raise BadValue(
            f"{where}: boundaries must be >= 1, got {list(bounds)}; bucket 0 holds lengths below "
            "boundaries[0], so a first boundary <= 0 leaves it empty"
        )
    for i in range(1, len(bounds)):
        if bounds[i] <= bounds[i - 1]:
            raise BadValue(
                f"{where}: boundaries must be strictly increasing, got {list(bounds)} "
                f"(boundaries[{i}] = {bounds[i]} <= {bounds[i - 1]}); sort them and drop duplicates"
            )
    buckets = len(bounds) + 1
    if isinstance(batch_size, (int, np.integer)) and not isinstance(batch_size, bool):
        if not _positive_int(batch_size):
            raise BadValue(f"{where}: batch_size must be an int >= 1, got {batch_size!r}")
        size: int | tuple[int, ...] = int(batch_size)
    else:
        try:
            sizes = tuple(batch_size)
        except TypeError:
            raise BadValue(
                f"{where}: batch_size must be an int >= 1 or a list of {buckets} of them, got "
                f"{batch_size!r}"
            ) from None
        if len(sizes) != buckets:
            raise BadValue(
                f"{where}: batch_size lists one size per bucket, so {len(bounds)} boundaries need "
                f"{buckets} sizes, got {len(sizes)}: {list(sizes)}"
            )
        bad = [i for i, s in enumerate(sizes) if not _positive_int(s)]
        if bad:
            raise BadValue(
                f"{where}: batch sizes must be ints >= 1, got {sizes[bad[0]]!r} for bucket {bad[0]} "
                f"in {list(sizes)}"
            )
        size = tuple(int(s) for s in sizes)
    if length is not None and not callable(length):
        raise BadValue(f"{where}: length must be a function entry -> int, got {length!r}")
    return BucketByLength(reader, bounds, size, length or _entry_length, bool(drop_last))
