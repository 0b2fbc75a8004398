"""What a run file may ask for: a step's windows bounded by the memory that trains them.

A state.toml's numbers are read as given (``readers.tokenized.runfiles``), and
any size passes that check: a global batch of 10**9 windows, or windows of
150,000 tokens. Such a run would spin or fail deep inside its first step, out
of memory. ``check_run`` refuses it before it starts, in one line naming the
key and the bound it exceeds: a step's share of the batch on this process,
times what one window takes in a training step (the model says:
``NextTokenMLP.window_bytes``), fits in the memory this process may still use
(``available_memory``). A global batch larger than the data's windows is
valid: a step reads sample p as entry p % N of pass p // N, so it wraps.

``available_memory`` is the one measure of free memory: the vocabulary check
of the training command (``train.commands.token_vocabulary``) uses it too.
"""
from __future__ import annotations

import os
from typing import Any

from readers.errors import BadValue
from readers.launch import worker_info
from readers.tokenized.runfile_fields import RunFileError

__all__ = ["available_memory", "check_run"]

BATCH_KEYS = ("config.global_batch_size_start", "config.global_batch_size_end")
SEQ_LEN_KEY = "model.LLM.max_seq_len"
#: Where the memory cgroups are mounted, and the file that names this process's groups.
CGROUP_ROOT, PROC_CGROUP = "/sys/fs/cgroup", "/proc/self/cgroup"


def _proc_kib(path: str, field: str) -> int | None:
    """A ``field: N kB`` line of a /proc file, in bytes; None where there is no such file or line."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _number(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
        return int(text) if text.isdigit() else None  # cgroup v2 writes "max" for no limit
    except OSError:
        return None


def _stat_field(path: str, field: str) -> int | None:
    """The value of a ``field N`` line of a cgroup's memory.stat, or None where there is no such file or line."""
    try:
        with open(path) as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == field:
                    return int(value)
    except (OSError, ValueError):
        pass
    return None


def _cgroup_room(root: str = CGROUP_ROOT, proc_cgroup: str = PROC_CGROUP) -> int | None:
    """What this process's memory cgroup (v2, else v1) still allows, or None where it sets no limit: its limit
    less its working set, the usage less the inactive file cache (``inactive_file`` in memory.stat on v2,
    ``total_inactive_file`` on v1), as kubelet counts it. The page cache of a corpus just read is in the usage,
    and the kernel drops it before it kills anything: counted as used, it would refuse valid runs.
    ``root``: where the cgroups are mounted; ``proc_cgroup``: the file naming this process's groups.

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> _ = open(f"{folder.name}/cgroup", "w").write("0::/\\n")
    >>> for name, text in [("memory.max", "1000"), ("memory.current", "900"), ("memory.stat", "inactive_file 300")]:
    ...     _ = open(f"{folder.name}/{name}", "w").write(text + "\\n")
    >>> _cgroup_room(folder.name, f"{folder.name}/cgroup")
    400
    """
    try:
        with open(proc_cgroup) as f:
            lines = [line.rstrip("\n").split(":", 2) for line in f]
    except OSError:
        return None
    for hierarchy, controllers, group in lines:
        if hierarchy == "0" and not controllers:
            places = (root + group, root)
            limit, used, inactive = "memory.max", "memory.current", "inactive_file"
        elif "memory" in controllers.split(","):
            places = (os.path.join(root, "memory") + group, os.path.join(root, "memory"))
            limit, used, inactive = "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"
        else:
            continue
        for place in places:  # (inside a container, the group's own folder is the root)
            cap = _number(os.path.join(place, limit))
            if cap is not None and cap < 1 << 60:
                usage = _number(os.path.join(place, used)) or 0
                cache = _stat_field(os.path.join(place, "memory.stat"), inactive) or 0
                return max(cap - max(usage - cache, 0), 0)
    return None


