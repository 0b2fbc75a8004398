"""Who this worker is: rank and world size from the launcher, the local worker from the worker pool.

A job is ``world_size`` processes (ranks), each with ``workers_per_process``
local workers (readerkit's own worker processes or threads, or a PyTorch
DataLoader's). The worker with local id w in rank r has global id
``w + workers_per_process * r`` out of ``total = workers_per_process * world_size``;
``readers.shard`` splits a pass by it.
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from collections.abc import Iterator
from typing import Any, NamedTuple

from readers.checks import whole
from readers.errors import BadValue

__all__ = ["WorkerInfo", "job_id", "local_worker", "worker_context", "worker_info"]


class WorkerInfo(NamedTuple):
    """Who this worker is in the job (see ``worker_info``).

    >>> info = worker_info()
    >>> info.rank, info.world_size, info.global_id, info.total, info.launcher
    (0, 1, 0, 1, 'none')
    """

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

    readerkit's own workers run their reader inside it; a custom worker pool
    can do the same, so ``shard()`` splits by its workers.

    >>> with worker_context(1, 2):
    ...     worker_info().worker_id, worker_info().workers_per_process
    (1, 2)
    >>> worker_info().workers_per_process
    1
    """
    workers = whole(workers, "workers", "worker_context", 1, floats=False)
    worker_id = whole(worker_id, "worker_id", "worker_context", floats=False)
    if worker_id >= workers:
        raise BadValue(f"worker_context: worker_id {worker_id} is not below workers={workers}")
    saved = getattr(_context, "value", None)
    _context.value = (worker_id, workers)
    try:
        yield
    finally:
        _context.value = saved


def local_worker() -> tuple[int, int]:
    """(local worker id, workers in this process): from readerkit's worker context, a torch DataLoader, or (0, 1).

    >>> with worker_context(1, 3):
    ...     local_worker()
    (1, 3)
    """
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
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw.strip())
    except ValueError:
        raise BadValue(f"environment variable {name}={raw!r} is not an int; fix or unset it "
                       "(readerkit reads the job layout from the launcher's variables)") from None


