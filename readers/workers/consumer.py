"""The worker pool's consumer side, under prefetch, buffered, xmap_readers and multiprocess_reader.

A pool runs one job (a reader) per worker for one pass, in threads or in
processes, and merges what they make: in a fixed round-robin order, or as it
arrives. Every worker runs inside its worker context, so a ``shard()`` in its
reader takes that worker's share.

Workers send entries in messages, at most ``limit`` entries ahead of the
consumer (``readers.workers.worker``, the code that runs inside a worker):
credit-based flow control, no busy waiting. Process workers that each run the
whole job (an index-addressed one) are instead dealt blocks of positions as
they finish the earlier ones, as ``multiprocessing.Pool.imap`` deals chunks
(``Pool._dealt``): a worker on a slower core makes fewer.

The workers run in threads or processes (``readers.workers.channels``); a
process worker that dies is noticed at once, named with its exit code or
signal, and restarted from its last delivered entry when restarts are
allowed. Workers ignore SIGINT (the consumer decides when they stop) and die
with the process that started them.
"""
from __future__ import annotations

import collections
import math
import operator
import signal
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import toolz

from readers.errors import ReaderkitError
from readers.position import advance, check_resumable
from readers.workers import worker as worker_side
from readers.workers.channels import Died, Processes, Threads
from readers.workers.forwarding import unpack_error

__all__ = ["BLOCKS_AHEAD", "BLOCK_SECONDS", "PassStats", "Pool", "WorkerDiedError", "merged_cursors"]

BLOCKS_AHEAD = 4  # blocks dealt to a worker at a time: it goes on with the next while the consumer answers
BLOCK_SECONDS = 0.01  # of a worker's output, about, in a block (multiprocessing.Pool's 256 entries of 50 us: 13 ms)


class WorkerDiedError(ReaderkitError, RuntimeError):
    """A worker process ended without finishing its reader or reporting an error."""


class PassStats:
    """Figures of one pass of a pool: what the workers and the consumer spent their time on.

    Per worker: entries made, seconds making them (waiting on the input),
    seconds blocked on a full queue (waiting on the output) and array bytes
    sent through shared memory. The consumer: seconds waiting for entries, and
    samples of how full the queues were each time it received.
    """

    def __init__(self, workers: int, mode: str):
        self.mode = mode
        self.per_worker = [[0, 0.0, 0.0, 0] for _ in range(workers)]
        self._retired = [[0, 0.0, 0.0, 0] for _ in range(workers)]  # of workers that were restarted
        self.entries, self.consumer_wait, self.restarts = 0, 0.0, 0
        self.piece: Iterator = iter(())  # the run being handed out; its unread rest is not counted yet
        self.fill_sum, self.fill_samples = 0.0, 0
        self.started, self.ended = time.perf_counter(), None

    def retire(self, w: int) -> None:
        self._retired[w] = [a + b for a, b in zip(self._retired[w], self.per_worker[w])]
        self.per_worker[w] = [0, 0.0, 0.0, 0]

    def summary(self) -> dict:
        """The figures as a plain dict (see ``readers.prefetch``'s ``stats``)."""
        seconds = (self.ended or time.perf_counter()) - self.started
        rows = [[a + b for a, b in zip(r, w)] for r, w in zip(self._retired, self.per_worker)]
        busy = sum(r[1] for r in rows)
        blocked = sum(r[2] for r in rows)
        span = max(seconds * len(rows), 1e-9)
        entries = self.entries - operator.length_hint(self.piece)
        return {
            "mode": self.mode,
            "workers": len(rows),
            "entries": entries,
            "seconds": seconds,
            "entries_per_s": entries / seconds if seconds > 0 else 0.0,
            "input_wait": min(1.0, busy / span),
            "output_wait": min(1.0, blocked / span),
            "consumer_wait": min(1.0, self.consumer_wait / seconds) if seconds > 0 else 0.0,
            "queue_fill": self.fill_sum / self.fill_samples if self.fill_samples else 0.0,
            "shm_bytes": sum(r[3] for r in rows),
            "restarts": self.restarts,
        }


class _Merged:
    """A pool's entries: iterating gives a C-level chain over the merge's runs, so no Python
    frame runs per entry; ``close()`` stops the workers."""

    def __init__(self, pieces: Iterator):
        self.pieces, self.flat = pieces, toolz.concat(pieces)

    def __iter__(self) -> Iterator:
        return self.flat

    def __next__(self) -> Any:
        return next(self.flat)

    def close(self) -> None:
        self.pieces.close()


