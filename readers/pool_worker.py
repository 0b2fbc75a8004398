"""The worker pool's worker side: what runs inside each worker (``readers.pool_consumer`` starts them): the pass, cut into messages, under flow control.

Workers send entries in messages of as many entries as they make within about
``FLUSH`` seconds (one, for slow entries; up to ``CHUNK`` for fast ones), so
the per-entry cost is a list append, not a queue or pipe operation. A worker
may be at most ``limit`` entries ahead of what the consumer received
(credit-based flow control: the consumer reports what it received, and a
worker with no credit waits for that report, never polls); without a given
limit, about ``AHEAD`` seconds of its own output. A worker's exception is
sent with its traceback text; process workers ignore SIGINT (the consumer
decides when they stop) and die with the process that started them.
"""
from __future__ import annotations

import contextlib
import ctypes
import importlib
import itertools
import math
import multiprocessing
import os
import pickle
import queue
import select
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from multiprocessing.connection import wait
from typing import Any

from readers import shm
from readers.launch import worker_context
from readers.parents import iterate
from readers.passes import close_iterator, end_pass

__all__ = ["Credits", "PipeCredits", "Watch", "cap", "in_context", "pack_error", "process_main", "pump", "thread_main",
           "unpack_error"]

CHUNK = 1 << 16  # entries per message at most
AHEAD = 0.2  # seconds of a worker's output it may make ahead, when no buffer size is given
MAX_AHEAD = 1 << 17  # entries, at most, in that case
FLUSH = 0.01  # seconds a message waits for more entries, about (fewer messages: less work for the consumer)
ENTRIES, DONE, FAILED = 0, 1, 2  # message kinds


class _RemoteTraceback(Exception):
    """The cause of a re-raised worker exception: the worker's traceback, as text."""


class _Gone(Exception):
    """The consumer closed its end: the pass is over, the worker just stops."""


def pack_error(exc: BaseException) -> tuple:
    """An exception as (its pickle or None, its traceback text, (module, qualname, message)) to cross a pipe;
    the last part rebuilds the type of one that does not pickle (see ``unpack_error``)."""
    try:
        blob: bytes | None = pickle.dumps(exc)
        pickle.loads(blob)  # some exceptions pickle but cannot be rebuilt
    except Exception:
        blob = None
    kind = type(exc)
    return blob, "".join(traceback.format_exception(exc)), (kind.__module__, kind.__qualname__, str(exc))


def _rebuilt(module: str, qualname: str, message: str) -> BaseException | None:
    """An exception of the type ``module.qualname`` made from ``message`` alone, when that gives the same text."""
    try:
        kind: Any = importlib.import_module(module)
        for part in qualname.split("."):
            kind = getattr(kind, part)
        exc = kind(message) if isinstance(kind, type) and issubclass(kind, BaseException) else None
        return exc if exc is not None and str(exc) == message else None
    except Exception:  # not importable (a class local to a function), or its __init__ wants more: no rebuild
        return None


def unpack_error(payload: tuple, where: str) -> BaseException:
    """The exception ``pack_error`` packed, chained from the worker's traceback text.

    One that does not pickle comes back as its type made from its message, when
    its type can be imported and made so; else as a RuntimeError naming its type.

    >>> exc = unpack_error(pack_error(KeyError("row 7")), "worker 1")
    >>> type(exc).__name__, str(exc), "Traceback in worker 1" in str(exc.__cause__)
    ('KeyError', "'row 7'", True)
    >>> class Local(Exception):
    ...     def __init__(self, row, why):
    ...         super().__init__(f"row {row}: {why}")
    >>> unpack_error(pack_error(Local(7, "bad")), "worker 1")
    RuntimeError('readers.pool_worker.Local: row 7: bad (raised in worker 1; the exception could not be pickled, so it comes as a RuntimeError: to get it as itself, let its __init__ take its message alone and give it only attributes that pickle)')
    """
    blob, text, (module, qualname, message) = payload
    try:
        exc = pickle.loads(blob) if blob is not None else None
    except Exception:
        exc = None
    if not isinstance(exc, BaseException):
        exc = _rebuilt(module, qualname, message)
    if exc is None:
        name = qualname if module == "builtins" else f"{module}.{qualname}"
        exc = RuntimeError(f"{name}: {message} (raised in {where}; the exception could not be pickled, so it comes "
                           "as a RuntimeError: to get it as itself, let its __init__ take its message alone and give "
                           "it only attributes that pickle)")
    exc.__cause__ = _RemoteTraceback(f'\n"""\nTraceback in {where}:\n{text}"""')
    return exc


