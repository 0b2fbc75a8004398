"""Columnar data: Arrow IPC files (``arrow``) and Hugging Face datasets (``from_hf``), read in groups of rows.

The entry rules, the same for ``readers.parquet``: an entry is the tuple of
the chosen ``columns``, in the order given (by default every column, in the
file's order). A numeric column gives numpy scalars; a fixed-size-list
column of numbers (nested ones too) gives numpy arrays, rows of one array
over the Arrow buffer where Arrow allows (no nulls; booleans are copied); a
string column gives ``str`` and a binary one ``bytes``; any other type (a
variable-length list, a struct, a numeric column with nulls) gives what
``pyarrow``'s ``to_pylist`` gives.

Rows live in groups: an Arrow file's record batches, a Parquet file's row
groups, a dataset table's chunks. A group is converted to columns once and
kept in a least-recently-used cache bounded in bytes (``cache_bytes``); a
gather takes each group's rows in one take. ``readers.shuffle_row_groups``
shuffles group by group, so each group is converted once a pass.

``pyarrow`` is the ``arrow`` extra (``pip install readerkit[arrow]``).
"""
from __future__ import annotations

import collections
import hashlib
import mmap
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from readers.digests import file_digest, hasher
from readers.errors import BadType, BadValue
from readers.plans import take_rows
from readers.plugins.pairs import decode_images, parse_columns
from readers.sources.file_access import (
    DISK_BYTES,
    FileCacheSetting,
    open_checked,
    whole_file,
)
from readers.sources.locations import (
    BLOCK,
    Stat,
    expand_paths,
    is_url,
    open_file,
    redact,
)
from readers.stage import IndexedReader

__all__ = ["ArrowFiles", "ColumnFiles", "ColumnarFileError", "Columns", "HFDataset", "arrow", "choose_columns", "convert_column",
           "from_data_dir", "from_hf", "pyarrow", "whole_bytes"]

#: How many bytes of converted groups a reader keeps by default (per process).
CACHE_BYTES = 256 << 20
#: How many files a reader keeps mapped or open at once (per process): a shuffle moves between files.
OPEN_FILES = 16


class ColumnarFileError(BadValue):
    """A columnar file that cannot be read: the message names the file (and row group) and what to do."""


def pyarrow() -> Any:
    """The ``pyarrow`` module, or an error saying which ``pip install`` brings it.

    >>> pyarrow().__name__
    'pyarrow'
    """
    try:
        import pyarrow as pa
    except ImportError:
        raise ModuleNotFoundError("this reader needs pyarrow, which is not installed: pip install pyarrow "
                                  "(or pip install readerkit[arrow])") from None
    return pa


def _fixed_shape(pa: Any, t: Any) -> tuple[tuple[int, ...], Any] | None:
    """The row shape and value type of a (nested) fixed-size list of numbers, or None."""
    shape = []
    while pa.types.is_fixed_size_list(t):
        shape.append(t.list_size)
        t = t.value_type
    numeric = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
    return (tuple(shape), t) if shape and numeric else None


def convert_column(array: Any) -> np.ndarray | list:
    """One Arrow column (an array, or a chunked array) as the entry rules give it: a numpy array whose rows are
    the entries' values (zero-copy where Arrow allows), or a list of Python values.

    >>> import pyarrow as pa
    >>> convert_column(pa.array([1, 2, 3], pa.int16())).tolist()
    [1, 2, 3]
    >>> convert_column(pa.array([[1.0, 2.0], [3.0, 4.0]], pa.list_(pa.float32(), 2))).shape
    (2, 2)
    >>> convert_column(pa.array(["a", "b"])), convert_column(pa.array([b"x", None]))
    (['a', 'b'], [b'x', None])
    """
    pa = pyarrow()
    if isinstance(array, pa.ChunkedArray):
        array = array.chunk(0) if array.num_chunks == 1 else array.combine_chunks()
    t = array.type
    if array.null_count == 0:
        if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
            return array.to_numpy(zero_copy_only=False)
        fixed = _fixed_shape(pa, t)
        if fixed is not None:
            values = array
            while pa.types.is_fixed_size_list(values.type):
                if values.null_count:
                    return array.to_pylist()
                values = values.flatten()  # respects a slice's offset, unlike .values
            if values.null_count == 0:
                return values.to_numpy(zero_copy_only=False).reshape((len(array),) + fixed[0])
    return array.to_pylist()


