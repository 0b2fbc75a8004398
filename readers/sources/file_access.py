"""How the whole-file format readers (tar shards, Parquet, Arrow) open a file: local, by ranges, or from a cache.

A local path opens as it always did. A URL opens as a file of byte-range
reads (``locations.open_file``), or, when the reader was given a
``cache_dir``, as a local copy of the whole object in a ``FileCache``
(downloaded once, by retried ranges, then kept by URL and version; a copy
appears whole or not at all, and the folder stays within its byte bound).
Either way the first ``Stat`` a reader learns of a URL is kept in its
``seen`` dict, and a later open of an object that changed since (another
size or version) raises ``FileChanged`` naming the URL. Local files keep
their own checks (a Parquet footer's row counts, a tar's end blocks).
"""
from __future__ import annotations

import io
import os
import shutil
from typing import IO, Any

from readers.errors import BadType, BadValue
from readers.sources.locations import (
    BLOCK,
    RangeFile,
    Stat,
    check_unchanged,
    is_url,
    open_file,
    stat,
)

__all__ = ["DISK_BYTES", "FileCacheSetting", "download", "open_checked", "whole_file"]

#: The default bound of a ``cache_dir``: the bytes of whole files it keeps on disk.
DISK_BYTES = 16 << 30


class FileCacheSetting:
    """A reader's ``cache_dir`` and its byte bound, checked when the reader is built; the ``FileCache`` itself is
    opened by each process when it first needs it (not pickled), and is not part of the data's identity.

    >>> FileCacheSetting(None, DISK_BYTES, "parquet").folder is None
    True
    >>> FileCacheSetting("/tmp/c", 0, "parquet")
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: parquet: cache_dir_bytes must be an int >= 1 (the bytes cache_dir may hold), got 0
    """

    def __init__(self, folder: Any, max_bytes: Any, where: str, name: str = "cache_dir_bytes"):
        if folder is not None and not isinstance(folder, (str, os.PathLike)):
            raise BadType(f"{where}: cache_dir={folder!r}: give a folder (a local path) or None")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise BadValue(f"{where}: {name} must be an int >= 1 (the bytes cache_dir may hold), got {max_bytes!r}")
        if folder is not None and is_url(os.fspath(folder)):
            raise BadValue(f"{where}: cache_dir={folder!r} is a URL: give a local folder to keep the files in")
        self.folder = None if folder is None else os.fspath(folder)
        self.max_bytes = int(max_bytes)
        self._cache: Any = None

    def cache(self, path: str | None = None) -> Any:
        """This process's ``FileCache`` over the folder, or None without a ``cache_dir`` (or for ``path`` local:
        local files are never cached, and the folder is not made for them)."""
        if self.folder is None or (path is not None and not is_url(path)):
            return None
        if self._cache is None:
            from readers.sources.file_cache import FileCache
            self._cache = FileCache(self.folder, self.max_bytes)
        return self._cache

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_cache": None}

    def __repr__(self) -> str:
        return f"FileCacheSetting({self.folder!r}, {self.max_bytes})"


def download(url: str, dest: str, seen: Stat) -> None:
    """Write the whole object at ``url`` (which must still be ``seen``) to ``dest``, by retried range reads of
    ``BLOCK`` bytes; refused with ``FileChanged`` if it changed before or while it was read."""
    with open_file(url, seen=seen) as source, open(dest, "wb") as out:
        shutil.copyfileobj(source, out, BLOCK)
    check_unchanged(url, seen)  # a rewrite during the download: the bytes may mix two versions


def _learn(path: str, seen: dict[str, Stat], now: Stat) -> None:
    """Keep the first Stat of ``path``; refuse one that differs from it."""
    first = seen.setdefault(path, now)
    if first is not now:
        check_unchanged(path, first, now)


def whole_file(path: str, seen: dict[str, Stat], cache: Any) -> str:
    """A local path holding the whole of ``path``: itself when local, else its copy in ``cache`` (a ``FileCache``),
    downloaded when the cache has no copy of this version. A URL that changed since ``seen`` is refused."""
    if not is_url(path):
        return path
    now = stat(path)
    _learn(path, seen, now)
    return cache.get(path, now.version, now.size, lambda dest: download(path, dest, now))


def open_checked(path: str, seen: dict[str, Stat], cache: Any = None, *, buffered: bool = True) -> IO:
    """``path`` opened for reading (binary): a local file; a URL's local copy when ``cache`` is given; else a file
    of range reads (``buffered=False``: each read one request, as pyarrow's own coalesced reads want).
    The first Stat of a URL is recorded in ``seen``; a URL that changed since is refused (``FileChanged``).

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile() as f:
    ...     _ = f.write(b"abc"); f.flush()
    ...     with open_checked(f.name, {}) as g:
    ...         g.read()
    b'abc'
    """
    if not is_url(path):
        return open_file(path)
    if cache is not None:
        return open(whole_file(path, seen, cache), "rb")
    raw = RangeFile(path, seen.get(path))
    seen.setdefault(path, raw.stat)
    return io.BufferedReader(raw, buffer_size=BLOCK) if buffered else raw
