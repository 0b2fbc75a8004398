"""Paddle's parallel decorators, xmap_readers and multiprocess_reader, on prefetch's worker pool.

``xmap_readers`` maps entries in worker threads or processes; ``multiprocess_reader``
runs each of several readers in its own process. Both are ``readers.workers.prefetch.Prefetch``
stages, so they share its workers, errors, restarts, shared-memory arrays and stats.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from readers.checks import check_reader
from readers.errors import BadType, BadValue
from readers.graph import describe
from readers.identity import function_identity
from readers.ops.maps import Mapped
from readers.stage import Reader
from readers.workers.prefetch import Prefetch, check_options, count_option

__all__ = ["multiprocess_reader", "xmap_readers"]


class XmapReaders(Prefetch):
    name = "xmap_readers"
    per_entry = "map"  # each entry is the mapper's of the reader's alone

    def __init__(self, mapper: Callable, reader: Reader, process_num: int, buffer_size: int, order: bool,
                 mode: str, start_method: str | None, restarts: int, persistent: bool = False):
        super().__init__(reader, process_num, mode, math.ceil(buffer_size / process_num), order,
                         start_method, restarts, persistent)
        self.mapper, self.process_num, self.total_buffer = mapper, process_num, buffer_size

    def _job(self) -> Reader:
        return Mapped(self.mapper, self.reader)

    @property
    def unresumable(self) -> str | None:
        if not self.ordered:
            return "xmap_readers(order=False) yields entries as they finish, in no fixed order; give order=True"
        return super().unresumable

    def identity(self) -> str:
        # the mapper's code is what the data is; in order, the workers change only how fast it comes
        mapper = function_identity(self.mapper)
        return f"{self.name}({mapper})" if self.ordered else f"{self.name}({self._options(mapper)})"

    def _options(self, mapper: str | None = None) -> str:
        opts = (f"{mapper or describe(self.mapper)}, process_num={self.process_num}, "
                f"buffer_size={self.total_buffer}, order={self.ordered}")
        opts += "" if self.mode == "thread" else f", mode={self.mode!r}"
        opts += "" if self.start_method is None else f", start_method={self.start_method!r}"
        opts += f", restarts={self.restarts}" if self.restarts else ""
        return opts + (", persistent=True" if self.persistent else "")


def xmap_readers(mapper: Callable, reader: Reader, process_num: int, buffer_size: int,
                 order: bool = False, *, mode: str = "thread", start_method: str | None = None,
                 restarts: int = 0, persistent: bool = False) -> XmapReaders:
    """Apply ``mapper`` to ``reader``'s entries in ``process_num`` workers (threads unless ``mode="process"``).

    Threads by default, despite Paddle's name, so lambdas work; they pay off
    for mappers that release the GIL (I/O, decoding, numpy). ``mode="process"``
    runs pure-Python mappers in parallel (see ``prefetch`` for start methods,
    shared-memory arrays, restarts, and ``persistent=True``, which keeps the
    worker processes between passes). Worker w maps entries w, w + n, ... of
    the pass (process workers over an index-addressed reader: the blocks they
    are dealt, see ``prefetch``); a stream is read by every worker. At most about ``buffer_size``
    entries are ready ahead of the consumer. ``order=True`` yields results in
    input order, otherwise as they are ready. An exception in the mapper or
    the source ends the pass with that exception.

    >>> from readers import from_sequence
    >>> r = xmap_readers(lambda x: x * 10, from_sequence(range(5)), 2, 4, order=True)
    >>> list(r())
    [0, 10, 20, 30, 40]
    >>> sorted(xmap_readers(abs, from_sequence([-2, 1, -3]), 3, 2)())
    [1, 2, 3]
    >>> xmap_readers(abs, from_sequence([1]), 2, 0)
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: xmap_readers buffer_size must be at least 1, got 0; it bounds the entries in flight, e.g. give 2 * process_num

    See Also:
        prefetch, buffered, multiprocess_reader
    """
    if not callable(mapper):
        raise BadType(f"xmap_readers mapper must be callable, got {type(mapper).__name__} {mapper!r}")
    check_reader(reader)
    process_num = count_option(process_num, "xmap_readers process_num", 1, "it is the number of workers")
    buffer_size = count_option(buffer_size, "xmap_readers buffer_size", 1,
                         "it bounds the entries in flight, e.g. give 2 * process_num")
    restarts = check_options("xmap_readers", mode, start_method, restarts, persistent)
    return XmapReaders(mapper, reader, process_num, buffer_size, bool(order), mode, start_method, restarts,
                       bool(persistent))


class MultiprocessReader(Prefetch):
    name = "multiprocess_reader"
    deals = False  # each worker runs a reader of its own

    def __init__(self, readers: tuple, use_pipe: bool, queue_size: int, start_method: str | None,
                 restarts: int):
        limit = max(1, math.ceil(queue_size / len(readers))) if queue_size > 0 else 0  # 0: unbounded
        super().__init__(readers[0], len(readers), "process", limit, False, start_method, restarts)
        self.parents, self.use_pipe, self.queue_size = readers, use_pipe, queue_size

    def _jobs(self) -> tuple[list, list[str]]:
        return list(self.parents), [describe(r) for r in self.parents]

    unresumable = "multiprocess_reader merges its readers in whatever order their entries arrive"

    def __len__(self) -> int:
        raise BadType("multiprocess_reader has no length")

    def _options(self) -> str:
        n = len(self.parents)
        opts = f"{n} reader{'' if n == 1 else 's'}, use_pipe={self.use_pipe}"
        opts += "" if self.use_pipe else f", queue_size={self.queue_size}"
        opts += "" if self.start_method is None else f", start_method={self.start_method!r}"
        return opts + (f", restarts={self.restarts}" if self.restarts else "")


def multiprocess_reader(readers: Sequence[Reader], use_pipe: bool = True, queue_size: int = 1000,
                        *, start_method: str | None = None, restarts: int = 0) -> MultiprocessReader:
    """Run each reader in its own process and merge their entries as they arrive.

    Each reader's order is kept; the order across readers is not. Reader i
    runs as local worker i of n (``readers.worker_info``), so a ``shard()`` in
    it takes that worker's share. Workers send entries through pipes, arrays
    through shared memory; ``queue_size`` bounds the entries made ahead
    (``<= 0``: no bound); ``use_pipe`` is accepted for Paddle's signature (every
    worker has its own pipe). ``start_method`` picks the multiprocessing start
    method (None: fork when safe, else spawn; unless forked, the workers get
    pickled readers, so build them from module-level functions). A worker's
    exception is re-raised with its type and message, chained from the
    worker's traceback; a worker that dies first raises ``WorkerDiedError``,
    or is started again from its last delivered entry, up to ``restarts`` times.

    >>> from readers import from_sequence
    >>> r = multiprocess_reader([from_sequence([1, 2]), from_sequence([3, None])])
    >>> sorted(r(), key=str)
    [1, 2, 3, None]

    See Also:
        prefetch, buffered, xmap_readers
    """
    if not isinstance(readers, (list, tuple)):
        raise BadType(f"multiprocess_reader needs a list of readers, got {type(readers).__name__} "
                      f"{describe(readers)!r}; wrap a single reader in a list")
    if not readers:
        raise BadValue("multiprocess_reader needs at least one reader, got an empty list")
    for i, r in enumerate(readers):
        check_reader(r, f"multiprocess_reader readers[{i}]")
    restarts = check_options("multiprocess_reader", "process", start_method, restarts)
    # Paddle's own test passes (readers, 100, use_pipe): any truthy use_pipe means pipes.
    return MultiprocessReader(tuple(readers), bool(use_pipe),
                              count_option(queue_size, "multiprocess_reader queue_size"), start_method, restarts)