def _nbytes(columns: Sequence[np.ndarray | list], arrow_bytes: int) -> int:
    """What a converted group holds: its numpy arrays' bytes, or Arrow's count for Python values (a floor)."""
    numbers = sum(c.nbytes for c in columns if isinstance(c, np.ndarray))
    return max(numbers, arrow_bytes)


def _take(column: np.ndarray | list, rows: np.ndarray) -> np.ndarray | list:
    if isinstance(column, np.ndarray):
        return take_rows(column, rows)
    return [column[r] for r in rows.tolist()]


class Columns(IndexedReader):
    """Base of the columnar readers: rows in groups (``offsets``), each group converted once and kept in a
    byte-bounded LRU; subclasses define ``_load(g)``, group g as an Arrow table or record batch of the chosen
    columns (see the module doc for the entry rules).
    """

    name = "columns"

    def __init__(self, offsets: np.ndarray, columns: list[str], cache_bytes: int):
        super().__init__()
        self.offsets, self.columns, self.cache_bytes = offsets, columns, cache_bytes
        self._groups: collections.OrderedDict[int, tuple[list, int]] = collections.OrderedDict()
        self._held = 0

    def groups(self) -> np.ndarray:
        """The row offsets of the groups: group g holds rows ``offsets[g]`` to ``offsets[g + 1] - 1``.

        >>> import pyarrow as pa
        >>> from_hf(__import__("datasets").Dataset(pa.table({"x": [1, 2, 3]}))).groups().tolist()
        [0, 3]
        """
        return self.offsets

    def _load(self, g: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} defines no _load")

    def group(self, g: int) -> list:
        """Group ``g``'s columns, converted (from the cache when it holds them)."""
        found = self._groups.get(g)
        if found is not None:
            self._groups.move_to_end(g)
            return found[0]
        table = self._load(g)
        columns = [convert_column(table.column(k)) for k in range(table.num_columns)]
        size = _nbytes(columns, table.nbytes)
        self._groups[g] = (columns, size)
        self._held += size
        while self._held > self.cache_bytes and len(self._groups) > 1:  # the group just read always stays
            self._held -= self._groups.popitem(last=False)[1][1]
        return columns

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_groups"], state["_held"] = collections.OrderedDict(), 0  # another process reads its own
        return state

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def _get(self, i: int) -> tuple:
        g = int(np.searchsorted(self.offsets, i, side="right")) - 1
        row = i - int(self.offsets[g])
        return tuple(c[row] for c in self.group(g))

    def _gathered(self, indices: np.ndarray) -> list:
        """One column (array or list) per chosen column for ``indices``: one take per group they fall in."""
        indices = np.asarray(indices, np.int64)
        groups = np.searchsorted(self.offsets, indices, side="right") - 1
        if len(indices) and groups[0] == groups[-1] and (groups == groups[0]).all():
            g = int(groups[0])
            return [_take(c, indices - self.offsets[g]) for c in self.group(g)]
        out: list = [None] * len(self.columns)
        for g in np.unique(groups).tolist():
            where = np.flatnonzero(groups == g)
            for k, c in enumerate(self.group(g)):
                part = _take(c, indices[where] - self.offsets[g])
                if out[k] is None:
                    out[k] = (np.empty((len(indices),) + part.shape[1:], part.dtype) if isinstance(part, np.ndarray)
                              else [None] * len(indices))
                if isinstance(out[k], np.ndarray) and isinstance(part, np.ndarray) and part.dtype == out[k].dtype:
                    out[k][where] = part
                else:  # a column whose groups convert alike no more (nulls in one): Python values
                    if isinstance(out[k], np.ndarray):
                        out[k] = list(out[k])
                    for w, v in zip(where.tolist(), part):
                        out[k][w] = v
        return out

    def gather(self, indices: np.ndarray) -> list:
        return list(zip(*self._gathered(indices))) if len(indices) else []

    def gather_columns(self, indices: np.ndarray) -> tuple | None:
        columns = self._gathered(indices)
        return tuple(columns) if all(isinstance(c, np.ndarray) for c in columns) else None

    def sample_ids(self, indices: np.ndarray) -> np.ndarray:
        return indices


