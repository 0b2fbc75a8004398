"""cache_info and clear_cache on real caches: figures that match the tables, clearing under open connections,
and files that are not caches left alone."""
from __future__ import annotations

import contextlib
import fcntl
import os
import re
import sqlite3
import time
from types import SimpleNamespace

import numpy as np
import pytest

import readers
from readers.caching import admin
from readers.caching.admin import cache_info, clear_cache, cleared_line, info_lines
from readers.caching.database import FILE
from readers.caching.disk import DiskStore, row_keys
from tests.conftest import finishes
from tests.helpers.cache_jobs import change, overwrite_page

LIMIT = 1 << 30


def double(entry):
    return entry[0] * 2  # a row of from_arrays: a fixed-shape array, kept in a dense file


def shout(word):
    return word.upper()  # a string: kept as a blob


def _fill(directory, passes: int = 2) -> list:
    """Two namespaces, by two functions over two datasets, one of them with a version; their stores closed.
    The first, made with no size limit, keeps its entries in a dense file; the second gives the limit."""
    made = [readers.cached(readers.from_arrays(np.arange(24).reshape(8, 3)), double, directory=directory),
            readers.cached(readers.from_sequence(["a", "bb", "ccc", "dddd", "e"]), shout, directory=directory,
                           version="2", disk_bytes=LIMIT)]
    for r in made:
        for _ in range(passes):
            list(r())
        r.store.close()
    return made


@contextlib.contextmanager
def _connected(directory):
    db = sqlite3.connect(os.path.join(directory, FILE), isolation_level=None)
    try:
        yield db
    finally:
        db.close()


def _table_counts(directory) -> dict[int, tuple[int, int]]:
    """{ns: (entries, bytes)} as the entries table has them, counted afresh."""
    with _connected(directory) as db:
        return {ns: (n, size) for ns, n, size in
                db.execute("SELECT ns, count(*), sum(size) FROM entries GROUP BY ns ORDER BY ns")}


def _allocated(directory) -> int:
    return sum(os.stat(e.path).st_blocks * 512 for e in os.scandir(directory))


def _calls(directory, func, source):
    """How many entries a fresh cached reader computes in one pass."""
    r = readers.cached(source, func, directory=directory)
    list(r())
    r.store.close()
    return r.stats()["misses"]


def test_cache_info_figures_match_the_tables(tmp_path):
    start = time.time()
    _fill(tmp_path)
    info = cache_info(tmp_path)
    counts = _table_counts(tmp_path)
    assert [(s["ns"], s["entries"], s["bytes"]) for s in info["namespaces"]] == [(ns, *c) for ns, c in counts.items()]
    assert (info["entries"], info["bytes"]) == (13, sum(b for _, b in counts.values()))
    first, second = info["namespaces"]
    assert first["function"].startswith("double ") and second["function"].startswith("shout ")
    assert (first["version"], second["version"], first["key"]) == (None, "2", None)
    assert (first["data"], first["length"]) == (["from_arrays(8 rows: int64[3])"], 8)
    assert second["data"] == ["from_sequence(list of 5)"] and len(second["content"]) == 12
    assert (first["computed"], second["computed"]) == (8, 5)  # the second pass computed nothing
    assert all(s["mean_compute_s"] > 0 and start <= s["created"] <= time.time() for s in info["namespaces"])
    assert info["limit"] == LIMIT and info["directory"] == str(tmp_path)
    assert info["file_bytes"] == _allocated(tmp_path)


def test_cache_info_without_a_limit_says_none(tmp_path):
    r = readers.cached(readers.from_sequence([1, 2]), str, directory=tmp_path)
    list(r())
    r.store.close()
    assert cache_info(tmp_path)["limit"] is None


@pytest.mark.parametrize("make, said", [(False, "does not exist: check the folder's path"),
                                        (True, "holds no readerkit cache")], ids=["no-folder", "empty-folder"])
def test_cache_info_and_clear_make_no_cache_where_there_is_none(tmp_path, make, said):
    # Regression (issue 27, 9b): a folder that is not there was said to hold no readerkit cache
    folder = tmp_path / "cache"
    if make:
        folder.mkdir()
    for call in (cache_info, clear_cache):
        with pytest.raises(FileNotFoundError, match=f"{folder} {re.escape(said)}"):
            call(folder)
    assert (os.listdir(folder) == []) if make else not folder.exists()


