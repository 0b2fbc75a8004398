"""The dense fast path of the disk tier: fixed-shape entries of sample IDs in a range, in memory-mapped files.

When a cache's keys are the sample IDs of an indexed reader (a range
``lo <= id < hi``) and its entries have one fixed layout (an array, or a
tuple of arrays and numbers, of the same dtypes and shapes each time), the
disk tier keeps them as rows of one ``.npy`` file per column, memory-mapped
and shared by every process. A hit is then a row read from the page cache,
many at once, instead of a database row to fetch and decode.

The database still says which rows are there: an ``entries`` row with no
blob, whose CRC-32 covers the row's bytes, committed only after the row is
written, so a row a killed process left half-written is never marked, and a
row damaged later fails its checksum. Each process keeps which rows it knows
are present and their checksums in two arrays, loaded at first use and
completed from the database for rows it finds missing.

Entries that do not fit the layout (another shape, an ID outside the range)
are stored as blobs, as any entry would be.

A file's blocks are reserved on disk before it is mapped (``reserve``): a
row written into a mapped page the disk has no room for kills the process
with SIGBUS, where a reservation on a full disk is an ``OSError`` the disk
tier can stop at. A file is reserved when it is made, and again when opened
only if it has holes (one an older readerkit made).
"""
from __future__ import annotations

import contextlib
import os
import threading
import warnings
import zlib
from typing import Any

import numpy as np

from readers.errors import BadValue, MissingFile
from readers.plans import take_rows

__all__ = ["DenseFile", "dense_files", "layout_of", "reserve"]

#: The largest dense file (all columns) made, and the most rows: beyond them, entries are stored as blobs.
MAX_BYTES = 64 << 30
MAX_ROWS = 1 << 26
_SCALARS = {bool: "bool", int: "int", float: "float"}
_opening = threading.Lock()


def dense_files(directory: str, name: str = "") -> list[str]:
    """The dense files of namespace ``name`` (of every namespace when "") in ``directory``: ``dense-NAME-C.npy``,
    and what a process killed while making one left (``dense-NAME-C.npy.PID.THREAD.tmp``).

    >>> dense_files("/nonexistent")
    []
    """
    with contextlib.suppress(FileNotFoundError, NotADirectoryError), os.scandir(directory) as found:
        prefix = f"dense-{name}-" if name else "dense-"
        return sorted(f.path for f in found if f.name.startswith(prefix) and f.name.endswith((".npy", ".tmp")))
    return []


