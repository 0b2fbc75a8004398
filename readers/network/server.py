"""The data-provider server: a thread per connection, serving an indexed reader to many clients at once.

Each connection is a ``Session`` (``readers.network.session``) in a thread
of its own: a hello (the version), the challenge and its proof when the
server has a secret, then requests, each gathered (``readers.network.serving``) and
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
  clients do. A client that takes its answers slower than ``MIN_RATE``, or
  not at all for ``frame_timeout``, is dropped, so it cannot hold the budget
  the others need for long; one waiting for budget gives up after
  ``frame_timeout`` and its client asks again.

``stop()`` stops listening, closes idle connections, lets the requests under
way finish for up to ``drain_timeout`` and then closes the rest.
"""
from __future__ import annotations

import errno
import ipaddress
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from readers.network.serving import Served
from readers.network.session import Closed, Session, readable

__all__ = ["Server", "is_loopback"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (127.0.0.0/8, ::1, localhost).

    >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("0.0.0.0"), is_loopback("::1")
    (True, True, False, True)
    """
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Server:
    """A data-provider server for ``reader`` (see the module doc): ``start`` it, ``stop`` it.

    ``secret`` (bytes or None) turns on the challenge; ``tls`` is an
    ``ssl.SSLContext`` for the server side, or None. ``log`` takes one line
    per connection (default: standard error).

    >>> import numpy as np, readers
    >>> server = Server(readers.np_array(np.arange(4)), log=lambda line: None)
    >>> host, port = server.start("127.0.0.1", 0)
    >>> int(readers.remote(f"{host}:{port}")[3])
    3
    >>> server.stop()
    """

    def __init__(self, reader: Any, *, info: dict[str, Any] | None = None, secret: bytes | None = None,
                 tls: ssl.SSLContext | None = None, handshake_timeout: float = 10.0, idle_timeout: float = 600.0,
                 frame_timeout: float = 60.0, drain_timeout: float = 10.0, max_clients: int = 1024,
                 budget: int = 256 << 20, log: Callable[[str], None] | None = None):
        for name, value in (("handshake_timeout", handshake_timeout), ("idle_timeout", idle_timeout),
                            ("frame_timeout", frame_timeout), ("drain_timeout", drain_timeout)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be a number of seconds > 0, got {value!r}")
        for name, value in (("max_clients", max_clients), ("budget", budget)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if secret is not None and not secret:
            raise ValueError("the secret is empty, which anyone can prove; give a secret of some length (or none, "
                             "on 127.0.0.1)")
        self.served = reader if isinstance(reader, Served) else Served(reader, info)
        self.secret, self.tls = secret, tls
        self.handshake_timeout, self.idle_timeout = handshake_timeout, idle_timeout
        self.frame_timeout, self.drain_timeout = frame_timeout, drain_timeout
        self.max_clients, self.budget = max_clients, budget
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.sessions: set[Session] = set()
        self.stats = {"connections": 0, "requests": 0, "rejections": 0, "bytes": 0}
        self.stopping = False
        self.lock = threading.Lock()
        self._budget = threading.Condition(self.lock)
        self._free = budget
        self._listener: socket.socket | None = None
        self._accepting: threading.Thread | None = None
        self.wake_read, self._wake = socket.socketpair()  # readable once stopping: wakes every idle session

    def start(self, host: str = "127.0.0.1", port: int = 0) -> tuple[str, int]:
        """Listen on ``host:port`` (0: a free port), with SO_REUSEADDR, in a thread; returns the address bound."""
        if not is_loopback(host) and not self.secret:
            raise ValueError(f"refusing to serve on {host}, which other machines can reach, without a secret: "
                             "anyone there could read the data; give --secret-file or READERKIT_SECRET (or serve "
                             "on 127.0.0.1)")
        host = "127.0.0.1" if host == "localhost" else host  # not ::1 too: with port 0 each would get its own port
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        if host in ("", "0.0.0.0", "::"):
            family = socket.AF_INET6 if host == "::" else socket.AF_INET
        self._listener = socket.create_server((host, port), family=family, backlog=1024)  # SO_REUSEADDR on POSIX
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
    def take(self, size: int, broken: Callable[[], str | None] = lambda: None) -> int:
        """Take ``size`` bytes of the budget (at most all of it) for a part about to be gathered, waiting for
        them up to ``frame_timeout``; ``Closed`` if the wait is in vain, the server stops or ``broken()`` says
        why the connection ended meanwhile."""
        size, given_up = min(size, self.budget), time.monotonic() + self.frame_timeout
        with self._budget:
            while self._free < size:
                why = "the server stopped" if self.stopping else broken()
                if why is None and time.monotonic() > given_up:
                    why = f"no room in the server's budget for {self.frame_timeout:g} s (other clients hold it)"
                if why is not None:
                    raise Closed(why)
                self._budget.wait(0.2)
            self._free -= size
        return size

    def give(self, size: int) -> None:
        with self._budget:
            self._free += size
            self._budget.notify_all()


