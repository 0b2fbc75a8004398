"""Sharding by global worker: worker_info, shard, node_shuffle.

A job is ``world_size`` processes (ranks), each with ``workers`` local workers
(readerkit's own worker processes or threads, or a PyTorch DataLoader's); the
worker with local id w in rank r has global id ``w + workers * r`` out of
``total = workers * world_size``. ``shard`` keeps the entries of one global
worker: entry i of a pass goes to shard ``i % total``. Uneven shards are made
even with ``equalize``, so every worker takes the same number of steps and no
collective operation waits forever on a worker that ran out of data.
"""
from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np

from readers.base import (
    CHUNK,
    IndexedReader,
    Plan,
    Stage,
    advance,
    append_column,
    as_indexed,
    check_reader,
    describe,
    is_planned,
    iterate,
    open_plan,
    rechunk,
    whole,
)
from readers.shuffling import GlobalShuffle, check_seed

__all__ = ["WorkerInfo", "node_shuffle", "shard", "worker_context", "worker_info"]

EQUALIZE = (None, "pad", "drop")


class WorkerInfo(NamedTuple):
    """Who this worker is in the job (see ``worker_info``)."""

    rank: int
    world_size: int
    worker_id: int
    workers_per_process: int
    global_id: int
    total: int
    node_rank: int
    num_nodes: int
    local_rank: int
    local_world_size: int
    launcher: str


_context = threading.local()


@contextlib.contextmanager
def worker_context(worker_id: int, workers: int) -> Iterator[None]:
    """Within this block (in this thread), ``worker_info()`` says local worker ``worker_id`` of ``workers``.

    readerkit's own parallel workers run their replica of a pipeline inside
    it; a custom worker pool can do the same, so ``shard()`` splits by its workers.

    >>> with worker_context(1, 2):
    ...     worker_info().worker_id, worker_info().workers_per_process
    (1, 2)
    >>> worker_info().workers_per_process
    1
    """
    workers = whole(workers, "workers", "worker_context", 1, floats=False)
    worker_id = whole(worker_id, "worker_id", "worker_context", floats=False)
    if worker_id >= workers:
        raise ValueError(f"worker_context: worker_id {worker_id} is not below workers={workers}")
    saved = getattr(_context, "value", None)
    _context.value = (worker_id, workers)
    try:
        yield
    finally:
        _context.value = saved


def _local_worker() -> tuple[int, int]:
    value = getattr(_context, "value", None)
    if value is not None:
        return value
    # torch tells a DataLoader worker who it is; never import torch just to ask
    data = sys.modules.get("torch.utils.data")
    get = getattr(data, "get_worker_info", None)
    info = get() if get is not None else None
    if info is not None:
        return int(info.id), int(info.num_workers)
    return 0, 1


def _env_int(env: Any, name: str, default: int | None = None) -> int | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw.strip())
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an int; fix or unset it "
                         "(readerkit reads the job layout from the launcher's variables)") from None


def _slurm_tasks_per_node(env: Any) -> list[int] | None:
    """SLURM's tasks on each node, from ``SLURM_TASKS_PER_NODE``: "2(x3),1" is [2, 2, 2, 1]."""
    raw = env.get("SLURM_TASKS_PER_NODE") or env.get("SLURM_NTASKS_PER_NODE")
    if not raw:
        return None
    counts: list[int] = []
    for part in raw.split(","):
        found = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if found is None:
            raise ValueError(f"environment variable SLURM_TASKS_PER_NODE={raw!r} is not in SLURM's "
                             "'2(x3),1' form; fix or unset it")
        counts += [int(found[1])] * int(found[2] or 1)
    return counts


