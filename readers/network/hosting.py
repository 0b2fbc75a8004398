"""Running a data-provider server: in a background thread (``serve``), or in the foreground until a signal.

``serve(reader)`` is for notebooks, tests and examples: the server runs in a
thread of its own and the handle says its address. ``run_until_signal`` is
``python cli.py serve``: it prints ``serving N entries on HOST:PORT`` once
listening, and on SIGTERM or Ctrl-C finishes in-flight responses and returns.
"""
from __future__ import annotations

import signal
import ssl
import threading
from collections.abc import Callable
from typing import Any

from readers.network.server import Server
from readers.network.wire import show_address

__all__ = ["Serving", "run_until_signal", "serve", "tls_context"]


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    """A server-side TLS context from a certificate chain and its private key (PEM files).

    >>> tls_context("/nonexistent.pem", "/nonexistent.key")
    Traceback (most recent call last):
    ...
    ValueError: cannot load the TLS certificate /nonexistent.pem with key /nonexistent.key: ...
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cannot load the TLS certificate {cert} with key {key}: {exc}; give PEM files (for "
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
        return f"<serving {self.server.served.n} entries on {self.address}{', stopped' if self.server.stopping else ''}>"


def serve(reader: Any, *, host: str = "127.0.0.1", port: int = 0, secret: str | bytes | None = None,
          tls: ssl.SSLContext | None = None, info: dict[str, Any] | None = None, **limits: Any) -> Serving:
    """Serve indexed ``reader`` from a background thread; ``readers.remote(handle.address)`` reads it.

    ``port=0`` picks a free port. ``secret`` turns on the HMAC challenge
    (required on an address other machines can reach); ``tls`` is a server
    ``ssl.SSLContext`` (``tls_context(cert, key)``). ``limits`` are the
    ``readers.network.server.Server`` timeouts and bounds.

    >>> import numpy as np, readers
    >>> with serve(readers.np_array(np.arange(6) * 10)) as server:
    ...     remote = readers.remote(server.address)
    ...     len(remote), int(remote[4]), [int(x) for x in remote()][:3]
    (6, 40, [0, 10, 20])
    """
    key = secret.encode() if isinstance(secret, str) else secret
    return Serving(Server(reader, info=info, secret=key, tls=tls, **limits), host, port)


def run_until_signal(server: Server, host: str, port: int, announce: Callable[[str, int], None]) -> None:
    """Serve until SIGTERM or SIGINT (Ctrl-C), then stop as ``Server.stop`` does; ``announce(host, port)`` is
    called once listening, and the signal handlers are in place. Call it from the main thread.

    >>> import os, numpy as np, readers
    >>> from readers.network.server import Server
    >>> server = Server(readers.np_array(np.arange(3)), log=print)
    >>> def announce(host, port):
    ...     print(f"serving on {host}")
    ...     os.kill(os.getpid(), signal.SIGTERM)  # as a supervisor would, later
    >>> run_until_signal(server, "127.0.0.1", 0, announce)
    serving on 127.0.0.1
    >>> server.stopping
    True
    """

    stopping = threading.Event()

    def stop(signum: int, frame: Any) -> None:
        stopping.set()

    bound = server.start(host, port)
    before = {signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        announce(*bound)
        while not stopping.wait(0.5):
            pass
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
        server.stop()
