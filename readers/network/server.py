"""The data-provider server: a thread per connection, serving an indexed reader to many clients at once.

Each connection is a ``Session`` (``readers.network.session``) in a thread
of its own: a hello (the version), the challenge and its proof when the
server has a secret, then requests, each gathered (``readers.network.served_reader``) and
sent with one blocking ``sendmsg`` straight from the gathered arrays. Threads
won the benchmark
against an asyncio loop (``benchmarks/remote.py``): the loop paid for every
piece of a large response a turn of Python, and a thread lets the kernel take
it whole, while numpy's copies and the socket calls release the GIL. What
keeps the server up under bad or slow clients:

- frames are refused by their length before anything is read (``HELLO_FRAME``
  before login, ``MAX_FRAME`` after), and a broken frame closes only its
  own connection;
- the login must finish within ``handshake_timeout``; a frame, once begun,
  within ``frame_timeout``; a connection with no request for
  ``idle_timeout`` is closed; a client that takes nothing of a response for
  ``frame_timeout`` is dropped (one that reads slowly is not);
- a connection answers its requests in order, and the parts gathered and not
  yet sent, over all connections, stay within ``budget`` bytes (one
  connection holds at most two); at most ``max_clients`` connections are served at once
  (more are told ``server_error`` and closed). Memory is bounded whatever
  clients do;
- a client that reads slowly, or not at all, delays only itself: every
  connection has ``budget / (2 * max_clients)`` bytes of the budget to itself
  (its ``reserve``; one entry where that is more, and then only the first
  connections that half the budget holds) and takes the rest of a part from
  the shared half only as far as it is free, cutting the part to fit.
  Clients that read nothing can hold the shared half, never another's
  reserve, so the others read on in smaller parts. A client that takes its
  answers slower than ``MIN_RATE``, or not at all for ``frame_timeout``, is
  dropped with a log line, which gives back what it held; a connection
  without a reserve waits for the shared budget for up to ``frame_timeout``,
  then its client asks again.

``stop()`` stops listening, closes idle connections, lets the requests under
way finish for up to ``drain_timeout`` and then closes the rest.

How a server is run: ``serve(reader)`` (``readers.serve``) is for notebooks,
tests and examples: the server runs in threads of its own and the handle,
a ``Serving``, says its address. ``run_until_signal`` is ``python cli.py
serve``: it prints ``serving N entries on HOST:PORT`` once listening, and on
SIGTERM or Ctrl-C finishes in-flight responses and returns. ``tls_context``
loads a certificate for either.
"""
from __future__ import annotations

import errno
import ipaddress
import os
import select
import signal
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from readers.errors import BadValue, ReaderkitError
from readers.network.parts import show_part
from readers.network.served_reader import Served
from readers.network.session import Closed, Session, readable
from readers.network.wire import read_secret, show_address

