"""The body of a process worker of the pool (``readers.workers.channels.Processes`` starts it).

It loads its job (its reader: inherited by a fork, or sent pickled down its
pipe), runs a pass of it through ``readers.workers.worker.pump`` into messages on
its pipe (arrays through its shared-memory ring, ``readers.workers.shared_memory``), and ends the
pass with a last word: done, failed (with the exception packed by
``readers.workers.forwarding``) or, for a kept worker, stopped. A kept worker
(``persistent``) then waits for its next pass. A worker ignores SIGINT (the
consumer decides when it stops) and dies with the process that started it.
"""
from __future__ import annotations

import collections
import contextlib
import ctypes
import multiprocessing
import os
import pickle
import select
import signal
import sys
import threading
import time
from collections.abc import Iterator
from multiprocessing import reduction
from typing import Any

import numpy as np

from readers.errors import BadType
from readers.parents import iterate, open_plan
from readers.passes import close_iterator, end_pass
from readers.workers import shared_memory
from readers.workers.forwarding import pack_error
from readers.workers.worker import (
    BLOCK,
    CANCEL,
    DONE,
    ENTRIES,
    FAILED,
    FRESH_RING,
    PASS,
    STOPPED,
    Inbox,
    PipeCredits,
    in_context,
    pump,
)

__all__ = ["PlanBlocks", "WATCH_THREAD", "next_pass_of", "process_main"]

WATCH_THREAD = "readerkit-watch-parent"  # a worker's thread that waits for its parent's end (see _die_with_parent)


class _Gone(Exception):
    """The consumer closed its end: the pass is over, the worker just stops."""


def next_pass_of(messages: Any) -> tuple[int, int, bool] | None:
    """The pass the first pass message among ``messages`` asks for (pass id, cursor, whether a fresh ring
    follows); the credits and cancels before it belong to a pass that has ended, and are passed over.
    None when there is none.

    >>> from readers.workers.worker import CANCEL, pass_message
    >>> next_pass_of([CANCEL, (7).to_bytes(4, "little"), pass_message(3, 12)])
    (3, 12, False)
    >>> next_pass_of([CANCEL]) is None
    True
    """
    for data in messages:
        if len(data) == 1 + PASS.size:
            return (*PASS.unpack(data[1:]), data[:1] == b"R")
    return None


def _messages(conn: Any) -> Iterator[bytes]:
    """What the consumer sends on ``conn``, until it closes its end."""
    try:
        while True:
            yield conn.recv_bytes()
    except (EOFError, OSError):
        return


def _die_with_parent(parent: int, tied: bool) -> None:
    """Die when the process ``parent`` does, so no worker is ever orphaned.

    ``tied``: Linux kills this process when the thread that started it ends
    (``PR_SET_PDEATHSIG``), which is the parent's end when that thread lives
    as long as the pool. Otherwise (kept workers started by a passing thread)
    a daemon thread waits for the parent's end on a pidfd and exits then.
    """
    if tied:
        if sys.platform.startswith("linux"):
            try:
                ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
            except (OSError, AttributeError):
                pass
        return

    def watch() -> None:
        try:
            fd = os.pidfd_open(parent)
            select.select([fd], [], [])  # readable once the process has ended
        except (AttributeError, OSError):  # no pidfds here, or the parent is gone already
            while _alive(parent):
                time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)  # as PR_SET_PDEATHSIG would

    threading.Thread(target=watch, name=WATCH_THREAD, daemon=True).start()


def _fresh_ring(conn: Any, old: shared_memory.RingWriter) -> shared_memory.RingWriter:
    """The new ring whose descriptor the consumer sends after a pass message (it does when arrays of the
    old one are still held: that ring frees in order, so it would stay full)."""
    fd = reduction.recv_handle(conn)
    size = len(old.mm)
    with contextlib.suppress(BufferError):
        old.close()
    return shared_memory.RingWriter(shared_memory.SharedFd(fd), size, 0)


