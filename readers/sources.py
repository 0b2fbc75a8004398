"""Reader creators over data already at hand: arrays, sequences, text files."""
from __future__ import annotations

import codecs
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from readers.identity import array_digest, file_digest, value_digest
from readers.parents import is_indexed
from readers.stage import IndexedReader, Stage

__all__ = ["TextDecodeError", "from_arrays", "from_sequence", "np_array", "text_file"]


def _shape_text(a: np.ndarray) -> str:
    inner = "x".join(str(d) for d in a.shape[1:])
    return f"{a.dtype}[{inner}]" if inner else str(a.dtype)


class FromArrays(IndexedReader):
    name = "from_arrays"

    def __init__(self, arrays: tuple[np.ndarray, ...]):
        super().__init__()
        self.arrays = arrays
        self._n = len(arrays[0])

    def __len__(self) -> int:
        return self._n

    def _get(self, i: int) -> tuple:
        return tuple(a[i] for a in self.arrays)

    def gather(self, indices: np.ndarray) -> list:
        return list(zip(*(a[indices] for a in self.arrays)))

    def gather_columns(self, indices: np.ndarray) -> tuple:
        return tuple(a[indices] for a in self.arrays)

    def _options(self) -> str:
        return f"{self._n} rows: " + ", ".join(_shape_text(a) for a in self.arrays)

    def digest(self) -> str:
        return array_digest(*self.arrays)


def from_arrays(*arrays: Any) -> FromArrays:
    """An indexed reader of equal-length arrays' rows i as tuples; for one array's rows as plain values use np_array.

    Entry i is the tuple of the arrays' rows i, so with one array the entries
    are 1-tuples ``(row,)``, not the rows themselves (``np_array(x)`` gives
    those). Nothing is copied: ``r[i]`` and iteration read the arrays in place,
    and a batch over this reader is gathered with one vectorised take per array.

    >>> import numpy as np
    >>> r = from_arrays(np.arange(6).reshape(3, 2), np.array([7, 8, 9]))
    >>> image, label = r[1]
    >>> len(r), image.tolist(), int(label)
    (3, [2, 3], 8)
    >>> [int(label) for _, label in r()]
    [7, 8, 9]
    >>> from_arrays(np.zeros(3), np.zeros(4))
    Traceback (most recent call last):
    ...
    ValueError: from_arrays needs arrays of equal length, got lengths [3, 4] (array 0 has 3 rows, array 1 has 4 rows)
    >>> [tuple(int(v) for v in entry) for entry in from_arrays(np.array([5, 6]))()]  # one array: 1-tuples
    [(5,), (6,)]

    See Also:
        np_array, from_sequence
    """
    if not arrays:
        raise ValueError("from_arrays needs at least one array")
    converted = []
    for k, a in enumerate(arrays):
        a = np.asarray(a)
        if a.ndim == 0:
            raise ValueError(f"from_arrays: array {k} is a scalar; give arrays with a first (row) axis")
        converted.append(a)
    lengths = [len(a) for a in converted]
    if len(set(lengths)) > 1:
        detail = ", ".join(f"array {k} has {n} rows" for k, n in enumerate(lengths))
        raise ValueError(f"from_arrays needs arrays of equal length, got lengths {lengths} ({detail})")
    return FromArrays(tuple(converted))


class NpArray(IndexedReader):
    name = "np_array"

    def __init__(self, array: np.ndarray):
        super().__init__()
        self.array = array

    def __len__(self) -> int:
        return len(self.array)

    def _get(self, i: int) -> Any:
        return self.array[i]

    def gather(self, indices: np.ndarray) -> list:
        return list(self.array[indices])

    def gather_columns(self, indices: np.ndarray) -> np.ndarray:
        return self.array[indices]

    def _options(self) -> str:
        return f"{len(self.array)} rows: {_shape_text(self.array)}"

    def digest(self) -> str | None:
        return value_digest(self.array) if self.array.dtype == object else array_digest(self.array)


def np_array(x: Any) -> NpArray:
    """An indexed reader over the rows of an array (Paddle's ``np_array``).

    >>> import numpy as np
    >>> r = np_array(np.array([[1, 2], [3, 4]]))
    >>> [row.tolist() for row in r()]
    [[1, 2], [3, 4]]
    >>> len(r), r[-1].tolist()
    (2, [3, 4])
    """
    a = np.asarray(x)
    if a.ndim == 0:
        raise ValueError(f"np_array needs an array with at least one axis, got the scalar {a!r}")
    return NpArray(a)


class FromSequence(IndexedReader):
    name = "from_sequence"

    def __init__(self, seq: Sequence):
        super().__init__()
        self.seq = seq

    def __len__(self) -> int:
        return len(self.seq)

    def _get(self, i: int) -> Any:
        return self.seq[i]

    def gather(self, indices: np.ndarray) -> Iterator:
        return map(self.seq.__getitem__, indices.tolist())

    def _options(self) -> str:
        return f"{type(self.seq).__name__} of {len(self.seq)}"

    def digest(self) -> str | None:
        if isinstance(self.seq, range):  # its repr is its content, however long
            return value_digest([repr(self.seq)])
        return value_digest(self.seq)


