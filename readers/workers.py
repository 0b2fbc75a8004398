"""Background threads and processes: buffered, xmap_readers, multiprocess_reader.

Each pass starts its own threads or processes and stops and joins them however
it ends: exhausted, failed, or abandoned (break, ``close()``, garbage
collection). A worker's exception reaches the consumer with its type and message.
"""
from __future__ import annotations

import multiprocessing
import operator
import pickle
import queue
import signal
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import wait
from typing import Any, NamedTuple

from readers.base import Reader, Stage, check_reader, close_iterator, describe, iterate
from readers.launch import carry_context, worker_context

__all__ = ["WorkerDiedError", "buffered", "multiprocess_reader", "xmap_readers"]

_END = object()  # a thread's last message on a queue: nothing more comes from it
_ENTRY, _DONE, _FAILED = 0, 1, 2  # process message tags; entries are payloads, never compared
_GRACE = 1.0  # seconds a stopped worker process gets to exit before it is terminated
_LIVENESS = 0.5  # seconds between liveness checks of worker processes sharing a queue


def _count(value: Any, name: str, minimum: int | None = None, hint: str = "") -> int:
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}") from None
    if minimum is not None and n < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {n!r}; {hint}")
    return n


# -- threads ------------------------------------------------------------------------------
# Threads talk through unbounded queues; "slots" bound what is in them instead. A feeder
# takes a slot before it pulls an entry from the source and the consumer gives it back
# as it yields the entry, so no thread blocks on a full queue and a stop only has to
# close the slots.


class _Failure(NamedTuple):
    """An exception from a worker thread, travelling to the consumer as a value."""

    exc: BaseException


class _Slots:
    """A counting semaphore (``None``: unlimited) that wakes every waiter when closed."""

    def __init__(self, limit: int | None):
        self._free, self._cond, self.closed = limit, threading.Condition(), False

    def acquire(self) -> bool:
        """Take a slot, waiting for one; False once closed."""
        with self._cond:
            while not self.closed and self._free == 0:
                self._cond.wait()
            if not self.closed and self._free is not None:
                self._free -= 1
            return not self.closed

    def release(self) -> None:
        if self._free is not None:
            with self._cond:
                self._free += 1
                self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()


def _feed(reader: Reader, pass_id: int, slots: _Slots, sink: queue.SimpleQueue, ends: int,
          cursor: int = 0) -> None:
    """Thread body: put ``(seq, entry)`` for pass ``pass_id`` of ``reader`` on ``sink``, one per slot."""
    seq = 0
    try:
        it = iterate(reader, pass_id, cursor)  # here, so that the thread that closes the iterator owns it
        try:
            while slots.acquire() and (entry := next(it, _END)) is not _END:
                sink.put((seq, entry))
                seq += 1
        finally:
            close_iterator(it)
    except BaseException as exc:
        sink.put((seq, _Failure(exc)))
    finally:
        for _ in range(ends):
            sink.put(_END)


def _map(mapper: Callable, tasks: queue.SimpleQueue, out: queue.SimpleQueue, slots: _Slots) -> None:
    """Thread body: map tasks onto ``out`` until the feeder's end marker."""
    try:
        while (task := tasks.get()) is not _END:
            if slots.closed:
                continue  # the pass is over: skip the work, but drain to the end marker
            seq, entry = task
            if type(entry) is not _Failure:
                try:
                    entry = mapper(entry)
                except BaseException as exc:
                    entry = _Failure(exc)
            out.put((seq, entry))
    finally:
        out.put(_END)


def _unwrap(value: Any, slots: _Slots) -> Any:
    if type(value) is _Failure:
        raise value.exc
    slots.release()
    return value


