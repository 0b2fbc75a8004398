"""The database of ``readers.cached``'s disk tier: its tables, how it is opened, how keys map to rows.

A cache folder holds ``cache.sqlite3`` (with its ``-wal`` and ``-shm`` files),
in WAL mode: readers never wait for a writer, and writers take turns. It is
opened, checked and written in transactions as ``readers.storage.sqlite``
does for every readerkit file; here are what it holds and how it refuses a
file that is not a cache.

``spaces``
    one row per namespace: a function over a dataset (``name`` is the digest
    of both, ``about`` says which in JSON), with its entries, bytes, and the
    entries computed and seconds spent computing them (the cost a hit saves);
    triggers keep the counts as entries come and go.
``entries``
    one row per computed entry: its key ``k``, the blob ``v``
    (``readers.storage.codec``) or NULL for a row of a dense file
    (``readers.caching.dense``), the CRC-32 of either, its size and the time it
    was written. A sample ID ``0 <= id < 2**40`` is the key ``ns << 40 | id``;
    any other key (a string, bytes, a negative or huge int) is a 63-bit
    BLAKE2 digest of the namespace and key, negated, and the row keeps the
    key itself in ``name``, checked on every read.
``dense``
    a namespace's dense layout (rows ``lo <= id < hi``, each column's dtype
    and shape), or NULL when its entries have none.
``meta``
    ``disk_bytes``: the size limit last given.

A database damaged outside sqlite (a page overwritten, a table dropped) is
found when opened (its tables) or at its first error (``damage_of``: what
``PRAGMA quick_check`` finds, which reads every page, so it is not run at
every opening); ``set_aside`` then renames it, with its ``-wal``, ``-shm``
and dense files, out of the way, and the next opening starts a new one. One
whose header is overwritten, which sqlite calls "not a database", is such
damage too when the folder shows it is readerkit's cache
(``made_by_readerkit``); another program's file is refused, untouched.

Those renames (and ``cache clear``'s deletion of a damaged database) take a
lock on the folder (``folder_lock``, exclusive) that every opening takes too
(shared, while sqlite opens the files and the file's inode is read): a
process opening the folder meanwhile would open the damaged database under
its live name and make it a ``-wal`` there, which the next new database
would take for its own. An opening finds the database whole under its name,
or gone; a connection already open follows its files wherever they are
renamed.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import sqlite3
from collections.abc import Iterator
from typing import Any

import numpy as np

from readers.caching.dense import dense_files
from readers.errors import BadType, BadValue, FileError, MissingFile, make_folder
from readers.storage.sqlite import (
    BUSY_S,
    DamagedFile,
    FileFormat,
    Marks,
    check_pages,
    connect,
    is_damage,
    set_aside,
)

__all__ = [
    "FILE", "ID_BITS", "ID_MASK", "MAX_SPACES", "SELECT", "STEP", "UPSERT", "WAL_BYTES", "NotACache", "aside_files",
    "damage_of", "damaged_cache", "database_bytes", "evict", "folder_lock", "free_space", "made_by_readerkit",
    "open_database", "opened_database", "release", "row_keys", "set_aside_cache",
]

FILE = "cache.sqlite3"
SCHEMA = 1
ID_BITS = 40
ID_MASK = (1 << ID_BITS) - 1
MAX_SPACES = 1 << (63 - ID_BITS)
WAL_BYTES = 16 << 20  # the write-ahead log is cut back to this after a checkpoint
STEP = 64  # keys per SELECT ... IN (...): one prepared statement, padded

_OURS = {"spaces", "entries", "dense", "meta", "sqlite_sequence"}
_NEEDED = _OURS - {"sqlite_sequence"}
_TABLES = """
CREATE TABLE IF NOT EXISTS spaces (ns INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT UNIQUE NOT NULL, about TEXT NOT NULL,
    created REAL NOT NULL, entries INTEGER NOT NULL DEFAULT 0, bytes INTEGER NOT NULL DEFAULT 0,
    computed INTEGER NOT NULL DEFAULT 0, compute_s REAL NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS entries (k INTEGER PRIMARY KEY, ns INTEGER NOT NULL, v BLOB,
    crc INTEGER NOT NULL, size INTEGER NOT NULL, t REAL NOT NULL, name TEXT);
CREATE INDEX IF NOT EXISTS entries_by_time ON entries (t);
CREATE INDEX IF NOT EXISTS dense_rows ON entries (ns, k, crc) WHERE v IS NULL;
CREATE TABLE IF NOT EXISTS dense (ns INTEGER PRIMARY KEY, layout TEXT);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TRIGGER IF NOT EXISTS entry_added AFTER INSERT ON entries BEGIN
    UPDATE spaces SET entries = entries + 1, bytes = bytes + new.size WHERE ns = new.ns; END;
CREATE TRIGGER IF NOT EXISTS entry_dropped AFTER DELETE ON entries BEGIN
    UPDATE spaces SET entries = entries - 1, bytes = bytes - old.size WHERE ns = old.ns; END;
CREATE TRIGGER IF NOT EXISTS entry_replaced AFTER UPDATE ON entries BEGIN
    UPDATE spaces SET entries = entries - 1, bytes = bytes - old.size WHERE ns = old.ns;
    UPDATE spaces SET entries = entries + 1, bytes = bytes + new.size WHERE ns = new.ns; END;
"""
UPSERT = ("INSERT INTO entries (k, ns, v, crc, size, t, name) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (k) DO "
           "UPDATE SET ns = excluded.ns, v = excluded.v, crc = excluded.crc, size = excluded.size, t = excluded.t, "
           "name = excluded.name")
SELECT = f"SELECT k, v, crc, name FROM entries WHERE k IN ({', '.join('?' * STEP)})"


class NotACache(BadValue):
    """A folder's ``cache.sqlite3`` that this readerkit cannot use: not a cache (``reason`` says why), or a cache
    of another version (``reason`` None).

    >>> str(NotACache("/d/cache.sqlite3", "it is empty"))
    '/d/cache.sqlite3 is not a readerkit cache (it is empty): give another directory'
    """

    def __init__(self, path: str, reason: str | None, message: str | None = None):
        self.path, self.reason = path, reason
        super().__init__(message or f"{path} is not a readerkit cache ({reason}): give another directory")


_NOT_A_DATABASE = 26  # sqlite's SQLITE_NOTADB: the file's header is not a database's
#: Marks of readerkit's cache in a folder whose database header is damaged: its dense files and set-aside copies,
#: and, in the first MiB of the database or its log, the statement that made its table of namespaces (on page 1,
#: past the 100-byte header) or a namespace's description (a row of that table: JSON with sorted keys).
_OUR_FILES = re.compile(rf"dense-[0-9a-f]{{32}}-\d+\.npy$|{re.escape(FILE)}\.damaged-")
_OUR_BYTES = re.compile(rb'CREATE TABLE spaces \(ns INTEGER PRIMARY KEY AUTOINCREMENT|"func": "[^"]*", "key": ')
_LOOKED_AT = 1 << 20


def made_by_readerkit(path: str) -> bool:
    """Whether the cache database at ``path``, which sqlite cannot open (its header overwritten), was made by
    readerkit's cache: its folder holds dense files or set-aside copies of a cache, or the first MiB of the file
    or of its log holds the cache's own table of namespaces. A file some other program wrote shows none of them.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = open(os.path.join(d, FILE), "w").write("someone's notes, not a database")
    ...     before = made_by_readerkit(os.path.join(d, FILE))
    ...     open(os.path.join(d, "dense-" + "0" * 32 + "-0.npy"), "w").close()
    ...     print(before, made_by_readerkit(os.path.join(d, FILE)))
    False True
    """
    with contextlib.suppress(OSError):
        if any(_OUR_FILES.match(name) for name in os.listdir(os.path.dirname(path) or ".")):
            return True
    for name in (path, path + "-wal"):
        with contextlib.suppress(OSError), open(name, "rb") as f:
            if _OUR_BYTES.search(f.read(_LOOKED_AT)):
                return True
    return False


class _CacheFile(FileFormat):
    """A cache's ``cache.sqlite3``: what it holds, and how a file that is not one is refused (``NotACache``)."""

    tables, schema = _TABLES, SCHEMA
    first_pragmas = ("auto_vacuum = INCREMENTAL",)
    pragmas = (f"journal_size_limit = {WAL_BYTES}",)

    def check(self, path: str, marks: Marks, create: bool) -> None:
        version, tables = marks.version, marks.tables
        if version != SCHEMA:
            if "spaces" in tables and version:
                raise NotACache(path, None, f"{path} was made by another version of readerkit's cache (schema "
                                            f"{version}; this one reads {SCHEMA}): delete it, with its -wal and -shm "
                                            "files and the folder's dense-*.npy files, or give another directory")
            if tables - _OURS or version or not create:  # (our tables at version 0: another process is making it)
                reason = "it holds other tables" if tables - _OURS else "another schema" if version else "it is empty"
                raise NotACache(path, reason)
        elif _NEEDED - tables:
            raise damaged_cache(path, _missing(tables))

    def no_wal(self, path: str) -> Exception:
        return NotACache(path, "it cannot be put in WAL mode, as on some network file systems",
                         f"{path} cannot be put in WAL mode (a network file system?): give a folder on a local disk")

    def failed(self, path: str, exc: sqlite3.DatabaseError) -> BaseException | None:
        if is_damage(exc):
            return damaged_cache(path, str(exc))
        if not isinstance(exc, sqlite3.OperationalError):
            if getattr(exc, "sqlite_errorcode", None) == _NOT_A_DATABASE and made_by_readerkit(path):
                return damaged_cache(path, f"its header is damaged: {exc}")  # set aside as any damage, not refused
            return NotACache(path, str(exc))
        if "unable to open" in str(exc) or "readonly" in str(exc) or "read-only" in str(exc):
            return FileError(f"cannot open the cache in {path} ({exc}): a cache's folder must be writable by every "
                           "process that uses it (sqlite keeps the -wal and -shm files beside the database)")
        return None  # (busy past the timeout, say: as sqlite says it)


def open_database(directory: str | os.PathLike, create: bool = True) -> sqlite3.Connection:
    """A connection to the cache in ``directory`` (made, with the folder, when ``create``), in WAL mode.

    A file that is not a readerkit cache is refused (``NotACache``) before
    anything in it changes.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     db = open_database(d)
    ...     mode = db.execute("PRAGMA journal_mode").fetchone()[0]
    ...     db.close()
    >>> mode
    'wal'
    """
    return opened_database(directory, create)[0]


def opened_database(directory: str | os.PathLike, create: bool = True) -> tuple[sqlite3.Connection, int | None]:
    """``open_database``'s connection, and the inode of the database file it opened, read under the same lock on
    the folder: no set-aside comes between them (a store tells the file it opened from one made in its place by
    its inode). A ``DamagedFile`` it raises has the damaged file's inode in ``inode``.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     db, inode = opened_database(d)
    ...     db.close()
    ...     same = inode == os.stat(os.path.join(d, FILE)).st_ino
    >>> same
    True
    """
    path = os.path.join(os.fspath(directory), FILE)
    if create:
        make_folder(directory, "the cache folder")
    elif not os.path.isdir(directory):
        why = "is not a folder" if os.path.exists(directory) else "does not exist"
        raise MissingFile(f"{os.fspath(directory)} {why}: check the folder's path")
    elif not os.path.exists(path):
        raise MissingFile(f"{os.fspath(directory)} holds no readerkit cache (no {FILE}): check the folder")
    with folder_lock(directory):  # never between the renames of a set-aside (see the module)
        try:
            db = connect(path, _CacheFile(), create)
        except DamagedFile as exc:
            exc.inode = _inode(path)
            raise
        return db, _inode(path)


def _inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


@contextlib.contextmanager
def folder_lock(directory: str | os.PathLike, exclusive: bool = False) -> Iterator[None]:
    """Hold a lock on the cache folder ``directory`` (``flock``) in the block: shared to open its database, exclusive
    to set it aside or delete it (see the module).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     with folder_lock(d), folder_lock(d):  # shared: any number at once
    ...         pass
    ...     with folder_lock(d, exclusive=True):
    ...         pass
    """
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)  # released with the descriptor
        yield
    finally:
        os.close(fd)