def reserve(path: str, zeros: int = 0) -> None:
    """Give every block of the file at ``path`` its room on disk now (``os.posix_fallocate``), so that a full disk
    is an ``OSError`` (``ENOSPC``) here, not a SIGBUS when a mapped row is first written. ``zeros``: the bytes at
    the file's end that are zeros (a file just made), written out where there is no fallocate (macOS).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     path = os.path.join(d, "x.npy")
    ...     np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(1024, 64)).flush()
    ...     reserve(path, zeros=1024 * 64 * 4)
    ...     stat = os.stat(path)
    >>> stat.st_blocks * 512 >= stat.st_size
    True
    """
    fd = os.open(path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        if hasattr(os, "posix_fallocate"):
            os.posix_fallocate(fd, 0, size)
        else:  # (a file of an older readerkit, with holes, is mapped as it is: its rows are not zeros to write)
            os.lseek(fd, size - zeros, os.SEEK_SET)
            for at in range(size - zeros, size, 1 << 20):
                os.write(fd, bytes(min(1 << 20, size - at)))
    finally:
        os.close(fd)


def _has_holes(path: str) -> bool:
    """Whether the file at ``path`` has fewer blocks on disk than its size needs (or its blocks are not known).

    Reserving room for a file that has it all already is not free: where the
    file system has no fallocate, glibc emulates it by writing a byte in every
    block, minutes for a file of many GiB, racing the rows other processes write
    through their maps."""
    stat = os.stat(path)
    blocks = getattr(stat, "st_blocks", None)
    return blocks is None or blocks * 512 < stat.st_size


def layout_of(value: Any) -> list | None:
    """The dense layout of entries like ``value`` (one ``[kind, dtype, shape]`` per column, an array alone as
    kind "array"), or None when such entries have no fixed layout.

    >>> layout_of((np.zeros((2, 3), np.float32), 7))
    [['tuple'], ['array', '<f4', [2, 3]], ['int', '<i8', []]]
    >>> layout_of(np.arange(3)), layout_of("text")
    ([['array', '<i8', [3]]], None)
    """
    if isinstance(value, np.ndarray):
        return [_column(value)] if _column(value) else None
    if not isinstance(value, tuple) or not value:
        return None
    columns = [_column(v) for v in value]
    return None if None in columns else [["tuple"], *columns]


def _column(v: Any) -> list | None:
    if isinstance(v, np.ndarray):
        kind = "array"
    elif isinstance(v, np.generic):
        kind, v = "scalar", np.asarray(v)
    elif type(v) in _SCALARS:
        kind = _SCALARS[type(v)]
        if kind == "int" and not -(1 << 63) <= v < (1 << 63):
            return None
        v = np.asarray(v, dtype={"bool": np.bool_, "int": np.int64, "float": np.float64}[kind])
    else:
        return None
    if v.dtype.hasobject or v.dtype.names is not None or v.dtype.kind not in "biufcSUmM":
        return None
    return [kind, v.dtype.str, list(v.shape)]


class DenseFile:
    """The columns of one namespace's dense entries, for rows ``lo <= id < hi``, in ``directory``.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     f = DenseFile(d, "demo", 10, 20, layout_of((np.zeros(2, np.float32), 1)))
    ...     crc = f.write(12, (np.ones(2, np.float32), 5))
    ...     f.know([12], [crc])
    ...     known = f.known([12, 13])
    ...     found, damaged = f.read(known)
    >>> known, found[12][0].tolist(), found[12][1], damaged
    ([12], [1.0, 1.0], 5, [])
    """

    def __init__(self, directory: str, name: str, lo: int, hi: int, layout: list):
        self.lo, self.hi, self.layout = lo, hi, layout
        self.remade = False
        self.single = layout[0][0] != "tuple"
        self.columns = layout if self.single else layout[1:]
        self.path = os.path.join(directory, f"dense-{name}")
        with _opening:  # np.load in several threads at once can trip a CPython 3.11 parser bug (SystemError)
            self.maps = [self._open(c, kind, np.dtype(dtype), tuple(shape))
                         for c, (kind, dtype, shape) in enumerate(self.columns)]
        self.row_bytes = sum(m[0].nbytes for m in self.maps)
        # plain ndarray views of the maps: np.memmap's own indexing goes through Python-level __getitem__ and
        # __array_finalize__, several times the cost of a gather from the same pages
        self.views = [np.asarray(m) for m in self.maps]
        self._kinds = [(kind, np.dtype(dtype), tuple(shape)) for kind, dtype, shape in self.columns]
        self._each = range(len(self.columns))
        self.have = np.zeros(hi - lo, dtype=bool)
        self.crc = np.zeros(hi - lo, dtype=np.uint32)

    def _open(self, c: int, kind: str, dtype: np.dtype, shape: tuple) -> np.memmap:
        """Column ``c``'s file, made when missing: under a temporary name, then linked into place, so two
        processes making it at once both end up with the one that was linked first."""
        path = f"{self.path}-{c}.npy"
        for _ in range(3):  # a cache cleared between the making and the opening: made again
            if not os.path.exists(path):
                temp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
                try:
                    made = np.lib.format.open_memmap(temp, mode="w+", dtype=dtype, shape=(self.hi - self.lo, *shape))
                    del made
                    # before it is in place: a file that does not fit is never used
                    reserve(temp, (self.hi - self.lo) * dtype.itemsize * int(np.prod(shape)))
                    with contextlib.suppress(FileExistsError, FileNotFoundError):  # (made by another, or cleared)
                        os.link(temp, path)
                finally:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(temp)
            try:
                damage = _damage(path)
            except FileNotFoundError:
                continue
            if damage is not None:  # its header cannot be read: made again (any other error is raised)
                warnings.warn(f"{path} is damaged ({damage}); it is made again, and its entries computed again",
                              RuntimeWarning, stacklevel=4)
                self.remade = True  # what the database says is in it is not: the store forgets those rows
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                continue
            try:
                if _has_holes(path):  # made by an older readerkit; made here, it has its room already
                    reserve(path)
                column = np.load(path, mmap_mode="r+")
                break
            except FileNotFoundError:
                continue
        else:
            raise MissingFile(f"{path} vanished as soon as it was made, three times: is something clearing "
                              f"{os.path.dirname(path)} over and over?")
        if column.dtype != dtype or column.shape != (self.hi - self.lo, *shape):
            raise BadValue(f"{path} holds {column.dtype} rows of shape {column.shape[1:]} for "
                           f"{column.shape[0]:,} samples, and the cache's record says {dtype} {shape} for "
                           f"{self.hi - self.lo:,}: clear the cache (`python cli.py cache clear "
                           f"{os.path.dirname(path)}`)")
        return column

    def fits(self, sample_id: int, value: Any) -> bool:
        """Whether ``value`` of sample ``sample_id`` can be a row of this file."""
        if not self.lo <= sample_id < self.hi:
            return False
        if self.single:
            return self._cell_fits(0, value)
        return type(value) is tuple and len(value) == len(self.maps) and all(map(self._cell_fits, self._each, value))

    def _cell_fits(self, c: int, v: Any) -> bool:
        kind, dtype, shape = self._kinds[c]
        if kind == "array":
            return type(v) is np.ndarray and v.dtype == dtype and v.shape == shape
        if kind == "scalar":
            return isinstance(v, np.generic) and v.dtype == dtype
        if kind == "int":
            return type(v) is int and -(1 << 63) <= v < (1 << 63)
        return type(v) is (bool if kind == "bool" else float)

    def _row_crc(self, row: int) -> int:
        crc = 0
        for m in self.maps:
            crc = zlib.crc32(m[row], crc)
        return crc

    def write(self, sample_id: int, value: Any) -> int:
        """Write ``value`` (it ``fits``) as the row of ``sample_id``; return the row's CRC-32."""
        row = sample_id - self.lo
        for m, v in zip(self.maps, (value,) if self.single else value):
            m[row] = v
        return self._row_crc(row)

    def know(self, sample_ids: Any, crcs: Any) -> None:
        """Note rows the database says are present, with their checksums."""
        rows = np.asarray(sample_ids, dtype=np.int64) - self.lo
        self.have[rows] = True
        self.crc[rows] = np.asarray(crcs, dtype=np.int64).astype(np.uint32)

    def forget(self, sample_ids: Any) -> None:
        """Note rows that are no longer present (their checksum failed)."""
        self.have[np.asarray(sample_ids, dtype=np.int64) - self.lo] = False

    def known(self, sample_ids: list[int]) -> list[int]:
        """Those of ``sample_ids`` whose rows this process knows are present."""
        lo, hi, have = self.lo, self.hi, self.have
        return [i for i in sample_ids if lo <= i < hi and have[i - lo]]

    def take(self, sample_ids: np.ndarray) -> list | None:
        """The entries of ``sample_ids`` (an int64 array), in order, when this process knows every one's row is
        present and every row passes its checksum: a gather per column and a CRC-32 per row. None otherwise
        (``read`` then says which are there, and which are damaged).

        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     f = DenseFile(d, "demo", 0, 4, layout_of(np.zeros(2, np.float32)))
        ...     f.know([1, 2], [f.write(1, np.ones(2, np.float32)), f.write(2, np.zeros(2, np.float32))])
        ...     print([v.tolist() for v in f.take(np.array([2, 1, 2]))], f.take(np.array([1, 3])))
        [[0.0, 0.0], [1.0, 1.0], [0.0, 0.0]] None
        """
        rows = np.asarray(sample_ids, dtype=np.int64) - self.lo
        if not len(rows) or not (rows.view(np.uint64) < len(self.have)).all() or not self.have[rows].all():
            return None  # (a row < 0 is huge as uint64)
        taken, crcs = self._gather(rows)
        if not (crcs == self.crc[rows]).all():
            return None
        return self._values(taken)

    def _gather(self, rows: np.ndarray) -> tuple[list[tuple[np.ndarray, list]], np.ndarray]:
        """(each column at ``rows``: its block, one gather, read-only, and the block's cells, row views or numpy
        scalars; the CRC-32 of each row, over its columns)."""
        taken, crcs = [], None
        for v in self.views:
            block = take_rows(v, rows)
            block.flags.writeable = False
            cells = list(block)  # made once, for the checksums and for the entries
            taken.append((block, cells))
            crcs = list(map(zlib.crc32, cells) if crcs is None else map(zlib.crc32, cells, crcs))
        return taken, np.array(crcs, dtype=np.uint32)

    def _values(self, taken: list[tuple[np.ndarray, list]]) -> list:
        """The entries of the columns ``_gather`` took, as ``write`` was given them."""
        if self.single:
            return _cells("array", *taken[0])
        return list(zip(*[_cells(kind, *t) for (kind, _, _), t in zip(self.columns, taken)]))

    def read(self, sample_ids: list[int]) -> tuple[dict[int, Any], list[int]]:
        """({sample ID: entry} of the rows known present and intact, among ``sample_ids`` (all in range),
        [the IDs whose rows failed their checksum]: those are forgotten)."""
        if not sample_ids:
            return {}, []
        rows = np.asarray(sample_ids, dtype=np.int64) - self.lo
        taken, crcs = self._gather(rows)
        bad = np.flatnonzero(crcs != self.crc[rows])
        out = dict(zip(sample_ids, self._values(taken)))
        damaged = [sample_ids[j] for j in bad.tolist()]
        for i in damaged:
            del out[i]
        if damaged:
            self.forget(damaged)
        return out, damaged


def _damage(path: str) -> str | None:
    """What is wrong with the ``.npy`` header at ``path``, or None when it reads; an OSError (no such file, too
    many open files) is raised, not taken for damage."""
    with open(path, "rb") as file:
        try:
            version = np.lib.format.read_magic(file)
            read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
            if version not in read:
                return f"format version {version}"
            read[version](file)
        except OSError:
            raise
        except Exception as exc:  # numpy's header parser raises many kinds
            return f"{type(exc).__name__}: {exc}"
    return None


def _cells(kind: str, block: np.ndarray, cells: list) -> list:
    """A gathered column's cells (``cells``: ``list(block)``) as entries hold them: arrays (rows; read-only 0-d
    views for a column of them), numpy scalars, or Python numbers."""
    if kind == "array":
        return cells if block.ndim > 1 else [block[j, ...] for j in range(len(block))]
    return block.tolist() if kind in ("int", "float", "bool") else cells
