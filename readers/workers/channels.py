"""The consumer's channels to a pool's workers: threads with a queue, or processes with pipes and rings.

``Threads`` and ``Processes`` each start one pass's workers (``readers.workers.worker``
runs inside them), hand the consumer their messages (``recv``), report back
what it received (``ack``: credit for more), restart a dead process worker,
and stop every worker however the pass ends. ``readers.workers.consumer`` merges
what they receive.

Process workers: one duplex pipe each (messages out, credit back) and a shared
ring for array bytes (``readers.workers.shared_memory``). The consumer waits on the pipe and the
process sentinel together, so a worker that dies is noticed at once and named
with its exit code or signal.
"""
from __future__ import annotations

import math
import multiprocessing
import os
import pickle
import queue
import re
import signal
import sys
import threading
import time
import warnings
import weakref
from multiprocessing import reduction
from multiprocessing.connection import wait
from typing import Any

from readers.errors import BadType
from readers.graph import describe
from readers.workers import process as worker_process
from readers.workers import shared_memory
from readers.workers import worker as worker_side
from readers.workers.forwarding import interactive_names

__all__ = ["GRACE", "Died", "Processes", "Threads", "pick_start_method"]

GRACE = 1.0  # seconds a stopped worker gets to exit before it is terminated


_KEPT: weakref.WeakSet = weakref.WeakSet()  # this process's kept workers (persistent), for _forget_kept


def _forget_kept() -> None:
    """In a forked child, close its copies of the kept workers' pipes: a copy left open would keep a kept
    worker from seeing the consumer close its end."""
    for backend in list(_KEPT):
        backend.forget()
    _KEPT.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_kept)


class Died(Exception):
    """A process worker ended without a last word: ``worker`` and ``how`` (its exit code or signal)."""

    def __init__(self, worker: int, how: str):
        super().__init__(worker, how)
        self.worker, self.how = worker, how


#: Threads of others that a fork may leave behind: fsspec's IO loop and the executor threads of that loop.
_FORK_SAFE = re.compile(r"^(fsspecIO|asyncio_\d+)$")


def pick_start_method(requested: str | None) -> str:
    """``requested``, or fork when this process has no other threads to break, else spawn.

    >>> pick_start_method("spawn")
    'spawn'
    >>> pick_start_method(None) in ("fork", "spawn")
    True
    """
    if requested is not None:
        return requested
    # Forking past these is safe: a kept worker's thread that waits for its parent's end holds no lock;
    # fsspec's IO loop thread (and its resolver's executor threads), which any read of a URL starts and
    # keeps, is replaced in a forked child by fsspec itself (os.register_at_fork)
    others = [t for t in threading.enumerate()
              if t is not threading.main_thread() and t.name != worker_process.WATCH_THREAD
              and not _FORK_SAFE.match(t.name)]
    if sys.platform.startswith("linux") and not others:
        return "fork"
    return "spawn"