def _deliver(out: queue.SimpleQueue, slots: _Slots, ends: int, ordered: bool) -> Iterator:
    """Yield values from ``out`` until ``ends`` end markers, in sequence order if ``ordered``."""
    pending: dict[int, Any] = {}  # the reorder buffer; the slots bound its size
    want = 0
    while ends:
        msg = out.get()
        if msg is _END:
            ends -= 1
        elif not ordered:
            yield _unwrap(msg[1], slots)
        else:
            pending[msg[0]] = msg[1]
            while want in pending:
                yield _unwrap(pending.pop(want), slots)
                want += 1


def _run_threads(name: str, targets: list[tuple[Callable, tuple]], slots: _Slots,
                 out: queue.SimpleQueue, ends: int, ordered: bool,
                 wake: Sequence[queue.SimpleQueue] = ()) -> Iterator:
    """One pass: start the threads, deliver their output, and stop them however it ends.

    The feeder (the first thread) may be blocked inside the source, where no
    thread can be interrupted: it gets ``_GRACE`` seconds, then is left to
    finish its ``next()`` and exit on its own (the closed slots stop it), with
    a ResourceWarning, rather than hanging the consumer.
    """
    # Daemon only so that an iterator kept alive until exit cannot hold up the interpreter;
    # every pass joins its threads below.
    # the threads work for the consumer's worker: shard() in the source must see its worker context
    threads = [threading.Thread(target=carry_context(f), args=a, name=f"readerkit-{name}-{k}", daemon=True)
               for k, (f, a) in enumerate(targets)]
    try:
        for t in threads:
            t.start()
        yield from _deliver(out, slots, ends, ordered)
    finally:
        slots.close()  # which stops the feeder, whose end markers stop the mappers
        for q in wake:
            q.put(_END)
        for t in threads[1:]:
            if t.ident is not None:
                t.join()
        feeder = threads[0]
        if feeder.ident is not None:
            feeder.join(_GRACE)
            if feeder.is_alive():
                warnings.warn(ResourceWarning(
                    f"readerkit {name}: the source did not return within {_GRACE} s of the pass "
                    "ending; its thread will exit when the source's next() returns"))


class Buffered(Stage):
    name = "buffered"
    keeps_positions = True

    def __init__(self, reader: Reader, size: int):
        super().__init__(reader)
        self.reader, self.size = reader, size

    def _stream(self, pass_id: int) -> Iterator:
        return self._seek(pass_id, 0)

    def _seek(self, pass_id: int, cursor: int) -> Iterator:
        slots, out = _Slots(self.size if self.size > 0 else None), queue.SimpleQueue()
        return _run_threads(self.name, [(_feed, (self.reader, pass_id, slots, out, 1, cursor))], slots, out, 1, False)

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
        xmap_readers, multiprocess_reader
    """
    check_reader(reader)
    return Buffered(reader, _count(size, "buffered size"))


class XmapReaders(Stage):
    name = "xmap_readers"

    def __init__(self, mapper: Callable, reader: Reader, process_num: int, buffer_size: int,
                 order: bool):
        super().__init__(reader)
        self.mapper, self.reader, self.order = mapper, reader, order
        self.process_num, self.buffer_size = process_num, buffer_size

    @property
    def keeps_positions(self) -> bool:
        return self.order

    def _unresumable(self) -> str | None:
        if not self.order:
            return "xmap_readers(order=False) yields entries as they finish, in no fixed order; give order=True"
        return None

    def _stream(self, pass_id: int) -> Iterator:
        return self._seek(pass_id, 0)

    def _seek(self, pass_id: int, cursor: int) -> Iterator:
        n, slots = self.process_num, _Slots(self.buffer_size)
        tasks, out = queue.SimpleQueue(), queue.SimpleQueue()
        targets = [(_feed, (self.reader, pass_id, slots, tasks, n, cursor))]
        targets += [(_map, (self.mapper, tasks, out, slots))] * n
        # on a stop, end markers free the mappers even while the feeder is stuck in the source
        wake = [tasks] * n
        return _run_threads(self.name, targets, slots, out, n, self.order, wake)

    def _options(self) -> str:
        return (f"{describe(self.mapper)}, process_num={self.process_num}, "
                f"buffer_size={self.buffer_size}, order={self.order}")


def xmap_readers(mapper: Callable, reader: Reader, process_num: int, buffer_size: int,
                 order: bool = False) -> XmapReaders:
    """Apply ``mapper`` to ``reader``'s entries in ``process_num`` worker threads.

    Threads, despite Paddle's name, so lambdas work; they pay off for mappers
    that release the GIL (I/O, decoding, numpy). At most ``buffer_size``
    entries are in flight (read from the source, not yet yielded). ``order=True``
    yields results in input order, otherwise in completion order. An exception
    in the mapper or the source ends the pass with that exception.

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
        buffered, multiprocess_reader
    """
    if not callable(mapper):
        raise TypeError(f"xmap_readers mapper must be callable, got {type(mapper).__name__} {mapper!r}")
    check_reader(reader)
    process_num = _count(process_num, "xmap_readers process_num", 1, "it is the number of threads")
    buffer_size = _count(buffer_size, "xmap_readers buffer_size", 1,
                         "it bounds the entries in flight, e.g. give 2 * process_num")
    return XmapReaders(mapper, reader, process_num, buffer_size, bool(order))


# -- processes ----------------------------------------------------------------------------


class WorkerDiedError(RuntimeError):
    """A multiprocess_reader worker process ended without finishing or reporting an error."""


class _RemoteTraceback(Exception):
    """The cause of a re-raised worker exception: the worker's traceback, as text."""


