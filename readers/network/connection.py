"""One client connection to a data-provider server: connect, log in, send requests, receive frames.

Plain blocking sockets: the remote reader keeps one per thread and process,
pipelines its requests over it, and opens a new one when it breaks
(``readers.remote``). Any ``OSError`` here means the connection is gone and
may be tried again; a typed ``RemoteError`` is the server's answer and is not,
and neither is a ``TLSMismatch``: one end speaks TLS and the other does not
(a failed login is checked against the other way of speaking, once).
"""
from __future__ import annotations

import socket
import ssl
from typing import Any

import numpy as np

from readers.errors import ReaderkitError
from readers.network.wire import (
    MAX_FRAME,
    VERSION,
    NotAuthorised,
    ProtocolError,
    decode,
    encode,
    frame_length,
    frame_parts,
    proof,
    raise_rejection,
    show_address,
)

__all__ = ["PROBE_FRAME", "PROBE_TIMEOUT", "READ_AHEAD", "Connection", "TLSMismatch", "client_tls", "filled", "received",
           "speaks_plain", "speaks_tls"]


#: The most seconds a failed login waits to learn whether the server speaks the other way (TLS or plain).
PROBE_TIMEOUT = 3.0
#: The largest answer to a hello that ``speaks_plain`` reads: a welcome is a few hundred bytes, a challenge less.
PROBE_FRAME = 64 << 10
#: Bytes a connection reads from its socket at a time: a small frame arrives in one ``recv`` with its prefix.
READ_AHEAD = 64 << 10


class TLSMismatch(ReaderkitError, ConnectionError):
    """The server speaks TLS and the client does not, or the other way round: not tried again, since trying cannot
    help; the message says which end to change and how."""


