"""The IDX file format (MNIST's): every type code and rank it allows, gzipped or not.

An IDX file is two zero bytes, a type code, the number of dimensions, one
big-endian uint32 per dimension, then the data in C order, big-endian.
Ranks 0 to 255 are allowed: rank 0 has no dimension sizes and holds one value
(the empty product), so a 0-d array round-trips as a 0-d array.
"""
from __future__ import annotations

import gzip
import math
import os
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from readers.errors import BadValue

__all__ = ["IdxError", "read_idx", "write_idx"]

#: type code -> big-endian numpy dtype
DTYPES = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
CODES = {dt.newbyteorder("="): code for code, dt in DTYPES.items()}


class IdxError(BadValue):
    """A file that is not a valid IDX file; the message names the file and the fault."""


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        head = f.read(2)
        f.seek(0)
        if head != b"\x1f\x8b":
            return f.read()
        try:
            return gzip.GzipFile(fileobj=f).read()
        except (OSError, EOFError, zlib.error) as exc:
            raise IdxError(
                f"{path}: the gzip stream is corrupt or truncated ({exc}); download the file again"
            ) from None


def _dimensions(n: int) -> str:
    return f"{n} dimension{'' if n == 1 else 's'}"


def _check_kind(path: str, raw: bytes, rank: int, have: np.dtype, ndim: int | None, dtype: Any) -> None:
    """Refuse a file whose header's rank or type is not the one expected (None: any)."""
    allowed = [] if dtype is None else [np.dtype(d) for d in (dtype if isinstance(dtype, (list, tuple)) else [dtype])]
    native = have.newbyteorder("=")
    if (ndim is None or rank == ndim) and (not allowed or native in allowed):
        return
    names = [d.name for d in allowed]
    kinds = " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
    expected = " of ".join(part for part in (kinds, _dimensions(ndim) if ndim is not None else "") if part)
    shape = ""
    if len(raw) >= 4 + 4 * rank:  # the header is whole: the shape is known
        shape = f", shape {tuple(int(d) for d in np.frombuffer(raw, '>u4', rank, 4))}"
    raise IdxError(f"{path}: holds {native.name} of {_dimensions(rank)}{shape}, but {expected} was expected; "
                   "check that this is the file meant (an image file given for labels, say)")


def read_idx(path: str | os.PathLike, *, ndim: int | None = None,
             dtype: npt.DTypeLike | Sequence[npt.DTypeLike] = None) -> np.ndarray:
    """Read an IDX file (or a gzipped one) into an array of native byte order.

    ``ndim`` and ``dtype`` (one or a sequence of those allowed) say what the
    file should hold; a file whose header says otherwise (an image file given
    for labels, say) is refused before its size is checked.

    >>> import tempfile, os
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "labels.idx1-ubyte")
    >>> write_idx(path, np.array([3, 1, 4], dtype=np.uint8))
    >>> read_idx(path).tolist()
    [3, 1, 4]
    >>> _ = open(path, "wb").write(b"\\x00\\x00\\x08\\x01\\x00\\x00\\x00\\x05abc")
    >>> read_idx(path)
    Traceback (most recent call last):
    ...
    readers.sources.idx.IdxError: .../labels.idx1-ubyte: truncated: the header promises 5 values of uint8 (5 bytes of data) but the file has 3; download the file again
    >>> write_idx(path, np.zeros((2, 28, 28), dtype=np.uint8))
    >>> read_idx(path, ndim=1, dtype=(np.uint8, np.int32))
    Traceback (most recent call last):
    ...
    readers.sources.idx.IdxError: .../labels.idx1-ubyte: holds uint8 of 3 dimensions, shape (2, 28, 28), but uint8 or int32 of 1 dimension was expected; check that this is the file meant (an image file given for labels, say)

    See Also:
        write_idx
    """
    path = os.fspath(path)
    raw = _read_bytes(path)
    if len(raw) < 4:
        raise IdxError(f"{path}: {len(raw)} bytes is too short for an IDX header (4 bytes at least); is this an IDX file?")
    if raw[0] != 0 or raw[1] != 0:
        raise IdxError(
            f"{path}: wrong magic number 0x{raw[:4].hex()}: an IDX file starts with two zero bytes "
            "(e.g. 0x00000803 for images); is this an IDX file?"
        )
    code, rank = raw[2], raw[3]
    if code not in DTYPES:
        known = ", ".join(f"0x{c:02X}" for c in DTYPES)
        raise IdxError(f"{path}: unknown IDX type code 0x{code:02X} (known: {known}); the file is corrupt")
    header = 4 + 4 * rank
    _check_kind(path, raw, rank, DTYPES[code], ndim, dtype)
    if len(raw) < header:
        raise IdxError(f"{path}: truncated header: {rank} dimensions need {header} bytes, the file has {len(raw)}")
    shape = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=rank, offset=4))
    dtype = DTYPES[code]
    count = math.prod(shape)  # Python ints: corrupt dimensions must not wrap around int64
    need = count * dtype.itemsize
    have = len(raw) - header
    if have != need:
        fault = "truncated" if have < need else "trailing data"
        raise IdxError(
            f"{path}: {fault}: the header promises {count} values of {dtype.newbyteorder('=').name} "
            f"({need} bytes of data) but the file has {have}; download the file again"
        )
    data = np.frombuffer(raw, dtype=dtype, count=count, offset=header).reshape(shape)
    return data.astype(dtype.newbyteorder("="), copy=dtype.itemsize > 1 or not data.flags.writeable)


def write_idx(path: str | os.PathLike, array: np.ndarray, *, compress: bool = False) -> None:
    """Write an array as an IDX file (gzipped when ``compress``); for tests and exports.

    >>> import tempfile, os
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "x.idx.gz")
    >>> write_idx(path, np.arange(6, dtype=np.float32).reshape(2, 3), compress=True)
    >>> read_idx(path)
    array([[0., 1., 2.],
           [3., 4., 5.]], dtype=float32)
    """
    a = np.asarray(array)
    native = a.dtype.newbyteorder("=")
    if native not in CODES:
        raise BadValue(f"write_idx: IDX has no type code for dtype {a.dtype}; use one of {sorted(d.name for d in CODES)}")
    if a.ndim > 255:
        raise BadValue(f"write_idx: IDX allows at most 255 dimensions, got {a.ndim}")
    code = CODES[native]
    body = bytes([0, 0, code, a.ndim]) + np.asarray(a.shape, dtype=">u4").tobytes()
    body += np.ascontiguousarray(a, dtype=DTYPES[code]).tobytes()
    opener = gzip.open if compress else open
    with opener(os.fspath(path), "wb") as f:
        f.write(body)
