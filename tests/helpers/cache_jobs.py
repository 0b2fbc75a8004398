"""Module-level jobs for tests/readers/caching/test_disk.py, run in other processes (spawned or forked), and its
helpers.

A spawned process imports what it runs, so whatever a test hands to a
``spawn`` process lives here. A job reports a wrong value by raising (the
process exits non-zero, the traceback on its stderr); every wait in it is
bounded by ``WAIT``.
"""
from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from typing import Any

import numpy as np

from readers.caching.database import open_database, set_aside_cache
from readers.caching.disk import DiskStore, row_keys
from readers.storage.sqlite import transaction
from readers.testing import assert_same
from tests.helpers.child_processes import exit_codes

__all__ = ["ABOUT", "FILE", "ID_MASK", "PAUSE", "SPACE", "WAIT", "ask", "assert_counters_true", "change",
           "open_in_the_window", "overwrite_page", "put_keys", "read_back", "read_once", "run_all", "set_aside_slowly",
           "share", "stored", "use_inherited", "value", "write_until_killed"]

SPACE = "tests.helpers.cache_jobs"
ABOUT = {"func": "tests.helpers.cache_jobs.value"}
WAIT = 10.0  # seconds: a bound for another process to show up or finish, never a measure of speed
PAUSE = 1.0  # seconds a set-aside waits, between its renames, for another process to open the folder
FILE = "cache.sqlite3"  # the one name a cache folder's database has
ID_MASK = (1 << 40) - 1  # a row key's sample ID


def ask(directory: Any, sql: str, *args: Any) -> list:
    """Rows of ``sql``, asked of the database file itself (not through a store)."""
    with contextlib.closing(sqlite3.connect(os.path.join(directory, FILE), timeout=WAIT)) as db:
        return db.execute(sql, args).fetchall()


def change(directory: Any, sql: str, *args: Any) -> None:
    """Run ``sql`` on the database file itself, committed: damage done behind the stores' backs."""
    with contextlib.closing(sqlite3.connect(os.path.join(directory, FILE), timeout=WAIT)) as db, db:
        db.execute(sql, args)


def overwrite_page(directory: Any, table: str = "entries", last_leaf: bool = False) -> int:
    """Write garbage over the root page of ``table`` in the database file (checkpointed first: no store may have
    it open), as the fault hunt of issue 27 wrote over a page; return the page's number (from 1, as sqlite counts).
    Every lookup in the table meets it. ``last_leaf``: over the table's last leaf instead (the table must span
    more than one page), which only what reads the table's end meets, or ``PRAGMA quick_check``."""
    path = os.path.join(directory, FILE)
    with contextlib.closing(sqlite3.connect(path, timeout=WAIT)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = db.execute("PRAGMA page_size").fetchone()[0]
        page = db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    with open(path, "r+b") as file:
        if last_leaf:
            page = _last_leaf(file, size, page, table)
        file.seek((page - 1) * size)
        file.write(bytes([0xA5]) * size)
    return page


def _last_leaf(file: Any, size: int, page: int, table: str) -> int:
    """The last leaf of the b-tree whose root is ``page``: down its interior pages' right-most children (an
    interior page's header: its kind, 2 or 5, in byte 0, the right-most child in bytes 8 to 11)."""
    root = page
    while True:
        file.seek((page - 1) * size)
        header = file.read(12)
        if header[0] not in (2, 5):
            break
        page = int.from_bytes(header[8:12], "big")
    if page == root:
        raise AssertionError(f"the table {table} is one page: it has no leaf other than its root")
    return page


def stored(directory: Any) -> int:
    """How many entries the database holds (0 before it exists)."""
    return ask(directory, "SELECT count(*) FROM entries")[0][0] if os.path.exists(os.path.join(directory, FILE)) else 0


def assert_counters_true(directory: Any) -> tuple[int, int]:
    """The trigger-kept counters in ``spaces`` equal what ``entries`` holds; return (entries, bytes)."""
    real = ask(directory, "SELECT count(*), coalesce(sum(size), 0) FROM entries")[0]
    counted = ask(directory, "SELECT coalesce(sum(entries), 0), coalesce(sum(bytes), 0) FROM spaces")[0]
    assert counted == real, f"spaces count {counted} (entries, bytes), the entries table holds {real}"
    wrong = ask(directory, "SELECT count(*) FROM entries WHERE v IS NOT NULL AND length(v) != size")[0][0]
    assert wrong == 0, f"{wrong} entries' size is not their blob's length"
    return counted


class Gate:
    """A start line for ``n`` processes: each ``wait``s at it, and all go once the parent has seen all arrive
    (``open``). Made of a semaphore and an event, not a ``multiprocessing.Barrier``, whose shared counter maps
    an arena of /dev/shm into the parent for good, which the worker pool's leak checks would see."""

    def __init__(self, ctx: Any, n: int):
        self.n, self.arrived, self.go = n, ctx.Semaphore(0), ctx.Event()

    def wait(self, timeout: float) -> None:
        self.arrived.release()
        if not self.go.wait(timeout):
            raise TimeoutError(f"the other processes did not reach the start line within {timeout} s")

    def open(self, timeout: float) -> None:
        for _ in range(self.n):
            if not self.arrived.acquire(timeout=timeout):
                break  # one failed before the line: its exit code says so
        self.go.set()


def run_all(processes: list, timeout: float, gate: Gate | None = None) -> None:
    """Start ``processes`` (and open ``gate`` when all have reached it), wait for them (each at most ``timeout``
    s); fail unless each exits 0. None is left."""
    codes = exit_codes(processes, timeout, gate)
    assert codes == [0] * len(processes), f"exit codes {codes}: a job failed (its traceback is above)"


def value(k: int) -> tuple:
    """The entry of sample ID ``k``: its size and contents both depend on ``k``."""
    return np.full(k % 61 + 1, k, dtype=np.int64), f"entry {k}"


def put_keys(store: DiskStore, ns: int, keys: Any, make=value) -> tuple[list[int], list[str | None]]:
    """Put ``make(key)`` under each key; return their row keys and names."""
    ks, names = row_keys(ns, list(keys))
    for k, name, key in zip(ks, names, keys):
        store.put(k, ns, name, make(key), cost=0.001)
    return ks, names


def read_back(store: DiskStore, ns: int, keys: Any, wait: float = 0.0) -> None:
    """Check that each key reads back as ``value(key)``, waiting up to ``wait`` seconds for all to be there."""
    keys = list(keys)
    ks, names = row_keys(ns, keys)
    deadline = time.monotonic() + wait
    while True:
        found, corrupt = store.get_many(ks, names)
        if corrupt:
            raise AssertionError(f"{len(corrupt)} corrupt entries, the first row {corrupt[0]}")
        if len(found) == len(ks):
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"only {len(found)} of {len(ks)} entries readable after {wait} s")
        time.sleep(0.02)
    for key, k in zip(keys, ks):
        assert_same(found[k], value(key), f"entry {key}")


