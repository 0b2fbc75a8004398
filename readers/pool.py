"""The worker pool under prefetch, buffered, xmap_readers and multiprocess_reader.

A pool runs one job (a reader) per worker for one pass, in threads or in
processes, and merges what they make: in a fixed round-robin order, or as it
arrives. Every worker runs inside its worker context, so a ``shard()`` in its
reader takes that worker's share.

Workers send entries in messages of as many entries as they make within about
``FLUSH`` seconds (one, for slow entries; up to ``CHUNK`` for fast ones), so
the per-entry cost is a list append, not a queue or pipe operation. A worker
may be at most ``limit`` entries ahead of the consumer (credit-based flow
control: the consumer gives credit back as it receives), so nobody busy-waits
and memory stays bounded.

Process workers: one duplex pipe each (messages out, credit back) and a shared
ring for array bytes (``readers.shm``). The consumer waits on the pipe and the
process sentinel together, so a worker that dies is noticed at once, named
with its exit code or signal, and restarted from its last delivered entry when
restarts are allowed. Workers ignore SIGINT (the consumer decides when they
stop) and die with the process that started them.
"""
from __future__ import annotations

import contextlib
import ctypes
import itertools
import multiprocessing
import os
import pickle
import queue
import signal
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import wait
from typing import Any

from readers import shm
from readers.base import advance, close_iterator, describe, iterate
from readers.launch import worker_context

__all__ = ["PassStats", "Pool", "WorkerDiedError", "pick_start_method"]

CHUNK = 1024  # entries per message at most
FLUSH = 0.002  # seconds a message waits for more entries, about
GRACE = 1.0  # seconds a stopped worker gets to exit before it is terminated
_ENTRIES, _DONE, _FAILED = 0, 1, 2


class WorkerDiedError(RuntimeError):
    """A worker process ended without finishing its reader or reporting an error."""


class _RemoteTraceback(Exception):
    """The cause of a re-raised worker exception: the worker's traceback, as text."""


class _Gone(Exception):
    """The consumer closed its end: the pass is over, the worker just stops."""


class _Died(Exception):
    def __init__(self, worker: int, how: str):
        super().__init__(worker, how)
        self.worker, self.how = worker, how


def pack_error(exc: BaseException) -> tuple[bytes | None, str, str]:
    """An exception as (its pickle or None, ``Type: message``, traceback text), to cross a pipe."""
    try:
        blob: bytes | None = pickle.dumps(exc)
        pickle.loads(blob)  # some exceptions pickle but cannot be rebuilt
    except Exception:
        blob = None
    return blob, f"{type(exc).__name__}: {exc}", "".join(traceback.format_exception(exc))


def unpack_error(payload: tuple, where: str) -> BaseException:
    """The exception ``pack_error`` packed, chained from the worker's traceback text.

    >>> exc = unpack_error(pack_error(KeyError("row 7")), "worker 1")
    >>> type(exc).__name__, str(exc), "Traceback in worker 1" in str(exc.__cause__)
    ('KeyError', "'row 7'", True)
    """
    blob, summary, text = payload
    try:
        exc = pickle.loads(blob) if blob is not None else None
    except Exception:
        exc = None
    if not isinstance(exc, BaseException):
        exc = RuntimeError(f"{summary} (raised in {where}; the exception could not be pickled)")
    exc.__cause__ = _RemoteTraceback(f'\n"""\nTraceback in {where}:\n{text}"""')
    return exc


def pick_start_method(requested: str | None) -> str:
    """``requested``, or fork when this process has no other threads to break, else spawn.

    >>> pick_start_method("spawn")
    'spawn'
    >>> pick_start_method(None) in ("fork", "spawn")
    True
    """
    if requested is not None:
        return requested
    if sys.platform.startswith("linux") and threading.active_count() == 1:
        return "fork"
    return "spawn"


# -- statistics ------------------------------------------------------------------------