def choose_columns(names: list[str], columns: Any, where: str) -> list[str]:
    """The chosen ``columns`` (all of ``names`` when None), checked against what the data has.

    >>> choose_columns(["image", "label"], ["label"], "parquet('a.parquet')")
    ['label']
    >>> choose_columns(["image", "label"], ["lable"], "parquet('a.parquet')")
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: parquet('a.parquet'): no column 'lable'; its columns are 'image', 'label'
    """
    if columns is None:
        return list(names)
    if isinstance(columns, str) or not isinstance(columns, Sequence):
        raise BadType(f"{where}: columns must be a list of column names, got {columns!r}")
    for c in columns:
        if c not in names:
            raise BadValue(f"{where}: no column {c!r}; its columns are {', '.join(map(repr, names))}")
    if not columns:
        raise BadValue(f"{where}: columns is empty; give at least one, or None for all")
    return list(columns)


def files_identity(reader: Columns, paths: list[str]) -> str:
    """A reader's title less its paths: the files' digests say which data, not where it lies."""
    return reader.title().replace(reader.path_text(), f"{len(paths)} file{'s' if len(paths) > 1 else ''}", 1)


def files_digest(paths: list[str], seen: dict[str, Stat] | None = None, file_cache: Any = None) -> str:
    """A digest of the files' SHA-256s: the same for a local file and for the same bytes behind a URL (a URL is
    read whole, through ``file_cache``'s folder when given, so the reads after find it there; refused if it
    changed)."""
    h = hasher()
    for p in paths:
        cache = None if file_cache is None else file_cache.cache(p)
        if is_url(p) and cache is None:
            digest = hashlib.sha256()
            with open_checked(p, {} if seen is None else seen) as f:
                for block in iter(lambda: f.read(BLOCK), b""):
                    digest.update(block)
            h.update(f"{digest.hexdigest()};".encode())
        else:
            h.update(f"{file_digest(whole_file(p, {} if seen is None else seen, cache))};".encode())
    return h.hexdigest()


def _mapped_table(path: str, seen: dict[str, Stat] | None = None, cache: Any = None) -> Any:
    """The Arrow IPC file (random-access "file" format or the "stream" format ``datasets`` writes) at
    ``path`` as a table over a memory map of it: nothing is copied, pages are read as rows are. A URL is
    mapped from its copy in ``cache``, or without one read whole into memory (by ranges); one that changed
    since ``seen`` is refused."""
    pa = pyarrow()
    seen = {} if seen is None else seen
    local = whole_file(path, seen, cache) if cache is not None else path
    if is_url(local):
        with open_checked(path, seen) as f:
            data = f.read()
        if not data:
            raise ColumnarFileError(f"{redact(path)}: the file is empty, not an Arrow IPC file; write it again or "
                                    "leave it out")
        source = pa.py_buffer(data)
    else:
        with open_file(local) as f:  # the map holds a descriptor of its own
            try:
                mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError:  # an empty file cannot be mapped
                raise ColumnarFileError(f"{redact(path)}: the file is empty, not an Arrow IPC file; write it again "
                                        "or leave it out") from None
        source = pa.py_buffer(mapped)
    try:
        try:
            return pa.ipc.open_file(source).read_all()
        except pa.ArrowInvalid:
            return pa.ipc.open_stream(source).read_all()
    except (pa.ArrowException, OSError) as exc:
        raise ColumnarFileError(f"{redact(path)}: not a readable Arrow IPC file ({exc}); give Arrow IPC files (.arrow, "
                                ".feather, as pyarrow or datasets' save_to_disk write them)") from None


class ColumnFiles(Columns):
    """Columns read from files (``paths``; group g is in file ``files[g]``): Arrow IPC and Parquet. Their name in a
    repr, their identity and their digest come from the files."""

    def __init__(self, paths: list[str], columns: list[str], files: np.ndarray, offsets: np.ndarray,
                 cache_bytes: int, file_cache: FileCacheSetting | None = None, seen: dict[str, Stat] | None = None):
        super().__init__(offsets, columns, cache_bytes)
        self.paths, self.files = paths, files
        # a URL's whole copies (cache_dir): not the data's identity; seen: each URL's size and version when the
        # reader was built, by which a file opened again is known to be the same
        self.file_cache = FileCacheSetting(None, DISK_BYTES, self.name) if file_cache is None else file_cache
        self.seen: dict[str, Stat] = {} if seen is None else seen

    def path_text(self) -> str:
        first = repr(redact(self.paths[0]))
        return first if len(self.paths) == 1 else f"{len(self.paths)} files from {first}"

    def identity(self) -> str:
        return files_identity(self, self.paths)

    def digest(self) -> str:
        return files_digest(self.paths, self.seen, self.file_cache)


