"""Where a reader's files are, and how it reads them: local paths, and URLs through fsspec.

Every format reader (Arrow, Parquet, tar shards, image folders, JSON lines)
and ``readers.tokens`` turn what the user gave into a sorted list of paths
with ``expand_paths``, learn a file's size and version with ``stat``, and
read it with ``open_file`` (a file object; a URL's reads byte ranges),
``read_range`` or ``read_ranges`` (many ranges of one file, merged when
close, fetched at once). Nothing else in a reader touches a file system.

A path is a local path, a ``file://`` URL, or any URL fsspec knows:
``http(s)://``, ``s3://``, ``gs://``... (the extra ``readerkit[cloud]``
brings fsspec, s3fs and aiohttp). Credentials come from where fsspec and
the cloud libraries look (the environment, ``~/.aws``, fsspec's
configuration), never from a reader's arguments, so no repr, state or
checkpoint holds one; and every message shows a URL through ``redact``,
without its ``user:password@`` and query string (a signed URL's signature).

Remote reads retry a transient failure (a 5xx or 429 answer, a connection
refused, reset or dropped mid-range, a timeout) with exponential back-off
until ``RETRY.deadline`` seconds have passed since the first failure, then
raise one ``RemoteReadError`` naming the URL and the last failure. A file
opened again in another pass is compared with the version the reader saw
first (``stat``: size and ETag, version id or modification time), and one
that changed is refused with ``FileChanged``.

``expand_paths`` takes one path, a folder (its files with the given
suffixes, sorted, recursively), a glob (``data/*.parquet``), brace patterns
as webdataset writes them (``shard-{000000..000099}.tar``, ``{train,test}``)
or a list of any of these. What matches nothing is an error naming it.
"""
from __future__ import annotations

import bisect
import concurrent.futures
import errno
import glob
import io
import os
import random
import re
import time
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from typing import IO, Any, NamedTuple, TypeVar

from readers.errors import BadType, FileError, MissingFile, ReaderkitError

__all__ = ["BLOCK", "MERGE_GAP", "RETRY", "FileChanged", "RangeFile", "RemoteReadError", "Retry", "Stat",
           "check_unchanged", "expand_braces", "expand_paths", "is_url", "merge_ranges", "open_file", "read_range",
           "read_ranges", "redact", "stat", "stats", "transient"]

T = TypeVar("T")

_BRACE = re.compile(r"\{([^{}]*)\}")
_RANGE = re.compile(r"^(\d+)\.\.(\d+)$")


def expand_braces(pattern: str) -> list[str]:
    """The strings a brace pattern stands for, in order: ``{a,b}`` alternatives and ``{000..003}`` ranges
    (zero-padded to the width of the first bound), as webdataset and the shell write them.

    >>> expand_braces("shard-{000..002}.tar")
    ['shard-000.tar', 'shard-001.tar', 'shard-002.tar']
    >>> expand_braces("{train,test}/{0..1}.tar")
    ['train/0.tar', 'train/1.tar', 'test/0.tar', 'test/1.tar']
    >>> expand_braces("plain.tar")
    ['plain.tar']
    """
    found = _BRACE.search(pattern)
    if found is None:
        return [pattern]
    head, tail, body = pattern[:found.start()], pattern[found.end():], found.group(1)
    numbers = _RANGE.match(body)
    if numbers:
        first, last = numbers.groups()
        width = len(first) if first.startswith("0") else 0
        step = 1 if int(last) >= int(first) else -1
        choices = [str(k).zfill(width) for k in range(int(first), int(last) + step, step)]
    else:
        choices = body.split(",")
    return [expanded for choice in choices for expanded in expand_braces(head + choice + tail)]


class RemoteReadError(FileError):
    """A URL that could not be read: a transient failure that outlasted the retries, or one that no retry mends
    (a wrong credential, no such bucket). The message names the URL (redacted) and the failure."""


class FileChanged(FileError):
    """A file or object that changed after the reader first saw it (another size or version)."""


class Retry(NamedTuple):
    """How remote reads retry a transient failure: waits from ``first`` seconds, doubling up to ``most``
    (with jitter), until ``deadline`` seconds have passed since the first failure of a read."""

    deadline: float = 60.0
    first: float = 0.05
    most: float = 2.0