def _local_processes() -> int:
    """The processes of this job on this machine (a launcher's local world size), which share its memory."""
    try:
        return max(worker_info().local_world_size, 1)
    except BadValue:  # a malformed launcher environment is refused where the job reads it, not here
        return 1


def available_memory() -> int | None:
    """Bytes this process may still allocate: the least of its share of what the machine has available
    (MemAvailable, else its physical memory) and of its memory cgroup's room (``_cgroup_room``), a share
    being 1/n with n processes of the job on this machine (LOCAL_WORLD_SIZE), and the address-space limit
    (``ulimit -v``) less what the process has mapped. None where none of them is known. Every check that
    asks for free memory asks this function.

    >>> available_memory() is None or available_memory() >= 0
    True
    """
    shared = [_proc_kib("/proc/meminfo", "MemAvailable")]
    if shared[0] is None:
        try:
            shared[0] = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            pass
    shared.append(_cgroup_room())
    found = [n // _local_processes() for n in shared if n is not None]
    try:
        import resource  # (POSIX only)
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):
        soft = -1
    if soft >= 0 and soft != resource.RLIM_INFINITY:
        found.append(max(soft - (_proc_kib("/proc/self/status", "VmSize") or 0), 0))
    return min(found) if found else None


def _gib(n: int) -> str:
    return f"{n / (1 << 30):,.2f} GiB"


def check_run(run: Any, path: str, *, window_bytes: int, world_size: int = 1, memory: int | None = None) -> None:
    """Refuse the run ``run`` (``load_run``'s ``RunConfig`` of the file ``path``) if a step asks for more than
    the memory holds: a ``RunFileError`` naming the key and the bound.

    ``window_bytes`` is what one window takes in a training step;
    ``world_size``, the processes that share each step's batch; ``memory``,
    the bytes this process may use (default: ``available_memory()``). A
    batch larger than the data's windows is not refused: a step wraps
    around the data (``train.steps``).

    >>> from types import SimpleNamespace
    >>> run = SimpleNamespace(batch_start=8, batch_end=10**9, seq_len=4)
    >>> check_run(run, "state.toml", window_bytes=100, memory=1 << 30)
    Traceback (most recent call last):
    ...
    readers.tokenized.runfile_fields.RunFileError: state.toml: config.global_batch_size_end: is 1,000,000,000 windows a step: 1,000,000,000 windows of 5 tokens take about 93.13 GiB in a training step, more than the 1.00 GiB of memory this process may use; make it at most 10,737,418, or lower model.LLM.max_seq_len
    >>> check_run(SimpleNamespace(batch_start=8, batch_end=8, seq_len=4), "state.toml", window_bytes=100,
    ...           memory=1 << 30)
    """
    batches = list(zip(BATCH_KEYS, (run.batch_start, run.batch_end)))[::-1]  # the end first: it names a tie
    memory = available_memory() if memory is None else memory
    if memory is None:
        return
    if window_bytes > memory:
        raise RunFileError(path, SEQ_LEN_KEY, f"is {run.seq_len:,}: one window of {run.seq_len + 1:,} tokens takes "
                                              f"about {_gib(window_bytes)} in a training step, more than the "
                                              f"{_gib(memory)} of memory this process may use",
                           f"lower it to at most {run.seq_len * memory // window_bytes:,}")
    fit = memory // window_bytes * world_size  # the most windows a step's shares can hold
    key, size = max(batches, key=lambda pair: pair[1])
    if size > fit:
        share = -(-size // world_size)
        each = f" on each of {world_size} processes" if world_size > 1 else ""
        raise RunFileError(path, key, f"is {size:,} windows a step: {share:,} windows of {run.seq_len + 1:,} tokens "
                                      f"take about {_gib(share * window_bytes)} in a training step{each}, more than "
                                      f"the {_gib(memory)} of memory this process may use",
                           f"make it at most {fit:,}, or lower {SEQ_LEN_KEY}")
