"""readers.storage.codec: every supported value survives the disk blob exactly; anything else is refused by name,
and a damaged blob is a CorruptEntry, never a wrong value."""
from __future__ import annotations

import json
import math
import struct
import sys

import numpy as np
import pytest

from readers.storage.codec import MAGIC, CorruptEntry, decode, encode, size_of
from readers.testing import assert_same


def blob_with_header(header: bytes, tail: bytes = b"") -> bytes:
    return struct.pack("<4sI", MAGIC, len(header)) + header + tail


def arrays_in(value) -> list[np.ndarray]:
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, (tuple, list)):
        return [a for v in value for a in arrays_in(v)]
    if isinstance(value, dict):
        return [a for v in value.values() for a in arrays_in(v)]
    return []


GRID = np.arange(24, dtype=np.float64).reshape(4, 6)
PACKED = np.dtype([("id", "<u2"), ("score", "<f8"), ("tag", "S3")])
SUBARRAY = np.dtype([("xyz", "<f4", (3,)), ("n", "u1")])

PLAIN = {
    "none": None, "true": True, "false": False, "zero": 0, "negative": -7, "float": 1.5, "negative zero": -0.0,
    "huge int": 2 ** 200, "huge negative int": -(3 ** 700), "nan": math.nan, "inf": math.inf, "-inf": -math.inf,
    "empty str": "", "unicode": "héllo ✓ 日本語 🎉 \u0000 \ud800",
    "empty tuple": (), "empty list": [], "empty dict": {},
}
NESTED = {
    "tuple in list in dict": {"a": [(1, "x"), (2, None)], "b": ({"c": [[], ()]},)},
    "dict with int keys": {0: "zero", 7: [1, 2], -3: {4: 5}},
    "dict with mixed keys": {(1, "t"): 1, b"raw": 2, None: 3, 2.5: 4, "s": 5},
    "arrays deep inside": [{"x": (np.arange(3), [np.ones((2, 2), np.float32)])}, b"\x00\xff"],
    "bytes": (b"", b"\x00\x01\xfe\xff" * 100),
    "nans in containers": [math.nan, {"v": (math.inf, -math.inf)}],
    "the same array twice": (GRID, GRID),
}
SCALARS = [np.int8(-3), np.uint16(65535), np.int32(-2 ** 31), np.int64(2 ** 62), np.uint64(2 ** 64 - 1),
           np.float16(0.5), np.float32(1.25), np.float64(2.5), np.float64(math.nan), np.longdouble(3.5),
           np.complex64(1 - 2j), np.complex128(3 + 4j), np.bool_(True), np.bool_(False),
           np.datetime64("2020-01-02T03:04", "m"), np.timedelta64(5, "s"), np.bytes_(b"ab")]
ARRAYS = {
    "float64 grid": GRID,
    "transposed": GRID.T,
    "every other column": GRID[:, ::2],
    "reversed": GRID[::-1, ::-1],
    "fortran order": np.asfortranarray(GRID),
    "big-endian": np.arange(10, dtype=">i4"),
    "big-endian float transposed": np.arange(12, dtype=">f8").reshape(3, 4).T,
    "bool": np.array([True, False, True]),
    "uint64 extremes": np.array([0, 2 ** 64 - 1], dtype=np.uint64),
    "float16": np.linspace(-1, 1, 7, dtype=np.float16),
    "complex": np.array([1 + 2j, math.nan * 1j], dtype=np.complex64),
    "nan and inf": np.array([math.nan, math.inf, -math.inf, -0.0]),
    "unicode strings": np.array(["ab", "ü", "日本語"]),
    "byte strings": np.array([b"a", b"bcd"]),
    "datetime": np.array(["2020-01-01", "2021-06-30"], dtype="datetime64[D]"),
    "timedelta": np.array([1, -2], dtype="timedelta64[ms]"),
    "empty": np.zeros(0),
    "empty 2-d": np.zeros((0, 3), dtype=">f4"),
    "empty columns": np.zeros((3, 0), dtype=np.int16),
    "0-d": np.array(5, dtype=np.int32),
    "records": np.array([(1, 0.5, b"abc"), (2, -1.0, b"")], dtype=PACKED),
    "records, every other": np.zeros(6, dtype=PACKED)[::2],
    "empty records": np.zeros(0, dtype=PACKED),
    "records with a subarray field": np.array([([1, 2, 3], 4)], dtype=SUBARRAY),
    "aligned records (padding)": np.array([(1, 2)], dtype=np.dtype([("a", "u1"), ("b", "<i4")], align=True)),
    "nested records": np.array([((1.0, 2.0), 3)], dtype=[("p", [("x", "<f4"), ("y", "<f4")]), ("n", "<i2")]),
    "odd sizes before an aligned one": (np.ones(3, np.uint8), np.arange(5, dtype=np.float64), np.ones(1, "S7")),
}