#: The retry policy of every remote read in this process (``locations.RETRY = Retry(deadline=300)`` to wait longer).
RETRY = Retry()

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
CLOUD = "pip install 'readerkit[cloud]' (fsspec, s3fs, aiohttp)"


def is_url(path: Any) -> bool:
    """Whether ``path`` is a URL read through fsspec (``file://`` is a local path).

    >>> is_url("s3://bucket/a.tar"), is_url("https://host/x.bin"), is_url("data/a.tar"), is_url("file:///tmp/a")
    (True, True, False, False)
    """
    found = isinstance(path, str) and _SCHEME.match(path)
    return bool(found) and found.group(1).lower() != "file"


def _local(path: str) -> str:
    """A ``file://`` URL as a local path; other paths unchanged."""
    return urllib.parse.unquote(path[len("file://"):]) if path.lower().startswith("file://") else path


def redact(url: Any) -> str:
    """``url`` as messages show it: without ``user:password@`` and without its query string and fragment
    (a signed URL's signature, a token); a local path unchanged.

    >>> redact("https://me:secret@host:8080/data/a.tar?X-Amz-Signature=abc#f")
    'https://host:8080/data/a.tar'
    >>> redact("s3://bucket/key.bin"), redact("/data/a.tar")
    ('s3://bucket/key.bin', '/data/a.tar')
    """
    text = os.fspath(url) if isinstance(url, os.PathLike) else str(url)
    if not is_url(text):
        return text
    parts = urllib.parse.urlsplit(text)
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))


def _fsspec(url: str) -> tuple[Any, str]:
    """(fsspec file system, path within it) of a URL; a missing fsspec or protocol library is named with its install."""
    try:
        import fsspec
    except ImportError:
        raise ImportError(f"reading {redact(url)} needs fsspec: {CLOUD}") from None
    try:
        return fsspec.core.url_to_fs(url)
    except ImportError as exc:
        raise ImportError(f"reading {redact(url)}: {exc}; {CLOUD}") from None
    except ValueError as exc:  # an unknown protocol
        raise FileError(f"{redact(url)}: {exc}; give a local path or a URL fsspec knows (http, https, s3, ...)") from None


def _status(exc: BaseException) -> int | None:
    """The HTTP status an exception carries (aiohttp's, botocore's), if any."""
    status = getattr(exc, "status", None)
    if isinstance(status, int):
        return status
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return code if isinstance(code, int) else None
    return None


_TRANSIENT_ERRNOS = {errno.ECONNRESET, errno.ECONNREFUSED, errno.ECONNABORTED, errno.EPIPE, errno.ETIMEDOUT,
                     errno.EHOSTUNREACH, errno.ENETUNREACH}
_TRANSIENT_NAMES = {"ClientConnectionError", "ClientOSError", "ServerDisconnectedError", "ClientPayloadError",
                    "ServerTimeoutError", "ClientConnectorError", "FSTimeoutError", "TimeoutError",
                    "ConnectionClosedError", "EndpointConnectionError", "ReadTimeoutError", "IncompleteRead",
                    "ResponseStreamingError", "ShortRead"}


def transient(exc: BaseException) -> bool:
    """Whether a failed remote read may succeed if tried again: a 5xx, 408 or 429 answer, or a connection that
    was refused, reset, dropped mid-answer or timed out. A missing file, a 4xx (a wrong credential) are not.

    >>> transient(ConnectionResetError()), transient(FileNotFoundError("x")), transient(PermissionError())
    (True, False, False)
    """
    if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)):
        return False
    status = _status(exc)
    if status is not None:
        return status >= 500 or status in (408, 429)
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    if isinstance(exc, OSError) and exc.errno in _TRANSIENT_ERRNOS:
        return True
    return any(cls.__name__ in _TRANSIENT_NAMES for cls in type(exc).__mro__)


def _failure(exc: BaseException) -> str:
    """A failure in a message: its kind and status, never its text where a library may have put a credential."""
    status = _status(exc)
    if status is not None:
        return f"HTTP {status}"
    if isinstance(exc, FileNotFoundError):
        return "not found"
    if isinstance(exc, PermissionError):
        return "access denied"
    return type(exc).__name__


