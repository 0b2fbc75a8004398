"""The disk tier of ``readers.cached``: one sqlite3 database per folder, shared by every process of a node.

The folder holds ``cache.sqlite3`` (with its ``-wal`` and ``-shm`` files),
in WAL mode: readers never wait for a writer, and writers take turns.

``spaces``
    one row per namespace: a function over a dataset (``name`` is the digest
    of both, ``about`` says which in JSON), with its entries, bytes, and the
    entries computed and seconds spent computing them (the cost a hit saves).
``entries``
    one row per computed entry: its key ``k``, the blob ``v``
    (``readers.cache_codec``), its CRC-32, size and the time it was written.
    A sample ID ``0 <= id < 2**40`` is the key ``ns << 40 | id``; any other
    key (a string, bytes, a negative or huge int) is a 63-bit BLAKE2 digest of
    the namespace and key, negated, and the row keeps the key itself in
    ``name``, checked on every read.

A write is one transaction, so a process killed mid-write leaves the entries
of earlier transactions and none of its own; the checksum catches what
damages a file afterwards. Each process buffers what it computes and a
writer thread commits it every ``interval`` seconds (0.5 by default), at
once when 8 MiB are waiting, and when a pass ends (``flush``). Over the size
limit, the oldest-written entries go first: a shuffled pass reads every entry
once, so the oldest written is also about the least recently read.
"""
from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import sqlite3
import threading
import time
import warnings
import weakref
import zlib
from typing import Any

import numpy as np

from readers.cache_codec import CorruptEntry, decode, encode

__all__ = ["FILE", "DiskStore", "open_database"]

FILE = "cache.sqlite3"
SCHEMA = 1
ID_BITS = 40
MAX_SPACES = 1 << (63 - ID_BITS)
URGENT_BYTES = 8 << 20
IDLE_SECONDS = 5.0
_STEP = 64  # keys per SELECT ... IN (...): one prepared statement, padded

_TABLES = """
CREATE TABLE IF NOT EXISTS spaces (ns INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, about TEXT NOT NULL,
    created REAL NOT NULL, entries INTEGER NOT NULL DEFAULT 0, bytes INTEGER NOT NULL DEFAULT 0,
    computed INTEGER NOT NULL DEFAULT 0, compute_s REAL NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS entries (k INTEGER PRIMARY KEY, ns INTEGER NOT NULL, v BLOB NOT NULL,
    crc INTEGER NOT NULL, size INTEGER NOT NULL, t REAL NOT NULL, name TEXT);
CREATE INDEX IF NOT EXISTS entries_by_time ON entries (t);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TRIGGER IF NOT EXISTS entry_added AFTER INSERT ON entries BEGIN
    UPDATE spaces SET entries = entries + 1, bytes = bytes + new.size WHERE ns = new.ns; END;
CREATE TRIGGER IF NOT EXISTS entry_dropped AFTER DELETE ON entries BEGIN
    UPDATE spaces SET entries = entries - 1, bytes = bytes - old.size WHERE ns = old.ns; END;
CREATE TRIGGER IF NOT EXISTS entry_replaced AFTER UPDATE ON entries BEGIN
    UPDATE spaces SET entries = entries - 1, bytes = bytes - old.size WHERE ns = old.ns;
    UPDATE spaces SET entries = entries + 1, bytes = bytes + new.size WHERE ns = new.ns; END;
"""
_UPSERT = ("INSERT INTO entries (k, ns, v, crc, size, t, name) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (k) DO "
           "UPDATE SET ns = excluded.ns, v = excluded.v, crc = excluded.crc, size = excluded.size, t = excluded.t, "
           "name = excluded.name")
_SELECT = f"SELECT k, v, crc, name FROM entries WHERE k IN ({', '.join('?' * _STEP)})"

_abandoned: list = []  # connections a forked child inherited: never used, never closed (the parent owns them)
_live: weakref.WeakSet = weakref.WeakSet()


def open_database(directory: str | os.PathLike, create: bool = True) -> sqlite3.Connection:
    """A connection to the cache in ``directory`` (made, with the folder, when ``create``), in WAL mode.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     db = open_database(d)
    ...     mode = db.execute("PRAGMA journal_mode").fetchone()[0]
    ...     db.close()
    >>> mode
    'wal'
    """
    path = os.path.join(os.fspath(directory), FILE)
    if create:
        os.makedirs(directory, exist_ok=True)
    elif not os.path.exists(path):
        raise FileNotFoundError(f"{directory} holds no readerkit cache (no {FILE}): check the folder")
    db = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
    try:
        db.execute("PRAGMA busy_timeout = 60000")
        if db.execute("PRAGMA journal_mode = WAL").fetchone()[0] != "wal":
            raise sqlite3.DatabaseError("WAL mode refused (a network file system?)")
        db.execute("PRAGMA synchronous = NORMAL")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version == 0 and create:
            # every statement is "if not exists", so processes that make it at once agree
            db.executescript("BEGIN IMMEDIATE;" + _TABLES + f"PRAGMA user_version = {SCHEMA}; COMMIT;")
            version = SCHEMA
        if version != SCHEMA:
            raise sqlite3.DatabaseError(f"its schema is version {version}, and this readerkit reads {SCHEMA}")
    except sqlite3.DatabaseError as exc:
        db.close()
        raise ValueError(f"{path} is not a readerkit cache this version can use ({exc}): clear it with "
                         f"`python cli.py cache clear {directory}`, or give another directory") from None
    return db


