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
from readers.allocator import tune_allocator
from readers.caching.cached import cached as _cached
from readers.continual.schema import NotAPipelineStore
from readers.continual.store import PipelineBusy, PipelineStore
from readers.continual.trigger_sets import trigger_set
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
from readers.interop.torch_dataset import torch_dataset
from readers.interop.torch_loader import torch_loader
from readers.launch import WorkerInfo, worker_context, worker_info
from readers.network.client import RemoteUnavailable
from readers.network.connection import TLSMismatch
from readers.network.multi_server import remote
from readers.network.server import serve
from readers.network.wire import NotAuthorised, RemoteError, UnsupportedVersion
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
from readers.sources.columnar import ColumnarFileError, arrow, from_hf
from readers.sources.image_folder import image_folder
from readers.sources.in_memory import from_arrays, from_sequence, np_array
from readers.sources.jsonl import jsonl
from readers.sources.parquet import parquet
from readers.sources.tar_shards import TarMemberError, TarShardError, tar_shards
from readers.sources.text import text_file
from readers.stage import IndexedReader, Reader, Stage
from readers.tokenized.rounds import assign_batches
from readers.tokenized.rounds import round_share as _round_share
from readers.tokenized.runfiles import (
    DataConfig,
    LocalData,
    RunConfig,
    RunFileError,
    ServerData,
    load_data,
    load_run,
)
from readers.tokenized.schedule import BatchSchedule
from readers.tokenized.windows import tokens
from readers.workers.paddle import multiprocess_reader as _multiprocess_reader
from readers.workers.paddle import xmap_readers as _xmap_readers
from readers.workers.prefetch import WorkerDiedError
from readers.workers.prefetch import buffered as _buffered
from readers.workers.prefetch import prefetch as _prefetch

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
buffered = Curried(_buffered)
cached = Curried(_cached)
filter_entries = Curried(_filter_entries)
firstn = Curried(_firstn)
map_readers = Curried(_map_readers, reader_at=1)
mix = Curried(_mix)
multiprocess_reader = Curried(_multiprocess_reader)
node_shuffle = Curried(_node_shuffle)
prefetch = Curried(_prefetch)
random_map = Curried(_random_map, reader_at=1)
repeat = Curried(_repeat)
round_share = Curried(_round_share)
shard = Curried(_shard)
shuffle = Curried(_shuffle)
shuffle_row_groups = Curried(_shuffle_row_groups)
skip = Curried(_skip)
xmap_readers = Curried(_xmap_readers, reader_at=1)
