"""Look into and empty a ``readers.cached`` disk cache: what ``python cli.py cache info|clear DIR`` runs.

``cache_info`` reads one consistent snapshot of the folder's database (WAL
mode: it never waits for, nor stops, a process writing to it).
``clear_cache`` deletes entries in one transaction, then gives the space
back to the file system: it compacts the database and deletes the dense
files (``readers.caching.dense``), unlinked, never cut short: a process that has
one mapped keeps its copy until it lets go, and the file system frees it then.
Rows such a process writes there after the clear are, to every other process,
damaged entries: computed again, with a warning.

Clearing keeps each namespace's row (its number, function and data), emptied:
a process still running with that namespace open goes on writing under its
number, counted where it should be, and a namespace made later never takes
that number and reads another function's entries as its own.

Both first look for damage cheaply: the cache's tables there, and the first
row of each readable. ``cache_info(..., check_pages=True)`` (``cache info
--check-pages``) reads every page besides (``PRAGMA quick_check``: about a
second a GiB, minutes for a large cache, so not by default).
``clear_cache`` needs no such check: deleting the entries, then compacting
the file (VACUUM), read the pages, and damage met there decides it. ``cache_info``
reports a damaged database as such, holding nothing; ``clear_cache`` deletes
it, with its ``-wal``, ``-shm`` and dense files, and a new one is made when
the cache is next used. Either way, the copies of damaged databases that
processes set aside (``*.damaged-*``) are counted, and ``clear_cache``
deletes them.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import time
from typing import Any

from readers.caching.database import (
    FILE,
    NotACache,
    aside_files,
    folder_lock,
    free_space,
    open_database,
)
from readers.caching.dense import dense_files
from readers.errors import BadType, BadValue, FileError, TimedOut
from readers.storage.sqlite import (
    DamagedFile,
    check_pages,
    is_damage,
    is_full,
    transaction,
)

__all__ = ["cache_info", "clear_cache", "cleared_line", "info_lines"]

_MIB = 1 << 20
_SUFFIXES = ("", "-wal", "-shm")


def _file_bytes(directory: str) -> int:
    """Bytes the cache's files take on disk: the database, its write-ahead log and shared-memory index, and
    the dense files, by the blocks allocated (a dense file is sparse until its rows are written)."""
    total = 0
    files = [os.path.join(directory, FILE + suffix) for suffix in _SUFFIXES]
    for path in files + dense_files(directory) + aside_files(directory):
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):  # no file: nothing held
            stat = os.stat(path)
            total += stat.st_blocks * 512 if hasattr(stat, "st_blocks") else stat.st_size
    return total


#: The first row of each of the cache's tables: a look at each table's first pages, whatever the cache's size.
_FIRST_ROWS = [f"SELECT * FROM {table} LIMIT 1" for table in ("spaces", "entries", "dense", "meta")]


def _open(directory: str, refusal: str, every_page: bool = False) -> tuple[sqlite3.Connection | None, str | None]:
    """(the existing cache in ``directory``, never made here, or None when it is damaged; what is damaged in it, or
    None). A file that is not a cache is refused, untouched. Its tables are looked at, and with ``every_page``
    each of its pages (``check_pages``)."""
    try:
        db = open_database(directory, create=False)
    except NotACache as exc:
        if exc.reason is None:  # a cache of another version: its own advice
            raise
        raise NotACache(exc.path, exc.reason, f"{exc.path} is not a readerkit cache ({exc.reason}): {refusal}") from None
    except DamagedFile as exc:
        return None, exc.reason
    except sqlite3.OperationalError as exc:
        if _out_of_room(directory, exc):  # opening makes the -wal and -shm files: a full disk fails there first
            raise FileError(f"cannot open the cache in {directory}: the disk is full ({free_space(directory)}; {exc}), and "
                            "sqlite makes the database's -wal and -shm files when it opens it: free some space and run "
                            "this again") from None
        raise
    try:
        for sql in _FIRST_ROWS:
            db.execute(sql).fetchall()
        damage = check_pages(db) if every_page else None
    except sqlite3.DatabaseError as exc:
        if not is_damage(exc):
            db.close()
            raise
        damage = str(exc)
    if damage is not None:
        db.close()
        return None, damage
    return db, None


def _space(row: tuple) -> dict[str, Any]:
    ns, about, created, entries, nbytes, computed, compute_s = row
    try:
        about = json.loads(about)
    except ValueError:  # written by json.dumps; a damaged row still shows its counts
        about = {}
    content = about.get("content")
    return {"ns": ns, "function": about.get("func"), "version": about.get("version"), "key": about.get("key"),
            "data": about.get("data"), "length": about.get("length"), "content": content and content[:12],
            "entries": entries, "bytes": nbytes, "computed": computed,
            "mean_compute_s": compute_s / computed if computed else None, "created": created}


def cache_info(directory: str | os.PathLike, *, check_pages: bool = False) -> dict[str, Any]:
    """What the cache in ``directory`` holds: its size, its limit, and each namespace (a function over a dataset).

    Damage is looked for in its tables' first pages; ``check_pages`` reads
    every page besides (``PRAGMA quick_check``: about a second a GiB).

    Keys: ``directory`` (absolute), ``file_bytes`` (on disk: the database
    with its ``-wal`` and ``-shm`` files, the dense files and any set aside), ``damaged`` (what is damaged in
    the database, or None), ``pages_checked`` (whether every page was read), ``set_aside`` (the files of
    damaged databases set aside), ``limit`` (the last ``disk_bytes`` given, or None), ``entries`` and ``bytes``
    (of entries, over every namespace; 0 in a damaged database, which serves none), and
    ``namespaces``: per namespace its number ``ns``, ``function`` (name and
    digest), ``version``, ``key`` (the key function, or None for sample IDs),
    ``data`` (the pipeline's stages), ``length``, ``content`` (the data's
    digest, first 12 hex digits), ``entries``, ``bytes``, ``computed``
    (entries computed, over every process), ``mean_compute_s`` (seconds per
    computed entry, None before any) and ``created`` (Unix time).

    Raises FileNotFoundError where there is no cache (and makes none), and
    ValueError for a ``cache.sqlite3`` that is not one.

    >>> import tempfile
    >>> from readers import cached, from_sequence
    >>> with tempfile.TemporaryDirectory() as d:
    ...     r = cached(from_sequence([-1, 2, -3]), abs, directory=d, version="1")
    ...     _ = list(r())
    ...     r.flush()
    ...     info = cache_info(d)
    ...     r.store.close()
    >>> info["entries"], info["limit"], [(s["function"], s["version"], s["entries"]) for s in info["namespaces"]]
    (3, None, [('abs ...', '1', 3)])

    See Also: clear_cache, info_lines
    """
    path = os.path.abspath(directory)
    size = _file_bytes(path)
    db, damage = _open(path, "check the folder, or delete that file if nothing else uses it", check_pages)
    aside = aside_files(path)
    if db is not None:
        try:
            with transaction(db, write=False):  # one snapshot: the limit and every namespace as of one commit
                limit = db.execute("SELECT value FROM meta WHERE key = 'disk_bytes'").fetchone()
                rows = db.execute("SELECT ns, about, created, entries, bytes, computed, compute_s "
                                  "FROM spaces ORDER BY ns").fetchall()
        except sqlite3.DatabaseError as exc:
            if not is_damage(exc):
                raise
            damage = str(exc)
        finally:
            db.close()
    if damage is not None:
        return {"directory": path, "file_bytes": size, "damaged": damage, "pages_checked": check_pages,
                "set_aside": aside, "limit": None, "entries": 0, "bytes": 0, "namespaces": []}
    spaces = [_space(row) for row in rows]
    return {"directory": path, "file_bytes": size, "damaged": None, "pages_checked": check_pages, "set_aside": aside,
            "limit": None if limit is None else int(limit[0]), "entries": sum(s["entries"] for s in spaces),
            "bytes": sum(s["bytes"] for s in spaces), "namespaces": spaces}


_IOERR = 10  # sqlite's SQLITE_IOERR, the primary code of its extended I/O errors


def _out_of_room(directory: str, exc: sqlite3.Error) -> bool:
    """Whether ``exc`` failed for want of room on the disk of ``directory``: a full disk as sqlite says it, or an
    I/O error (sqlite sizing its -shm file says "disk I/O error") where less than a MiB is free."""
    if is_full(exc):
        return True
    if (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF != _IOERR:
        return False
    try:
        return shutil.disk_usage(directory).free < _MIB
    except OSError:
        return False


def _not_compacted(directory: str, exc: sqlite3.Error) -> str:
    """The note for a clear whose entries went but whose database was not compacted, as ``exc`` says why: every
    reason in words, none left to an error the user does not see.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     print(_not_compacted(d, sqlite3.OperationalError("database or disk is full")))
    the database was not compacted (database or disk is full): the disk is full (... MiB free), and compacting writes a copy of the database; the room the entries took is reused by the cache's next entries: free some space and run clear again to give it back to the file system
    >>> _not_compacted("/c", sqlite3.OperationalError("database is locked"))
    'the database was not compacted (database is locked): another process is writing to it; run clear again later'
    """
    if is_full(exc):
        why = (f"the disk is full ({free_space(directory)}), and compacting writes a copy of the database; the room the "
               "entries took is reused by the cache's next entries: free some space and run clear again to give it "
               "back to the file system")
    elif "locked" in str(exc) or "busy" in str(exc):
        why = "another process is writing to it; run clear again later"
    else:
        why = ("the room the entries took is reused by the cache's next entries; run clear again later to give it "
               "back to the file system")
    return f"the database was not compacted ({exc}): {why}"


def _reclaim(db: sqlite3.Connection, directory: str) -> str | None:
    """Rewrite the database compactly and fold its log back in; what stopped that (None when nothing did). Damage
    VACUUM meets, reading every page, is raised: it is the caller's to handle."""
    try:
        db.execute("VACUUM")
        busy = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
    except sqlite3.OperationalError as exc:  # another process holds the write lock; a full disk (VACUUM copies)
        if is_damage(exc):
            raise
        return _not_compacted(directory, exc)
    if busy:
        return ("the write-ahead log was not folded back: another process is reading the cache; it shrinks "
                "when that process next writes, or run clear again later")
    return None