def client_tls(ca_file: str | None) -> ssl.SSLContext:
    """A client TLS context that checks the server's certificate against ``ca_file`` (None: the system's CAs).

    >>> client_tls(None).verify_mode == ssl.CERT_REQUIRED
    True
    """
    context = ssl.create_default_context(cafile=ca_file)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def speaks_tls(host: str, port: int, timeout: float) -> bool:
    """Whether the server at ``host:port`` completes a TLS handshake (its certificate unchecked: this only asks
    whether it speaks TLS, to say so when a plain login failed).

    >>> import numpy as np, readers
    >>> with readers.serve(readers.np_array(np.arange(3)), log=lambda line: None) as server:
    ...     host, port = server.address.rsplit(":", 1)
    ...     speaks_tls(host, int(port), 5.0), speaks_plain(host, int(port), 5.0)
    (False, True)
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            with context.wrap_socket(sock, server_hostname=host):
                return True
    except OSError:  # (ssl.SSLError included)
        return False


def speaks_plain(host: str, port: int, timeout: float) -> bool:
    """Whether the server at ``host:port`` answers a plain hello with a frame of readerkit's protocol (a welcome,
    a challenge or a rejection), to say so when a TLS handshake failed. It reads ``PROBE_FRAME`` bytes at most:
    whatever else listens there may announce a larger frame, and is then no readerkit server.

    >>> import numpy as np, readers
    >>> with readers.serve(readers.np_array(np.arange(3)), secret="s3cret", log=lambda line: None) as server:
    ...     host, port = server.address.rsplit(":", 1)
    ...     speaks_plain(host, int(port), 5.0)  # its challenge is enough
    True
    >>> import socket
    >>> with socket.create_server(("127.0.0.1", 0)) as silent:  # listens, and says nothing
    ...     speaks_plain("127.0.0.1", silent.getsockname()[1], 0.2)
    False
    """
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(encode({"type": "hello", "version": VERSION}))
            address = show_address(host, port)
            size = frame_length(received(sock, 4, address), PROBE_FRAME)
            return decode(received(sock, size, address))[0].get("type") in ("welcome", "challenge", "error")
    except (OSError, ProtocolError):
        return False


def received(sock: socket.socket, size: int, address: str) -> memoryview:
    """Exactly ``size`` bytes from ``sock``, read into one buffer; ``ConnectionResetError`` naming ``address`` when
    the other end closes first.

    >>> a, b = socket.socketpair()
    >>> a.sendall(b"abc")
    >>> bytes(received(b, 2, "peer")), bytes(received(b, 1, "peer"))
    (b'ab', b'c')
    >>> a.close(); received(b, 1, "peer")
    Traceback (most recent call last):
    ...
    ConnectionResetError: peer closed the connection
    >>> b.close()
    """
    # (numpy's empty, not a bytearray: the bytes are written once, by the kernel, not zeroed first)
    view = memoryview(np.empty(size, np.uint8))
    filled(sock, view, 0, size, address)
    return view


def filled(sock: socket.socket, view: memoryview, got: int, least: int, address: str) -> int:
    """Read from ``sock`` into ``view`` past its first ``got`` bytes until it holds at least ``least`` (as much as
    each ``recv`` gives, up to the view's end); the bytes it then holds. ``ConnectionResetError`` naming
    ``address`` when the other end closes first.

    >>> a, b = socket.socketpair()
    >>> a.sendall(b"abcd")
    >>> view = memoryview(bytearray(8))
    >>> filled(b, view, 1, 3, "peer") >= 3, bytes(view[1:5])
    (True, b'abcd')
    >>> a.close(); b.close()
    """
    while got < least:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionResetError(f"{address} closed the connection")
        got += n
    return got


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
        self._buffer = np.empty(READ_AHEAD, np.uint8)  # bytes read ahead of the frames taken: [_start, _end)
        self._view, self._start, self._end = memoryview(self._buffer), 0, 0
        login = min(timeout, connect_timeout or timeout)
        sock = socket.create_connection((host, port), timeout=login)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                self.sock = tls.wrap_socket(sock, server_hostname=host) if tls is not None else sock
            except ssl.SSLCertVerificationError:
                raise  # (it speaks TLS: its certificate is what failed)
            except (ssl.SSLError, ConnectionError) as exc:
                self._mismatch(host, port, login, tls, exc)
                raise
            try:
                self.welcome = self._login(secret)  # (the login within the connect's time too)
            except ProtocolError as exc:
                raise ProtocolError(f"{self.address} does not speak readerkit's protocol ({exc}): is it a "
                                    "data-provider server (python cli.py serve)?") from None
            except ConnectionError as exc:  # (a TLS server closes on a plain hello)
                self._mismatch(host, port, login, tls, exc)
                raise
            self.sock.settimeout(timeout)
        except BaseException:
            getattr(self, "sock", sock).close()  # (wrapping in TLS detaches the plain socket: close the wrapper)
            raise

    def _mismatch(self, host: str, port: int, timeout: float, tls: ssl.SSLContext | None, exc: BaseException) -> None:
        """Raise ``TLSMismatch`` when the login failed because the server speaks the other way (TLS or plain)."""
        why, timeout = f"{type(exc).__name__}: {exc}", min(timeout, PROBE_TIMEOUT)
        if tls is None and speaks_tls(host, port, timeout):
            raise TLSMismatch(f"{self.address} speaks TLS, and this client does not: give readers.remote ca_file= "
                              "(the server's certificate; --ca-file on the command line), or tls=True when a CA of "
                              f"this system signed it (the login failed: {why})") from None
        if tls is not None and speaks_plain(host, port, timeout):
            raise TLSMismatch(f"{self.address} does not speak TLS, and this client does (ca_file= or tls=True): "
                              "leave them out, or start the server with TLS (python cli.py serve --tls-cert CERT "
                              f"--tls-key KEY) (the TLS handshake failed: {why})") from None

    def _login(self, secret: bytes | None) -> dict[str, Any]:
        self.send({"type": "hello", "version": VERSION, "narrow": True})  # (unpack_columns decodes what is narrowed)
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
        """The next frame's header and body (a writable buffer of its own).

        The socket is read ``READ_AHEAD`` bytes at a time, so a small frame costs one ``recv`` with its prefix,
        not two; its payload is then copied into a buffer of its own size (an entry handed over keeps no more
        alive than its frame). A larger frame is read into its own buffer, past what was read ahead."""
        size = frame_length(bytes(self._ahead(4)), MAX_FRAME)
        if size <= READ_AHEAD:
            return decode(self._ahead(size).copy())
        payload = np.empty(size, np.uint8)
        have = self._end - self._start
        payload[:have] = self._buffer[self._start:self._end]
        self._start = self._end = 0
        filled(self.sock, memoryview(payload), have, size, self.address)  # (straight into its own buffer)
        return decode(payload)

    def _ahead(self, size: int) -> np.ndarray:
        """The next ``size`` bytes (at most ``READ_AHEAD``) of the socket, as a view of the read-ahead buffer."""
        if self._end - self._start < size:
            have = self._end - self._start
            if self._start:  # (what is left goes to the front: the rest of its frame is read after it)
                self._buffer[:have] = self._buffer[self._start:self._end]
                self._start, self._end = 0, have
            self._end = filled(self.sock, self._view, self._end, size, self.address)
        out = self._buffer[self._start:self._start + size]
        self._start += size
        if self._start == self._end:
            self._start = self._end = 0
        return out

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
