"""readers.network.served_reader (Served): request checking, splitting into parts of whole rows, gathering, and the
readers it refuses."""
from fractions import Fraction

import numpy as np
import pytest

import readers
from readers.network.served_reader import BODY, RequestError, Served
from readers.network.wire import MAX_FRAME, VERSION, unpack_columns


def served_of(n: int = 10) -> Served:
    return Served(readers.from_arrays(np.arange(n) * 2, np.arange(n, dtype=np.int32)))


def rows(served: Served, header: dict) -> list:
    return list(served.indices(header))


def unpacked(served: Served, indices) -> tuple:
    meta, buffers = served.part(indices)
    return unpack_columns(meta, memoryview(b"".join(bytes(b) for b in buffers)))


@pytest.mark.parametrize("header, want", [
    ({"interval": [0, 9]}, list(range(10))),
    ({"interval": [3, 3]}, [3]),
    ({"interval": [9, 9]}, [9]),
    ({"indices": [7, 0, 7, 9]}, [7, 0, 7, 9]),
    ({"indices": [5]}, [5]),
    ({"indices": []}, []),
    ({"interval": None, "indices": [1]}, [1]),  # null is absent
])
def test_served_indices_accepts_intervals_and_lists(header, want):
    assert rows(served_of(), {"type": "get", "id": 0, **header}) == want


def test_served_interval_allocates_nothing_for_a_huge_request():
    served = Served(readers.np_array(np.zeros((1, 1), np.uint8)))
    served.n = 10 ** 12  # as if it held a trillion entries: [0, n-1] must not become an array of n ints
    got = served.indices({"interval": [0, served.n - 1]})
    assert isinstance(got, range) and len(got) == 10 ** 12


@pytest.mark.parametrize("header, words", [
    ({"interval": [-1, 3]}, "index -1 is negative"),
    ({"interval": [-5, -2]}, "index -5 is negative"),
    ({"interval": [0, 10]}, "index 10 is past the last entry (9): the server holds 10 entries"),
    ({"interval": [10, 10]}, "index 10 is past the last entry"),
    ({"interval": [0, 2 ** 70]}, f"index {2 ** 70} is past the last entry"),
    ({"interval": [-2 ** 70, 0]}, f"index {-2 ** 70} is negative"),
    ({"indices": [0, 10]}, "index 10 is past the last entry (9)"),
    ({"indices": [3, -1]}, "index -1 is negative"),
    ({"indices": [2 ** 63]}, f"index {2 ** 63} is out of range: the server holds 10 entries"),
    ({"indices": [1, -2 ** 63]}, f"index {-2 ** 63} is out of range"),
    ({"indices": [10 ** 40, 1]}, "is out of range"),
])
def test_served_out_of_range_is_a_typed_rejection(header, words):
    with pytest.raises(RequestError) as caught:
        served_of().indices({"type": "get", "id": 1, **header})
    assert caught.value.kind == "out_of_range" and words in caught.value.message


@pytest.mark.parametrize("header, words", [
    ({}, 'either "interval"'),
    ({"interval": [0, 1], "indices": [0]}, 'either "interval"'),
    ({"interval": [True, 2]}, "two ints"),
    ({"interval": [0, False]}, "two ints"),
    ({"interval": [0.0, 2]}, "two ints"),
    ({"interval": [0, 2.5]}, "two ints"),
    ({"interval": [1]}, "two ints"),
    ({"interval": [1, 2, 3]}, "two ints"),
    ({"interval": "0-3"}, "two ints"),
    ({"interval": {"start": 0}}, "two ints"),
    ({"interval": ["0", "1"]}, "two ints"),
    ({"interval": [5, 2]}, "ends before it starts"),
    ({"indices": [1, True]}, "list of ints"),
    ({"indices": [1.0]}, "list of ints"),
    ({"indices": [[1]]}, "list of ints"),
    ({"indices": "1,2"}, "list of ints"),
    ({"indices": 3}, "list of ints"),
    ({"indices": [None]}, "list of ints"),
])
def test_served_malformed_requests_say_what_to_send(header, words):
    with pytest.raises(RequestError) as caught:
        served_of().indices({"type": "get", "id": 1, **header})
    assert caught.value.kind == "malformed" and words in caught.value.message