#: Statements the entries are deleted in when a caller follows the progress: ranges of keys, one after another.
_DELETE_STEPS = 100


def _delete_entries(db: sqlite3.Connection, where: str, args: tuple, progress: Any) -> int:
    """Delete the entries ``where`` selects (all when ""); how many. With ``progress``, in ``_DELETE_STEPS`` ranges
    of keys (a key is the row's id: a range is read straight off the table), calling ``progress(deleted, total)``
    after each."""
    if progress is None:
        return db.execute(f"DELETE FROM entries{where}", args).rowcount
    total = db.execute(f"SELECT COALESCE(SUM(entries), 0) FROM spaces{where}", args).fetchone()[0]
    low, high = db.execute(f"SELECT MIN(k), MAX(k) FROM entries{where}", args).fetchone()
    deleted = 0
    if low is not None:
        step = (high - low) // _DELETE_STEPS + 1
        for start in range(low, high + 1, step):
            deleted += db.execute(f"DELETE FROM entries{where}{' AND' if where else ' WHERE'} k BETWEEN ? AND ?",
                                  (*args, start, min(start + step - 1, high))).rowcount
            progress(deleted, total)
    return deleted


def clear_cache(directory: str | os.PathLike, ns: int | None = None, *, timeout: float = 10.0,
                progress: Any = None) -> dict[str, Any]:
    """Delete every entry of the cache in ``directory`` (or of namespace ``ns`` only) and reclaim the space.

    The entries go in one transaction: a process using the cache meanwhile
    misses afterwards and computes them again. Namespaces are kept, emptied
    (see the module's docstring). Then the file is compacted; when another
    process holds the database past ``timeout`` seconds, the result's
    ``note`` says what was not done and ``reclaimed`` is False (the entries
    are gone all the same). ``progress(deleted, total)``, when given, is
    called as the entries go (about 100 times), for a progress bar.

    Returns ``directory``, ``ns``, ``namespaces`` (how many were emptied),
    ``entries`` and ``bytes`` (of entries removed), ``file_bytes_before``,
    ``file_bytes_after``, ``reclaimed`` and ``note``. Raises
    FileNotFoundError where there is no cache, ValueError for a file that is
    not one (left as it is) or an ``ns`` it does not hold, TimeoutError
    when another process keeps the write lock past ``timeout``, and
    ``FileError`` (an OSError) when the disk is too full to delete them.

    >>> import tempfile
    >>> from readers import cached, from_sequence
    >>> with tempfile.TemporaryDirectory() as d:
    ...     r = cached(from_sequence([-1, 2, -3]), abs, directory=d)
    ...     _ = list(r())
    ...     done = clear_cache(d)
    ...     left = cache_info(d)["entries"]
    ...     r.store.close()
    >>> done["entries"], done["reclaimed"], left
    (3, True, 0)

    See Also: cache_info, cleared_line
    """
    if ns is not None and (not isinstance(ns, int) or isinstance(ns, bool)):
        raise BadType(f"clear_cache: ns must be a namespace's number (see cache_info), got {type(ns).__name__} {ns!r}")
    path = os.path.abspath(directory)
    before = _file_bytes(path)
    db, damage = _open(path, "clear leaves alone what it cannot read as a readerkit cache; delete that file yourself "
                             "if nothing else uses it, or give another directory")
    for file in aside_files(path):  # copies of damaged databases: nothing reads them
        with contextlib.suppress(FileNotFoundError):
            os.unlink(file)
    if db is None:
        return _clear_damaged(path, ns, damage, before)
    try:
        db.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        where, args = ("", ()) if ns is None else (" WHERE ns = ?", (ns,))
        try:
            with transaction(db):
                spaces = db.execute(f"SELECT name, bytes FROM spaces{where}", args).fetchall()
                names = [name for name, _ in spaces]
                if ns is not None and not names:
                    known = [n for (n,) in db.execute("SELECT ns FROM spaces ORDER BY ns")]
                    raise BadValue(f"the cache in {path} has no namespace {ns}; it has {known or 'none'} "
                                   f"(see `python cli.py cache info {directory}`)")
                entries = _delete_entries(db, where, args, progress)
                # the triggers zeroed entries and bytes; the compute record goes with what it was a record of
                db.execute(f"UPDATE spaces SET computed = 0, compute_s = 0{where}", args)
                if ns is None:  # the whole cache: its bound goes too (a process that gives one sets it again)
                    db.execute("DELETE FROM meta WHERE key = 'disk_bytes'")
        except sqlite3.DatabaseError as exc:  # (the write lock is held from BEGIN IMMEDIATE to the commit)
            if is_damage(exc):  # damaged in a page _open did not look at: the deletion reads them all
                db.close()
                db = None
                return _clear_damaged(path, ns, str(exc), before)
            if is_full(exc):  # the deletion writes the pages it changes to the log first: it needs room too
                raise FileError(f"cannot clear the cache in {path}: the disk is full ({free_space(path)}; {exc}), and "
                                "deleting entries first writes the pages it changes to the database's log; nothing "
                                "was deleted: free some space and run clear again (or, if no process uses the "
                                "cache, delete the folder)") from None
            if "locked" not in str(exc):
                raise
            raise TimedOut(f"another process has held the write lock of the cache in {path} for over {timeout:g} s "
                           f"({exc}): try again when it is done") from None
        # after the commit no row says a dense file holds anything; unlinked, not truncated, under a process
        # that maps it (a process making one again gets a new, empty file)
        for file in dense_files(path) if ns is None else [f for name in names for f in dense_files(path, name)]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(file)
        try:
            note = _reclaim(db, path)
        except sqlite3.DatabaseError as exc:  # damaged where the deletion did not read (VACUUM reads every page)
            if not is_damage(exc):
                raise
            db.close()
            db = None
            return _clear_damaged(path, ns, str(exc), before)
    finally:
        if db is not None:
            db.close()
    return {"directory": path, "ns": ns, "namespaces": len(names), "entries": entries,
            "bytes": sum(n for _, n in spaces),
            "file_bytes_before": before, "file_bytes_after": _file_bytes(path), "reclaimed": note is None,
            "note": note}


