"""Keep per-batch arrays on the heap: glibc malloc tuning for steady minibatch churn.

A training loop allocates and frees arrays of a few hundred KB per batch
(a stacked column, its float32 copy). glibc serves those with mmap or
returns them to the system at once, so every batch pays fresh page faults:
measured here, a shuffle -> batch -> float32 pipeline ran 2.5x slower for
it. Raising the mmap and trim thresholds keeps such blocks in the heap.

Nothing does this behind your back: ``train()`` and the command line call
``tune_allocator()`` once before their first pass, and a loop of your own
can call it too. It changes the whole process's allocator, so it is left
alone when the user has set glibc's ``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_`` or ``MALLOC_TOP_PAD_``, or ``READERKIT_MALLOC=system``.
"""
from __future__ import annotations

import os
import sys

__all__ = ["tune_allocator"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_GLIBC_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")
_tuned: list[bool] = []  # the outcome, once tune_allocator has run in this process


def _set_thresholds(mmap_threshold: int, trim_threshold: int) -> bool:
    """Raise glibc's mmap and trim thresholds; True when applied (glibc only)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes  # here, not at import: ctypes.util alone costs more than the rest of this module
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others have no mallopt
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok = mallopt(_M_MMAP_THRESHOLD, int(mmap_threshold)) == 1
    return mallopt(_M_TRIM_THRESHOLD, int(trim_threshold)) == 1 and ok


def tune_allocator(*, mmap_threshold: int = 32 << 20, trim_threshold: int = 64 << 20) -> bool:
    """Tune glibc malloc for minibatch churn, once per process; True when the tuning is in effect.

    Arrays up to ``mmap_threshold`` bytes come from the heap, and the process
    keeps up to ``trim_threshold`` bytes of freed heap for reuse instead of
    handing it back to the system after every batch. Does nothing (and
    returns False) with ``READERKIT_MALLOC=system``, when glibc's
    ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` or
    ``MALLOC_TOP_PAD_`` is set, or off glibc. Only the first call in a process
    acts: later ones, whatever their thresholds, report its outcome.
    ``train()`` and the command line call it; call it yourself before a
    training loop of your own.

    >>> tune_allocator() in (True, False)
    True
    >>> tune_allocator() == tune_allocator()  # once: later calls report the first one's outcome
    True
    """
    if not _tuned:
        opted_out = os.environ.get("READERKIT_MALLOC", "").lower() == "system"
        opted_out = opted_out or any(name in os.environ for name in _GLIBC_VARIABLES)
        _tuned.append(not opted_out and _set_thresholds(mmap_threshold, trim_threshold))
    return _tuned[0]
