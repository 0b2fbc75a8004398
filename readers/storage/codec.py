"""How ``readers.cached`` writes a computed entry to disk, and how big it is in memory.

An entry is stored as one blob, never pickled::

    b"RKC1" | header length (4 bytes, little-endian) | header (JSON) | arrays' raw bytes

The header is ``[tree, arrays]``. ``arrays`` lists each array's dtype (as
``.npy`` files write it: ``"<f4"``, or a record's fields with their
padding) and shape; their bytes
follow in that order, each starting on an 8-byte boundary. ``tree`` is the
entry with every array replaced by its number in that list:

=======================  ==================================================
value                    in the tree
=======================  ==================================================
None, bool, int, float,  as JSON has them (NaN and infinities as JSON
str                      extended by Python's ``json``)
numpy array              ``["a", i]``: array i, read back as a read-only
                         view of the blob
numpy scalar             ``["n", i]``: array i, of shape ()
bytes                    ``["b", i]``: array i, of dtype uint8
tuple, list              ``["t", [...]]``, ``["l", [...]]``
dict                     ``["d", [[key, value], ...]]``, keys as any of these
=======================  ==================================================

Anything else (an object array, a tensor, a user's class) is refused with a
``TypeError`` that says what to return instead. The CRC-32 that guards a
blob is kept beside it in the database (``readers.storage.sqlite``'s
``blob_crc``), checked on every read by the cache's disk tier
(``readers.caching.disk``).
"""
from __future__ import annotations

import functools
import json
import math
import struct
import sys
from typing import Any

import numpy as np

from readers.errors import BadType, BadValue

__all__ = ["CorruptEntry", "decode", "encode", "size_of"]

MAGIC = b"RKC1"
_HEAD = struct.Struct("<4sI")
_ALIGN = 8
_PLAIN = (type(None), bool, int, float, str)


class CorruptEntry(BadValue):
    """A stored blob that does not decode: cut short, or not written by this codec."""


def _array_spec(a: np.ndarray, where: str) -> list:
    """[dtype, shape] of an array as the header keeps them: the dtype as ``.npy`` files write it (records with
    their padding and nesting); refused, naming ``where``, when it has no raw bytes to store."""
    descr = _descr(a.dtype)
    if descr is None:
        raise BadType(f"{where} is an array of {a.dtype} values, which have no raw bytes to store on disk: "
                      "return arrays of numbers, strings or plain records, or cache in memory only "
                      "(directory=None)")
    return [descr, list(a.shape)]


@functools.lru_cache(maxsize=256)
def _descr(dtype: np.dtype) -> Any:
    """``dtype`` as a header writes it, or None when it cannot round-trip through one: worked out once per
    dtype, not once per array encoded."""
    if dtype.hasobject or dtype.kind not in "biufcSUVmM":
        return None
    try:
        descr = np.lib.format.dtype_to_descr(dtype)
        return descr if _dtype(json.loads(json.dumps(descr))) == dtype else None
    except (ValueError, TypeError):  # records with overlapping or out-of-order fields
        return None


def _dtype(descr: Any) -> np.dtype:
    """The dtype a header's (JSON) description stands for."""
    def fields(d: Any) -> Any:
        if isinstance(d, str):
            return d
        return [(f[0], fields(f[1]), *([tuple(f[2])] if len(f) > 2 else [])) for f in d]
    return np.lib.format.descr_to_dtype(fields(descr))


def encode(value: Any) -> bytes:
    """``value`` as one blob (see the module doc).

    >>> blob = encode((np.arange(3, dtype=np.int16), 7, {"name": "x"}))
    >>> blob[:4], decode(blob)[1:]
    (b'RKC1', (7, {'name': 'x'}))
    >>> encode(object())
    Traceback (most recent call last):
    ...
    readers.errors.BadType: entry is of type object, which cannot be stored on disk: return arrays, numbers, strings, bytes, or tuples, lists and dicts of them, or cache in memory only (directory=None)
    """
    arrays: list[np.ndarray] = []

    def tree(v: Any, where: str) -> Any:
        if isinstance(v, np.ndarray):
            specs.append(_array_spec(v, where))
            arrays.append(np.ascontiguousarray(v))
            return ["a", len(arrays) - 1]
        if isinstance(v, np.generic):  # before plain values: np.float64 is a float too
            specs.append(_array_spec(np.asarray(v), where))
            arrays.append(np.asarray(v))
            return ["n", len(arrays) - 1]
        if isinstance(v, _PLAIN):
            return v
        if isinstance(v, (bytes, bytearray, memoryview)):
            specs.append(["|u1", [len(bytes(v))]])
            arrays.append(np.frombuffer(bytes(v), dtype=np.uint8))
            return ["b", len(arrays) - 1]
        if type(v) is tuple:  # a namedtuple would come back a plain tuple: refused below
            return ["t", [tree(x, f"{where}[{i}]") for i, x in enumerate(v)]]
        if type(v) is list:
            return ["l", [tree(x, f"{where}[{i}]") for i, x in enumerate(v)]]
        if type(v) is dict:
            return ["d", [[tree(k, f"{where} key"), tree(x, f"{where}[{k!r}]")] for k, x in v.items()]]
        if isinstance(v, (tuple, list, dict)):
            base = next(t for t in (tuple, list, dict) if isinstance(v, t)).__name__
            raise BadType(f"{where} is a {type(v).__qualname__}, which would come back from disk a plain {base}: "
                          f"return a plain {base} ({base}(x)), or cache in memory only (directory=None)")
        raise BadType(f"{where} is of type {type(v).__qualname__}, which cannot be stored on disk: return arrays, "
                      "numbers, strings, bytes, or tuples, lists and dicts of them, or cache in memory only "
                      "(directory=None)")

    specs: list[list] = []
    shape = tree(value, "entry")
    try:
        header = json.dumps([shape, specs], separators=(",", ":")).encode()
    except ValueError as exc:  # an int of thousands of digits
        raise BadType(f"entry holds a value JSON cannot write ({exc}): cache it in memory only "
                      "(directory=None)") from None
    parts = [_HEAD.pack(MAGIC, len(header)), header]
    at = _HEAD.size + len(header)
    for a in arrays:
        pad = -at % _ALIGN
        if pad:
            parts.append(bytes(pad))
        raw = a.reshape(-1).view(np.uint8) if a.size else b""  # (a 0-d array reshapes to one element)
        parts.append(raw)
        at += pad + a.nbytes
    return b"".join(parts)


