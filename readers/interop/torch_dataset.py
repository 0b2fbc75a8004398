"""Readers as PyTorch datasets: ``torch_dataset(reader)`` for ``torch.utils.data.DataLoader``.

Importing this module does not import torch. The dataset class,
``readers.interop.torch_dataset.ReaderDataset`` (a ``torch.utils.data.IterableDataset``), is
built the first time it is asked for, and asking for it by name is what
unpickling does, so a dataset sent to a ``spawn`` DataLoader worker is
rebuilt there like an instance of any module-level class.

A pipeline that ends with ``readers.shard(..., equalize="pad")`` gives each
entry a weight column of Python floats, which DataLoader's collation would
make float64 tensors beside float32 images; the dataset gives them as
``numpy.float32``, so they collate to float32 tensors.
"""
from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from readers.checks import check_reader, whole
from readers.errors import BadType, BadValue
from readers.graph import Node, describe
from readers.launch import worker_info
from readers.ops.sharding import Shard, follows_workers, is_sharded
from readers.parents import iterate
from readers.passes import close_iterator

__all__ = ["torch_dataset"]

_dataset_type: type | None = None


def __getattr__(name: str) -> Any:
    # PEP 562: the class exists only once torch is wanted, yet pickle finds it by name
    if name == "ReaderDataset":
        return _dataset_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _check_sharded(reader: Any) -> None:
    """Refuse a pipeline that every one of several workers would read whole."""
    info = worker_info()
    if info.total <= 1:
        return
    # an explicit shard is the same in every worker of a process: only one that follows them splits them
    if follows_workers(reader) if info.workers_per_process > 1 else is_sharded(reader, info.total):
        return
    workers = info.total // info.world_size
    raise BadValue(
        f"torch_dataset: this job has {info.total} data workers ({workers} per process x {info.world_size} "
        f"process{'es' if info.world_size > 1 else ''}) and the pipeline {describe(reader)!r} does not split "
        f"its passes among these {info.total} workers (it needs a shard stage that follows the workers), so samples "
        "would be seen several times per epoch; add readers.shard(...) as its last "
        "stage (after a seeded shuffle), e.g. readers.shard(pipeline, equalize='pad'), or pass "
        "sharded_elsewhere=True if the reader already splits its data by worker"
    )


def _pads_weights(reader: Any) -> bool:
    """Whether ``reader``'s entries end with a padding shard's weight column: its last stage, under stages that
    pass its entries on unchanged (a prefetch), is ``shard(..., equalize="pad")``."""
    while isinstance(reader, Node) and not isinstance(reader, Shard) and reader.per_entry == "same" \
            and len(reader.parents) == 1:
        reader = reader.parents[0]
    return isinstance(reader, Shard) and reader.equalize == "pad"


def _float32_weight(entry: Any) -> Any:
    """``entry`` with its pad weight (last column, or key "weight") as a ``numpy.float32``.

    >>> _float32_weight((np.zeros(2, np.float32), 3, 1.0))[-1].dtype, _float32_weight({"weight": 0.0})["weight"].dtype
    (dtype('float32'), dtype('float32'))
    """
    if isinstance(entry, tuple):
        return (*entry[:-1], np.float32(entry[-1]))
    if isinstance(entry, dict):
        return {**entry, "weight": np.float32(entry["weight"])}
    return entry


def _with_float32_weights(entries: Iterator) -> Iterator:
    try:
        for entry in entries:
            yield _float32_weight(entry)
    finally:  # a pass stopped early (a DataLoader worker shut down) stops the reader's pass too
        close_iterator(entries)


