"""What a run file may ask for: a step's windows bounded by the data that holds them and the memory that trains them.

A state.toml's numbers are read as given (``readers.tokenized.runfiles``), and
any size passes that check: a global batch of 10**9 windows, or windows of
150,000 tokens. Such a run would spin or fail deep inside its first step, out
of memory. ``check_run`` refuses it before it starts, in one line naming the
key and the bound it exceeds:

- a step reads each window of the data at most once, so the global batch
  (``global_batch_size_start`` and ``_end``) is at most the data's windows;
- a step's share of the batch on this process, times what one window takes
  in a training step (the model says: ``NextTokenMLP.window_bytes``), fits in
  the memory this process may still use (``available_memory``).
"""
from __future__ import annotations

import os
from typing import Any

from readers.tokenized.runfile_fields import RunFileError

__all__ = ["available_memory", "check_run"]

BATCH_KEYS = ("config.global_batch_size_start", "config.global_batch_size_end")
SEQ_LEN_KEY = "model.LLM.max_seq_len"


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


def _cgroup_room() -> int | None:
    """What this process's memory cgroup (v2, else v1) still allows, or None where it sets no limit."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = [line.rstrip("\n").split(":", 2) for line in f]
    except OSError:
        return None
    for hierarchy, controllers, group in lines:
        if hierarchy == "0" and not controllers:
            places, limit, used = ("/sys/fs/cgroup" + group, "/sys/fs/cgroup"), "memory.max", "memory.current"
        elif "memory" in controllers.split(","):
            places = ("/sys/fs/cgroup/memory" + group, "/sys/fs/cgroup/memory")
            limit, used = "memory.limit_in_bytes", "memory.usage_in_bytes"
        else:
            continue
        for place in places:  # (inside a container, the group's own folder is the root)
            cap = _number(os.path.join(place, limit))
            if cap is not None and cap < 1 << 60:
                return max(cap - (_number(os.path.join(place, used)) or 0), 0)
    return None


def available_memory() -> int | None:
    """Bytes this process may still allocate: the least of what the system has available (MemAvailable, else
    its physical memory), the address-space limit (``ulimit -v``) less what the process has mapped, and its
    memory cgroup's limit less its use. None where none of them is known.

    >>> available_memory() > 0
    True
    """
    found = [_proc_kib("/proc/meminfo", "MemAvailable")]
    if found[0] is None:
        try:
            found[0] = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            pass
    try:
        import resource  # (POSIX only)
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):
        soft = -1
    if soft >= 0 and soft != resource.RLIM_INFINITY:
        found.append(max(soft - (_proc_kib("/proc/self/status", "VmSize") or 0), 0))
    found.append(_cgroup_room())
    known = [n for n in found if n is not None]
    return min(known) if known else None


def _gib(n: int) -> str:
    return f"{n / (1 << 30):,.2f} GiB"


def check_run(run: Any, path: str, *, windows: int, window_bytes: int, world_size: int = 1,
              memory: int | None = None) -> None:
    """Refuse the run ``run`` (``load_run``'s ``RunConfig`` of the file ``path``) if a step asks for more than
    the data or the memory holds: a ``RunFileError`` naming the key and the bound.

    ``windows`` is the number of windows the data holds; ``window_bytes``,
    what one window takes in a training step; ``world_size``, the processes
    that share each step's batch; ``memory``, the bytes this process may use
    (default: ``available_memory()``).

    >>> from types import SimpleNamespace
    >>> run = SimpleNamespace(batch_start=8, batch_end=10**9, seq_len=4)
    >>> check_run(run, "state.toml", windows=1220, window_bytes=100, memory=1 << 30)
    Traceback (most recent call last):
    ...
    readers.tokenized.runfile_fields.RunFileError: state.toml: config.global_batch_size_end: is 1,000,000,000 windows a step, more than the 1,220 windows the data holds (a step reads each window once at most); make it at most 1,220, or give the run more data
    >>> check_run(SimpleNamespace(batch_start=8, batch_end=8, seq_len=4), "state.toml", windows=1220, window_bytes=100,
    ...           memory=1 << 30)
    """
    batches = list(zip(BATCH_KEYS, (run.batch_start, run.batch_end)))[::-1]  # the end first: it names a tie
    for key, size in batches:
        if size > windows:
            raise RunFileError(path, key, f"is {size:,} windows a step, more than the {windows:,} "
                                          f"window{'s' if windows != 1 else ''} the data holds (a step reads each "
                                          "window once at most)",
                               f"make it at most {windows:,}, or give the run more data")
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
