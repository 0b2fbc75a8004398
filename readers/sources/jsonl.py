"""jsonl: JSON lines files (one JSON value a line) as an indexed reader, through an index of line offsets.

The first use of the reader reads each file once, in large blocks, to find
where its lines start and end; that index (numpy arrays, 16 bytes a line)
and each file's SHA-256, taken in the same pass, stay with the reader, and
travel with it into worker processes. Entry i then reads line i alone, so a
global shuffle, a shard or a batch reads only the lines it needs. Empty lines
(a file's last newline, a blank line between records) are no entries;
a line that does not parse raises ``JsonlError`` naming its file and line.

A path may be a URL (``http(s)://``, ``s3://``, through fsspec): the index is
built in one streamed pass over each object, then a line is one byte-range
request and a batch's lines of one object are few (``read_ranges`` merges
close ones). Each file's ``stat`` taken while indexing goes with the index, and
every read compares it with the file's now: a file that changed is refused
(``FileChanged``, naming it). Messages show a URL through ``redact``.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from readers.digests import hasher
from readers.errors import BadType, BadValue
from readers.plugins.pairs import mark_roles, parse_columns
from readers.sources.locations import (
    Stat,
    expand_paths,
    is_url,
    open_file,
    read_range,
    read_ranges,
    redact,
    stat,
)
from readers.stage import IndexedReader

__all__ = ["Jsonl", "JsonlError", "LineIndex", "SUFFIXES", "from_data_dir", "jsonl", "line_index"]

#: The files a folder given as ``path`` contributes.
SUFFIXES = (".jsonl", ".ndjson")
#: Bytes read at a time while indexing.
BLOCK = 1 << 24
#: A gather reads a file's lines in one range when it spans at most this many times their bytes (or 64 KiB).
SPAN = 4


class JsonlError(BadValue):
    """A line that does not parse, or lacks a field asked for: the message names the file and line."""


class LineIndex:
    """Where each non-empty line of some files is: ``starts`` and ``ends`` (byte offsets, the end before the
    newline) and, per file, ``bounds`` (file k holds entries ``bounds[k]:bounds[k + 1]``), its SHA-256 and its
    ``stat`` when indexed (so a read can tell that it changed)."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray, bounds: np.ndarray, digests: list[str],
                 stats: list[Stat] | None = None):
        self.starts, self.ends, self.bounds, self.digests = starts, ends, bounds, digests
        self.stats: list[Stat | None] = list(stats) if stats is not None else [None] * len(digests)

    def __len__(self) -> int:
        return len(self.starts)

    def file_of(self, indices: np.ndarray) -> np.ndarray:
        """Which file each entry of ``indices`` is in."""
        return np.searchsorted(self.bounds, indices, side="right") - 1


def _scan(path: str) -> tuple[np.ndarray, np.ndarray, str, Stat]:
    """(starts, ends, SHA-256, stat) of the non-empty lines of one file, read once in blocks; a line ending in
    \\r\\n (Windows) ends before its \\r."""
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    sha = hashlib.sha256()
    begin = 0  # where the line under way started
    offset = 0
    last = 0  # the byte before this block
    seen = stat(path)
    with open_file(path, seen=seen) as f:
        for block in iter(lambda: f.read(BLOCK), b""):
            sha.update(block)
            data = np.frombuffer(block, np.uint8)
            at = np.flatnonzero(data == 10)
            if len(at):
                before = np.where(at > 0, data[at - 1], last)  # (at - 1 is -1 only where `before` takes `last`)
                newlines = at + offset
                starts.append(np.concatenate(([begin], newlines[:-1] + 1)))
                ends.append(newlines - (before == 13))
                begin = int(newlines[-1]) + 1
            offset += len(block)
            last = int(data[-1])
    if offset > begin:  # a last line without a newline
        starts.append(np.array([begin]))
        ends.append(np.array([offset]))
    start = np.concatenate(starts).astype(np.int64) if starts else np.zeros(0, np.int64)
    end = np.concatenate(ends).astype(np.int64) if ends else np.zeros(0, np.int64)
    keep = end > start
    return start[keep], end[keep], sha.hexdigest(), seen


