import os
import sqlite3

import numpy as np
import pytest

from readers.caching.database import (
    ID_BITS,
    UPSERT,
    NotACache,
    database_bytes,
    evict,
    open_database,
    release,
    row_keys,
)
from readers.storage.sqlite import transaction


def test_a_new_cache_is_made_in_wal_mode_with_its_schema(tmp_path):
    db = open_database(tmp_path / "new" / "folder")
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == {"spaces", "entries", "dense", "meta", "sqlite_sequence"}
    db.close()
    open_database(tmp_path / "new" / "folder").close()  # opened again as it is


def test_what_is_not_a_cache_is_refused_with_the_way_out(tmp_path):
    (tmp_path / "cache.sqlite3").write_bytes(b"not a database at all" * 100)
    with pytest.raises(NotACache, match=r"cache.sqlite3 is not a readerkit cache \(file is not a database\): give "):
        open_database(tmp_path)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    with sqlite3.connect(theirs / "cache.sqlite3") as db:
        db.execute("CREATE TABLE notes (x)")
    with pytest.raises(NotACache, match=r"\(it holds other tables\)"):
        open_database(theirs)
    with sqlite3.connect(theirs / "cache.sqlite3") as db:  # refused before anything in it changed
        assert db.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    older = tmp_path / "older"
    open_database(older).close()
    with sqlite3.connect(older / "cache.sqlite3") as db:
        db.execute("PRAGMA user_version = 7")
    with pytest.raises(NotACache, match=r"another version of readerkit's cache \(schema 7; this one reads 1\): "
                                        "delete it"):
        open_database(older)
    with pytest.raises(FileNotFoundError, match="empty does not exist: check the folder's path"):
        open_database(tmp_path / "empty", create=False)
    assert not (tmp_path / "empty").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="empty holds no readerkit cache"):
        open_database(tmp_path / "empty", create=False)


def test_a_failed_transaction_leaves_nothing(tmp_path):
    db = open_database(tmp_path)
    with pytest.raises(RuntimeError), transaction(db):
        db.execute("INSERT INTO meta VALUES ('a', '1')")
        raise RuntimeError("midway")
    assert db.execute("SELECT count(*) FROM meta").fetchone() == (0,)
    assert not db.in_transaction
    db.close()


def test_row_keys_of_ids_and_of_names():
    vectorised, names = row_keys(3, np.array([0, 7, (1 << ID_BITS) - 1]))
    assert (vectorised, names) == row_keys(3, [0, 7, (1 << ID_BITS) - 1])
    assert vectorised == [3 << ID_BITS, (3 << ID_BITS) | 7, (4 << ID_BITS) - 1] and names == [None] * 3
    ks, names = row_keys(3, ["a", b"a", -1, 1 << ID_BITS, np.int64(-5)])
    assert names == ["s:a", "b:61", "i:-1", f"i:{1 << ID_BITS}", "i:-5"]
    assert all(k < 0 for k in ks) and len(set(ks)) == 5
    assert row_keys(4, ["a"])[0] != row_keys(3, ["a"])[0]  # namespaces apart
    for bad in (1.5, None, ("a",), True):
        with pytest.raises(TypeError, match="an int, str or bytes"):
            row_keys(3, [bad])


def test_eviction_keeps_the_pages_in_use_under_the_limit_and_gives_the_rest_back(tmp_path):
    db = open_database(tmp_path)
    assert db.execute("PRAGMA auto_vacuum").fetchone() == (2,)  # incremental: free pages can go back
    with transaction(db):
        db.execute("INSERT INTO spaces (ns, name, about, created) VALUES (1, 'x', '{}', 0)")
        db.executemany(UPSERT, [(k, 1, bytes(5000), 0, 5000, float(k), None) for k in range(200)])
    assert db.execute("SELECT entries, bytes FROM spaces").fetchone() == (200, 1_000_000)
    full = database_bytes(db)
    with transaction(db):
        assert evict(db, full) == 0
        gone = evict(db, 400_000)
    left = [k for k, in db.execute("SELECT k FROM entries ORDER BY k")]
    assert left == list(range(gone, 200)) and database_bytes(db) <= 400_000  # the oldest written went
    assert db.execute("SELECT entries, bytes FROM spaces").fetchone() == (len(left), 5000 * len(left))
    release(db)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert os.path.getsize(tmp_path / "cache.sqlite3") <= 450_000
    with transaction(db):  # a rewrite of an entry changes the counts by the difference
        db.execute(UPSERT, (left[0], 1, bytes(10), 0, 10, 99.0, None))
    assert db.execute("SELECT entries, bytes FROM spaces").fetchone() == (len(left), 5000 * len(left) - 4990)
    db.close()