def pump(it: Iterator, send: Callable[[list], None], credits: Any, stats: list,
         count: Callable[[int], None] | None = None) -> bool:
    """Move a pass's entries into messages; True once it ran out, False if stopped first.

    A message holds what the worker made in about ``FLUSH`` seconds, as far
    as its credit goes (``credits.take`` waits for some; 0: stop). The clock
    is read every ``step`` entries, a step being about a quarter of ``FLUSH``
    at the latest rate (one entry, and then the message goes, while the rate is
    unknown or slow), so a source that stalls holds back at most the entries
    it made in the last quarter of ``FLUSH``. Entries made before an exception
    are sent before it propagates.
    """
    step = 1
    while True:
        t0 = time.perf_counter()
        n = credits.take(CHUNK)
        t1 = time.perf_counter()
        stats[2] += t1 - t0
        if not n:
            return False
        chunk: list = []
        ended = False
        try:
            while not ended and len(chunk) < n:
                k = min(step, n - len(chunk))
                have = len(chunk)
                chunk.extend(itertools.islice(it, k))
                ended = len(chunk) - have < k
                if k == 1 or time.perf_counter() - t1 >= FLUSH:
                    break  # (one at a time until the rate is known: the next may never come)
        except BaseException:
            if chunk:
                send(chunk)
            raise
        finally:
            t2 = time.perf_counter()
            credits.refund(n - len(chunk))
            stats[0] += len(chunk)
            stats[1] += t2 - t1
            if count is not None:
                count(stats[0])
        rate = len(chunk) / (t2 - t1) if t2 > t1 else CHUNK / FLUSH
        step = max(1, min(CHUNK, int(rate * FLUSH / 4)))
        if chunk:
            send(chunk)
            stats[2] += time.perf_counter() - t2
        if ended:
            return True


@contextlib.contextmanager
def in_context(pair: tuple[int, int] | None) -> Iterator[None]:
    if pair is None or pair[1] <= 1:
        yield
    else:
        with worker_context(*pair):
            yield


def cap(limit: int | None, stats: list) -> float:
    """How many entries a worker may be ahead: ``limit``, unbounded for 0, or for None about
    ``AHEAD`` seconds of its own output (at least 2, at most ``MAX_AHEAD``)."""
    if limit is not None:
        return limit or math.inf
    rate = stats[0] / stats[1] if stats[1] > 0 else 0.0
    return max(2, min(MAX_AHEAD, int(rate * AHEAD)))


class _Window:
    """How far a worker is ahead of what the consumer received, against its ``cap``.

    Only the worker changes ``made``; the consumer's reports change ``received``.
    """

    def __init__(self, limit: int | None, stats: list):
        self.limit, self.stats = limit, stats
        self.made = self.received = 0

    def room(self) -> float:
        return cap(self.limit, self.stats) - (self.made - self.received)

    def grant(self, want: int) -> int:
        n = int(min(want, self.room()))
        self.made += n
        return n

    def refund(self, n: int) -> None:
        """Give back credit taken but not used."""
        self.made -= n


class Credits(_Window):
    """A thread worker's window; closing wakes a waiting worker to stop."""

    def __init__(self, limit: int | None, stats: list):
        super().__init__(limit, stats)
        self.cond, self.closed = threading.Condition(), False

    def take(self, want: int) -> int:
        with self.cond:
            while not self.closed and self.room() <= 0:
                self.cond.wait()
            return 0 if self.closed else self.grant(want)

    def give(self, n: int) -> None:
        with self.cond:
            self.received += n
            self.cond.notify()

    def fill(self) -> float:
        bound = cap(self.limit, self.stats)
        return 0.0 if bound == math.inf else min(1.0, max(0, self.made - self.received) / bound)

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()


def thread_main(w: int, job: Any, pass_id: int, cursor: int, context: tuple | None,
                 out: queue.SimpleQueue, credits: Credits, stats: list) -> None:
    try:
        with in_context(context):
            it = iterate(job, pass_id, cursor)
            try:
                done = pump(it, lambda chunk: out.put((w, ENTRIES, chunk)), credits, stats)
            finally:
                close_iterator(it)
                end_pass(job)
        out.put((w, DONE if done else None, None))
    except BaseException as exc:
        out.put((w, FAILED, exc))


