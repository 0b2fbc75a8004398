"""The disk tier of ``readers.cached``, as one process uses it: reads, buffered writes and a writer thread.

The database (``readers.caching.database``) is shared by every process that opens the
folder. Each process buffers what it computes, and a writer thread commits it
every ``interval`` seconds (0.5 by default), at once when 8 MiB are waiting,
and when a pass ends (``flush``). A write is one transaction, so a process
killed mid-write leaves the entries of earlier transactions and none of its
own; the checksum catches what damages a file afterwards. Fixed-shape entries
of a range of sample IDs go to memory-mapped files (``readers.caching.dense``),
the rest to blobs (``readers.storage.codec``).

Failures: a write that fails (a full disk, a lock held for minutes) stops
this process's writes, with one warning, and the job goes on uncached. A
database found damaged (``readers.caching.database.damage_of``) is set aside
with its files and a new one started, with one warning: each start is a
``generation`` of the store, and namespace numbers, keys and writes of an
earlier one are dropped, never used in the new database.
"""
from __future__ import annotations

import atexit
import contextlib
import json
import multiprocessing.util
import os
import sqlite3
import threading
import time
import warnings
import weakref
from typing import Any

import numpy as np

from readers.caching.database import (
    FILE,
    ID_BITS,
    ID_MASK,
    MAX_SPACES,
    SELECT,
    STEP,
    UPSERT,
    damage_of,
    evict,
    free_space,
    open_database,
    opened_database,
    release,
    row_keys,
    set_aside_cache,
)
from readers.caching.dense import MAX_BYTES, MAX_ROWS, DenseFile, layout_of
from readers.errors import BadValue, TimedOut
from readers.storage.codec import decode, encode
from readers.storage.sqlite import (
    DamagedFile,
    blob_crc,
    check_crc,
    is_damage,
    is_full,
    transaction,
)

__all__ = ["DiskStore", "open_database", "row_keys"]

RETRIES = 3  # tries of a write that finds the database busy past its 60 s timeout: within flush's 300 s
URGENT_BYTES = 8 << 20  # a batch this big is written at once, and a put waits while the one before is written

_abandoned: list = []  # connections a forked child inherited: never used, never closed (the parent owns them)
_live: weakref.WeakSet = weakref.WeakSet()
_DB_ERRORS = (sqlite3.DatabaseError, DamagedFile)


