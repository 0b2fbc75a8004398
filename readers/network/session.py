"""One connection of the data-provider server (``readers.network.server``), in a thread of its own.

A ``Session`` reads the hello (the version), the challenge's proof when the
server has a secret, then requests, one at a time and in order: each is
checked and split into parts (``readers.network.served_reader``), every part gathered and
handed to the session's sending thread (the gathers of all connections take
turns, in the order they ask: ``Turns``), which writes it with one blocking
``sendmsg`` straight from the gathered arrays while the next part is
gathered. A part holds its bytes of the server's budget until it is sent: of
the connection's own reserve first, then of the shared budget as far as it is
free, and it is cut to the rows they hold, so a client that reads nothing
holds up only itself. A connection keeps at most two parts unsent, and a
second only within a quarter of the budget. Reads wait with ``select`` on the
socket and on the server's wake-up socket, so a stop ends idle sessions at
once.
"""
from __future__ import annotations

import collections
import contextlib
import hmac
import queue
import select
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any

from readers.network.served_reader import RequestError
from readers.network.wire import (
    HELLO_FRAME,
    REQUEST_FRAME,
    VERSION,
    ProtocolError,
    challenge,
    decode,
    frame_length,
    frame_parts,
    proof,
    rejection,
    show_address,
)

__all__ = ["INLINE", "MIN_RATE", "Closed", "Session", "close_gently", "readable"]

#: Frames up to this size are sent by the reading thread itself when nothing is queued before them.
INLINE = 64 << 10
#: Bytes a session reads from its socket at a time.
READ_AHEAD = 64 << 10
#: The slowest a client may take an answer, in bytes a second (beyond ``frame_timeout``): a part it is sent
#: holds the server's budget, which the other clients share.
MIN_RATE = 256 << 10


class Turns:
    """A turn handed over in the order it was asked for (a ``threading.Lock`` wakes any of its waiters, and one
    thread may win it again and again): the connections' gathers take turns, so that every client with a request
    waiting is served alike. While one holder keeps the turn longer than ``patience`` seconds, the threads waiting
    go on without theirs, so a reader that waits (on a URL's bytes) holds up the other connections no longer than
    that; a line of turns that each pass quickly is waited through, however long.

    >>> turns = Turns()
    >>> with turns.turn() as held:
    ...     held, turns.take(0.01)  # (a second taker waits its patience out, and goes on without the turn)
    (True, False)
    """

    def __init__(self, patience: float = 0.05):
        self.patience = patience
        self._lock = threading.Lock()
        self._waiting: collections.deque[threading.Lock] = collections.deque()
        self._busy = False
        self._since = 0.0  # when the turn was last taken or handed over

    def take(self, patience: float | None = None) -> bool:
        """Wait for the turn; True once held, False when ``patience`` (default: the object's) ran out first."""
        patience = self.patience if patience is None else patience
        with self._lock:
            if not self._busy:
                self._busy, self._since = True, time.monotonic()
                return True
            mine = threading.Lock()
            mine.acquire()
            self._waiting.append(mine)
        while True:
            if mine.acquire(timeout=patience):
                return True  # released by the thread before, which handed its turn over
            with self._lock:
                if mine not in self._waiting:  # handed over meanwhile: held after all
                    mine.acquire()
                    return True
                if time.monotonic() - self._since >= patience:  # one holder too long: go on without the turn
                    self._waiting.remove(mine)
                    return False

    def give(self, held: bool) -> None:
        """Hand the turn to the next in line (when ``held``: what ``take`` returned)."""
        if not held:
            return
        with self._lock:
            if self._waiting:
                self._waiting.popleft().release()  # (still busy: the turn passes on)
                self._since = time.monotonic()
            else:
                self._busy = False

    @contextlib.contextmanager
    def turn(self) -> Iterator[bool]:
        """``take`` and ``give`` around a block; it gets whether the turn was held."""
        held = self.take()
        try:
            yield held
        finally:
            self.give(held)


def _advance(views: list[memoryview], n: int) -> None:
    """Drop the first ``n`` bytes sent from the front of ``views``."""
    while views and n >= len(views[0]):
        n -= len(views[0])
        views.pop(0)
    if views and n:
        views[0] = views[0][n:]


class Closed(Exception):
    """The session ends: the peer left, a limit ran out, or the server is stopping."""