@pytest.mark.parametrize("indices", [range(2, 5), np.array([9, 0, 9]), np.arange(10)])
def test_served_part_gathers_the_rows_asked_for(indices):
    first, second = unpacked(served_of(), indices)
    want = np.asarray(list(indices))
    assert first.tolist() == (want * 2).tolist() and second.tolist() == want.tolist()
    assert first.dtype == np.int64 and second.dtype == np.int32


@pytest.mark.parametrize("reader", [
    readers.from_arrays(np.arange(6) * 2, np.arange(6, dtype=np.int32)),  # columnar gather
    readers.from_sequence([(2 * i, np.int32(i)) for i in range(6)]),  # entries stacked one by one
], ids=["columnar", "stacked"])
def test_served_empty_request_gives_empty_columns_of_the_right_types(reader):
    served = Served(reader)
    for empty in ([], range(0)):
        first, second = unpacked(served, served.indices({"indices": []}) if empty == [] else empty)
        assert first.shape == (0,) and second.shape == (0,)
        assert (first.dtype, second.dtype) == (np.dtype(np.int64), np.dtype(np.int32))


def test_served_single_value_entries_are_one_column():
    served = Served(readers.np_array(np.arange(12, dtype=np.float32).reshape(6, 2)))
    assert served.row_bytes == 8
    got = unpacked(served, np.array([5, 1]))
    assert isinstance(got, np.ndarray) and got.tolist() == [[10.0, 11.0], [2.0, 3.0]]


def test_served_welcome_describes_the_data():
    served = Served(readers.np_array(np.arange(5, dtype=np.int16)), {"seq_len": 4})
    w = served.welcome
    assert (w["type"], w["version"], w["entries"], w["row_bytes"], w["max_frame"]) == ("welcome", VERSION, 5, 2, MAX_FRAME)
    assert w["info"] == {"seq_len": 4} and w["reader"] == served.reader.title()
    assert w["fingerprint"] == {**readers.fingerprint(served.reader), "digests": [served.reader.digest()]}


