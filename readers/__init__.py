"""readerkit readers: the reader protocol, reader creators and decorators.

Vocabulary
----------
entry
    One sample: a tuple of columns such as ``(image, label)``, or a single
    value. Never a minibatch.
reader (provider)
    A zero-argument callable that returns a *fresh* iterable of entries on
    every call. Calling it again starts a new, full pass. Any plain generator
    function qualifies.
indexed reader
    A reader that also has ``len(r)`` and ``r[i]`` (random access by sample
    index). The sample index is the sample's unique ID. Decorators keep this
    property wherever it makes sense: a map over an indexed reader is
    indexed, a filter is not.
reader creator
    A function returning a reader, e.g. ``readers.from_arrays(x, y)``.
decorator
    Takes one or more readers (plus options) and returns a new reader. Every
    decorator is lazy (nothing is read when it is applied), re-callable (each
    call is an independent pass) and curried, so options can come first::

        toolz.pipe(r, readers.shuffle(buf_size=1000, seed=0),
                   batching.batch(batch_size=128))
batch reader
    A reader whose entries are lists of entries (``batching.batch``).
mapping
    Which column feeds which named model input: ``{"image": 0, "label": 1}``
    or ``["image", "label"]`` (column i -> name i).

>>> import toolz, batching
>>> def numbers():
...     yield from range(10)
>>> pipeline = toolz.pipe(numbers, shuffle(buf_size=4, seed=0), batching.batch(batch_size=4))
>>> [sorted(b) for b in pipeline()]
[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
"""
import importlib as _importlib

from readers.currying import Curried
from readers.errors import (
    BadType,
    BadValue,
    FileError,
    MissingFile,
    NotFound,
    ReaderkitError,
    TimedOut,
)
from readers.identity import fingerprint
from readers.launch import WorkerInfo, worker_context, worker_info
from readers.ops.combine import ComposeNotAligned, chain, compose
from readers.ops.locality import node_shuffle as _node_shuffle
from readers.ops.maps import map_readers as _map_readers
from readers.ops.maps import random_map as _random_map
from readers.ops.maps import with_index
from readers.ops.mixing import mix as _mix
from readers.ops.replay import cache
from readers.ops.replay import repeat as _repeat
from readers.ops.row_groups import shuffle_row_groups as _shuffle_row_groups
from readers.ops.sharding import shard as _shard
from readers.ops.shuffling import shuffle as _shuffle
from readers.ops.slicing import filter_entries as _filter_entries
from readers.ops.slicing import firstn as _firstn
from readers.ops.slicing import skip as _skip
from readers.sources.in_memory import from_arrays, from_sequence, np_array
from readers.stage import IndexedReader, Reader, Stage

__all__ = [
    "BadType",
    "BadValue",
    "BatchSchedule",
    "ColumnarFileError",
    "ComposeNotAligned",
    "Curried",
    "DataConfig",
    "FileError",
    "IndexedReader",
    "LocalData",
    "MissingFile",
    "NotAPipelineStore",
    "NotAuthorised",
    "NotFound",
    "PipelineBusy",
    "PipelineStore",
    "Reader",
    "ReaderkitError",
    "RemoteError",
    "RemoteUnavailable",
    "RunConfig",
    "RunFileError",
    "ServerData",
    "Stage",
    "TLSMismatch",
    "TarMemberError",
    "TarShardError",
    "TimedOut",
    "UnsupportedVersion",
    "WorkerDiedError",
    "WorkerInfo",
    "arrow",
    "assign_batches",
    "buffered",
    "cache",
    "cached",
    "chain",
    "compose",
    "filter_entries",
    "fingerprint",
    "firstn",
    "from_arrays",
    "from_hf",
    "from_sequence",
    "image_folder",
    "jsonl",
    "load_data",
    "load_run",
    "map_readers",
    "mix",
    "multiprocess_reader",
    "node_shuffle",
    "np_array",
    "parquet",
    "prefetch",
    "random_map",
    "remote",
    "repeat",
    "round_share",
    "serve",
    "shard",
    "shuffle",
    "shuffle_row_groups",
    "skip",
    "tar_shards",
    "text_file",
    "tokens",
    "torch_dataset",
    "torch_loader",
    "trigger_set",
    "tune_allocator",
    "with_index",
    "worker_context",
    "worker_info",
    "xmap_readers",
]

