"""readers.ops.maps: map_readers and with_index, over streams, index plans and indexed readers."""
import numpy as np
import pytest

import readers
from readers.ops.maps import append_column
from tests.helpers.toys import double, ten_reader


def test_map_readers_applies_function_to_each_entry():
    r = readers.map_readers(double, ten_reader())
    for _ in range(3):
        assert list(r()) == [2 * i for i in range(10)]


def test_map_readers_zips_several_readers_and_stops_at_shortest():
    r = readers.map_readers(lambda a, b: (a, b), ten_reader(), lambda: "abc")
    assert list(r()) == [(0, "a"), (1, "b"), (2, "c")]


def test_map_readers_of_an_indexed_reader_is_indexed():
    src = readers.from_sequence(list("abcdefgh"))
    assert readers.map_readers(str.upper, src)[2] == "C"


def test_map_readers_indexed_error_comes_after_the_entries_before_it():
    def invert(x):
        return 1 / (x - 5)

    got = []
    with pytest.raises(ZeroDivisionError):
        for entry in readers.map_readers(invert, readers.from_sequence(range(10)))():
            got.append(entry)
    assert got == [invert(x) for x in range(5)]


def test_map_readers_of_several_readers_has_no_length():
    with pytest.raises(TypeError, match="map_readers of several readers has no length"):
        len(readers.map_readers(lambda a, b: a, readers.from_sequence("ab"), readers.from_sequence("cd")))


@pytest.mark.parametrize("entry, value, expected", [
    (("x", 1), 0.0, ("x", 1, 0.0)),
    ("x", 0.0, ("x", 0.0)),
    ({"x": 1}, 0.0, {"x": 1, "weight": 0.0}),
])
def test_append_column_adds_a_last_column(entry, value, expected):
    assert append_column(entry, value) == expected


def test_append_column_refuses_to_overwrite_a_dict_key():
    with pytest.raises(ValueError, match="already have a 'weight' key"):
        append_column({"weight": 2.0}, 1.0)


def test_with_index_attaches_source_index_after_shuffle():
    data = [("x%d" % i, i % 3) for i in range(50)]
    r = readers.with_index(readers.shuffle(readers.from_sequence(data), seed=2))
    out = list(r())
    assert sorted(e[-1] for e in out) == list(range(50))
    assert all(data[i] == (name, label) for name, label, i in out)


def test_with_index_on_a_stream_counts_positions():
    assert list(readers.with_index(lambda: "ab")()) == [("a", 0), ("b", 1)]


def test_with_index_of_an_indexed_reader_is_indexed():
    assert readers.with_index(readers.from_sequence(list("abcdefgh")))[4] == ("e", 4)


def test_with_index_ids_are_source_indices_through_windows():
    """Regression from the review of issue 2."""
    src = readers.from_sequence(list("abcdef"))
    direct = list(readers.with_index(readers.skip(src, 2))())
    shuffled = list(readers.with_index(readers.skip(readers.shuffle(src, 1, seed=0), 2))())
    assert direct == shuffled == [("c", 2), ("d", 3), ("e", 4), ("f", 5)]
    assert readers.with_index(readers.firstn(readers.skip(src, 1), 2))[1] == ("c", 2)


def test_with_index_columns_gain_an_int64_id_column():
    r = readers.with_index(readers.skip(readers.from_arrays(np.arange(5) * 10), 2))
    (values, ids) = r.gather_columns(np.array([0, 2]))
    assert values.tolist() == [20, 40] and ids.tolist() == [2, 4] and ids.dtype == np.int64
