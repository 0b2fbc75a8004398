import collections

import numpy as np
import pytest

from batching.collate import Padded, collate


@pytest.mark.parametrize(
    "values, shape, dtype",
    [
        ([np.zeros(784, np.uint8), np.ones(784, np.uint8)], (2, 784), np.uint8),
        ([np.zeros((2, 3), np.float32)] * 4, (4, 2, 3), np.float32),
        ([[1, 2], [3, 4], [5, 6]], (3, 2), np.int64),
        ([[[1.0]], [[2.0]]], (2, 1, 1), np.float64),
    ],
)
def test_collate_fixed_shapes_are_stacked(values, shape, dtype):
    out = collate(values)
    assert isinstance(out, np.ndarray)
    assert out.shape == shape and out.dtype == dtype
    np.testing.assert_array_equal(out, np.stack([np.asarray(v) for v in values]))


@pytest.mark.parametrize(
    "values, dtype",
    [
        ([1, 2, 3], np.int64),
        ([1.5, 2.0], np.float64),
        ([1, 2.5], np.float64),
        ([True, False], np.bool_),
        ([np.int8(1), np.int8(2)], np.int8),
        ([np.float32(1), np.float32(2)], np.float32),
        ([np.int64(7)], np.int64),
    ],
)
def test_collate_scalars_become_1d(values, dtype):
    out = collate([(v,) for v in values])[0]
    assert out.shape == (len(values),) and out.dtype == dtype
    assert out.tolist() == [v.item() if isinstance(v, np.generic) else v for v in values]


def test_collate_common_case_image_and_label():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(128, 784), dtype=np.uint8)
    entries = [(images[i], i % 10) for i in range(128)]
    x, y = collate(entries)
    assert x.dtype == np.uint8 and x.shape == (128, 784)
    np.testing.assert_array_equal(x, images)
    assert y.dtype == np.int64 and y.tolist() == [i % 10 for i in range(128)]


@pytest.mark.parametrize(
    "values, data, lengths",
    [
        ([[1, 2, 3], [4], [5, 6]], [[1, 2, 3], [4, 0, 0], [5, 6, 0]], [3, 1, 2]),
        ([np.array([1, 2], np.int32), np.array([3], np.int32)], [[1, 2], [3, 0]], [2, 1]),
        ([[], [7]], [[0], [7]], [0, 1]),
        ([[7], []], [[7], [0]], [1, 0]),
    ],
)
def test_collate_pads_variable_length(values, data, lengths):
    out = collate([(v, 0) for v in values])[0]
    assert isinstance(out, Padded)
    assert out.data.tolist() == data
    assert out.lengths.dtype == np.int64 and out.lengths.tolist() == lengths
    assert out.mask.dtype == np.bool_
    assert out.mask.tolist() == [[j < n for j in range(len(data[0]))] for n in lengths]


def test_collate_padding_keeps_dtype():
    out = collate([np.array([1, 2], np.uint8), np.array([3], np.uint8)])
    assert out.data.dtype == np.uint8
    # An empty list would be float64 on its own; it must not promote the column.
    assert collate([[1, 2], []]).data.dtype == np.int64


def test_collate_equal_lengths_are_stacked_not_padded():
    # Per batch: sequences that happen to share a length form a fixed shape.
    out = collate([([1, 2],), ([3, 4],)])[0]
    assert isinstance(out, np.ndarray) and out.tolist() == [[1, 2], [3, 4]]
    assert collate([[], []]).shape == (2, 0)


@pytest.mark.parametrize("pad_value", [-1, 99, 0.5])
def test_collate_custom_pad_value(pad_value):
    out = collate([[1.0, 2.0], [3.0]], pad_value=pad_value)
    assert out.data.tolist() == [[1.0, 2.0], [3.0, pad_value]]


def test_collate_pad_value_that_does_not_fit_the_dtype():
    with pytest.raises(ValueError, match=r"pad_value -1 does not fit .*uint8"):
        collate([np.array([1, 2], np.uint8), np.array([3], np.uint8)], pad_value=-1)


def test_collate_pads_nd_variable_length():
    a = np.arange(6).reshape(3, 2)
    b = np.arange(2).reshape(1, 2) + 10
    out = collate([(a,), (b,), (np.zeros((0, 2), np.int64),)], pad_value=-1)[0]
    assert out.data.shape == (3, 3, 2)
    np.testing.assert_array_equal(out.data[0], a)
    np.testing.assert_array_equal(out.data[1], [[10, 11], [-1, -1], [-1, -1]])
    np.testing.assert_array_equal(out.data[2], np.full((3, 2), -1))
    assert out.lengths.tolist() == [3, 1, 0]
    np.testing.assert_array_equal(out.data[out.mask], np.concatenate([a, b]))


@pytest.mark.parametrize("values", [["a", "bb", ""], [b"x", b"yz"], [np.str_("a"), "b"]])
def test_collate_strings_kept_as_list(values):
    out = collate([(1, v) for v in values])[1]
    assert type(out) is list and out == list(values)


def test_collate_dict_entries():
    entries = [{"tokens": [1, 2], "label": 0, "id": "a"}, {"tokens": [3], "label": 1, "id": "b"}]
    out = collate(entries)
    assert list(out) == ["tokens", "label", "id"]
    assert out["tokens"].data.tolist() == [[1, 2], [3, 0]]
    assert out["label"].tolist() == [0, 1]
    assert out["id"] == ["a", "b"]


def test_collate_dict_keys_in_any_order():
    out = collate([{"a": 1, "b": 2}, {"b": 4, "a": 3}])
    assert out["a"].tolist() == [1, 3] and out["b"].tolist() == [2, 4]


