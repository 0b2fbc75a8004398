"""sqlite3 files shared by processes: opened with their checks, in WAL mode, written in transactions, blobs checked.

The cache's disk tier (``readers.caching.database``) and the pipeline store
(``readers.continual.schema``) are sqlite3 files that several processes open
at once; both are opened and used the same way, here:

``connect``
    opens a file of a ``FileFormat``. The file's marks (``application_id``,
    ``user_version`` and the tables it holds) are read in one moment and
    judged by the format before anything changes, so another program's file
    is refused as it was. Then WAL mode (readers never wait for the writer;
    the switch is tried again while other processes hold the new file),
    ``synchronous = NORMAL`` (a process killed at any point loses no
    committed transaction; a power cut may lose the last ones, never half of
    one), a busy timeout of a minute, and, in a new file, the tables and
    marks in one transaction of ``IF NOT EXISTS`` statements, so that
    processes making the file at once agree.
``transaction``
    ``BEGIN IMMEDIATE`` to write (the write lock is taken at the start, so a
    busy file waits there, not at the commit), a plain ``BEGIN`` to read
    several rows of one moment; rolled back on any error, also one that
    arrives at the commit.
``Database``
    one connection shared by a process's threads, a transaction at a time.
    Code over a ``Database`` asks it for transactions and never opens or
    begins anything itself: it is the seam where a second backend takes
    sqlite's place (``readers.storage.postgres.PostgresDatabase``); ``blob``
    and ``now`` say what differs.
``blob_crc``, ``check_crc``, ``damaged``
    the CRC-32 kept beside each blob and checked on every read, with an error
    that names what is damaged and what to do.
``is_damage``, ``check_pages``, ``DamagedFile``, ``set_aside``
    a file whose pages or tables were damaged outside sqlite (``database disk
    image is malformed``, a table gone): told apart from other failures,
    described by ``PRAGMA quick_check``, refused with an error that says so,
    and renamed out of the way with its ``-wal`` and ``-shm`` files.
``is_full``
    a full disk, as sqlite or the operating system says it.
"""
from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from typing import NamedTuple

from readers.errors import BadValue, FileError

__all__ = ["BUSY_S", "Database", "DamagedFile", "FileFormat", "Marks", "blob_crc", "check_crc", "check_pages", "connect",
           "damaged", "is_damage", "is_full", "read_marks", "set_aside", "transaction"]

BUSY_S = 60  # seconds a statement waits for another process's lock before it fails
_CORRUPT, _FULL = 11, 13  # sqlite's SQLITE_CORRUPT and SQLITE_FULL


class Marks(NamedTuple):
    """What a file says it is: its ``PRAGMA application_id``, its ``PRAGMA user_version`` and its tables.

    >>> Marks(0, 0, frozenset()).empty, Marks(0, 1, frozenset({"meta"})).empty
    (True, False)
    """

    application_id: int
    version: int
    tables: frozenset[str]

    @property
    def empty(self) -> bool:
        """Whether nothing is written yet: a new file, or one whose maker has not committed its tables."""
        return not (self.application_id or self.version or self.tables)


class FileFormat:
    """A kind of sqlite file: the tables and marks of a new one, and how a file that is not one is refused.

    A format sets ``tables`` (``CREATE ... IF NOT EXISTS`` statements),
    ``schema`` (the ``user_version`` of a file it makes), ``application_id``
    (0: none) and pragmas, and says in ``check`` which marks it refuses, in
    ``no_wal`` and ``failed`` what to raise when sqlite fails it.

    >>> class Notes(FileFormat):
    ...     tables = "CREATE TABLE IF NOT EXISTS notes (text TEXT);"
    ...     def check(self, path, marks, create):
    ...         if marks.tables - {"notes"}:
    ...             raise ValueError(f"{path} holds other tables")
    >>> Notes().made(Marks(0, 1, frozenset({"notes"})))
    True
    """

    tables: str = ""
    schema: int = 1
    application_id: int = 0
    #: Set before the first table only, as they decide how the file is laid out (``auto_vacuum``).
    first_pragmas: tuple[str, ...] = ()
    #: Set at every opening, after WAL mode and ``synchronous = NORMAL`` (they hold for the connection).
    pragmas: tuple[str, ...] = ()

    def made(self, marks: Marks) -> bool:
        """Whether a file with ``marks`` has this format's tables (``check`` has accepted it).

        >>> FileFormat().made(Marks(0, 0, frozenset()))
        False
        """
        return marks.version == self.schema and (not self.application_id or marks.application_id == self.application_id)

    def check(self, path: str, marks: Marks, create: bool) -> None:
        """Raise the format's own error when the file at ``path`` is not one of it (or, ``create`` False,
        not yet made); return when ``connect`` may go on (and make the tables, unless ``made``)."""
        raise NotImplementedError(f"{type(self).__name__} must say which files it refuses (check)")

    def no_wal(self, path: str) -> Exception:
        """The error for a file that cannot be put in WAL mode (as on some network file systems).

        >>> FileFormat().no_wal("/d/x.db")
        FileError('/d/x.db cannot be put in WAL mode (a network file system?): give a path on a local disk')
        """
        return FileError(f"{path} cannot be put in WAL mode (a network file system?): give a path on a local disk")

    def failed(self, path: str, exc: sqlite3.DatabaseError) -> BaseException | None:
        """The error to raise for sqlite's ``exc`` while the file at ``path`` is opened; None raises ``exc``.

        >>> FileFormat().failed("/d/x.db", sqlite3.DatabaseError("file is not a database")) is None
        True
        """
        return None


