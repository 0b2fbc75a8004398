"""`python cli.py cache info|clear DIR` (train.commands.cache_folders): tables, --json, confirmation, clean refusals."""
from __future__ import annotations

import json
import pathlib
import re
import sqlite3
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

import readers
from cli import main
from readers.caching import admin
from readers.caching.admin import cache_info
from tests.helpers import paths as _paths
from tests.helpers.cache_jobs import overwrite_page

ROOT = _paths.ROOT


def halve(entry):
    return entry[0] / 2


def tag(word):
    return "#" + word


@pytest.fixture
def cache_dir(tmp_path):
    """A cache of two namespaces: 6 entries of halve (a dense file), 3 of tag, version "2", with a limit."""
    folder = tmp_path / "cache"
    for r in (readers.cached(readers.from_arrays(np.arange(12.0).reshape(6, 2)), halve, directory=folder),
              readers.cached(readers.from_sequence(["a", "b", "c"]), tag, directory=folder, version="2",
                             disk_bytes=50 << 20)):
        list(r())
        r.store.close()
    return folder


def run(*args, stdin=None):
    return CliRunner().invoke(main, ["cache", *map(str, args)], input=stdin)


def test_cli_cache_info_prints_a_line_per_namespace_and_the_totals(cache_dir):
    result = run("info", cache_dir)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert re.fullmatch(rf"cache in {re.escape(str(cache_dir))}: 2 namespaces, \d+\.\d\d MiB on disk", lines[0])
    assert lines[1].split() == ["ns", "function", "version", "entries", "MiB", "ms/entry", "created", "data"]
    assert re.fullmatch(r"   1  halve [0-9a-f]{16}  -  +6  0\.00 +\d+\.\d{3}  \d{4}-\d\d-\d\d \d\d:\d\d  "
                        r"from_arrays\(6 rows: float64\[2\]\)", lines[2]), lines[2]
    assert re.fullmatch(r"   2  tag [0-9a-f]{16} +2  +3  0\.00 +\d+\.\d{3}  [-\d: ]+  from_sequence\(list of 3\)",
                        lines[3]), lines[3]
    assert re.fullmatch(r"total +9  0\.00", lines[4]) and lines[4].index("9") == lines[2].index("6")
    assert lines[5:] == ["limit: 50.00 MiB (disk_bytes=52,428,800)"]


def test_cli_cache_info_json_is_cache_info(cache_dir):
    result = run("info", "--json", cache_dir)
    assert result.exit_code == 0, result.output
    shown, info = json.loads(result.stdout), cache_info(cache_dir)
    assert {**shown, "file_bytes": 0} == {**info, "file_bytes": 0}  # (the files change as connections close)
    assert [s["entries"] for s in shown["namespaces"]] == [6, 3]


def test_cli_cache_clear_asks_first_and_keeps_the_cache_on_no(cache_dir):
    result = run("clear", cache_dir, stdin="n\n")
    assert result.exit_code == 1
    assert result.output == f"delete 9 entries (0.00 MiB) from {cache_dir}? [y/N]: n\nAborted!\n"
    assert cache_info(cache_dir)["entries"] == 9


def test_cli_cache_clear_on_yes_removes_the_entries(cache_dir):
    result = run("clear", cache_dir, stdin="y\n")
    assert result.exit_code == 0, result.output
    question, said = result.stdout.splitlines()
    assert question == f"delete 9 entries (0.00 MiB) from {cache_dir}? [y/N]: y"
    assert re.fullmatch(rf"cleared {re.escape(str(cache_dir))}: 9 entries \(0\.00 MiB\) from 2 namespaces; "
                        r"the files went from \d+\.\d\d to \d+\.\d\d MiB", said), said
    assert cache_info(cache_dir)["entries"] == 0


@pytest.mark.parametrize("flag", ["--yes", "-y"])
def test_cli_cache_clear_yes_does_not_ask(cache_dir, flag):
    result = run("clear", flag, "--ns", "2", cache_dir)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"cleared {cache_dir}: 3 entries (0.00 MiB) from namespace 2; ")
    assert [s["entries"] for s in cache_info(cache_dir)["namespaces"]] == [6, 0]


def test_cli_cache_clear_asks_about_one_namespace(cache_dir):
    result = run("clear", "--ns", "1", cache_dir, stdin="y\n")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"delete 6 entries (0.00 MiB) from {cache_dir} (namespace 1)? [y/N]: y\n"
                                    f"cleared {cache_dir}: 6 entries ")


def _not_a_cache(folder: pathlib.Path) -> pathlib.Path:
    folder.mkdir()
    (folder / "cache.sqlite3").write_text("my notes\n")
    return folder


@pytest.mark.parametrize("args, message", [
    # (issue 27, 9b: a folder that is not there was said to hold no readerkit cache)
    (["info", "{missing}"], "Error: {missing} does not exist: check the folder's path\n"),
    (["clear", "-y", "{missing}"], "Error: {missing} does not exist: check the folder's path\n"),
    (["clear", "{missing}"], "Error: {missing} does not exist: check the folder's path\n"),
    (["info", "{notes}"], "Error: {notes}/cache.sqlite3 is not a readerkit cache (file is not "
                          "a database): check the folder, or delete that file if nothing else uses it\n"),
    (["clear", "-y", "{notes}"], "Error: {notes}/cache.sqlite3 is not a readerkit cache (file "
                                 "is not a database): clear leaves alone what it cannot read as a readerkit cache; "
                                 "delete that file yourself if nothing else uses it, or give another directory\n"),
    (["clear", "--ns", "7", "{cache}"], "Error: the cache in {cache} has no namespace 7; it has [1, 2] (see "
                                        "`python cli.py cache info {cache}`)\n"),
], ids=["info-missing", "clear-missing", "clear-missing-unasked", "info-not-a-cache", "clear-not-a-cache",
        "clear-unknown-namespace"])