class PassStats:
    """Figures of one pass of a pool: what the workers and the consumer spent their time on.

    Per worker: entries made, seconds making them (waiting on the input),
    seconds blocked on a full queue (waiting on the output) and array bytes
    sent through shared memory. The consumer: seconds waiting for entries, and
    samples of how full the queues were each time it received.
    """

    def __init__(self, workers: int, mode: str, capacity: int | None):
        self.mode, self.capacity = mode, capacity
        self.per_worker = [[0, 0.0, 0.0, 0] for _ in range(workers)]
        self._retired = [[0, 0.0, 0.0, 0] for _ in range(workers)]  # of workers that were restarted
        self.entries, self.consumer_wait, self.restarts = 0, 0.0, 0
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
        return {
            "mode": self.mode,
            "workers": len(rows),
            "entries": self.entries,
            "seconds": seconds,
            "entries_per_s": self.entries / seconds if seconds > 0 else 0.0,
            "input_wait": min(1.0, busy / span),
            "output_wait": min(1.0, blocked / span),
            "consumer_wait": min(1.0, self.consumer_wait / seconds) if seconds > 0 else 0.0,
            "queue_fill": self.fill_sum / self.fill_samples if self.fill_samples else 0.0,
            "shm_bytes": sum(r[3] for r in rows),
            "restarts": self.restarts,
        }


# -- the worker side -------------------------------------------------------------------


