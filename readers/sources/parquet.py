"""parquet: an indexed reader over Parquet files, decoding whole row groups and keeping a bounded number.

Building the reader reads the files' footers alone (``len`` comes from their
metadata). Random access decodes the row group that holds a row, keeping
decoded groups in a least-recently-used cache bounded in bytes; a gather
(a batch) takes each row group's rows in one take. A global ``shuffle``
draws rows from anywhere, so each sample may decode a row group: with data
larger than the cache, use ``readers.shuffle_row_groups``, which decodes
each row group once a pass. Damaged pages raise ``ColumnarFileError``
naming the file and row group.
"""
from __future__ import annotations

import collections
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from readers.errors import ReaderkitError
from readers.plugins.pairs import decode_images, parse_columns
from readers.sources.columnar import (
    CACHE_BYTES,
    OPEN_FILES,
    ColumnarFileError,
    ColumnFiles,
    choose_columns,
    pyarrow,
    whole_bytes,
)
from readers.sources.file_access import DISK_BYTES, FileCacheSetting, open_checked
from readers.sources.locations import Stat, expand_paths, is_url, redact

__all__ = ["Parquet", "from_data_dir", "parquet"]


def _parquet() -> Any:
    pyarrow()  # names the pip install when it is missing
    import pyarrow.parquet as pq
    return pq


def _footer(path: str, seen: dict[str, Stat], cache: Any) -> Any:
    """The file's metadata: a URL's read by one range request at its end (or from its whole copy in ``cache``)."""
    pq = _parquet()
    with open_checked(path, seen, cache, buffered=False) as f:
        try:
            return pq.read_metadata(f)
        except ReaderkitError:
            raise
        except (pyarrow().ArrowException, OSError) as exc:
            raise ColumnarFileError(f"{redact(path)}: not a readable Parquet file ({exc}); write it again, or leave "
                                    "it out") from None


class Parquet(ColumnFiles):
    """Parquet files read by row group (see ``parquet``)."""

    name = "parquet"

    def __init__(self, paths: list[str], columns: list[str], files: np.ndarray, row_groups: np.ndarray,
                 offsets: np.ndarray, cache_bytes: int, file_cache: FileCacheSetting | None = None,
                 seen: dict[str, Stat] | None = None):
        super().__init__(paths, columns, files, offsets, cache_bytes, file_cache, seen)
        self.row_groups = row_groups  # group g is row group row_groups[g] of file files[g]
        self._open: collections.OrderedDict[int, tuple[Any, Any]] = collections.OrderedDict()  # file -> (handle,
        # its ParquetFile): a few open at once, as a shuffle moves between files

    def _file(self, k: int) -> Any:
        found = self._open.get(k)
        if found is None:
            cache = self.file_cache.cache(self.paths[k])
            handle = open_checked(self.paths[k], self.seen, cache, buffered=False)
            # a URL read by ranges: pyarrow fetches a row group's chosen column chunks in one coalesced read
            ranged = is_url(self.paths[k]) and cache is None
            try:
                found = self._open[k] = (handle, _parquet().ParquetFile(handle, page_checksum_verification=True,
                                                                        pre_buffer=ranged))
            except BaseException:
                handle.close()
                raise
            if len(self._open) > OPEN_FILES:
                self._open.popitem(last=False)[1][0].close()
        self._open.move_to_end(k)
        return found[1]

    def _load(self, g: int) -> Any:
        pa = pyarrow()
        k, rg = int(self.files[g]), int(self.row_groups[g])
        path = redact(self.paths[k])
        try:
            table = self._file(k).read_row_group(rg, columns=self.columns)
        except ReaderkitError:  # a URL changed or failing: its own message says so
            raise
        except (pa.ArrowException, OSError) as exc:
            raise ColumnarFileError(
                f"{path}, row group {rg} (of {int((self.files == k).sum())}): cannot be decoded "
                f"({type(exc).__name__}: {exc}); the file is damaged: write it again, or leave it out") from None
        if table.num_rows != self.offsets[g + 1] - self.offsets[g]:
            raise ColumnarFileError(f"{path}, row group {rg}: {table.num_rows} rows, but its footer said "
                                    f"{int(self.offsets[g + 1] - self.offsets[g])}; was the file rewritten while "
                                    "it was read? build the reader again")
        return table

    def close(self) -> None:
        """Close the files this copy has open (a later read opens them again).

        >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> pq.write_table(pa.table({"x": [1, 2]}), f"{folder.name}/a.parquet")
        >>> r = parquet(folder.name)
        >>> r.close(); int(r[1][0])
        2
        """
        while self._open:
            self._open.popitem()[1][0].close()

    def finish_pass(self) -> None:
        """Close the URLs this copy has open, so that the next pass opens each again and refuses one that changed
        (a local file stays open: its own checks are the footer's row counts)."""
        for k in [k for k in self._open if is_url(self.paths[k])]:
            self._open.pop(k)[0].close()

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_open"] = collections.OrderedDict()
        return state

    def _options(self) -> str:
        return f"{self.path_text()}, columns={self.columns!r}: {len(self):,} rows in {len(self.files)} row groups"


