"""readers.storage.sqlite: shared sqlite3 files opened with their checks, transactions, one connection for threads,
CRC-checked blobs."""
import os
import sqlite3
import threading
import zlib

import pytest

from readers.storage.sqlite import (
    BUSY_S,
    DamagedFile,
    Database,
    FileFormat,
    blob_crc,
    check_crc,
    connect,
    damaged,
    is_damage,
    is_full,
    read_marks,
    set_aside,
    transaction,
)


class NotNotes(ValueError):
    pass


class Notes(FileFormat):
    """A toy format: one table, marked with an application id, refusing files with other tables."""

    tables = "CREATE TABLE IF NOT EXISTS notes (text TEXT);"
    schema, application_id = 3, 0x6E6F7465
    first_pragmas = ("auto_vacuum = INCREMENTAL",)
    pragmas = ("journal_size_limit = 4096",)

    def check(self, path, marks, create):
        if marks.tables - {"notes"} or (marks.application_id not in (0, self.application_id)):
            raise NotNotes(f"{path} is not a notes file")
        if not (create or marks.tables):
            raise NotNotes(f"{path} is empty")

    def no_wal(self, path):
        return NotNotes(f"{path} cannot be put in WAL mode")

    def failed(self, path, exc):
        return None if isinstance(exc, sqlite3.OperationalError) else NotNotes(f"{path}: {exc}")


def pragmas(db, *names):
    return [db.execute(f"PRAGMA {name}").fetchone()[0] for name in names]


def test_connect_makes_a_marked_wal_file_with_its_tables_and_opens_it_again(tmp_path):
    path = str(tmp_path / "notes.db")
    db = connect(path, Notes())
    assert pragmas(db, "journal_mode", "synchronous", "user_version", "application_id", "busy_timeout",
                   "auto_vacuum", "journal_size_limit") == ["wal", 1, 3, 0x6E6F7465, BUSY_S * 1000, 2, 4096]
    db.execute("INSERT INTO notes VALUES ('kept')")
    db.close()
    again = connect(path, Notes(), create=False)
    assert again.execute("SELECT text FROM notes").fetchall() == [("kept",)]
    assert pragmas(again, "synchronous", "journal_size_limit") == [1, 4096]  # set anew for each connection
    again.close()


def test_first_pragmas_are_set_only_in_a_file_without_tables(tmp_path):
    path = tmp_path / "theirs.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE notes (text TEXT)")  # a file made before, by hand: its layout is as it is
    db.close()
    made = connect(str(path), Notes())
    assert pragmas(made, "auto_vacuum", "user_version") == [0, 3]
    made.close()


@pytest.mark.parametrize("make, message", [
    (lambda p: sqlite3.connect(p).execute("CREATE TABLE other (x)").connection.commit(), "is not a notes file"),
    (lambda p: sqlite3.connect(p).execute("PRAGMA application_id = 7"), "is not a notes file"),
    (lambda p: p.write_bytes(b"not a database at all" * 100), "file is not a database"),
])
def test_a_file_of_another_kind_is_refused_by_the_format_as_it_was(tmp_path, make, message):
    path = tmp_path / "theirs.db"
    make(path)
    before = path.read_bytes()
    with pytest.raises(NotNotes, match=message):
        connect(str(path), Notes())
    assert path.read_bytes() == before and not (tmp_path / "theirs.db-wal").exists()


def test_a_file_that_cannot_be_put_in_wal_mode_is_refused_by_the_format():
    with pytest.raises(NotNotes, match="cannot be put in WAL mode"):
        connect(":memory:", Notes())  # (a database in memory keeps its journal there)


def test_an_error_the_format_does_not_name_is_sqlites_own(tmp_path):
    with pytest.raises(sqlite3.OperationalError, match="unable to open"):
        connect(str(tmp_path / "no such folder" / "notes.db"), Notes())


def test_threads_that_make_the_file_at_once_agree(tmp_path):
    path, errors, opened = str(tmp_path / "new.db"), [], []
    gate = threading.Barrier(8)

    def make():
        try:
            gate.wait(10)
            opened.append(connect(path, Notes()))
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=make) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for db in opened:
        db.close()
    assert errors == [] and len(opened) == 8


