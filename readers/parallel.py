"""Prefetch and parallel workers: prefetch, buffered, xmap_readers, multiprocess_reader.

All four stand on one worker pool (``readers.pool_consumer`` starts and merges
the workers, ``readers.pool_worker`` runs inside each): each pass starts its own
threads or processes and stops and joins them however it ends (exhausted,
failed, abandoned by break, ``close()`` or garbage collection, or Ctrl-C). A
worker's exception reaches the consumer with its type, message and traceback;
a process worker that dies is named with its signal or exit code, and can be
restarted from its last delivered entry. Arrays cross from process workers
through shared memory (``readers.shm``).
"""
from __future__ import annotations

import math
import multiprocessing
import operator
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from readers.checks import check_reader
from readers.identity import function_identity
from readers.launch import local_worker
from readers.maps import Mapped
from readers.pipeline import describe
from readers.pool_consumer import Pool, WorkerDiedError
from readers.sharding import Shard, follows_workers
from readers.stage import Reader, Stage

__all__ = ["Prefetch", "WorkerDiedError", "buffered", "multiprocess_reader", "prefetch", "xmap_readers"]

MODES = ("thread", "process")


def _count(value: Any, name: str, minimum: int | None = None, hint: str = "") -> int:
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}") from None
    if minimum is not None and n < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {n!r}; {hint}")
    return n


def _check_options(where: str, mode: str, start_method: str | None, restarts: Any) -> int:
    if mode not in MODES:
        raise ValueError(f"{where} mode must be 'thread' or 'process', got {mode!r}")
    methods = multiprocessing.get_all_start_methods()
    if start_method is not None and start_method not in methods:
        raise ValueError(f"{where} start_method must be one of {methods} or None, got {start_method!r}")
    restarts = _count(restarts, f"{where} restarts", 0, "it is how often a dead worker process may restart")
    if restarts and mode != "process":
        raise ValueError(f"{where} restarts={restarts} needs mode='process': threads cannot be killed alone")
    return restarts


def _contexts(n: int) -> list[tuple[int, int]]:
    """Worker contexts for n workers of this consumer: they split its share, so worker w of n in
    local worker o of m is local worker o + m * w of m * n (its entries are the consumer's w-th of n).
    """
    o, m = local_worker()
    return [(o + m * w, m * n) for w in range(n)]


class Prefetch(Stage):
    """``workers`` replicas of a reader in threads or processes, merged (see ``prefetch``)."""

    name = "prefetch"
    per_entry = "same"  # its entries are the reader's, unchanged: a shard above may split below it

    def __init__(self, reader: Reader, workers: int, mode: str, buffer_size: int | None, ordered: bool,
                 start_method: str | None, restarts: int):
        super().__init__(reader)
        self.workers, self.mode, self.buffer_size = workers, mode, buffer_size
        self.ordered, self.start_method, self.restarts = ordered, start_method, restarts
        self._last: list = []  # the latest pass's PassStats, shared with copies (see with_parents)
        self._warned: set = set()  # warnings its pools gave (a stuck thread's: once per stage)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_last": []}

    @property
    def reader(self) -> Reader:
        """The reader the workers run."""
        return self.parents[0]

    # -- how the work is split ------------------------------------------------
    def _job(self) -> Reader:
        """What every worker runs: ``self.reader`` (a worker split is the job's own shard's business)."""
        return self.reader

    def _splits(self) -> bool:
        """Whether this stage splits the pass by stride itself: unless a shard in it follows the workers."""
        return not follows_workers(self._job())

    def _jobs(self) -> tuple[list, list[str]]:
        """What each worker runs, and its name in errors."""
        n, job = self.workers, self._job()
        jobs = [Shard(job, w, n, None) for w in range(n)] if n > 1 and self._splits() else [job] * n
        return jobs, [f"{describe(job)}, {w + 1} of {n}" for w in range(n)]

    # -- positions ----------------------------------------------------------
    @property
    def positions(self) -> int | None:
        return 1 if self.ordered and self._splits() else None  # the round-robin merge gives the reader's order

    @property
    def unresumable(self) -> str | None:
        if not self.ordered:
            return f"{self.name}(ordered=False) yields entries as they are ready, in no fixed order; give ordered=True"
        if not self._splits():
            return (f"{self.name} runs a shard() that follows its workers, so entries come in the workers' "
                    "round-robin order, which no position of the source describes; drop that shard() "
                    "and let the workers split the pass")
        return None

    def __len__(self) -> int:
        return len(self.reader)

    # -- passes -------------------------------------------------------------
    def _seek(self, pass_id: int, cursor: int) -> Iterator:
        jobs, labels = self._jobs()
        pool = Pool(self.name, jobs, _contexts(len(jobs)), processes=self.mode == "process", ordered=self.ordered,
                    limit=self.buffer_size, labels=labels, start_method=self.start_method, restarts=self.restarts,
                    warned=self._warned)
        self._last[:] = [pool.stats]
        return pool.run(pass_id, [cursor] * len(jobs))

    def stats(self) -> dict | None:
        """Figures of the latest pass (the running one, or the last to end); None before any.

        Keys: ``mode``, ``workers``, ``entries`` (handed to the consumer so far), ``seconds``,
        ``entries_per_s``; ``input_wait``: the share of the workers' time spent
        waiting on the reader they run; ``output_wait``: the share spent
        blocked because the consumer had not taken what they made (the queue was
        full); ``consumer_wait``: the share of the pass the consumer spent
        waiting for entries; ``queue_fill``: how full the queues were, on
        average, as the consumer took from them (0 to 1); ``shm_bytes``:
        array bytes that crossed through shared memory; ``restarts``.

        >>> from readers import from_sequence
        >>> r = prefetch(from_sequence(range(100)), 2)
        >>> r.stats() is None
        True
        >>> len(list(r()))
        100
        >>> s = r.stats()
        >>> s["entries"], s["workers"], s["mode"]
        (100, 2, 'thread')
        """
        return self._last[0].summary() if self._last else None

    def identity(self) -> str:
        # in order, the workers change how fast the entries come, not which or in what order: a run
        # checkpointed with 2 workers resumes with 8
        return f"{self.name}()" if self.ordered else self.title()

    def _options(self) -> str:
        opts = f"{self.workers} {self.mode}{('es' if self.mode == 'process' else 's') if self.workers > 1 else ''}"
        opts += f", buffer_size={self.buffer_size}" if self.buffer_size is not None else ""
        opts += "" if self.ordered else ", ordered=False"
        opts += "" if self.start_method is None else f", start_method={self.start_method!r}"
        return opts + (f", restarts={self.restarts}" if self.restarts else "")


