"""readers.network.wire: the data-provider protocol's frames, columns, rejections and auth proof."""
import pickle
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from readers.network.wire import (
    HELLO_FRAME,
    MAX_FRAME,
    NotAuthorised,
    ProtocolError,
    RemoteError,
    UnsupportedVersion,
    challenge,
    decode,
    decode_column,
    encode,
    frame_length,
    frame_parts,
    pack_columns,
    parse_address,
    proof,
    raise_rejection,
    read_secret,
    rejection,
    unpack_columns,
)


@pytest.mark.parametrize("columns", [
    np.arange(12, dtype=np.int32).reshape(3, 4),
    (np.arange(6, dtype="<u2").reshape(3, 2), np.array([1.5, -2.0, 3.25]), np.array([True, False, True])),
    (np.zeros((0, 5), np.float32), np.zeros(0, np.int64)),
    np.array([b"ab", b"c"], dtype="S2"),
    np.arange(6, dtype=">i4")[::2],  # big-endian and strided: sent as its values, in its own byte order
])
def test_columns_cross_the_wire_as_dtype_shape_and_bytes(columns):
    meta, buffers = pack_columns(columns)
    header, body = decode(encode({"type": "entries", "id": 1, "columns": meta}, buffers)[4:])
    back = unpack_columns(header["columns"], body)
    for a, b in zip(columns if isinstance(columns, tuple) else (columns,), back if isinstance(back, tuple) else (back,)):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_an_object_column_is_refused_rather_than_pickled():
    with pytest.raises(ProtocolError, match="column 1 holds object values, which have no bytes to send"):
        pack_columns((np.zeros(2), np.array([{"a": 1}, None], dtype=object)))
    with pytest.raises(ProtocolError, match="cannot be sent as raw bytes"):
        unpack_columns({"dtype": "|O", "shape": [1]}, memoryview(bytes(8)))


@pytest.mark.parametrize("meta, body, message", [
    ({"dtype": "<i4", "shape": [2]}, bytes(12), "the body has 4 bytes more than its columns describe"),
    ({"dtype": "<i4", "shape": [-1]}, bytes(4), "cannot be sent as raw bytes"),
    ({"dtype": "no such type", "shape": [1]}, bytes(4), "is malformed"),
    ({"shape": [1]}, bytes(4), "is malformed"),
    ("columns", bytes(4), "must be an object or a list"),
])
def test_a_column_description_that_does_not_fit_its_body_is_a_protocol_error(meta, body, message):
    with pytest.raises(ProtocolError, match=message):
        unpack_columns(meta, memoryview(body))


def test_frame_limits_hold_before_anything_is_allocated():
    assert frame_length(struct.pack(">I", MAX_FRAME)) == MAX_FRAME
    with pytest.raises(ProtocolError, match="over the limit"):
        frame_length(struct.pack(">I", MAX_FRAME + 1))
    with pytest.raises(ProtocolError, match="over the limit of 4,096 here"):
        frame_length(struct.pack(">I", HELLO_FRAME + 1), HELLO_FRAME)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_random_payloads_are_protocol_errors_or_valid_messages_never_anything_else(payload):
    try:
        header, body = decode(payload)
    except ProtocolError:
        return
    assert isinstance(header, dict) and isinstance(header["type"], str) and isinstance(body, memoryview)


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.none() | st.integers() | st.text() | st.lists(st.integers(), max_size=3),
                    lambda inner: st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8),
       st.binary(max_size=64))
def test_random_column_descriptions_never_raise_anything_but_protocol_errors(meta, body):
    try:
        unpack_columns(meta, memoryview(body))
    except ProtocolError:
        pass


def test_rejections_become_typed_errors_naming_the_address():
    header, _ = decode(rejection("unsupported_version", "server speaks 1, client 2", 4)[4:])
    with pytest.raises(UnsupportedVersion, match="unsupported_version from 127.0.0.1:5: server speaks 1"):
        raise_rejection(header, "127.0.0.1:5")
    with pytest.raises(NotAuthorised):
        raise_rejection({"type": "error", "kind": "not_authorised", "message": "wrong secret"}, "h:1")
    with pytest.raises(RemoteError) as caught:
        raise_rejection({"type": "error", "kind": "out_of_range", "message": "index 9"}, "h:1")
    assert caught.value.kind == "out_of_range" and type(caught.value) is RemoteError
    again = pickle.loads(pickle.dumps(caught.value))  # errors cross process workers
    assert (again.kind, again.address, str(again)) == ("out_of_range", "h:1", str(caught.value))
    with pytest.raises(ProtocolError, match="unknown rejection kind 'oops'"):
        rejection("oops", "x")