class _ReaderDatasetBase:
    """A reader as a ``torch.utils.data.IterableDataset``; made by ``readers.torch_dataset``.

    Each ``iter(dataset)`` is one pass of the reader. ``set_epoch(k)`` makes
    the next pass pass k of a readerkit pipeline (its seeded shuffles then
    order pass k as they would anywhere else); later passes go on from there.
    """

    def __init__(self, reader: Any, sharded_elsewhere: bool):
        self.reader = reader
        self.sharded_elsewhere = sharded_elsewhere
        self.epoch: int | None = None
        self._iterated = False
        self._pads = _pads_weights(reader)

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass pass ``epoch`` (call it before each epoch, as with DistributedSampler)."""
        self.epoch = whole(epoch, "epoch", "set_epoch", floats=False)
        set_pass = getattr(self.reader, "set_pass", None)
        if set_pass is not None:  # a plain generator function has no passes to choose from
            set_pass(self.epoch)

    def __iter__(self) -> Any:
        # here, not only in torch_dataset: a DataLoader worker learns its worker count only now
        if not self.sharded_elsewhere:
            _check_sharded(self.reader)
        if self.epoch is not None and self._iterated and _in_torch_worker():
            # a persistent worker iterates its own copy again: set_epoch on the main copy never reached it
            warnings.warn("torch_dataset: set_epoch() does not reach persistent DataLoader workers, which keep "
                          "their own copy; they run the passes after the first one in turn. Use "
                          "persistent_workers=False with set_epoch, or no set_epoch", RuntimeWarning, stacklevel=2)
        self._iterated = True
        entries = iterate(self.reader)
        return _with_float32_weights(entries) if self._pads else entries

    def __repr__(self) -> str:
        lines = repr(self.reader).splitlines() if isinstance(self.reader, Node) else [describe(self.reader)]
        head = "torch_dataset(" + ("sharded_elsewhere=True" if self.sharded_elsewhere else "") + ")"
        return "\n".join([head, "└─ " + lines[0], *("   " + line for line in lines[1:])])


def _in_torch_worker() -> bool:
    data = sys.modules.get("torch.utils.data")
    return data is not None and data.get_worker_info() is not None


def _dataset_class() -> type:
    global _dataset_type
    if _dataset_type is None:
        try:
            from torch.utils.data import IterableDataset
        except ImportError:
            raise ModuleNotFoundError(
                "torch_dataset needs PyTorch, which is not installed; install it with "
                "pip install torch (or pip install readerkit[torch])"
            ) from None

        class ReaderDataset(_ReaderDatasetBase, IterableDataset):
            __doc__ = _ReaderDatasetBase.__doc__

        ReaderDataset.__module__, ReaderDataset.__qualname__ = __name__, "ReaderDataset"
        _dataset_type = ReaderDataset
    return _dataset_type


def torch_dataset(reader: Any, *, sharded_elsewhere: bool = False) -> Any:
    """``reader`` as a ``torch.utils.data.IterableDataset``: each iteration is one pass.

    Give it a pipeline that ends with ``readers.shard(...)``: every DataLoader
    worker of every rank then reads its own share (the shard is chosen as each
    pass starts, inside the worker). A job with several data workers and no
    shard stage in the pipeline would see every sample once per worker, so it
    is refused with ``ValueError``: at once when the world size (torchrun,
    SLURM, MPI) is above 1, else when a DataLoader with ``num_workers`` > 1
    starts iterating. Pass ``sharded_elsewhere=True`` when the reader splits
    its data by worker itself.

    Call ``dataset.set_epoch(epoch)`` before each epoch, as with
    ``DistributedSampler``: a DataLoader without ``persistent_workers`` copies
    the dataset into fresh workers every epoch, so only the epoch number
    tells them which pass to run. Without ``set_epoch``, successive iterations
    in one process (or persistent worker) run passes 0, 1, 2, ... The dataset
    pickles whenever the reader does (readerkit pipelines built from
    module-level functions), so it works with the ``spawn`` start method.

    >>> torch = __import__("pytest").importorskip("torch")
    >>> import numpy as np, readers
    >>> pipeline = readers.shard(readers.shuffle(readers.from_arrays(np.arange(10)), seed=0), equalize="pad")
    >>> dataset = torch_dataset(pipeline)
    >>> dataset.set_epoch(0)
    >>> batches = list(torch.utils.data.DataLoader(dataset, batch_size=4))
    >>> [len(ids) for ids, weights in batches], batches[0][1].dtype  # weights as float32, as torch's default
    ([4, 4, 2], torch.float32)
    >>> sorted(int(i) for ids, weights in batches for i in ids)
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    >>> dataset.set_epoch(0)  # the same pass again, in the same order
    >>> again = list(torch.utils.data.DataLoader(dataset, batch_size=4))
    >>> all(torch.equal(a[0], b[0]) for a, b in zip(again, batches))
    True
    >>> import os
    >>> os.environ.update(RANK="0", WORLD_SIZE="2")  # as torchrun sets them
    >>> torch_dataset(readers.from_arrays(np.arange(10)))
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: torch_dataset: this job has 2 data workers (1 per process x 2 processes) and the pipeline 'from_arrays(10 rows: int64)' does not split its passes among these 2 workers (it needs a shard stage that follows the workers), so samples would be seen several times per epoch; add readers.shard(...) as its last stage (after a seeded shuffle), e.g. readers.shard(pipeline, equalize='pad'), or pass sharded_elsewhere=True if the reader already splits its data by worker
    >>> del os.environ["RANK"], os.environ["WORLD_SIZE"]
    
    See Also:
        readers.shard, readers.worker_info
    """
    check_reader(reader)
    if not isinstance(sharded_elsewhere, bool):
        raise BadType(f"torch_dataset: sharded_elsewhere must be True or False, got {sharded_elsewhere!r}")
    dataset = _dataset_class()(reader, sharded_elsewhere)
    if not sharded_elsewhere:
        _check_sharded(reader)  # a world size > 1 is known already: say so before any worker starts
    return dataset