# The curried namespace, one line per decorator (toolz.curry): given only options, a decorator
# waits for its reader (toolz.pipe); given the reader, it runs, so a missing option is an error.
filter_entries = Curried(_filter_entries)
firstn = Curried(_firstn)
map_readers = Curried(_map_readers, reader_at=1)
mix = Curried(_mix)
node_shuffle = Curried(_node_shuffle)
random_map = Curried(_random_map, reader_at=1)
repeat = Curried(_repeat)
shard = Curried(_shard)
shuffle = Curried(_shuffle)
shuffle_row_groups = Curried(_shuffle_row_groups)
skip = Curried(_skip)

# Imported on first use (PEP 562): what only some passes need (the network, the cache, workers, the continual
# store, file formats, token data, torch) stays out of ``import readers``. name: (its module, reader_at of its
# curried decorator, or None when it is not one).
_LAZY = {
    "BatchSchedule": ("readers.tokenized.schedule", None),
    "ColumnarFileError": ("readers.sources.columnar", None),
    "DataConfig": ("readers.tokenized.runfiles", None),
    "LocalData": ("readers.tokenized.runfiles", None),
    "NotAPipelineStore": ("readers.continual.schema", None),
    "NotAuthorised": ("readers.network.wire", None),
    "PipelineBusy": ("readers.continual.store", None),
    "PipelineStore": ("readers.continual.store", None),
    "RemoteError": ("readers.network.wire", None),
    "RemoteUnavailable": ("readers.network.client", None),
    "RunConfig": ("readers.tokenized.runfiles", None),
    "RunFileError": ("readers.tokenized.runfiles", None),
    "ServerData": ("readers.tokenized.runfiles", None),
    "TLSMismatch": ("readers.network.connection", None),
    "TarMemberError": ("readers.sources.tar_shards", None),
    "TarShardError": ("readers.sources.tar_shards", None),
    "UnsupportedVersion": ("readers.network.wire", None),
    "WorkerDiedError": ("readers.workers.prefetch", None),
    "arrow": ("readers.sources.columnar", None),
    "assign_batches": ("readers.tokenized.rounds", None),
    "buffered": ("readers.workers.prefetch", 0),
    "cached": ("readers.caching.cached", 0),
    "from_hf": ("readers.sources.columnar", None),
    "image_folder": ("readers.sources.image_folder", None),
    "jsonl": ("readers.sources.jsonl", None),
    "load_data": ("readers.tokenized.runfiles", None),
    "load_run": ("readers.tokenized.runfiles", None),
    "multiprocess_reader": ("readers.workers.paddle", 0),
    "parquet": ("readers.sources.parquet", None),
    "prefetch": ("readers.workers.prefetch", 0),
    "remote": ("readers.network.multi_server", None),
    "round_share": ("readers.tokenized.rounds", 0),
    "serve": ("readers.network.server", None),
    "tar_shards": ("readers.sources.tar_shards", None),
    "text_file": ("readers.sources.text", None),
    "tokens": ("readers.tokenized.windows", None),
    "torch_dataset": ("readers.interop.torch_dataset", None),
    "torch_loader": ("readers.interop.torch_loader", None),
    "trigger_set": ("readers.continual.trigger_sets", None),
    "tune_allocator": ("readers.allocator", None),
    "xmap_readers": ("readers.workers.paddle", 1),
}


def __getattr__(name: str):
    """``readers.X`` for a name imported on first use: its module is imported then, and the name kept."""
    try:
        module, reader_at = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'readers' has no attribute {name!r}") from None
    value = getattr(_importlib.import_module(module), name)
    if reader_at is not None:
        value = Curried(value, reader_at=reader_at)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