def _retrying(url: str, what: str, call: Callable[[], T]) -> T:
    """``call()``, tried again on a transient failure until ``RETRY.deadline``; then one ``RemoteReadError``.
    A missing object is ``MissingFile``; a refused credential is a ``RemoteReadError`` at once."""
    policy, tries, started, wait = RETRY, 0, None, RETRY.first
    while True:
        tries += 1
        try:
            return call()
        except ReaderkitError:
            raise
        except Exception as exc:  # whatever fsspec, aiohttp or botocore raise: sorted by transient()
            # fsspec's HTTP stat says "not found" for any failed HEAD and GET (a 503, a 401, a reset): the cause says which
            cause = exc.__cause__
            if isinstance(exc, FileNotFoundError) and cause is not None and (
                    transient(cause) or _status(cause) not in (None, 404, 410)):
                exc = cause
            if isinstance(exc, FileNotFoundError):
                raise MissingFile(f"{redact(url)}: no such file or object: check the URL") from None
            if not transient(exc):
                hint = ("check the credentials fsspec finds (the environment, ~/.aws, fsspec's configuration)"
                        if isinstance(exc, PermissionError) or _status(exc) in (401, 403)
                        else "check the URL and the server")
                raise RemoteReadError(f"{redact(url)}: {what} failed ({_failure(exc)}): {hint}") from None
            now = time.monotonic()
            started = now if started is None else started
            if now - started + wait > policy.deadline:
                raise RemoteReadError(
                    f"{redact(url)}: {what} failed {tries} time{'s' if tries > 1 else ''} over {now - started:.1f} s "
                    f"(last: {_failure(exc)}); the server or the network is failing: try again later, or give "
                    f"reads a longer deadline (readers.sources.locations.RETRY, now {policy.deadline:g} s)") from None
            time.sleep(wait * (0.5 + random.random() / 2))
            wait = min(wait * 2, policy.most)


class Stat(NamedTuple):
    """A file's size in bytes and its version: an ETag, an object version or a modification time (a string),
    by which a file seen again is known to be the same."""

    size: int
    version: str


def _local_stat(found: os.stat_result) -> Stat:
    """A local file's ``Stat``: its size, and its modification time and inode as its version."""
    return Stat(found.st_size, f"{found.st_mtime_ns}:{found.st_ino}")


def stat(path: str) -> Stat:
    """The size and version of a local file or a URL's object (one request, retried).

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile() as f:
    ...     _ = f.write(b"abc"); f.flush()
    ...     stat(f.name).size
    3
    """
    if not is_url(path):
        local = _local(path)
        try:
            found = os.stat(local)
        except FileNotFoundError:
            raise MissingFile(f"{local}: no such file: check the path") from None
        return _local_stat(found)
    fs, inner = _fsspec(path)
    fs.invalidate_cache(inner)  # s3fs answers from the listing it cached: a stat looks again, to see a change
    info = _retrying(path, "asking its size", lambda: fs.info(inner))
    if info.get("type") == "directory":
        raise FileError(f"{redact(path)} is a folder, not a file: give the files, or a glob")
    size = info.get("size")
    if size is None:
        raise RemoteReadError(f"{redact(path)}: the server does not say the object's size (no Content-Length); "
                              "serve it with one")
    version = next((str(info[k]) for k in ("VersionId", "ETag", "etag", "LastModified", "Last-Modified", "mtime",
                                           "generation", "md5Hash") if info.get(k)), "")
    return Stat(int(size), version)


def stats(paths: Sequence[str], threads: int = 16) -> list[Stat]:
    """The ``stat`` of each of ``paths``, in order; a URL's asked for ``threads`` at a time (a web server's
    listing says no sizes, so a folder of objects costs one request an object, best made together).

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile() as f:
    ...     _ = f.write(b"abc"); f.flush()
    ...     [s.size for s in stats([f.name, f.name])]
    [3, 3]
    """
    if not any(is_url(p) for p in paths):
        return [stat(p) for p in paths]
    with concurrent.futures.ThreadPoolExecutor(max(1, min(threads, len(paths)))) as pool:
        return list(pool.map(stat, paths))