def _launcher(env: Any) -> tuple[str, int, int, int, int, int | None, int | None]:
    """(launcher, rank, world size, local rank, local world size, node rank or None, nodes or None)."""
    if "RANK" in env or "WORLD_SIZE" in env:
        rank, world = _env_int(env, "RANK", 0), _env_int(env, "WORLD_SIZE", 1)
        return ("torchrun", rank, world, _env_int(env, "LOCAL_RANK", rank),
                _env_int(env, "LOCAL_WORLD_SIZE", world), _env_int(env, "GROUP_RANK"), None)
    if "SLURM_PROCID" in env:
        rank = _env_int(env, "SLURM_PROCID")
        world = _env_int(env, "SLURM_NTASKS", _env_int(env, "SLURM_NPROCS", 1))
        node = _env_int(env, "SLURM_NODEID", 0)
        nodes = _env_int(env, "SLURM_NNODES")
        per_node = _slurm_tasks_per_node(env)
        if per_node:  # nodes may hold different numbers of tasks: world // local world is no count of nodes
            nodes = len(per_node)
            local_world = per_node[min(node, len(per_node) - 1)]
        else:
            local_world = world // max(1, nodes or 1)
        return "slurm", rank, world, _env_int(env, "SLURM_LOCALID", 0), max(1, local_world), node, nodes
    if "OMPI_COMM_WORLD_RANK" in env:
        rank = _env_int(env, "OMPI_COMM_WORLD_RANK")
        return ("mpi", rank, _env_int(env, "OMPI_COMM_WORLD_SIZE", 1), _env_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0),
                _env_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1), None, None)
    if "PMI_RANK" in env:  # MPICH and Intel MPI
        rank = _env_int(env, "PMI_RANK")
        return ("mpi", rank, _env_int(env, "PMI_SIZE", 1), _env_int(env, "MPI_LOCALRANKID", 0),
                _env_int(env, "MPI_LOCALNRANKS", 1), None, None)
    return "none", 0, 1, 0, 1, None, None