# -- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("value", list(PLAIN.values()), ids=list(PLAIN))
def test_plain_values_round_trip(value):
    got = decode(encode(value))
    assert_same(got, value)
    if isinstance(value, float) and value == 0:
        assert math.copysign(1, got) == math.copysign(1, value)


@pytest.mark.parametrize("value", list(NESTED.values()), ids=list(NESTED))
def test_nested_containers_round_trip_keeping_types_and_key_order(value):
    assert_same(decode(encode(value)), value)


@pytest.mark.parametrize("scalar", SCALARS, ids=repr)
def test_numpy_scalars_keep_their_dtype(scalar):
    # the first pass hands out the value computed, later ones the value decoded: their types must agree
    got = decode(encode({"s": scalar}))["s"]
    assert type(got) is type(scalar) and got.dtype == scalar.dtype
    assert got == scalar or (got != got and scalar != scalar)


@pytest.mark.parametrize("array", list(ARRAYS.values()), ids=list(ARRAYS))
def test_arrays_round_trip_with_dtype_and_shape(array):
    got = decode(encode([array]))[0]
    assert_same(got, array)


@pytest.mark.parametrize("value", [GRID.T, (GRID, {"b": np.zeros(0)}), ARRAYS["records"], [b"x", GRID[:, 1]]])
def test_decoded_arrays_are_read_only(value):
    got = arrays_in(decode(encode(value)))
    assert got and not any(a.flags.writeable for a in got)
    with pytest.raises(ValueError, match="read-only"):
        got[0][...] = 0


def test_each_decode_gives_containers_of_its_own():
    blob = encode({"a": [1, [2]], "b": {3: (4,)}})
    first = decode(blob)
    first["a"][1].append("changed")
    first["b"][5] = 6
    assert decode(blob) == {"a": [1, [2]], "b": {3: (4,)}}


def test_bytes_like_values_come_back_as_bytes():
    got = decode(encode([bytearray(b"ab"), memoryview(b"cd")]))
    assert_same(got, [b"ab", b"cd"])


def test_arrays_start_on_eight_byte_boundaries():
    blob = encode((np.ones(3, np.uint8), np.arange(4, dtype=np.float64), np.zeros(0), np.arange(2, dtype=np.int16)))
    start = np.frombuffer(blob, np.uint8).ctypes.data
    offsets = [a.ctypes.data - start for a in arrays_in(decode(blob)) if a.size]
    assert len(offsets) == 3 and all(at % 8 == 0 for at in offsets)


def test_the_header_is_json_naming_each_array():
    blob = encode({"a": (np.arange(3, dtype=">i2"), "x"), 1: [b"z", None]})
    (size,) = struct.unpack_from("<I", blob, 4)
    tree, specs = json.loads(blob[8:8 + size])
    assert blob[:4] == MAGIC and specs == [[">i2", [3]], ["|u1", [1]]]
    assert tree == ["d", [["a", ["t", [["a", 0], "x"]]], [1, ["l", [["b", 1], None]]]]]


# -- refusals ---------------------------------------------------------------------------------


class Custom:
    pass


@pytest.mark.parametrize("value, where, kind", [
    (object(), "entry", "object"),
    ((1, Custom()), r"entry\[1\]", "Custom"),
    ({"a": [1, {2, 3}]}, r"entry\['a'\]\[1\]", "set"),
    ([0, {Custom(): 1}], r"entry\[1\] key", "Custom"),
    ((1 + 2j,), r"entry\[0\]", "complex"),
    ({"f": len}, r"entry\['f'\]", "builtin_function_or_method"),
])
def test_unsupported_types_are_refused_naming_where(value, where, kind):
    with pytest.raises(TypeError, match=rf"^{where} is of type {kind}, which cannot be stored on disk: .*"
                                        r"directory=None"):
        encode(value)