def test_an_auth_proof_is_good_for_its_own_challenge_and_secret_only():
    first, second = challenge(), challenge()
    assert first != second
    answer = proof(b"s3cret", first)
    assert answer == proof(b"s3cret", first)
    assert answer != proof(b"s3cret", second)  # a replayed answer fails the next connection's challenge
    assert answer != proof(b"s3cret!", first) and b"s3cret" not in answer.encode()


def test_secrets_from_text_bytes_files_and_the_environment(tmp_path, monkeypatch):
    (tmp_path / "s").write_bytes(b"hunter2\n")
    (tmp_path / "w").write_bytes(b"hunter2\r\n")
    (tmp_path / "e").write_bytes(b"")
    assert read_secret(file=str(tmp_path / "s")) == read_secret(file=str(tmp_path / "w")) == b"hunter2"
    with pytest.raises(ValueError, match="the secret file is empty"):
        read_secret(file=str(tmp_path / "e"))
    monkeypatch.delenv("READERKIT_SECRET", raising=False)
    assert read_secret() is None
    monkeypatch.setenv("READERKIT_SECRET", "from-env")
    assert read_secret() == b"from-env" and read_secret("given") == b"given"


def test_frame_parts_join_to_the_encoded_frame_and_share_its_limit():
    buffers = [b"ab", memoryview(b"cd")]
    assert b"".join(frame_parts({"type": "x", "id": 1}, buffers)) == encode({"type": "x", "id": 1}, buffers)
    with pytest.raises(ProtocolError, match="MAX_FRAME"):
        frame_parts({"type": "x"}, [bytes(MAX_FRAME)])


@pytest.mark.parametrize("address, expected", [
    ("127.0.0.1:20001", ("127.0.0.1", 20001)),
    ("localhost:1", ("localhost", 1)),
    ("[::1]:65535", ("::1", 65535)),
    (("127.0.0.1", 5), ("127.0.0.1", 5)),
    (("::1", "6"), ("::1", 6)),
])
def test_parse_address_reads_host_and_port(address, expected):
    assert parse_address(address) == expected


@pytest.mark.parametrize("address", ["127.0.0.1", ":20001", "127.0.0.1:0", "127.0.0.1:65536", "::1:20001",
                                     "127.0.0.1:2x", "127.0.0.1:-1", "h:\u0661"])
def test_parse_address_refuses_what_is_not_host_and_port(address):
    with pytest.raises(ValueError, match="is not \"host:port\"; write it as \"127.0.0.1:20001\""):
        parse_address(address)


def test_parse_address_refuses_other_types():
    with pytest.raises(TypeError, match="must be \"host:port\" or a \\(host, port\\) pair, got int"):
        parse_address(20001)


# Issue 30, section 2: a column may travel narrower than the reader gives it (a token file's 2-byte ids, MNIST's
# bytes) and the receiver turns it back, bit for bit; before, every column went as the reader's own dtype.
@pytest.mark.parametrize("column, way, expected", [
    (np.array([[0, 65535], [7, 9]], "<u2"), {"as": "<i4"}, np.array([[0, 65535], [7, 9]], np.int32)),
    (np.arange(256, dtype=np.uint8), {"as": "<f4", "divide": 255},
     np.divide(np.arange(256, dtype=np.uint8), np.float32(255), dtype=np.float32)),
    (np.array([3, 1], np.uint8), {"as": "<i8"}, np.array([3, 1], np.int64)),
])
def test_a_narrowed_column_crosses_the_wire_and_arrives_as_the_readers_own(column, way, expected):
    meta, buffers = pack_columns((column, np.arange(len(column))), (way, None))
    assert meta[0] == {"dtype": column.dtype.str, "shape": list(column.shape), **way} and "as" not in meta[1]
    found, index = unpack_columns(meta, memoryview(b"".join(buffers)))
    assert found.dtype == expected.dtype and found.tobytes() == expected.tobytes()
    assert index.tolist() == list(range(len(column)))
    assert sum(len(b) for b in buffers) < expected.nbytes + index.nbytes


@pytest.mark.parametrize("way", [{"as": "O"}, {"as": "<U3"}, {"as": "<f16"}, {"as": "nonsense"}, {"as": None},
                                 {"as": "<i4", "divide": 255}, {"as": "<f4", "divide": "255"},
                                 {"as": "<f4", "divide": True}, {"as": "<f4", "divide": 10 ** 400}])
def test_a_narrowed_column_with_a_bad_way_back_is_a_protocol_error(way):
    with pytest.raises(ProtocolError, match='"as" must name a numeric dtype'):
        unpack_columns({"dtype": "|u1", "shape": [2], **way}, memoryview(bytes(2)))
    with pytest.raises(ProtocolError):
        decode_column(np.array([b"ab"]), {"as": "<i4"})  # (only numbers are narrowed)