def test_cache_info_reads_while_another_process_holds_the_write_lock(tmp_path):
    _fill(tmp_path, passes=1)
    before = cache_info(tmp_path)["entries"]
    with _connected(tmp_path) as writer:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("INSERT INTO entries (k, ns, v, crc, size, t) VALUES (-5, 2, x'00', 0, 1, 0)")
        assert finishes(lambda: cache_info(tmp_path), "cache_info beside a writer")["entries"] == before
        writer.execute("COMMIT")
    assert cache_info(tmp_path)["entries"] == before + 1


def test_clear_cache_removes_every_entry_and_a_new_pass_computes_again(tmp_path):
    _fill(tmp_path)
    info = cache_info(tmp_path)
    assert any(name.startswith("dense-") for name in os.listdir(tmp_path))
    done = clear_cache(tmp_path)
    assert done == {"directory": str(tmp_path), "ns": None, "namespaces": 2, "entries": 13, "bytes": info["bytes"],
                    "file_bytes_before": info["file_bytes"], "file_bytes_after": _allocated(tmp_path),
                    "reclaimed": True, "note": None}
    assert _table_counts(tmp_path) == {} and not any(name.startswith("dense-") for name in os.listdir(tmp_path))
    after = cache_info(tmp_path)
    assert [(s["ns"], s["entries"], s["bytes"], s["computed"]) for s in after["namespaces"]] == [(1, 0, 0, 0),
                                                                                                (2, 0, 0, 0)]
    assert _calls(tmp_path, double, readers.from_arrays(np.arange(24).reshape(8, 3))) == 8
    assert _calls(tmp_path, double, readers.from_arrays(np.arange(24).reshape(8, 3))) == 0  # cached again


def test_clear_cache_of_one_namespace_keeps_the_others(tmp_path):
    _fill(tmp_path)
    kept = _table_counts(tmp_path)[1]
    done = clear_cache(tmp_path, 2)
    assert (done["ns"], done["namespaces"], done["entries"]) == (2, 1, 5)
    assert _table_counts(tmp_path) == {1: kept}
    assert any(name.startswith("dense-") for name in os.listdir(tmp_path))  # namespace 1's
    assert _calls(tmp_path, shout, readers.from_sequence(["a", "bb", "ccc", "dddd", "e"])) == 5


@pytest.mark.parametrize("ns, error, message", [
    (9, ValueError, r"has no namespace 9; it has \[1, 2\]"),
    ("1", TypeError, "ns must be a namespace's number"),
    (True, TypeError, "ns must be a namespace's number"),
])
def test_clear_cache_refuses_a_namespace_it_does_not_hold(tmp_path, ns, error, message):
    _fill(tmp_path, passes=1)
    with pytest.raises(error, match=message):
        clear_cache(tmp_path, ns)
    assert sum(n for n, _ in _table_counts(tmp_path).values()) == 13


def test_clear_cache_while_another_store_has_it_open(tmp_path):
    _fill(tmp_path, passes=1)
    store = DiskStore(tmp_path)  # as a process still running would hold it: its namespace known, connected
    try:
        ns = store.space("late", {"func": "late"})
        ks, names = row_keys(ns, [1, 2])
        store.put(ks[0], ns, names[0], "before", cost=0.001)
        store.flush()
        done = clear_cache(tmp_path, timeout=1)
        assert (done["entries"], done["reclaimed"]) == (14, True)
        assert store.get_many(ks, names) == ({}, [])  # it misses
        store.put(ks[1], ns, names[1], "after", cost=0.001)  # and writes under the namespace it knew
        store.flush()
        counts, info = _table_counts(tmp_path), cache_info(tmp_path)
        assert list(counts) == [ns] and (info["entries"], info["bytes"]) == counts[ns]  # counted where it belongs
        assert [s["entries"] for s in info["namespaces"]] == [0, 0, 1]
        # a namespace made after the clear takes a new number, not one a running process still writes under
        assert store.space("newer", {"func": "newer"}) == ns + 1
    finally:
        store.close()