def share(directory: str, mine: range, everyone: range, gate: Any) -> None:
    """Write ``mine`` while another process writes its keys, then read all of ``everyone`` back."""
    store = DiskStore(directory, interval=0.02)
    try:
        ns = store.space(SPACE, ABOUT)
        gate.wait(WAIT)  # both start writing together
        for lo in range(mine.start, mine.stop, 50):
            put_keys(store, ns, range(lo, min(lo + 50, mine.stop)))
            read_back(store, ns, range(mine.start, min(lo + 50, mine.stop)))  # reads while writing
        store.flush()
        read_back(store, ns, everyone, wait=WAIT)
    finally:
        store.close()


def write_until_killed(directory: str, marker: str) -> None:
    """Write key after key, committing many small transactions; ``marker`` appears once some are committed.

    Stops by itself after ``WAIT`` seconds (the test kills it long before).
    """
    store = DiskStore(directory, interval=0.002)
    ns = store.space(SPACE, ABOUT)
    deadline, k = time.monotonic() + WAIT, 0
    while time.monotonic() < deadline:
        put_keys(store, ns, range(k, k + 20))
        k += 20
        if k == 200:
            store.flush()
            with open(marker, "w"):
                pass
        time.sleep(0.0005)
    store.close()


def use_inherited(store: DiskStore, ns: int, inherited: range, mine: range) -> None:
    """In a forked child: write ``mine`` through the parent's store object, then read both back."""
    put_keys(store, ns, mine)
    store.flush()
    read_back(store, ns, list(inherited) + list(mine))


def read_once(store: DiskStore, ks: list[int], names: list[str | None]) -> None:
    """In a forked child: one read through the parent's store object."""
    store.get_many(ks, names)


def set_aside_slowly(directory: str, inode: int, window: Any, opened: Any) -> None:
    """Set the damaged database (the file ``inode``) aside with ``set_aside_cache``, pausing after its first rename
    (the log's): ``window`` is set then, and the renames go on once ``opened`` is set or ``PAUSE`` seconds have
    passed. Widens, for issue 27's review (finding 6), the moment in which another process opening the folder
    met a database half set aside."""
    real = os.replace

    def replace(source: str, target: str) -> None:
        try:
            real(source, target)
        finally:
            if not window.is_set():
                window.set()
                opened.wait(PAUSE)  # (a process that must wait for the set-aside to end does not come)

    os.replace = replace
    try:
        if set_aside_cache(directory, inode) is None:
            raise AssertionError(f"the database in {directory} was not set aside: its inode is not {inode}")
    finally:
        os.replace = real


def open_in_the_window(directory: str, window: Any, opened: Any) -> None:
    """Once ``window`` is set, open the cache in ``directory``, set ``opened``, and write a row through the
    connection (into whatever file it opened), as a store would."""
    if not window.wait(WAIT):
        raise TimeoutError(f"the set-aside did not start within {WAIT} s")
    db = open_database(directory)
    try:
        opened.set()
        with transaction(db):
            db.execute("INSERT OR REPLACE INTO meta VALUES ('opened by', ?)", (str(os.getpid()),))
    finally:
        db.close()