def merged_cursors(cursor: int, workers: int, count: Callable[[int, int], int]) -> tuple[list[int], int]:
    """Where each worker stands once ``cursor`` entries of the round-robin merge were taken, and the
    worker the merge goes on with: the inverse of ``Pool``'s ordered merge, for workers whose streams
    differ in length. ``count(w, limit)`` is worker w's entries, counted up to ``limit``; the streams
    are counted no further than the merge could have taken from them.

    >>> lengths = [1, 5, 3]
    >>> merged_cursors(6, 3, lambda w, limit: min(lengths[w], limit))  # merged: 0 1 2 1 2 1 | 2 1 1
    ([1, 3, 2], 2)
    >>> merged_cursors(9, 3, lambda w, limit: min(lengths[w], limit))  # the end: it goes on with none
    ([1, 5, 3], 0)
    """
    lengths: dict[int, int] = {}  # the workers known to end, with their lengths
    while True:
        open_ = [w for w in range(workers) if w not in lengths]
        if not open_:
            break
        limit = (cursor - sum(lengths.values())) // len(open_) + 1
        counted = {w: count(w, limit) for w in open_}
        ended = {w: k for w, k in counted.items() if k < limit}
        if not ended:  # each open worker has more than the merge could take from it
            lengths.update(counted)
            break
        lengths.update(ended)
    # the whole rounds taken: the largest T with sum(min(length, T)) <= cursor
    low, high = 0, max(lengths.values(), default=0)
    while low < high:
        mid = (low + high + 1) // 2
        if sum(min(k, mid) for k in lengths.values()) <= cursor:
            low = mid
        else:
            high = mid - 1
    rounds = low
    rest = cursor - sum(min(lengths[w], rounds) for w in range(workers))
    longer = [w for w in range(workers) if lengths[w] > rounds]  # those with an entry in round ``rounds``
    if rest and not longer:  # (else rest < len(longer): a whole round more would fit)
        raise ReaderkitError(f"position {cursor} is past the end of the pass ({sum(lengths.values())} entries)")
    cursors = [min(lengths[w], rounds) + (w in longer[:rest]) for w in range(workers)]
    return cursors, longer[rest] if rest < len(longer) else 0