class PlanBlocks:
    """The entries of one pass's blocks, read from one index plan that moves forward: a block further on
    skips indices, never entries, and opening the plan (a shuffle's permutation) is paid once a pass;
    a block behind where it stands opens the plan again there.

    >>> from readers import from_sequence, shuffle
    >>> r = shuffle(from_sequence(range(10)), seed=0)
    >>> blocks = PlanBlocks(r, 0)
    >>> order = list(r.run(0))
    >>> list(blocks.entries(2, 3)) == order[2:5], list(blocks.entries(8, 5)) == order[8:]
    (True, True)
    >>> list(blocks.entries(0, 1)) == order[:1]
    True
    """

    def __init__(self, job: Any, pass_id: int):
        self.job, self.pass_id = job, pass_id
        self.plan: Any = None
        self.pos = 0  # the position the plan's next index is for
        self.rest = np.empty(0, np.int64)  # indices of the current chunk not taken yet
        self.chunks: Iterator = iter(())

    def _take(self, k: int, keep: bool) -> np.ndarray | None:
        """The next ``k`` indices (fewer at the pass's end), or nothing when not ``keep``."""
        parts, have = [], 0
        while have < k:
            if not len(self.rest):
                self.rest = next(self.chunks, None)
                if self.rest is None:
                    self.rest = np.empty(0, np.int64)
                    break
            part, self.rest = self.rest[:k - have], self.rest[k - have:]
            have += len(part)
            if keep:
                parts.append(part)
        self.pos += have
        if not keep:
            return None
        return parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.empty(0, np.int64)

    def entries(self, start: int, n: int) -> Iterator:
        """The pass's entries at positions ``start`` .. ``start + n - 1`` (fewer at its end)."""
        if self.plan is None or start < self.pos:
            self.plan = open_plan(self.job, self.pass_id, start)
            self.chunks, self.pos, self.rest = iter(self.plan.chunks), start, np.empty(0, np.int64)
        self._take(start - self.pos, False)
        indices = self._take(n, True)
        return iter(self.plan.source.gather(indices)) if len(indices) else iter(())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _load(job: Any, w: int) -> Any:
    if not isinstance(job, bytes):  # forked: the reader itself
        return job
    try:
        return pickle.loads(job)
    except Exception as exc:
        raise BadType(
            f"worker {w} could not load its reader ({exc!r}); a spawned worker imports it, so build it "
            "from module-level functions of an importable module (not __main__ or a test file), "
            "or use start_method='fork'") from exc


def _unsendable(where: str, chunk: list, first: int, exc: Exception) -> tuple[int, Exception]:
    """``exc``, raised pickling ``chunk`` (entries ``first``... of a worker), as an error naming the entry at
    fault, and that entry's place in ``chunk`` (0, and ``exc`` itself, when no one entry is at fault)."""
    for k, entry in enumerate(chunk):
        if (what := shared_memory.unpicklable(entry)) is not None:
            return k, TypeError(
                f"{where}: its entry {first + k} is {what}, which cannot be pickled ({exc}), so it cannot reach "
                "the consumer's process; make entries numpy arrays or plain data (numbers, str, bytes, and tuples, "
                "lists and dicts of them), e.g. with a map_readers in the worker's reader, or run the workers in "
                "threads (mode=\"thread\")")
    return 0, exc