def _pack_error(exc: BaseException) -> tuple[bytes | None, str, str]:
    try:
        blob: bytes | None = pickle.dumps(exc)
        pickle.loads(blob)  # some exceptions pickle but cannot be rebuilt
    except Exception:
        blob = None
    return blob, f"{type(exc).__name__}: {exc}", "".join(traceback.format_exception(exc))


def _unpack_error(payload: tuple, where: str) -> BaseException:
    blob, summary, text = payload
    try:
        exc = pickle.loads(blob) if blob is not None else None
    except Exception:
        exc = None
    if not isinstance(exc, BaseException):
        exc = RuntimeError(f"{summary} (raised in {where}; the exception could not be pickled)")
    exc.__cause__ = _RemoteTraceback(f'\n"""\nTraceback in {where}:\n{text}"""')
    return exc


def _load(reader: Reader | bytes, index: int) -> Reader:
    if not isinstance(reader, bytes):  # a forked worker inherits the reader itself
        return reader
    try:
        return pickle.loads(reader)
    except Exception as exc:
        raise TypeError(
            f"multiprocess_reader worker {index} could not load its reader ({exc!r}); unless "
            "forked, a worker imports it, so build it from module-level functions of an "
            "importable module (not __main__ or a test file)") from exc


def _process_main(index: int, reader: Reader | bytes, chan: Any, use_pipe: bool, stop: Any,
                  workers: int = 1) -> None:
    """Process body: send a pass of ``reader`` as pickled ``(index, tag, payload)`` messages.

    It runs as local worker ``index`` of ``workers`` (``readers.worker_info``), so
    a ``shard()`` in the reader takes this worker's share.
    """

    # Pickling here, not in mp.Queue's feeder thread, makes a bad entry fail in the open.
    def send(tag: int, payload: Any) -> None:
        data = pickle.dumps((index, tag, payload), pickle.HIGHEST_PROTOCOL)
        chan.send_bytes(data) if use_pipe else chan.put(data)

    try:
        with worker_context(index, workers):
            it = iterate(_load(reader, index))
            try:
                for entry in it:
                    if stop.is_set():
                        return
                    send(_ENTRY, entry)
            finally:
                close_iterator(it)
        send(_DONE, None)
    except BaseException as exc:
        try:
            send(_FAILED, _pack_error(exc))
        except BaseException:
            pass  # the consumer has gone: nobody is left to tell


