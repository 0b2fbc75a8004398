"""Zero-copy arrays between processes: one shared-memory ring per worker process.

A worker pickles its entries with protocol 5; every array buffer of at least
``INLINE_BELOW`` bytes is written once into the worker's ring instead of the
pickle, and the consumer rebuilds the arrays as views of the ring, so the bytes
are never pickled, piped or copied again. A ring region is reused only once
every array of its message is garbage, which a ``weakref.finalize`` on the
message's own view of the ring tells. A full ring (entries kept alive by the
consumer) never blocks a worker: the array is pickled in-band instead.

The ring is an anonymous memory file (``memfd_create``), never a name in
``/dev/shm``: it is passed to the worker as a file descriptor, is unmapped when
the last array that views it is freed, and the kernel reclaims it even if every
process is killed. Where memory files do not exist, arrays travel in-band.

Pickling an array costs microseconds, more than copying a small one, so a
message of entries that share a layout (tuples whose columns hold arrays of
one shape and dtype, like MNIST's ``(image, label)``) is folded into columns
first: one stacked array per such column, one copy into the ring, and the
consumer's entries view rows of it (``fold``, ``unfold``).

The ring's first bytes hold two counters: where the consumer has freed up to
(written by the consumer) and how many entries the worker has made (written by
the worker, read for queue-fill figures).
"""
from __future__ import annotations

import collections
import mmap
import os
import pickle
import threading
import weakref
from multiprocessing import reduction
from typing import Any

import numpy as np

__all__ = ["INLINE_BELOW", "RingReader", "RingWriter", "SharedFd", "available", "fold", "pack", "unfold", "unpack",
           "unpicklable"]

INLINE_BELOW = 512  # bytes: smaller arrays cost less to pickle in-band than to place in the ring
RING_BYTES = 64 << 20  # per worker process; pages cost memory only once written
_HEADER = 64  # int64 [0]: freed up to (consumer), [1]: entries made (worker)
_ALIGN = 64


def available() -> bool:
    """Whether this platform has anonymous memory files for the rings.

    >>> isinstance(available(), bool)
    True
    """
    return hasattr(os, "memfd_create")


class SharedFd:
    """A file descriptor handed to a worker process, whatever its start method.

    Forked workers inherit the number; spawned ones get a duplicate through
    multiprocessing's own descriptor passing when the process object is pickled.
    """

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self) -> tuple:
        return _rebuild_fd, (reduction.DupFd(self.fd),)


def _rebuild_fd(dup: Any) -> SharedFd:
    return SharedFd(dup.detach())


class RingWriter:
    """The worker's side: allocate regions at the head and copy array bytes into them."""

    def __init__(self, fd: SharedFd, size: int, head: int):
        self.mm = mmap.mmap(fd.fd, size)
        os.close(fd.fd)  # the mapping keeps the memory
        self.view = memoryview(self.mm)
        self.counters = np.frombuffer(self.mm, np.int64, count=2)
        self.capacity, self.head = size - _HEADER, head

    def alloc(self, nbytes: int) -> int | None:
        """Offset of ``nbytes`` free bytes in the mapping, or None when the ring is full."""
        size = -(-nbytes // _ALIGN) * _ALIGN
        at = self.head % self.capacity
        gap = self.capacity - at if at + size > self.capacity else 0  # a region never wraps
        if self.head + gap + size - int(self.counters[0]) > self.capacity:
            return None
        self.head += gap + size
        return _HEADER + (0 if gap else at)

    def close(self) -> None:
        self.view.release()
        del self.counters
        self.mm.close()


def pack(message: tuple, ring: RingWriter | None) -> bytes:
    """``message`` as bytes; its large array buffers go into ``ring`` when there is room."""
    regions: list[tuple[int, int]] = []
    start = ring.head if ring is not None else 0

    def place(buf: pickle.PickleBuffer) -> bool:
        try:
            raw = buf.raw()
        except BufferError:  # not contiguous: pickle it in-band
            return True
        if raw.nbytes < INLINE_BELOW:
            return True
        at = ring.alloc(raw.nbytes)
        if at is None:
            return True
        ring.view[at:at + raw.nbytes] = raw
        regions.append((at, raw.nbytes))
        return False

    try:
        body = pickle.dumps(message, 5, buffer_callback=None if ring is None else place)
    except BaseException:
        if ring is not None:
            ring.head = start  # the regions placed so far belong to no message: reuse them
        raise
    where = pickle.dumps((start, ring.head if ring is not None else 0, regions), 5)
    return len(where).to_bytes(4, "little") + where + body


def unpicklable(obj: Any, depth: int = 0) -> str | None:
    """What in ``obj`` cannot be pickled, so cannot cross to another process; None when it all can.

    >>> import threading
    >>> unpicklable((np.zeros(2), {"lock": threading.Lock()})), unpicklable([1, "a", np.zeros(2)])
    ("a tuple whose item 1 is a dict whose item 'lock' is a _thread.lock", None)
    """
    try:
        pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)
        return None
    except Exception:
        pass
    kind = type(obj)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    items = enumerate(obj) if kind in (tuple, list) else obj.items() if kind is dict else ()
    for key, value in items if depth < 4 else ():
        if (inner := unpicklable(value, depth + 1)) is not None:
            return f"a {name} whose item {key!r} is {inner}"
    return f"a {name}"


