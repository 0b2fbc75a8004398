"""readers.storage.postgres: URLs and their passwords, psycopg missing, an unreachable server, transactions under
the store's lock, and a lost connection (a server restart) between transactions and inside one."""
import builtins

import pytest

from readers.storage.postgres import (
    PostgresDatabase,
    StoreError,
    StoreUnreachable,
    has_password,
    is_postgres,
    redact,
)


@pytest.mark.parametrize("url, shown", [
    ("postgresql://me:s3cret@h:5432/db", "postgresql://me:***@h:5432/db"),
    ("postgres://me:p%40ss@h/db?sslmode=require", "postgres://me:***@h/db?sslmode=require"),
    ("postgresql://me@h/db?password=s3cret&sslmode=require", "postgresql://me@h/db?password=***&sslmode=require"),
    ("postgresql://me@h:5432/db", "postgresql://me@h:5432/db"),
    ("runs.db", "runs.db"),
])
def test_redact_replaces_the_password_wherever_the_url_has_one(url, shown):
    assert redact(url) == shown and has_password(url) == (shown != url) and is_postgres(url) != (url == "runs.db")


def database(url: str) -> PostgresDatabase:
    def setup(db):
        db.execute("CREATE TABLE IF NOT EXISTS t (x BIGINT, b BYTEA)")
    return PostgresDatabase(url, setup, 7, "the notes are closed")


def test_a_server_that_cannot_be_reached_says_so():
    with pytest.raises(StoreUnreachable, match=r"^cannot reach the PostgreSQL store postgresql://127.0.0.1:1/runs "
                                               r"\(.*Connection refused.*\): start the server"):
        database("postgresql://me:pw@127.0.0.1:1/runs")


def test_psycopg_missing_is_named_with_its_pip_install(monkeypatch):
    real = builtins.__import__

    def no_psycopg(name, *args, **kwargs):
        if name == "psycopg":
            raise ImportError("No module named 'psycopg'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_psycopg)
    with pytest.raises(ImportError, match=r"^a PostgreSQL pipeline store needs psycopg 3: pip install "
                                          r"'readerkit\[postgres\]'"):
        database("postgresql://me@127.0.0.1:1/runs")


def test_a_restart_between_transactions_is_reconnected_and_one_inside_a_transaction_fails_saying_so(postgres_server):
    db = database(postgres_server.database())
    try:
        with db.transaction(write=True) as c:
            c.execute("INSERT INTO t VALUES (?, ?)", (2**40, b"\x00\x01"))
        postgres_server.restart()
        with db.transaction(write=False) as c:  # its BEGIN finds the connection gone: reconnected, nothing lost
            assert c.execute("SELECT x, b FROM t").fetchall() == [(2**40, b"\x00\x01")]
        with pytest.raises(StoreUnreachable, match=r"^the connection to the PostgreSQL store postgresql://127.0.0.1:"
                                                   r"\d+/\w+ was lost during a transaction \(.*\); nothing of it was "
                                                   r"committed: the next one reconnects"):
            with db.transaction(write=True) as c:
                c.execute("INSERT INTO t VALUES (?, ?)", (3, None))
                postgres_server.restart()
                c.execute("INSERT INTO t VALUES (?, ?)", (4, None))
        with db.transaction(write=False) as c:
            assert c.execute("SELECT x FROM t ORDER BY x").fetchall() == [(2**40,)]
    finally:
        db.close()
        db.close()
    with pytest.raises(ValueError, match="the notes are closed"):
        db.transaction(write=False).__enter__()


def test_a_refused_statement_names_the_store_and_rolls_back(postgres_server):
    db = database(postgres_server.database())
    try:
        with pytest.raises(StoreError, match=r"^the PostgreSQL store postgresql://127.0.0.1:\d+/\w+ refused a "
                                             r"statement \(UndefinedColumn: column \"nope\" does not exist"):
            with db.transaction(write=True) as c:
                c.execute("INSERT INTO t VALUES (?, ?)", (1, None))
                c.execute("SELECT nope FROM t")
        with db.transaction(write=False) as c:
            assert c.execute("SELECT count(*) FROM t").fetchone() == (0,)
    finally:
        db.close()