def _died(index: int, proc: Any, name: str) -> WorkerDiedError:
    proc.join(_GRACE)
    code = proc.exitcode
    if code is None:
        how = "closed its pipe"
    elif code >= 0:
        how = f"exited with code {code}"
    else:
        how = f"was killed by {signal.Signals(-code).name if -code in signal.valid_signals() else -code}"
    return WorkerDiedError(
        f"multiprocess_reader worker {index} ({name}) {how} before finishing its reader, "
        "without reporting an error; if the system killed it, check its memory use")


def _pipe_messages(conns: list, procs: list, names: list[str]) -> Iterator[tuple]:
    """Messages from one pipe per worker until each is done; raise if one dies first."""
    owner = {c: i for i, c in enumerate(conns)} | {p.sentinel: i for i, p in enumerate(procs)}
    running = set(range(len(conns)))
    while running:
        for ready in wait([conns[i] for i in running] + [procs[i].sentinel for i in running]):
            i = owner[ready]
            if i not in running:
                continue
            if ready is conns[i]:
                try:
                    msg = pickle.loads(conns[i].recv_bytes())
                except EOFError:
                    raise _died(i, procs[i], names[i]) from None
                if msg[1] == _DONE:
                    running.discard(i)
                yield msg
            elif not conns[i].poll():  # it exited, and nothing it sent is left unread
                raise _died(i, procs[i], names[i])


def _queue_messages(q: Any, procs: list, names: list[str]) -> Iterator[tuple]:
    """Messages from one shared queue until each worker is done; raise if one dies first."""
    running = set(range(len(procs)))
    while running:
        try:
            msg = pickle.loads(q.get(timeout=_LIVENESS))
        except queue.Empty:
            # Exit is checked before emptiness: a worker flushes its queue before it exits.
            dead = [i for i in sorted(running) if procs[i].exitcode is not None]
            if dead and q.empty():
                raise _died(dead[0], procs[dead[0]], names[dead[0]]) from None
            continue
        if msg[1] == _DONE:
            running.discard(msg[0])
        yield msg


def _stop_processes(procs: list, conns: list, q: Any) -> None:
    """Give stopped workers a grace period to exit, then terminate, then kill; join all.

    Meanwhile what they send is read and dropped: a worker blocked on a full pipe
    or queue then gets to its stop check and closes its reader.
    """
    deadline, conns = time.monotonic() + _GRACE, set(conns)
    alive = [p for p in procs if p.is_alive()]
    while alive and (left := deadline - time.monotonic()) > 0:
        if q is not None:
            try:
                while True:
                    q.get_nowait()
            except queue.Empty:
                left = min(left, 0.05)  # no waitable handle on the queue: look again soon
        for ready in wait([*conns, *(p.sentinel for p in alive)], left):
            if ready in conns:
                try:
                    ready.recv_bytes()
                except EOFError:
                    conns.discard(ready)
        alive = [p for p in alive if p.is_alive()]
    for p in alive:
        p.terminate()
    for p in alive:
        p.join(_GRACE)
        if p.exitcode is None:
            p.kill()
    for p in procs:
        p.join()
        p.close()