class RingReader:
    """The consumer's side: one worker's ring, handing out views and taking freed regions back."""

    def __init__(self, size: int = RING_BYTES):
        self.fd = os.memfd_create("readerkit-ring", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, size)
            self.mm = mmap.mmap(self.fd, size)
        except BaseException:
            os.close(self.fd)
            raise
        self.size = size
        self.counters = np.frombuffer(self.mm, np.int64, count=2)
        self.tail = self.seen = 0  # freed up to; end of the last region handed out
        self._freed: collections.deque = collections.deque()  # appended to from finalizers, any thread
        self._ends: dict[int, int] = {}
        self._lock = threading.Lock()

    def made(self) -> int:
        """Entries the worker has made so far (it counts them in the ring's header)."""
        return int(self.counters[1])

    def views(self, start: int, end: int, regions: list) -> list:
        """Views of ``regions``, all freed together once the last array built on them is gone."""
        self.seen = max(self.seen, end)
        if not regions:  # nothing was placed (start == end): nothing to free
            return []
        owner = np.frombuffer(self.mm, np.uint8)  # one per message: its finalizer frees the regions
        weakref.finalize(owner, self._freed.append, (start, end))
        return [owner[at:at + n] for at, n in regions]

    def collect(self) -> None:
        """Move the tail past regions whose arrays are gone, for the worker to reuse."""
        if not self._lock.acquire(blocking=False):
            return  # another thread is at it; the next call catches up
        try:
            while self._freed:
                start, end = self._freed.popleft()
                self._ends[start] = end
            while self.tail in self._ends:
                self.tail = self._ends.pop(self.tail)
            self.counters[0] = self.tail
        finally:
            self._lock.release()

    def restart_at(self) -> int:
        """Where a restarted worker's head starts: past every region already handed out."""
        return self.seen  # (the tail never passes it: only handed-out regions are freed)

    def close(self) -> None:
        """Close the descriptor; the mapping goes when the last array viewing it does."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        del self.counters
        self.mm = None


def unpack(data: bytes, ring: RingReader | None) -> Any:
    """The message ``pack`` made, its arrays viewing ``ring``."""
    data = memoryview(data)
    n = int.from_bytes(data[:4], "little")
    start, end, regions = pickle.loads(data[4:4 + n])
    buffers = ring.views(start, end, regions) if ring is not None else []
    return pickle.loads(data[4 + n:], buffers=buffers)


class Folded:
    """A message's entries as columns: ``width`` None for bare arrays, else tuples of that width."""

    __slots__ = ("width", "columns")

    def __init__(self, width: int | None, columns: list):
        self.width, self.columns = width, columns

    def __reduce__(self) -> tuple:
        return Folded, (self.width, self.columns)


def _stack(arrays: Any) -> np.ndarray | None:
    """``arrays`` stacked, when they are plain arrays (not 0-d, not of objects) of one shape and dtype.

    The rows come back C-ordered and writable, as any copy would.
    """
    first = arrays[0]
    if type(first) is not np.ndarray or first.ndim == 0 or first.dtype.hasobject:
        return None
    if not all(type(a) is np.ndarray for a in arrays) or {(a.shape, a.dtype) for a in arrays} != {
            (first.shape, first.dtype)}:
        return None
    return np.array(arrays)


def fold(entries: list) -> list | Folded:
    """``entries`` as columns with stacked arrays when they share a layout, else as they are.

    >>> import numpy as np
    >>> folded = fold([(np.zeros(3), 1), (np.ones(3), 2)])
    >>> folded.width, folded.columns[0].shape, folded.columns[1]
    (2, (2, 3), (1, 2))
    >>> fold([(np.zeros(3), 1), (np.ones(4), 2)])[1][0].shape  # shapes differ: left as it is
    (4,)
    """
    if len(entries) < 2:
        return entries
    first = entries[0]
    if type(first) is np.ndarray:
        stacked = _stack(entries)
        return entries if stacked is None else Folded(None, [stacked])
    if type(first) is not tuple:
        return entries
    width = len(first)
    if not all(type(e) is tuple and len(e) == width for e in entries):
        return entries
    columns: list = list(zip(*entries))
    folded = False
    for k, column in enumerate(columns):
        if type(column[0]) is np.ndarray and (stacked := _stack(column)) is not None:
            columns[k], folded = stacked, True
    return Folded(width, columns) if folded else entries


def unfold(message: list | Folded) -> list:
    """The entries ``fold`` folded; arrays come back as rows (views) of the stacked ones.

    >>> import numpy as np
    >>> entries = unfold(fold([(np.zeros(3), 1), (np.ones(3), 2)]))
    >>> [(type(x).__name__, x.tolist(), y) for x, y in entries]
    [('ndarray', [0.0, 0.0, 0.0], 1), ('ndarray', [1.0, 1.0, 1.0], 2)]
    """
    if type(message) is not Folded:
        return message
    columns = [list(c) for c in message.columns]  # iterating a stacked array gives its rows
    return columns[0] if message.width is None else list(zip(*columns))