def test_clear_cache_says_when_a_reader_keeps_it_from_reclaiming_the_space(tmp_path):
    _fill(tmp_path, passes=1)
    with _connected(tmp_path) as reader:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM entries").fetchone()  # a read transaction on the old snapshot
        done = clear_cache(tmp_path, timeout=0.05)
        reader.execute("COMMIT")
    assert (done["entries"], done["reclaimed"]) == (13, False)
    assert "another process is reading the cache" in done["note"] and done["note"] in cleared_line(done)
    assert _table_counts(tmp_path) == {}  # gone all the same
    assert clear_cache(tmp_path)["reclaimed"] is True


def test_clear_cache_waits_for_a_writer_at_most_its_timeout(tmp_path):
    _fill(tmp_path, passes=1)
    with _connected(tmp_path) as writer:
        writer.execute("BEGIN IMMEDIATE")
        with pytest.raises(TimeoutError, match="another process has held the write lock .* for over 0.05 s"):
            clear_cache(tmp_path, timeout=0.05)
        writer.execute("ROLLBACK")
    assert sum(n for n, _ in _table_counts(tmp_path).values()) == 13


def _garbage(path):
    path.write_bytes(b"these are someone's notes, not a database\n" * 4)


def _rollback_journal_database(path):
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE notes (x)")
        db.execute("INSERT INTO notes VALUES ('mine')")
        db.commit()


def _wal_database(path):
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("CREATE TABLE notes (x)")
        db.execute("INSERT INTO notes VALUES ('mine')")
        db.commit()


@pytest.mark.parametrize("make, reason", [
    (_garbage, r"not a readerkit cache \(file is not a database\)"),
    (_rollback_journal_database, r"not a readerkit cache \(it holds other tables\)"),
    (_wal_database, r"not a readerkit cache \(it holds other tables\)"),
], ids=["not-sqlite", "rollback-journal", "wal-but-not-ours"])
def test_info_and_clear_refuse_a_file_that_is_not_a_cache_and_leave_it(tmp_path, make, reason):
    path = tmp_path / FILE
    make(path)
    before = path.read_bytes()
    with pytest.raises(ValueError, match=reason + r": check the folder"):
        cache_info(tmp_path)
    with pytest.raises(ValueError, match=reason + r": clear leaves alone what it cannot read as a readerkit cache; "
                                                  "delete that file yourself"):
        clear_cache(tmp_path)
    with pytest.raises(ValueError) as refused:
        clear_cache(tmp_path)
    assert "cache clear" not in str(refused.value)  # not advice to run what refused it
    if make is not _wal_database:  # (that one's log may be folded in: its rows are checked below)
        assert path.read_bytes() == before
    if make is not _garbage:
        with contextlib.closing(sqlite3.connect(path)) as db:
            assert db.execute("SELECT x FROM notes").fetchall() == [("mine",)]


def test_info_lines_align_the_columns_and_total():
    info = {"directory": "/c", "file_bytes": 5 << 20, "limit": 3 << 30, "entries": 1234, "bytes": 3 << 20,
            "namespaces": [{"ns": 1, "function": "double 0f", "version": None, "data": ["from_arrays(8 rows)"],
                            "entries": 1200, "bytes": 2 << 20, "mean_compute_s": 0.002, "created": 0.0},
                           {"ns": 12, "function": "f 1a", "version": "2", "data": ["b", "a"], "entries": 34,
                            "bytes": 1 << 20, "mean_compute_s": None, "created": 0.0}]}
    created = time.strftime("%Y-%m-%d %H:%M", time.localtime(0.0))
    assert info_lines(info) == [
        "cache in /c: 2 namespaces, 5.00 MiB on disk",
        f"  ns  function   version  entries   MiB  ms/entry  {'created':<{len(created)}}  data",
        f"   1  double 0f  -          1,200  2.00     2.000  {created}  from_arrays(8 rows)",
        f"  12  f 1a       2             34  1.00         -  {created}  b > a",
        "total                       1,234  3.00",
        "limit: 3,072.00 MiB (disk_bytes=3,221,225,472)",
    ]


