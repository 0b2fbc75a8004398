"""``serve_folder`` with TCP_NODELAY on each connection: the helper server writes an answer's headers and body in
separate sends, so without it every GET waits ~40 ms for the client's delayed ACK (Nagle's algorithm), which
makes a test of many range reads take seconds. (Reported for tests/helpers/http_server.py; drop this once the
server sets it itself.)"""
from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

from tests.helpers.http_server import FolderServer, serve_folder


@contextlib.contextmanager
def serve_quickly(path, *, auth: tuple[str, str] | None = None) -> Iterator[FolderServer]:
    """``serve_folder(path, auth=auth)``, each accepted connection with TCP_NODELAY."""
    with serve_folder(path, auth=auth) as server:
        accept = server.process_request

        def nodelay(request, client_address):
            with contextlib.suppress(OSError):
                request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return accept(request, client_address)

        server.process_request = nodelay
        yield server