def _pump(it: Iterator, send: Callable[[list], None], take: Callable[[int], int], stats: list,
          count: Callable[[int], None] | None = None) -> bool:
    """Move a pass's entries into messages; True once it ran out, False if stopped first.

    ``take(n)`` waits for credit and grants up to n entries (0: stop). Entries
    made before an exception are sent before it propagates.
    """
    want = 1
    while True:
        t0 = time.perf_counter()
        n = take(want)
        t1 = time.perf_counter()
        stats[2] += t1 - t0
        if not n:
            return False
        chunk: list = []
        try:
            chunk.extend(itertools.islice(it, n))
        except BaseException:
            if chunk:
                send(chunk)
            raise
        finally:
            t2 = time.perf_counter()
            stats[0] += len(chunk)
            stats[1] += t2 - t1
            if count is not None:
                count(stats[0])
        if chunk:
            send(chunk)
            stats[2] += time.perf_counter() - t2
        if len(chunk) < n:
            return True
        if t2 - t1 < FLUSH / 2:
            want = min(want * 2, CHUNK)
        elif t2 - t1 > FLUSH:
            want = max(1, want // 2)


@contextlib.contextmanager
def _context(pair: tuple[int, int] | None) -> Iterator[None]:
    if pair is None or pair[1] <= 1:
        yield
    else:
        with worker_context(*pair):
            yield


class _Credits:
    """Entries a thread worker may still make ahead (None: unlimited); closing wakes it to stop."""

    def __init__(self, limit: int | None):
        self.free, self.cond, self.closed = limit, threading.Condition(), False

    def take(self, want: int) -> int:
        with self.cond:
            while not self.closed and self.free == 0:
                self.cond.wait()
            if self.closed:
                return 0
            if self.free is None:
                return want
            n = min(want, self.free)
            self.free -= n
            return n

    def give(self, n: int) -> None:
        if self.free is not None:
            with self.cond:
                self.free += n
                self.cond.notify()

    def ahead(self, limit: int | None) -> int:
        return 0 if limit is None or self.free is None else limit - self.free

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()


def _thread_main(w: int, job: Any, pass_id: int, cursor: int, context: tuple | None,
                 out: queue.SimpleQueue, credits: _Credits, stats: list) -> None:
    try:
        with _context(context):
            it = iterate(job, pass_id, cursor)
            try:
                done = _pump(it, lambda chunk: out.put((w, _ENTRIES, chunk)), credits.take, stats)
            finally:
                close_iterator(it)
        out.put((w, _DONE if done else None, None))
    except BaseException as exc:
        out.put((w, _FAILED, exc))


class _PipeCredits:
    """A process worker's credit: granted by the consumer through the pipe, in entries."""

    def __init__(self, conn: Any, limit: int | None):
        self.conn, self.free = conn, limit

    def take(self, want: int) -> int:
        if self.free is None:
            return want
        try:
            while self.free == 0 or self.conn.poll():
                self.free += int.from_bytes(self.conn.recv_bytes(), "little")
        except (EOFError, OSError):
            return 0  # the consumer closed its end: stop
        n = min(want, self.free)
        self.free -= n
        return n


def _die_with_parent() -> None:
    """Ask Linux to kill this process when its parent goes, so no worker is ever orphaned."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def _load(job: Any, w: int) -> Any:
    if not isinstance(job, bytes):  # forked: the reader itself
        return job
    try:
        return pickle.loads(job)
    except Exception as exc:
        raise TypeError(
            f"worker {w} could not load its reader ({exc!r}); a spawned worker imports it, so build it "
            "from module-level functions of an importable module (not __main__ or a test file), "
            "or use start_method='fork'") from exc


def _process_main(w: int, job: Any, pass_id: int, cursor: int, context: tuple | None, conn: Any,
                  limit: int | None, ring: tuple | None, parent: int, inherited: list) -> None:
    """Process body: send pass ``pass_id`` of ``job`` from ``cursor`` as messages on ``conn``.

    ``inherited``: the consumer's ends of the pipes, which a forked worker holds
    copies of; closed first, so that the consumer closing its end reaches the worker.
    """
    for c in inherited:
        c.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    if os.getppid() != parent:
        return  # the parent died before this process asked to die with it
    writer = shm.RingWriter(*ring) if ring is not None else None
    stats = [0, 0.0, 0.0, 0]

    def send(kind: int, payload: Any) -> None:
        data = shm.pack((kind, tuple(stats), payload), writer)
        try:
            conn.send_bytes(data)
        except OSError:
            raise _Gone from None

    def count(made: int) -> None:
        if writer is not None:
            writer.counters[1] = made

    def send_chunk(chunk: list) -> None:
        before = writer.head if writer is not None else 0
        send(_ENTRIES, chunk)
        if writer is not None:
            stats[3] += writer.head - before

    try:
        with _context(context):
            it = iterate(_load(job, w), pass_id, cursor)
            try:
                done = _pump(it, send_chunk, _PipeCredits(conn, limit).take, stats, count)
            finally:
                close_iterator(it)
        if done:
            send(_DONE, None)
    except _Gone:
        pass
    except BaseException as exc:
        try:
            send(_FAILED, pack_error(exc))
        except _Gone:
            pass
    finally:
        conn.close()
        if writer is not None:
            with contextlib.suppress(BufferError):
                writer.close()


# -- backends: threads or processes, as seen by the consumer -------------------------------


class _Threads:
    def __init__(self, pool: Pool, pass_id: int, cursors: list[int]):
        self.pool, self.out = pool, queue.SimpleQueue()
        self.credits = [_Credits(pool.limit) for _ in pool.jobs]
        self.held: list[list] = [[] for _ in pool.jobs]  # messages for a worker the ordered merge is not at
        self.threads = [
            threading.Thread(target=_thread_main, name=f"readerkit-{pool.name}-{w}", daemon=True,
                             args=(w, job, pass_id, cursors[w], pool.contexts[w], self.out,
                                   self.credits[w], pool.stats.per_worker[w]))
            for w, job in enumerate(pool.jobs)]
        for t in self.threads:
            t.start()

    def recv(self, w: int | None) -> tuple:
        if w is None:
            return self.out.get()
        while not self.held[w]:
            msg = self.out.get()
            self.held[msg[0]].append(msg)
        return self.held[w].pop(0)

    def ack(self, w: int, n: int) -> None:
        self.credits[w].give(n)

    def ahead(self) -> int:
        return sum(c.ahead(self.pool.limit) for c in self.credits)

    def stop(self) -> None:
        for c in self.credits:
            c.close()
        deadline = time.monotonic() + GRACE
        stuck = []
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                stuck.append(t.name)
        if stuck:
            warnings.warn(ResourceWarning(
                f"readerkit {self.pool.name}: {', '.join(stuck)} did not return from its source within "
                f"{GRACE} s of the pass ending; it will exit when the source's next() returns"))


class _Processes:
    def __init__(self, pool: Pool, pass_id: int, cursors: list[int]):
        self.pool, self.pass_id = pool, pass_id
        self.method = pick_start_method(pool.start_method)
        self.ctx = multiprocessing.get_context(self.method)
        n = len(pool.jobs)
        self.procs: list[Any] = [None] * n
        self.conns: list[Any] = [None] * n
        self.rings: list[shm.RingReader | None] = [None] * n
        self.jobs = pool.jobs if self.method == "fork" else [self._pickled(w, j) for w, j in enumerate(pool.jobs)]
        try:
            for w in range(n):
                if shm.available():
                    self.rings[w] = shm.RingReader()
                self.start(w, cursors[w])
        except BaseException:
            self.stop()
            raise

    def _pickled(self, w: int, job: Any) -> bytes:
        try:
            return pickle.dumps(job, pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise TypeError(
                f"{self.pool.name}: the reader of worker {w} ({describe(job)}) cannot be pickled for the "
                f"{self.method!r} start method ({exc}); build it from module-level functions (a "
                "module-level generator function, functools.partial of one, or readers.* creators), "
                "or pass start_method='fork'") from exc

    def start(self, w: int, cursor: int) -> None:
        mine, theirs = self.ctx.Pipe(duplex=True)
        ring = self.rings[w]
        spec = None if ring is None else (shm.SharedFd(ring.fd), ring.size, ring.restart_at())
        self.conns[w] = mine
        inherited = [c for c in self.conns if c is not None] if self.method == "fork" else []
        p = self.ctx.Process(
            target=_process_main, name=f"readerkit-{self.pool.name}-{w}", daemon=True,
            args=(w, self.jobs[w], self.pass_id, cursor, self.pool.contexts[w], theirs, self.pool.limit,
                  spec, os.getpid(), inherited))
        try:
            p.start()
        finally:
            theirs.close()  # now only the worker holds its end: its death reads as end of file
        self.procs[w] = p

    def recv(self, w: int | None) -> tuple:
        live = [w] if w is not None else [i for i, c in enumerate(self.conns) if c is not None]
        owner = {self.conns[i]: i for i in live} | {self.procs[i].sentinel: i for i in live}
        while True:
            for ready in wait(list(owner)):
                i = owner[ready]
                conn = self.conns[i]
                if ready is conn or conn.poll():
                    try:
                        data = conn.recv_bytes()
                    except (EOFError, OSError):
                        raise _Died(i, self._how(i)) from None
                    kind, stats, payload = shm.unpack(data, self.rings[i])
                    self.pool.stats.per_worker[i] = list(stats)
                    if kind != _ENTRIES:
                        self._retire(i)
                    return i, kind, payload
                raise _Died(i, self._how(i))  # exited, and nothing it sent is left unread

    def _retire(self, w: int) -> None:
        """A worker that has said its last word: stop waiting on it."""
        self.conns[w].close()
        self.conns[w] = None

    def _how(self, w: int) -> str:
        p = self.procs[w]
        p.join(GRACE)
        code = p.exitcode
        if code is None:
            return "closed its pipe"
        if code >= 0:
            return f"exited with code {code}"
        return f"was killed by {signal.Signals(-code).name if -code in signal.valid_signals() else -code}"

    def ack(self, w: int, n: int) -> None:
        ring = self.rings[w]
        if ring is not None:
            ring.collect()
        if self.pool.limit is None:
            return
        try:
            self.conns[w].send_bytes(n.to_bytes(4, "little"))
        except (OSError, AttributeError):
            pass  # it has finished, or died: its next recv says which

    def ahead(self) -> int:
        return sum(max(0, r.made() - self.pool.received[w]) for w, r in enumerate(self.rings) if r is not None)

    def restart(self, w: int, cursor: int) -> None:
        self.procs[w].join(GRACE)
        self.procs[w].close()
        self.conns[w].close()
        self.start(w, cursor)

    def stop(self) -> None:
        """Close every pipe (a worker's next send or credit wait then ends it), then join; terminate late ones."""
        for i, c in enumerate(self.conns):
            if c is not None:
                c.close()
                self.conns[i] = None
        procs = [p for p in self.procs if p is not None]
        deadline = time.monotonic() + GRACE
        alive = [p for p in procs if p.is_alive()]
        while alive and (left := deadline - time.monotonic()) > 0:
            wait([p.sentinel for p in alive], left)
            alive = [p for p in alive if p.is_alive()]
        for p in alive:
            p.terminate()
        for p in alive:
            p.join(GRACE)
            if p.exitcode is None:
                p.kill()
        for p in procs:
            p.join()
            p.close()
        for ring in self.rings:
            if ring is not None:
                ring.close()


# -- the consumer ----------------------------------------------------------------------


class Pool:
    """One pass's workers: ``jobs[w]`` runs in worker w, inside ``contexts[w]`` (a worker context or None).

    ``limit`` bounds how many entries a worker may make ahead of the consumer
    (None: no bound); ``restarts`` is how many times a dead process worker may
    be started again, from its last delivered entry, in one pass.
    """

    def __init__(self, name: str, jobs: Sequence[Any], contexts: Sequence[tuple | None], *, processes: bool,
                 ordered: bool, limit: int | None, start_method: str | None = None, restarts: int = 0,
                 labels: Sequence[str] | None = None):
        self.name, self.jobs, self.contexts = name, list(jobs), list(contexts)
        self.processes, self.ordered, self.limit = processes, ordered, limit
        self.start_method, self.restarts = start_method, restarts
        self.labels = list(labels) if labels is not None else [describe(j) for j in self.jobs]
        self.stats = PassStats(len(self.jobs), "process" if processes else "thread", limit)
        self.received = [0] * len(self.jobs)

    def run(self, pass_id: int, cursors: Sequence[int]) -> Iterator:
        """Start the workers and yield the merged entries; stop the workers however the pass ends."""
        self.cursors = list(cursors)
        backend: Any = None
        try:
            backend = (_Processes if self.processes else _Threads)(self, pass_id, self.cursors)
            self.backend = backend
            yield from (self._ordered() if self.ordered else self._unordered())
        finally:
            self.stats.ended = time.perf_counter()
            if backend is not None:
                backend.stop()
            self.backend = None

    def _where(self, w: int) -> str:
        return f"{self.name} worker {w} ({self.labels[w]})"

    def _next(self, w: int | None) -> tuple[int, list | None]:
        """The next message's entries from worker ``w`` (None: any); None entries once it is done."""
        while True:
            t0 = time.perf_counter()
            try:
                i, kind, payload = self.backend.recv(w)
            except _Died as died:
                self.stats.consumer_wait += time.perf_counter() - t0
                self._revive(died)
                continue
            self.stats.consumer_wait += time.perf_counter() - t0
            if kind == _ENTRIES:
                self.received[i] += len(payload)
                self.stats.fill_sum += self._fill()
                self.stats.fill_samples += 1
                self.backend.ack(i, len(payload))
                return i, payload
            if kind == _FAILED:
                raise payload if isinstance(payload, BaseException) else unpack_error(payload, self._where(i))
            return i, None  # done, or (threads) stopped

    def _fill(self) -> float:
        if self.limit is None:
            return 0.0
        return self.backend.ahead() / (self.limit * len(self.jobs))

    def _revive(self, died: _Died) -> None:
        w = died.worker
        message = f"{self._where(w)} {died.how} before finishing its reader, without reporting an error"
        if self.stats.restarts >= self.restarts:
            hint = ("; if the system killed it, check its memory use" if self.restarts == 0
                    else f"; it was restarted {self.restarts} times already")
            raise WorkerDiedError(message + hint)
        from readers.state import check_resumable

        try:
            check_resumable(self.jobs[w])
        except ValueError as exc:
            raise WorkerDiedError(f"{message}; it cannot be restarted: {exc}") from None
        with _context(self.contexts[w]):
            cursor = advance(self.jobs[w], self.cursors[w], self.received[w])
        self.stats.restarts += 1
        self.stats.retire(w)
        warnings.warn(RuntimeWarning(f"{message}; restarted it at position {cursor} "
                                     f"(restart {self.stats.restarts} of {self.restarts})"), stacklevel=2)
        self.backend.restart(w, cursor)

    def _unordered(self) -> Iterator:
        live = len(self.jobs)
        while live:
            _, chunk = self._next(None)
            if chunk is None:
                live -= 1
            else:
                self.stats.entries += len(chunk)
                yield from chunk

    def _ordered(self) -> Iterator:
        """Round-robin over the workers, one entry each per round; a worker that runs out leaves the round.

        While every worker has entries waiting, whole rounds go out at C speed;
        otherwise a round goes entry by entry, so an entry never waits for a
        later worker's.
        """
        order = list(range(len(self.jobs)))
        bufs: list[list] = [[] for _ in order]
        pos = [0] * len(order)
        while order:
            m = min(len(bufs[w]) - pos[w] for w in order)
            if m:
                rounds = [bufs[w][pos[w]:pos[w] + m] for w in order]
                for w in order:
                    pos[w] += m
                self.stats.entries += m * len(order)
                yield from itertools.chain.from_iterable(zip(*rounds))
                continue
            for j, w in enumerate(order):
                if pos[w] == len(bufs[w]):
                    _, chunk = self._next(w)
                    if chunk is None:  # out: the round goes on without it
                        order = order[j + 1:] + order[:j]
                        break
                    bufs[w], pos[w] = chunk, 0
                pos[w] += 1
                self.stats.entries += 1
                yield bufs[w][pos[w] - 1]