def test_an_empty_file_is_read_again_for_its_makers_tables_when_waited_for(tmp_path):
    path = str(tmp_path / "notes.db")
    sqlite3.connect(path).close()  # the file exists, empty, as just after the maker's connect
    maker = threading.Timer(0.2, lambda: connect(path, Notes()).close())
    maker.start()
    try:
        db = connect(path, Notes(), create=False, wait=60)
        assert pragmas(db, "user_version") == [3]
        db.close()
    finally:
        maker.join()


def test_an_empty_file_not_waited_for_is_judged_empty(tmp_path):
    path = str(tmp_path / "notes.db")
    sqlite3.connect(path).close()
    assert read_marks(sqlite3.connect(path, isolation_level=None)).empty
    with pytest.raises(NotNotes, match="is empty"):
        connect(path, Notes(), create=False)


def test_a_read_transaction_sees_one_moment(tmp_path):
    path = str(tmp_path / "notes.db")
    reader, writer = connect(path, Notes()), connect(path, Notes())
    with transaction(reader, write=False):
        before = reader.execute("SELECT count(*) FROM notes").fetchone()
        with transaction(writer):  # the writer is not kept waiting (WAL)
            writer.execute("INSERT INTO notes VALUES ('new')")
        assert reader.execute("SELECT count(*) FROM notes").fetchone() == before == (0,)
    assert reader.execute("SELECT count(*) FROM notes").fetchone() == (1,)
    reader.close()
    writer.close()


def test_a_write_transaction_holds_the_write_lock_from_its_start(tmp_path):
    path = str(tmp_path / "notes.db")
    db, other = connect(path, Notes()), connect(path, Notes())
    other.execute("PRAGMA busy_timeout = 0")
    with transaction(db):
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            other.execute("BEGIN IMMEDIATE")
    db.close()
    other.close()


def test_a_failed_transaction_is_rolled_back(tmp_path):
    db = connect(str(tmp_path / "notes.db"), Notes())
    with pytest.raises(RuntimeError), transaction(db):
        db.execute("INSERT INTO notes VALUES ('lost')")
        raise RuntimeError("midway")
    assert db.execute("SELECT count(*) FROM notes").fetchone() == (0,) and not db.in_transaction
    db.close()


def test_a_transaction_sqlite_rolled_back_itself_raises_its_own_error(tmp_path):
    db = connect(str(tmp_path / "notes.db"), Notes())
    with pytest.raises(RuntimeError, match="disk is full"), transaction(db):
        db.execute("ROLLBACK")  # as sqlite does after some errors
        raise RuntimeError("disk is full")
    assert not db.in_transaction
    db.close()


class CommitInterrupted:
    """A connection whose COMMIT is interrupted (as by Ctrl-C arriving there)."""

    def __init__(self, db):
        self.db = db

    def execute(self, sql, *args):
        if sql == "COMMIT":
            raise KeyboardInterrupt
        return self.db.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self.db, name)


def test_an_interrupt_at_commit_leaves_no_transaction_open(tmp_path):
    db = connect(str(tmp_path / "notes.db"), Notes())
    with pytest.raises(KeyboardInterrupt), transaction(CommitInterrupted(db)):
        db.execute("INSERT INTO notes VALUES ('lost')")
    assert not db.in_transaction and db.execute("SELECT count(*) FROM notes").fetchone() == (0,)
    db.close()


class FullAtCommit:
    """A connection whose COMMIT fails on a full disk after sqlite has ended the transaction by itself, though the
    connection still says one is open (what the fault hunt of issue 27 met)."""

    def __init__(self, db):
        self.db, self.in_transaction = db, False

    def execute(self, sql, *args):
        if sql == "COMMIT":
            self.db.execute("ROLLBACK")
            self.in_transaction = True
            raise sqlite3.OperationalError("database or disk is full")
        if sql == "ROLLBACK" and not self.db.in_transaction:
            raise sqlite3.OperationalError("cannot rollback - no transaction is active")
        return self.db.execute(sql, *args)