def _inode(directory: str) -> int | None:
    """The inode of the folder's database file now (None: there is none), to tell it from one made in its place."""
    try:
        return os.stat(os.path.join(directory, FILE)).st_ino
    except FileNotFoundError:
        return None


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
        self._write_lock = threading.RLock()  # the writing connection; taken before _lock
        self.generation = 0  # one more each time the database is found damaged and a new one started
        self._ino: int | None = None  # the database file each connection opened (see _inode)
        self._writer_ino: int | None = None
        self._told_damage = self._failing = False
        self.failed: str | None = None
        self.evictions = self.written_bytes = 0
        self._denses: dict[int, DenseFile | None] = {}  # namespace -> its dense file, once the database says
        self.__dict__.setdefault("_ranges", {})  # namespace -> (name, lo, hi): the sample IDs a reader reads
        _live.add(self)

    def __getstate__(self) -> dict:
        return {"directory": self.directory, "limit": self.limit, "interval": self.interval, "_ranges": self._ranges}

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
            try:
                db, ino = opened_database(self.directory)
            except DamagedFile as exc:  # damaged where the opening looks (its tables): set aside, made anew
                self._recover(self.generation, exc.reason, exc.inode)
                db, ino = opened_database(self.directory)
            # (the file's inode as it was opened: one looked up after, a set-aside may have replaced)
            self._db, self._ino = db, ino
            if self.limit is not None:
                with transaction(self._db):
                    self._db.execute("INSERT OR REPLACE INTO meta VALUES ('disk_bytes', ?)", (str(self.limit),))
            else:  # the folder's bound, set by another process, holds for this one too
                found = self._db.execute("SELECT value FROM meta WHERE key = 'disk_bytes'").fetchone()
                self.limit = None if found is None else int(found[0])
        return self._db

    # -- a damaged database -----------------------------------------------------------------
    def _damaged(self, gen: int, exc: BaseException, inode: int | None) -> bool:
        """Whether ``exc``, raised by the database of generation ``gen`` (the file ``inode``), said it is
        damaged, as ``PRAGMA quick_check`` confirms; then it has been set aside and a new one started. False:
        ``exc`` is another failure, to raise."""
        if isinstance(exc, DamagedFile):
            why = exc.reason
        elif is_damage(exc):
            try:
                why = damage_of(self.directory)
            except sqlite3.Error:  # (busy past the timeout, say: the error stands as it was)
                return False
            if why is None and _inode(self.directory) == inode:  # whole after all: not damage
                return False
        else:
            return False
        self._recover(gen, why or str(exc), inode)
        return True

    def _recover(self, gen: int, why: str, inode: int | None) -> None:
        """Start generation ``gen + 1`` on a new database: the damaged one (the file ``inode``) set aside unless
        another process did already; this process's connections, dense files and unwritten entries dropped. A
        call for a generation already over does nothing. Called holding no lock but, in the writer, _write_lock."""
        with self._write_lock, self._lock:
            if gen != self.generation:
                return
            for db in (self._db, self._writer_db):
                if db is not None:
                    with contextlib.suppress(sqlite3.Error):
                        db.close()
            self._db = self._writer_db = None
            self._ino = self._writer_ino = None
            self._denses = {}
            with self._cond:  # with the pending entries: a batch is taken with the generation it was put in
                self.generation += 1
                self._pending, self._pending_bytes = {}, 0
                self._cond.notify_all()
            aside = set_aside_cache(self.directory, inode)
        if not self._told_damage:
            self._told_damage = True
            done = (f"it is set aside as {aside}, with its -wal, -shm and dense files, and a new one started" if aside
                    else "another process has set it aside; this one goes on with the new one")
            warnings.warn(f"the cache in {self.directory} was damaged ({why}): {done}; what it held is computed "
                          f"again (delete the set-aside files, or `python cli.py cache clear {self.directory}` "
                          "does)", RuntimeWarning, stacklevel=2)

    def _fail(self, exc: BaseException, what: str) -> None:
        """Stop this process's writes for good, with one warning (``what`` could not be done, ``exc`` why)."""
        with self._cond:
            if self.failed is not None or self._failing:
                return
            self._failing = True
        failed = f"{type(exc).__name__}: {exc}"
        cause = f"the disk is full: {free_space(self.directory)}" if is_full(exc) else failed
        # warned before ``failed`` is set: a flush that returns on it finds the warning given
        warnings.warn(f"the cache in {self.directory} could not {what} ({cause}); it writes no more in this process, "
                      "and what it did not write is computed again when next asked for", RuntimeWarning, stacklevel=2)
        with self._cond:
            self.failed = failed
            self._pending, self._pending_bytes = {}, 0
            self._cond.notify_all()

    # -- reads and writes ---------------------------------------------------------------------
    def space(self, name: str, about: dict, ids: tuple[int, int] | None = None) -> int:
        """The number of namespace ``name`` (made, described by ``about``, when new). ``ids``: the range
        ``lo <= id < hi`` of the sample IDs it will hold, which lets fixed-shape entries go to a dense file.
        It holds in the store's ``generation`` as it was before the call."""
        for attempt in range(3):
            gen = self.generation
            try:
                return self._space(name, about, ids)
            except _DB_ERRORS as exc:
                if attempt == 2 or not self._damaged(gen, exc, self._ino):
                    raise
        raise AssertionError("unreachable")

    def _space(self, name: str, about: dict, ids: tuple[int, int] | None) -> int:
        db = self.connection()
        with self._lock:
            found = db.execute("SELECT ns FROM spaces WHERE name = ?", (name,)).fetchone()
            if found is None:  # (asked first: a row not inserted still uses up a number)
                with transaction(db):
                    db.execute("INSERT OR IGNORE INTO spaces (name, about, created) VALUES (?, ?, ?)",
                               (name, json.dumps(about, sort_keys=True), time.time()))
                    found = db.execute("SELECT ns FROM spaces WHERE name = ?", (name,)).fetchone()
            ns = found[0]
        if ns >= MAX_SPACES:
            raise BadValue(f"the cache in {self.directory} has held {ns:,} namespaces, its most: clear it with "
                           f"`python cli.py cache clear {self.directory}`")
        if ids is not None and ids[1] > ids[0] >= 0 and ids[1] <= ID_MASK + 1:
            self._ranges[ns] = (name, *ids)
        return ns

    def _dense(self, ns: int, value: Any = None) -> DenseFile | None:
        """Namespace ``ns``'s dense file, as the database records it; with ``value`` (an entry about to be
        written) and no record yet, the layout of ``value`` is recorded first (the first process to do so
        decides for all)."""
        db = self.connection()
        with self._lock:
            row = db.execute("SELECT layout FROM dense WHERE ns = ?", (ns,)).fetchone()
            if row is None and value is not None:
                layout = layout_of(value) if ns in self._ranges else None
                name, lo, hi = self._ranges.get(ns, (None, 0, 0))
                size = layout and (hi - lo) * sum(np.dtype(d).itemsize * int(np.prod(shape)) for _, d, shape in
                                                  (layout if layout[0][0] != "tuple" else layout[1:]))
                if layout and (size > MAX_BYTES or hi - lo > MAX_ROWS):
                    layout = None
                spec = None if layout is None else json.dumps({"name": name, "lo": lo, "hi": hi, "layout": layout})
                with transaction(db):
                    db.execute("INSERT OR IGNORE INTO dense VALUES (?, ?)", (ns, spec))
                row = db.execute("SELECT layout FROM dense WHERE ns = ?", (ns,)).fetchone()
            dense = None
            if row is not None and row[0] is not None:
                spec = json.loads(row[0])
                try:
                    dense = DenseFile(self.directory, spec["name"], spec["lo"], spec["hi"], spec["layout"])
                except OSError as exc:  # no room for it (its space is reserved first): the job goes on uncached
                    if not is_full(exc):  # (too many open files, say: raised, not taken for a full disk)
                        raise
                    self._denses[ns] = None
                    self._fail(exc, f"make room for its dense file dense-{spec['name']}-*.npy")
                    return None
                if dense.remade:  # its rows are gone with the damaged file
                    with transaction(db):
                        db.execute("DELETE FROM entries WHERE ns = ? AND v IS NULL", (ns,))
                rows = db.execute("SELECT k, crc FROM entries WHERE ns = ? AND v IS NULL", (ns,))
                while present := rows.fetchmany(1 << 16):  # a bounded list at a time, into the file's arrays
                    known = np.array(present, dtype=np.int64)
                    dense.know(known[:, 0] & ID_MASK, known[:, 1])
            if row is not None:
                self._denses[ns] = dense
        return dense

    def mean_cost(self, ns: int) -> float:
        """Seconds one entry of namespace ``ns`` took to compute, on average over every process's record."""
        gen = self.generation
        try:
            db = self.connection()
            with self._lock:
                row = db.execute("SELECT computed, compute_s FROM spaces WHERE ns = ?", (ns,)).fetchone()
        except _DB_ERRORS as exc:
            if not self._damaged(gen, exc, self._ino):
                raise
            row = None
        if row is None or gen != self.generation:  # (a namespace of a database set aside)
            return 0.0
        computed, seconds = row
        return seconds / computed if computed else 0.0

    def get_many(self, ks: list[int], names: list[str | None],
                 gen: int | None = None) -> tuple[dict[int, Any], list[int]]:
        """({row key: value} of the keys stored, [row keys whose stored entry is corrupt]). ``gen``: the
        ``generation`` the keys' namespace is of (the current one when None); keys of an earlier one all miss."""
        self._forked()  # first: a forked child must not wait on a lock its parent's threads held
        gen = self.generation if gen is None else gen
        if gen != self.generation:
            return {}, []
        try:
            found, corrupt = self._get_many(ks, names)
        except _DB_ERRORS as exc:
            if not self._damaged(gen, exc, self._ino):
                raise
            return {}, []
        return (found, corrupt) if gen == self.generation else ({}, [])

    def get_dense(self, ns: int, ids: np.ndarray, gen: int | None = None) -> list | None:
        """The entries of sample IDs ``ids`` (an int64 array) of namespace ``ns``, in order, when every one is a
        row of its dense file that this process knows is there and that passes its checksum: read at once, with
        no query and no dict. None otherwise, and while this process has entries not yet committed:
        ``get_many`` then says what each one is. ``gen`` as for ``get_many``."""
        self._forked()
        gen = self.generation if gen is None else gen
        if gen != self.generation or self._pending or self._writing:
            return None
        try:
            dense = self._denses[ns] if ns in self._denses else self._dense(ns)
        except _DB_ERRORS as exc:
            if not self._damaged(gen, exc, self._ino):
                raise
            return None
        values = None if dense is None else dense.take(ids)
        return values if gen == self.generation else None

    def _get_many(self, ks: list[int], names: list[str | None]) -> tuple[dict[int, Any], list[int]]:
        found: dict[int, Any] = {}
        corrupt: list[int] = []
        want = dict(zip(ks, names))
        with self._cond:
            for source in (self._pending, self._writing):  # what this process computed and has not committed
                for k in [k for k in want if k in source]:
                    blob = source[k][1]  # decoded afresh, not the object handed out when it was computed
                    found[k] = source[k][-1] if blob is None else decode(blob)
                    del want[k]
        spaces = {k >> ID_BITS for k, name in want.items() if name is None}
        for ns in spaces:  # rows this process knows are in a dense file: no query
            dense = self._denses[ns] if ns in self._denses else self._dense(ns)
            if dense is not None:
                ids = dense.known([k & ID_MASK for k, name in want.items() if name is None and k >> ID_BITS == ns])
                self._take(dense, ns, ids, want, found, corrupt)
        if not want:
            return found, corrupt
        db = self.connection()
        asked, rows_of = list(want), {}
        with self._lock:
            for lo in range(0, len(asked), STEP):
                part = asked[lo:lo + STEP]
                for k, blob, crc, name in db.execute(SELECT, part + [part[-1]] * (STEP - len(part))).fetchall():
                    if name != want[k]:
                        continue  # another key with the same digest: a miss (its entry is overwritten)
                    if blob is None:
                        rows_of.setdefault(k >> ID_BITS, []).append((k & ID_MASK, crc))
                        continue
                    try:
                        check_crc(crc, "a cached entry", "it is computed again", blob)
                        found[k] = decode(blob)
                    except ValueError:  # damaged: its CRC-32 does not match, or it does not decode (CorruptEntry)
                        corrupt.append(k)
        for ns, rows in rows_of.items():  # rows another process wrote to a dense file since this one looked
            dense = self._denses.get(ns) or self._dense(ns)
            if dense is not None:
                dense.know(*zip(*rows))
                self._take(dense, ns, [i for i, _ in rows], want, found, corrupt)
        return found, corrupt

    def _take(self, dense: DenseFile, ns: int, ids: list[int], want: dict, found: dict, corrupt: list) -> None:
        """Read ``ids`` (rows ``dense`` knows are there) into ``found``; a row that fails its checksum is asked of
        the database again first, for another process may have rewritten it since (a function that is not
        bit-exact, run by both in the race window): only a row that fails the database's checksum is damaged."""
        base = ns << ID_BITS
        read, damaged = dense.read(ids)
        if damaged:
            now: dict[int, int] = {}
            db = self.connection()
            with self._lock:
                for lo in range(0, len(damaged), STEP):
                    part = [base | i for i in damaged[lo:lo + STEP]]
                    for k, v, crc, _ in db.execute(SELECT, part + [part[-1]] * (STEP - len(part))).fetchall():
                        if v is None:
                            now[k & ID_MASK] = crc
            again = [i for i in damaged if i in now]  # (the others are gone from the database: misses)
            damaged = []
            if again:
                dense.know(again, [now[i] for i in again])
                more, damaged = dense.read(again)
                read.update(more)
        for i, value in read.items():
            found[base | i] = value
            del want[base | i]
        for i in damaged:
            corrupt.append(base | i)
            want.pop(base | i, None)

    def put(self, k: int, ns: int, name: str | None, value: Any, cost: float, gen: int | None = None) -> None:
        """Write ``value`` under row key ``k`` soon: within ``interval`` seconds. Raises ``TypeError`` at once
        for a value the codec cannot store. ``gen``: the ``generation`` of ``ns`` (None: the current one); a
        value of an earlier one is dropped."""
        self._forked()
        gen = self.generation if gen is None else gen
        if self.failed is not None or gen != self.generation:
            return
        dense = None
        if name is None and self.limit is None:  # with a limit, only blobs: their space goes when they do
            try:
                dense = self._denses[ns] if ns in self._denses else self._dense(ns, value)
            except _DB_ERRORS as exc:
                if not self._damaged(gen, exc, self._ino):
                    raise
                return
            if dense is not None and not dense.fits(k & ID_MASK, value):
                dense = None
        blob = None if dense is not None else encode(value)
        size = dense.row_bytes if blob is None else len(blob)
        with self._cond:
            # the write under way failed while this one was encoded, or the database was set aside
            if self.failed is not None or gen != self.generation:
                return
            old = self._pending.get(k)
            self._pending[k] = (ns, blob, name, cost, dense, size, value)
            self._pending_bytes += size - (old[5] if old else 0)
            if len(self._pending) == 1:
                self._oldest = time.monotonic()
            if self._writer is None:
                _flush_at_exit()
                self._writer = threading.Thread(target=self._write_loop, name="readerkit-cache-writer", daemon=True)
                self._writer.start()
            if self._pending_bytes >= URGENT_BYTES:
                self._urgent = True
                self._cond.notify_all()
                # computing faster than the disk takes it: wait for the writer to take this batch, so that
                # at most two batches (one waiting, one being written) are held
                while self._pending_bytes >= URGENT_BYTES and self._writing and self.failed is None:
                    self._cond.wait(1.0)

    def flush(self, timeout: float = 300.0) -> None:
        """Wait until everything put so far is committed (or the writes have failed, as warned)."""
        self._forked()
        deadline = time.monotonic() + timeout
        with self._cond:
            if self._pending:
                self._urgent = True
                self._cond.notify_all()
            while (self._pending or self._writing) and self.failed is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimedOut(f"the cache in {self.directory} took over {timeout:.0f} s to write "
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
                    else:
                        self._writer = None  # nothing waits: a later put starts another thread
                        self._urgent = False
                        return
                batch, self._pending, self._pending_bytes, self._urgent = self._pending, {}, 0, False
                self._writing, gen = batch, self.generation
                self._cond.notify_all()  # a put waiting for room goes on
            try:
                for attempt in range(RETRIES):
                    try:
                        self._write(batch, gen)
                        break
                    except sqlite3.OperationalError as exc:  # busy past the timeout (a long clear, say): once
                        if attempt == RETRIES - 1 or not ("locked" in str(exc) or "busy" in str(exc)):  # more
                            raise
                        time.sleep(2 ** attempt)
            except Exception as exc:  # a full disk, a lock held for minutes: the job goes on, uncached
                if not self._damaged(gen, exc, self._writer_ino):
                    self._fail(exc, f"write {len(batch):,} entr{'y' if len(batch) == 1 else 'ies'}")
            with self._cond:
                self._writing = {}
                if self.failed is not None:
                    self._pending, self._pending_bytes = {}, 0
                self._cond.notify_all()

    def _write(self, batch: dict[int, tuple], gen: int) -> None:
        with self._write_lock:
            if gen != self.generation:  # entries of a database set aside: dropped
                return
            if self._writer_db is None:
                try:
                    self._writer_db, self._writer_ino = opened_database(self.directory)
                except DamagedFile as exc:
                    self._recover(gen, exc.reason, exc.inode)
                    return
            elif _inode(self.directory) != self._writer_ino:  # set aside by another process, a new one in place
                self._recover(gen, "another process found it so", self._writer_ino)  # (not set aside again)
                return
            self._write_batch(batch)

    def _write_batch(self, batch: dict[int, tuple]) -> None:
        db, now = self._writer_db, time.time()
        rows, dense_rows, costs = [], [], {}
        for k, (ns, blob, name, cost, dense, size, value) in batch.items():
            if blob is None:  # the row is written before the transaction that says it is there
                crc = dense.write(k & ID_MASK, value)
                dense_rows.append((dense, k & ID_MASK, crc))
                rows.append((k, ns, None, crc, size, now, None))
            else:
                rows.append((k, ns, blob, blob_crc(blob), size, now, name))
            c = costs.setdefault(ns, [0, 0.0])
            c[0] += 1
            c[1] += cost
        with transaction(db):
            db.executemany(UPSERT, rows)
            db.executemany("UPDATE spaces SET computed = computed + ?, compute_s = compute_s + ? WHERE ns = ?",
                           [(n, s, ns) for ns, (n, s) in costs.items()])
            gone = 0 if self.limit is None else evict(db, self.limit)
        if gone:
            self.evictions += gone
            with contextlib.suppress(sqlite3.OperationalError):  # (busy: the next eviction gives them back)
                release(db)
        for dense, i, crc in dense_rows:
            dense.know([i], [crc])
        self.written_bytes += sum(r[4] for r in rows)

    def close(self) -> None:
        """Commit what is waiting and close this process's connections."""
        if self._pid != os.getpid():
            return
        self.flush()
        for db in (self._db, self._writer_db):
            if db is not None:
                db.close()
        self._db = self._writer_db = None


_exit_hooks: set[int] = set()  # the processes that have registered _flush_all to run as they end


def _flush_at_exit() -> None:
    """Have this process commit what its stores hold as it ends: at interpreter exit, and, in a worker process
    (which ends with os._exit, skipping atexit), through multiprocessing's own finalizers."""
    if os.getpid() not in _exit_hooks:
        _exit_hooks.add(os.getpid())
        multiprocessing.util.Finalize(None, _flush_all, exitpriority=10)


@atexit.register
def _flush_all() -> None:
    """At exit, commit what every store of this process has not (a forked child's stores hold nothing)."""
    for store in list(_live):
        with contextlib.suppress(Exception):
            store.flush(timeout=30)