@contextlib.contextmanager
def _transaction(db: sqlite3.Connection):
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _named(ns: int, key: Any) -> tuple[int, str]:
    """(row key, stored name) of a key that is not a small sample ID."""
    if isinstance(key, (bytes, bytearray)):
        name = "b:" + bytes(key).hex()
    elif isinstance(key, str):
        name = "s:" + key
    elif isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
        name = f"i:{int(key)}"
    else:
        raise TypeError(f"a cache key must be an int, str or bytes, got {type(key).__name__} {key!r:.60}")
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
        if isinstance(key, int) and not isinstance(key, bool) and 0 <= key < (1 << ID_BITS):
            ks.append(key | (ns << ID_BITS))
            names.append(None)
        else:
            k, name = _named(ns, key)
            ks.append(k)
            names.append(name)
    return ks, names


class DiskStore:
    """The cache database of one folder, for one process: reads, buffered writes, a writer thread.

    Pickling (for a worker process) keeps the folder and options; the copy opens its own connection. So does
    a forked child, which drops what its parent had not yet written.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     store = DiskStore(d)
    ...     ns = store.space("demo", {"func": "double"})
    ...     ks, names = row_keys(ns, np.arange(2))
    ...     store.put(ks[0], ns, None, np.full(3, 7), cost=0.001)
    ...     store.flush()
    ...     found, corrupt = DiskStore(d).get_many(ks, names)
    ...     store.close()
    >>> found[ks[0]].tolist(), ks[1] in found, corrupt
    ([7, 7, 7], False, [])
    """

    def __init__(self, directory: str | os.PathLike, limit: int | None = None, interval: float = 0.5):
        self.directory, self.limit, self.interval = os.fspath(directory), limit, interval
        self._setup()

    def _setup(self) -> None:
        self._pid = os.getpid()
        self._db: sqlite3.Connection | None = None
        self._writer_db: sqlite3.Connection | None = None
        self._lock = threading.Lock()  # the reading connection
        self._cond = threading.Condition()  # pending, writing, the writer thread
        self._pending: dict[int, tuple] = {}
        self._writing: dict[int, tuple] = {}
        self._pending_bytes, self._oldest, self._urgent = 0, 0.0, False
        self._writer: threading.Thread | None = None
        self.failed: str | None = None
        self.evictions = self.written_bytes = 0
        _live.add(self)

    def __getstate__(self) -> dict:
        return {"directory": self.directory, "limit": self.limit, "interval": self.interval}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._setup()

    def _forked(self) -> None:
        if self._pid != os.getpid():  # a forked child: the parent's connection and thread are not ours
            _abandoned.extend((self._db, self._writer_db))
            self._setup()

    def connection(self) -> sqlite3.Connection:
        """This process's reading connection, opened (and the database made) on first use."""
        self._forked()
        if self._db is None:
            self._db = open_database(self.directory)
            if self.limit is not None:
                with _transaction(self._db):
                    self._db.execute("INSERT OR REPLACE INTO meta VALUES ('disk_bytes', ?)", (str(self.limit),))
        return self._db

    def space(self, name: str, about: dict) -> int:
        """The number of namespace ``name`` (made, described by ``about``, when new)."""
        db = self.connection()
        with self._lock, _transaction(db):
            db.execute("INSERT OR IGNORE INTO spaces (name, about, created) VALUES (?, ?, ?)",
                       (name, json.dumps(about, sort_keys=True), time.time()))
            ns = db.execute("SELECT ns FROM spaces WHERE name = ?", (name,)).fetchone()[0]
        if ns >= MAX_SPACES:
            raise ValueError(f"the cache in {self.directory} has held {ns:,} namespaces, its most: clear it with "
                             f"`python cli.py cache clear {self.directory}`")
        return ns

    def mean_cost(self, ns: int) -> float:
        """Seconds one entry of namespace ``ns`` took to compute, on average over every process's record."""
        db = self.connection()
        with self._lock:
            computed, seconds = db.execute("SELECT computed, compute_s FROM spaces WHERE ns = ?", (ns,)).fetchone()
        return seconds / computed if computed else 0.0

    def get_many(self, ks: list[int], names: list[str | None]) -> tuple[dict[int, Any], list[int]]:
        """({row key: value} of the keys stored, [row keys whose stored entry is corrupt])."""
        found: dict[int, Any] = {}
        corrupt: list[int] = []
        want = dict(zip(ks, names))
        with self._cond:
            for source in (self._pending, self._writing):  # what this process computed and has not committed
                for k in [k for k in want if k in source]:
                    found[k] = source[k][-1]
                    del want[k]
        if not want:
            return found, corrupt
        db = self.connection()
        asked = list(want)
        with self._lock:
            for lo in range(0, len(asked), _STEP):
                part = asked[lo:lo + _STEP]
                rows = db.execute(_SELECT, part + [part[-1]] * (_STEP - len(part))).fetchall()
                for k, blob, crc, name in rows:
                    if name != want[k]:
                        continue  # another key with the same digest: a miss (its entry is overwritten)
                    try:
                        if zlib.crc32(blob) != crc:
                            raise CorruptEntry("checksum mismatch")
                        found[k] = decode(blob)
                    except CorruptEntry:
                        corrupt.append(k)
        return found, corrupt

    def put(self, k: int, ns: int, name: str | None, value: Any, cost: float, blob: bytes | None = None) -> None:
        """Write ``value`` (encoded as ``blob``) under row key ``k`` soon: within ``interval`` seconds."""
        self._forked()
        if self.failed is not None:
            return
        if blob is None:
            blob = encode(value)
        with self._cond:
            old = self._pending.get(k)
            self._pending[k] = (ns, blob, zlib.crc32(blob), name, cost, value)
            self._pending_bytes += len(blob) - (len(old[1]) if old else 0)
            if len(self._pending) == 1:
                self._oldest = time.monotonic()
            if self._pending_bytes >= URGENT_BYTES:
                self._urgent = True
                self._cond.notify_all()
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_loop, name="readerkit-cache-writer", daemon=True)
                self._writer.start()

    def flush(self, timeout: float = 120.0) -> None:
        """Wait until everything put so far is committed (or the writes have failed, as warned)."""
        self._forked()
        deadline = time.monotonic() + timeout
        with self._cond:
            self._urgent = True
            self._cond.notify_all()
            while (self._pending or self._writing) and self.failed is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"the cache in {self.directory} took over {timeout:.0f} s to write "
                                       f"{len(self._pending) + len(self._writing):,} entries: is its disk stalled?")
                self._cond.wait(left)

    def _write_loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._pending:
                        left = self._oldest + self.interval - time.monotonic()
                        if self._urgent or left <= 0:
                            break
                        self._cond.wait(left)
                    elif not self._cond.wait(IDLE_SECONDS) and not self._pending:
                        self._writer = None  # idle: a later put starts another
                        return
                batch, self._pending, self._pending_bytes, self._urgent = self._pending, {}, 0, False
                self._writing = batch
            try:
                self._write(batch)
            except Exception as exc:  # a full disk, a lock held past the timeout: the job goes on, uncached
                self.failed = f"{type(exc).__name__}: {exc}"
                warnings.warn(f"the cache in {self.directory} could not write {len(batch):,} entries "
                              f"({self.failed}); it writes no more in this process, and what it did not write "
                              "is computed again when next asked for", RuntimeWarning, stacklevel=1)
            with self._cond:
                self._writing = {}
                if self.failed is not None:
                    self._pending, self._pending_bytes = {}, 0
                self._cond.notify_all()

    def _write(self, batch: dict[int, tuple]) -> None:
        if self._db is None:
            self.connection()
        if self._writer_db is None:
            self._writer_db = open_database(self.directory)
        db = self._writer_db
        now = time.time()
        costs: dict[int, list] = {}
        with _transaction(db):
            db.executemany(_UPSERT, [(k, ns, blob, crc, len(blob), now, name)
                                     for k, (ns, blob, crc, name, _, _) in batch.items()])
            for ns, _, _, _, cost, _ in batch.values():
                c = costs.setdefault(ns, [0, 0.0])
                c[0] += 1
                c[1] += cost
            db.executemany("UPDATE spaces SET computed = computed + ?, compute_s = compute_s + ? WHERE ns = ?",
                           [(n, s, ns) for ns, (n, s) in costs.items()])
            if self.limit is not None:
                self.evictions += evict(db, self.limit)
        self.written_bytes += sum(len(v[1]) for v in batch.values())

    def close(self) -> None:
        """Commit what is waiting and close this process's connections."""
        if self._pid != os.getpid():
            return
        self.flush()
        for db in (self._db, self._writer_db):
            if db is not None:
                db.close()
        self._db = self._writer_db = None


def evict(db: sqlite3.Connection, limit: int) -> int:
    """Delete the oldest-written entries until the cache holds at most 90% of ``limit`` bytes (in the caller's
    transaction), when it holds more than ``limit``; return how many went."""
    total = db.execute("SELECT coalesce(sum(bytes), 0) FROM spaces").fetchone()[0]
    if total <= limit:
        return 0
    goal, gone = total - int(limit * 0.9), 0
    while goal > 0:
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
    return gone


@atexit.register
def _flush_all() -> None:
    """At exit, commit what every store of this process has not (a forked child's stores hold nothing)."""
    for store in list(_live):
        with contextlib.suppress(Exception):
            store.flush(timeout=30)