def check_unchanged(path: str, seen: Stat, now: Stat | None = None) -> None:
    """Refuse ``path`` when it is no longer the file ``seen`` described (``stat``): another size or version.

    >>> check_unchanged("s3://bucket/a.tar", Stat(10, '"e1"'), Stat(12, '"e2"'))
    Traceback (most recent call last):
    ...
    readers.sources.locations.FileChanged: s3://bucket/a.tar changed since the reader first read it (10 bytes, version "e1" then; 12 bytes, version "e2" now): data must not change under a reader; write new files under new names, then build the reader again
    """
    now = stat(path) if now is None else now
    if now != seen:
        raise FileChanged(
            f"{redact(path)} changed since the reader first read it ({seen.size:,} bytes, version {seen.version} then; "
            f"{now.size:,} bytes, version {now.version} now): data must not change under a reader; write new files "
            "under new names, then build the reader again")


def _files_under(folder: str, suffixes: Sequence[str]) -> list[str]:
    found = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found += [os.path.join(root, n) for n in names
                  if not n.startswith(".") and (not suffixes or n.lower().endswith(tuple(suffixes)))]
    return sorted(found)


def expand_paths(paths: str | os.PathLike | Iterable[str | os.PathLike], *, suffixes: Sequence[str] = (),
                 what: str = "data files") -> list[str]:
    """The files ``paths`` names, in order: each of one path, a folder (its files ending in one of
    ``suffixes``, sorted, in sub-folders too), a glob or a brace pattern, or a list of these.
    A name that matches no file raises ``MissingFile`` naming it and ``what`` was looked for.

    >>> import tempfile, pathlib
    >>> d = tempfile.mkdtemp()
    >>> for n in ["b.parquet", "a.parquet", "notes.txt"]:
    ...     _ = (pathlib.Path(d) / n).write_text("x")
    >>> [os.path.basename(p) for p in expand_paths(d, suffixes=[".parquet"])]
    ['a.parquet', 'b.parquet']
    >>> [os.path.basename(p) for p in expand_paths(os.path.join(d, "{a,b}.parquet"))]
    ['a.parquet', 'b.parquet']
    >>> expand_paths(os.path.join(d, "*.arrow"), what="Arrow files")
    Traceback (most recent call last):
    ...
    readers.errors.MissingFile: .../*.arrow: no Arrow files there: check the path, or give the files themselves
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    elif not isinstance(paths, Iterable):
        raise BadType(f"paths={paths!r}: give a path, a folder, a glob or a list of them")
    out: list[str] = []
    for given in paths:
        if not isinstance(given, (str, os.PathLike)):
            raise BadType(f"paths: {given!r} is not a path: give str or os.PathLike items")
        given = os.fspath(given)
        for name in expand_braces(given):
            matched = _remote_matches(name, suffixes) if is_url(name) else _local_matches(_local(name), suffixes)
            if not matched:
                raise MissingFile(f"{redact(name)}: no {what} there: check the path, or give the files themselves")
            out += matched
    return out


def _local_matches(name: str, suffixes: Sequence[str]) -> list[str]:
    if os.path.isdir(name):
        return _files_under(name, suffixes)
    if glob.has_magic(name):
        return sorted(p for p in glob.glob(name) if os.path.isfile(p))
    return [name] if os.path.isfile(name) else []


def _remote_matches(url: str, suffixes: Sequence[str]) -> list[str]:
    """The objects a URL names: itself, a folder's (prefix's) objects with ``suffixes``, or a glob's, as URLs."""
    fs, inner = _fsspec(url)
    if glob.has_magic(inner):
        found = _retrying(url, "listing", lambda: fs.glob(inner, detail=True))
        return sorted(fs.unstrip_protocol(p) if not is_url(p) else p
                      for p, info in found.items() if info.get("type") != "directory")
    try:
        info = _retrying(url, "asking what it is", lambda: fs.info(inner))
    except MissingFile:
        return []
    if info.get("type") != "directory" and not _web_folder(url, info, suffixes):
        return [url]
    found = _retrying(url, "listing", lambda: fs.find(inner, detail=True))
    names = []
    for p, item in found.items():
        base = p.rstrip("/").rpartition("/")[2]
        if item.get("type") == "directory" or base.startswith(".") or not base:
            continue
        if not suffixes or base.lower().endswith(tuple(suffixes)):
            names.append(fs.unstrip_protocol(p) if not is_url(p) else p)
    return sorted(names)