def from_sequence(seq: Sequence) -> FromSequence:
    """An indexed reader over any sequence (list, tuple, range, string, ...).

    >>> r = from_sequence(["a", None, ""])
    >>> list(r()), len(r), r[1] is None
    (['a', None, ''], 3, True)
    >>> from_sequence(x for x in "ab")
    Traceback (most recent call last):
    ...
    TypeError: from_sequence needs a sequence with len and [i], got generator; for a one-shot iterable write a generator function and use it as the reader
    """
    if not (hasattr(seq, "__len__") and hasattr(seq, "__getitem__")) or isinstance(seq, Stage) and not is_indexed(seq):
        raise TypeError(
            f"from_sequence needs a sequence with len and [i], got {type(seq).__name__}; for a "
            "one-shot iterable write a generator function and use it as the reader"
        )
    return FromSequence(seq)


class TextDecodeError(UnicodeDecodeError):
    """Bytes of a text file that do not decode; the message names the file and line and says what to do."""

    def __init__(self, encoding: str, data: bytes, start: int, end: int, reason: str, message: str = ""):
        super().__init__(encoding, data, start, end, reason)  # (the arguments pickle and rebuild it)
        self.message = message

    def __str__(self) -> str:
        return self.message or super().__str__()


class TextFile(Stage):
    name = "text_file"

    def __init__(self, path: str, encoding: str, errors: str):
        super().__init__()
        self.path, self.encoding, self.errors = path, encoding, errors

    def _stream(self, pass_id: int) -> Iterator[str]:
        if not os.path.isfile(self.path):
            raise FileNotFoundError(f"text_file: no file at {self.path!r} (cwd {os.getcwd()!r}); check the path")
        return _lines(self.path, self.encoding, self.errors)

    def _options(self) -> str:
        opts = repr(self.path)
        opts += "" if self.encoding == "utf-8" else f", encoding={self.encoding!r}"
        return opts + ("" if self.errors == "strict" else f", errors={self.errors!r}")

    def identity(self) -> str:
        return self.title().replace(repr(self.path), "file", 1)  # the file's digest says which; not its path

    def digest(self) -> str | None:
        return file_digest(self.path) if os.path.isfile(self.path) else None


def _lines(path: str, encoding: str, errors: str) -> Iterator[str]:
    # opened here, in the generator, so a pass that is never iterated holds no file
    with open(path, encoding=encoding, errors=errors, newline="") as f:
        try:
            for line in f:
                yield line.rstrip("\r\n")
        except UnicodeDecodeError as exc:
            raise _decode_error(path, encoding, exc) from None


def _mark(exc: UnicodeError) -> tuple[str, int]:
    """A decoding error handler that puts a lone surrogate (never in strictly decoded text) for bad bytes."""
    return "\udc00", exc.end


def _decode_error(path: str, encoding: str, exc: UnicodeDecodeError) -> TextDecodeError:
    """``exc`` (raised decoding a chunk of the file, not a line) as an error naming the line of its bad bytes."""
    codecs.register_error("readerkit.mark", _mark)  # (registering again replaces it: no harm)
    with open(path, encoding=encoding, errors="readerkit.mark", newline="") as f:
        line = next((k for k, text in enumerate(f, 1) if "\udc00" in text), None)
    bad = exc.object[exc.start:exc.end]
    where = f"line {line}" if line is not None else "a line"
    message = (f"text_file: {where} of {path!r} is not valid {encoding}: {exc.reason} ({bytes(bad)!r}); "
               f"pass the file's encoding= (e.g. 'latin-1'), or errors='replace' (or 'ignore') to read past bad bytes")
    return TextDecodeError(exc.encoding, exc.object, exc.start, exc.end, exc.reason, message)


def text_file(path: str | os.PathLike, encoding: str = "utf-8", errors: str = "strict") -> TextFile:
    """A reader of a text file's lines, without their line endings.

    The file is opened when a pass starts and closed when it ends or stops.
    ``encoding`` and ``errors`` are ``open()``'s: bytes that do not decode
    raise an error naming the file and line, unless ``errors`` says what to do
    with them ("replace", "ignore", "backslashreplace", "surrogateescape", ...).

    >>> import tempfile, os
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "lines.txt")
    >>> _ = open(path, "w").write("first\\n\\nthird\\r\\n")
    >>> list(text_file(path)())
    ['first', '', 'third']
    >>> _ = open(path, "wb").write(b"caf\\xc3\\xa9\\nna\\xefve\\n")
    >>> list(text_file(path)())
    Traceback (most recent call last):
    ...
    readers.sources.TextDecodeError: text_file: line 2 of '.../lines.txt' is not valid utf-8: invalid continuation byte (b'\\xef'); pass the file's encoding= (e.g. 'latin-1'), or errors='replace' (or 'ignore') to read past bad bytes
    >>> r = text_file(path, errors="ignore")
    >>> list(r()), r
    (['café', 'nave'], text_file('.../lines.txt', errors='ignore'))
    """
    for kind, name, find in (("encoding", encoding, codecs.lookup), ("errors", errors, codecs.lookup_error)):
        try:
            find(name)
        except (LookupError, TypeError):
            raise ValueError(f"text_file: unknown {kind} {name!r}; give one open() takes, e.g. "
                             f"{'utf-8 or latin-1' if kind == 'encoding' else 'strict, replace or ignore'}") from None
    return TextFile(os.fspath(path), encoding, errors)
