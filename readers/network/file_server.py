"""serve_folder: a real HTTP/1.1 file server over a local folder, to try a pipeline over URLs on one machine.

Readers take ``http(s)://`` URLs (``readers.sources.locations``); in production a
web server, a CDN or object storage serves the files. This one, standard library
only, serves a folder on 127.0.0.1 for an example, a benchmark or a test, with
the faults a test needs to inject.

``with serve_folder(path) as server:`` serves ``path`` at ``server.url`` ("http://127.0.0.1:PORT") until the block
ends, then stops and joins every thread it started (the waits are bounded). What a client of a web server or a
CDN meets is there: GET and HEAD, keep-alive, single byte ranges (``bytes=a-b``, ``bytes=a-``, ``bytes=-n``) with
206 and Content-Range, 416 for a range past the end, Content-Length on every answer, ``ETag`` (from the file's size
and mtime_ns) and ``Last-Modified``, ``Accept-Ranges: bytes``, and optional basic auth (401 without it). A folder
answers a minimal HTML page of ``<a href="name">`` links (``name/`` for a subfolder), which is how fsspec's http
filesystem lists, globs and walks. Anything outside the folder, or missing, is 404.

Faults are set while it runs, from any thread, each for a bounded number of requests:
``server.fail_next(n, status=503)`` and ``server.drop_next(n, after_bytes=k)`` (headers and k bytes of the body,
then the connection is closed: a transfer cut off mid-range). ``server.requests`` lists every request seen as
``Request(method, path, range)``, so a test can count range requests; ``server.accepted`` counts the connections
accepted (fewer than the requests when a client keeps its connections alive).
"""
from __future__ import annotations

import base64
import collections
import contextlib
import email.utils
import html
import http.server
import os
import re
import socket
import threading
import urllib.parse
from collections.abc import Iterator
from typing import NamedTuple

__all__ = ["FolderServer", "Request", "byte_range", "serve_folder"]

STOP_WAIT = 10.0  # seconds: bound on each wait for a thread to end when the server stops
IDLE_TIMEOUT = 30.0  # seconds an open connection may sit idle before its thread gives up on it
CHUNK = 1 << 16
RANGE = re.compile(r"bytes=(\d*)-(\d*)")


class Request(NamedTuple):
    """One request as the server saw it: ``range`` is the Range header's value, or None."""
    method: str
    path: str
    range: str | None


def byte_range(header: str | None, size: int) -> tuple[int, int] | None | str:
    """The inclusive (first, last) byte a Range header asks of ``size`` bytes; None to send the whole file (no
    header, or one this server ignores as RFC 9110 allows: malformed, or several ranges); ``"unsatisfiable"``.

    >>> byte_range("bytes=2-5", 10), byte_range("bytes=7-", 10), byte_range("bytes=-3", 10)
    ((2, 5), (7, 9), (7, 9))
    >>> byte_range("bytes=2-99", 10), byte_range("bytes=0-0", 10)
    ((2, 9), (0, 0))
    >>> byte_range("bytes=10-", 10), byte_range("bytes=-0", 10), byte_range(None, 10), byte_range("bytes=5-2", 10)
    ('unsatisfiable', 'unsatisfiable', None, None)
    """
    match = RANGE.fullmatch(header.strip()) if header else None
    if match is None or match.group(1) == match.group(2) == "":
        return None
    first, last = match.group(1), match.group(2)
    if first == "":  # the last n bytes
        n = int(last)
        return (max(size - n, 0), size - 1) if n > 0 and size > 0 else "unsatisfiable"
    if last != "" and int(last) < int(first):
        return None
    if int(first) >= size:
        return "unsatisfiable"
    return int(first), size - 1 if last == "" else min(int(last), size - 1)


