"""readers.parents: starting a parent's pass, opening its plan, and telling what a parent offers."""
import pytest

import batching
import readers
from readers.parents import access_of, as_indexed, is_indexed, iterate, open_plan
from tests.helpers.toys import double


def test_reader_returning_non_iterable_gets_a_type_error():
    r = readers.map_readers(double, lambda: 42)
    with pytest.raises(TypeError, match="returned int, which is not iterable"):
        list(r())


def test_iterate_of_a_plain_reader_reads_past_the_cursor():
    assert list(iterate(lambda: iter("abcd"), pass_id=3, cursor=2)) == ["c", "d"]


def test_user_class_with_len_and_getitem_is_indexed():
    class Squares:
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return i * i

        def __call__(self):
            return (self[i] for i in range(5))

    r = readers.shuffle(Squares(), seed=0)
    assert sorted(r()) == [0, 1, 4, 9, 16]
    adapted = as_indexed(Squares())
    assert is_indexed(adapted) and adapted[3] == 9 and len(adapted) == 5


@pytest.mark.parametrize("reader, access", [
    (readers.from_sequence("ab"), "index"),
    (readers.shuffle(readers.from_sequence("ab"), seed=0), "plan"),
    (readers.filter_entries(readers.from_sequence("ab"), bool), "stream"),
    (lambda: iter("ab"), "stream"),
])
def test_access_of_says_how_passes_run(reader, access):
    assert access_of(reader) == access
    plan = open_plan(reader, 0)
    assert (plan is None) == (access == "stream")
    if plan is not None:
        assert sorted(e for chunk in plan.chunks for e in plan.source.gather(chunk)) == ["a", "b"]


def test_iterate_a_stage_at_a_cursor_in_its_own_position_units_without_moving_its_pass():
    r = batching.batch(readers.from_sequence(range(10)), 2)
    assert list(iterate(r, cursor=4)) == [[4, 5], [6, 7], [8, 9]] and r.next_pass == 0
