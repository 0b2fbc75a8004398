"""One client connection to a data-provider server: connect, log in, send requests, receive frames.

Plain blocking sockets: the remote reader keeps one per thread and process,
pipelines its requests over it, and opens a new one when it breaks
(``readers.remote``). Any ``OSError`` here means the connection is gone and
may be tried again; a typed ``RemoteError`` is the server's answer and is not.
"""
from __future__ import annotations

import socket
import ssl
from typing import Any

import numpy as np

from readers.network.wire import (
    MAX_FRAME,
    VERSION,
    NotAuthorised,
    ProtocolError,
    decode,
    frame_length,
    frame_parts,
    proof,
    raise_rejection,
    show_address,
)

__all__ = ["Connection", "client_tls"]


def client_tls(ca_file: str | None) -> ssl.SSLContext:
    """A client TLS context that checks the server's certificate against ``ca_file`` (None: the system's CAs).

    >>> client_tls(None).verify_mode == ssl.CERT_REQUIRED
    True
    """
    context = ssl.create_default_context(cafile=ca_file)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


class Connection:
    """A logged-in connection: ``welcome`` is the server's welcome header (length, fingerprint, info).

    ``timeout`` bounds each wait on the socket, ``connect_timeout`` (when
    shorter) the wait to connect. Raises ``NotAuthorised`` or
    ``UnsupportedVersion`` (naming the address) when the server refuses the
    login, an ``OSError`` when it cannot be reached.

    >>> import numpy as np, readers
    >>> with readers.serve(readers.np_array(np.arange(5))) as server:
    ...     host, port = server.address.rsplit(":", 1)
    ...     conn = Connection(host, int(port), secret=None, tls=None, timeout=10.0)
    ...     conn.send({"type": "get", "id": 1, "interval": [1, 3]})
    ...     header, body = conn.receive()
    ...     conn.close()
    >>> conn.welcome["entries"], header["count"], np.frombuffer(body, "<i8").tolist()
    (5, 3, [1, 2, 3])
    """

    def __init__(self, host: str, port: int, *, secret: bytes | None, tls: ssl.SSLContext | None,
                 timeout: float, connect_timeout: float | None = None):
        self.address = show_address(host, port)
        login = min(timeout, connect_timeout or timeout)
        sock = socket.create_connection((host, port), timeout=login)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock = tls.wrap_socket(sock, server_hostname=host) if tls is not None else sock
            try:
                self.welcome = self._login(secret)  # (the login within the connect's time too)
            except ProtocolError as exc:
                raise ProtocolError(f"{self.address} does not speak readerkit's protocol ({exc}): is it a "
                                    "data-provider server (python cli.py serve)?") from None
            self.sock.settimeout(timeout)
        except BaseException:
            getattr(self, "sock", sock).close()  # (wrapping in TLS detaches the plain socket: close the wrapper)
            raise

    def _login(self, secret: bytes | None) -> dict[str, Any]:
        self.send({"type": "hello", "version": VERSION})
        header, _ = self.receive()
        if header["type"] == "challenge":
            if secret is None:
                raise NotAuthorised("not_authorised", "the server wants a secret; pass secret= to readers.remote, "
                                                      "or set READERKIT_SECRET", self.address)
            try:
                nonce = bytes.fromhex(header["nonce"])
            except (KeyError, TypeError, ValueError):
                raise ProtocolError(f"{self.address} sent a challenge without a hex nonce: {header!r}") from None
            self.send({"type": "auth", "proof": proof(secret, nonce)})
            header, _ = self.receive()
        if header["type"] == "error" and header.get("kind") == "server_error":  # (full: worth trying again)
            raise ConnectionRefusedError(f"{self.address} refused the connection: {header.get('message')}")
        if header["type"] == "error":
            raise_rejection(header, self.address)
        if header["type"] != "welcome" or not isinstance(header.get("entries"), int):
            raise ProtocolError(f"{self.address} answered the login with {header!r}, not a welcome: is it a "
                                "readerkit data-provider server (python cli.py serve)?")
        return header

    def send(self, header: dict[str, Any]) -> None:
        self.send_frame(b"".join(frame_parts(header)))

    def send_frame(self, frame: bytes) -> None:
        """Send an encoded frame whole."""
        self.sock.sendall(frame)

    def receive(self) -> tuple[dict[str, Any], memoryview]:
        """The next frame's header and body (a writable buffer of its own)."""
        size = frame_length(self._exactly(4), MAX_FRAME)
        return decode(self._exactly(size))

    def _exactly(self, size: int) -> memoryview:
        # (numpy's empty, not a bytearray: the bytes are written once, by the kernel, not zeroed first)
        view, got = memoryview(np.empty(size, np.uint8)), 0
        while got < size:
            n = self.sock.recv_into(view[got:])
            if n == 0:
                raise ConnectionResetError(f"{self.address} closed the connection")
            got += n
        return view

    def close(self) -> None:
        sock = self.__dict__.get("sock")
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def __del__(self) -> None:
        # an idle connection is dropped with the storage of the thread that kept it: close it quietly
        self.close()
