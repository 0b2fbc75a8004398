"""``readers.remote``: an indexed reader whose entries a data-provider server holds.

Reads are requests over one connection per thread and process, several in
flight (``in_flight``), each for about ``request_bytes`` of entries (the
next gathers of a pass share one) as an interval or a list of indices, and
no more than ``in_flight`` x ``request_bytes`` of entries asked for ahead of
the consumer (``in_flight.Read``). A broken connection is opened again
with exponential back-off, and every request not yet answered is sent again
from its first row not received, so a pass rides out a server restart with
nothing lost or doubled; the ``deadline`` counts from the first failure.
The first connection, when the reader is made, waits ``connect_timeout``
only: a server never reached is most likely not there, or not at that address.
"""
from __future__ import annotations

import os
import random
import ssl
import threading
import time
import warnings
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from readers.errors import BadValue, ReaderkitError
from readers.network.connection import Connection, TLSMismatch, client_tls
from readers.network.in_flight import Job, Read, Request
from readers.network.wire import (
    MAX_FRAME,
    NotAuthorised,
    RemoteError,
    UnsupportedVersion,
    frame_parts,
    parse_address,
    raise_rejection,
    read_secret,
    show_address,
    unpack_columns,
)
from readers.stage import IndexedReader

__all__ = ["INDEX_ROWS", "REQUEST_BYTES", "Remote", "RemoteUnavailable", "check_options", "remote"]

#: About how many bytes of entries one request asks for; a larger read is several requests in flight.
REQUEST_BYTES = 2 << 20
#: The most bytes of requests a connection has sent and not yet seen answered (one request may be larger).
SEND_AHEAD = 64 << 10
#: The most indices one request lists (as JSON, about 1.3 MB at most), however small the entries.
INDEX_ROWS = 1 << 16


class RemoteUnavailable(ReaderkitError, ConnectionError):
    """The server could not be reached within ``connect_timeout`` when the reader was made, or again before the
    deadline: the message names the address, the attempts, the last error and what to check."""


