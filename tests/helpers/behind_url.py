"""A local folder of test data behind a URL, over HTTP or S3, for the tests of readers that read URLs (issue 29)."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.http_server import serve_folder


@contextlib.contextmanager
def behind_a_url(kind: str, request: Any, root: Path, below: str,
                 prefix: str | None = None) -> Iterator[tuple[str, Any, Callable[[str], None]]]:
    """The folder ``root / below`` behind a URL, for the block: over HTTP (``kind`` "http") with ``user:secret@``,
    a basic-auth file server of ``root``; or (``kind`` "s3") under the key ``prefix`` (default ``below``) of a
    fresh bucket of the ``s3_server`` fixture. Yields (the URL, no trailing slash; the HTTP server, or None for
    S3; ``put(name)``, which sends the local file ``root / below / name`` to the store again: nothing to do over
    HTTP, which serves the local files)."""
    folder = root / below
    if kind == "http":
        with serve_folder(root, auth=("user", "secret")) as server:
            yield server.url.replace("http://", "http://user:secret@") + "/" + below, server, lambda name: None
        return
    pytest.importorskip("s3fs")
    s3 = request.getfixturevalue("s3_server")
    bucket, prefix = s3.make_bucket(), prefix or below
    s3.upload(folder, bucket, prefix)
    yield f"s3://{bucket}/{prefix}", None, lambda name: s3.client().upload_file(str(folder / name), bucket,
                                                                             f"{prefix}/{name}")
