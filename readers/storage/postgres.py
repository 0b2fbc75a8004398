"""A PostgreSQL database that machines share, behind the same seam as ``readers.storage.sqlite``'s ``Database``.

sqlite's locks do not hold across machines (a file on a network folder is
unsafe), so the store that several hosts share is a PostgreSQL database,
reached through psycopg 3 (``pip install 'readerkit[postgres]'``). Code over
a ``Database`` runs the same SQL on both: ``PostgresDatabase.transaction``
gives a connection whose ``execute`` takes sqlite's ``?`` placeholders, and
the two differ otherwise only in what a ``Database`` says itself:

``blob``
    the binary type's name, for a ``CAST`` (``BLOB``, ``BYTEA``);
``now(db)``
    the clock of the store: this host's for a sqlite file, the server's
    ``clock_timestamp()`` for PostgreSQL, so the hosts' clocks never matter.

Transactions are sqlite's: a write transaction takes
``pg_advisory_xact_lock(key)`` as its first statement, so writes of every
process and host serialise as under sqlite's ``BEGIN IMMEDIATE`` (a claim, a
trigger's checks and insert are one step); a read transaction is
``REPEATABLE READ READ ONLY``: its rows are of one moment.

The password comes from where libpq finds it (``PGPASSWORD``, ``~/.pgpass``,
the URL) and is never shown: ``redact`` replaces it with ``***`` in every
address a repr, a message or a log line names; psycopg's own errors are
re-raised as ``StoreUnreachable`` or ``StoreError`` with the redacted address.

A lost connection (the server restarted, a network cut): a transaction
whose first statement meets it reconnects (for up to ``RECONNECT_S``
seconds) and begins again, since nothing of it has run; one that loses it
midway fails with ``StoreUnreachable``, nothing of it committed (the server
rolls back a transaction whose client is gone) unless the loss came at its
``COMMIT``, which the message says, and the next transaction reconnects.
"""
from __future__ import annotations

import contextlib
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

from readers.errors import BadValue, FileError

__all__ = ["POSTGRES", "RECONNECT_S", "PostgresDatabase", "StoreError", "StoreUnreachable", "has_password",
           "is_postgres", "psycopg", "redact"]

POSTGRES = "pip install 'readerkit[postgres]' (psycopg 3)"
#: Seconds a lost connection is tried again before the transaction that needs it fails.
RECONNECT_S = 30.0
_SCHEMES = ("postgresql://", "postgres://")


class StoreError(FileError):
    """A PostgreSQL store's failure, its message naming the redacted address and what to do."""


class StoreUnreachable(StoreError):
    """A PostgreSQL server that cannot be reached, or a connection lost midway through a transaction."""


def is_postgres(db: Any) -> bool:
    """Whether ``db`` is a PostgreSQL URL (``postgresql://`` or ``postgres://``) rather than a sqlite file's path.

    >>> is_postgres("postgresql://me@127.0.0.1:5432/runs"), is_postgres("postgres://h/db"), is_postgres("runs.db")
    (True, True, False)
    """
    return isinstance(db, str) and db.lower().startswith(_SCHEMES)


def has_password(url: str) -> bool:
    """Whether the URL itself holds a password (in ``user:password@`` or a ``password=`` parameter).

    >>> has_password("postgresql://me:s3cret@h/db"), has_password("postgresql://me@h/db?password=x")
    (True, True)
    >>> has_password("postgresql://me@h:5432/db")
    False
    """
    parts = urllib.parse.urlsplit(url)
    return parts.password is not None or "password" in urllib.parse.parse_qs(parts.query)


def redact(url: str) -> str:
    """``url`` as it may be shown: its password, if any, replaced by ``***`` (a sqlite file's path is shown as it is).

    >>> redact("postgresql://me:s3cret@127.0.0.1:5432/runs?password=x&sslmode=require")
    'postgresql://me:***@127.0.0.1:5432/runs?password=***&sslmode=require'
    >>> redact("postgresql://me@127.0.0.1:5432/runs"), redact("runs?.db")  # (a file's path: as it is)
    ('postgresql://me@127.0.0.1:5432/runs', 'runs?.db')
    """
    if not is_postgres(url):
        return url
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}:***@{host}"
    query = re.sub(r"(^|&)password=[^&]*", r"\1password=***", parts.query)
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _scrub(text: str, url: str) -> str:
    """``text`` (a server's or libpq's message) without the URL's password, should it quote it."""
    parts = urllib.parse.urlsplit(url)
    secrets = [parts.password] + urllib.parse.parse_qs(parts.query).get("password", [])
    for secret in filter(None, secrets):
        text = text.replace(secret, "***").replace(urllib.parse.unquote(secret), "***")
    return " ".join(text.split())


def psycopg() -> Any:
    """The psycopg (3) module, or an ``ImportError`` that says how to install it.

    >>> psycopg().__name__
    'psycopg'
    """
    try:
        import psycopg as module
    except ImportError:
        raise ImportError(f"a PostgreSQL pipeline store needs psycopg 3: {POSTGRES}") from None
    return module


class _Connection:
    """A psycopg connection taking sqlite's ``?`` placeholders (the store's SQL has no ``?`` nor ``%`` in text); rows
    come back in the binary format (a model's bytea read 3x as fast as in hex text)."""

    def __init__(self, raw: Any):
        self.raw = raw

    def execute(self, sql: str, params: tuple | list = ()) -> Any:
        return self.raw.execute(sql.replace("?", "%s"), params, binary=True)