class ArrowFiles(ColumnFiles):
    """Memory-mapped Arrow IPC files (see ``arrow``); a group is a record batch."""

    name = "arrow"

    def __init__(self, paths: list[str], columns: list[str], files: np.ndarray, offsets: np.ndarray,
                 cache_bytes: int, file_cache: FileCacheSetting | None = None, seen: dict[str, Stat] | None = None):
        super().__init__(paths, columns, files, offsets, cache_bytes, file_cache, seen)
        # starts[k]: the row where file k starts
        self.starts = offsets[np.searchsorted(files, np.arange(len(paths)))]
        self._tables: collections.OrderedDict[int, Any] = collections.OrderedDict()  # file -> its mapped table

    def _load(self, g: int) -> Any:
        k = int(self.files[g])
        table = self._tables.get(k)
        if table is None:
            path = self.paths[k]
            table = self._tables[k] = _mapped_table(path, self.seen, self.file_cache.cache(path)).select(self.columns)
            if len(self._tables) > OPEN_FILES:
                self._tables.popitem(last=False)  # unmapped once no converted group holds its buffers
        self._tables.move_to_end(k)
        start = int(self.offsets[g] - self.starts[k])
        return table.slice(start, int(self.offsets[g + 1] - self.offsets[g]))

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_tables"] = collections.OrderedDict()
        return state

    def _options(self) -> str:
        return f"{self.path_text()}, columns={self.columns!r}: {len(self):,} rows"


def arrow(path: str | os.PathLike | Sequence[str | os.PathLike], *, columns: Sequence[str] | None = None,
          cache_bytes: int = CACHE_BYTES, cache_dir: str | os.PathLike | None = None,
          cache_dir_bytes: int = DISK_BYTES) -> ArrowFiles:
    """An indexed reader over Arrow IPC files, memory-mapped: ``path`` is one file, a folder, a glob or a list.

    An entry is the tuple of the chosen ``columns`` (every column by
    default), by the rules of ``readers.sources.columnar``: numeric columns as
    numpy scalars, fixed-size lists as numpy arrays over the mapped file,
    strings as ``str``, binary as ``bytes``. Both IPC formats are read: the
    random-access file format (``pyarrow.feather``, ``pa.ipc.new_file``) and
    the stream format that ``datasets``' ``save_to_disk`` writes. Building the
    reader maps the files and reads their schemas and batch lengths; rows are
    read as they are asked for. ``cache_bytes`` bounds the converted record
    batches kept (string columns become Python objects).

    A file may be a URL (``https://``, ``s3://``, what fsspec reads; ``pip
    install 'readerkit[cloud]'``): with ``cache_dir`` it is downloaded whole
    once into that local folder (at most ``cache_dir_bytes`` kept) and
    mapped from there; without, it is read whole into memory (by range
    requests) each time the reader opens it (at most 16 files held at once).
    A URL that changed since the reader was built is refused, naming it.

    >>> import pyarrow as pa, pyarrow.feather, tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> table = pa.table({"label": [3, 1, 2], "text": ["a", "bb", "ccc"]})
    >>> pyarrow.feather.write_feather(table, f"{folder.name}/part.arrow")
    >>> r = arrow(folder.name, columns=["text", "label"])
    >>> len(r), r[1], [int(label) for _, label in r()]
    (3, ('bb', np.int64(1)), [3, 1, 2])

    See Also:
        readers.parquet, from_hf, readers.shuffle_row_groups
    """
    paths = expand_paths(path, suffixes=(".arrow", ".feather", ".ipc"), what="Arrow files")
    file_cache = FileCacheSetting(cache_dir, cache_dir_bytes, "arrow")
    seen: dict[str, Stat] = {}
    names: list[str] | None = None
    files, lengths = [], []
    for k, p in enumerate(paths):
        table = _mapped_table(p, seen, file_cache.cache(p))  # over the map: the schema and the batches' lengths
        if names is None:
            names = table.schema.names
        elif table.schema.names != names:
            raise ColumnarFileError(f"{redact(p)}: its columns {table.schema.names} differ from {redact(paths[0])}'s "
                                    f"{names}; "
                                    "give files of one schema")
        sizes = [b.num_rows for b in table.to_batches()] or [0]
        files += [k] * len(sizes)
        lengths += sizes
    where = f"arrow({redact(os.fspath(path))!r})" if isinstance(path, (str, os.PathLike)) else f"arrow({path!r})"
    chosen = choose_columns(names or [], columns, where)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return ArrowFiles(paths, chosen, np.array(files, np.int64), offsets, whole_bytes(cache_bytes, "arrow"),
                      file_cache, seen)


