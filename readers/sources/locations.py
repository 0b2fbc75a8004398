"""Where a format reader's files are, and how it opens them: one place, so another file system can come in.

Every format reader (Arrow, Parquet, tar shards, image folders, JSON lines)
turns what the user gave into a sorted list of paths with ``expand_paths``,
and opens each with ``open_file`` or reads its byte ranges with
``read_range``. Nothing else in a reader touches the file system, so a later
backend (fsspec: ``http(s)://``, ``s3://``) replaces these three functions,
not the readers.

``expand_paths`` takes one path, a folder (its files with the given
suffixes, sorted, recursively), a glob (``data/*.parquet``), brace patterns
as webdataset writes them (``shard-{000000..000099}.tar``, ``{train,test}``)
or a list of any of these. What matches nothing is an error naming it.
"""
from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable, Sequence
from typing import IO

from readers.errors import BadType, MissingFile

__all__ = ["expand_braces", "expand_paths", "open_file", "read_range"]

_BRACE = re.compile(r"\{([^{}]*)\}")
_RANGE = re.compile(r"^(\d+)\.\.(\d+)$")


def expand_braces(pattern: str) -> list[str]:
    """The strings a brace pattern stands for, in order: ``{a,b}`` alternatives and ``{000..003}`` ranges
    (zero-padded to the width of the first bound), as webdataset and the shell write them.

    >>> expand_braces("shard-{000..002}.tar")
    ['shard-000.tar', 'shard-001.tar', 'shard-002.tar']
    >>> expand_braces("{train,test}/{0..1}.tar")
    ['train/0.tar', 'train/1.tar', 'test/0.tar', 'test/1.tar']
    >>> expand_braces("plain.tar")
    ['plain.tar']
    """
    found = _BRACE.search(pattern)
    if found is None:
        return [pattern]
    head, tail, body = pattern[:found.start()], pattern[found.end():], found.group(1)
    numbers = _RANGE.match(body)
    if numbers:
        first, last = numbers.groups()
        width = len(first) if first.startswith("0") else 0
        step = 1 if int(last) >= int(first) else -1
        choices = [str(k).zfill(width) for k in range(int(first), int(last) + step, step)]
    else:
        choices = body.split(",")
    return [expanded for choice in choices for expanded in expand_braces(head + choice + tail)]


def _files_under(folder: str, suffixes: Sequence[str]) -> list[str]:
    found = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found += [os.path.join(root, n) for n in names
                  if not n.startswith(".") and (not suffixes or n.lower().endswith(tuple(suffixes)))]
    return sorted(found)


def expand_paths(paths: str | os.PathLike | Iterable[str | os.PathLike], *, suffixes: Sequence[str] = (),
                 what: str = "data files") -> list[str]:
    """The files ``paths`` names, in order: each of one path, a folder (its files ending in one of
    ``suffixes``, sorted, in sub-folders too), a glob or a brace pattern, or a list of these.
    A name that matches no file raises ``MissingFile`` naming it and ``what`` was looked for.

    >>> import tempfile, pathlib
    >>> d = tempfile.mkdtemp()
    >>> for n in ["b.parquet", "a.parquet", "notes.txt"]:
    ...     _ = (pathlib.Path(d) / n).write_text("x")
    >>> [os.path.basename(p) for p in expand_paths(d, suffixes=[".parquet"])]
    ['a.parquet', 'b.parquet']
    >>> [os.path.basename(p) for p in expand_paths(os.path.join(d, "{a,b}.parquet"))]
    ['a.parquet', 'b.parquet']
    >>> expand_paths(os.path.join(d, "*.arrow"), what="Arrow files")
    Traceback (most recent call last):
    ...
    readers.errors.MissingFile: .../*.arrow: no Arrow files there: check the path, or give the files themselves
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    elif not isinstance(paths, Iterable):
        raise BadType(f"paths={paths!r}: give a path, a folder, a glob or a list of them")
    out: list[str] = []
    for given in paths:
        if not isinstance(given, (str, os.PathLike)):
            raise BadType(f"paths: {given!r} is not a path: give str or os.PathLike items")
        given = os.fspath(given)
        for name in expand_braces(given):
            if os.path.isdir(name):
                matched = _files_under(name, suffixes)
            elif glob.has_magic(name):
                matched = sorted(p for p in glob.glob(name) if os.path.isfile(p))
            else:
                matched = [name] if os.path.isfile(name) else []
            if not matched:
                raise MissingFile(f"{name}: no {what} there: check the path, or give the files themselves")
            out += matched
    return out


def open_file(path: str, mode: str = "rb") -> IO:
    """Open ``path`` for a reader (binary by default): the one place a format reader opens a file.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile(suffix=".bin") as f:
    ...     _ = f.write(b"abc"); f.flush()
    ...     with open_file(f.name) as g:
    ...         g.read()
    b'abc'
    """
    try:
        return open(path, mode)
    except FileNotFoundError:
        raise MissingFile(f"{path}: no such file: check the path") from None


def read_range(path: str, start: int, length: int) -> bytes:
    """``length`` bytes of ``path`` from byte ``start`` (fewer at its end): a byte range, as a remote store serves.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile() as f:
    ...     _ = f.write(b"0123456789"); f.flush()
    ...     read_range(f.name, 3, 4)
    b'3456'
    """
    with open_file(path) as f:
        f.seek(start)
        return f.read(length)