class Pool:
    """One pass's workers: ``jobs[w]`` runs in worker w, inside ``contexts[w]`` (a worker context or None),
    and is called ``labels[w]`` in errors.

    ``limit`` bounds how many entries a worker may make ahead of the consumer
    (0: no bound; None: about ``readers.workers.worker.AHEAD`` seconds of its output); ``restarts``
    is how many times a dead process worker may be started again, from its last
    delivered entry, in one pass. With a ``keeper`` (``readers.workers.persistent``), process
    workers are kept between passes.
    """

    def __init__(self, name: str, jobs: Sequence[Any], contexts: Sequence[tuple | None], *, processes: bool,
                 ordered: bool, limit: int | None, labels: Sequence[str], start_method: str | None = None,
                 restarts: int = 0, warned: set | None = None, keeper: Any = None, blocks: bool = False,
                 length: int | None = None):
        self.name, self.jobs, self.contexts = name, list(jobs), list(contexts)
        self.warned = set() if warned is None else warned  # warnings given already (a stage's own: once per stage)
        self.processes, self.ordered, self.limit = processes, ordered, limit
        self.start_method, self.restarts = start_method, restarts
        self.labels = list(labels)
        self.keeper = keeper if processes else None  # a persistent.Keeper: its kept workers run the pass
        self.stats = PassStats(len(self.jobs), "process" if processes else "thread")
        self.received = [0] * len(self.jobs)
        self.first = 0  # the worker the ordered merge begins with (see run)
        # dealt blocks (process workers, every one running the whole job): see _dealt
        self.blocks, self.length = blocks and processes and not restarts, length

    def run(self, pass_id: int, cursors: Sequence[int], first: int = 0) -> _Merged:
        """Start the workers (at the first entry asked for) and give the merged entries; closing stops them.

        ``cursors``: where each worker's job starts; ``first``: the worker the round-robin begins with.
        """
        self.first = first
        return _Merged(self._pieces(pass_id, list(cursors)))

    def _pieces(self, pass_id: int, cursors: list[int]) -> Iterator:
        """The merged entries in runs (lists, rounds); the workers stop however the pass ends."""
        self.cursors = cursors
        backend: Any = None
        kept = False
        try:
            if self.keeper is not None:
                backend = self.keeper.open(self, pass_id, self.cursors)
                kept = backend is not None
            if backend is None:
                backend = (Processes if self.processes else Threads)(self, pass_id, self.cursors)
            self.backend = backend
            yield from (self._dealt() if self.blocks else self._ordered() if self.ordered else self._unordered())
        finally:
            self.stats.ended = time.perf_counter()
            # settle the count, and let go of the last run's unread rest (its arrays may view a ring)
            self.stats.entries -= operator.length_hint(self.stats.piece)
            collections.deque(self.stats.piece, maxlen=0)
            if kept:
                self.keeper.release(backend)
            elif backend is not None:
                backend.stop()
            self.backend = None

    def where(self, w: int) -> str:
        """Worker ``w``'s name in errors."""
        return f"{self.name} worker {w} ({self.labels[w]})"

    def _next(self, w: int | None) -> tuple[int, list | None]:
        """The next message's entries from worker ``w`` (None: any); None entries once it is done."""
        while True:
            t0 = time.perf_counter()
            try:
                i, kind, payload = self.backend.recv(w)
            except Died as died:
                self.stats.consumer_wait += time.perf_counter() - t0
                self._revive(died)
                continue
            self.stats.consumer_wait += time.perf_counter() - t0
            if kind == worker_side.ENTRIES:
                self.received[i] += len(payload)
                self.stats.fill_sum += self.backend.fill()
                self.stats.fill_samples += 1
                self.backend.ack(i, len(payload))
                return i, payload
            if kind == worker_side.FAILED:
                raise payload if isinstance(payload, BaseException) else unpack_error(payload, self.where(i))
            return i, None  # done, or (threads) stopped

    def _revive(self, died: Died) -> None:
        w = died.worker
        message = f"{self.where(w)} {died.how} before finishing its reader, without reporting an error"
        if self.stats.restarts >= self.restarts:
            raise WorkerDiedError(message + self._hint(died)) from None
        try:
            check_resumable(self.jobs[w])
        except ValueError as exc:
            raise WorkerDiedError(f"{message}; it cannot be restarted: {exc}") from None
        with worker_side.in_context(self.contexts[w]):
            cursor = advance(self.jobs[w], self.cursors[w], self.received[w])
        self.stats.restarts += 1
        self.stats.retire(w)
        warnings.warn(RuntimeWarning(f"{message}; restarted it at position {cursor} "
                                     f"(restart {self.stats.restarts} of {self.restarts})"), stacklevel=2)
        self.backend.restart(w, cursor)

    def _hint(self, died: Died) -> str:
        """What to look at, for a worker that died for good."""
        if self.restarts:
            return f"; it was restarted {self.restarts} times already"
        if self.backend.procs[died.worker].exitcode == -signal.SIGKILL:
            return "; if the system killed it, check its memory use"
        if not self.received[died.worker] and self.backend.method != "fork":
            return ("; a spawned worker imports the main module first, so a script that starts process "
                    "workers must do so under `if __name__ == \"__main__\":`; the worker's own error, "
                    "if any, is on stderr above")
        return "; the worker's own error, if any, is on stderr above"

    def _hand(self, run: list) -> Iterator:
        """``run`` as the next piece of the merge; stats count its entries as they are read."""
        self.stats.piece = it = iter(run)
        self.stats.entries += len(run)
        return it

    def _block_size(self, w: int, start: int, end: float, ahead: int) -> int:
        """Entries of worker ``w``'s next block: about ``BLOCK_SECONDS`` of its output (one until its rate is
        known), within ``limit`` over the blocks it has dealt, and smaller towards the pass's end (so the
        workers end together)."""
        made, busy = self.stats.per_worker[w][:2]
        if busy <= 0:
            return 1  # (its first: the next entry may take long, and the consumer waits for it)
        n = made / busy * BLOCK_SECONDS
        n = min(n, max((end - start) // (2 * len(self.jobs)), n / 8))  # towards the end, down to an eighth
        if self.limit:
            n = min(n, self.limit // ahead)
        return int(max(1, min(n, worker_side.CHUNK)))

    def _dealt(self) -> Iterator:
        """Blocks of consecutive positions, dealt to whichever worker has fewer than ``BLOCKS_AHEAD`` to make,
        as ``multiprocessing.Pool.imap`` deals chunks, handed out in order (or as they end, unordered).

        A worker that runs slower (on a busy core, or a core's other hyperthread) makes fewer blocks,
        where fixed shares would hold every worker to the slowest one's pace. At most ``BLOCKS_AHEAD``
        blocks are dealt to a worker and not yet made; made and not yet handed out (waiting for an earlier
        block), about ``AHEAD`` seconds of output a worker by default, or ``limit`` entries. A block that
        comes back short is the pass's end.
        """
        k, backend = len(self.jobs), self.backend
        ahead = min(BLOCKS_AHEAD, self.limit) if self.limit else BLOCKS_AHEAD
        window = k * (ahead if self.limit else max(ahead, round(worker_side.AHEAD / BLOCK_SECONDS)))
        start, end = self.cursors[0], math.inf if self.length is None else self.length
        queues: list[collections.deque] = [collections.deque() for _ in range(k)]  # each worker's blocks, in order
        pending: dict[int, list] = {}  # a block dealt and not handed out: [start, size, entries, ended]
        dealt = handed = 0
        while True:
            if self.ordered:
                while handed in pending and pending[handed][3]:
                    block = pending.pop(handed)
                    handed += 1
                    if block[2]:
                        yield self._hand(block[2])
            # a worker whose rate is not known yet gets one block (of one entry) at a time
            room = [ahead if self.stats.per_worker[w][1] > 0 else 1 for w in range(k)]
            wanting = [w for w in range(k) if len(queues[w]) < room[w]]
            while wanting and start < end and len(pending) < window:  # round-robin: block b to worker b % k at first
                for w in wanting:
                    if start >= end or len(pending) >= window:
                        break
                    n = self._block_size(w, start, end, ahead)
                    pending[dealt] = [start, n, [], False]
                    queues[w].append(dealt)
                    backend.deal(w, start, n)
                    dealt, start = dealt + 1, start + n
                wanting = [w for w in wanting if len(queues[w]) < room[w]]
            if not pending:
                return
            t0 = time.perf_counter()
            try:
                i, kind, payload = backend.recv(None)
            except Died as died:
                self.stats.consumer_wait += time.perf_counter() - t0
                self._revive(died)  # (no restarts with blocks: it raises)
                raise
            self.stats.consumer_wait += time.perf_counter() - t0
            index = queues[i][0]
            block = pending[index]
            if kind == worker_side.ENTRIES:
                block[2] += payload
                self.received[i] += len(payload)
                self.stats.fill_sum += len(pending) / window
                self.stats.fill_samples += 1
                continue
            if kind == worker_side.FAILED:
                raise payload if isinstance(payload, BaseException) else unpack_error(payload, self.where(i))
            queues[i].popleft()
            block[3] = True
            if len(block[2]) < block[1]:  # the pass ends in it
                end = min(end, block[0] + len(block[2]))
            if start >= end and not queues[i] and not backend.persistent:
                backend.finish(i)  # it gets no more: let it end now, while the others finish theirs
            if not self.ordered:
                del pending[index]
                if block[2]:
                    yield self._hand(block[2])

    def _unordered(self) -> Iterator:
        live = len(self.jobs)
        while live:
            _, chunk = self._next(None)
            if chunk is None:
                live -= 1
            else:
                yield self._hand(chunk)

    def _ordered(self) -> Iterator:
        """Round-robin over the workers, one entry each per round; a worker that runs out leaves the round.

        While every worker has entries waiting, whole rounds go out at C speed;
        otherwise a round goes entry by entry, so an entry never waits for a
        later worker's.
        """
        order = list(range(len(self.jobs)))
        order = order[self.first:] + order[:self.first]
        bufs: list[list] = [[] for _ in order]
        pos = [0] * len(order)
        while order:
            m = min(len(bufs[w]) - pos[w] for w in order)
            if m:
                k = len(order)
                merged: list = [None] * (m * k)
                for j, w in enumerate(order):
                    merged[j::k] = bufs[w][pos[w]:pos[w] + m]
                    pos[w] += m
                yield self._hand(merged)
                continue
            for j, w in enumerate(order):
                if pos[w] == len(bufs[w]):
                    _, chunk = self._next(w)
                    if chunk is None:  # out: the round goes on without it
                        order = order[j + 1:] + order[:j]
                        break
                    bufs[w], pos[w] = chunk, 0
                pos[w] += 1
                yield self._hand([bufs[w][pos[w] - 1]])