def prefetch(reader: Reader, workers: int = 1, *, mode: str = "thread", buffer_size: int | None = None,
             ordered: bool = True, start_method: str | None = None, restarts: int = 0) -> Prefetch:
    """Run ``reader`` ahead of the consumer in ``workers`` threads or processes, each with a share of the pass.

    Worker w of n runs ``reader`` inside its worker context (``worker_info()``
    says local worker w of n), and keeps entries w, w + n, w + 2n, ... of the
    pass: an index-addressed pipeline reads only those samples, a stream is
    read by every worker and every n-th entry kept (a ``map_readers`` on a
    stream is split below, so its work is divided too). With ``ordered=True``
    (the default) the workers' entries are merged round-robin, which gives
    exactly the entries and order of ``reader`` alone, so positions save and
    resume as usual; ``ordered=False`` yields them as they are ready.
    If ``reader`` has its own ``shard()`` that follows the workers, that shard
    splits the pass instead (by global worker id) and the merge is round-robin.

    ``mode="thread"`` suits work that releases the GIL (I/O, numpy, decoding)
    and lambdas; ``mode="process"`` runs Python-heavy work in parallel. Process
    workers start with ``start_method`` (None: fork when this process has no
    other threads, else spawn; spawned workers need readers built from
    module-level functions); their numpy arrays arrive through shared memory,
    not pickles. Each worker makes at most ``buffer_size`` entries ahead of
    the consumer (None: about 0.2 s of its output, at least 2, which keeps
    small entries cheap and large ones few; a map's function runs only on
    what the bound allows, over an index-addressed reader too). A worker's
    exception ends the pass with its type, message and traceback; a process
    worker that dies raises
    ``WorkerDiedError`` naming it and its signal, unless ``restarts`` allows
    starting it again from its last delivered entry (nothing lost or doubled).
    ``stats()`` reports the latest pass's throughput and waits.

    >>> from readers import from_sequence, map_readers
    >>> r = prefetch(map_readers(lambda x: x * x, from_sequence(range(8))), 2)
    >>> list(r())
    [0, 1, 4, 9, 16, 25, 36, 49]
    >>> r
    prefetch(2 threads)
    └─ map_readers(<lambda>)
       └─ from_sequence(range of 8)
    >>> sorted(prefetch(from_sequence("abc"), 3, ordered=False)())
    ['a', 'b', 'c']

    See Also:
        buffered, xmap_readers, multiprocess_reader, shard
    """
    check_reader(reader)
    workers = _count(workers, "prefetch workers", 1, "it is the number of worker threads or processes")
    if buffer_size is not None:
        buffer_size = _count(buffer_size, "prefetch buffer_size", 1,
                             "it bounds the entries each worker makes ahead; None for an automatic bound")
    restarts = _check_options("prefetch", mode, start_method, restarts)
    return Prefetch(reader, workers, mode, buffer_size, bool(ordered), start_method, restarts)