__all__ = ["CannotListen", "Server", "Serving", "is_loopback", "run_until_signal", "serve", "tls_context"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (127.0.0.0/8, ::1, localhost).

    >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("0.0.0.0"), is_loopback("::1")
    (True, True, False, True)
    """
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class CannotListen(ReaderkitError, OSError):
    """The server cannot listen where it was asked to: a host name that does not resolve, a port in use, a port below
    1024 without the right to it. The message names the address and says what to give instead; ``errno`` is the
    system's (``errno.EADDRINUSE``, ``errno.EACCES``, or the resolver's ``socket.EAI_*``)."""


def cannot_listen(host: str, port: int, exc: OSError) -> OSError:
    """What to raise when listening on ``host:port`` failed with ``exc``: an error whose one line names the address
    and says what to do, or ``exc`` itself when there is nothing more to say.

    >>> print(cannot_listen("127.0.0.1", 80, PermissionError(errno.EACCES, "Permission denied")))
    cannot listen on 127.0.0.1:80 (Permission denied): a port below 1024 needs root or CAP_NET_BIND_SERVICE; give a port of 1024 or more (0 picks a free one)
    >>> print(cannot_listen("nosuch.invalid", 20001, OSError(socket.EAI_NONAME, "Name or service not known (while "
    ...                                                  "attempting to bind on address ('nosuch.invalid', 20001))")))
    cannot listen on nosuch.invalid:20001: the host name nosuch.invalid does not resolve (Name or service not known); give a name or address of this machine (`ip addr` lists its addresses), 0.0.0.0 for all of them, or 127.0.0.1
    """
    where = show_address(host, port)
    if isinstance(exc, socket.gaierror) or (exc.errno or 0) < 0:  # (the resolver's EAI_* codes are negative;
        reason = (exc.strerror or str(exc)).split(" (while attempting", 1)[0]  # create_server rewraps its gaierror)
        error: OSError = CannotListen(f"cannot listen on {where}: the host name {host} does not resolve ({reason}); "
                                      "give a name or address of this machine (`ip addr` lists its addresses), "
                                      "0.0.0.0 for all of them, or 127.0.0.1")
    elif exc.errno == errno.EADDRNOTAVAIL:
        return BadValue(f"cannot listen on {where}: no network interface of this machine has the address {host}; "
                        "give one it has (`ip addr` lists them), 0.0.0.0 for all of them, or 127.0.0.1")
    elif exc.errno == errno.EADDRINUSE:
        error = CannotListen(f"{where} is in use (another server?): stop it, or give another port (0 picks a free "
                             "one)")
    elif exc.errno == errno.EACCES:
        why = ("a port below 1024 needs root or CAP_NET_BIND_SERVICE; give a port of 1024 or more" if 0 < port < 1024
               else "this system's security policy forbids it; give another port")
        error = CannotListen(f"cannot listen on {where} ({exc.strerror}): {why} (0 picks a free one)")
    else:
        return exc
    error.errno = exc.errno
    return error


class Server:
    """A data-provider server for ``reader`` (see the module doc): ``start`` it, ``stop`` it.

    ``secret`` (bytes or None) turns on the challenge; ``tls`` is an
    ``ssl.SSLContext`` for the server side, or None. ``log`` takes one line
    per connection (default: standard error). ``part``, ``(start, stop)``
    half-open, serves those sample indices alone (``readers.network.parts``):
    a request for another gets ``out_of_range``, and the welcome announces
    the part and a digest of its rows.

    >>> import numpy as np, readers
    >>> server = Server(readers.np_array(np.arange(4)), log=lambda line: None)
    >>> host, port = server.start("127.0.0.1", 0)
    >>> int(readers.remote(f"{host}:{port}")[3])
    3
    >>> server.stop()
    """

    def __init__(self, reader: Any, *, part: Any = None, info: dict[str, Any] | None = None,
                 secret: bytes | None = None, tls: ssl.SSLContext | None = None, handshake_timeout: float = 10.0,
                 idle_timeout: float = 600.0, frame_timeout: float = 60.0, drain_timeout: float = 10.0,
                 max_clients: int = 1024, budget: int = 256 << 20, log: Callable[[str], None] | None = None):
        for name, value in (("handshake_timeout", handshake_timeout), ("idle_timeout", idle_timeout),
                            ("frame_timeout", frame_timeout), ("drain_timeout", drain_timeout)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise BadValue(f"{name} must be a number of seconds > 0, got {value!r}")
        for name, value in (("max_clients", max_clients), ("budget", budget)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise BadValue(f"{name} must be an int >= 1, got {value!r}")
        if secret is not None and not secret:
            raise BadValue("the secret is empty, which anyone can prove; give a secret of some length (or none, "
                           "on 127.0.0.1)")
        if isinstance(reader, Served) and part is not None:
            raise BadValue("give the part to Served(reader, part=...), not to a Server of a Served")
        self.served = reader if isinstance(reader, Served) else Served(reader, info, part=part)
        self.secret, self.tls = secret, tls
        self.handshake_timeout, self.idle_timeout = handshake_timeout, idle_timeout
        self.frame_timeout, self.drain_timeout = frame_timeout, drain_timeout
        self.max_clients, self.budget = max_clients, budget
        # a connection's own share, which clients that read nothing cannot take: an even share of half the budget,
        # or one entry where that is more (and then only as many connections as half the budget holds have one)
        self.reserve = min(max(self.served.row_bytes, budget // (2 * max_clients)), budget // 2)
        self._reserves = (budget // 2) // self.reserve if self.reserve else 0  # those not lent to a connection
        self.shared = budget - self._reserves * self.reserve
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.sessions: set[Session] = set()
        self.stats = {"connections": 0, "requests": 0, "rejections": 0, "bytes": 0}
        self.stopping = False
        self.lock = threading.Lock()
        self._budget = threading.Condition(self.lock)
        self._free = self.shared  # the shared part of the budget not taken
        self._listener: socket.socket | None = None
        self._accepting: threading.Thread | None = None
        self.wake_read, self._wake = socket.socketpair()  # readable once stopping: wakes every idle session

    def start(self, host: str = "127.0.0.1", port: int = 0) -> tuple[str, int]:
        """Listen on ``host:port`` (0: a free port), with SO_REUSEADDR, in a thread; returns the address bound.

        An address no interface of this machine has is refused as a ``BadValue``
        naming it ("cannot listen on ...: no network interface of this machine has
        the address ..."), and so is a reachable host without a secret; a host
        name that does not resolve, a port in use and a port below 1024 without
        the right to it raise ``CannotListen``, naming the address:

        >>> import numpy as np, readers
        >>> server = Server(readers.np_array(np.arange(3)), log=lambda line: None)
        >>> host, port = server.start("localhost", 0)
        >>> host, 0 < port < 65536
        ('127.0.0.1', True)
        >>> server.stop()
        >>> Server(readers.np_array(np.arange(3))).start("0.0.0.0", 20001)
        Traceback (most recent call last):
        ...
        readers.errors.BadValue: refusing to serve on 0.0.0.0, which other machines can reach, without a secret: anyone there could read the data; give --secret-file or READERKIT_SECRET (or serve on 127.0.0.1)
        >>> with socket.create_server(("127.0.0.1", 0)) as taken:
        ...     Server(readers.np_array(np.arange(3))).start("127.0.0.1", taken.getsockname()[1])
        Traceback (most recent call last):
        ...
        readers.network.server.CannotListen: 127.0.0.1:... is in use (another server?): stop it, or give another port (0 picks a free one)
        """
        if not is_loopback(host) and not self.secret:
            raise BadValue(f"refusing to serve on {host}, which other machines can reach, without a secret: "
                           "anyone there could read the data; give --secret-file or READERKIT_SECRET (or serve "
                           "on 127.0.0.1)")
        host = "127.0.0.1" if host == "localhost" else host  # not ::1 too: with port 0 each would get its own port
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        if host in ("", "0.0.0.0", "::"):
            family = socket.AF_INET6 if host == "::" else socket.AF_INET
        try:
            self._listener = socket.create_server((host, port), family=family, backlog=1024)  # SO_REUSEADDR on POSIX
        except OSError as exc:
            raise cannot_listen(host, port, exc) from None
        self._listener.setblocking(False)
        bound = self._listener.getsockname()
        self._accepting = threading.Thread(target=self._accept, name="readerkit-serve-accept", daemon=True)
        self._accepting.start()
        return host if family == socket.AF_INET6 else bound[0], bound[1]

    def _accept(self) -> None:
        while not self.stopping:
            if self._listener not in readable([self._listener, self.wake_read], 3600.0) or self.stopping:
                continue
            try:
                sock, peer = self._listener.accept()  # (the listener does not block: a client may be gone already)
                sock.setblocking(True)
            except BlockingIOError:
                continue
            except OSError as exc:  # out of descriptors (EMFILE), or a client gone before its accept: not a spin
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    self.log(f"cannot accept a connection ({exc}); trying again in 0.5 s")
                    time.sleep(0.5)
                continue
            try:
                self._admit(Session(self, sock, peer))
            except Exception as exc:  # (a fault here must not end the accepting thread)
                self.log(f"failed to start a connection: {type(exc).__name__}: {exc}")

    def _admit(self, session: Session) -> None:
        with self.lock:
            full = len(self.sessions) >= self.max_clients
            if not full:
                self.sessions.add(session)
                self.stats["connections"] += 1
        if full:
            session.refuse(f"the server has {self.max_clients} clients already; try again later")
        else:
            session.thread.start()

    def stop(self) -> None:
        """Stop listening, finish the requests under way (for up to ``drain_timeout``), close every connection."""
        if self.stopping:
            return
        self.stopping = True
        self._wake.send(b"x")
        if self._accepting is not None:
            self._accepting.join()
            self._listener.close()
        deadline = time.monotonic() + self.drain_timeout
        busy = len(self.sessions)
        if busy:
            self.log(f"stopping: closing {busy} connection{'s' if busy > 1 else ''}; answers under way finish "
                     f"first, for up to {self.drain_timeout:g} s")
        for session in list(self.sessions):
            session.thread.join(max(0.0, deadline - time.monotonic()))
        for session in list(self.sessions):
            session.abort()
        for session in list(self.sessions):
            session.thread.join(1.0)
        self._wake.close()
        self.wake_read.close()

    def count(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.stats[key] += n

    # -- the byte budget of gathered, unsent entries --------------------------------------
    def take(self, most: int, least: int, broken: Callable[[], str | None] = lambda: None, *,
             wait: bool = True) -> int | None:
        """Take up to ``most`` bytes of the shared budget, as many as are free but at least ``least`` (at most all
        of it); returns the bytes taken. Without ``wait``, None when ``least`` is not free; else waits for it up
        to ``frame_timeout``, and raises ``Closed`` if the wait is in vain, the server stops or ``broken()``
        says why the connection ended meanwhile."""
        least, given_up = min(least, self.shared), time.monotonic() + self.frame_timeout
        with self._budget:
            while self._free < least:
                if not wait:
                    return None
                why = "the server stopped" if self.stopping else broken()
                if why is None and time.monotonic() > given_up:
                    why = f"no room in the server's budget for {self.frame_timeout:g} s (other clients hold it)"
                if why is not None:
                    raise Closed(why)
                self._budget.wait(0.2)
            taken = max(least, min(most, self._free))
            self._free -= taken
        return taken

    def lend_reserve(self) -> int:
        """A connection's own share of the budget: ``reserve`` bytes, or 0 when every one is lent.

        >>> import numpy as np, readers
        >>> server = Server(readers.np_array(np.zeros((3, 1000), np.uint8)), budget=4000, max_clients=10)
        >>> server.reserve, [server.lend_reserve() for _ in range(3)]  # (one entry: 200 bytes would hold none)
        (1000, [1000, 1000, 0])
        >>> server.stop()
        """
        with self.lock:
            if not self._reserves:
                return 0
            self._reserves -= 1
            return self.reserve

    def return_reserve(self, size: int) -> None:
        """Take back a reserve of ``lend_reserve`` (0: none was lent)."""
        if size:
            with self.lock:
                self._reserves += 1

    def give(self, size: int) -> None:
        with self._budget:
            self._free += size
            self._budget.notify_all()


# -- how a server is run ---------------------------------------------------------------------


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    """A server-side TLS context from a certificate chain and its private key (PEM files).

    >>> tls_context("/nonexistent.pem", "/nonexistent.key")
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: cannot load the TLS certificate /nonexistent.pem with key /nonexistent.key: ...
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise BadValue(f"cannot load the TLS certificate {cert} with key {key}: {exc}; give PEM files (for "
                       "example from openssl req -x509)") from None
    return context


class Serving:
    """A started server whose connections run in background threads: ``address`` (``"host:port"``), ``stats``,
    ``stop()``.

    Use it as a context manager, or call ``stop()``; both wait until every
    connection is closed and its thread has ended.

    >>> import numpy as np, readers
    >>> handle = serve(readers.np_array(np.arange(3)), log=print)
    >>> handle.address == f"127.0.0.1:{handle.port}", handle.stats["connections"]
    (True, 0)
    >>> handle.stop()
    >>> handle.stop()  # again: nothing to do
    >>> repr(handle) == f"<serving 3 entries on {handle.address}, stopped>"
    True
    """

    def __init__(self, server: Server, host: str, port: int):
        self.server = server
        self.host, self.port = server.start(host, port)

    @property
    def address(self) -> str:
        """Where clients connect: ``"host:port"``, an IPv6 host in brackets."""
        return show_address(self.host, self.port)

    @property
    def stats(self) -> dict[str, int]:
        """A copy of the server's counts: connections, requests, rejections and bytes of entries sent."""
        return dict(self.server.stats)

    def stop(self) -> None:
        """Stop the server: the answers under way finish first (for up to ``drain_timeout``), then every
        connection is closed; again does nothing."""
        self.server.stop()

    def __enter__(self) -> Serving:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        served = self.server.served
        what = f"{served.n} entries" if served.holds is None else show_part(served.holds, served.n)
        return f"<serving {what} on {self.address}{', stopped' if self.server.stopping else ''}>"


def serve(reader: Any, *, host: str = "127.0.0.1", port: int = 0, secret: str | bytes | None = None,
          tls: ssl.SSLContext | None = None, info: dict[str, Any] | None = None, part: Any = None,
          **limits: Any) -> Serving:
    """Serve indexed ``reader`` from a background thread; ``readers.remote(handle.address)`` reads it.

    ``port=0`` picks a free port. ``secret`` turns on the HMAC challenge
    (required on an address other machines can reach); ``tls`` is a server
    ``ssl.SSLContext`` (``tls_context(cert, key)``). ``part``, ``(start,
    stop)`` half-open, serves those sample indices alone
    (``readers.network.parts.part_interval(k, n, len(reader))`` is the k-th
    of n equal parts). ``limits`` are the ``Server`` timeouts and bounds.

    >>> import numpy as np, readers
    >>> with serve(readers.np_array(np.arange(6) * 10)) as server:
    ...     remote = readers.remote(server.address)
    ...     len(remote), int(remote[4]), [int(x) for x in remote()][:3]
    (6, 40, [0, 10, 20])
    >>> with serve(readers.np_array(np.arange(6) * 10), part=(2, 4)) as server:
    ...     remote = readers.remote(server.address)
    ...     server, len(remote), remote.gather_columns(np.array([2, 3])).tolist()
    (<serving entries [2, 4) of 6 on 127.0.0.1:...>, 6, [20, 30])
    """
    key = None if secret is None else read_secret(secret)  # (text that UTF-8 cannot encode: refused in one line)
    return Serving(Server(reader, part=part, info=info, secret=key, tls=tls, **limits), host, port)


def run_until_signal(server: Server, host: str, port: int, announce: Callable[[str, int], None]) -> None:
    """Serve until SIGTERM or SIGINT (Ctrl-C), then stop as ``Server.stop`` does; ``announce(host, port)`` is
    called once listening, and the signal handlers are in place. Call it from the main thread.

    The handlers stay in place until the server has stopped, so a second
    signal (GNU ``timeout`` sends one to the process and one to its group)
    neither kills the drain nor waits on it; the handler takes no lock, so a
    signal that arrives while the handler runs for the first cannot deadlock
    it (``threading.Event.set`` did).

    >>> import os, numpy as np, readers
    >>> server = Server(readers.np_array(np.arange(3)), log=print)
    >>> def announce(host, port):
    ...     print(f"serving on {host}")
    ...     os.kill(os.getpid(), signal.SIGTERM)  # as a supervisor would, later
    ...     os.kill(os.getpid(), signal.SIGTERM)  # and again, at once
    >>> run_until_signal(server, "127.0.0.1", 0, announce)
    serving on 127.0.0.1
    >>> server.stopping
    True
    """
    signalled: list[int] = []
    woken, wake = os.pipe()
    os.set_blocking(wake, False)

    def stop(signum: int, frame: Any) -> None:
        # Python runs a handler between two steps of the main thread, and runs it again inside itself when a second
        # signal comes meanwhile: take no lock here (a list's append and a write to a pipe take none).
        signalled.append(signum)
        try:
            os.write(wake, b"x")
        except OSError:  # (full: the main thread is woken already)
            pass

    before: dict[int, Any] = {}
    try:
        bound = server.start(host, port)
        before = {signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGINT)}
        try:
            announce(*bound)
            while not signalled:
                select.select([woken], [], [], 0.5)
        finally:
            server.stop()  # (the handlers still in place: a second signal does not cut the drain short)
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
        os.close(woken)
        os.close(wake)