def process_main(w: int, job: Any, first: tuple[int, int] | None, context: tuple | None, conn: Any,
                  limit: int | None, ring: tuple | None, parent: int, inherited: list, where: str,
                  persistent: bool = False, tied: bool = True, blocks: bool = False) -> None:
    """Process body: send pass ``first`` (pass id, cursor) of ``job`` as messages on ``conn``; a kept
    worker (``persistent``) then waits for the next pass message, until the consumer closes its end.
    With ``blocks``, it makes the blocks the consumer deals instead (``first`` is None), each ended by
    DONE; a cancel ends the blocks of a pass with STOPPED; until the consumer closes its end.

    ``inherited``: the consumer's ends of the pipes, which a forked worker holds
    copies of; closed first, so that the consumer closing its end reaches the worker.
    ``where`` names the worker in errors; ``tied``: see ``_die_with_parent``.
    """
    for c in inherited:
        c.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a handler forked from the CLI is the consumer's, not ours
    # multiprocessing forbids daemonic processes children, which would rule out a process-mode
    # prefetch inside this one; this worker's lifetime is the pool's business (it dies with its
    # parent), and the children it starts are daemonic, so they die with it.
    multiprocessing.current_process()._config["daemon"] = False
    if os.getppid() == parent:  # started by the consumer itself
        _die_with_parent(parent, tied)
        if os.getppid() != parent:
            return  # the consumer died before this process asked to die with it
    else:  # started by a fork server: the kernel cannot tie it to the consumer
        _die_with_parent(parent, False)
    writer = shared_memory.RingWriter(*ring) if ring is not None else None
    stats = [0, 0.0, 0.0, 0]
    sent = [0]  # entries sent so far in this pass

    def send(kind: int, payload: Any) -> None:
        data = shared_memory.pack((kind, tuple(stats), payload), writer)
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
            send(ENTRIES, shared_memory.fold(chunk) if writer is not None else chunk)
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

    def one_pass(pass_id: int, cursor: int) -> None:
        stats[:], sent[0] = [0, 0.0, 0.0, 0], 0
        count(0)
        credits = PipeCredits(conn, limit, stats)
        try:
            it = iterate(job, pass_id, cursor)
            try:
                done = pump(it, send_chunk, credits, stats, count)
            finally:
                close_iterator(it)
                end_pass(job)
        except _Gone:
            raise
        except BaseException as exc:
            send(FAILED, pack_error(exc))
            return
        if not (done or credits.cancelled):
            raise _Gone  # the consumer closed its end
        send(DONE if done else STOPPED, None)

    def dealt_blocks() -> None:
        """Make the blocks dealt, in order; a cancel (or the pass's iterator failing) ends the block."""
        nonlocal writer
        inbox, running, plan = Inbox(conn), None, None  # the pass whose blocks run, until it ends
        while True:
            try:
                data = inbox.queued.popleft() if inbox.queued else conn.recv_bytes()
            except (EOFError, OSError):  # the consumer closed its end: the pass is over
                if running is not None:
                    end_pass(job)
                raise _Gone from None
            if data == FRESH_RING:  # (sent between passes, to a worker at rest)
                if writer is not None:
                    writer = _fresh_ring(conn, writer)
                continue
            if data == CANCEL:  # (at rest: its blocks are made, or dropped below)
                inbox.cancelled = True
            if not inbox.cancelled:
                pass_id, start, n = BLOCK.unpack(data[1:])
                if pass_id != running:
                    if running is not None:
                        end_pass(job)
                    running, stats[:], sent[0] = pass_id, [0, 0.0, 0.0, 0], 0
                    plan = PlanBlocks(job, pass_id)
                    count(0)
                try:
                    done = pump(plan.entries(start, n), send_chunk, inbox, stats, count)
                except _Gone:
                    raise
                except BaseException as exc:
                    send(FAILED, pack_error(exc))
                    continue
                if not (done or inbox.cancelled):
                    raise _Gone  # the consumer closed its end
                if done:
                    send(DONE, None)
                    continue
            # cancelled: the pass is over; the consumer waits for this one word
            inbox.cancelled, inbox.queued = False, collections.deque()
            if running is not None:
                end_pass(job)
            running = plan = None
            send(STOPPED, None)

    try:
        with in_context(context):
            try:
                job = _load(conn.recv_bytes() if job is None else job, w)
            except (EOFError, OSError):
                raise _Gone from None
            except BaseException as exc:
                send(FAILED, pack_error(exc))
                raise _Gone from None  # (a kept worker that cannot load its job is of no use)
            if blocks:
                dealt_blocks()
            task: tuple | None = first
            while task is not None:
                one_pass(task[0], task[1])
                task = next_pass_of(_messages(conn)) if persistent else None
                if task is not None and task[2] and writer is not None:
                    writer = _fresh_ring(conn, writer)
    except _Gone:
        pass
    finally:
        conn.close()
        if writer is not None:
            with contextlib.suppress(BufferError):
                writer.close()