def test_cli_cache_refusals_exit_1_with_one_line(cache_dir, tmp_path, args, message):
    places = {"missing": tmp_path / "nowhere", "notes": _not_a_cache(tmp_path / "notes"), "cache": cache_dir}
    result = run(*[a.format(**places) for a in args])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert result.output == message.format(**places)
    assert not (tmp_path / "nowhere").exists() and (tmp_path / "notes" / "cache.sqlite3").read_text() == "my notes\n"
    assert cache_info(cache_dir)["entries"] == 9


def test_cli_cache_info_runs_as_its_own_process(cache_dir):
    proc = subprocess.run([sys.executable, "cli.py", "cache", "info", str(cache_dir)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith(f"cache in {cache_dir}: 2 namespaces, ")
    assert proc.stdout.splitlines()[-1] == "limit: 50.00 MiB (disk_bytes=52,428,800)"


def test_cli_cache_info_and_clear_on_a_damaged_database(cache_dir):
    # Regression (issue 27, 14): info reported the entries of a damaged database and `clear --yes`, the remedy
    # everything advises, crashed with a traceback (sqlite3.DatabaseError: database disk image is malformed)
    overwrite_page(cache_dir)
    info = run("info", cache_dir)
    assert info.exit_code == 0, info.output
    assert re.fullmatch(rf"cache in {re.escape(str(cache_dir))}: damaged \(.+\), \d+\.\d\d MiB on disk\n"
                        r"it serves no entry: the next process that uses it sets it aside and starts a new one; "
                        rf"`python cli.py cache clear {re.escape(str(cache_dir))}` deletes it now\n", info.output)
    cleared = run("clear", "--yes", cache_dir)
    assert cleared.exit_code == 0 and cleared.exception is None, cleared.output
    assert re.fullmatch(rf"cleared {re.escape(str(cache_dir))}: 0 entries \(0\.00 MiB\) from 0 namespaces; the files "
                        r"went from \d+\.\d\d to 0\.00 MiB; the database was damaged \(.+\), so its files were "
                        r"deleted, with every namespace; a new one is made when the cache is next used\n",
                        cleared.output)
    assert list(cache_dir.iterdir()) == []


def test_cli_cache_info_reads_every_page_only_with_check_pages(tmp_path, monkeypatch):
    # Regression (review of issue 27, 11): `cache info` ran PRAGMA quick_check over every page (about a second a
    # GiB), with no way to skip it; damage past the tables' first pages is now found with --check-pages, and
    # `cache clear` still empties such a folder
    folder = tmp_path / "cache"
    r = readers.cached(readers.from_sequence([f"word {i}" for i in range(2000)]), tag, directory=folder)
    list(r())
    r.store.close()
    overwrite_page(folder, "entries", last_leaf=True)
    checks = []
    real = admin.check_pages
    monkeypatch.setattr(admin, "check_pages", lambda db: (checks.append(db), real(db))[1])
    plain = run("info", folder)
    assert plain.exit_code == 0 and checks == [], plain.output
    assert plain.stdout.startswith(f"cache in {folder}: 1 namespace, ")
    checked = run("info", "--check-pages", folder)
    assert checked.exit_code == 0 and len(checks) == 1, checked.output
    assert re.fullmatch(rf"cache in {re.escape(str(folder))}: damaged \(.+\), \d+\.\d\d MiB on disk\n"
                        r"it serves no entry: .*\n", checked.output)
    cleared = run("clear", "--yes", folder)
    assert cleared.exit_code == 0 and len(checks) == 1, cleared.output
    assert "; the database was damaged (" in cleared.stdout and list(folder.iterdir()) == []


def test_cli_cache_info_check_pages_on_a_whole_cache_says_so(cache_dir):
    result = run("info", "--check-pages", cache_dir)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-2:] == ["limit: 50.00 MiB (disk_bytes=52,428,800)",
                                               "pages: every page read, none damaged"]


def test_cli_cache_on_a_cache_whose_header_is_overwritten_treats_it_as_damage(cache_dir):
    """Trial of issue 27, problem 7: "not a readerkit cache (file is not a database)", and clear left the file to the
    user to delete, unsaid; the folder's dense file and the cache's tables in its pages say whose it is."""
    path = cache_dir / "cache.sqlite3"
    path.write_bytes(b"\xa5" * 4096 + path.read_bytes()[4096:])
    info = run("info", cache_dir)
    assert info.exit_code == 0 and info.output.startswith(f"cache in {cache_dir}: damaged (its header is damaged: "
                                                          "file is not a database), "), info.output
    cleared = run("clear", "--yes", cache_dir)
    assert cleared.exit_code == 0 and "the database was damaged (its header is damaged" in cleared.output
    assert list(cache_dir.iterdir()) == []


def test_cli_cache_clear_on_a_disk_too_full_to_delete_is_one_line(cache_dir, monkeypatch):
    """Trial of issue 27, problem 8: a raw sqlite3.OperationalError traceback ("database or disk is full")."""
    real = admin._open

    def full_at_commit(*args, **kwargs):
        db, damage = real(*args, **kwargs)

        class Full:
            def execute(self, sql, *more):
                if sql.startswith("COMMIT"):
                    raise sqlite3.OperationalError("database or disk is full")
                return db.execute(sql, *more)

            def __getattr__(self, name):
                return getattr(db, name)
        return Full(), damage

    monkeypatch.setattr(admin, "_open", full_at_commit)
    result = run("clear", "--yes", cache_dir)
    assert result.exit_code == 1 and len(result.output.splitlines()) == 1, result.output
    assert result.output.startswith(f"Error: cannot clear the cache in {cache_dir}: the disk is full (")