def parquet(path: str | os.PathLike | Sequence[str | os.PathLike], *, columns: Sequence[str] | None = None,
            cache_bytes: int = CACHE_BYTES, cache_dir: str | os.PathLike | None = None,
            cache_dir_bytes: int = DISK_BYTES) -> Parquet:
    """An indexed reader over Parquet files: ``path`` is one file, a folder (its ``.parquet`` files), a glob or a list.

    An entry is the tuple of the chosen ``columns`` (every column by default),
    by the rules of ``readers.sources.columnar``: numeric columns as numpy
    scalars, fixed-size lists as numpy arrays, strings as ``str``, binary as
    ``bytes``. Only the chosen columns are decoded. Building it reads the
    footers; ``r[i]`` decodes the row group of row i, and up to
    ``cache_bytes`` of decoded row groups are kept (per process).

    Shuffling: ``readers.shuffle(r, seed=...)`` is a global shuffle, good when
    the decoded data fits ``cache_bytes``; beyond it, each sample may decode
    a row group, and ``readers.shuffle_row_groups(r, seed=...)`` (row groups in
    a random order, rows shuffled within a window of a few) decodes each row
    group once a pass.

    A file may be a URL (``https://``, ``s3://``, what fsspec reads; ``pip
    install 'readerkit[cloud]'``). Without ``cache_dir``, building reads each
    footer with one range request, and a row group costs one request for
    its chosen column chunks (one per run of adjacent chosen columns); with
    ``cache_dir``, each file is downloaded whole once into that local folder
    (at most ``cache_dir_bytes`` kept, the least recently used dropped) and
    read from there. A URL that changed since the reader was built is
    refused in a later pass, naming it.

    >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> table = pa.table({"image": pa.array([[0, 1], [2, 3], [4, 5]], pa.list_(pa.uint8(), 2)), "label": [7, 8, 9]})
    >>> pq.write_table(table, f"{folder.name}/part-0.parquet", row_group_size=2)
    >>> r = parquet(folder.name)
    >>> image, label = r[2]
    >>> len(r), image.tolist(), int(label), len(r.groups()) - 1
    (3, [4, 5], 9, 2)
    >>> parquet(folder.name, columns=["lable"])
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: parquet('...'): no column 'lable'; its columns are 'image', 'label'

    See Also:
        readers.arrow, readers.from_hf, readers.shuffle_row_groups
    """
    paths = expand_paths(path, suffixes=(".parquet", ".pq"), what="Parquet files")
    file_cache = FileCacheSetting(cache_dir, cache_dir_bytes, "parquet")
    seen: dict[str, Stat] = {}
    names: list[str] | None = None
    files, row_groups, lengths = [], [], []
    for k, p in enumerate(paths):
        footer = _footer(p, seen, file_cache.cache(p))
        here = footer.schema.to_arrow_schema().names
        if names is None:
            names = here
        elif here != names:
            raise ColumnarFileError(f"{redact(p)}: its columns {here} differ from {redact(paths[0])}'s {names}; give "
                                    "files of one schema")
        for rg in range(footer.num_row_groups):
            files.append(k)
            row_groups.append(rg)
            lengths.append(footer.row_group(rg).num_rows)
    where = f"parquet({redact(os.fspath(path))!r})" if isinstance(path, (str, os.PathLike)) else f"parquet({path!r})"
    chosen = choose_columns(names or [], columns, where)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return Parquet(paths, chosen, np.array(files, np.int64), np.array(row_groups, np.int64), offsets,
                   whole_bytes(cache_bytes, "parquet"), file_cache, seen)


def from_data_dir(data_dir: str | None = None, data: str | None = None, columns: Any = None,
                  size: int | None = None) -> Any:
    """Parquet files at --data (a file, folder, glob or brace pattern) or in the --data-dir folder, read by row group.

    The ``parquet`` plugin: ``--columns IMAGE,LABEL`` picks the columns (by
    default every column); image bytes (PNG, JPEG, a Hugging Face ``Image``
    struct) come decoded with Pillow, resized to ``--size`` x ``--size``.

    >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> pq.write_table(pa.table({"x": [1.5, 2.5]}), f"{folder.name}/a.parquet")
    >>> len(from_data_dir(folder.name))
    2
    """
    where = data if data is not None else data_dir
    if where is None:
        raise ColumnarFileError("--reader parquet reads Parquet files: give them with --data PATH (a file, folder, "
                                "glob or brace pattern) or --data-dir DIR")
    reader = parquet(where, columns=parse_columns(columns))
    return decode_images(reader, reader.columns, size)