def decode(blob: bytes) -> Any:
    """The value ``encode`` stored in ``blob``; arrays are read-only views of it. Raises ``CorruptEntry``.

    >>> decode(encode([np.float32(1.5), b"ab", None]))
    [np.float32(1.5), b'ab', None]
    >>> decode(encode(np.ones(2)))[:1]
    array([1.])
    >>> decode(b"RKC1" + bytes(3))
    Traceback (most recent call last):
    ...
    readers.storage.codec.CorruptEntry: a cached entry of 7 bytes is cut short or was not written by readerkit's cache
    """
    try:
        magic, size = _HEAD.unpack_from(blob)
        if magic != MAGIC:
            raise BadValue("not a cached entry")
        shape, layout = _header(blob[_HEAD.size:_HEAD.size + size])
        at = _HEAD.size + size
        arrays = []
        for dt, dims, count in layout:
            at += -at % _ALIGN
            if at + count * dt.itemsize > len(blob):
                raise BadValue("arrays run past the end")
            arrays.append(np.frombuffer(blob, dtype=dt, count=count, offset=at).reshape(dims))
            at += count * dt.itemsize
        if at != len(blob):
            raise BadValue("bytes left over")
        return _rebuild(shape, arrays)
    except (ValueError, TypeError, KeyError, IndexError, struct.error, RecursionError) as exc:
        raise CorruptEntry(f"a cached entry of {len(blob)} bytes is cut short or was not written by readerkit's "
                           "cache") from exc


@functools.lru_cache(maxsize=1024)
def _header(header: bytes) -> tuple[Any, tuple]:
    """(tree, ((dtype, shape, count) per array)) of a header: parsed once per distinct header (entries of one
    shape whose labels take few values share a handful)."""
    shape, specs = json.loads(header)
    layout = []
    for dtype, dims in specs:
        dt = _dtype(dtype)
        dims = tuple(int(n) for n in dims)
        if any(n < 0 for n in dims):
            raise BadValue("a negative dimension")
        layout.append((dt, dims, math.prod(dims)))
    return shape, tuple(layout)


def _rebuild(t: Any, arrays: list[np.ndarray]) -> Any:
    if not isinstance(t, list):
        return t
    tag, body = t
    if tag == "a":
        return arrays[body]
    if tag == "n":
        return arrays[body][()]
    if tag == "b":
        return arrays[body].tobytes()
    if tag == "t":
        return tuple(_rebuild(x, arrays) for x in body)
    if tag == "l":
        return [_rebuild(x, arrays) for x in body]
    if tag == "d":
        return {_rebuild(k, arrays): _rebuild(x, arrays) for k, x in body}
    raise BadValue(f"unknown tag {tag!r}")


def size_of(value: Any) -> int:
    """Bytes ``value`` holds, as the memory tier counts them: an array's ``nbytes`` (plus its header), the
    sum over a tuple, list or dict's items, ``sys.getsizeof`` for anything else (an estimate).

    >>> size_of(np.zeros(1000, dtype=np.float32)) >= 4000
    True
    >>> size_of((np.zeros(10), 3)) > size_of(np.zeros(10))
    True
    """
    if isinstance(value, np.ndarray):
        return value.nbytes + 112
    if isinstance(value, (tuple, list)):
        return sys.getsizeof(value) + sum(size_of(v) for v in value)
    if isinstance(value, dict):
        return sys.getsizeof(value) + sum(size_of(k) + size_of(v) for k, v in value.items())
    return sys.getsizeof(value)