class Threads:
    """A pass's thread workers, as the consumer sees them."""

    def __init__(self, pool: Any, pass_id: int, cursors: list[int]):
        self.pool, self.out = pool, queue.SimpleQueue()
        self.credits = [worker_side.Credits(pool.limit, pool.stats.per_worker[w]) for w in range(len(pool.jobs))]
        self.held: list[list] = [[] for _ in pool.jobs]  # messages for a worker the ordered merge is not at
        self.threads = [
            threading.Thread(target=worker_side.thread_main, name=f"readerkit-{pool.name}-{w}", daemon=True,
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

    def fill(self) -> float:
        return sum(c.fill() for c in self.credits) / len(self.credits)

    def stop(self) -> None:
        for c in self.credits:
            c.close()
        deadline = time.monotonic() + GRACE
        stuck = []
        for w, t in enumerate(self.threads):
            t.join(max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                stuck.append(f"{t.name} ({self.pool.labels[w]})")
        if stuck and "stuck" not in self.pool.warned:
            self.pool.warned.add("stuck")  # once per stage: a source that blocks so blocks every pass
            one = len(stuck) == 1
            warnings.warn(RuntimeWarning(
                f"readerkit {self.pool.name}: worker thread{'' if one else 's'} {', '.join(stuck)} did not return "
                f"from {'its' if one else 'their'} source within {GRACE} s of the pass ending, and will "
                "run on until the source's next() returns; give the source a timeout (on its blocking read or "
                "wait), or use mode=\"process\", whose stuck workers are stopped (this warning: once per stage)"),
                stacklevel=2)


class Processes:
    """A pass's process workers, as the consumer sees them; with ``persistent``, kept for later passes
    (``begin`` starts the next, ``end`` leaves them idle, ``stop`` ends them)."""

    def __init__(self, pool: Any, pass_id: int, cursors: list[int], persistent: bool = False):
        self.pool, self.pass_id, self.persistent = pool, pass_id, persistent
        self.blocks = getattr(pool, "blocks", False)  # the workers make the blocks ``deal`` sends (see Pool)
        self.method = pick_start_method(pool.start_method)
        # the threads that make spawn the choice, named if a job will not pickle (this one, if not main, last)
        others = [t for t in threading.enumerate() if t is not threading.main_thread()]
        others.sort(key=lambda t: t is threading.current_thread())
        self.others = [t.name for t in others] if pool.start_method is None else []
        self.ctx = multiprocessing.get_context(self.method)
        n = len(pool.jobs)
        self.procs: list[Any] = [None] * n
        self.conns: list[Any] = [None] * n
        self.rings: list[shared_memory.RingReader | None] = [None] * n
        self.done = [False] * n  # whether worker w said its last word of this pass
        self.outstanding = [0] * n  # blocks dealt to worker w and not yet ended (blocks only)
        self.torn: set = set()  # workers whose pipe an interrupt left mid-message: only fit to be stopped
        self.watches: dict = {}  # of recv (see _watch); cleared whenever a pipe opens or closes
        if persistent:
            _KEPT.add(self)
        self.jobs = pool.jobs if self.method == "fork" else [self._pickled(w, j) for w, j in enumerate(pool.jobs)]
        try:
            for w in range(n):
                if shared_memory.available():
                    self.rings[w] = shared_memory.RingReader()
                self.start(w, cursors[w])
        except BaseException:
            self.stop()
            raise

    def _pickled(self, w: int, job: Any) -> bytes:
        try:
            blob = pickle.dumps(job, pickle.HIGHEST_PROTOCOL)
            if names := interactive_names(blob):
                raise BadType(f"it uses {', '.join(names)} from this interactive session (__main__), which a "
                              "new process cannot import: define it in a module (a .py file) and import it")
            return blob
        except Exception as exc:
            fix = ("build it from module-level functions (a module-level generator function, functools.partial of "
                   "one, or readers.* creators)")
            if self.others and sys.platform.startswith("linux"):
                named = ", ".join(map(repr, self.others[:3])) + (
                    f" and {len(self.others) - 3} more" if len(self.others) > 3 else "")
                fix = (f"{self.method!r} was chosen because this process has other threads than the main one "
                       f"({named}), which a fork would copy mid-work; {fix}, or use mode=\"thread\", or pass "
                       "start_method=\"fork\" if you know forking is safe here (those threads hold no lock the "
                       "workers need)")
            else:
                fix += ", or pass start_method='fork'"
            raise BadType(f"{self.pool.name}: the reader of worker {w} ({describe(job)}) cannot be pickled for the "
                          f"{self.method!r} start method ({exc}); {fix}") from exc

    def start(self, w: int, cursor: int) -> None:
        mine, theirs = self.ctx.Pipe(duplex=True)
        ring = self.rings[w]
        spec = None if ring is None else (shared_memory.SharedFd(ring.fd), ring.size, ring.restart_at())
        self.conns[w] = mine
        self.watches.clear()
        inherited = [c for c in self.conns if c is not None] if self.method == "fork" else []
        p = self.ctx.Process(
            target=worker_process.process_main, name=f"readerkit-{self.pool.name}-{w}", daemon=True,
            args=(w, self.jobs[w] if self.method == "fork" else None, None if self.blocks else (self.pass_id, cursor),
                  self.pool.contexts[w], theirs, self.pool.limit, spec, os.getpid(), inherited, self.pool.where(w),
                  self.persistent,
                  # a kept worker outlives a pass, and so maybe the thread that ran the pass
                  not self.persistent or threading.current_thread() is threading.main_thread(), self.blocks))
        try:
            p.start()
        finally:
            theirs.close()  # now only the worker holds its end: its death reads as end of file
        self.procs[w], self.done[w], self.outstanding[w] = p, False, 0
        if self.method != "fork":
            # On the pipe, not in the process arguments: multiprocessing writes those to a
            # pipe the child may never read (a script without a main guard dies first), and
            # blocks for good once they outgrow its buffer; this pipe breaks when the worker dies.
            try:
                mine.send_bytes(self.jobs[w])
            except OSError:
                pass  # it died: the first recv says how

    def _watch(self, w: int | None) -> tuple[worker_side.Watch, dict]:
        """A watch on worker ``w``'s pipe and sentinel (None: every live worker's), and whose each is."""
        if w not in self.watches:
            live = [w] if w is not None else [i for i, c in enumerate(self.conns) if c is not None and not self.done[i]]
            owner = {self.conns[i]: i for i in live} | {self.procs[i].sentinel: i for i in live}
            self.watches[w] = (worker_side.Watch(list(owner)), owner)
        return self.watches[w]

    def recv(self, w: int | None) -> tuple:
        watch, owner = self._watch(w)
        while True:
            for ready in watch.ready():
                i = owner[ready]
                conn = self.conns[i]
                if ready is conn or conn.poll():
                    try:
                        data = conn.recv_bytes()
                        kind, stats, payload = shared_memory.unpack(data, self.rings[i])
                    except (EOFError, OSError):
                        raise Died(i, self._how(i)) from None
                    except BaseException:  # Ctrl-C mid-message: the pipe's next bytes are no message's start
                        self.torn.add(i)
                        raise
                    self.pool.stats.per_worker[i] = list(stats)
                    if kind == worker_side.ENTRIES:
                        payload = shared_memory.unfold(payload)
                    elif self.blocks:
                        self.outstanding[i] -= 1  # (a block's last word: the worker goes on with the next)
                    else:
                        self._retire(i)
                    return i, kind, payload
                raise Died(i, self._how(i))  # exited, and nothing it sent is left unread

    def _retire(self, w: int) -> None:
        """A worker that has said its last word of the pass: stop waiting on it (a kept one waits for the next)."""
        self.done[w] = True
        self.watches.clear()
        if not self.persistent:
            self.conns[w].close()
            self.conns[w] = None

    def finish(self, w: int) -> None:
        """Close worker ``w``'s pipe: it gets no more blocks this pass (not for kept workers), so it ends."""
        self._retire(w)

    def deal(self, w: int, start: int, n: int) -> None:
        """Ask worker ``w`` for ``n`` entries of this pass from position ``start``, after its other blocks."""
        self.outstanding[w] += 1
        try:
            self.conns[w].send_bytes(worker_side.block_message(self.pass_id, start, n))
        except OSError:
            pass  # it died: the next recv says how

    # -- kept workers (persistent) ----------------------------------------------
    def begin(self, pool: Any, pass_id: int, cursors: list[int]) -> None:
        """Start the next pass on the kept workers: a message each; one that has gone is started again."""
        self.pool, self.pass_id = pool, pass_id
        self.watches.clear()
        for w, cursor in enumerate(cursors):
            self.done[w] = False
            p, conn, ring = self.procs[w], self.conns[w], self.rings[w]
            if ring is not None:
                ring.collect()
            fresh = ring is not None and ring.tail < ring.seen  # arrays still held: it frees in order
            # dealt blocks come as the merge deals them: a kept worker is told nothing but of a fresh ring
            message = (worker_side.FRESH_RING if fresh else None) if self.blocks else \
                worker_side.pass_message(pass_id, cursor, fresh)
            if p is not None and conn is not None and p.is_alive():
                try:
                    if message is not None:
                        conn.send_bytes(message)
                    if fresh:
                        self._send_ring(w)
                    continue
                except OSError:
                    pass  # it is going: start another
            self._bury(w)
            self.start(w, cursor)

    def end(self) -> None:
        """Leave the kept workers idle for the next pass: cancel what is still running and take what it
        sends up to its last word (within ``GRACE``; a worker that is late or gone is stopped, and started
        again by the next ``begin``)."""
        deadline = time.monotonic() + GRACE
        for w in self.torn:
            self._bury(w)
        self.torn.clear()
        if self.blocks:  # a worker with blocks dealt is cancelled, and answers that with its one last word
            self.done = [not k for k in self.outstanding]
        late = [w for w, conn in enumerate(self.conns) if conn is not None and not self.done[w]]
        for w in late:
            try:
                self.conns[w].send_bytes(worker_side.CANCEL)
            except OSError:
                pass  # gone: the drain below finds its end of file
        for w in late:
            conn = self.conns[w]
            try:
                while not self.done[w]:
                    if not conn.poll(max(0.0, deadline - time.monotonic())):
                        raise TimeoutError
                    kind = shared_memory.unpack(conn.recv_bytes(), self.rings[w])[0]  # (its arrays freed at once)
                    self.done[w] = kind == worker_side.STOPPED if self.blocks else kind != worker_side.ENTRIES
                self.outstanding[w] = 0
            except (EOFError, OSError, TimeoutError):
                self._bury(w)
            except BaseException:  # interrupted while draining: this worker cannot be trusted again
                self._bury(w)
                raise
        for ring in self.rings:
            if ring is not None:
                ring.collect()
        self.watches.clear()

    def _send_ring(self, w: int) -> None:
        """Hand worker ``w`` a new ring; the old one's memory goes with the last array that views it."""
        new = shared_memory.RingReader(self.rings[w].size)
        try:
            reduction.send_handle(self.conns[w], new.fd, self.procs[w].pid)
        except BaseException:
            new.close()
            raise
        self.rings[w].close()
        self.rings[w] = new

    def _bury(self, w: int) -> None:
        """Stop worker ``w`` (if it still runs) and let go of it and its pipe."""
        conn, p = self.conns[w], self.procs[w]
        self.conns[w] = self.procs[w] = None
        if conn is not None:
            conn.close()
        if p is not None:
            p.join(0.1)
            if p.exitcode is None:
                p.kill()
                p.join()
            p.close()

    def forget(self) -> None:
        """In a forked child: close the copies of the consumer's pipe ends, and let go of workers
        that are not this process's (else multiprocessing, at this child's exit, would terminate them)."""
        for conn in self.conns:
            if conn is not None:
                conn.close()
        # (the rings' descriptors stay open: the worker this fork may be starting needs its own)
        children = getattr(multiprocessing.process, "_children", set())
        for p in self.procs:
            children.discard(p)
        n = len(self.conns)
        self.conns, self.procs, self.rings = [None] * n, [None] * n, [None] * n

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
        try:
            self.conns[w].send_bytes(n.to_bytes(4, "little"))
        except (OSError, AttributeError):
            pass  # it has finished, or died: its next recv says which

    def fill(self) -> float:
        fills = []
        for w, ring in enumerate(self.rings):
            bound = worker_side.cap(self.pool.limit, self.pool.stats.per_worker[w])
            if ring is not None and bound != math.inf:
                fills.append(min(1.0, max(0, ring.made() - self.pool.received[w]) / bound))
        return sum(fills) / len(fills) if fills else 0.0

    def restart(self, w: int, cursor: int) -> None:
        self.procs[w].join(GRACE)
        self.procs[w].close()
        self.conns[w].close()
        self.start(w, cursor)

    def stop(self) -> None:
        """Close every pipe (a worker's next send or credit wait then ends it), then join; terminate late ones."""
        _KEPT.discard(self)
        self.watches.clear()
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
        self.procs = [None] * len(self.procs)
        for i, ring in enumerate(self.rings):
            if ring is not None:
                ring.close()
                self.rings[i] = None