@pytest.mark.parametrize("value, where", [
    (np.array([None, 1], dtype=object), r"entry"),
    ((1, np.array([{}], dtype=object)), r"entry\[1\]"),
    ({"ok": np.ones(2), "bad": np.zeros(2, dtype=[("o", object)])}, r"entry\['bad'\]"),
])
def test_object_arrays_are_refused_naming_where(value, where):
    with pytest.raises(TypeError, match=rf"^{where} is an array of .* values, which have no raw bytes to store"):
        encode(value)


def test_records_with_out_of_order_fields_are_refused_with_a_type_error():
    shuffled = np.dtype({"names": ["a", "b"], "formats": ["<i4", "<i4"], "offsets": [4, 0]})
    with pytest.raises(TypeError, match="directory=None"):
        encode(np.zeros(2, dtype=shuffled))


# -- damaged blobs ----------------------------------------------------------------------------


RICH = ({"ids": np.arange(5, dtype=np.int16), 3: [b"xy", np.float32(2.5)]}, np.zeros((2, 3), ">f8"), "end")


def test_every_truncation_is_a_corrupt_entry():
    blob = encode(RICH)
    for cut in range(len(blob)):
        with pytest.raises(CorruptEntry, match=f"a cached entry of {cut} bytes is cut short"):
            decode(blob[:cut])
    assert_same(decode(blob), RICH)


@pytest.mark.parametrize("extra", [b"\x00", bytes(8), b"junk"])
def test_trailing_bytes_are_a_corrupt_entry(extra):
    for value in (RICH, None, np.zeros(0)):
        with pytest.raises(CorruptEntry):
            decode(encode(value) + extra)


@pytest.mark.parametrize("magic", [b"RKC2", b"rkc1", b"\x00\x00\x00\x00", b"PK\x03\x04"])
def test_a_wrong_magic_is_a_corrupt_entry(magic):
    with pytest.raises(CorruptEntry):
        decode(magic + encode(RICH)[4:])


GARBAGE_HEADERS = {
    "not json": b"not json",
    "not utf-8": b"\xff\xfe\xfd",
    "not a pair": b"[1,2,3]",
    "specs not a list": b"[null, 5]",
    "unknown tag": b'[["z",0],[]]',
    "tag without body": b'[["a"],[]]',
    "array out of range": b'[["a",3],[]]',
    "unknown dtype": b'[["a",0],[["zz",[1]]]]',
    "object dtype": b'[["a",0],[["|O",[1]]]]',
    "bad shape": b'[["a",0],[["<f8","x"]]]',
    "negative shape": b'[["a",0],[["<i1",[-1]]]]',
    "unhashable dict key": b'[["d",[[["l",[]],1]]],[]]',
    "too deep": b"[" * 100_000,
}


@pytest.mark.parametrize("header", list(GARBAGE_HEADERS.values()), ids=list(GARBAGE_HEADERS))
def test_a_garbage_header_is_a_corrupt_entry(header):
    with pytest.raises(CorruptEntry):
        decode(blob_with_header(header, tail=bytes(16)))


@pytest.mark.parametrize("size", [0, 1, 2 ** 32 - 1])
def test_a_wrong_header_length_is_a_corrupt_entry(size):
    blob = encode(RICH)
    with pytest.raises(CorruptEntry):
        decode(struct.pack("<4sI", MAGIC, size) + blob[8:])


def test_arrays_longer_than_the_blob_are_a_corrupt_entry():
    header = json.dumps([["a", 0], [["<f8", [1000]]]]).encode()
    with pytest.raises(CorruptEntry) as caught:
        decode(blob_with_header(header, tail=bytes(64)))
    assert isinstance(caught.value, ValueError)


# -- sizes ------------------------------------------------------------------------------------


def test_size_of_counts_array_bytes_and_container_items():
    a, b = np.zeros(1000, np.float32), np.ones((10, 10))
    assert size_of(a) == 4000 + 112 and size_of(b) == 800 + 112
    assert size_of(GRID[:, ::2]) == GRID[:, ::2].nbytes + 112  # a view counts what it shows
    pair = (a, "x")
    assert size_of(pair) == sys.getsizeof(pair) + size_of(a) + sys.getsizeof("x")
    assert size_of([a, b]) == sys.getsizeof([a, b]) + size_of(a) + size_of(b)
    mapping = {"k": a, 3: [b]}
    assert size_of(mapping) == (sys.getsizeof(mapping) + size_of("k") + size_of(a) + size_of(3) + size_of([b]))
    assert size_of(b"x" * 500) == sys.getsizeof(b"x" * 500) > 500
