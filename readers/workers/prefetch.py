"""Prefetch and parallel workers: prefetch and buffered (Paddle's xmap_readers and multiprocess_reader,
on the same pool, are in ``readers.workers.paddle``).

All stand on one worker pool (``readers.workers.consumer`` starts and merges
the workers, ``readers.workers.worker`` runs inside each): each pass starts its own
threads or processes and stops and joins them however it ends (exhausted,
failed, abandoned by break, ``close()`` or garbage collection, or Ctrl-C). A
worker's exception reaches the consumer with its type, message and traceback;
a process worker that dies is named with its signal or exit code, and can be
restarted from its last delivered entry. Arrays cross from process workers
through shared memory (``readers.workers.shared_memory``).
"""
from __future__ import annotations

import multiprocessing
import operator
import weakref
from collections.abc import Iterator
from typing import Any

from readers.checks import check_reader
from readers.errors import BadType, BadValue, ReaderkitError
from readers.graph import Node, Share, describe, walk
from readers.launch import local_worker, worker_context
from readers.ops.sharding import Shard, follows_workers
from readers.parents import access_of
from readers.stage import Reader, Stage
from readers.workers.consumer import Pool, WorkerDiedError, merged_cursors
from readers.workers.persistent import Keeper

__all__ = ["Prefetch", "WorkerDiedError", "buffered", "check_options", "count_option", "prefetch"]

MODES = ("thread", "process")
NO_SHARE = Share(0, 1, False)


def count_option(value: Any, name: str, minimum: int | None = None, hint: str = "") -> int:
    """``value`` as an int option named ``name``, at least ``minimum``; ``hint`` says what it is.

    >>> count_option(4, "prefetch workers", 1)
    4
    >>> count_option(0, "prefetch workers", 1, "it is the number of workers")
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: prefetch workers must be at least 1, got 0; it is the number of workers
    """
    try:
        n = operator.index(value)
    except TypeError:
        raise BadType(f"{name} must be an int, got {type(value).__name__} {value!r}") from None
    if minimum is not None and n < minimum:
        raise BadValue(f"{name} must be at least {minimum}, got {n!r}; {hint}")
    return n


def check_options(where: str, mode: str, start_method: str | None, restarts: Any, persistent: bool = False) -> int:
    """Check the worker options every parallel decorator takes; the number of restarts allowed.

    >>> check_options("prefetch", "process", None, 2)
    2
    >>> check_options("prefetch", "thread", None, 1)
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: prefetch restarts=1 needs mode='process': threads cannot be killed alone
    """
    if persistent and mode != "process":
        raise BadValue(f"{where} persistent=True keeps worker processes between passes, so it needs "
                       f"mode='process' (got mode={mode!r}); threads start in microseconds and are not kept")
    if mode not in MODES:
        raise BadValue(f"{where} mode must be 'thread' or 'process', got {mode!r}")
    methods = multiprocessing.get_all_start_methods()
    if start_method is not None and start_method not in methods:
        raise BadValue(f"{where} start_method must be one of {methods} or None, got {start_method!r}")
    restarts = count_option(restarts, f"{where} restarts", 0, "it is how often a dead worker process may restart")
    if restarts and mode != "process":
        raise BadValue(f"{where} restarts={restarts} needs mode='process': threads cannot be killed alone")
    return restarts


def _contexts(n: int) -> list[tuple[int, int]]:
    """Worker contexts for n workers of this consumer: they split its share, so worker w of n in
    local worker o of m is local worker o + m * w of m * n (its entries are the consumer's w-th of n).
    """
    o, m = local_worker()
    return [(o + m * w, m * n) for w in range(n)]


def _length(job: Any) -> int | None:
    """The entries of a pass of ``job``, where it says."""
    try:
        return len(job)
    except Exception:  # noqa: BLE001 - a reader without a length (or one that cannot tell here)
        return None