def damaged_cache(path: str, reason: str) -> DamagedFile:
    """The error for the cache database at ``path``, damaged as ``reason`` says.

    >>> damaged_cache("/c/cache.sqlite3", "its table entries is missing")
    DamagedFile('/c/cache.sqlite3 is damaged (its table entries is missing): the next process that uses the cache sets it aside and starts a new one; `python cli.py cache clear /c` deletes it now')
    """
    return DamagedFile(path, reason, "the next process that uses the cache sets it aside and starts a new one; "
                                     f"`python cli.py cache clear {os.path.dirname(path)}` deletes it now")


def _missing(tables: frozenset[str] | set[str]) -> str:
    gone = sorted(_NEEDED - tables)
    return f"its table{'s' if len(gone) > 1 else ''} {', '.join(gone)} {'are' if len(gone) > 1 else 'is'} missing"


def damage_of(directory: str | os.PathLike) -> str | None:
    """What is wrong with the cache database in ``directory``: a table of its own missing, or what
    ``PRAGMA quick_check`` finds in its pages; None when it reads whole (or is not there).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     open_database(d).close()
    ...     whole = damage_of(d)
    ...     sqlite3.connect(os.path.join(d, FILE), isolation_level=None).execute("DROP TABLE entries").connection.close()
    ...     print(whole, "/", damage_of(d))
    None / its table entries is missing
    """
    path = os.path.join(os.fspath(directory), FILE)
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(folder_lock(directory))  # as open_database (see the module)
            db = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=BUSY_S, isolation_level=None)
        except (sqlite3.OperationalError, FileNotFoundError, NotADirectoryError):  # not there (any more)
            return None
        try:
            # the first read opens the -wal: under the lock; the check itself needs it no more
            tables = {name for name, in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            held.close()
            return _missing(tables) if _NEEDED - tables else check_pages(db)
        except sqlite3.DatabaseError as exc:
            if is_damage(exc):
                return str(exc)
            raise
        finally:
            db.close()


def aside_files(directory: str | os.PathLike) -> list[str]:
    """The files of damaged databases ``set_aside_cache`` renamed in ``directory`` (``*.damaged-*``).

    >>> aside_files("/nonexistent")
    []
    """
    with contextlib.suppress(FileNotFoundError, NotADirectoryError), os.scandir(directory) as found:
        return sorted(f.path for f in found if ".damaged-" in f.name and f.name.startswith((FILE, "dense-")))
    return []


def set_aside_cache(directory: str | os.PathLike, inode: int | None) -> str | None:
    """Rename the damaged cache database in ``directory``, with its ``-wal``, ``-shm`` and dense files, out of the
    way (``readers.storage.sqlite.set_aside``), so that the next opening makes a new one; return its new path.

    ``inode``: the damaged file's, as it was found: when the file there is
    another by now (a process set it aside and made a new one meanwhile), it
    is left alone and None returned. Processes doing this at once take turns
    (a lock on the folder, which every opening takes too: see the module).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     open_database(d).close()
    ...     aside = set_aside_cache(d, os.stat(os.path.join(d, FILE)).st_ino)
    ...     print(os.path.basename(aside), os.listdir(d) == [os.path.basename(aside)])
    cache.sqlite3.damaged-... True
    """
    directory = os.fspath(directory)
    path = os.path.join(directory, FILE)
    with folder_lock(directory, exclusive=True):  # no opening meanwhile (see the module)
        try:
            now = os.stat(path).st_ino
        except FileNotFoundError:
            return None
        if inode is not None and now != inode:
            return None
        return set_aside(path, *dense_files(directory))


def _named(ns: int, key: Any) -> tuple[int, str]:
    """(row key, stored name) of a key that is not a small sample ID."""
    if isinstance(key, (bytes, bytearray)):
        name = "b:" + bytes(key).hex()
    elif isinstance(key, str):
        name = "s:" + key
    elif isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
        name = f"i:{int(key)}"
    else:
        raise BadType(f"a cache key must be an int, str or bytes, got {type(key).__name__} {key!r:.60}")
    digest = hashlib.blake2b(f"{ns}|{name}".encode(), digest_size=8).digest()
    return -1 - (int.from_bytes(digest, "little") >> 1), name


def row_keys(ns: int, keys: Any) -> tuple[list[int], list[str | None]]:
    """The row key and stored name (None for a sample ID) of each key, in namespace ``ns``.

    >>> row_keys(1, np.array([0, 5]))
    ([1099511627776, 1099511627781], [None, None])
    >>> k, names = row_keys(1, ["cat.jpg"]); k[0] < 0, names
    (True, ['s:cat.jpg'])
    """
    if isinstance(keys, np.ndarray) and keys.dtype.kind in "iu" and keys.size \
            and keys.min() >= 0 and keys.max() < (1 << ID_BITS):
        return (keys.astype(np.int64) | (ns << ID_BITS)).tolist(), [None] * len(keys)
    ks, names = [], []
    for key in (keys.tolist() if isinstance(keys, np.ndarray) else keys):
        if isinstance(key, np.integer):
            key = int(key)
        if isinstance(key, int) and not isinstance(key, bool) and 0 <= key < (1 << ID_BITS):
            ks.append(key | (ns << ID_BITS))
            names.append(None)
        else:
            k, name = _named(ns, key)
            ks.append(k)
            names.append(name)
    return ks, names


def database_bytes(db: sqlite3.Connection) -> int:
    """Bytes of the database's pages in use (its free pages left out: ``evict`` gives them back).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     db = open_database(d)
    ...     used = database_bytes(db)
    ...     db.close()
    >>> 0 < used < 1 << 20
    True
    """
    pages, free, size = (db.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_count", "freelist_count", "page_size"))
    return (pages - free) * size


def evict(db: sqlite3.Connection, limit: int) -> int:
    """When the database's pages in use (``database_bytes``) are over ``limit``, delete the oldest-written
    entries until about 90% of it is left, in the caller's transaction; return how many went. The pages they
    free go back to the file system with ``PRAGMA incremental_vacuum`` after the commit (``release``).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     db = open_database(d)
    ...     evict(db, 1 << 20)
    ...     db.close()
    0
    """
    used = database_bytes(db)
    if used <= limit:
        return 0
    gone, goal_bytes = 0, limit * 0.9
    while used > goal_bytes:
        total = db.execute("SELECT coalesce(sum(bytes), 0) FROM spaces").fetchone()[0]
        # the entries' bytes to drop, in proportion to their share of the pages (which add sqlite's own overhead)
        goal = max(1.0, (used - limit * 0.9) * total / used)
        rows = db.execute("SELECT k, size FROM entries ORDER BY t LIMIT 256").fetchall()
        if not rows:
            break
        cut = 0
        for k, size in rows:
            cut += 1
            goal -= size
            if goal <= 0:
                break
        db.executemany("DELETE FROM entries WHERE k = ?", [(k,) for k, _ in rows[:cut]])
        gone += cut
        used = database_bytes(db)
        goal_bytes = limit  # after the first round, only what it takes to be within the bound: rows freed
        # here and there seldom free whole pages, and the pages half empty fill again with the next writes
    return gone


def release(db: sqlite3.Connection) -> None:
    """Give the database's free pages back to the file system (outside a transaction: it is one of its own).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     db = open_database(d)
    ...     release(db)
    ...     db.close()
    """
    db.executescript("PRAGMA incremental_vacuum;")  # executescript steps it to the end; execute frees one page


def free_space(directory: str) -> str:
    """The free space of the file system of ``directory``, in words for a message.

    >>> import tempfile
    >>> free_space(tempfile.gettempdir()).endswith("MiB free")
    True
    >>> free_space("/no/such/folder")
    'free space unknown'
    """
    try:
        return f"{shutil.disk_usage(directory).free / (1 << 20):,.2f} MiB free"
    except OSError:
        return "free space unknown"