def test_a_failed_commit_raises_its_own_error_not_the_rollback_s(tmp_path):
    # Regression (issue 27, 13): a write on a full disk was reported as "cannot rollback - no transaction is
    # active", the rollback's failure hiding the commit's
    db = connect(str(tmp_path / "notes.db"), Notes())
    with pytest.raises(sqlite3.OperationalError, match="^database or disk is full$"), transaction(FullAtCommit(db)):
        db.execute("INSERT INTO notes VALUES ('lost')")
    assert not db.in_transaction and db.execute("SELECT count(*) FROM notes").fetchone() == (0,)
    assert is_full(sqlite3.OperationalError("database or disk is full"))
    db.close()


def test_damage_is_told_from_other_failures_and_described():
    assert is_damage(sqlite3.DatabaseError("database disk image is malformed"))
    assert is_damage(sqlite3.OperationalError("no such table: trainings"))
    assert not is_damage(sqlite3.OperationalError("database is locked"))
    assert not is_damage(sqlite3.DatabaseError("file is not a database"))  # another program's file: not ours
    assert not is_damage(OSError("disk I/O error"))


@pytest.mark.parametrize("damaged", [True, False])
def test_a_database_turns_sqlite_s_damage_into_its_own_error(tmp_path, damaged):
    def refusal(why):
        return DamagedFile("notes.db", why, "restore it")

    database = Database(connect(str(tmp_path / "notes.db"), Notes()), "closed", refusal if damaged else None)
    with database.transaction(write=True) as db:
        db.execute("DROP TABLE notes")
    with pytest.raises(DamagedFile if damaged else sqlite3.OperationalError, match="no such table: notes"):
        with database.transaction(write=False) as db:
            db.execute("SELECT * FROM notes")
    database.close()


def test_set_aside_renames_a_database_with_its_log_and_index(tmp_path):
    path = str(tmp_path / "notes.db")
    db = connect(path, Notes())
    db.execute("INSERT INTO notes VALUES ('kept')")
    other = connect(path, Notes())  # (its log and index stay while it is open)
    db.close()
    aside = set_aside(path, str(tmp_path / "extra.npy"))
    other.close()
    assert os.path.basename(aside).startswith("notes.db.damaged-") and not os.path.exists(path)
    assert set(os.listdir(tmp_path)) <= {os.path.basename(aside) + s for s in ("", "-wal", "-shm")}
    kept = sqlite3.connect(aside)
    assert kept.execute("SELECT text FROM notes").fetchall() == [("kept",)]
    kept.close()


def test_a_database_serves_threads_one_transaction_at_a_time(tmp_path):
    database = Database(connect(str(tmp_path / "notes.db"), Notes()), "closed")
    errors = []

    def write(i):
        try:
            for j in range(50):
                with database.transaction(write=True) as db:
                    count = db.execute("SELECT count(*) FROM notes").fetchone()[0]
                    db.execute("INSERT INTO notes VALUES (?)", (f"{i}.{j}.{count}",))
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    with database.transaction(write=False) as db:
        counts = sorted(int(text.rsplit(".", 1)[1]) for text, in db.execute("SELECT text FROM notes"))
    assert errors == [] and counts == list(range(200))  # each saw every insert before its own
    database.close()


def test_a_closed_database_says_so_and_closes_once(tmp_path):
    database = Database(connect(str(tmp_path / "notes.db"), Notes()), "the notes are closed: open them again")
    database.close()
    database.close()
    with pytest.raises(ValueError, match=r"^the notes are closed: open them again$"):
        with database.transaction(write=False):
            pass


@pytest.mark.parametrize("parts", [(b"abc",), (b"ab", b"c"), (b"abc", None), (b"", b"abc")])
def test_blob_crc_is_the_crc_of_the_parts_in_order(parts):
    assert blob_crc(*parts) == zlib.crc32(b"abc")


def test_a_damaged_blob_is_named_with_what_to_do():
    check_crc(blob_crc(b"keys", b"weights"), "trigger 0", "write it again", b"keys", b"weights")
    with pytest.raises(ValueError, match=r"^trigger 0 is damaged \(its CRC-32 does not match\): the file was changed "
                                         r"outside readerkit; write it again$"):
        check_crc(blob_crc(b"keys", b"weights"), "trigger 0", "write it again", b"keys", b"weightS")
    assert str(damaged("the model", "train again", "it does not decode")) == (
        "the model is damaged (it does not decode): the file was changed outside readerkit; train again")