def read_marks(db: sqlite3.Connection, wait: float = 0.0) -> Marks:
    """The file's marks, read in one moment (another process may be making it). An empty file is read again for
    up to ``wait`` seconds: a process that has just made it writes its tables within milliseconds.

    >>> read_marks(sqlite3.connect(":memory:", isolation_level=None))
    Marks(application_id=0, version=0, tables=frozenset())
    """
    deadline = time.monotonic() + wait
    while True:
        with transaction(db, write=False):
            app, version = (db.execute(f"PRAGMA {p}").fetchone()[0] for p in ("application_id", "user_version"))
            tables = frozenset(name for name, in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
        marks = Marks(app, version, tables)
        if not marks.empty or wait <= 0 or time.monotonic() > deadline:
            return marks
        time.sleep(0.02)


def _wal(db: sqlite3.Connection, path: str, kind: FileFormat) -> None:
    """WAL mode; the change waits for no busy timeout, so it is tried again while others opening the file hold it."""
    deadline = time.monotonic() + BUSY_S
    while db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        try:
            if db.execute("PRAGMA journal_mode = WAL").fetchone()[0] != "wal":
                raise kind.no_wal(path)
        except sqlite3.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def connect(path: str, kind: FileFormat, create: bool = True, wait: float = 0.0) -> sqlite3.Connection:
    """A connection to the sqlite file at ``path``, of format ``kind``, in WAL mode (see the module).

    The file's marks are judged (``kind.check``) before anything in it
    changes; with ``create``, a file without the tables gets them. Statements
    run in autocommit unless a transaction is begun. ``wait``: seconds an
    empty file is watched for its maker's tables before it is judged.

    >>> import os, tempfile
    >>> class Notes(FileFormat):
    ...     tables = "CREATE TABLE IF NOT EXISTS notes (text TEXT);"
    ...     def check(self, path, marks, create):
    ...         if marks.tables - {"notes"} or not (create or marks.tables):
    ...             raise ValueError(f"{path} is not a notes file")
    >>> folder = tempfile.TemporaryDirectory()
    >>> db = connect(os.path.join(folder.name, "notes.db"), Notes())
    >>> [db.execute(f"PRAGMA {p}").fetchone()[0] for p in ("journal_mode", "synchronous", "user_version")]
    ['wal', 1, 1]
    >>> db.close()
    >>> connect(os.path.join(folder.name, "other.db"), Notes(), create=False)
    Traceback (most recent call last):
    ...
    ValueError: .../other.db is not a notes file
    """
    db = None
    try:
        db = sqlite3.connect(path, timeout=BUSY_S, isolation_level=None, check_same_thread=False)
        db.execute(f"PRAGMA busy_timeout = {BUSY_S * 1000}")
        marks = read_marks(db, 0.0 if create else wait)
        kind.check(path, marks, create)
        made = kind.made(marks)
        if not (made or marks.tables):
            for pragma in kind.first_pragmas:
                db.execute(f"PRAGMA {pragma}")
        _wal(db, path, kind)
        db.execute("PRAGMA synchronous = NORMAL")
        for pragma in kind.pragmas:
            db.execute(f"PRAGMA {pragma}")
        if not made:  # every statement is "if not exists": processes that make the file at once agree
            marks_sql = f"PRAGMA user_version = {kind.schema};" + (
                f"PRAGMA application_id = {kind.application_id};" if kind.application_id else "")
            db.executescript(f"BEGIN IMMEDIATE;{kind.tables}{marks_sql} COMMIT;")
    except BaseException as exc:
        if db is not None:
            db.close()
        error = kind.failed(path, exc) if isinstance(exc, sqlite3.DatabaseError) else None
        if error is not None:
            raise error from None
        raise
    return db


@contextlib.contextmanager
def transaction(db: sqlite3.Connection, write: bool = True) -> Iterator[sqlite3.Connection]:
    """One transaction on ``db``: ``BEGIN IMMEDIATE`` to write, ``BEGIN`` to read one moment; rolled back on an error.

    >>> db = sqlite3.connect(":memory:", isolation_level=None)
    >>> _ = db.execute("CREATE TABLE t (x)")
    >>> with transaction(db):
    ...     _ = db.execute("INSERT INTO t VALUES (1)")
    >>> try:
    ...     with transaction(db):
    ...         _ = db.execute("INSERT INTO t VALUES (2)")
    ...         raise RuntimeError("midway")
    ... except RuntimeError:
    ...     pass
    >>> db.execute("SELECT x FROM t").fetchall(), db.in_transaction
    ([(1,)], False)
    """
    try:  # BEGIN and COMMIT inside: a signal between them and the body still leaves no transaction open
        db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        yield db
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:  # (sqlite has rolled back by itself after some errors: a full disk)
            with contextlib.suppress(sqlite3.OperationalError):  # "cannot rollback - no transaction is active":
                db.execute("ROLLBACK")  # the error that ended it is the one to tell
        raise


class Database:
    """One connection shared by a process's threads, a transaction at a time; ``close()`` may be called again.

    ``closed`` is the message of the ``ValueError`` a transaction raises once
    the database is closed (say how to open it again); ``damaged``, when
    given, makes the error raised for sqlite's own that says the file is
    damaged (``is_damage``) from what sqlite said.

    >>> database = Database(sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False),
    ...                     "the notes are closed: open them again")
    >>> with database.transaction(write=True) as db:
    ...     _ = db.execute("CREATE TABLE notes (text TEXT)")
    >>> with database.transaction(write=False) as db:
    ...     db.execute("SELECT count(*) FROM notes").fetchone()
    (0,)
    >>> database.blob, database.now(None) > 0
    ('BLOB', True)
    >>> database.close(); database.close()
    >>> database.transaction(write=False).__enter__()
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: the notes are closed: open them again
    """

    #: The binary type's name, for a ``CAST`` (``readers.storage.postgres``'s is ``BYTEA``).
    blob = "BLOB"

    def __init__(self, connection: sqlite3.Connection, closed: str,
                 damaged: Callable[[str], Exception] | None = None):
        self._connection: sqlite3.Connection | None = connection
        self._closed, self._damaged = closed, damaged
        self._lock = threading.RLock()

    @contextlib.contextmanager
    def transaction(self, write: bool) -> Iterator[sqlite3.Connection]:
        """One ``transaction`` in this thread's turn on the connection (see the class)."""
        with self._lock:
            if self._connection is None:
                raise BadValue(self._closed)
            try:
                with transaction(self._connection, write) as db:
                    yield db
            except sqlite3.DatabaseError as exc:
                if self._damaged is None or not is_damage(exc):
                    raise
                raise self._damaged(str(exc)) from None

    def now(self, db: sqlite3.Connection | None) -> float:
        """The store's clock, in seconds since the epoch: this host's (a sqlite file is shared by one host)."""
        return time.time()

    def ids_taken(self, db: sqlite3.Connection, table: str, column: str) -> None:
        """After rows were inserted with their own ids: new rows get higher ones (sqlite's AUTOINCREMENT does so
        by itself; ``PostgresDatabase``'s identity columns are told)."""

    def close(self) -> None:
        """Close the connection, once a transaction under way has ended; a second call does nothing."""
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None


def blob_crc(*parts: bytes | None) -> int:
    """The CRC-32 kept beside a blob: of ``parts`` one after another, None counting as no bytes.

    >>> blob_crc(b"ab", None, b"c") == zlib.crc32(b"abc")
    True
    """
    crc = 0
    for part in parts:
        crc = zlib.crc32(part or b"", crc)
    return crc


def damaged(what: str, remedy: str, why: str = "its CRC-32 does not match") -> ValueError:
    """The error for a stored value changed outside readerkit: ``what`` it is, ``why`` it is refused, the ``remedy``.

    >>> damaged("trigger 0 of pipeline 1", "write the set again")
    BadValue('trigger 0 of pipeline 1 is damaged (its CRC-32 does not match): the file was changed outside readerkit; write the set again')
    """
    return BadValue(f"{what} is damaged ({why}): the file was changed outside readerkit; {remedy}")


def check_crc(crc: int, what: str, remedy: str, *parts: bytes | None) -> None:
    """Raise ``damaged(what, remedy)`` unless ``parts`` have the CRC-32 ``crc`` kept beside them.

    >>> check_crc(blob_crc(b"12345678"), "trigger 0", "write the set again", b"12345678")
    >>> check_crc(0, "trigger 0", "write the set again", b"12345678")
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: trigger 0 is damaged (its CRC-32 does not match): the file was changed outside readerkit; write the set again
    """
    if blob_crc(*parts) != crc:
        raise damaged(what, remedy)


class DamagedFile(BadValue):
    """A sqlite file whose pages or tables were damaged outside sqlite: ``path``, ``reason`` (what is wrong).

    >>> str(DamagedFile("/d/x.db", "its table trainings is missing", "restore it from a backup"))
    '/d/x.db is damaged (its table trainings is missing): restore it from a backup'
    """

    def __init__(self, path: str, reason: str, remedy: str):
        self.path, self.reason, self.remedy = path, reason, remedy
        super().__init__(f"{path} is damaged ({reason}): {remedy}")

    def __reduce__(self) -> tuple:  # (to a consumer from a worker process, as itself)
        return type(self), (self.path, self.reason, self.remedy)


def is_damage(exc: BaseException) -> bool:
    """Whether sqlite's ``exc`` says that the file is damaged: its pages (``database disk image is malformed``),
    or one of its tables gone.

    >>> is_damage(sqlite3.DatabaseError("database disk image is malformed"))
    True
    >>> is_damage(sqlite3.OperationalError("no such table: entries")), is_damage(sqlite3.OperationalError("locked"))
    (True, False)
    """
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    text = str(exc)
    return getattr(exc, "sqlite_errorcode", None) == _CORRUPT or "malformed" in text or text.startswith("no such table")


def is_full(exc: BaseException) -> bool:
    """Whether ``exc`` says that the disk is full: an ``OSError`` ``ENOSPC`` (or ``EDQUOT``, the user's quota), or
    sqlite's ``SQLITE_FULL``.

    >>> is_full(OSError(errno.ENOSPC, "No space left on device")), is_full(sqlite3.OperationalError("database or "
    ...                                                                     "disk is full"))
    (True, True)
    >>> is_full(OSError("disk full"))
    False
    """
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return isinstance(exc, sqlite3.DatabaseError) and (getattr(exc, "sqlite_errorcode", None) == _FULL
                                                       or "disk is full" in str(exc))


def check_pages(db: sqlite3.Connection) -> str | None:
    """What ``PRAGMA quick_check`` finds wrong in ``db``'s pages (its first finding), or None when they read whole.
    It reads every page: milliseconds for a few MiB, about a second a GiB.

    >>> check_pages(sqlite3.connect(":memory:")) is None
    True
    """
    try:
        found = db.execute("PRAGMA quick_check(1)").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        if not is_damage(exc):
            raise
        return str(exc)
    return None if found == "ok" else " ".join(found.replace("*** in database main ***", "").split())


def set_aside(path: str, *more: str) -> str:
    """Rename the sqlite file at ``path`` out of the way, to ``path.damaged-<UTC time>-<pid>``, with its ``-wal``
    and ``-shm`` files (named after it, so that it opens with them) and the files ``more`` (each with the same
    suffix); return its new name. A file already gone is passed over. The log and index go first, so that the
    database is never found beside a log that is not its own. A connection still open on the renamed file goes
    on with it; when it closes, sqlite sees that its file has moved and neither checkpoints nor deletes a log
    by the old name (which may by then be a new database's).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     for name in ("x.db", "x.db-wal"):
    ...         open(os.path.join(d, name), "w").close()
    ...     aside = set_aside(os.path.join(d, "x.db"))
    ...     left = sorted(os.listdir(d))
    >>> os.path.basename(aside) == left[0], left
    (True, ['x.db.damaged-...', 'x.db.damaged-...-wal'])
    """
    aside = f"{path}.damaged-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}"
    moves = [(path + "-wal", aside + "-wal"), (path + "-shm", aside + "-shm"),
             *[(name, name + aside[len(path):]) for name in more], (path, aside)]
    for name, new in moves:
        with contextlib.suppress(FileNotFoundError):
            os.replace(name, new)
    return aside