def test_cleared_line_names_the_namespace_cleared():
    result = {"directory": "/c", "ns": 3, "namespaces": 1, "entries": 1, "bytes": 0, "file_bytes_before": 0,
              "file_bytes_after": 0, "reclaimed": True, "note": None}
    assert cleared_line(result) == "cleared /c: 1 entry (0.00 MiB) from namespace 3; the files went from 0.00 to 0.00 MiB"


# -- a damaged database (issue 27, item 14) ----------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["page", "table"])
def test_cache_info_says_a_damaged_database_serves_nothing(tmp_path, damage):
    # Regression (issue 27, 14): cache info reported every entry of a database whose pages were damaged
    _fill(tmp_path)
    if damage == "page":
        overwrite_page(tmp_path)
    else:
        change(tmp_path, "DROP TABLE entries")
    info = cache_info(tmp_path)
    assert info["damaged"] and info["entries"] == 0 and info["namespaces"] == [] and info["file_bytes"] > 0
    lines = info_lines(info)
    assert lines[0].startswith(f"cache in {tmp_path}: damaged (") and len(lines) == 2
    assert lines[1] == ("it serves no entry: the next process that uses it sets it aside and starts a new one; "
                        f"`python cli.py cache clear {tmp_path}` deletes it now")


@pytest.mark.parametrize("damage", ["page", "table"])
def test_clear_cache_empties_a_damaged_folder_and_a_new_cache_starts_there(tmp_path, damage):
    # Regression (issue 27, 14): clear crashed with "database disk image is malformed", the remedy it advises
    made = _fill(tmp_path)
    if damage == "page":
        overwrite_page(tmp_path)
    else:
        change(tmp_path, "DROP TABLE entries")
    done = clear_cache(tmp_path)
    assert done["reclaimed"] and done["entries"] == 0 and done["file_bytes_after"] == 0
    assert done["note"].startswith("the database was damaged (") and done["note"].endswith(
        "so its files were deleted, with every namespace; a new one is made when the cache is next used")
    assert os.listdir(tmp_path) == []
    assert _calls(tmp_path, double, made[0].parents[0]) == 8  # a new cache, working
    assert cache_info(tmp_path)["entries"] == 8


def test_cache_info_counts_and_clear_deletes_what_was_set_aside(tmp_path):
    made = _fill(tmp_path)
    overwrite_page(tmp_path)
    with pytest.warns(RuntimeWarning, match="was damaged"):
        _calls(tmp_path, shout, made[1].parents[0])
    info = cache_info(tmp_path)
    assert info["damaged"] is None and info["set_aside"] and all(".damaged-" in f for f in info["set_aside"])
    assert re.fullmatch(rf"set aside: {len(info['set_aside'])} files? of damaged databases \(`python cli.py cache "
                        rf"clear {re.escape(str(tmp_path))}` deletes them\)", info_lines(info)[-1])
    clear_cache(tmp_path)
    assert cache_info(tmp_path)["set_aside"] == [] and not [f for f in os.listdir(tmp_path) if ".damaged-" in f]


# -- how far info looks for damage (review of issue 27, finding 11) ------------------------------------------------


@pytest.fixture
def page_checks(monkeypatch):
    """The connections ``check_pages`` (PRAGMA quick_check: every page read) was run on, through admin."""
    seen = []
    real = admin.check_pages
    monkeypatch.setattr(admin, "check_pages", lambda db: (seen.append(db), real(db))[1])
    return seen


def _fill_pages(directory) -> None:
    """A cache whose entries table spans many pages: 2,000 blobs."""
    r = readers.cached(readers.from_sequence([f"word {i}" for i in range(2000)]), shout, directory=directory)
    list(r())
    r.store.close()


def test_cache_info_reads_every_page_only_when_asked(tmp_path, page_checks):
    # Regression (review of issue 27, 11): cache info ran PRAGMA quick_check, every page read (about a second a
    # GiB, minutes for a large cache, with nothing shown meanwhile)
    _fill(tmp_path)
    info = cache_info(tmp_path)
    assert page_checks == [] and info["pages_checked"] is False and info["entries"] == 13
    assert not [line for line in info_lines(info) if line.startswith("pages:")]
    checked = cache_info(tmp_path, check_pages=True)
    assert len(page_checks) == 1 and checked["pages_checked"] is True and checked["damaged"] is None
    assert {**checked, "pages_checked": False} == info
    assert info_lines(checked)[-1] == "pages: every page read, none damaged"