def line_index(paths: Sequence[str]) -> LineIndex:
    """The ``LineIndex`` of ``paths``' non-empty lines, in order, each file read once.

    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "rows.jsonl")
    >>> _ = open(path, "wb").write(b'{"a": 1}\\n\\n{"a": 22}\\r\\n[3]')
    >>> index = line_index([path])
    >>> len(index), index.starts.tolist(), index.ends.tolist(), index.bounds.tolist()
    (3, [0, 10, 21], [8, 19, 24], [0, 3])
    """
    parts = [_scan(path) for path in paths]
    counts = [len(part[0]) for part in parts]
    bounds = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    starts = np.concatenate([part[0] for part in parts]) if parts else np.zeros(0, np.int64)
    ends = np.concatenate([part[1] for part in parts]) if parts else np.zeros(0, np.int64)
    return LineIndex(starts, ends, bounds, [part[2] for part in parts], [part[3] for part in parts])


def _lines(path: str, index: LineIndex, mine: np.ndarray, k: int) -> Iterator[tuple[int, bytes]]:
    """(i, the bytes of line i) for the sorted entries ``mine`` of file ``k``: a local file opened once, a URL's
    lines fetched as few merged byte ranges at once."""
    starts, ends = index.starts[mine], index.ends[mine]
    if is_url(path):
        texts = read_ranges(path, list(zip(starts.tolist(), (ends - starts).tolist())), seen=index.stats[k])
        yield from zip(mine.tolist(), texts)
        return
    low, high = int(starts.min()), int(ends.max())
    with open_file(path, seen=index.stats[k]) as f:
        if high - low <= max(SPAN * int((ends - starts).sum()), 1 << 16):
            f.seek(low)
            span = f.read(high - low)
            for i, s, e in zip(mine.tolist(), starts.tolist(), ends.tolist()):
                yield i, span[s - low:e - low]
        else:
            for i, s, e in zip(mine.tolist(), starts.tolist(), ends.tolist()):
                f.seek(s)
                yield i, f.read(e - s)


def _line_number(path: str, offset: int) -> int:
    """The 1-based line number of the line starting at byte ``offset`` (read only when reporting an error)."""
    return read_range(path, 0, offset).count(b"\n") + 1


class Jsonl(IndexedReader):
    """JSON lines files as an indexed reader; made by ``jsonl``."""

    name = "jsonl"

    def __init__(self, given: Any, paths: list[str], fields: tuple[str, ...] | None):
        super().__init__()
        self.given, self.paths, self.fields = given, paths, fields
        self._index: LineIndex | None = None

    def index(self) -> LineIndex:
        """The line index, built on first use (one pass over each file)."""
        if self._index is None:
            self._index = line_index(self.paths)
        return self._index

    def __len__(self) -> int:
        return len(self.index())

    def _entry(self, text: bytes, k: int, i: int) -> Any:
        """Entry ``i``, from its line's bytes ``text``, in file ``k``."""
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:  # (its own "line 1" would be this line's: only its column is said)
            raise self._error(k, i, f"is not JSON: {exc.msg} at column {exc.colno}", "fix the line or remove it") from None
        except ValueError as exc:  # bytes that are not UTF-8 (or -16, -32) text
            raise self._error(k, i, f"is not JSON text: {exc}", "fix the line or remove it") from None
        if self.fields is None:
            return value
        if not isinstance(value, dict):
            raise self._error(k, i, f"is a JSON {type(value).__name__}, not an object with fields {list(self.fields)}",
                              "give fields=None to read any JSON value")
        try:
            return tuple(value[name] for name in self.fields)
        except KeyError as exc:
            raise self._error(k, i, f"has no field {exc.args[0]!r} (it has {sorted(value)})",
                              "add the field to the line, or leave it out of fields") from None

    def _error(self, k: int, i: int, what: str, advice: str) -> JsonlError:
        path = self.paths[k]
        line = _line_number(path, int(self.index().starts[i]))
        return JsonlError(f"jsonl: {redact(path)}, line {line} {what}; {advice}")

    def _get(self, i: int) -> Any:
        index = self.index()
        k = int(index.file_of(np.array([i]))[0])
        start, end = int(index.starts[i]), int(index.ends[i])
        return self._entry(read_range(self.paths[k], start, end - start, seen=index.stats[k]), k, i)

    def gather(self, indices: np.ndarray) -> Iterator:
        """The entries at ``indices``, in order: each file of the chunk is opened once and its lines read in
        order of offset (in one range where they lie close together), then parsed as the consumer takes them."""
        index = self.index()
        texts: dict[int, bytes] = {}
        files = index.file_of(indices)
        for k in np.unique(files).tolist():
            texts.update(_lines(self.paths[k], index, np.unique(indices[files == k]), k))
        for i, k in zip(indices.tolist(), files.tolist()):
            yield self._entry(texts[i], k, i)

    def _options(self) -> str:
        opts = repr(_shown(self.given))
        return opts + ("" if self.fields is None else f", fields={list(self.fields)}")

    def identity(self) -> str:
        return self.title().replace(repr(_shown(self.given)), "files", 1)  # the digest says which lines; not where

    def digest(self) -> str:
        """One digest of the files' SHA-256s, in order (taken while indexing)."""
        h = hasher()
        for d in self.index().digests:
            h.update(d.encode() + b";")
        return h.hexdigest()


