"""Whole remote files kept on local disk by URL: a folder shared by a node's processes, bounded in bytes.

Formats read as whole files (tar shards, Parquet row groups) read a remote
object through ``FileCache.get(url, version, size, fetch)``: the path of a
local file holding the whole object. The cache does not know how to download;
``fetch(dest)`` fills a file it is given.

What a folder holds:

``files.sqlite3``
    the index (``readers.storage.sqlite``: WAL mode, written in transactions),
    one row per object: the key (a hash of the full URL), the version (ETag,
    version id or mtime), the local file's name, its size, its last use (an
    order, not a time) and the URL with its credentials and query stripped,
    for messages. A URL or its credentials are never a key or a file name.
``<hash of (url, version)>-<8 hex><suffix>``
    an object's file: renamed into place whole, after its size is checked
    and it is synced, under the index's write lock; a name is never used
    twice, so removing an evicted file never removes another's.
``.partial-<key>-<pid>-<8 hex>``
    a file being fetched. A crash leaves only these; they are removed when a
    ``FileCache`` opens the folder (``clean_up``), once no process is fetching
    that URL.
``.lock-<key>``
    held (``flock``) by the process fetching that URL: another that wants it
    waits (at most ``wait_s``) and then finds it in the index.

After a file is added, the least recently used entries go until the total is
within ``max_bytes`` (files being fetched are not counted); the entry just
added stays. A file evicted while a process reads it stays readable for that
process (POSIX ``unlink``); a path ``get`` returned should be opened soon, as
other processes adding files may evict it.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import re
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple
from urllib.parse import urlsplit, urlunsplit

from readers.errors import BadType, BadValue, TimedOut, make_folder
from readers.storage.sqlite import Database, FileFormat, Marks, connect, is_damage

__all__ = ["INDEX", "FileCache", "FileCacheStats"]

INDEX = "files.sqlite3"
SCHEMA = 1
_APPLICATION_ID = 0x726B6663  # "rkfc": a readerkit file cache
_TABLES = """
CREATE TABLE IF NOT EXISTS files (key TEXT PRIMARY KEY, version TEXT NOT NULL, name TEXT UNIQUE NOT NULL,
    size INTEGER NOT NULL, used INTEGER NOT NULL, url TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS files_by_use ON files (used);
"""
_PARTIAL, _LOCK = ".partial-", ".lock-"
_ENTRY = re.compile(r"[0-9a-f]{32}-[0-9a-f]{8}(\.[A-Za-z0-9]{1,12})?$")
_SUFFIX = re.compile(r"\.[A-Za-z0-9]{1,12}$")
_abandoned: list = []  # connections a forked child inherited: never used, never closed (the parent owns them)


class FileCacheStats(NamedTuple):
    """A ``FileCache``'s figures: ``hits`` and ``misses`` (fetches) of this object in this process, and the ``bytes``
    the folder's entries hold now (all processes' together).

    >>> FileCacheStats(1, 2, 30)
    FileCacheStats(hits=1, misses=2, bytes=30)
    """

    hits: int
    misses: int
    bytes: int


def _redact(url: str) -> str:
    """``url`` fit for a message: without ``user:password@``, query and fragment (where signatures and tokens are).

    >>> _redact("https://ann:s3cret@example.com:8443/data/shard-0.tar?X-Amz-Signature=abc#part")
    'https://example.com:8443/data/shard-0.tar'
    >>> _redact("/data/local.tar")
    '/data/local.tar'
    """
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def _key(url: str) -> str:
    """The index key of ``url``: a hash of the whole URL (credentials and query count: they may name another object)."""
    return hashlib.sha256(url.encode()).hexdigest()[:32]


def _entry_name(url: str, version: str) -> str:
    """A new file name for ``(url, version)``: their hash, 8 random hex digits, and the URL path's suffix if short."""
    digest = hashlib.blake2b(f"{url}\0{version}".encode(), digest_size=16).hexdigest()
    suffix = _SUFFIX.search(urlsplit(url).path)
    return f"{digest}-{secrets.token_hex(4)}{suffix.group(0) if suffix else ''}"


