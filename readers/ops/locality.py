"""node_shuffle: a cache-friendly shuffle that keeps each node on one fixed block of samples.

A job of ``num_nodes`` nodes splits an indexed reader into contiguous blocks,
one per node (``NodeBlock``); each pass shuffles the node's block anew
(``readers.ops.shuffling``) and splits it among the node's workers (``NodeSplit``:
the node's processes times their local workers), with counts evened over the
whole job when asked. A node so reads, and caches, only its own block.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from readers.checks import check_reader
from readers.errors import BadValue
from readers.graph import Share, describe
from readers.launch import worker_info
from readers.ops.sharding import check_equalize, strided_plan
from readers.ops.shuffling import GlobalShuffle, check_seed
from readers.parents import as_indexed
from readers.plans import Plan
from readers.stage import IndexedReader, Stage

__all__ = ["NodeBlock", "NodeSplit", "node_shuffle"]


class NodeBlock(IndexedReader):
    """This node's fixed, contiguous block of an indexed reader: the same samples every pass."""

    name = "node_block"

    def __init__(self, source: Stage):
        super().__init__(source)

    def share(self) -> Share:
        # every node's ranks take the same steps through a block of their own, so a position
        # counts alike on each node: it depends on the number of nodes, not on which node
        return Share(None, worker_info().num_nodes, True)

    def _bounds(self) -> tuple[int, int]:
        info = worker_info()
        n = len(self.parents[0])
        return info.node_rank * n // info.num_nodes, (info.node_rank + 1) * n // info.num_nodes

    def __len__(self) -> int:
        lo, hi = self._bounds()
        return hi - lo

    def _get(self, i: int) -> Any:
        return self.parents[0].at(self._bounds()[0] + i)

    def gather(self, indices: np.ndarray) -> Iterable:
        return self.parents[0].gather(indices + self._bounds()[0])

    def gather_columns(self, indices: np.ndarray) -> Any:
        return self.parents[0].gather_columns(indices + self._bounds()[0])

    def sample_ids(self, indices: np.ndarray) -> np.ndarray:
        return self.parents[0].sample_ids(indices + self._bounds()[0])

    def _options(self) -> str:
        return "this node's block"


class NodeSplit(Stage):
    """A node's shuffled block split among the node's workers (see ``node_shuffle``)."""

    name = "shard"
    access = "plan"

    def __init__(self, shuffled: GlobalShuffle, block: NodeBlock, equalize: str | None):
        super().__init__(shuffled)
        self.block, self.equalize = block, equalize

    @property
    def positions(self) -> int:
        return self.share().count  # its cursor is the shuffled block's: count positions per entry

    def share(self) -> Share:
        info = worker_info()
        workers = info.workers_per_process
        return Share(info.local_rank * workers + info.worker_id, info.local_world_size * workers, True)

    def _target(self, cursor: int) -> int | None:
        """With ``equalize``: this worker's count, even over the whole job, not just this node."""
        if self.equalize is None:
            return None
        n, nodes = len(self.block.parents[0]), self.block.share().count
        info = worker_info()
        if info.world_size != nodes * info.local_world_size:
            raise BadValue(f"node_shuffle(equalize={self.equalize!r}) needs the same number of processes on every "
                           f"node to give every rank equal steps, and this job has {info.world_size} processes "
                           f"over {nodes} nodes ({info.local_world_size} on this one); give every node as many, "
                           "or use equalize=None")
        total = nodes * self.share().count
        rest = max(0, n - nodes * cursor)
        return -(-rest // total) if self.equalize == "pad" else rest // total

    def __len__(self) -> int:
        target = self._target(0)
        if target is not None:
            return target
        k, count = self.share()[:2]
        base, rem = divmod(len(self.parents[0]), count)
        return base + (k < rem)

    def _plan(self, pass_id: int, cursor: int) -> Plan:
        k, count = self.share()[:2]
        return strided_plan(self.parents[0], pass_id, cursor, k, count, self.equalize, self._target(cursor))

    def _options(self) -> str:
        return "this node's workers" + (f", equalize={self.equalize!r}" if self.equalize else "")


def node_shuffle(reader: Any, seed: int, *, equalize: str | None = None) -> NodeSplit:
    """A cache-friendly shuffle: each node keeps one fixed block of samples and shuffles inside it.

    With ``node_rank`` and ``num_nodes`` from ``worker_info()``, node n keeps
    the contiguous block ``[n * N // num_nodes, (n + 1) * N // num_nodes)`` in
    every pass, so it reads (and caches) only that block; each pass shuffles
    the block anew, and the node's local workers (``local_rank`` and its
    DataLoader or readerkit workers) split it as ``shard`` would. Over all nodes
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
    >>> for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
    ...     del os.environ[name]
    """
    check_reader(reader)
    indexed = as_indexed(reader)
    if indexed is None:
        raise BadValue(f"node_shuffle needs an indexed reader (len and [i]), and {describe(reader)!r} is not "
                       "one; for a stream, use shard() and shuffle(buf_size=...) after it")
    check_equalize(equalize, "node_shuffle")
    if seed is None:
        raise BadValue("node_shuffle needs a seed, the same in every process: the ranks of a node split "
                       "one shuffled order, e.g. node_shuffle(reader, seed=0)")
    block = NodeBlock(indexed)
    return NodeSplit(GlobalShuffle(block, check_seed(seed, "node_shuffle")), block, equalize)