class FolderServer(http.server.ThreadingHTTPServer):
    """The server ``serve_folder`` yields: ``url``, ``requests``, ``accepted``, ``fail_next`` and ``drop_next``."""

    daemon_threads = True
    request_queue_size = 128  # (socketserver's 5 drops a client's burst of connections: each retried a second later)

    def __init__(self, root: str, auth: tuple[str, str] | None = None):
        super().__init__(("127.0.0.1", 0), FolderHandler)
        self.root = os.path.realpath(root)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.authorization = None if auth is None else "Basic " + base64.b64encode(":".join(auth).encode()).decode()
        self._lock = threading.Lock()
        self._seen: list[Request] = []
        self._failures: collections.deque[int] = collections.deque()
        self._drops: collections.deque[int] = collections.deque()
        self._connections: dict[threading.Thread, socket.socket] = {}
        self._accepted = 0

    @property
    def requests(self) -> list[Request]:
        """Every request seen so far, in order of arrival (a copy)."""
        with self._lock:
            return list(self._seen)

    @property
    def accepted(self) -> int:
        """How many connections the server has accepted so far."""
        with self._lock:
            return self._accepted

    def fail_next(self, n: int, status: int = 503) -> None:
        """Answer the next ``n`` requests (any method, any path) with ``status`` and a short body."""
        if not (isinstance(n, int) and n >= 0 and isinstance(status, int) and 400 <= status <= 599):
            raise ValueError(f"fail_next({n!r}, status={status!r}): give a count >= 0 and an error status 400-599")
        with self._lock:
            self._failures.extend([status] * n)

    def drop_next(self, n: int, after_bytes: int = 0) -> None:
        """Cut off the next ``n`` GETs of a file: send the headers and ``after_bytes`` bytes of the body (fewer
        than Content-Length promised), then close the connection."""
        if not (isinstance(n, int) and n >= 0 and isinstance(after_bytes, int) and after_bytes >= 0):
            raise ValueError(f"drop_next({n!r}, after_bytes={after_bytes!r}): give a count >= 0 and bytes >= 0")
        with self._lock:
            self._drops.extend([after_bytes] * n)

    def seen(self, request: Request) -> int | None:
        """Record ``request``; the failure status it gets, if one is pending (the handler's side)."""
        with self._lock:
            self._seen.append(request)
            return self._failures.popleft() if self._failures else None

    def take_drop(self) -> int | None:
        """The bytes this GET may send before its connection is cut, if a drop is pending (the handler's side)."""
        with self._lock:
            return self._drops.popleft() if self._drops else None

    def process_request(self, request, client_address):
        # ThreadingMixIn's daemon threads are never joined: these are, so that no thread outlives the block
        thread = threading.Thread(target=self.process_request_thread, args=(request, client_address),
                                  name=f"test-http-{self.server_address[1]}", daemon=True)
        with self._lock:
            self._connections[thread] = request
            self._accepted += 1
        thread.start()

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._connections.pop(threading.current_thread(), None)

    def close_connections(self) -> list[threading.Thread]:
        """Shut every open connection (a kept-alive one waits in a read) so its thread ends; those threads."""
        with self._lock:
            open_now = dict(self._connections)
        for sock in open_now.values():
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        return list(open_now)


class FolderHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: every answer says its Content-Length
    timeout = IDLE_TIMEOUT
    disable_nagle_algorithm = True  # headers and body are two writes: without it, each small answer waits ~40 ms
    server: FolderServer

    def log_message(self, format, *args):  # quiet: pytest shows what a test prints
        pass

    def do_GET(self):
        self.answer(body=True)

    def do_HEAD(self):
        self.answer(body=False)

    def answer(self, body: bool) -> None:
        failure = self.server.seen(Request(self.command, self.path, self.headers.get("Range")))
        if failure is not None:
            return self.plain(failure, f"injected failure {failure}\n", body)
        if self.server.authorization and self.headers.get("Authorization") != self.server.authorization:
            return self.plain(401, "authentication required\n", body,
                              {"WWW-Authenticate": 'Basic realm="readerkit tests"'})
        relative = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).lstrip("/")
        path = os.path.realpath(os.path.join(self.server.root, relative))
        if path != self.server.root and not path.startswith(self.server.root + os.sep):
            return self.plain(404, "not found\n", body)
        if os.path.isdir(path):
            return self.index(path, body)
        try:
            file = open(path, "rb")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return self.plain(404, "not found\n", body)
        with file:
            self.send_file(file, os.fstat(file.fileno()), body)

    def plain(self, status: int, text: str, body: bool, headers: dict[str, str] | None = None,
              content_type: str = "text/plain; charset=utf-8") -> None:
        data = text.encode()
        self.send_response(status)
        for name, value in {"Content-Type": content_type, "Content-Length": str(len(data)), **(headers or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        if body:
            self.wfile.write(data)

    def index(self, folder: str, body: bool) -> None:
        names = sorted(n + "/" if os.path.isdir(os.path.join(folder, n)) else n for n in os.listdir(folder))
        links = "".join(f'<a href="{html.escape(urllib.parse.quote(n))}">{html.escape(n)}</a>\n' for n in names)
        self.plain(200, f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n", body,
                   content_type="text/html; charset=utf-8")

    def send_file(self, file, stat: os.stat_result, body: bool) -> None:
        size = stat.st_size
        headers = {"Accept-Ranges": "bytes", "ETag": f'"{size:x}-{stat.st_mtime_ns:x}"',
                   "Last-Modified": email.utils.formatdate(stat.st_mtime, usegmt=True)}
        wanted = byte_range(self.headers.get("Range"), size)
        if wanted == "unsatisfiable":
            return self.plain(416, "range not satisfiable\n", body, {**headers, "Content-Range": f"bytes */{size}"})
        first, last = (0, size - 1) if wanted is None else wanted
        length = last - first + 1
        self.send_response(200 if wanted is None else 206)
        headers |= {"Content-Type": "application/octet-stream", "Content-Length": str(length)}
        if wanted is not None:
            headers["Content-Range"] = f"bytes {first}-{last}/{size}"
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if not body:
            return
        cut = self.server.take_drop()
        file.seek(first)
        left = length if cut is None else min(cut, length)
        while left > 0 and (chunk := file.read(min(CHUNK, left))):
            self.wfile.write(chunk)
            left -= len(chunk)
        if cut is not None:  # the body ends short of its Content-Length: the client sees the connection drop
            self.wfile.flush()
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def serve_folder(path, *, auth: tuple[str, str] | None = None) -> Iterator[FolderServer]:
    """Serve the folder ``path`` over HTTP on 127.0.0.1 (a free port) for the block; ``auth=(user, secret)`` asks
    for basic auth. On exit the server stops and every thread it started is joined.

    >>> import pathlib, tempfile, urllib.request
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = pathlib.Path(folder, "a.bin").write_bytes(b"0123456789")
    ...     with serve_folder(folder) as server:
    ...         ask = urllib.request.Request(server.url + "/a.bin", headers={"Range": "bytes=2-4"})
    ...         with urllib.request.urlopen(ask) as answer:
    ...             print(answer.status, answer.headers["Content-Range"], answer.read())
    206 bytes 2-4/10 b'234'
    """
    if not os.path.isdir(path):
        raise NotADirectoryError(f"serve_folder({str(path)!r}): not a folder; give the folder to serve")
    server = FolderServer(str(path), auth)
    loop = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                            name=f"readerkit-file-server-{server.server_address[1]}-accept", daemon=True)
    loop.start()
    try:
        yield server
    finally:
        server.shutdown()
        loop.join(STOP_WAIT)
        server.server_close()
        threads = server.close_connections()
        for thread in threads:
            thread.join(STOP_WAIT)
        left = [t.name for t in [loop, *threads] if t.is_alive()]
        if left:
            raise RuntimeError(f"the HTTP file server at {server.url} did not stop within {STOP_WAIT} s: "
                               f"{left} still running")
