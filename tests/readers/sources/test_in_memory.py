"""readers.sources: from_arrays, from_sequence and np_array."""
import pickle

import numpy as np
import pytest

import readers


def test_from_arrays_rows_are_tuples_read_in_place():
    x, y = np.arange(12).reshape(6, 2), np.arange(6) % 2
    r = readers.from_arrays(x, y)
    assert len(r) == 6 and [int(label) for _, label in r()] == y.tolist()
    image, label = r[4]
    assert np.shares_memory(image, x) and image.tolist() == [8, 9] and label == 0
    columns = r.gather_columns(np.array([5, 0]))
    assert columns[0].tolist() == [[10, 11], [0, 1]] and columns[1].tolist() == [1, 0]


@pytest.mark.parametrize("arrays, match", [
    ((), "needs at least one array"),
    ((np.zeros(3), np.float64(1.0)), "array 1 is a scalar"),
    ((np.zeros(3), np.zeros(4)), r"lengths \[3, 4\]"),
])
def test_from_arrays_refuses_what_has_no_rows_in_common(arrays, match):
    with pytest.raises(ValueError, match=match):
        readers.from_arrays(*arrays)


def test_np_array_rows_and_its_scalar_error():
    r = readers.np_array([[1, 2], [3, 4], [5, 6]])
    assert [row.tolist() for row in r.gather(np.array([2, 0]))] == [[5, 6], [1, 2]]
    assert r.gather_columns(np.array([1])).tolist() == [[3, 4]]
    with pytest.raises(ValueError, match="needs an array with at least one axis"):
        readers.np_array(5)


def test_from_sequence_keeps_none_and_empty_entries_and_pickles():
    r = readers.from_sequence(["a", None, "", 0])
    assert list(r()) == ["a", None, "", 0] and r[1] is None
    assert list(pickle.loads(pickle.dumps(r))()) == ["a", None, "", 0]
    with pytest.raises(TypeError, match="needs a sequence with len and"):
        readers.from_sequence(iter("ab"))


def test_from_arrays_docstring_points_to_np_array_and_says_one_array_gives_1_tuples():
    first, _, rest = readers.from_arrays.__doc__.partition("\n")
    assert "np_array" in first
    assert "1-tuples" in rest
    assert list(readers.from_arrays(np.array([5, 6]))()) == [(5,), (6,)]
