"""readers.checks: the eager argument checks every decorator shares."""
import functools

import numpy as np
import pytest

import batching
import readers
from readers.checks import check_reader, whole
from tests.helpers.toys import add_one, double, ten, ten_reader


@pytest.mark.parametrize("bad", [[1, 2], "abc", 3, None])
def test_reader_that_is_not_callable_gets_a_type_error(bad):
    with pytest.raises(TypeError, match="zero-argument callable"):
        readers.shuffle(bad, 3)


def test_generator_object_instead_of_function_is_explained():
    with pytest.raises(TypeError, match="generator object.*pass the generator function itself"):
        readers.map_readers(double, ten())


def test_reader_with_required_arguments_is_rejected():
    with pytest.raises(TypeError, match="cannot be called with no arguments"):
        readers.chain(ten_reader(), lambda n: range(n))


@pytest.mark.parametrize("make", [readers.chain, readers.compose, lambda *r: readers.map_readers(add_one, *r)])
def test_bad_reader_among_several_is_named(make):
    """Regression from the review of issue 2."""
    with pytest.raises(TypeError, match="reader 1 must be"):
        make(ten_reader(), [1, 2])


def test_check_reader_accepts_partials_and_builtins_and_returns_the_reader():
    bound = functools.partial(ten, 3)
    assert check_reader(bound) is bound
    assert check_reader(dict) is dict  # no signature to check: found out when called


def test_check_reader_shortens_a_long_repr():
    with pytest.raises(TypeError) as info:
        check_reader(list(range(100)))
    assert "..." in str(info.value) and "99" not in str(info.value)


def test_integral_float_sizes_are_accepted_as_paddle_does():
    """Regression from the review of issue 2."""
    assert [len(b) for b in batching.batch(ten_reader(), 5.0)()] == [5, 5]
    assert sorted(readers.shuffle(ten_reader(), 4.0, seed=0)()) == list(range(10))


@pytest.mark.parametrize("value, expected", [(3, 3), (3.0, 3), (np.int64(4), 4), (np.float32(2.0), 2)])
def test_whole_accepts_ints_and_integral_floats(value, expected):
    got = whole(value, "n", "firstn")
    assert got == expected and type(got) is int


@pytest.mark.parametrize("value, minimum, floats", [
    (2.5, 0, True), (-1, 0, True), (0, 1, True), (True, 0, True), (np.bool_(True), 0, True), ("3", 0, True),
    (3.0, 0, False),
])
def test_whole_refuses_other_values_naming_where_and_what(value, minimum, floats):
    with pytest.raises(ValueError, match=rf"^firstn: n must be an int >= {minimum}, got "):
        whole(value, "n", "firstn", minimum, floats=floats)


@pytest.mark.parametrize("data,advice", [
    ((np.zeros((6, 2)), np.arange(6)), "it holds 2 arrays of 6 rows: wrap them with readers.from_arrays(x, y)"),
    ([np.zeros(4), np.zeros(4), np.zeros((4, 3))], "it holds 3 arrays of 4 rows: wrap them with readers.from_arrays(x, y, z)"),
    (np.zeros((5, 2)), "wrap the array with readers.np_array(x) (its rows as entries) or readers.from_arrays(x)"),
    ((np.zeros(3), np.zeros(4)), "wrap data with readers.from_sequence(...)"),  # unequal: no from_arrays
    ((np.zeros(3), [1, 2, 3]), "wrap data with readers.from_sequence(...)"),
    ((), "wrap data with readers.from_sequence(...)"),
])
def test_data_given_as_a_reader_is_told_the_reader_that_fits(data, advice):
    """Review of issue 12: train((x, y), ...) was told to use readers.from_sequence, whose entries would be x and y."""
    with pytest.raises(TypeError) as info:
        check_reader(data)
    assert advice in str(info.value)
