"""The IDX parser: every type code and rank, gzipped or not, and a clear error for every fault."""
import gzip
import struct

import numpy as np
import pytest

from readers.sources.idx import IdxError, read_idx, write_idx

DTYPES = ["u1", "i1", "i2", "i4", "f4", "f8"]
CODES = {"u1": 0x08, "i1": 0x09, "i2": 0x0B, "i4": 0x0C, "f4": 0x0D, "f8": 0x0E}
SHAPES = {0: (), 1: (5,), 2: (3, 4), 3: (2, 3, 4), 4: (2, 1, 3, 2)}


def sample(dtype: str, shape: tuple) -> np.ndarray:
    """Values that use the dtype's whole range, including the sign bit and extreme values."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape))
    rng = np.random.default_rng(7)
    if dt.kind == "f":
        values = rng.standard_normal(n) * 1e3
        values[: min(n, 3)] = [np.finfo(dt).max, -np.finfo(dt).tiny, -0.0][: min(n, 3)]
    else:
        info = np.iinfo(dt)
        values = rng.integers(info.min, info.max, size=n, endpoint=True)
        values[: min(n, 2)] = [info.min, info.max][: min(n, 2)]
    return values.astype(dt).reshape(shape)


def write_raw(path, data: bytes, *, compress: bool = False):
    opener = gzip.open if compress else open
    with opener(path, "wb") as f:
        f.write(data)
    return path


def header(code: int, *dims: int) -> bytes:
    return bytes([0, 0, code, len(dims)]) + struct.pack(f">{len(dims)}I", *dims)


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("rank", sorted(SHAPES))
@pytest.mark.parametrize("dtype", DTYPES)
def test_idx_round_trips_every_type_code_and_rank(tmp_path, dtype, rank, compress):
    array = sample(dtype, SHAPES[rank])
    path = tmp_path / ("a.idx.gz" if compress else "a.idx")
    write_idx(path, array, compress=compress)
    back = read_idx(path)
    assert back.dtype == np.dtype(dtype) and back.dtype.isnative
    assert back.shape == array.shape
    np.testing.assert_array_equal(back, array)
    assert back.flags.writeable  # a private copy, not a view of the file's bytes


@pytest.mark.parametrize("dtype", DTYPES)
def test_idx_write_uses_the_documented_layout(tmp_path, dtype):
    array = sample(dtype, (2, 3))
    path = tmp_path / "a.idx"
    write_idx(path, array)
    expected = header(CODES[dtype], 2, 3) + array.astype(np.dtype(dtype).newbyteorder(">")).tobytes()
    assert path.read_bytes() == expected


@pytest.mark.parametrize(
    "dtype, fmt, values",
    [
        ("u1", "B", [0, 1, 127, 128, 255]),
        ("i1", "b", [-128, -1, 0, 1, 127]),
        ("i2", "h", [-32768, -2, 258, 32767]),
        ("i4", "i", [-(2**31), -1, 16909060, 2**31 - 1]),
        ("f4", "f", [1.5, -0.25, 3.0e38, 2.0**-126]),
        ("f8", "d", [1.5, -0.25, 1e300, -5e-324]),
    ],
)
def test_idx_decodes_big_endian_values_written_by_hand(tmp_path, dtype, fmt, values):
    data = header(CODES[dtype], 2, 2) if len(values) == 4 else header(CODES[dtype], len(values))
    data += struct.pack(f">{len(values)}{fmt}", *values)
    back = read_idx(write_raw(tmp_path / "hand.idx", data))
    assert back.dtype.isnative
    assert back.ravel().tolist() == pytest.approx(values, rel=1e-7, abs=0)
    if dtype in ("u1", "i1", "i2", "i4", "f8"):
        assert back.ravel().tolist() == values  # exactly, not just approximately


def test_idx_reads_the_mnist_label_header(tmp_path):
    # magic 2049 = 0x00000801: unsigned bytes, rank 1, as in train-labels-idx1-ubyte
    data = struct.pack(">II", 2049, 3) + bytes([5, 0, 4])
    assert read_idx(write_raw(tmp_path / "labels", data)).tolist() == [5, 0, 4]


def test_idx_rank_0_is_a_single_value(tmp_path):
    path = write_raw(tmp_path / "scalar.idx", header(0x0C) + struct.pack(">i", -7))
    back = read_idx(path)
    assert back.shape == () and back.dtype == np.int32 and int(back) == -7


@pytest.mark.parametrize("shape", [(0,), (0, 28, 28), (3, 0)])
def test_idx_round_trips_empty_dimensions(tmp_path, shape):
    write_idx(tmp_path / "empty.idx", np.zeros(shape, np.uint8))
    assert read_idx(tmp_path / "empty.idx").shape == shape


@pytest.mark.parametrize("order", [">", "<"])
def test_idx_write_accepts_either_byte_order_and_non_contiguous_arrays(tmp_path, order):
    array = np.arange(12, dtype=f"{order}i2").reshape(3, 4)[:, ::2].T
    write_idx(tmp_path / "a.idx", array)
    np.testing.assert_array_equal(read_idx(tmp_path / "a.idx"), array)


@pytest.mark.parametrize("dtype", ["bool", "int64", "uint16", "float16", "complex64"])
def test_idx_write_rejects_dtypes_without_a_type_code(tmp_path, dtype):
    with pytest.raises(ValueError, match=f"no type code for dtype {dtype}"):
        write_idx(tmp_path / "a.idx", np.zeros(2, dtype))


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("first", [b"\x01\x00\x08\x01", b"\x00\x01\x08\x01", b"\xff\xd8\xff\xe0", b"PK\x03\x04"])
def test_idx_wrong_magic_names_the_file(tmp_path, first, compress):
    path = write_raw(tmp_path / "bad.idx", first + struct.pack(">I", 1) + b"\x00", compress=compress)
    with pytest.raises(IdxError, match=r"bad\.idx: wrong magic number 0x" + first.hex()):
        read_idx(path)


@pytest.mark.parametrize("code", [0x00, 0x07, 0x0A, 0x0F, 0xFF])
def test_idx_unknown_type_code_names_the_file(tmp_path, code):
    path = write_raw(tmp_path / "bad.idx", header(code, 1) + b"\x00" * 8)
    with pytest.raises(IdxError, match=rf"bad\.idx: unknown IDX type code 0x{code:02X}"):
        read_idx(path)


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize(
    "data, fault",
    [
        (b"", "0 bytes is too short"),
        (b"\x00\x00\x08", "3 bytes is too short"),
        (header(0x08, 60000, 28, 28)[:9], "truncated header: 3 dimensions need 16 bytes, the file has 9"),
        (header(0x08, 2, 2)[:4], "truncated header: 2 dimensions need 12 bytes, the file has 4"),
    ],
)
def test_idx_truncated_header_names_the_file(tmp_path, data, fault, compress):
    path = write_raw(tmp_path / "short.idx", data, compress=compress)
    with pytest.raises(IdxError, match=r"short\.idx: " + fault):
        read_idx(path)


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize(
    "data, fault",
    [
        (header(0x08, 2, 3) + bytes(5), "truncated: the header promises 6 values of uint8 (6 bytes of data) but the file has 5"),
        (header(0x0E, 2) + bytes(15), "truncated: the header promises 2 values of float64 (16 bytes of data) but the file has 15"),
        (header(0x0B), "truncated: the header promises 1 values of int16 (2 bytes of data) but the file has 0"),
        (header(0x08, 2, 3) + bytes(7), "trailing data: the header promises 6 values of uint8 (6 bytes of data) but the file has 7"),
        (header(0x0C, 1) + bytes(5), "trailing data: the header promises 1 values of int32 (4 bytes of data) but the file has 5"),
    ],
)
def test_idx_data_length_mismatch_names_the_file(tmp_path, data, fault, compress):
    path = write_raw(tmp_path / "data.idx", data, compress=compress)
    with pytest.raises(IdxError, match=r"data\.idx: " + fault.replace("(", r"\(").replace(")", r"\)")):
        read_idx(path)


@pytest.mark.parametrize("dims", [(0xFFFFFFFF,) * 3, (65536,) * 4, (2**32 - 1, 2**32 - 1, 2, 2)])
def test_idx_huge_dimensions_are_reported_as_truncated(tmp_path, dims):
    # regression: the element count was an int64 np.prod that wrapped around, so
    # 65536**4 promised "0 values" and the file was blamed for trailing data
    path = write_raw(tmp_path / "huge.idx", header(0x08, *dims) + b"abc")
    with pytest.raises(IdxError, match=rf"huge\.idx: truncated: the header promises {int(np.prod(dims, dtype=object))} values"):
        read_idx(path)


@pytest.fixture
def good_gzip(tmp_path):
    """A gzipped IDX file big enough for several deflate blocks, and its bytes."""
    images = np.random.default_rng(0).integers(0, 256, size=(40, 28, 28), dtype=np.uint8)
    images[:, :8] = 0  # some compressible structure, like real digits
    path = tmp_path / "images.idx3-ubyte.gz"
    write_idx(path, images, compress=True)
    return path, path.read_bytes()


@pytest.mark.parametrize("where", [0.25, 0.5, 0.75, 0.999])
def test_idx_corrupt_gzip_names_the_file(good_gzip, where):
    path, good = good_gzip
    bad = bytearray(good)
    pos = int(len(bad) * where)
    bad[pos] ^= 0xFF
    bad[pos - 1] ^= 0x55
    path.write_bytes(bytes(bad))
    with pytest.raises(IdxError, match=r"images\.idx3-ubyte\.gz: the gzip stream is corrupt or truncated"):
        read_idx(path)


@pytest.mark.parametrize("keep", [2, 10, 100, 0.5, -4, -1])
def test_idx_truncated_gzip_names_the_file(good_gzip, keep):
    path, good = good_gzip
    cut = int(len(good) * keep) if isinstance(keep, float) else keep % len(good)
    path.write_bytes(good[:cut])
    with pytest.raises(IdxError, match=r"images\.idx3-ubyte\.gz: the gzip stream is corrupt or truncated .*download the file again"):
        read_idx(path)


def test_idx_gzip_with_trailing_garbage_names_the_file(good_gzip):
    path, good = good_gzip
    path.write_bytes(good + b"garbage")
    with pytest.raises(IdxError, match=r"images\.idx3-ubyte\.gz: the gzip stream is corrupt"):
        read_idx(path)


def test_idx_missing_file_is_a_file_not_found_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_idx(tmp_path / "nothing.idx")


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("data, expect, fault", [
    # regression: an image file (cut short, as an interrupted download leaves it) given for the
    # labels was blamed as "truncated: the header promises 47040000 values", not as the wrong file
    (header(0x08, 60000, 28, 28) + bytes(100), {"ndim": 1},
     "holds uint8 of 3 dimensions, shape (60000, 28, 28), but 1 dimension was expected"),
    (header(0x08, 60000, 28, 28)[:9], {"ndim": 1}, "holds uint8 of 3 dimensions, but 1 dimension was expected"),
    (header(0x0D, 3) + bytes(12), {"ndim": 1, "dtype": (np.uint8, np.int8, np.int32)},
     "holds float32 of 1 dimension, shape (3,), but uint8, int8 or int32 of 1 dimension was expected"),
    (header(0x0C, 2, 5) + bytes(3), {"dtype": np.uint8}, "holds int32 of 2 dimensions, shape (2, 5), but uint8 was"),
    (header(0x08, 7) + bytes(7), {"ndim": 3, "dtype": "u1"}, "holds uint8 of 1 dimension, shape (7,), but uint8 of 3 dimensions"),
])
def test_idx_file_of_another_rank_or_type_than_expected_says_so_before_its_size(tmp_path, data, expect, fault, compress):
    path = write_raw(tmp_path / "labels.idx", data, compress=compress)
    with pytest.raises(IdxError) as info:
        read_idx(path, **expect)
    message = str(info.value)
    assert message.startswith(f"{path}: {fault}") and "check that this is the file meant" in message
    assert "truncated" not in message


@pytest.mark.parametrize("array, expect", [
    (np.array([3, 1], np.uint8), {"ndim": 1, "dtype": np.uint8}),
    (np.zeros((2, 3, 4), np.int16), {"ndim": 3, "dtype": (np.uint8, np.int16)}),
    (np.float64(1.5), {"ndim": 0}),
])
def test_idx_file_as_expected_reads_as_usual(tmp_path, array, expect):
    write_idx(tmp_path / "a.idx", array)
    np.testing.assert_array_equal(read_idx(tmp_path / "a.idx", **expect), array)