def readable(socks: list, timeout: float) -> list:
    """Those of ``socks`` with bytes to read (or closed) within ``timeout`` seconds: ``poll``, which, unlike
    ``select``, takes descriptors past 1023.

    >>> a, b = socket.socketpair()
    >>> readable([a], 0.0), b.send(b"x"), readable([a], 1.0) == [a]
    ([], 1, True)
    """
    poll = select.poll()
    for sock in socks:
        poll.register(sock, select.POLLIN)
    found = {fd for fd, _ in poll.poll(max(0, int(timeout * 1000) + (timeout > 0)))}
    return [sock for sock in socks if sock.fileno() in found]


def close_gently(sock: socket.socket, linger: float = 0.5, most: int = 4 << 20) -> None:
    """Close a connection so that the client still gets what was sent: say the end, read what the client had
    sent meanwhile (up to ``most`` bytes, for up to ``linger`` s), then close. Closing with bytes unread would
    reset the connection, and the client could lose the rejection that says why."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_WR)
        deadline, dropped = time.monotonic() + linger, 0
        while dropped < most and time.monotonic() < deadline:
            if not readable([sock], max(0.0, deadline - time.monotonic())):
                break
            chunk = socket.socket.recv(sock, 1 << 16)
            if not chunk:
                break
            dropped += len(chunk)
    except (OSError, ValueError):
        pass
    finally:
        sock.close()


class Session:
    """One client connection in a thread of its own, from its hello to its close (one log line at the end)."""

    def __init__(self, server: Any, sock: socket.socket, peer: Any):
        self.server, self.sock = server, sock
        self.peer = show_address(peer[0], peer[1])
        self.requests = self.sent = 0
        self.why = "closed by the client"
        self.thread = threading.Thread(target=self.run, name=f"readerkit-serve {self.peer}", daemon=True)
        self.outbox: queue.Queue | None = None  # frames for the sending thread, once logged in
        self.sender: threading.Thread | None = None
        self.broken: str | None = None  # why sending failed: the reading thread ends on it
        self.holding = threading.Condition()  # the parts gathered and not yet sent, their bytes, and those of
        self.held = [0, 0]  # them from this connection's reserve (``own``)
        self.own = self.reserve = 0  # reserve: this connection's own share of the budget, once logged in
        self.queued = 0  # frames posted and not yet sent (under ``holding``)
        self.narrow = False  # whether the client's hello said it decodes narrowed columns (``wire_columns``)
        self.inbox = bytearray()  # bytes read from the socket past the frames taken
        self.body = memoryview(b"")  # the body of the frame read last (a get's binary indices)
        self.polls: tuple | None = None  # (the socket; the socket and the server's wake-up), once waited on

    def refuse(self, message: str) -> None:
        try:
            self.sock.settimeout(1.0)
            self.sock.sendall(rejection("server_error", message))
        except OSError:
            pass
        close_gently(self.sock)

    def abort(self) -> None:
        """Wake a session blocked on its socket, so it ends (the server is stopping and its drain is over)."""
        try:
            socket.socket.shutdown(self.sock, socket.SHUT_RDWR)
        except OSError:
            pass

    def run(self) -> None:
        began = time.monotonic()
        try:
            self._login(began + self.server.handshake_timeout)
            self.reserve = self.server.lend_reserve()
            self.outbox = queue.Queue(maxsize=2)
            self.sender = threading.Thread(target=self._sending, name=f"readerkit-serve-send {self.peer}",
                                           daemon=True)
            self.sender.start()
            while not self.server.stopping:  # stopping: the answer under way was finished; no more are read
                self._answer(self._frame(REQUEST_FRAME, self.server.idle_timeout))
            self.why = "the server stopped"
        except Closed as exc:
            self.why = str(exc) or self.why
        except (ssl.SSLError, ConnectionError, OSError) as exc:
            self.why = f"connection lost ({type(exc).__name__})"
        except Exception as exc:  # a fault of the server's own: this connection ends, the server lives on
            self.why = f"failed: {type(exc).__name__}: {exc}"
        finally:
            if self.sender is not None:  # what is queued still goes out (a client may have sent all, then waited)
                self._post(None)
                self.sender.join()
                self.why = self.broken or self.why
            self.server.return_reserve(self.reserve)  # (every part is sent or dropped: none holds it)
            close_gently(self.sock)
            self.server.log(f"{self.peer}: {self.requests} requests, {self.sent:,} bytes sent in "
                            f"{time.monotonic() - began:.1f} s; {self.why}")
            with self.server.lock:
                self.server.sessions.discard(self)

    # -- reading ---------------------------------------------------------------------------
    def _wait(self, deadline: float, idle: bool) -> None:
        """Wait until the socket has bytes, or raise ``Closed`` at ``deadline`` (or at a stop, when idle)."""
        if isinstance(self.sock, ssl.SSLSocket) and self.sock.pending():
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        if self.polls is None:  # (made once: a poll a frame costs a syscall, not three)
            self.polls = (select.poll(), select.poll())
            for poll, socks in zip(self.polls, ([self.sock], [self.sock, self.server.wake_read])):
                for sock in socks:
                    poll.register(sock, select.POLLIN)
        found = self.polls[idle].poll(int(left * 1000) + 1)  # (a frame begun is read whole: no wake-up then)
        if any(fd == self.sock.fileno() for fd, _ in found):
            return
        if found:
            raise Closed("the server stopped")
        raise TimeoutError

    def _exactly(self, size: int, deadline: float, idle: bool = False) -> bytearray:
        """The next ``size`` bytes from the client. The socket is read ``READ_AHEAD`` bytes at a time (a request
        comes with its prefix in one ``recv``); what is read past a frame is the next one's."""
        inbox = self.inbox
        while len(inbox) < size:
            begun = bool(inbox)
            self._wait(deadline, idle and not begun)
            if isinstance(self.sock, ssl.SSLSocket):  # one readable byte may be half a TLS record: bound the wait
                self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(max(READ_AHEAD, size - len(inbox)))
            except socket.timeout:
                raise TimeoutError from None
            if not chunk:
                raise Closed("closed by the client" if idle and not begun else "closed mid-frame")
            inbox += chunk
        taken = inbox[:size]
        del inbox[:size]
        return taken

    def _frame(self, limit: int, timeout: float, login: bool = False) -> dict[str, Any]:
        """The next frame's header; a broken one is answered and ends the session."""
        try:
            prefix = self._exactly(4, time.monotonic() + timeout, idle=True)
        except TimeoutError:
            raise Closed(f"no login within {self.server.handshake_timeout:g} s" if login
                          else f"idle for {timeout:g} s") from None
        try:
            size = frame_length(bytes(prefix), limit)
        except ProtocolError as exc:
            limit_name = {HELLO_FRAME: "HELLO_FRAME, before login", REQUEST_FRAME: "REQUEST_FRAME, for a request: "
                          "list the indices over several requests"}.get(limit, "MAX_FRAME")
            self._reject("too_large", f"{exc} ({limit_name})")
            raise Closed(f"a frame over the limit ({exc})") from None
        limit_s = min(timeout, self.server.frame_timeout) if login else self.server.frame_timeout
        try:
            payload = self._exactly(size, time.monotonic() + limit_s)
        except TimeoutError:
            raise Closed(f"no login within {self.server.handshake_timeout:g} s" if login
                          else f"a frame of {size:,} bytes unfinished after {limit_s:g} s") from None
        try:
            header, self.body = decode(payload)
            return header
        except ProtocolError as exc:
            self._reject("malformed", str(exc))
            raise Closed(f"a malformed frame ({exc})") from None

    # -- writing ---------------------------------------------------------------------------
    def _send(self, parts: list) -> None:
        """Send a frame's pieces whole. A client that takes none of it for ``frame_timeout`` is dropped, and so
        is one that takes it slower than ``MIN_RATE``: a part holds budget the other clients need."""
        total = sum(len(p) for p in parts)
        views = [memoryview(p).cast("B") for p in parts if len(p)]
        if not isinstance(self.sock, ssl.SSLSocket) and len(views) <= 512:
            try:  # first as far as the socket takes it now, without a wait: most frames go whole in one call
                n = self.sock.sendmsg(views, (), socket.MSG_DONTWAIT)
            except BlockingIOError:
                n = 0
            if n == total:
                self.sent += total
                return
            _advance(views, n)
        deadline = time.monotonic() + self.server.frame_timeout + total / MIN_RATE
        self.sock.settimeout(self.server.frame_timeout)
        try:
            while views:
                if isinstance(self.sock, ssl.SSLSocket):  # (TLS has no sendmsg)
                    n = self.sock.send(views[0][:1 << 20])
                else:
                    n = self.sock.sendmsg(views[:512])
                _advance(views, n)
                if views and time.monotonic() > deadline:
                    left = sum(len(v) for v in views)
                    raise Closed(f"reading its responses too slowly: {total - left:,} of {total:,} bytes in "
                                 f"{self.server.frame_timeout + total / MIN_RATE:.0f} s")
        except socket.timeout:
            raise Closed(f"not reading its responses for {self.server.frame_timeout:g} s") from None
        finally:
            self.sock.settimeout(None)
        self.sent += total

    def _post(self, parts: list | None, grant: tuple[int, int] = (0, 0), part: bool = False) -> None:
        """Send a frame after those before it: a small one at once, from this thread, when nothing is queued
        (a hand-over costs more than it saves); else through the sending thread, so the next part is gathered
        while this one goes out. A ``part`` of an answer holds its ``grant`` of the budget (``_take``), given
        back once it is sent. None ends the sending thread once the queue is sent."""
        small = parts is not None and (isinstance(self.sock, ssl.SSLSocket)  # (TLS: one thread uses the socket)
                                       or sum(len(p) for p in parts) <= INLINE)
        with self.holding:
            inline = small and self.queued == 0 and self.broken is None
            self.queued += 1
        if inline:
            try:
                self._send(parts)
            except (Closed, OSError) as exc:
                self._broke(exc)
                raise Closed(self.broken) from None
            finally:
                self._sent(grant, part)
                with self.holding:
                    self.queued -= 1
            return
        while True:
            if self.broken is not None and parts is not None:
                self._sent(grant, part)
                with self.holding:
                    self.queued -= 1
                raise Closed(self.broken)
            try:
                self.outbox.put((parts, grant, part), timeout=0.2)
                return
            except queue.Full:
                continue

    def _broke(self, exc: BaseException) -> None:
        self.broken = self.broken or (str(exc) if isinstance(exc, Closed)
                                      else f"connection lost ({type(exc).__name__})")
        self.abort()  # a reading thread waiting on the socket wakes, and ends

    def _take(self, want: int, row: int) -> tuple[int, int]:
        """Budget for the next part, of up to ``want`` bytes and at least one ``row`` (when ``want`` has one):
        (bytes of this connection's reserve, bytes of the shared budget), whole rows together. The reserve
        goes first, and the shared budget is taken as far as it is free, so that a part is cut to fit rather
        than waiting for clients that read nothing; with a part of its own unsent, a connection waits for it
        rather than for the shared budget. At most two parts are unsent, and a second only within a quarter
        of the budget: a client that stops reading holds little."""
        least = min(want, row)
        with self.holding:
            while True:
                if self.broken is not None:
                    raise Closed(self.broken)
                if self.held[0] < 2 and not (self.held[0] and self.held[1] + least > self.server.budget // 4):
                    most = min(want, self.server.budget // 4 - self.held[1]) if self.held[0] else want
                    mine, alone, pooled = min(most, self.reserve - self.own), not self.held[0], 0
                    if alone:
                        break
                    pooled = self.server.take(most - mine, max(0, least - mine), wait=False)
                    if pooled is not None:
                        break
                self.holding.wait(0.2)  # a part of this connection's goes out and gives its bytes back
            self.own += mine
            self.held[0] += 1
            self.held[1] += mine
        if alone:  # nothing of this connection's unsent: the shared budget is waited for, if need be
            try:
                pooled = self.server.take(most - mine, max(0, least - mine), lambda: self.broken)
            except BaseException:
                self._unhold((mine, 0))
                raise
        spare = (mine + pooled) % row if row and mine + pooled >= row else 0  # (less than a row: of no use)
        back = min(spare, pooled)
        if back:
            self.server.give(back)
        with self.holding:
            self.own -= spare - back
            self.held[1] += pooled - spare
        return mine - (spare - back), pooled - back

    def _sent(self, grant: tuple[int, int], part: bool) -> None:
        """A part's budget back, once it is sent (or never will be)."""
        if part:
            if grant[1]:
                self.server.give(grant[1])
            self._unhold(grant)

    def _unhold(self, grant: tuple[int, int]) -> None:
        with self.holding:
            self.held[0] -= 1
            self.held[1] -= grant[0] + grant[1]
            self.own -= grant[0]
            self.holding.notify_all()

    def _sending(self) -> None:
        while True:
            parts, grant, part = self.outbox.get()
            if parts is None:
                return
            try:
                if self.broken is None:
                    self._send(parts)
            except (Closed, OSError) as exc:
                self._broke(exc)
            finally:
                self._sent(grant, part)
                with self.holding:
                    self.queued -= 1

    def _reject(self, kind: str, message: str, request: int | None = None) -> None:
        self.server.count("rejections")
        try:
            if self.sender is not None:
                self._post([rejection(kind, message, request)])
            else:
                self._send([rejection(kind, message, request)])
        except (Closed, OSError):
            pass

    # -- the protocol ----------------------------------------------------------------------
    def _login(self, deadline: float) -> None:
        if self.server.tls is not None:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:  # (the handshake apart from the wrap, so a failed one still closes with a linger)
                self.sock = self.server.tls.wrap_socket(self.sock, server_side=True, do_handshake_on_connect=False)
                self.sock.do_handshake()
            except (ssl.SSLError, OSError) as exc:
                raise Closed(f"no TLS handshake ({exc})") from None
            self.sock.settimeout(None)
        header = self._frame(HELLO_FRAME, max(0.0, deadline - time.monotonic()), login=True)
        if header["type"] != "hello":
            self._reject("malformed", f"the first message must be a hello, got {header['type']!r}")
            raise Closed("no hello")
        version = header.get("version")
        if type(version) is not int or version != VERSION:  # JSON true and 1.0 equal 1 in Python
            self._reject("unsupported_version", f"this server speaks protocol version {VERSION}, the client "
                                                f"{version!r}; upgrade the older end")
            raise Closed(f"version {version!r}")
        self.narrow = header.get("narrow") is True
        if self.server.secret is not None:
            nonce = challenge()
            self._send(frame_parts({"type": "challenge", "nonce": nonce.hex()}))
            answer = self._frame(HELLO_FRAME, max(0.0, deadline - time.monotonic()), login=True)
            given = answer.get("proof") if answer["type"] == "auth" else None
            expected = proof(self.server.secret, nonce).encode()  # (JSON may carry a lone surrogate: "\ud800")
            if not isinstance(given, str) or not hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected):
                self._reject("not_authorised", "the proof does not match this server's secret and challenge; "
                                               "give the client the server's secret")
                raise Closed("a wrong secret")
        self._send(frame_parts(self.server.served.welcome))

    def _answer(self, header: dict[str, Any]) -> None:
        self.requests += 1
        self.server.count("requests")
        request = header.get("id")
        request = request if isinstance(request, int) and not isinstance(request, bool) else None
        served = self.server.served
        try:
            if header["type"] != "get":
                raise RequestError("malformed", f"unknown message type {header['type']!r}; a request is a get")
            if request is None or request < 0:
                raise RequestError("malformed", f'a get needs an "id", an int >= 0, got {header.get("id")!r}')
            indices, pass_id = served.indices(header, self.body), served.pass_of(header)
            row = served.row_bytes
            for first, count in served.parts(len(indices)):
                while True:  # the part, in as many frames as the budget this connection gets now needs
                    grant = self._take(count * row, row)
                    rows = min(count, max(1, sum(grant) // row)) if row else count  # (a row over the budget: alone)
                    try:
                        with self.server.turns.turn():
                            meta, buffers = served.part(indices[first:first + rows], pass_id, self.narrow)
                    except BaseException:
                        self._sent(grant, True)
                        raise
                    self._post(frame_parts({"type": "entries", "id": request, "first": first, "count": rows,
                                            "columns": meta}, buffers), grant, part=True)
                    self.server.count("bytes", sum(len(b) for b in buffers))
                    first, count = first + rows, count - rows
                    if not count:
                        break
        except RequestError as exc:
            self._reject(exc.kind, exc.message, request)
        except (Closed, OSError):
            raise
        except Exception as exc:  # a fault of the server's own: the request says so, the server lives on
            self.server.log(f"{self.peer}: request {request} failed: {type(exc).__name__}: {exc}")
            self._reject("server_error", f"{type(exc).__name__}: {exc}", request)