def _slurm_tasks_per_node(env: Any) -> list[int] | None:
    """SLURM's tasks on each node of the step: "2(x3),1" is [2, 2, 2, 1]."""
    name = next((n for n in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE") if env.get(n)), None)
    if name is None:
        return None
    raw, counts = env[name], []
    for part in raw.split(","):
        found = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if found is None:
            raise BadValue(f"environment variable {name}={raw!r} is not in SLURM's '2(x3),1' form; fix or unset it")
        counts += [int(found[1])] * int(found[2] or 1)
    return counts


def _torchrun(env: Any) -> tuple:
    missing = [name for name in ("RANK", "WORLD_SIZE") if _env_int(env, name) is None]
    if missing:
        raise BadValue(f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set but "
                       f"{'WORLD_SIZE' if 'RANK' in missing else 'RANK'} is; a launcher sets both (torchrun "
                       "does), so set both or neither")
    rank, world = _env_int(env, "RANK"), _env_int(env, "WORLD_SIZE")
    return ("torchrun", ("RANK", "WORLD_SIZE"), rank, world, _env_int(env, "LOCAL_RANK", rank),
            _env_int(env, "LOCAL_WORLD_SIZE", world), _env_int(env, "GROUP_RANK"), None)


def _slurm(env: Any) -> tuple:
    # only srun sets the step's task count: a batch script has SLURM_PROCID=0 and SLURM_NTASKS of the
    # whole allocation, and as "rank 0 of n" it would read 1/n of the data, so it counts as one process
    world = _env_int(env, "SLURM_STEP_NUM_TASKS")
    if world is None:
        return None
    node = _env_int(env, "SLURM_NODEID", 0)
    per_node = _slurm_tasks_per_node(env)
    nodes = len(per_node) if per_node else _env_int(env, "SLURM_STEP_NUM_NODES", _env_int(env, "SLURM_NNODES"))
    if per_node:
        local_world = per_node[min(node, len(per_node) - 1)]
    else:
        local_world = _env_int(env, "SLURM_NTASKS_PER_NODE") or world // max(1, nodes or 1)
    return ("slurm", ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS"), _env_int(env, "SLURM_PROCID"), world,
            _env_int(env, "SLURM_LOCALID", 0), max(1, local_world), node, nodes)


def _mpi(env: Any, rank: str, size: str, local_rank: str, local_size: str) -> tuple | None:
    if rank not in env:
        return None
    return ("mpi", (rank, size), _env_int(env, rank), _env_int(env, size, 1), _env_int(env, local_rank, 0),
            _env_int(env, local_size, 1), None, None)


def _launcher(env: Any) -> tuple:
    """(launcher, variable names, rank, world size, local rank, local world size, node rank, nodes)."""
    if "RANK" in env or "WORLD_SIZE" in env:
        return _torchrun(env)
    if "SLURM_PROCID" in env and (found := _slurm(env)) is not None:
        return found
    return (_mpi(env, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                 "OMPI_COMM_WORLD_LOCAL_SIZE")
            or _mpi(env, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")  # MPICH, Intel MPI
            or ("none", ("", ""), 0, 1, 0, 1, None, None))


def worker_info() -> WorkerInfo:
    """This worker's place in the job: rank, world size, local worker, global id, node.

    Rank and world size come from the launcher's environment: torchrun's
    ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``LOCAL_WORLD_SIZE``/``GROUP_RANK``;
    then, inside an ``srun`` step, SLURM's ``SLURM_PROCID``/``SLURM_STEP_NUM_TASKS``/
    ``SLURM_LOCALID``/``SLURM_NODEID``/``SLURM_STEP_TASKS_PER_NODE`` (a batch
    script run without srun is one process); then Open MPI's ``OMPI_COMM_WORLD_*``
    or MPICH's ``PMI_RANK``/``PMI_SIZE``; without any, rank 0 of 1. The local
    worker is set by readerkit's workers (``worker_context``) or, inside a
    PyTorch DataLoader worker, read from ``torch.utils.data.get_worker_info()``
    (torch is never imported for it).

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
    readers.errors.BadValue: torchrun environment says rank 4 of world size 4; a rank is 0..world size - 1 (check RANK and WORLD_SIZE)
    >>> for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"):
    ...     del os.environ[name]
    """
    launcher, names, rank, world, local_rank, local_world, node, nodes = _launcher(os.environ)
    if world < 1 or not 0 <= rank < world:
        raise BadValue(f"{launcher} environment says rank {rank} of world size {world}; a rank is "
                       f"0..world size - 1 (check {names[0]} and {names[1]})")
    if local_world < 1 or not 0 <= local_rank < local_world:
        raise BadValue(f"{launcher} environment says local rank {local_rank} of {local_world} processes on "
                       "this node; a local rank is 0..local world size - 1")
    num_nodes = nodes or max(1, -(-world // local_world))
    if node is None:
        node = rank // local_world
    if not 0 <= node < num_nodes:
        raise BadValue(f"{launcher} environment says node {node} of {num_nodes} (world size {world} over "
                       f"{local_world} processes per node); check the node rank variable")
    worker, workers = local_worker()
    return WorkerInfo(rank, world, worker, workers, worker + workers * rank, workers * world,
                      node, num_nodes, local_rank, local_world, launcher)


def job_id() -> str | None:
    """What names this launch of the job, the same in all its ranks, or None when the launcher says nothing.

    torchrun's ``TORCHELASTIC_RUN_ID`` (unless it is the default ``none``),
    SLURM's job and step (``SLURM_JOB_ID``, ``SLURM_STEP_ID``: each srun is a
    launch), PMIx's namespace (Open MPI, MPICH). Checkpoints record it to tell
    their own job's ranks from an earlier job's.

    >>> import os
    >>> os.environ.update(SLURM_JOB_ID="812", SLURM_STEP_ID="0")
    >>> job_id()
    'slurm:812.0'
    >>> del os.environ["SLURM_JOB_ID"], os.environ["SLURM_STEP_ID"]
    """
    env = os.environ
    run = env.get("TORCHELASTIC_RUN_ID", "").strip()
    if run and run != "none":
        return f"torchrun:{run}"
    if env.get("SLURM_JOB_ID", "").strip():
        return f"slurm:{env['SLURM_JOB_ID'].strip()}.{env.get('SLURM_STEP_ID', '').strip()}"
    namespace = env.get("PMIX_NAMESPACE", "").strip()
    return f"pmix:{namespace}" if namespace else None
