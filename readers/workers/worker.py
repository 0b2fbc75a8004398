"""The worker pool's worker side: what runs inside each worker (``readers.workers.consumer`` starts them): the pass, cut into messages, under flow control (a process worker's body is ``readers.workers.process``).

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

import collections
import contextlib
import itertools
import math
import queue
import select
import struct
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import wait
from typing import Any

from readers.launch import worker_context
from readers.parents import iterate
from readers.passes import close_iterator, end_pass

__all__ = ["BLOCK", "Credits", "FRESH_RING", "Inbox", "PipeCredits", "Watch", "block_message", "cap", "in_context",
           "pass_message", "pump", "thread_main"]

CHUNK = 1 << 16  # entries per message at most
AHEAD = 0.2  # seconds of a worker's output it may make ahead, when no buffer size is given
MAX_AHEAD = 1 << 17  # entries, at most, in that case
FLUSH = 0.01  # seconds a message waits for more entries, about (fewer messages: less work for the consumer)
ENTRIES, DONE, FAILED, STOPPED = 0, 1, 2, 3  # message kinds (STOPPED: a kept worker's pass, cancelled)
# what the consumer sends a process worker, told apart by length: credit (4 bytes), and for a kept
# worker (``persistent``), CANCEL (abandon this pass) and a pass to run (``pass_message``)
CANCEL = b"C"
PASS = struct.Struct("<qq")  # pass id, cursor
# dealt blocks (``block_message``): a worker of an index-addressed job is sent runs of positions to make as it
# finishes the earlier ones, as multiprocessing.Pool.imap deals chunks, so a worker that runs slower (a busy or
# shared core) takes fewer, where a fixed share would hold every worker back to the slowest one's pace
BLOCK = struct.Struct("<qqq")  # pass id, first position, how many
FRESH_RING = b"F"  # (to an idle block worker) the descriptor of a new ring for its arrays follows


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


def pass_message(pass_id: int, cursor: int, fresh_ring: bool = False) -> bytes:
    """What tells a kept worker to run pass ``pass_id`` from ``cursor`` (see ``next_pass_of``); with
    ``fresh_ring``, the descriptor of a new ring for its arrays follows it on the socket.

    >>> len(pass_message(3, 12)), PASS.unpack(pass_message(3, 12)[1:])
    (17, (3, 12))
    """
    return (b"R" if fresh_ring else b"P") + PASS.pack(pass_id, cursor)


class PipeCredits(_Window):
    """A process worker's window; the consumer reports what it received through the pipe.

    A cancel (a kept worker's pass abandoned by the consumer) stops the pass as
    the consumer closing its end does, and sets ``cancelled``.
    """

    def __init__(self, conn: Any, limit: int | None, stats: list):
        super().__init__(limit, stats)
        self.conn, self.watch, self.cancelled = conn, Watch([conn]), False

    def take(self, want: int) -> int:
        try:
            while self.watch.ready(0) or self.room() <= 0:
                data = self.conn.recv_bytes()
                if len(data) != 4:
                    self.cancelled = True
                    return 0
                self.received += int.from_bytes(data, "little")
        except (EOFError, OSError):
            return 0  # the consumer closed its end: stop
        return self.grant(want)


def block_message(pass_id: int, start: int, count: int) -> bytes:
    """What asks a worker of dealt blocks for ``count`` entries of pass ``pass_id`` from position ``start``.

    >>> m = block_message(3, 256, 128)
    >>> len(m), m[:1], BLOCK.unpack(m[1:])
    (25, b'B', (3, 256, 128))
    """
    return b"B" + BLOCK.pack(pass_id, start, count)


class Inbox:
    """A block worker's credits: a block's size bounds its work, so ``take`` grants what is asked, but
    first reads what the consumer sent meanwhile: blocks, queued in ``queued``, or a cancel, which
    drops them and stops the block (``cancelled``).

    >>> import multiprocessing
    >>> a, b = multiprocessing.Pipe()
    >>> inbox = Inbox(a)
    >>> b.send_bytes(block_message(0, 0, 4))
    >>> inbox.take(8), len(inbox.queued)
    (8, 1)
    >>> b.send_bytes(CANCEL)
    >>> inbox.take(8), inbox.cancelled, len(inbox.queued)
    (0, True, 0)
    """

    def __init__(self, conn: Any):
        self.conn, self.watch, self.cancelled = conn, Watch([conn]), False
        self.queued: collections.deque = collections.deque()

    def take(self, want: int) -> int:
        try:
            while not self.cancelled and self.watch.ready(0):
                data = self.conn.recv_bytes()
                if data == CANCEL:
                    self.cancelled = True
                    self.queued.clear()
                else:
                    self.queued.append(data)
        except (EOFError, OSError):
            return 0  # the consumer closed its end: stop
        return 0 if self.cancelled else want

    def refund(self, n: int) -> None:
        pass