class MultiprocessReader(Stage):
    name = "multiprocess_reader"

    def __init__(self, readers: tuple, use_pipe: bool, queue_size: int, start_method: str | None):
        super().__init__(*readers)
        self.readers, self.use_pipe, self.queue_size = readers, use_pipe, queue_size
        self.start_method = start_method

    def _sources(self, method: str) -> list:
        """What each worker gets: the reader itself when forked, else its pickle, made here."""
        if method == "fork":
            return list(self.readers)
        blobs = []
        for i, r in enumerate(self.readers):
            try:
                blobs.append(pickle.dumps(r, pickle.HIGHEST_PROTOCOL))
            except Exception as exc:
                raise TypeError(
                    f"multiprocess_reader reader {i} ({describe(r)}) cannot be pickled for the "
                    f"{method!r} start method ({exc}); build it from module-level functions (a "
                    "module-level generator function, functools.partial of one, or readers.* "
                    "creators), or pass start_method='fork'") from exc
        return blobs

    def _unresumable(self) -> str | None:
        return "multiprocess_reader merges its readers in whatever order their entries arrive"

    def _stream(self, pass_id: int) -> Iterator:
        for r in self.readers:  # each worker runs this pass of its reader, not its own count
            if isinstance(r, Stage):
                r.set_pass(pass_id)
        ctx = multiprocessing.get_context(self.start_method)
        sources = self._sources(ctx.get_start_method())
        names = [describe(r) for r in self.readers]
        stop, procs, conns = ctx.Event(), [], []
        q = None if self.use_pipe else ctx.Queue(self.queue_size)
        try:
            for i, source in enumerate(sources):
                recv, chan = ctx.Pipe(duplex=False) if q is None else (None, q)
                p = ctx.Process(target=_process_main, args=(i, source, chan, q is None, stop, len(sources)),
                                name=f"readerkit-{self.name}-{i}", daemon=True)
                try:
                    p.start()
                finally:
                    if q is None:  # now only the worker holds the write end: its death reads as EOF
                        conns.append(recv)
                        chan.close()
                procs.append(p)
            messages = _pipe_messages(conns, procs, names) if q is None else _queue_messages(q, procs, names)
            for i, tag, payload in messages:
                if tag == _ENTRY:
                    yield payload
                elif tag == _FAILED:
                    raise _unpack_error(payload, f"multiprocess_reader worker {i} ({names[i]})")
        finally:
            stop.set()
            _stop_processes(procs, conns, q)
            for c in conns:
                c.close()
            if q is not None:
                q.close()

    def _options(self) -> str:
        n = len(self.readers)
        opts = f"{n} reader{'' if n == 1 else 's'}, use_pipe={self.use_pipe}"
        opts += "" if self.use_pipe else f", queue_size={self.queue_size}"
        return opts + ("" if self.start_method is None else f", start_method={self.start_method!r}")


def multiprocess_reader(readers: Sequence[Reader], use_pipe: bool = True, queue_size: int = 1000,
                        *, start_method: str | None = None) -> MultiprocessReader:
    """Run each reader in its own process and merge their entries.

    Each reader's order is kept; the order across readers is not. A truthy
    ``use_pipe`` gives each worker its own pipe; otherwise the workers share one
    ``multiprocessing.Queue(queue_size)`` (``<= 0``: unbounded). ``start_method``
    picks the multiprocessing context (None: the default). Unless forked, the
    workers get pickled readers, so build them from module-level functions.
    A worker's exception is re-raised with its type and message, chained from
    the worker's traceback; a worker that dies first raises ``WorkerDiedError``.

    >>> from readers import from_sequence
    >>> r = multiprocess_reader([from_sequence([1, 2]), from_sequence([3, None])])
    >>> sorted(r(), key=str)
    [1, 2, 3, None]

    See Also:
        buffered, xmap_readers
    """
    if not isinstance(readers, (list, tuple)):
        raise TypeError(f"multiprocess_reader needs a list of readers, got {type(readers).__name__} "
                        f"{describe(readers)!r}; wrap a single reader in a list")
    if not readers:
        raise ValueError("multiprocess_reader needs at least one reader, got an empty list")
    for i, r in enumerate(readers):
        check_reader(r, f"multiprocess_reader readers[{i}]")
    methods = multiprocessing.get_all_start_methods()
    if start_method is not None and start_method not in methods:
        raise ValueError(f"multiprocess_reader start_method must be one of {methods} or None, "
                         f"got {start_method!r}")
    # Paddle's own test passes (readers, 100, use_pipe): any truthy use_pipe means pipes.
    return MultiprocessReader(tuple(readers), bool(use_pipe),
                              _count(queue_size, "multiprocess_reader queue_size"), start_method)