class PostgresDatabase:
    """One connection to a PostgreSQL database shared by a process's threads, a transaction at a time (the
    interface of ``readers.storage.sqlite.Database``); ``close()`` may be called again.

    ``url`` is the address (its password, if any, used but never shown);
    ``setup(db)`` runs in the first write transaction (the tables, the
    marks' check); ``lock_key`` is the advisory lock every write takes;
    ``closed`` the message once closed; ``damaged`` makes the error for a
    table gone. See the module for transactions and lost connections.

    >>> PostgresDatabase("postgresql://me:pw@127.0.0.1:1/none", None, 1, "closed")
    Traceback (most recent call last):
    ...
    readers.storage.postgres.StoreUnreachable: cannot reach the PostgreSQL store postgresql://127.0.0.1:1/none (...): start the server, or check the address (host, port, database, user) and the password (PGPASSWORD, ~/.pgpass or the URL)
    """

    blob = "BYTEA"

    def __init__(self, url: str, setup: Callable[[Any], None] | None, lock_key: int, closed: str,
                 damaged: Callable[[str], Exception] | None = None):
        self.url, self.shown, self.lock_key = url, redact(url), lock_key
        self._closed, self._damaged = closed, damaged
        self._lock = threading.RLock()
        self._psycopg = psycopg()
        self._connection: Any = self._connect()
        if setup is not None:
            try:
                with self.transaction(write=True) as db:
                    setup(db)
            except BaseException:
                self.close()
                raise

    def _connect(self) -> Any:
        try:
            return self._psycopg.connect(self.url, autocommit=True, connect_timeout=10,
                                         application_name="readerkit")
        except self._psycopg.Error as exc:
            raise StoreUnreachable(
                f"cannot reach the PostgreSQL store {self.shown} ({_scrub(str(exc), self.url)}): start the server, or "
                "check the address (host, port, database, user) and the password (PGPASSWORD, ~/.pgpass or the "
                "URL)") from None

    def _reconnect(self) -> Any:
        """A new connection for a lost one, tried again for up to ``RECONNECT_S`` s (a server restarting)."""
        with contextlib.suppress(Exception):
            self._connection.close()
        deadline = time.monotonic() + RECONNECT_S
        while True:
            try:
                self._connection = self._connect()
                return self._connection
            except StoreUnreachable:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def _begin(self, write: bool) -> Any:
        """BEGIN (and the write lock), on a new connection if the old one is found lost here: nothing has run."""
        for attempt in (0, 1):
            raw = self._connection if not self._connection.closed else self._reconnect()
            try:
                if write:
                    raw.execute("BEGIN")
                    raw.execute("SELECT pg_advisory_xact_lock(%s)", (self.lock_key,))
                else:
                    raw.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                return raw
            except self._psycopg.OperationalError as exc:
                if not raw.broken or attempt:
                    raise self._failed(exc, raw, False) from None
                self._reconnect()
        raise AssertionError("unreachable")  # (the loop returns or raises)

    def _failed(self, exc: BaseException, raw: Any, committing: bool) -> BaseException:
        """The error to raise for psycopg's ``exc`` in a transaction on ``raw``."""
        errors, message = self._psycopg.errors, _scrub(str(exc), self.url)
        if isinstance(exc, errors.UndefinedTable) and self._damaged is not None:
            return self._damaged(message)
        if raw.broken or isinstance(exc, self._psycopg.OperationalError) and raw.closed:
            fate = "it may or may not have been committed (the connection was lost at its COMMIT)" if committing else \
                "nothing of it was committed"
            return StoreUnreachable(f"the connection to the PostgreSQL store {self.shown} was lost during a "
                                    f"transaction ({message}); {fate}: the next one reconnects; a stopped pipeline "
                                    "goes on with --resume (run_pipeline(resume=...))")
        return StoreError(f"the PostgreSQL store {self.shown} refused a statement ({type(exc).__name__}: {message})")

    @contextlib.contextmanager
    def transaction(self, write: bool) -> Iterator[_Connection]:
        """One transaction in this thread's turn on the connection: written under the store's advisory lock, or
        read in one snapshot; rolled back on an error (see the module)."""
        with self._lock:
            if self._connection is None:
                raise BadValue(self._closed)
            raw = self._begin(write)
            committing = False
            try:
                yield _Connection(raw)
                committing = True
                raw.execute("COMMIT")
            except BaseException as exc:
                if not raw.broken:
                    with contextlib.suppress(self._psycopg.Error):
                        raw.execute("ROLLBACK")
                if isinstance(exc, self._psycopg.Error):
                    raise self._failed(exc, raw, committing) from None
                raise

    def now(self, db: _Connection) -> float:
        """The server's clock, in seconds since the epoch (every host's heartbeats and ages are on it)."""
        return db.execute("SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)").fetchone()[0]

    def ids_taken(self, db: _Connection, table: str, column: str) -> None:
        """After rows were inserted with their own ids: the identity column goes on after the highest."""
        db.execute(f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), GREATEST(1, (SELECT COALESCE("
                   f"MAX({column}), 0) FROM {table})), (SELECT COUNT(*) > 0 FROM {table}))")

    def close(self) -> None:
        """Close the connection, once a transaction under way has ended; a second call does nothing."""
        with self._lock:
            if self._connection is not None:
                with contextlib.suppress(Exception):
                    self._connection.close()
                self._connection = None