class Buffered(Prefetch):
    name = "buffered"

    def __init__(self, reader: Reader, size: int):
        super().__init__(reader, 1, "thread", max(size, 0), True, None, 0)  # 0: unbounded
        self.size = size

    def _jobs(self) -> tuple[list, list[str]]:
        return [self.reader], [describe(self.reader)]  # (one worker: it works for its consumer's worker)

    def _splits(self) -> bool:
        return True

    def _options(self) -> str:
        return f"size={self.size}" if self.size > 0 else "unbounded"


def buffered(reader: Reader, size: int) -> Buffered:
    """Prefetch ``reader``'s entries in a background thread, up to ``size`` ahead (order kept).

    ``size <= 0`` means unbounded. The thread starts when a pass is iterated and
    is joined when the pass ends or stops.

    >>> from readers import from_sequence
    >>> r = buffered(from_sequence(["a", None, ""]), 2)
    >>> list(r()), list(r())
    (['a', None, ''], ['a', None, ''])
    >>> r
    buffered(size=2)
    └─ from_sequence(list of 3)
    >>> def broken():
    ...     yield 1
    ...     raise ValueError("bad row 2")
    >>> list(buffered(broken, 4)())
    Traceback (most recent call last):
    ...
    ValueError: bad row 2

    See Also:
        prefetch, xmap_readers, multiprocess_reader
    """
    check_reader(reader)
    return Buffered(reader, _count(size, "buffered size"))


class XmapReaders(Prefetch):
    name = "xmap_readers"
    per_entry = "map"  # each entry is the mapper's of the reader's alone

    def __init__(self, mapper: Callable, reader: Reader, process_num: int, buffer_size: int, order: bool,
                 mode: str, start_method: str | None, restarts: int):
        super().__init__(reader, process_num, mode, math.ceil(buffer_size / process_num), order,
                         start_method, restarts)
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
        return opts + (f", restarts={self.restarts}" if self.restarts else "")


def xmap_readers(mapper: Callable, reader: Reader, process_num: int, buffer_size: int,
                 order: bool = False, *, mode: str = "thread", start_method: str | None = None,
                 restarts: int = 0) -> XmapReaders:
    """Apply ``mapper`` to ``reader``'s entries in ``process_num`` workers (threads unless ``mode="process"``).

    Threads by default, despite Paddle's name, so lambdas work; they pay off
    for mappers that release the GIL (I/O, decoding, numpy). ``mode="process"``
    runs pure-Python mappers in parallel (see ``prefetch`` for start methods,
    shared-memory arrays and restarts). Worker w maps entries w, w + n, ... of
    the pass; a stream is read by every worker. At most about ``buffer_size``
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
    ValueError: xmap_readers buffer_size must be at least 1, got 0; it bounds the entries in flight, e.g. give 2 * process_num

    See Also:
        prefetch, buffered, multiprocess_reader
    """
    if not callable(mapper):
        raise TypeError(f"xmap_readers mapper must be callable, got {type(mapper).__name__} {mapper!r}")
    check_reader(reader)
    process_num = _count(process_num, "xmap_readers process_num", 1, "it is the number of workers")
    buffer_size = _count(buffer_size, "xmap_readers buffer_size", 1,
                         "it bounds the entries in flight, e.g. give 2 * process_num")
    restarts = _check_options("xmap_readers", mode, start_method, restarts)
    return XmapReaders(mapper, reader, process_num, buffer_size, bool(order), mode, start_method, restarts)


class MultiprocessReader(Prefetch):
    name = "multiprocess_reader"

    def __init__(self, readers: tuple, use_pipe: bool, queue_size: int, start_method: str | None,
                 restarts: int):
        limit = max(1, math.ceil(queue_size / len(readers))) if queue_size > 0 else 0  # 0: unbounded
        super().__init__(readers[0], len(readers), "process", limit, False, start_method, restarts)
        self.parents, self.use_pipe, self.queue_size = readers, use_pipe, queue_size

    def _jobs(self) -> tuple[list, list[str]]:
        return list(self.parents), [describe(r) for r in self.parents]

    unresumable = "multiprocess_reader merges its readers in whatever order their entries arrive"

    def __len__(self) -> int:
        raise TypeError("multiprocess_reader has no length")

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
        raise TypeError(f"multiprocess_reader needs a list of readers, got {type(readers).__name__} "
                        f"{describe(readers)!r}; wrap a single reader in a list")
    if not readers:
        raise ValueError("multiprocess_reader needs at least one reader, got an empty list")
    for i, r in enumerate(readers):
        check_reader(r, f"multiprocess_reader readers[{i}]")
    restarts = _check_options("multiprocess_reader", "process", start_method, restarts)
    # Paddle's own test passes (readers, 100, use_pipe): any truthy use_pipe means pipes.
    return MultiprocessReader(tuple(readers), bool(use_pipe),
                              _count(queue_size, "multiprocess_reader queue_size"), start_method, restarts)