def from_data_dir(data_dir: str | None = None, data: str | None = None, columns: Any = None,
                  size: int | None = None) -> Any:
    """Arrow IPC files at --data or in the --data-dir folder, every column (a datasets save_to_disk folder too).

    The ``arrow`` plugin: ``--columns IMAGE,LABEL`` picks the columns; image
    bytes (PNG, JPEG, a Hugging Face ``Image`` struct) come decoded with
    Pillow, resized to ``--size`` x ``--size``.

    >>> import pyarrow as pa, pyarrow.feather, tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> pyarrow.feather.write_feather(pa.table({"x": [1, 2]}), f"{folder.name}/a.arrow")
    >>> len(from_data_dir(folder.name))
    2
    """
    where = data if data is not None else data_dir
    if where is None:
        raise ColumnarFileError("--reader arrow reads Arrow files: give them with --data PATH (a file, folder, glob "
                                "or brace pattern) or --data-dir DIR")
    reader = arrow(where, columns=parse_columns(columns))
    return decode_images(reader, reader.columns, size)


def whole_bytes(value: Any, where: str) -> int:
    """A byte budget: an int >= 1.

    >>> whole_bytes(1 << 20, "parquet")
    1048576
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        raise BadValue(f"{where}: cache_bytes must be an int >= 1 (a byte budget), got {value!r}")
    return int(value)


class HFDataset(Columns):
    """A Hugging Face ``datasets.Dataset`` read through its Arrow table (see ``from_hf``); a group is a chunk."""

    name = "from_hf"

    def __init__(self, dataset: Any, columns: list[str], offsets: np.ndarray, cache_bytes: int):
        super().__init__(offsets, columns, cache_bytes)
        self.dataset = dataset  # pickles as datasets pickles it: by its files when memory-mapped

    def _load(self, g: int) -> Any:
        table = self.dataset.data.table.select(self.columns)
        return table.slice(int(self.offsets[g]), int(self.offsets[g + 1] - self.offsets[g]))

    def path_text(self) -> str:
        return f"{self.dataset.num_rows:,} rows"

    def _options(self) -> str:
        return f"columns={self.columns!r}: {len(self):,} rows"

    def identity(self) -> str:
        return self.title()

    def digest(self) -> str | None:
        fingerprint = getattr(self.dataset, "_fingerprint", None)
        return None if fingerprint is None else f"datasets:{fingerprint}"


def from_hf(ds: Any, columns: Sequence[str] | None = None, *, cache_bytes: int = CACHE_BYTES) -> HFDataset:
    """An indexed reader over a Hugging Face ``datasets.Dataset``, read through its Arrow table without copying it.

    Entries follow the rules of ``readers.sources.columnar`` (the dataset's
    format, such as ``with_format("numpy")``, is not used). A dataset with an
    indices mapping (after ``ds.shuffle()``, ``select`` or ``filter``) is
    refused: ``ds.flatten_indices()`` writes the rows in their new order, or
    give the dataset before and shuffle here.

    >>> import datasets
    >>> features = datasets.Features({"x": datasets.Sequence(datasets.Value("float32"), length=2),
    ...                               "y": datasets.Value("int64")})
    >>> ds = datasets.Dataset.from_dict({"x": [[1.0, 2.0], [3.0, 4.0]], "y": [0, 1]}, features=features)
    >>> r = from_hf(ds)
    >>> x, y = r[1]
    >>> len(r), x.tolist(), int(y)
    (2, [3.0, 4.0], 1)

    See Also:
        arrow, readers.parquet
    """
    if not (hasattr(ds, "data") and hasattr(ds.data, "table") and hasattr(ds, "num_rows")):
        raise BadType(f"from_hf needs a datasets.Dataset, got {type(ds).__name__}; for a DatasetDict pick a "
                      "split (ds['train']), and for an IterableDataset save it to disk first")
    if getattr(ds, "_indices", None) is not None:
        raise BadValue("from_hf: this dataset has an indices mapping (from shuffle, select, filter or sort), so "
                       "its rows are not its table's: call ds.flatten_indices() first, or give the dataset "
                       "before it and use readers.shuffle / readers.shuffle_row_groups")
    table = ds.data.table
    chosen = choose_columns(table.schema.names, columns, "from_hf")
    lengths = [len(c) for c in table.column(0).chunks] if table.num_columns else [table.num_rows]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return HFDataset(ds, chosen, offsets, whole_bytes(cache_bytes, "from_hf"))
