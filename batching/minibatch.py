"""batch and collated: entries into minibatches, minibatches into arrays.

When the pipeline below a batch is index-planned (an indexed source, then
maps, shuffles, firstn...), a batch is read with one ``gather`` of its
sample indices, which for array sources is one vectorised take per column;
``collated`` over such a batch skips building entries altogether.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np

from batching.collate import collate, collate_column
from readers.checks import check_reader, whole
from readers.errors import BadType, BadValue
from readers.graph import describe
from readers.parents import is_planned, iterate, open_plan
from readers.plans import rechunk, taken_rows
from readers.stage import Stage

__all__ = ["batch", "collated"]


class Batched(Stage):
    name = "batch"
    batched = True

    def __init__(self, reader: Any, batch_size: int, drop_last: bool):
        super().__init__(reader)
        self.batch_size, self.drop_last = batch_size, drop_last

    @property
    def positions(self) -> int:
        return self.batch_size  # its cursor counts entries, not batches

    def __len__(self) -> int:
        """The number of batches in a pass, when the reader below has a length (for progress bars, schedules).

        >>> import readers
        >>> len(batch(readers.from_sequence(range(10)), 4)), len(batch(readers.from_sequence(range(10)), 4, True))
        (3, 2)
        >>> len(batch(lambda: iter(range(10)), 4))
        Traceback (most recent call last):
        ...
        readers.errors.BadType: batch(batch_size=4, drop_last=False) has no length: <lambda> below it has none (a stream's is known only once a pass ends); len() counts batches over an indexed reader (readers.from_sequence, from_arrays...) and the stages that keep a length (map_readers, shuffle, shard...)
        """
        n = _length(self.parents[0], self)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def index_batches(self, pass_id: int, cursor: int = 0) -> tuple[Any, Iterator[np.ndarray]]:
        """The source and the sample indices of each batch of pass ``pass_id`` from ``cursor``, for a planned parent.

        >>> import readers
        >>> source, batches = batch(readers.from_sequence("abcde"), 2).index_batches(0)
        >>> [b.tolist() for b in batches]
        [[0, 1], [2, 3], [4]]
        """
        plan = open_plan(self.parents[0], pass_id, cursor)
        return plan.source, rechunk(plan.chunks, self.batch_size, drop_short=self.drop_last)

    def _seek(self, pass_id: int, cursor: int) -> Iterator[list]:
        if is_planned(self.parents[0]):
            source, batches = self.index_batches(pass_id, cursor)
            return map(list, map(source.gather, batches))  # C iterators: no Python frame per batch
        return self._from_entries(iterate(self.parents[0], pass_id, cursor))

    def _from_entries(self, entries: Iterator) -> Iterator[list]:
        size = self.batch_size
        while chunk := list(itertools.islice(entries, size)):
            if len(chunk) < size and self.drop_last:
                return
            yield chunk

    def _options(self) -> str:
        return f"batch_size={self.batch_size}, drop_last={self.drop_last}"


def batch(reader: Any, batch_size: int, drop_last: bool = False) -> Batched:
    """Group entries into lists of ``batch_size`` (Paddle's ``paddle.batch``).

    The last, shorter batch is kept unless ``drop_last``. A bad ``batch_size``
    raises ``ValueError`` here, not when the reader is iterated.

    >>> [b for b in batch(lambda: range(5), 2)()]
    [[0, 1], [2, 3], [4]]
    >>> [b for b in batch(lambda: range(5), 2, drop_last=True)()]
    [[0, 1], [2, 3]]
    >>> batch(lambda: range(5), 0)
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: batch_size must be a positive int, got 0; e.g. batch(reader, 128)

    See Also:
        collated, bucket_by_length
    """
    check_reader(reader)
    try:
        batch_size = whole(batch_size, "batch_size", "batch", 1)
    except ValueError:
        raise BadValue(f"batch_size must be a positive int, got {batch_size!r}; e.g. batch(reader, 128)") from None
    return Batched(reader, batch_size, bool(drop_last))


class Collated(Stage):
    name = "collated"
    positions = 1  # one array batch per batch: its cursor is the batch reader's
    narrow = False  # (the default of one pickled before narrow existed)

    def __init__(self, reader: Any, pad_value: Any, narrow: bool = False):
        super().__init__(reader)
        self.pad_value, self.narrow = pad_value, narrow

    def __len__(self) -> int:
        """The number of batches in a pass: its batch reader's (see ``Batched.__len__``).

        >>> import readers
        >>> len(collated(batch(readers.from_sequence(range(10)), 4)))
        3
        """
        return _length(self.parents[0], self)

    def _seek(self, pass_id: int, cursor: int) -> Iterator:
        parent = self.parents[0]
        if isinstance(parent, Batched) and is_planned(parent.parents[0]):
            return (self._narrowed if self.narrow else self._columns)(*parent.index_batches(pass_id, cursor))
        return self._entries(iterate(parent, pass_id, cursor))

    def _narrowed(self, source: Any, batches: Iterator[np.ndarray]) -> Iterator:
        """``_columns``, with the columns the source holds narrower (``wire_columns``) as ``Narrowed``."""
        # the first batch says whether the source has narrower columns; one without keeps its gather_ahead
        batches = iter(batches)
        first = next(batches, None)
        if first is None:
            return
        wire = source.wire_columns(first)
        if wire is None:
            yield from self._columns(source, itertools.chain([first], batches))
            return
        yield _narrowed(*wire)
        for idx in batches:
            wire = source.wire_columns(idx)
            yield _narrowed(*wire) if wire is not None else collate(source.gather(idx), pad_value=self.pad_value)

    def _entries(self, batches: Iterator) -> Iterator:
        pad = self.pad_value
        for b in batches:
            if type(b) is not list:
                raise BadType(
                    f"collated needs a batch reader (entries that are lists of entries), but "
                    f"{describe(self.parents[0])} gave a {type(b).__name__}; put batching.batch(...) before it"
                )
            yield collate(b, pad_value=pad)

    def _columns(self, source: Any, batches: Iterator[np.ndarray]) -> Iterator:
        arrays = source.column_arrays()
        if arrays is None or type(source).gather_ahead is not Stage.gather_ahead or not _numeric(arrays):
            return self._gathered(source, batches)
        # gather_columns would take each column from its array, and collate give it as it is; nothing reads ahead:
        # take them here, with C iterators alone (no Python frame a batch)
        if type(arrays) is not tuple:
            return taken_rows(arrays, batches)
        return zip(*map(taken_rows, arrays, itertools.tee(batches, len(arrays))))

    def _gathered(self, source: Any, batches: Iterator[np.ndarray]) -> Iterator:
        pad = self.pad_value
        for idx, columns in source.gather_ahead(batches):
            if columns is None:
                yield collate(source.gather(idx), pad_value=pad)
            elif isinstance(columns, tuple):
                yield tuple(map(_finish, columns, itertools.count(), itertools.repeat(pad)))
            else:
                yield _finish(columns, None, pad)

    def _options(self) -> str:
        return f"pad_value={self.pad_value!r}" + (", narrow=True" if self.narrow else "")

    def identity(self) -> str:
        return f"{self.name}(pad_value={self.pad_value!r})"  # narrow=True gives the same data


def _length(reader: Any, stage: Stage) -> int:
    """``len(reader)``, the reader below ``stage``, or a TypeError that says why ``stage`` has no length."""
    try:
        return len(reader)
    except TypeError:
        if isinstance(reader, Batched):
            raise  # it said why already
        raise BadType(f"{stage.title()} has no length: {describe(reader)} below it has none (a stream's is known "
                      "only once a pass ends); len() counts batches over an indexed reader (readers.from_sequence, "
                      "from_arrays...) and the stages that keep a length (map_readers, shuffle, shard...)") from None


def _finish(column: np.ndarray, position: int | None, pad_value: Any) -> Any:
    """A gathered column (the column at ``position``, None for the single one) as collate would give it: numeric
    arrays as they are, the rest collated."""
    if column.dtype.kind in "biufc":
        return column
    label = "the single-value column" if position is None else f"column {position}"
    return collate_column(list(column), label, pad_value)


def _narrowed(columns: Any, ways: Any) -> Any:
    """A batch of a source's ``wire_columns``: each column with a way to widen it as a ``Narrowed``."""
    from readers.interop.torch_loader import Narrowed
    if isinstance(columns, tuple):
        return tuple(c if w is None else Narrowed(c, w) for c, w in zip(columns, ways, strict=True))
    return columns if ways is None else Narrowed(columns, ways)


def _numeric(arrays: tuple | np.ndarray) -> bool:
    """Whether ``column_arrays()``'s takes are columns that collate gives as they are (numeric arrays).

    >>> _numeric((np.zeros(2, np.uint8), np.zeros(2))), _numeric(np.zeros(2, np.float32))
    (True, True)
    >>> _numeric((np.zeros(2), np.array(["a", "b"])))
    False
    """
    return all(a.dtype.kind in "biufc" for a in (arrays if type(arrays) is tuple else (arrays,)))


def collated(reader: Any, *, pad_value: Any = 0, narrow: bool = False) -> Collated:
    """Turn each minibatch of a batch reader into arrays, one per column (see ``collate``).

    Over ``batch`` of an index-planned pipeline whose source is made of arrays,
    each column is taken from its array in one vectorised step.

    With ``narrow=True``, the columns that such a source holds in fewer bytes
    (its ``wire_columns``: MNIST's uint8 pixels, for float32 images in 0..1)
    come as ``readers.interop.torch_loader.Narrowed(column, way)``, whose
    ``decode()`` is the array ``narrow=False`` gives; ``readers.torch_loader``
    copies the narrow column to the GPU and widens it there, a quarter of the
    bytes to gather, pin and copy. Other pipelines give the same batches
    either way.

    >>> import readers
    >>> r = readers.from_arrays(np.arange(6).reshape(3, 2), np.array([1, 0, 1]))
    >>> [(x.shape, y.tolist()) for x, y in collated(batch(r, 2))()]
    [((2, 2), [1, 0]), ((1, 2), [1])]
    >>> [c.tolist() for c in collated(batch(lambda: [1, 2, 3], 3))()]
    [[1, 2, 3]]
    >>> import tempfile
    >>> from readers.sources.idx import write_idx
    >>> folder = tempfile.TemporaryDirectory()
    >>> write_idx(f"{folder.name}/train-images-idx3-ubyte", np.full((3, 28, 28), 51, np.uint8))
    >>> write_idx(f"{folder.name}/train-labels-idx1-ubyte", np.array([7, 1, 4], np.uint8))
    >>> from readers.sources import mnist
    >>> images, labels = next(iter(collated(batch(mnist.train(folder.name), 2), narrow=True)()))
    >>> images.column.dtype, images.way, images.decode()[0, :2].tolist(), labels.decode().tolist()
    (dtype('uint8'), {'as': '<f4', 'divide': 255}, [0.20000000298023224, 0.20000000298023224], [7, 1])
    """
    check_reader(reader)
    if is_planned(reader):  # an index-planned reader yields entries, never batches
        raise BadType(
            f"collated needs a batch reader (entries that are lists of entries), got "
            f"{describe(reader)}; put batching.batch(...) before it"
        )
    if not isinstance(narrow, bool):
        raise BadType(f"collated: narrow must be True or False, got {narrow!r}")
    return Collated(reader, pad_value, narrow)