class _IndexFile(FileFormat):
    """A file cache's ``files.sqlite3``: what it holds, and how another file is refused."""

    tables, schema, application_id = _TABLES, SCHEMA, _APPLICATION_ID

    def check(self, path: str, marks: Marks, create: bool) -> None:
        if marks.empty:
            return
        if marks.application_id != _APPLICATION_ID or marks.tables - {"files"}:
            raise BadValue(f"{path} is not a readerkit file cache: give another cache_dir")
        if marks.version != SCHEMA:
            raise BadValue(f"{path} was made by another version of readerkit's file cache (schema {marks.version}; "
                           f"this one reads {SCHEMA}): empty the folder or give another cache_dir")

    def failed(self, path: str, exc: sqlite3.DatabaseError) -> BaseException | None:
        if is_damage(exc) or not isinstance(exc, sqlite3.OperationalError):
            return BadValue(f"{path} cannot be used as a file cache's index ({exc}): empty the folder (what it "
                            "holds is fetched again) or give another cache_dir")
        return None


class FileCache:
    """Whole remote objects as local files in ``folder``, at most ``max_bytes`` of them (see the module).

    ``get(url, version, size, fetch)`` returns the path of a local file that
    holds the whole object; ``fetch(dest)`` fills ``dest`` when there is none
    for that ``version`` yet. ``wait_s``: how long a process waits for
    another that is fetching the same URL.

    >>> import os, shutil, tempfile
    >>> home = tempfile.TemporaryDirectory()
    >>> source = os.path.join(home.name, "shard-0.tar")
    >>> with open(source, "wb") as f:
    ...     _ = f.write(b"0123456789")
    >>> cache = FileCache(os.path.join(home.name, "cache"), max_bytes=1 << 20)
    >>> url = "https://ann:s3cret@example.com/shard-0.tar?sig=abc"
    >>> path = cache.get(url, "etag-1", 10, lambda dest: shutil.copyfile(source, dest))
    >>> open(path, "rb").read(), path.endswith(".tar"), "s3cret" in path
    (b'0123456789', True, False)
    >>> cache.get(url, "etag-1", 10, lambda dest: shutil.copyfile(source, dest)) == path
    True
    >>> cache.stats()
    FileCacheStats(hits=1, misses=1, bytes=10)
    >>> cache.get(url, "etag-1", 2 << 20, lambda dest: None)
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: https://example.com/shard-0.tar is 2,097,152 bytes, more than the file cache's bound
    of 1,048,576 bytes (.../cache): raise the bound (cache_dir_bytes=) or drop cache_dir= to read it uncached
    >>> cache.close(); home.cleanup()
    """

    def __init__(self, folder: str | os.PathLike, max_bytes: int, *, wait_s: float = 600.0):
        if not isinstance(folder, (str, os.PathLike)):
            raise BadType(f"folder={folder!r}: give the cache's folder as a path")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
            raise BadValue(f"max_bytes={max_bytes!r}: give the cache's bound in bytes, an int > 0")
        if isinstance(wait_s, bool) or not isinstance(wait_s, (int, float)) or not wait_s > 0:
            raise BadValue(f"wait_s={wait_s!r}: give the seconds to wait for another process's fetch, > 0")
        self.folder, self.max_bytes, self.wait_s = os.path.abspath(os.fspath(folder)), max_bytes, float(wait_s)
        make_folder(self.folder, "the file cache's folder")
        self._counts = [0, 0]  # hits, misses
        self._lock = threading.Lock()
        self._open()
        self.clean_up()

    def _open(self) -> None:
        self._pid = os.getpid()
        path = os.path.join(self.folder, INDEX)
        self._db = Database(connect(path, _IndexFile()), f"the file cache in {self.folder} is closed: make a new "
                            "FileCache", lambda why: BadValue(f"{path} is damaged ({why}): empty the folder (what it "
                                                              "holds is fetched again) or give another cache_dir"))

    def _database(self) -> Database:
        if self._pid != os.getpid():  # a forked child: its own connection (sqlite's must not cross a fork)
            _abandoned.append(self._db)
            self._open()
        return self._db

    def __repr__(self) -> str:
        return f"FileCache({self.folder!r}, max_bytes={self.max_bytes})"

    def __reduce__(self) -> tuple:  # (to a spawned worker: it opens the folder itself)
        return functools.partial(type(self), wait_s=self.wait_s), (self.folder, self.max_bytes)

    def __enter__(self) -> FileCache:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the index; a second call does nothing (a closed cache's ``get`` raises ``BadValue``)."""
        if self._pid == os.getpid():
            self._db.close()

    def stats(self) -> FileCacheStats:
        """This object's hits and misses, and the bytes the folder holds now (see ``FileCacheStats``)."""
        with self._database().transaction(write=False) as db:
            held = db.execute("SELECT coalesce(sum(size), 0) FROM files").fetchone()[0]
        return FileCacheStats(*self._counts, held)

    def get(self, url: str, version: str, size: int, fetch: Callable[[str], object]) -> str:
        """The path of a local file holding the whole object at ``url`` of ``version`` and ``size`` bytes, fetched
        with ``fetch(dest)`` unless the folder has it (see the class)."""
        if not isinstance(url, str) or not isinstance(version, str):
            raise BadType(f"url and version must be str, got {type(url).__name__} and {type(version).__name__}")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise BadValue(f"{_redact(url)}: size={size!r}: give the object's size in bytes, an int >= 0")
        if size > self.max_bytes:
            raise BadValue(f"{_redact(url)} is {size:,} bytes, more than the file cache's bound of {self.max_bytes:,} "
                           f"bytes ({self.folder}): raise the bound (cache_dir_bytes=) or drop cache_dir= to read it "
                           "uncached")
        key = _key(url)
        path = self._hit(key, version, size)
        if path is None:
            with self._fetching(key, url):
                path = self._hit(key, version, size)  # another process may have fetched it meanwhile
                if path is None:
                    return self._fetch(key, url, version, size, fetch)
        with self._lock:
            self._counts[0] += 1
        return path

    def _hit(self, key: str, version: str, size: int) -> str | None:
        """The entry's path, marked as the latest used, when the index has this version and its file is whole."""
        with self._database().transaction(write=True) as db:  # no eviction between the check and the mark
            row = db.execute("SELECT version, name, size FROM files WHERE key = ?", (key,)).fetchone()
            if row is None or row[0] != version or row[2] != size:
                return None
            path = os.path.join(self.folder, row[1])
            try:
                if os.stat(path).st_size != size:  # changed behind the cache's back: fetched again
                    return None
            except FileNotFoundError:
                return None
            db.execute("UPDATE files SET used = (SELECT max(used) + 1 FROM files) WHERE key = ?", (key,))
        return path

    @contextlib.contextmanager
    def _fetching(self, key: str, url: str) -> Iterator[None]:
        """Hold the lock file of ``key`` (waiting at most ``wait_s`` for another fetcher); removed when done."""
        path = os.path.join(self.folder, _LOCK + key)
        fd = _take(path, time.monotonic() + self.wait_s)
        if fd is None:
            raise TimedOut(f"{_redact(url)}: another process has been fetching it into {self.folder} for over "
                           f"{self.wait_s:g} s: raise wait_s=, or look for a process stuck in its fetch")
        try:
            yield
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # while held: a process waiting on it takes it, finds it gone, and takes a new one
            os.close(fd)

    def _fetch(self, key: str, url: str, version: str, size: int, fetch: Callable[[str], object]) -> str:
        """Fetch into a temporary file, check and sync it, rename it into place and index it; evict what is over."""
        temp = os.path.join(self.folder, f"{_PARTIAL}{key}-{os.getpid()}-{secrets.token_hex(4)}")
        name = _entry_name(url, version)
        path = os.path.join(self.folder, name)
        os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        placed = False
        try:
            fetch(temp)
            try:
                got = os.stat(temp).st_size
            except FileNotFoundError:
                got = None
            if got != size:
                raise BadValue(f"{_redact(url)}: the fetch wrote {'no file' if got is None else f'{got:,} bytes'}, "
                               f"not the {size:,} bytes of version {version!r}: the object may have changed while "
                               "it was fetched; read it again")
            with open(temp, "rb") as f:
                os.fsync(f.fileno())
            with self._database().transaction(write=True) as db:  # renamed under the write lock: see clean_up
                old = db.execute("SELECT name FROM files WHERE key = ?", (key,)).fetchone()
                os.replace(temp, path)
                placed = True
                _sync_folder(self.folder)
                db.execute("INSERT OR REPLACE INTO files (key, version, name, size, used, url) VALUES "
                           "(?, ?, ?, ?, (SELECT coalesce(max(used), 0) + 1 FROM files), ?)",
                           (key, version, name, size, _redact(url)))
                gone = ([old[0]] if old else []) + self._evict(db, key)
        except BaseException:
            for leftover in (temp, path) if placed else (temp,):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(leftover)
            raise
        for dropped in gone:  # names are never reused: none of these is another's new file
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.folder, dropped))
        with self._lock:
            self._counts[1] += 1
        return path

    def _evict(self, db: sqlite3.Connection, kept: str) -> list[str]:
        """Delete the least recently used rows, never ``kept``'s, until the total is within the bound; their names."""
        total = db.execute("SELECT coalesce(sum(size), 0) FROM files").fetchone()[0]
        gone = []
        for key, name, size in db.execute("SELECT key, name, size FROM files WHERE key != ? ORDER BY used",
                                          (kept,)).fetchall():
            if total <= self.max_bytes:
                break
            db.execute("DELETE FROM files WHERE key = ?", (key,))
            gone.append(name)
            total -= size
        return gone

    def clean_up(self) -> int:
        """Remove what crashed processes left in the folder: temporary and lock files no process holds, entry files
        the index does not name, rows whose file is gone; return how many files went. ``FileCache()`` calls it.

        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d, FileCache(d, 100) as cache:
        ...     open(os.path.join(d, ".partial-" + "0" * 32 + "-1234-00000000"), "w").close()  # a crashed fetch's
        ...     print(cache.clean_up(), [name for name in os.listdir(d) if not name.startswith(INDEX)])
        1 []
        """
        removed = 0
        with os.scandir(self.folder) as found:
            names = sorted(entry.name for entry in found)
        for name in names:
            if not name.startswith((_PARTIAL, _LOCK)):
                continue
            key = name[len(_PARTIAL):len(_PARTIAL) + 32] if name.startswith(_PARTIAL) else name[len(_LOCK):]
            lock = os.path.join(self.folder, _LOCK + key)
            fd = _take(lock, None)
            if fd is None:  # a live process is fetching that URL
                continue
            try:
                if name.startswith(_PARTIAL):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(self.folder, name))
                        removed += 1
                os.unlink(lock)  # (held: see _fetching)
            finally:
                os.close(fd)
        with self._database().transaction(write=True) as db:  # entries are renamed into place under this lock
            indexed = {name for name, in db.execute("SELECT name FROM files")}
            for name in names:
                if _ENTRY.match(name) and name not in indexed:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(self.folder, name))
                        removed += 1
            gone = [name for name in indexed if not os.path.exists(os.path.join(self.folder, name))]
            db.executemany("DELETE FROM files WHERE name = ?", [(name,) for name in gone])
        return removed


def _take(path: str, deadline: float | None) -> int | None:
    """A descriptor of the lock file ``path`` holding its ``flock``, or None when another holds it past ``deadline``
    (None: do not wait). A lock file removed by its holder is done with (a forked child of the holder may hold
    the lock on): a new one is made and taken."""
    delay = 0.005
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            taken = _try_lock(fd)
            while not taken and _same_file(path, fd):
                if deadline is None or time.monotonic() > deadline:
                    os.close(fd)
                    return None
                time.sleep(delay)  # (flock has no timeout: a bounded wait polls)
                delay = min(delay * 2, 0.2)
                taken = _try_lock(fd)
            if taken and _same_file(path, fd):
                return fd
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
        os.close(fd)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _same_file(path: str, fd: int) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        named, held = os.stat(path), os.fstat(fd)
    except FileNotFoundError:
        return False
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _sync_folder(folder: str) -> None:
    """Make a rename in ``folder`` durable (where the file system lets a folder be synced)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)