def _clear_damaged(path: str, ns: int | None, damage: str, before: int) -> dict[str, Any]:
    """``clear_cache`` on a damaged database: its files and the dense files deleted (its namespaces with them,
    all of them even with ``ns``: what they hold cannot be read), a new one made when the cache is next used. No
    process opens the folder meanwhile (``folder_lock``): it would find the log left of a database deleted."""
    with folder_lock(path, exclusive=True):
        for file in [os.path.join(path, FILE + suffix) for suffix in _SUFFIXES] + dense_files(path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(file)
    return {"directory": path, "ns": ns, "namespaces": 0, "entries": 0, "bytes": 0, "file_bytes_before": before,
            "file_bytes_after": _file_bytes(path), "reclaimed": True,
            "note": f"the database was damaged ({damage}), so its files were deleted, with every namespace; a new "
                    "one is made when the cache is next used"}


def _mib(n: int) -> str:
    return f"{n / _MIB:,.2f}"


def info_lines(info: dict[str, Any]) -> list[str]:
    """``cache_info``'s figures as a table: a line per namespace, then the totals and the limit (and, where every
    page was read, that none is damaged).

    >>> info = {"directory": "/c", "file_bytes": 3 << 20, "limit": None, "entries": 2, "bytes": 1 << 20,
    ...         "namespaces": [{"ns": 1, "function": "f 0123", "version": None, "data": ["from_arrays(2 rows)"],
    ...                         "entries": 2, "bytes": 1 << 20, "mean_compute_s": 0.0125, "created": 0.0}]}
    >>> print("\\n".join(info_lines(info)))
    cache in /c: 1 namespace, 3.00 MiB on disk
      ns  function  version  entries   MiB  ms/entry  created           data
       1  f 0123    -              2  1.00    12.500  ...  from_arrays(2 rows)
    total                          2  1.00
    limit: none (no disk_bytes given)
    """
    if info.get("damaged") is not None:
        return [f"cache in {info['directory']}: damaged ({info['damaged']}), {_mib(info['file_bytes'])} MiB on disk",
                "it serves no entry: the next process that uses it sets it aside and starts a new one; "
                f"`python cli.py cache clear {info['directory']}` deletes it now"]
    spaces = info["namespaces"]
    rows = [(str(s["ns"]), s["function"] or "?", "-" if s["version"] is None else s["version"], f"{s['entries']:,}",
             _mib(s["bytes"]), "-" if s["mean_compute_s"] is None else f"{s['mean_compute_s'] * 1e3:.3f}",
             time.strftime("%Y-%m-%d %H:%M", time.localtime(s["created"])), " > ".join(s["data"] or ()))
            for s in spaces]
    head = ("ns", "function", "version", "entries", "MiB", "ms/entry", "created", "data")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    right = {0, 3, 4, 5}

    def line(cells: tuple) -> str:
        shown = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))]
        return "  " + "  ".join(shown[:-1]) + "  " + cells[-1]

    lead = widths[0] + widths[1] + widths[2] + 8  # "  " before each of the first three columns and after the third
    total = "total".ljust(lead) + f"{info['entries']:,}".rjust(widths[3]) + "  " + _mib(info["bytes"]).rjust(widths[4])
    limit = info["limit"]
    aside = info.get("set_aside") or []
    return [f"cache in {info['directory']}: {len(spaces)} namespace{'' if len(spaces) == 1 else 's'}, "
            f"{_mib(info['file_bytes'])} MiB on disk",
            line(head), *map(line, rows), total,
            "limit: none (no disk_bytes given)" if limit is None else f"limit: {_mib(limit)} MiB (disk_bytes={limit:,})",
            *(["pages: every page read, none damaged"] if info.get("pages_checked") else []),
            *([f"set aside: {len(aside)} file{'' if len(aside) == 1 else 's'} of damaged databases (`python cli.py "
               f"cache clear {info['directory']}` deletes them)"] if aside else [])]


def cleared_line(result: dict[str, Any]) -> str:
    """``clear_cache``'s result in a sentence.

    >>> print(cleared_line({"directory": "/c", "ns": None, "namespaces": 2, "entries": 1200, "bytes": 5 << 20,
    ...                     "file_bytes_before": 6 << 20, "file_bytes_after": 1 << 15, "reclaimed": True,
    ...                     "note": None}))
    cleared /c: 1,200 entries (5.00 MiB) from 2 namespaces; the files went from 6.00 to 0.03 MiB
    """
    which = f"namespace {result['ns']}" if result["ns"] is not None else \
        f"{result['namespaces']} namespace{'' if result['namespaces'] == 1 else 's'}"
    n = result["entries"]
    said = (f"cleared {result['directory']}: {n:,} entr{'y' if n == 1 else 'ies'} ({_mib(result['bytes'])} MiB) from {which}; "
            f"the files went from {_mib(result['file_bytes_before'])} to {_mib(result['file_bytes_after'])} MiB")
    return said if result["note"] is None else f"{said}; {result['note']}"