class Watch:
    """Which of a fixed set of pipes and process sentinels are ready, through one poll object kept
    between calls (``multiprocessing.connection.wait`` builds a selector per call, a cost per message).

    >>> import multiprocessing
    >>> a, b = multiprocessing.Pipe()
    >>> watch = Watch([a])
    >>> watch.ready(0)
    []
    >>> b.send_bytes(b"x")
    >>> watch.ready(0) == [a]
    True
    """

    def __init__(self, objects: list):
        self.by_fd = {o if isinstance(o, int) else o.fileno(): o for o in objects}
        self.poller = select.poll() if hasattr(select, "poll") else None
        for fd in self.by_fd if self.poller is not None else ():
            self.poller.register(fd, select.POLLIN)

    def ready(self, timeout: float | None = None) -> list:
        """The objects ready to read (or closed), waiting up to ``timeout`` seconds (None: until one is)."""
        if self.poller is None:
            return wait(list(self.by_fd.values()), timeout)
        ms = None if timeout is None else math.ceil(timeout * 1000)
        return [self.by_fd[fd] for fd, _ in self.poller.poll(ms)]


class PipeCredits(_Window):
    """A process worker's window; the consumer reports what it received through the pipe."""

    def __init__(self, conn: Any, limit: int | None, stats: list):
        super().__init__(limit, stats)
        self.conn, self.watch = conn, Watch([conn])

    def take(self, want: int) -> int:
        try:
            while self.watch.ready(0) or self.room() <= 0:
                self.received += int.from_bytes(self.conn.recv_bytes(), "little")
        except (EOFError, OSError):
            return 0  # the consumer closed its end: stop
        return self.grant(want)


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


def _unsendable(where: str, chunk: list, first: int, exc: Exception) -> tuple[int, Exception]:
    """``exc``, raised pickling ``chunk`` (entries ``first``... of a worker), as an error naming the entry at
    fault, and that entry's place in ``chunk`` (0, and ``exc`` itself, when no one entry is at fault)."""
    for k, entry in enumerate(chunk):
        if (what := shm.unpicklable(entry)) is not None:
            return k, TypeError(
                f"{where}: its entry {first + k} is {what}, which cannot be pickled ({exc}), so it cannot reach "
                "the consumer's process; make entries numpy arrays or plain data (numbers, str, bytes, and tuples, "
                "lists and dicts of them), e.g. with a map_readers in the worker's reader, or run the workers in "
                "threads (mode=\"thread\")")
    return 0, exc


def process_main(w: int, job: Any, pass_id: int, cursor: int, context: tuple | None, conn: Any,
                  limit: int | None, ring: tuple | None, parent: int, inherited: list, where: str) -> None:
    """Process body: send pass ``pass_id`` of ``job`` from ``cursor`` as messages on ``conn``.

    ``inherited``: the consumer's ends of the pipes, which a forked worker holds
    copies of; closed first, so that the consumer closing its end reaches the worker.
    ``where`` names the worker in errors.
    """
    for c in inherited:
        c.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a handler forked from the CLI is the consumer's, not ours
    # multiprocessing forbids daemonic processes children, which would rule out a process-mode
    # prefetch inside this one; this worker's lifetime is the pool's business (it dies with its
    # parent), and the children it starts are daemonic, so they die with it.
    multiprocessing.current_process()._config["daemon"] = False
    if os.getppid() == parent:  # started by the consumer itself, not by a fork server
        _die_with_parent()
        if os.getppid() != parent:
            return  # the consumer died before this process asked to die with it
    writer = shm.RingWriter(*ring) if ring is not None else None
    stats = [0, 0.0, 0.0, 0]
    sent = [0]  # entries sent so far

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
        try:
            send(ENTRIES, shm.fold(chunk) if writer is not None else chunk)
        except _Gone:
            raise
        except Exception as exc:  # an entry that does not pickle: send those before it, then say which
            k, error = _unsendable(where, chunk, sent[0], exc)
            if k:
                send_chunk(chunk[:k])
            raise error from None
        sent[0] += len(chunk)
        if writer is not None:
            stats[3] += writer.head - before

    try:
        with in_context(context):
            job = _load(conn.recv_bytes() if job is None else job, w)
            it = iterate(job, pass_id, cursor)
            try:
                done = pump(it, send_chunk, PipeCredits(conn, limit, stats), stats, count)
            finally:
                close_iterator(it)
                end_pass(job)
        if done:
            send(DONE, None)
    except _Gone:
        pass
    except BaseException as exc:
        try:
            send(FAILED, pack_error(exc))
        except _Gone:
            pass
    finally:
        conn.close()
        if writer is not None:
            with contextlib.suppress(BufferError):
                writer.close()