def test_cache_info_check_pages_finds_the_damage_the_first_pages_do_not_show(tmp_path, page_checks):
    _fill_pages(tmp_path)
    overwrite_page(tmp_path, "entries", last_leaf=True)
    assert cache_info(tmp_path)["damaged"] is None and page_checks == []  # what the cheap look cannot see
    info = cache_info(tmp_path, check_pages=True)
    assert info["damaged"] and info["entries"] == 0 and info["namespaces"] == [] and len(page_checks) == 1
    assert info_lines(info)[0].startswith(f"cache in {tmp_path}: damaged (")


def test_clear_cache_without_a_check_of_every_page_still_empties_a_damaged_folder(tmp_path, page_checks):
    _fill_pages(tmp_path)
    overwrite_page(tmp_path, "entries", last_leaf=True)
    done = clear_cache(tmp_path)  # the deletion meets the damaged page
    assert page_checks == []
    assert done["note"].startswith("the database was damaged (") and os.listdir(tmp_path) == []
    assert _calls(tmp_path, shout, readers.from_sequence(["a", "b"])) == 2 and cache_info(tmp_path)["entries"] == 2


def _opening_would_wait(directory) -> bool:
    """Whether a process opening the cache in ``directory`` would wait now: the folder's lock is held exclusively."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def test_clear_cache_deletes_a_damaged_database_while_no_process_can_open_the_folder(tmp_path, monkeypatch):
    # (review of issue 27, finding 6: a process opening the folder between the deletion of the database and of its
    # -wal would make a new database beside the old log, and replay it)
    _fill(tmp_path)
    overwrite_page(tmp_path)
    held, real = {}, os.unlink

    def unlink(path, *args, **options):
        if os.path.basename(path) in {FILE + suffix for suffix in ("", "-wal", "-shm")}:
            held[os.path.basename(path)] = _opening_would_wait(tmp_path)
        return real(path, *args, **options)

    monkeypatch.setattr(os, "unlink", unlink)
    assert clear_cache(tmp_path)["note"].startswith("the database was damaged (")
    assert held == {FILE: True, FILE + "-wal": True, FILE + "-shm": True}


# -- a database whose header is overwritten (trial of issue 27, problem 7) ------------------------------------------


def _overwrite_header(directory, size: int) -> None:
    """Garbage over the first ``size`` bytes of the database (its log checkpointed first): the 100-byte header, or
    the whole first page, where sqlite keeps its schema."""
    path = os.path.join(directory, FILE)
    with _connected(directory) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with open(path, "r+b") as file:
        file.write(bytes([0xA5]) * size)


@pytest.mark.parametrize("size", [100, 4096], ids=["header", "first page"])
@pytest.mark.parametrize("dense", [True, False], ids=["dense file", "blobs only"])
def test_a_cache_whose_header_is_overwritten_is_damaged_not_another_programs_file(tmp_path, size, dense):
    """Trial of issue 27, problem 7: a cache whose first page was overwritten was "not a readerkit cache (file is not
    a database)": info and clear refused it, clear left its deletion to the user, and cached refused the folder.
    Known by its other files and by the cache's own tables in its pages, it is damage: info says so, clear deletes
    it, a store sets it aside and starts a new one."""
    source, func = ((readers.from_arrays(np.arange(24).reshape(8, 3)), double) if dense
                    else (readers.from_sequence([f"word {i}" for i in range(50)]), shout))
    _calls(tmp_path, func, source)
    _overwrite_header(tmp_path, size)
    info = cache_info(tmp_path)
    assert (info["damaged"], info["entries"]) == ("its header is damaged: file is not a database", 0)
    done = clear_cache(tmp_path)
    assert done["note"].startswith("the database was damaged (its header is damaged: file is not a database), so "
                                   "its files were deleted")
    assert os.listdir(tmp_path) == []
    _calls(tmp_path, func, source)
    _overwrite_header(tmp_path, size)
    with pytest.warns(RuntimeWarning, match=r"was damaged \(its header is damaged: file is not a database\): it is "
                                            r"set aside as "):
        assert _calls(tmp_path, func, source) == len(source)  # a new cache, computed again
    assert cache_info(tmp_path)["set_aside"] and cache_info(tmp_path)["entries"] == len(source)


# -- a full disk (trial of issue 27, problem 8) ---------------------------------------------------------------------


class _FullDiskAt:
    """A cache connection whose statements beginning with ``at`` fail as sqlite's do on a full disk."""

    def __init__(self, db, at: str):
        self.db, self.at = db, at

    def execute(self, sql, *args):
        if sql.lstrip().upper().startswith(self.at):
            raise sqlite3.OperationalError("database or disk is full")
        return self.db.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self.db, name)