class Remote(IndexedReader):
    """The entries a data-provider server holds, read by index (see ``remote``)."""

    name = "remote"

    def __init__(self, address: Any, secret: bytes | None, in_flight: int, deadline: float, timeout: float,
                 ca_file: str | None, tls: bool, request_bytes: int | None = None, connect_timeout: float = 5.0):
        super().__init__()
        self.host, self.port = parse_address(address)
        self.address = show_address(self.host, self.port)
        self.secret, self.in_flight, self.deadline, self.timeout = secret, in_flight, deadline, timeout
        self.connect_timeout = connect_timeout
        self.ca_file, self.tls = ca_file, bool(tls or ca_file)
        self._local: threading.local | None = None
        self._local_pid: int | None = None
        conn = self._open(None, None, first=True)
        self.welcome = conn.welcome
        self._checkin(conn)
        self.request_bytes = request_bytes = REQUEST_BYTES if request_bytes is None else request_bytes
        row_bytes = max(int(self.welcome.get("row_bytes", 0)), 1)
        self.request_rows = max(1, request_bytes // row_bytes)
        self.frame_rows = max(1, (int(self.welcome.get("max_frame", MAX_FRAME)) - (64 << 10)) // row_bytes)
        #: The most entries asked for and not yet taken by the consumer: as many as in_flight x request_bytes
        #: holds, in requests of request_rows; entries larger than request_bytes go one a request, and no more
        #: of them than that many bytes hold (at least one, so that one larger than the whole bound is still read).
        self.window_rows = max(1, min(in_flight * self.request_rows, in_flight * request_bytes // row_bytes))

    # -- connections: one per thread and process, opened again when broken ------------------
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_local"] = state["_local_pid"] = None  # each worker opens its own connection
        return state

    def _idle(self) -> list[Connection]:
        """This thread's idle connections (none yet in a new process or thread)."""
        if self._local is None or self._local_pid != os.getpid():  # (a forked worker starts afresh)
            self._local, self._local_pid = threading.local(), os.getpid()
        if not hasattr(self._local, "idle"):
            self._local.idle = []
        return self._local.idle

    def _checkout(self) -> Connection:
        idle = self._idle()
        return idle.pop() if idle else self._open(None, None)

    def _checkin(self, conn: Connection) -> None:
        idle = self._idle()
        if len(idle) < 2:
            idle.append(conn)
        else:
            conn.close()

    def _open(self, failed_at: float | None, why: BaseException | None, first: bool = False) -> Connection:
        conn = self._reconnect(failed_at, why, first)
        if hasattr(self, "welcome") and (conn.welcome["entries"], conn.welcome.get("fingerprint")) != \
                (self.welcome["entries"], self.welcome.get("fingerprint")):
            conn.close()
            raise RemoteError("server_error", f"the server now serves other data ({conn.welcome['entries']:,} "
                                              f"entries of {conn.welcome.get('reader')}, was "
                                              f"{self.welcome['entries']:,} of {self.welcome.get('reader')}); "
                                              "start it again on the same data, or start the pass again",
                              self.address)
        return conn

    def _reconnect(self, failed_at: float | None, why: BaseException | None, first: bool = False) -> Connection:
        """A connection, tried again with back-off for up to ``deadline`` seconds from ``failed_at`` (the first
        failure), or ``connect_timeout`` from now when ``first``: a server never reached is waited for briefly."""
        started, attempts, warned = failed_at or time.monotonic(), 0, False
        limit = self.connect_timeout if first else self.deadline
        tls = client_tls(self.ca_file) if self.tls else None
        while True:
            # a host that does not answer at all is waited for until the limit (a lost one: 5 s at least)
            left = limit if first else max(5.0, limit)
            if why is not None:
                waited = time.monotonic() - started
                if waited > limit:
                    raise RemoteUnavailable(self._unavailable(waited, attempts, why, first)) from why
                if not warned and attempts:  # (a connection the server closed as idle opens again quietly)
                    warnings.warn(f"readers.remote: cannot reach {self.address} ({type(why).__name__}: {why}); "
                                  f"trying again for up to {limit:g} s", RuntimeWarning, stacklevel=4)
                    warned = True
                delay = min(2.0, 0.05 * 2 ** min(attempts, 8)) * random.uniform(0.5, 1.0)
                time.sleep(min(delay, max(0.0, limit - waited) + 0.01))
                left = max(0.05, limit - (time.monotonic() - started))
            attempts += 1
            try:
                return Connection(self.host, self.port, secret=self.secret, tls=tls, timeout=self.timeout,
                                  connect_timeout=left)
            except (NotAuthorised, UnsupportedVersion, ssl.SSLCertVerificationError, TLSMismatch):
                raise  # the server's answer, its certificate, or TLS on one end only: trying again cannot help
            except OSError as exc:
                why = exc

    def _unavailable(self, waited: float, attempts: int, why: BaseException, first: bool) -> str:
        tried = (f"over {attempts} attempt{'s' if attempts != 1 else ''} to connect" if attempts else
                 "its connections opening but the requests going unanswered")
        last = f"(the last: {type(why).__name__}: {why}); check that `python cli.py serve` runs there and this " \
               "machine can reach it"
        if first:
            # a launcher may start the server and its clients together, and a server of a large corpus takes a while
            return (f"{self.address}: no data-provider server answered within {self.connect_timeout:g} s, {tried} "
                    f"{last}; a server started at the same time may still be starting (it listens once it prints "
                    "'serving N entries on HOST:PORT'): start the client after that line, or give readers.remote a "
                    f"longer connect_timeout (now {self.connect_timeout:g} s; deadline, now {self.deadline:g} s, is the "
                    "wait for a server lost during a read; train --connect-timeout)")
        return (f"{self.address}: no data-provider server answered for {waited:.0f} s, {tried} {last}, or give "
                f"readers.remote a longer deadline (now {self.deadline:g} s)")

    # -- the indexed reader ---------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.welcome["entries"])

    def _get(self, i: int) -> Any:
        columns = self.gather_columns(np.array([i], np.int64))
        return tuple(c[0] for c in columns) if isinstance(columns, tuple) else columns[0]

    def gather(self, indices: np.ndarray) -> Iterable:
        """The entries at ``indices``: a list when one request holds them, else made as they are taken, with no
        more than ``in_flight`` x ``request_bytes`` of them asked for ahead (a pass's chunk may be the whole pass).

        >>> import readers
        >>> with readers.serve(readers.np_array(np.arange(10) * 2)) as server:
        ...     r = remote(server.address, request_bytes=24)  # three entries a request
        ...     it = iter(r.gather(np.arange(10)))
        ...     first, asked = next(it), server.stats["requests"]
        ...     rest = list(it)
        >>> int(first), asked, [int(x) for x in rest]
        (0, 1, [2, 4, 6, 8, 10, 12, 14, 16, 18])
        """
        indices = np.asarray(indices, np.int64)
        if len(indices) <= self.request_rows:
            columns = self.gather_columns(indices)
            return list(zip(*columns)) if isinstance(columns, tuple) else list(columns)
        return self._streamed(indices)

    def gather_columns(self, indices: np.ndarray) -> Any:
        for _, columns in self.gather_ahead([np.asarray(indices, np.int64)]):  # to its end: the connection goes back
            pass
        return columns

    def _limits(self) -> dict[str, int]:
        """How a read puts its gathers into requests: ``Read``'s limits."""
        return {"in_flight": self.in_flight, "request_rows": self.request_rows, "index_rows": INDEX_ROWS,
                "whole_rows": min(self.frame_rows, INDEX_ROWS, self.in_flight * self.request_rows)}

    def gather_ahead(self, chunks: Iterable[np.ndarray]) -> Iterator[tuple[np.ndarray, Any]]:
        """(indices, columns) for each chunk in order, with the next chunks asked for while the consumer works on
        this one: up to ``in_flight`` requests and ``in_flight`` x ``request_bytes`` of entries ahead of it (one
        chunk larger than that is asked for in requests of ``request_bytes``, no more than that under way). Until
        the first chunk is handed over only its own requests go out, so a read of one costs no more.

        >>> import readers
        >>> with readers.serve(readers.np_array(np.arange(10) * 2)) as server:
        ...     r = remote(server.address, in_flight=2)
        ...     [(i.tolist(), c.tolist()) for i, c in r.gather_ahead([np.arange(2), np.array([9, 0]), np.arange(5, 8)])]
        [([0, 1], [0, 2]), ([9, 0], [18, 0]), ([5, 6, 7], [10, 12, 14])]
        """
        read = Read(iter(chunks), self._checkout(), whole=True, **self._limits())
        try:
            while (job := self._next(read)) is not None:
                read.pending -= len(job.indices)  # taken whole: what the consumer holds is no longer ahead
                yield job.indices, job.result()
        finally:
            self._finish(read)

    def _streamed(self, indices: np.ndarray) -> Iterator:
        """``gather`` of more entries than a request holds: requests of ``request_rows``, each entry counted as
        taken when it is handed over, and the rest of the window asked for once the consumer comes back for a
        second entry (one entry read costs one request)."""
        step = self.request_rows
        read = Read((indices[lo:lo + step] for lo in range(0, len(indices), step)), self._checkout(), whole=False,
                    **self._limits())
        pumped = False
        try:
            while (job := self._next(read)) is not None:
                columns = job.result()
                for entry in (zip(*columns) if isinstance(columns, tuple) else columns):
                    read.pending -= 1
                    yield entry
                    if not pumped:  # the consumer came back for more: the next requests travel meanwhile
                        self._next(read, wait=False)
                        pumped = True
        finally:
            self._finish(read)

    def _next(self, read: Read, wait: bool = True) -> Job | None:
        """Plan ``read``'s next requests and send what its bound allows; with ``wait``, receive until its first
        job has all its rows and hand that over (None once every job was). A broken connection is opened again,
        and every request not yet answered is asked for again from its first row not received."""
        while True:
            read.take_chunks()
            if not read.jobs:
                return None  # the chunks ran out, and every job was handed over
            try:
                self._send(read, wait)
                if not wait:
                    return None
                if not read.jobs[0].done():  # (then some of its requests are in sent)
                    self._receive(read.conn, read.sent)
                    read.failed_at = None
                    continue
            except OSError as exc:  # the connection broke: again from each request's first missing row
                read.failed_at = read.failed_at or time.monotonic()
                read.conn.close()
                read.conn = None
                read.waiting = deque(sorted([*read.sent.values(), *read.waiting], key=Request.order))
                for request in read.waiting:
                    request.rebase()
                read.sent.clear()
                read.conn = self._open(read.failed_at, exc)
                continue
            read.handed += 1
            return read.jobs.popleft()  # one at a time: the next chunk's requests go out before the next hand-over

    def _send(self, read: Read, waiting: bool) -> None:
        """Send the waiting requests the bounds allow: at most ``in_flight`` under way, at most ``window_rows`` of
        entries asked for and not taken (``Read.ahead``; one request larger than that only alone, and for the first
        job, the one the consumer waits for), no more than ``SEND_AHEAD`` bytes of requests
        unanswered (so that sending never waits on a server that waits on this end to read its answers), and
        before the first hand-over, only the first job's requests."""
        while read.waiting and len(read.sent) < self.in_flight:
            request = read.waiting[0]
            if not read.handed and request.segments[0][0] is not read.jobs[0]:
                break
            new, ahead = 0 if request.asked else request.rows, read.ahead(waiting)  # (0: asked again, counted)
            if ahead and ahead + new > self.window_rows:
                break
            if new > self.window_rows and request.segments[0][0] is not read.jobs[0]:
                break  # a gather larger than the window (of entries over request_bytes) goes once it is waited for
            frame = b"".join(frame_parts(*request.frame(read.ident + 1, self.bound_pass,
                                                        read.conn.welcome.get("binary_indices") is True)))
            if read.sent and sum(r.asked for r in read.sent.values()) + len(frame) > SEND_AHEAD:
                break
            read.ident += 1
            read.sent[read.ident] = read.waiting.popleft()
            request.asked = len(frame)
            read.pending += new
            read.conn.send_frame(frame)

    def _finish(self, read: Read) -> None:
        # Stopped after its last answer (one gather, or a pass that took its last batch and stopped) or
        # finished: the connection is clean, and the next read reuses it. Stopped or failed with answers
        # under way: their late frames must not reach another read, so it closes.
        if read.conn is not None:
            if read.sent:
                read.conn.close()
            else:
                self._checkin(read.conn)

    def _receive(self, conn: Connection, sent: dict[int, Request]) -> None:
        """Read one frame and put its rows in place."""
        header, body = conn.receive()
        request = sent.get(header.get("id"))
        if header["type"] == "error":
            raise_rejection(header, self.address)
        if header["type"] != "entries" or request is None or header.get("first") != request.got:
            raise RemoteError("server_error", f"an unexpected frame {header!r}", self.address)
        columns = unpack_columns(header["columns"], body)
        count = int(header["count"])
        request.place(request.got, count, columns)
        request.got += count
        if request.got >= request.rows:
            del sent[header["id"]]

    @property
    def draws_per_pass(self) -> bool:
        """Whether the served reader draws its entries anew every pass (its welcome says): a pass then binds
        this reader (``for_pass``), and its requests name the pass they read."""
        return bool(self.welcome.get("draws_per_pass"))

    # -- what the data is, for checkpoints ------------------------------------------------
    def _options(self) -> str:
        return f"{self.address}: {len(self):,} entries of {self.welcome.get('reader', '?')}"

    def identity(self) -> str:
        """The served pipeline, not the address: the same data from another server is the same data."""
        return "remote(" + " / ".join(self.welcome.get("fingerprint", {}).get("pipeline", [])) + ")"

    def digest(self) -> str | None:
        return self.welcome.get("fingerprint", {}).get("content")

    def stands_for(self) -> dict[str, list] | None:
        """The served pipeline's stages and its sources' digests, for ``readers.fingerprint``: the data read
        through a server is known as the same data read locally (a checkpoint of one resumes on the other)."""
        served = self.welcome.get("fingerprint", {})
        if not isinstance(served.get("pipeline"), list) or not isinstance(served.get("digests"), list):
            return None  # (a server that does not say: known as remote(...), by its combined digest)
        return {"pipeline": list(served["pipeline"]), "digests": list(served["digests"])}

    @property
    def info(self) -> dict[str, Any]:
        """Facts of the served data the server announced (a token set's ``seq_len``, ``token_size``, ...)."""
        return dict(self.welcome.get("info", {}))


def remote(address: Any, *, secret: str | bytes | None = None, in_flight: int = 8, deadline: float = 120.0,
           timeout: float = 30.0, ca_file: str | None = None, tls: bool = False,
           request_bytes: int | None = None, connect_timeout: float = 5.0) -> Remote:
    """An indexed reader of the entries a data-provider server (``python cli.py serve``) holds at ``address``.

    ``address`` is ``"host:port"`` (an IPv6 host in brackets) or a pair
    (``readers.remote`` also takes a list of them: several servers, see
    ``readers.network.multi_server``). It
    has ``len``, ``[i]`` and vectorised gathers, so shuffle, shard, the round
    coordinator, batching and positions work on it as on a local reader, and
    give the same entries. ``secret`` (text or bytes; default
    ``$READERKIT_SECRET``) answers the server's challenge. ``in_flight``
    requests are kept under way at once, so batches arrive while the model
    trains; consecutive gathers share a request of up to about
    ``request_bytes`` of entries (default ``REQUEST_BYTES``, 2 MiB: fewer,
    larger answers; a small value asks for each gather alone, for the least
    latency). What is asked for and not yet taken stays within ``in_flight``
    x ``request_bytes`` (entries larger than ``request_bytes`` go one a
    request, as many as that holds, and one at a time when one alone is
    larger than it all), whatever the order: a pass's entries are asked for as they are taken, a
    gather larger than that travels in requests of ``request_bytes``, and
    until the first is handed over nothing else is asked for (reading one
    entry costs one request).

    The server is waited for ``connect_timeout`` seconds (5) when the reader
    is made, then ``RemoteUnavailable`` names the address. A connection
    broken later is tried again with exponential back-off for up to
    ``deadline`` seconds (120) from the failure, and the pass goes on from
    the first entry not received; then ``RemoteUnavailable`` again. A
    refused secret (``NotAuthorised``) or another protocol version
    (``UnsupportedVersion``) raises at once. ``timeout`` bounds each wait on
    the socket (an attempt to connect again ends by the deadline too).
    ``ca_file`` (or ``tls=True`` for the system's CAs) speaks TLS and checks
    the server's certificate (one that fails the check raises
    ``ssl.SSLCertVerificationError`` at once); TLS on one end only raises
    ``TLSMismatch`` at once, saying which end to change. The reader pickles
    without its connections: each worker process or thread opens its own.

    >>> import numpy as np, readers
    >>> server = readers.serve(readers.from_arrays(np.arange(100).reshape(50, 2), np.arange(50)))
    >>> r = remote(server.address)
    >>> len(r), int(r[3][1]), r.gather_columns(np.array([7, 2]))[1].tolist()
    (50, 3, [7, 2])
    >>> server.stop()
    """
    check_options(in_flight=in_flight, deadline=deadline, timeout=timeout, connect_timeout=connect_timeout,
                  request_bytes=request_bytes)
    return Remote(address, read_secret(secret), in_flight, float(deadline), float(timeout), ca_file, tls,
                  request_bytes, float(connect_timeout))


def check_options(*, in_flight: Any, deadline: Any, timeout: Any, connect_timeout: Any, request_bytes: Any) -> None:
    """Refuse ``readers.remote``'s options when they are out of range, saying what each one is.

    >>> check_options(in_flight=0, deadline=1, timeout=1, connect_timeout=1, request_bytes=None)
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: in_flight must be an int >= 1 (the requests under way at once), got 0
    """
    if not isinstance(in_flight, int) or isinstance(in_flight, bool) or in_flight < 1:
        raise BadValue(f"in_flight must be an int >= 1 (the requests under way at once), got {in_flight!r}")
    if not deadline >= 0 or not timeout > 0:
        raise BadValue(f"deadline must be >= 0 and timeout > 0 (seconds), got {deadline!r} and {timeout!r}")
    if isinstance(connect_timeout, bool) or not isinstance(connect_timeout, (int, float)) or not connect_timeout > 0:
        raise BadValue(f"connect_timeout must be a number of seconds > 0 (the wait for the server when the reader "
                       f"is made), got {connect_timeout!r}")
    if request_bytes is not None and (not isinstance(request_bytes, int) or isinstance(request_bytes, bool)
                                      or request_bytes < 1):
        raise BadValue(f"request_bytes must be an int >= 1 (about the bytes one request asks for), got "
                       f"{request_bytes!r}")