class Prefetch(Stage):
    """``workers`` replicas of a reader in threads or processes, merged (see ``prefetch``)."""

    name = "prefetch"
    deals = True  # whether its process workers may make dealt blocks (see _deals)
    per_entry = "same"  # its entries are the reader's, unchanged: a shard above may split below it

    def __init__(self, reader: Reader, workers: int, mode: str, buffer_size: int | None, ordered: bool,
                 start_method: str | None, restarts: int, persistent: bool = False):
        super().__init__(reader)
        self.workers, self.mode, self.buffer_size = workers, mode, buffer_size
        self.ordered, self.start_method, self.restarts = ordered, start_method, restarts
        self.persistent = persistent
        self._last: list = []  # the latest pass's PassStats, shared with copies (see with_parents)
        self._warned: set = set()  # warnings its pools gave (a stuck thread's: once per stage)
        self._keeper: Keeper | None = None  # its kept workers (persistent process workers), its own
        self._keepers: list = []  # its keeper and its copies' (see with_parents): close() closes them all
        self._made: tuple | None = None  # the jobs of its workers and their names (see _jobs)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_last": [], "_keeper": None, "_keepers": [], "_made": None}

    def with_parents(self, *parents: Any) -> Prefetch:
        """A copy that reads ``parents`` instead; it keeps workers of its own (they run other jobs).

        >>> from readers import from_sequence
        >>> list(prefetch(from_sequence("ab"), 2).with_parents(from_sequence("cd"))())
        ['c', 'd']
        """
        new = super().with_parents(*parents)
        new._keeper, new._made = None, None
        return new  # type: ignore[return-value]

    def close(self) -> None:
        """Stop the worker processes ``persistent=True`` keeps (a pass running now: as it ends).

        This includes those of the copies a ``shard()`` above runs. A later pass
        starts new ones; closing a reader that keeps none does nothing.
        Also ``with prefetch(...) as r:`` closes ``r`` at the end of the block.

        >>> from readers import from_sequence
        >>> with prefetch(from_sequence(range(3)), 2, mode="process", persistent=True) as r:
        ...     list(r()), list(r())
        ([0, 1, 2], [0, 1, 2])
        """
        for keeper in list(self._keepers):
            keeper.close()

    def __enter__(self) -> Prefetch:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _kept(self) -> Keeper | None:
        """This stage's keeper of process workers, made at its first pass; None unless persistent processes."""
        if not (self.persistent and self.mode == "process"):
            return None
        if self._keeper is None:
            self._keeper = Keeper()
            self._keepers.append(self._keeper)
            weakref.finalize(self, self._keeper.close)  # garbage-collected, or the interpreter exits
        return self._keeper

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
        """What each worker runs, and its name in errors: the same objects every pass, so that what a
        job keeps between passes (a persistent prefetch inside it) is kept. Workers of dealt blocks
        (``_deals``) each run the whole job, a block at a time."""
        if self._made is None:
            n, job = self.workers, self._job()
            split = n > 1 and self._splits() and not self._deals()
            jobs = [Shard(job, w, n, None) for w in range(n)] if split else [job] * n
            self._made = jobs, [f"{describe(job)}, {w + 1} of {n}" for w in range(n)]
        return self._made

    # -- positions ----------------------------------------------------------
    @property
    def positions(self) -> int | None:
        return 1 if self.ordered and self._splits() else None  # the round-robin merge gives the reader's order

    def in_workers(self) -> list[tuple[int, int]] | None:
        # the shares below follow the workers only when this stage does not split the pass itself
        return None if self._splits() else _contexts(self.workers)

    def _counter(self) -> Node | None:
        """The source under the job's maps that splits its files by worker and counts its share
        (``share_count``): then each worker's position follows from the merged one. None if there is none."""
        stage = self._job()
        while isinstance(stage, Node) and stage.positions == 1 and stage.share() is None:
            stage = stage.parents[0]
        if isinstance(stage, Node) and stage.positions is None and stage.share_count(0, 0) is not None:
            return stage
        return None

    @property
    def unresumable(self) -> str | None:
        if not self.ordered:
            return f"{self.name}(ordered=False) yields entries as they are ready, in no fixed order; give ordered=True"
        if self._splits() or self._counter() is not None:
            return None
        stage = next(s for s in walk(self._job()) if isinstance(s, Node) and (s.share() or NO_SHARE).follows_workers)
        if isinstance(stage, Shard):
            return (f"{self.name} runs a shard() that follows its workers, so entries come in the workers' "
                    "round-robin order, which no position of the source describes; drop that shard() "
                    "and let the workers split the pass")
        return (f"{self.name} runs {describe(stage)}, which splits the pass by worker itself, under a stage "
                "that does not keep one entry per entry; put that stage above the prefetch (only maps "
                "between the two), so each worker's position can be counted")

    def __len__(self) -> int:
        return len(self.reader)

    # -- passes -------------------------------------------------------------
    def _deals(self) -> bool:
        """Whether process workers make blocks of positions dealt as they go (``Pool``'s blocks, as
        ``multiprocessing.Pool.imap`` deals chunks), not fixed shares: with several workers, no restarts,
        where the job's passes are index plans (a block skips indices, not entries) and nothing in the
        job follows the workers."""
        if not (self.deals and self.mode == "process" and self.workers > 1 and not self.restarts and self._splits()):
            return False
        job = stage = self._job()
        while isinstance(stage, Node) and stage.positions == 1:  # (a map's cursor is its parent's)
            stage = stage.parents[0]
        # a block's positions must be its entries: the job's cursor counts entries, not k positions each (a shard)
        return access_of(job) != "stream" and not (isinstance(stage, Node) and stage.positions is not None)

    def _seek(self, pass_id: int, cursor: int) -> Iterator:
        blocks = self._deals()
        jobs, labels = self._jobs()
        pool = Pool(self.name, jobs, _contexts(len(jobs)), processes=self.mode == "process", ordered=self.ordered,
                    limit=self.buffer_size, labels=labels, start_method=self.start_method, restarts=self.restarts,
                    warned=self._warned, keeper=self._kept(), blocks=blocks, length=_length(jobs[0]) if blocks else None)
        self._last[:] = [pool.stats]
        if blocks:
            return pool.run(pass_id, [cursor] * len(jobs))
        if self._splits() or not cursor:
            return pool.run(pass_id, [cursor] * len(jobs))
        # each worker reads its own share: the merged cursor gives each worker's, from their lengths
        counter, contexts = self._counter(), _contexts(len(jobs))
        if counter is None:  # unresumable said why
            raise BadValue(f"cannot resume {describe(self)} at {cursor}: {self.unresumable}")

        def count(w: int, limit: int) -> int:
            with worker_context(*contexts[w]):
                return counter.share_count(pass_id, limit)
        try:
            cursors, first = merged_cursors(cursor, len(jobs), count)
        except ReaderkitError as exc:
            raise BadValue(f"cannot resume {describe(self)}: {exc}; the state was saved from other data") from None
        return pool.run(pass_id, cursors, first)

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
        opts += f", restarts={self.restarts}" if self.restarts else ""
        return opts + (", persistent" if self.persistent else "")