@pytest.mark.parametrize(
    "entries, expected",
    [
        ([1, 2, 3], [1, 2, 3]),
        ([np.zeros(2), np.ones(2)], [[0.0, 0.0], [1.0, 1.0]]),
        (["a", "b"], ["a", "b"]),
    ],
)
def test_collate_single_value_entries(entries, expected):
    out = collate(entries)
    assert (out.tolist() if isinstance(out, np.ndarray) else out) == expected


def test_collate_single_value_variable_length():
    out = collate([[1, 2, 3], [4]])
    assert isinstance(out, Padded) and out.lengths.tolist() == [3, 1]


def test_collate_keeps_namedtuple_type():
    Pair = collections.namedtuple("Pair", "x y")
    out = collate([Pair(1, "a"), Pair(2, "b")])
    assert isinstance(out, Pair) and out.x.tolist() == [1, 2] and out.y == ["a", "b"]


def test_collate_accepts_any_iterable_of_entries():
    assert collate(iter([(1,), (2,)]))[0].tolist() == [1, 2]


def test_collate_empty_batch_is_an_error():
    with pytest.raises(ValueError, match="empty batch"):
        collate([])


@pytest.mark.parametrize(
    "entries, message",
    [
        (
            [(np.zeros(3), 1)] * 2 + [(np.zeros((2, 2)), 1)],
            r"column 0 cannot be stacked: shapes \(3,\) x2, \(2, 2\) x1",
        ),
        ([(1, [1, 2])] + [(2, 3)], r"column 1 cannot be stacked: shapes \(2,\) x1, \(\) x1"),
        (
            [{"x": np.zeros((2, 3))}, {"x": np.zeros((1, 4))}],
            r"column 'x' cannot be stacked: shapes \(2, 3\) x1, \(1, 4\) x1",
        ),
        (
            [np.zeros(2), np.zeros((1, 1))],
            r"single-value column cannot be stacked: shapes \(2,\) x1, \(1, 1\) x1",
        ),
    ],
)
def test_collate_unstackable_column_names_column_and_shapes(entries, message):
    with pytest.raises(ValueError, match=message) as info:
        collate(entries)
    assert "padded" in str(info.value)  # says what would work


@pytest.mark.parametrize(
    "entries, message",
    [
        ([(1, None), (2, 3)], r"column 1 holds None \(entry 0\).*map None to a value"),
        ([(1, 2.0), (2, None)], r"column 1 holds None \(entry 1\)"),
        ([(np.zeros(2),), (None,)], r"column 0 holds None \(entry 1\)"),
        ([{"t": "a"}, {"t": None}], r"column 't' holds None \(entry 1\)"),
        ([None, None], r"single-value column holds None \(entry 0\)"),
    ],
)
def test_collate_none_names_the_column(entries, message):
    with pytest.raises(ValueError, match=message):
        collate(entries)


@pytest.mark.parametrize(
    "entries, message",
    [
        ([(1, "a"), (2, 3)], r"column 1 mixes kinds of value: str x1, int x1"),
        ([(1,), ("a",)], r"column 0 mixes kinds of value: int x1, str x1"),
        ([("a",), (b"b",)], r"column 0 mixes kinds of value: str x1, bytes x1"),
        ([(np.zeros(2),), ("ab",)], r"column 0 mixes kinds of value: ndarray x1, str x1"),
    ],
)
def test_collate_mixed_kinds_name_the_column(entries, message):
    with pytest.raises(ValueError, match=message):
        collate(entries)


def test_collate_python_objects_are_an_error():
    with pytest.raises(ValueError, match="column 0 holds dict values"):
        collate([({"a": 1},), ({"b": 2},)])


@pytest.mark.parametrize(
    "entries, message",
    [
        ([(1, 2), (3,)], r"entry 0 is a tuple of 2 but entry 1 is a tuple of 1"),
        ([(1, 2), (3, 4), 5], r"entry 2 is a single int"),
        ([(1, 2), [3, 4]], r"entry 1 is a single list"),
        ([1, (2,)], r"entry 0 is a single int but entry 1 is a tuple of 1"),
        (
            [{"a": 1, "b": 2}, {"a": 1, "c": 2}],
            r"entry 1 is a dict with keys \['a', 'c'\] \(missing \['b'\], extra \['c'\]\)",
        ),
        ([{"a": 1}, (1,)], r"entry 1 is a tuple of 1"),
    ],
)
def test_collate_mismatched_structure_names_the_entry(entries, message):
    with pytest.raises(ValueError, match=message):
        collate(entries)


def test_padded_mask_marks_real_positions():
    p = Padded(np.zeros((3, 4)), np.array([4, 0, 2], dtype=np.int64))
    assert p.mask.tolist() == [[True] * 4, [False] * 4, [True, True, False, False]]
    data, lengths = p  # still a plain pair
    assert data is p.data and lengths is p.lengths


@pytest.mark.parametrize(
    "values, message",
    [
        ([["ab", "c"], ["d"]], r"column 0 holds variable-length sequences of strings.*map the strings"),
        ([np.array([1, 2]), np.array(["c"])], r"column 0 mixes numbers and strings"),
        ([[[1], [1, 2]], [1]], r"column 0, entry 0: .*inhomogeneous.*give arrays or regular nested lists"),
        ([[1, None], [2]], r"column 0, entry 0: the list value only makes an object array"),
    ],
)
def test_collate_unpaddable_sequences_name_the_column(values, message):
    with pytest.raises(ValueError, match=message):
        collate([(v,) for v in values])


def test_collate_pads_to_the_common_dtype():
    out = collate([[1, 2], np.array([1.5])])
    assert out.data.dtype == np.float64 and out.data.tolist() == [[1.0, 2.0], [1.5, 0.0]]