def worker_info() -> WorkerInfo:
    """This worker's place in the job: rank, world size, local worker, global id, node.

    Rank and world size come from the launcher's environment: torchrun's
    ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``LOCAL_WORLD_SIZE``/``GROUP_RANK``,
    then SLURM's ``SLURM_PROCID``/``SLURM_NTASKS``/``SLURM_LOCALID``/``SLURM_NODEID``,
    then Open MPI's ``OMPI_COMM_WORLD_*`` (or MPICH's ``PMI_RANK``/``PMI_SIZE``);
    without any, rank 0 of 1. The local worker is set by readerkit's workers
    (``worker_context``) or, inside a PyTorch DataLoader worker, read from
    ``torch.utils.data.get_worker_info()`` (torch is never imported for it).
    Under SLURM, start the ranks with ``srun``: a batch script itself is rank 0.

    >>> import os
    >>> os.environ.update(RANK="3", WORLD_SIZE="4", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2", GROUP_RANK="1")
    >>> info = worker_info()
    >>> info.rank, info.world_size, info.node_rank, info.num_nodes, info.local_rank, info.global_id
    (3, 4, 1, 2, 1, 3)
    >>> with worker_context(1, 2):
    ...     worker_info().global_id, worker_info().total
    (7, 8)
    >>> os.environ["RANK"] = "4"
    >>> worker_info()
    Traceback (most recent call last):
    ...
    ValueError: torchrun environment says rank 4 of world size 4; a rank must be below the world size (check RANK and WORLD_SIZE)
    """
    launcher, rank, world, local_rank, local_world, node, nodes = _launcher(os.environ)
    names = {"torchrun": ("RANK", "WORLD_SIZE"), "slurm": ("SLURM_PROCID", "SLURM_NTASKS")}.get(
        launcher, ("the MPI rank", "size"))
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"{launcher} environment says rank {rank} of world size {world}; a rank must be below "
                         f"the world size (check {names[0]} and {names[1]})")
    if local_world < 1 or not 0 <= local_rank < local_world:
        raise ValueError(f"{launcher} environment says local rank {local_rank} of {local_world} processes on "
                         "this node; the local rank must be below the local world size")
    num_nodes = nodes or max(1, -(-world // local_world))
    if node is None:
        node = rank // local_world
    if not 0 <= node < num_nodes:
        raise ValueError(f"{launcher} environment says node {node} of {num_nodes} (world size {world} over "
                         f"{local_world} processes per node); check the node rank variable")
    worker, workers = _local_worker()
    return WorkerInfo(rank, world, worker, workers, worker + workers * rank, workers * world,
                      node, num_nodes, local_rank, local_world, launcher)


# -- shard ---------------------------------------------------------------------------


class _Weighted(IndexedReader):
    """A plan source whose entries gain a weight column; index -1 - i is a zero-weight copy of i."""

    name = "weighted"

    def __init__(self, source: IndexedReader):
        super().__init__(source)
        self.source = source

    @staticmethod
    def _split(indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        real = indices >= 0
        return np.where(real, indices, -1 - indices), real

    def _get(self, i: int) -> tuple:
        return append_column(self.source._get(i if i >= 0 else -1 - i), 1.0 if i >= 0 else 0.0)

    def gather(self, indices: np.ndarray) -> list:
        idx, real = self._split(indices)
        return list(map(append_column, self.source.gather(idx), real.astype(float).tolist()))

    def gather_columns(self, indices: np.ndarray) -> tuple | None:
        idx, real = self._split(indices)
        columns = self.source.gather_columns(idx)
        if columns is None:
            return None
        return (columns if isinstance(columns, tuple) else (columns,)) + (real.astype(np.float64),)

    def sample_ids(self, indices: np.ndarray) -> np.ndarray:
        return self.source.sample_ids(self._split(indices)[0])


def _stride_chunks(chunks: Iterator[np.ndarray], k: int, count: int, equalize: str | None,
                   target: int | None, pad_index: Callable[[], int] | None) -> Iterator[np.ndarray]:
    """Positions k, k + count, ... of a chunk stream; pads are -1 - (the pass's first index).

    ``pad_index`` finds that index for a pass resumed past it (None: it is the first one read).
    """
    first, given = None, 0

    def pad() -> int:
        return -1 - (first if pad_index is None else pad_index())

    for block in rechunk(chunks, count * max(1, CHUNK // count)):
        if first is None:
            first = int(block[0])
        cut = len(block) - len(block) % count
        mine = block[k:cut:count]
        rest = block[cut:]
        if len(rest) and equalize != "drop" or target is not None:
            if k < len(rest):
                mine = np.append(mine, rest[k])
            elif len(rest) and equalize == "pad" and target is None:
                mine = np.append(mine, pad())
        if target is not None:
            mine = mine[:max(0, target - given)]
        given += len(mine)
        if len(mine):
            yield mine
    if target is not None and given < target and (first is not None or pad_index is not None):
        yield np.full(target - given, pad(), dtype=np.int64)


def _stride_entries(entries: Iterator, k: int, count: int, equalize: str | None,
                    target: int | None, pad_entry: Callable[[], Any] | None) -> Iterator:
    """Entries k, k + count, ... of a stream, read in groups of ``count``; pads copy the pass's first entry.

    ``pad_entry`` reads that entry for a pass resumed past it (None: it is the first one read).
    """
    pad = equalize == "pad"
    given, first = 0, []  # first: the entry pads copy, once known

    def padding() -> tuple:
        if not first:
            first.append(pad_entry())
        return append_column(first[0], 0.0)

    while target is None or given < target:
        group = [e for _, e in zip(range(count), entries)]
        if not group:
            break
        if pad_entry is None and not first:
            first.append(group[0])
        if k < len(group) and (len(group) == count or equalize != "drop" or target is not None):
            yield append_column(group[k], 1.0) if pad else group[k]
        elif pad and target is None:
            yield padding()
        else:
            continue
        given += 1
        if len(group) < count:
            break
    while pad and target is not None and given < target and (first or pad_entry is not None):
        given += 1
        yield padding()


def _first_index(reader: Any, pass_id: int) -> int:
    """The first sample index of pass ``pass_id`` of a planned reader (its pads copy it)."""
    for chunk in open_plan(reader, pass_id).chunks:
        if len(chunk):
            return int(chunk[0])
    raise ValueError(f"shard: pass {pass_id} of {describe(reader)} is empty, so it has no entry to pad with")


def _first_entry(reader: Any, pass_id: int) -> Any:
    """The first entry of pass ``pass_id`` of a stream, read afresh (its pads copy it)."""
    it = iterate(reader, pass_id)
    try:
        for entry in it:
            return entry
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
    raise ValueError(f"shard: pass {pass_id} of {describe(reader)} is empty, so it has no entry to pad with")


class Shard(Stage):
    """One shard of a pipeline: positions index, index + count, ... of every pass."""

    name = "shard"
    shards = True

    def __init__(self, reader: Any, index: int | None, count: int | None, equalize: str | None,
                 scope: str = "global", span: Any = None):
        super().__init__(reader)
        self.index, self.count, self.equalize, self.scope, self.span = index, count, equalize, scope, span

    def _resolved(self) -> tuple[int, int]:
        if self.count is not None:
            return self.index, self.count
        info = worker_info()
        if self.scope == "local":
            wpp = info.workers_per_process
            return info.local_rank * wpp + info.worker_id, info.local_world_size * wpp
        return info.global_id, info.total

    def _layout(self) -> list:
        """This shard as a state's layout records it (see ``readers.state.fixed_layout``)."""
        return list(self._resolved())

    def _target(self, cursor: int) -> int | None:
        """For a node's workers: equal counts over the whole job, not just this node."""
        if self.span is None or self.equalize is None:
            return None
        n, nodes = len(self.span.source), self.span._resolved()[1]
        total = nodes * self._resolved()[1]
        rest = max(0, n - nodes * cursor)
        return -(-rest // total) if self.equalize == "pad" else rest // total

    def _planned(self) -> bool:
        return is_planned(self.parents[0])

    def _native(self) -> bool:
        return False

    def __len__(self) -> int:
        k, count = self._resolved()
        n = len(self.parents[0])
        target = self._target(0)
        if target is not None:
            return target
        base, rem = divmod(n, count)
        return base + (k < rem if self.equalize is None else rem > 0 if self.equalize == "pad" else 0)

    def _advance(self, start: int, consumed: int) -> int:
        parent = self.parents[0]
        cursor = advance(parent, start, consumed * self._resolved()[1])
        # not for a node's block: blocks differ in size, and the pads still due on this node
        # (``_target``) follow from the steps taken, which a clamped cursor no longer tells
        if self.span is None and isinstance(parent, Stage) and parent._native() and hasattr(parent, "__len__"):
            try:
                cursor = min(cursor, len(parent))
            except TypeError:
                pass
        return cursor

    def _plan(self, pass_id: int, cursor: int = 0) -> Plan:
        k, count = self._resolved()
        plan = open_plan(self.parents[0], pass_id, cursor)
        source = _Weighted(plan.source) if self.equalize == "pad" else plan.source
        if count == 1 and self.span is None:
            return Plan(source, plan.chunks)
        # a pad copies the pass's first entry, whatever the cursor, so a resumed pass pads alike
        pad_index = functools.partial(_first_index, self.parents[0], pass_id) if cursor else None
        return Plan(source, _stride_chunks(plan.chunks, k, count, self.equalize, self._target(cursor), pad_index))

    def _stream(self, pass_id: int) -> Iterator:
        return self._seek(pass_id, 0)

    def _seek(self, pass_id: int, cursor: int) -> Iterator:
        k, count = self._resolved()
        entries = iterate(self.parents[0], pass_id, cursor)
        pad_entry = None
        if cursor and self.equalize == "pad":
            pad_entry = functools.partial(_first_entry, self.parents[0], pass_id)
        return _stride_entries(entries, k, count, self.equalize, self._target(cursor), pad_entry)

    def _options(self) -> str:
        where = (f"index={self.index}, count={self.count}" if self.count is not None
                 else "this node's workers" if self.scope == "local" else "global worker")
        return where + (f", equalize={self.equalize!r}" if self.equalize else "")


def shard(reader: Any, index: int | None = None, count: int | None = None, *,
          equalize: str | None = None) -> Shard:
    """Keep shard ``index`` of ``count``: entry i of each pass goes to shard ``i % count``.

    Without ``index`` and ``count`` the shard is this global worker's
    (``worker_info()``), looked up as each pass starts, so a reader built in
    the main process shards correctly inside DataLoader or readerkit workers,
    and a job that changes size between passes repartitions the next pass.
    An index-addressed pipeline is split by index arithmetic and reads only its
    own samples; a stream is read whole and every ``count``-th entry kept.
    With N entries, shards get N // count or one more; ``equalize="drop"`` gives
    every shard N // count, ``"pad"`` gives every shard ceil(N / count), and
    then every entry gains a last column, its weight: 1.0, or 0.0 for the
    padding (a copy of a real entry), which the numpy models and a weighted
    loss ignore. Put ``shard`` after the shuffle so one seed orders the whole
    pass: then a position saved on one shard layout resumes on any other.

    >>> from readers import from_sequence, shuffle
    >>> [list(shard(from_sequence(range(7)), i, 3)()) for i in range(3)]
    [[0, 3, 6], [1, 4], [2, 5]]
    >>> [list(shard(from_sequence(range(7)), i, 3, equalize="drop")()) for i in range(3)]
    [[0, 3], [1, 4], [2, 5]]
    >>> list(shard(from_sequence(range(7)), 2, 3, equalize="pad")())
    [(2, 1.0), (5, 1.0), (0, 0.0)]
    >>> whole_pass = shuffle(from_sequence(range(10)), seed=0)
    >>> parts = [list(shard(whole_pass, i, 4)()) for i in range(4)]
    >>> sorted(sum(parts, [])) == list(range(10))
    True
    """
    check_reader(reader)
    if equalize not in EQUALIZE:
        raise ValueError(f"shard: equalize must be None, 'pad' or 'drop', got {equalize!r}")
    if (index is None) != (count is None):
        raise ValueError(f"shard: give both index and count, or neither (for this global worker); got "
                         f"index={index!r}, count={count!r}")
    if count is not None:
        count = whole(count, "count", "shard", 1, floats=False)
        index = whole(index, "index", "shard", floats=False)
        if index >= count:
            raise ValueError(f"shard: index {index} is not below count={count}; shards are numbered 0..{count - 1}")
    return Shard(reader, index, count, equalize)


class _NodeBlock(IndexedReader):
    """This node's fixed, contiguous block of an indexed reader: the same samples every pass."""

    name = "node_block"
    shards = True

    def __init__(self, source: IndexedReader):
        super().__init__(source)
        self.source = source

    def _resolved(self) -> tuple[int, int]:
        info = worker_info()
        return info.node_rank, info.num_nodes

    def _layout(self) -> list:
        # every node's ranks take the same steps through a block of their own, so a position
        # counts alike on each node: it depends on the number of nodes, not on which node
        return [None, self._resolved()[1]]

    def _bounds(self) -> tuple[int, int]:
        node, nodes = self._resolved()
        n = len(self.source)
        return node * n // nodes, (node + 1) * n // nodes

    def __len__(self) -> int:
        lo, hi = self._bounds()
        return hi - lo

    def _get(self, i: int) -> Any:
        return self.source._get(self._bounds()[0] + i)

    def gather(self, indices: np.ndarray) -> Any:
        return self.source.gather(indices + self._bounds()[0])

    def gather_columns(self, indices: np.ndarray) -> Any:
        return self.source.gather_columns(indices + self._bounds()[0])

    def sample_ids(self, indices: np.ndarray) -> np.ndarray:
        return self.source.sample_ids(indices + self._bounds()[0])

    def _options(self) -> str:
        return "this node's block"


def node_shuffle(reader: Any, seed: int | None = None, *, equalize: str | None = None) -> Shard:
    """A cache-friendly shuffle: each node keeps one fixed block of samples and shuffles inside it.

    With ``node_rank`` and ``num_nodes`` from ``worker_info()``, node n keeps
    the contiguous block ``[n * N // num_nodes, (n + 1) * N // num_nodes)`` in
    every pass, so it reads (and caches) only that block; each pass shuffles
    the block anew, and the node's local workers (``local_rank`` and its
    DataLoader or readerkit workers) split it with ``shard``. Over all nodes
    each pass is still exactly once, and ``equalize`` evens the counts over the
    whole job. The price is randomness: a sample only ever shares minibatches
    with samples of its own node's block, and a node's gradient steps see a
    fixed 1/num_nodes of the data, so with few nodes or a block-ordered source
    (sorted by class, by time) it differs from a global shuffle; a global
    ``shuffle`` followed by ``shard`` has no such bias but reads from all the data.
    A position in it resumes on the same number of nodes only.

    >>> import os
    >>> from readers import from_sequence
    >>> os.environ.update(RANK="1", WORLD_SIZE="2", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    >>> r = node_shuffle(from_sequence(range(10)), seed=0)
    >>> first, second = list(r()), list(r())
    >>> sorted(first), sorted(second) == sorted(first), first != second
    ([5, 6, 7, 8, 9], True, True)
    """
    check_reader(reader)
    indexed = as_indexed(reader)
    if indexed is None:
        raise ValueError(f"node_shuffle needs an indexed reader (len and [i]), and {describe(reader)!r} is not "
                         "one; for a stream, use shard() and shuffle(buf_size=...) after it")
    if equalize not in EQUALIZE:
        raise ValueError(f"node_shuffle: equalize must be None, 'pad' or 'drop', got {equalize!r}")
    block = _NodeBlock(indexed)
    return Shard(GlobalShuffle(block, check_seed(seed, "node_shuffle")), None, None, equalize, "local", block)