def _web_folder(url: str, info: dict, suffixes: Sequence[str]) -> bool:
    """Whether an HTTP answer is a folder's index page: a web server says no "directory", only an HTML page of
    links (which fsspec lists), so a page is a folder unless its name ends in a suffix asked for, or .html."""
    if not str(info.get("mimetype") or "").startswith("text/html"):
        return False
    path = urllib.parse.urlsplit(url).path.lower()
    return path.endswith("/") or not path.endswith((*suffixes, ".html", ".htm"))


#: Bytes a remote file object fetches at a time when read in sequence (a tar shard streamed, a line index built).
BLOCK = 4 << 20


class RangeFile(io.RawIOBase):
    """A URL's object as a seekable binary file: each read is a byte-range request, retried (see ``open_file``)."""

    def __init__(self, url: str, seen: Stat | None = None):
        super().__init__()
        self.url, self.position = url, 0
        self.fs, self.inner = _fsspec(url)
        self.stat = stat(url)
        if seen is not None:
            check_unchanged(url, seen, self.stat)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.stat.size}[whence]
        if base + offset < 0:
            raise ValueError(f"{redact(self.url)}: seek to {base + offset}, before the start")
        self.position = base + offset
        return self.position

    def size(self) -> int:
        return self.stat.size

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = min(len(view), max(self.stat.size - self.position, 0))
        if n <= 0:
            return 0
        data = _fetch(self.fs, self.inner, self.url, self.position, n)
        view[:n] = data
        self.position += n
        return n

    def readall(self) -> bytes:
        data = read_range(self.url, self.position, max(self.stat.size - self.position, 0))
        self.position += len(data)
        return data


def _fetch(fs: Any, inner: str, url: str, start: int, length: int) -> bytes:
    """``length`` bytes of the object from ``start`` (which must be within it), retried; a short answer (a
    connection dropped mid-range) is a transient failure, tried again, unless the object is now shorter
    (``FileChanged``: it would never come whole)."""
    def once() -> bytes:
        data = fs.cat_file(inner, start=start, end=start + length)
        if len(data) != length:
            if len(data) > length:  # the whole object: a server that ignores Range
                raise RemoteReadError(f"{redact(url)}: the server answered a byte range with {len(data):,} bytes "
                                      f"instead of {length:,}: serve it with Range support (HTTP 206)")
            now = stat(url)
            if now.size < start + length:
                raise FileChanged(f"{redact(url)} changed while it was being read: bytes {start:,}-"
                                  f"{start + length - 1:,} were asked for, and it has {now.size:,} now (version "
                                  f"{now.version}): data must not change under a reader; write new files under new "
                                  "names, then build the reader again")
            raise ConnectionResetError(f"short read: {len(data)} of {length} bytes")
        return data
    return _retrying(url, f"reading bytes {start:,}-{start + length - 1:,}", once)


def open_file(path: str, mode: str = "rb", seen: Stat | None = None) -> IO:
    """Open ``path`` for a reader (binary by default): a local file, or a URL's object as a buffered, seekable
    file whose reads are retried byte-range requests of ``BLOCK`` bytes. ``seen``: the ``stat`` the reader
    took before; an object that changed since is refused (``FileChanged``).

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile(suffix=".bin") as f:
    ...     _ = f.write(b"abc"); f.flush()
    ...     with open_file(f.name) as g:
    ...         g.read()
    b'abc'
    """
    if is_url(path):
        if mode not in ("rb", "r"):
            raise BadType(f"open_file: {redact(path)} opens for reading only (mode 'rb' or 'r'), not {mode!r}")
        raw = io.BufferedReader(RangeFile(path, seen), buffer_size=BLOCK)
        return raw if mode == "rb" else io.TextIOWrapper(raw, encoding="utf-8")
    local = _local(path)
    try:
        f = open(local, mode)
    except FileNotFoundError:
        raise MissingFile(f"{local}: no such file: check the path") from None
    if seen is not None:
        now = _local_stat(os.fstat(f.fileno()))
        if now != seen:
            f.close()
            check_unchanged(local, seen, now)
    return f


