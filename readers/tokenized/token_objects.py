"""Token files behind URLs (``http(s)://``, ``s3://``, anything fsspec reads): the remote backend of ``tokens``.

A local token file is memory-mapped (``readers.tokenized.windows``); an
object behind a URL is read by byte ranges through
``readers.sources.locations``, with its retries and redaction. To build a
reader, each object costs one ``stat`` (its size and version) and a
``.npy`` one small range read of its header; nothing else is read.

A batch's windows of one object become byte ranges, merged when close and
fetched concurrently (``read_ranges``); the objects of one batch are read
side by side by a few threads. ``largest`` and ``digest`` read objects in
blocks by ranges; the digest reads exactly the bytes ``array_digest`` reads
of a mapped file, so a reader over local files and one over the same files
behind a URL have the same fingerprint.
"""
from __future__ import annotations

import concurrent.futures
import io
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from readers import digests
from readers.sources import locations
from readers.tokenized import token_checks

__all__ = ["at_once", "digest", "header", "largest", "read_rows", "sample"]

T = TypeVar("T")

#: Threads that read the objects of one batch side by side (each object's ranges are fetched concurrently too).
THREADS = 8
#: Bytes of a .npy object read first for its header: numpy's version 1 headers fit (64 KiB for version 2 or 3
#: are read in a second request).
HEADER = 4096
#: Bytes read at a time by ``largest`` (as the mapped reader's 16 MiB blocks).
BLOCK = 16 << 20


def at_once(func: Callable[[Any], T], items: Sequence[Any]) -> list[T]:
    """``[func(x) for x in items]``, run on up to ``THREADS`` threads when there are several (network waits).

    >>> at_once(abs, [-1, 2, -3])
    [1, 2, 3]
    """
    if len(items) < 2:
        return [func(x) for x in items]
    # threads of this call alone, joined before it returns: a thread left running would make later process
    # workers start by spawn instead of fork (readers.workers.channels.pick_start_method)
    with concurrent.futures.ThreadPoolExecutor(min(THREADS, len(items)), thread_name_prefix="token-objects") as pool:
        return list(pool.map(func, items))


def header(url: str, size: int) -> io.BytesIO:
    """The first bytes of a ``.npy`` object, enough for numpy's header reader (one range request, two for a
    header over ``HEADER`` bytes), as a file positioned at 0.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile(suffix=".npy") as f:
    ...     np.save(f, np.arange(3, dtype="<u2")); f.flush()
    ...     np.lib.format.read_magic(header(f.name, 134))
    (1, 0)
    """
    first = locations.read_ranges(url, [(0, min(HEADER, size))], size=size)[0]
    if len(first) >= 10 and first[:6] == b"\x93NUMPY":
        needed = (10 + int.from_bytes(first[8:10], "little") if first[6] == 1
                  else 12 + int.from_bytes(first[8:12], "little") if len(first) >= 12 else 0)
        if needed > len(first):
            first += locations.read_ranges(url, [(len(first), needed - len(first))], size=size)[0]
    return io.BytesIO(first)


def read_rows(url: str, size: int, dtype: np.dtype, offset: int, starts: np.ndarray, width: int) -> np.ndarray:
    """Rows of ``width`` tokens starting at token positions ``starts`` of an object, as a (len(starts), width)
    array of ``dtype``: one byte range each, merged when close, fetched at once.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile(suffix=".bin") as f:
    ...     np.arange(20, dtype="<u2").tofile(f); f.flush()
    ...     read_rows(f.name, 40, np.dtype("<u2"), 0, np.array([8, 0]), 3).tolist()
    [[8, 9, 10], [0, 1, 2]]
    """
    item = dtype.itemsize
    ranges = [(offset + int(s) * item, width * item) for s in starts.tolist()]
    data = b"".join(locations.read_ranges(url, ranges, size=size))
    if len(data) != len(ranges) * width * item:  # the object is shorter than it was: reread its size to say how
        locations.check_unchanged(url, locations.Stat(size, "?"))
    return np.frombuffer(data, dtype=dtype).reshape(len(ranges), width)


def sample(url: str, size: int, dtype: np.dtype, offset: int, n: int) -> np.ndarray:
    """What ``token_checks.sample`` takes of an object's ``n`` tokens, read as ranges (a few KiB).

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile(suffix=".bin") as f:
    ...     np.arange(5, dtype="<u2").tofile(f); f.flush()
    ...     sample(f.name, 10, np.dtype("<u2"), 0, 5).tolist()
    [0, 1, 2, 3]
    """
    spans = token_checks.sample_spans(n)
    item = dtype.itemsize
    data = locations.read_ranges(url, [(offset + s * item, k * item) for s, k in spans], size=size)
    return np.frombuffer(b"".join(data), dtype=dtype)


def largest(url: str, size: int, dtype: np.dtype, offset: int, n: int) -> int:
    """The largest token of an object's ``n`` tokens (-1 for none), read in ``BLOCK``-byte ranges.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile(suffix=".bin") as f:
    ...     np.array([3, 900, 7], dtype="<u2").tofile(f); f.flush()
    ...     largest(f.name, 6, np.dtype("<u2"), 0, 3)
    900
    """
    top, step = -1, BLOCK // dtype.itemsize
    for lo in range(0, n, step):
        count = min(step, n - lo)
        block = locations.read_ranges(url, [(offset + lo * dtype.itemsize, count * dtype.itemsize)], size=size)[0]
        top = max(top, int(np.frombuffer(block, dtype=dtype).max()))
    return top


def digest(url: str, size: int, dtype: np.dtype, offset: int, n: int) -> str:
    """``array_digest`` of an object's ``n`` tokens, from the bytes it reads of them: all of them up to
    ``digests.WHOLE`` bytes, else its ``digests.BLOCKS`` runs spread over them, read as ranges.

    >>> import tempfile
    >>> a = np.arange(3_000_000, dtype="<u2")
    >>> with tempfile.NamedTemporaryFile(suffix=".bin") as f:
    ...     a.tofile(f); f.flush()
    ...     digest(f.name, a.nbytes, a.dtype, 0, len(a)) == digests.array_digest(a)
    True
    """
    item = dtype.itemsize
    h = digests.hasher()
    h.update(f"{dtype.str}{(n,)}".encode())
    if n * item > digests.WHOLE:  # the runs of digests._sampled, at the same places
        run = max(1, digests.WHOLE // digests.BLOCKS // item)
        starts = np.linspace(0, n - run, digests.BLOCKS).astype(np.int64).tolist()
        ranges = [(offset + s * item, run * item) for s in starts]
    else:
        ranges = [(offset, n * item)] if n else []
    for data in locations.read_ranges(url, ranges, size=size) if ranges else []:
        h.update(data)
    return h.hexdigest()