def prefetch(reader: Reader, workers: int = 1, *, mode: str = "thread", buffer_size: int | None = None,
             ordered: bool = True, start_method: str | None = None, restarts: int = 0,
             persistent: bool = False) -> Prefetch:
    """Run ``reader`` ahead of the consumer in ``workers`` threads or processes, each with a share of the pass.

    Worker w of n runs ``reader`` inside its worker context (``worker_info()``
    says local worker w of n), and keeps entries w, w + n, w + 2n, ... of the
    pass: an index-addressed pipeline reads only those samples, a stream is
    read by every worker and every n-th entry kept (a ``map_readers`` on a
    stream is split below, so its work is divided too). Process workers of an
    index-addressed pipeline are instead dealt blocks of consecutive entries
    as they finish the earlier ones (as ``multiprocessing.Pool.imap`` deals
    chunks), so a worker on a slower core makes fewer; not with ``restarts``. With ``ordered=True``
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

    ``persistent=True`` keeps process workers alive between passes (as
    torch's ``persistent_workers``): the next pass is a message to each, not a
    process start (which costs about 0.2-0.5 s under spawn, the start method in
    notebooks and after torch). Every pass still gets its own pass id and
    seeds, so its entries and order are those of a fresh start, and
    ``set_state`` resumes as usual; a pass abandoned midway (``break``,
    Ctrl-C) is cancelled before the next begins. The workers run the reader
    as it was when they started, so change no reader between passes. A pass
    started while an earlier pass's iterator is still open gets workers of its
    own, for that pass. They stop on ``close()`` (or the end of a ``with``
    block), when the reader is garbage-collected or the interpreter exits, and
    by themselves when this process dies, even if killed. It needs
    ``mode="process"``: threads start in microseconds.

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
    workers = count_option(workers, "prefetch workers", 1, "it is the number of worker threads or processes")
    if buffer_size is not None:
        buffer_size = count_option(buffer_size, "prefetch buffer_size", 1,
                             "it bounds the entries each worker makes ahead; None for an automatic bound")
    restarts = check_options("prefetch", mode, start_method, restarts, persistent)
    return Prefetch(reader, workers, mode, buffer_size, bool(ordered), start_method, restarts, bool(persistent))


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
    return Buffered(reader, count_option(size, "buffered size"))