def _shown(given: Any) -> Any:
    """The paths a reader was given, as its repr shows them: URLs without credentials or query strings."""
    return redact(given) if isinstance(given, str) else [redact(p) for p in given]


def jsonl(path: str | os.PathLike | Iterable[str | os.PathLike], *, fields: Sequence[str] | None = None) -> Jsonl:
    """An indexed reader of JSON lines: one entry per non-empty line, the parsed value, or the tuple of ``fields``.

    ``path`` is one file, a folder (its ``.jsonl`` and ``.ndjson`` files, sorted,
    in sub-folders too), a glob or brace pattern, or a list of these; the files'
    lines follow one another in that order. The files are found when the
    reader is made (a name that matches none raises ``MissingFile`` then) and
    read only when it is used. With ``fields`` (a list of
    names) each line must be an object holding them, and its entry is the
    tuple of their values in that order. An index of where every line is is
    made in one pass over the files the first time the reader is used; after
    that entry i reads line i alone, so a global ``shuffle`` and ``shard``
    read only what they need. A line that does not parse, or lacks a field,
    raises ``JsonlError`` naming the file and line.

    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "rows.jsonl")
    >>> _ = open(path, "w").write('{"text": "a", "label": 0}\\n{"text": "b", "label": 1}\\n')
    >>> r = jsonl(path)
    >>> len(r), r[1]
    (2, {'text': 'b', 'label': 1})
    >>> list(jsonl(path, fields=["label", "text"])())
    [(0, 'a'), (1, 'b')]
    >>> _ = open(path, "a").write('{"text": "c"}\\n{"text": oops}\\n')
    >>> list(jsonl(path, fields=["label", "text"])())
    Traceback (most recent call last):
    ...
    readers.sources.jsonl.JsonlError: jsonl: .../rows.jsonl, line 3 has no field 'label' (it has ['text']); add the field to the line, or leave it out of fields
    >>> jsonl(path)[3]
    Traceback (most recent call last):
    ...
    readers.sources.jsonl.JsonlError: jsonl: .../rows.jsonl, line 4 is not JSON: Expecting value at column 10; fix the line or remove it
    """
    if fields is not None:
        if isinstance(fields, str) or not isinstance(fields, Sequence) or not all(isinstance(f, str) for f in fields):
            raise BadType(f"jsonl: fields must be a list of field names, e.g. fields=['text'] (entries are then "
                          f"1-tuples), got {fields!r}")
        if not fields:
            raise BadValue("jsonl: fields is empty; give the names of the fields to read, or fields=None for the "
                           "whole parsed line")
        fields = tuple(fields)
    given = os.fspath(path) if isinstance(path, os.PathLike) else path
    if not isinstance(given, str):
        given = [os.fspath(p) if isinstance(p, os.PathLike) else p for p in given]
    paths = expand_paths(given, suffixes=SUFFIXES, what="JSON lines files (" + ", ".join(SUFFIXES) + ")")
    return Jsonl(given, paths, fields)


def from_data_dir(data_dir: str | os.PathLike | None = None, data: str | os.PathLike | None = None,
                  columns: Any = None) -> Jsonl:
    """The JSON lines files of a folder (--data-dir FOLDER), one entry (the parsed value) a line.

    The ``jsonl`` reader plugin (``--reader jsonl --data PATH --columns x,label``): ``jsonl(data,
    fields=columns)``, ``--data`` a file, folder, glob or brace pattern (or ``--data-dir FOLDER``).

    >>> from_data_dir(None)
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: the jsonl reader needs the folder of its .jsonl files: give --data-dir FOLDER
    """
    where = data if data is not None else data_dir
    if where is None:
        raise BadValue("the jsonl reader needs the folder of its .jsonl files: give --data-dir FOLDER")
    fields = parse_columns(columns)
    reader = jsonl(where, fields=fields)
    return reader if fields is None else mark_roles(reader, f"field {fields[0]!r}", f"field {fields[-1]!r}", fields)