def _full_disk_at(monkeypatch, at: str) -> None:
    real = admin._open
    monkeypatch.setattr(admin, "_open", lambda *args, **kw: (lambda db, damage: (_FullDiskAt(db, at), damage))(
        *real(*args, **kw)))


def test_clear_cache_on_a_disk_too_full_to_compact_says_why_in_its_note(tmp_path, monkeypatch):
    """Trial of issue 27, problem 8: "the database was not compacted (database or disk is full): see the error; run
    clear again later", with no error to see."""
    _fill(tmp_path, passes=1)
    _full_disk_at(monkeypatch, "VACUUM")
    done = clear_cache(tmp_path)
    assert (done["entries"], done["reclaimed"]) == (13, False) and _table_counts(tmp_path) == {}
    assert re.fullmatch(r"the database was not compacted \(database or disk is full\): the disk is full \([\d,.]+ "
                        r"MiB free\), and compacting writes a copy of the database; the room the entries took is "
                        r"reused by the cache's next entries: free some space and run clear again to give it back to "
                        r"the file system", done["note"]), done["note"]
    assert "see the error" not in cleared_line(done)


def test_clear_cache_on_a_disk_too_full_to_delete_is_one_error_saying_nothing_went(tmp_path, monkeypatch):
    """Trial of issue 27, problem 8: on a fuller disk the deletion's commit failed, a raw sqlite3.OperationalError
    traceback from `cache clear`."""
    _fill(tmp_path, passes=1)
    _full_disk_at(monkeypatch, "COMMIT")
    with pytest.raises(readers.FileError, match=rf"^cannot clear the cache in {re.escape(str(tmp_path))}: the disk is "
                                                r"full \([\d,.]+ MiB free; database or disk is full\), and deleting "
                                                r"entries first writes the pages it changes to the database's log; "
                                                r"nothing was deleted: free some space and run clear again"):
        clear_cache(tmp_path)
    assert sum(n for n, _ in _table_counts(tmp_path).values()) == 13


def _io_error():
    exc = sqlite3.OperationalError("disk I/O error")
    exc.sqlite_errorcode = 4874  # SQLITE_IOERR_SHMSIZE: what opening a cache on a full disk (tmpfs) gave
    raise exc


@pytest.mark.parametrize("call", [cache_info, clear_cache])
def test_info_and_clear_on_a_disk_too_full_to_open_the_cache_are_one_error(tmp_path, monkeypatch, call):
    """Trial of issue 27, problem 8, seen on a 3 MiB tmpfs filled up: `cache clear` and `cache info` ended in a raw
    "sqlite3.OperationalError: disk I/O error" traceback (sqlite could not size the -shm file it makes on opening)."""
    _fill(tmp_path, passes=1)
    monkeypatch.setattr(admin, "open_database", lambda *args, **kwargs: _io_error())
    monkeypatch.setattr(admin.shutil, "disk_usage", lambda folder: SimpleNamespace(total=1 << 30, used=1 << 30, free=4096))
    with pytest.raises(readers.FileError, match=rf"^cannot open the cache in {re.escape(str(tmp_path))}: the disk is "
                                                r"full \(0\.00 MiB free; disk I/O error\), and sqlite makes the "
                                                r"database's -wal and -shm files when it opens it: free some space"):
        call(tmp_path)
    monkeypatch.setattr(admin.shutil, "disk_usage", lambda folder: SimpleNamespace(total=1 << 30, used=0, free=1 << 30))
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):  # room enough: another failure, as it is
        call(tmp_path)
