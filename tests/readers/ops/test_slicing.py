"""readers.ops.slicing: firstn, skip and filter_entries."""
import pytest

import readers
from readers.parents import is_planned
from tests.helpers.toys import CountingReader, is_odd, ten_reader


def test_firstn_pulls_no_more_than_n():
    source = CountingReader(range(100))
    assert list(readers.firstn(source, 5)()) == [0, 1, 2, 3, 4]
    assert source.pulled == 5


def test_firstn_fewer_than_n_is_fine():
    assert list(readers.firstn(ten_reader(), 50)()) == list(range(10))


def test_skip_drops_the_first_n():
    assert list(readers.skip(ten_reader(), 7)()) == [7, 8, 9]


def test_filter_entries_keeps_what_the_predicate_accepts():
    assert list(readers.filter_entries(ten_reader(), is_odd)()) == [1, 3, 5, 7, 9]


def test_firstn_and_skip_of_an_indexed_reader_keep_len_and_getitem():
    src = readers.from_sequence(list("abcdefgh"))
    assert len(readers.firstn(src, 3)) == 3 and readers.firstn(src, 3)[-1] == "c"
    assert len(readers.skip(src, 3)) == 5 and readers.skip(src, 3)[0] == "d"


def test_firstn_of_a_planned_reader_is_planned_and_filter_is_a_stream():
    src = readers.from_sequence(list("abcdefgh"))
    assert is_planned(readers.firstn(readers.shuffle(src, seed=0), 3))
    assert not is_planned(readers.filter_entries(src, bool))


def test_firstn_of_a_planned_reader_reads_only_its_window():
    shuffled = readers.shuffle(readers.from_sequence(range(50)), seed=3)
    assert list(readers.firstn(readers.skip(shuffled, 10), 5)()) == list(shuffled.run(0))[10:15]


@pytest.mark.parametrize("make, match", [
    (lambda: readers.firstn(ten_reader(), -1), "n must be an int >= 0"),
    (lambda: readers.skip(ten_reader(), 2.5), "skip: n must be an int >= 0, got 2.5"),
])
def test_firstn_and_skip_bad_n_raises_value_error_when_applied(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_filter_entries_rejects_a_predicate_that_is_not_callable():
    with pytest.raises(TypeError, match="predicate must be callable"):
        readers.filter_entries(ten_reader(), 3)