def read_range(path: str, start: int, length: int, seen: Stat | None = None) -> bytes:
    """``length`` bytes of ``path`` from byte ``start`` (fewer at its end): a byte range, as a remote store serves.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile() as f:
    ...     _ = f.write(b"0123456789"); f.flush()
    ...     read_range(f.name, 3, 4)
    b'3456'
    """
    return read_ranges(path, [(start, length)], seen=seen)[0]


#: Ranges of one file closer than this many bytes are fetched as one request (the bytes between are read and dropped).
MERGE_GAP = 64 << 10


def merge_ranges(ranges: Sequence[tuple[int, int]], gap: int = MERGE_GAP) -> list[tuple[int, int]]:
    """Sorted ``(start, length)`` ranges joined where they overlap or lie less than ``gap`` bytes apart.

    >>> merge_ranges([(100, 10), (0, 10), (12, 4), (5000, 1)], gap=8)
    [(0, 16), (100, 10), (5000, 1)]
    """
    merged: list[list[int]] = []
    for start, length in sorted(ranges):
        if merged and start <= merged[-1][0] + merged[-1][1] + gap:
            merged[-1][1] = max(merged[-1][1], start + length - merged[-1][0])
        else:
            merged.append([start, length])
    return [(a, n) for a, n in merged]


def read_ranges(path: str, ranges: Sequence[tuple[int, int]], gap: int = MERGE_GAP,
                seen: Stat | None = None, size: int | None = None) -> list[bytes]:
    """The bytes of many ``(start, length)`` ranges of one file, in the order given (each fewer at the file's
    end). For a URL, ranges closer than ``gap`` are merged and the merged ones fetched at once (fsspec's
    concurrent ``cat_ranges``), each retried. ``seen``: the ``stat`` the reader took before; a file that
    changed since is refused (``FileChanged``), checked with the size the read asks for anyway. ``size``
    (without ``seen``): the object's size where the caller knows it (it checks changes its own way), which
    saves asking for it again on every call: a batch of ranges is then the range requests alone.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile() as f:
    ...     _ = f.write(b"0123456789"); f.flush()
    ...     read_ranges(f.name, [(7, 2), (0, 3), (8, 5)])
    [b'78', b'012', b'89']
    """
    if not is_url(path):
        with open_file(path, seen=seen) as f:
            out = []
            for start, length in ranges:
                f.seek(start)
                out.append(f.read(length))
            return out
    fs, inner = _fsspec(path)
    if seen is None and size is not None:
        now = Stat(size, "")
    else:
        now = stat(path) if seen is not None or any(start + length > 0 for start, length in ranges) else Stat(0, "")
    if seen is not None:
        check_unchanged(path, seen, now)
    size = now.size
    wanted = [(min(start, size), max(0, min(length, size - start))) for start, length in ranges]
    spans = [span for span in merge_ranges(wanted, gap) if span[1] > 0]
    fetched = _fetch_spans(fs, inner, path, spans)
    out = []
    for start, length in wanted:
        if not length:
            out.append(b"")
            continue
        k = _span_of(spans, start)
        offset = start - spans[k][0]
        out.append(fetched[k][offset:offset + length])
    return out


def _span_of(spans: list[tuple[int, int]], start: int) -> int:
    """The index of the merged span holding byte ``start`` (spans sorted and disjoint)."""
    return bisect.bisect_right([a for a, _ in spans], start) - 1


def _fetch_spans(fs: Any, inner: str, url: str, spans: list[tuple[int, int]]) -> list[bytes]:
    """Every span's bytes: fetched at once where fsspec can (``cat_ranges``), then each span that failed or came
    short fetched again alone, with retries."""
    if len(spans) == 1:
        return [_fetch(fs, inner, url, *spans[0])]
    try:
        got = fs.cat_ranges([inner] * len(spans), [a for a, _ in spans], [a + n for a, n in spans], on_error="return")
    except Exception:  # each span alone says what failed, after its retries
        got = [None] * len(spans)
    return [data if isinstance(data, bytes) and len(data) == n else _fetch(fs, inner, url, a, n)
            for data, (a, n) in zip(got, spans)]
