"""Helpers of the server tests: a server in a thread, a raw-socket client, expected rows."""
from __future__ import annotations

import contextlib
import socket
import time
from typing import Any

import numpy as np

import readers
import readers.network.server
from readers.network.wire import (
    MAX_FRAME,
    VERSION,
    decode,
    encode,
    frame_length,
    parse_address,
    proof,
    show_address,
    unpack_columns,
)

N = 200
VALUES = np.arange(N, dtype=np.int64) * 3
WORDS = (np.arange(N, dtype=np.float32) / 4).astype(np.float32)
WAIT = 10.0  # seconds: the most any one read here waits for the server


def small_reader():
    return readers.from_arrays(VALUES, WORDS)


@contextlib.contextmanager
def serving(reader=None, **options):
    """A server of ``reader`` (default: N rows of two columns) on 127.0.0.1, stopped on leaving; its log lines
    are kept in ``handle.lines``."""
    lines: list[str] = []
    handle = readers.serve(small_reader() if reader is None else reader, log=lines.append, **options)
    handle.lines = lines
    try:
        yield handle
    finally:
        handle.stop()


class Client:
    """A raw protocol client: frames in and out, nothing checked that the test does not check."""

    def __init__(self, address: str, timeout: float = WAIT, receive_buffer: int | None = None):
        self.sock = socket.socket()
        try:
            if receive_buffer:  # before connecting, so the kernel holds little of what the server sends
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
            self.sock.settimeout(timeout)
            self.sock.connect(parse_address(address))
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except BaseException:
            self.sock.close()
            raise

    def __enter__(self) -> Client:
        return self

    @property
    def peer(self) -> str:
        """This client's address as the server names it in its log lines."""
        return show_address(*self.sock.getsockname()[:2])

    def __exit__(self, *exc: Any) -> None:
        self.sock.close()

    def send(self, header: dict[str, Any], body: bytes = b"") -> None:
        self.sock.sendall(encode(header, [body]))

    def raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def exactly(self, size: int) -> bytes:
        chunks, got = [], 0
        while got < size:
            chunk = self.sock.recv(min(size - got, 1 << 20))
            if not chunk:
                raise EOFError(f"the server closed the connection {got} bytes into {size}")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def receive(self) -> tuple[dict[str, Any], memoryview]:
        return decode(self.exactly(frame_length(self.exactly(4), MAX_FRAME)))

    def login(self, secret: bytes | None = None) -> dict[str, Any]:
        self.send({"type": "hello", "version": VERSION})
        header, _ = self.receive()
        if header["type"] == "challenge":
            self.send({"type": "auth", "proof": proof(secret, bytes.fromhex(header["nonce"]))})
            header, _ = self.receive()
        assert header["type"] == "welcome", header
        return header

    def rejected(self, kind: str, request: int | None = None) -> str:
        header, body = self.receive()
        assert header["type"] == "error" and header["kind"] == kind, header
        assert header.get("id") == request and len(body) == 0
        return header["message"]

    def closed(self) -> bool:
        """Whether the server closes the connection (EOF or reset) within WAIT, reading past what it sends."""
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            try:
                if not self.sock.recv(1 << 16):
                    return True
            except ConnectionResetError:
                return True
            except socket.timeout:
                return False
        return False

    def answers(self, counts: dict[int, int]) -> dict[int, tuple]:
        """The columns of the requests ``counts`` names (id: rows), whose parts may interleave; the parts of
        each must come in order, of whole rows."""
        got: dict[int, list] = {ident: [] for ident in counts}

        def done(ident: int) -> bool:
            return bool(got[ident]) and sum(len(p[0]) for p in got[ident]) == counts[ident]

        while not all(done(ident) for ident in counts):
            header, body = self.receive()
            assert header["type"] == "entries" and header["id"] in counts and not done(header["id"]), header
            before = sum(len(p[0]) for p in got[header["id"]])
            assert header["first"] == before and 0 <= header["count"] <= counts[header["id"]] - before
            columns = unpack_columns(header["columns"], body)
            assert all(len(c) == header["count"] for c in columns)
            got[header["id"]].append(columns)
        return {ident: tuple(np.concatenate([p[k] for p in parts]) for k in range(len(parts[0])))
                for ident, parts in got.items()}

    def rows(self, request: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """The columns of request ``request`` (``count`` rows), its parts in order and whole rows each."""
        return self.answers({request: count})[request]


def expect_rows(columns: tuple, indices) -> None:
    idx = np.asarray(list(indices), np.int64)
    assert columns[0].tolist() == VALUES[idx].tolist() and columns[1].tolist() == WORDS[idx].tolist()


# -- login -----------------------------------------------------------------------------------

def big_reader(n: int = 150):
    """Rows of 256 KiB and a label: a frame holds 63 of them, so a response of n rows comes in parts."""
    images = np.random.default_rng(0).integers(0, 256, size=(n, 1 << 18), dtype=np.uint8)
    return images, np.arange(n, dtype=np.int64) * 7