@pytest.mark.parametrize("row, count, want", [
    (BODY // 2, 5, [(0, 2), (2, 2), (4, 1)]),
    (BODY // 2, 4, [(0, 2), (2, 2)]),
    (BODY, 3, [(0, 1), (1, 1), (2, 1)]),
    (BODY // 3 + 1, 3, [(0, 2), (2, 1)]),
    (1000, 0, [(0, 0)]),  # an empty request still gets one (empty) part
    (1000, 7, [(0, 7)]),
])
def test_served_parts_hold_whole_rows_that_fit_a_frame(row, count, want):
    served = Served(readers.np_array(np.zeros((max(count, 1), row), np.uint8)))
    parts = list(served.parts(count))
    assert parts == want
    assert all(n * served.row_bytes <= BODY for _, n in parts)
    assert sum(n for _, n in parts) == count


def test_served_parts_refuse_a_row_larger_than_a_frame():
    served = Served(readers.np_array(np.zeros((1, BODY + 1), np.uint8)))
    with pytest.raises(RequestError) as caught:
        list(served.parts(1))
    assert caught.value.kind == "too_large" and "serve smaller entries" in caught.value.message


def test_served_reader_failure_is_a_server_error_for_that_request():
    # entry 2 fails; the 16 entries checked at the start (0, 7, 13, ..., 99) do not include it
    served = Served(readers.map_readers(lambda x: 10 // x, readers.from_sequence([1, 2, 0, 5] + [1] * 96)))
    assert unpacked(served, np.array([0, 1, 3])).tolist() == [10, 5, 2]
    with pytest.raises(RequestError) as caught:
        served.part(np.array([1, 2]))
    assert caught.value.kind == "server_error"
    assert "ZeroDivisionError" in caught.value.message and "2 entries from 1" in caught.value.message
    assert isinstance(caught.value.__cause__, ZeroDivisionError)
    assert unpacked(served, np.array([3])).tolist() == [2]  # the reader is still served


def test_served_entries_growing_past_a_frame_are_too_large():
    words = ["a"] * 100  # the entries checked at the start are small, so the parts are planned for small rows
    words[2] = "x" * (BODY // 4 + 1)
    served = Served(readers.from_sequence(words))
    assert served.row_bytes == 4
    with pytest.raises(RequestError) as caught:
        served.part(np.array([0, 2]))
    assert caught.value.kind == "too_large" and "serve entries of one size" in caught.value.message


def stream():
    return iter([1, 2, 3])


@pytest.mark.parametrize("reader", [stream, readers.map_readers(abs, stream), [1, 2, 3], np.arange(3)],
                         ids=["function", "mapped-stream", "list", "array"])
def test_served_refuses_a_non_indexed_reader_with_a_clear_type_error(reader):
    with pytest.raises(TypeError, match=r"a server serves an indexed reader \(len and \[i\]\).*readers.from_arrays") as caught:
        Served(reader)
    assert "\n" not in str(caught.value)  # one line, even for a pipeline


@pytest.mark.parametrize("entries", [[{"a": 1}, {"b": 2}], [(1, None), (2, None)], [Fraction(1, 2), Fraction(1, 3)]],
                         ids=["dicts", "none-column", "fractions"])
def test_served_refuses_object_columns_at_once(entries):
    with pytest.raises(TypeError, match="cannot serve .*object values, which have no bytes to send"):
        Served(readers.from_sequence(entries))


def test_served_reader_failing_on_its_first_entry_fails_to_serve():
    with pytest.raises(ValueError, match=r"cannot serve .*ZeroDivisionError") as caught:
        Served(readers.map_readers(lambda x: 1 // x, readers.from_sequence([0, 1])))
    assert isinstance(caught.value.__cause__, ZeroDivisionError)


def test_served_empty_reader_has_no_rows_but_answers_an_empty_request():
    served = Served(readers.np_array(np.zeros((0, 3), np.float32)))
    assert served.n == 0 and served.row_bytes == 0
    assert len(served.indices({"indices": []})) == 0
    assert unpacked(served, np.zeros(0, np.int64)).shape == (0,)
    with pytest.raises(RequestError, match="index 0 is past the last entry"):
        served.indices({"interval": [0, 0]})


def test_served_entries_of_different_sizes_are_refused_at_the_start():
    ragged = readers.from_sequence([np.zeros(3), np.zeros(3), np.zeros(4)])
    with pytest.raises(ValueError, match=r"cannot serve from_sequence\(list of 3\): .*all input arrays must have "
                                         r"the same shape; a served reader's entries are columns of one shape each"):
        Served(ragged)


def body_get(indices: np.ndarray, dtype: str = "<i8", shape=None) -> tuple[dict, bytes]:
    column = np.asarray(indices, dtype)
    return ({"type": "get", "id": 1, "indices": {"dtype": dtype, "shape": list(column.shape) if shape is None
                                                 else shape}}, column.tobytes())


@pytest.mark.parametrize("indices", [[7, 0, 7, 9], [5], []])
def test_served_indices_in_the_body_are_the_listed_ones(indices):
    got = served_of().indices(*body_get(indices))
    assert got.dtype == np.int64 and got.tolist() == indices
    assert served_of().welcome["binary_indices"] is True


@pytest.mark.parametrize("get, kind, words", [
    (body_get([1, 10]), "out_of_range", "index 10 is past the last entry (9)"),
    (body_get([-1, 2]), "out_of_range", "index -1 is negative"),
    (body_get([1, 2], "<u8"), "malformed", "signed ints"),
    (body_get([1, 2], "<f8"), "malformed", "signed ints"),
    (body_get([[1, 2]]), "malformed", "one column"),
    (body_get([1, 2], shape=[3]), "malformed", "needs 24 bytes, and the body has 16"),
    (body_get([1, 2], shape=[1]), "malformed", "8 bytes more than its columns describe"),
    (({"type": "get", "id": 1, "indices": {"shape": [1]}}, bytes(8)), "malformed", "is malformed"),
])
def test_served_bad_indices_in_the_body_are_typed_rejections(get, kind, words):
    with pytest.raises(RequestError) as caught:
        served_of().indices(*get)
    assert caught.value.kind == kind and words in caught.value.message
