"""readers.testing: the restore-at-every-step check passes good stages and catches broken ones."""
import itertools

import numpy as np
import pytest

import readers
from readers.parents import iterate
from readers.stage import Stage
from readers.testing import assert_resumes_at_every_step, assert_same, steps_to_check


class ForgetsTheCursor(Stage):
    """Claims its cursor is its parent's (positions = 1) but restarts every resumed pass from the start."""

    name = "forgets_the_cursor"
    positions = 1

    def _seek(self, pass_id, cursor):
        return iterate(self.parents[0], pass_id)


class SkipsOneTooMany(Stage):
    """Resumes one entry late."""

    name = "skips_one_too_many"

    def _stream(self, pass_id):
        return iterate(self.parents[0], pass_id)

    def _seek(self, pass_id, cursor):
        return itertools.islice(iterate(self.parents[0], pass_id), cursor + 1 if cursor else 0, None)


class SameOrderEveryPass(Stage):
    """A 'shuffle' that ignores the pass: a restored reader's next pass differs from the original's."""

    name = "same_order"

    def __init__(self, reader, calls):
        super().__init__(reader)
        self.calls = calls

    def _stream(self, pass_id):
        self.calls.append(pass_id)
        order = np.random.default_rng(len(self.calls)).permutation(5)  # a state of its own, not (seed, pass)
        return iter(order.tolist())


def test_check_passes_good_pipelines():
    states = assert_resumes_at_every_step(lambda: readers.shuffle(readers.from_sequence(range(7)), 3, seed=1))
    assert [s["cursor"] for s in states] == list(range(8)) + [0]


@pytest.mark.parametrize("stage", [ForgetsTheCursor, SkipsOneTooMany], ids=lambda s: s.__name__)
def test_check_catches_a_stage_that_resumes_in_the_wrong_place(stage):
    with pytest.raises(AssertionError, match="rest of pass 0"):
        assert_resumes_at_every_step(lambda: stage(readers.from_sequence(range(6))))


def test_check_catches_passes_that_depend_on_the_history_of_calls():
    calls: list = []
    with pytest.raises(AssertionError):
        assert_resumes_at_every_step(lambda: SameOrderEveryPass(lambda: iter(()), calls))


def test_steps_to_check_always_has_both_ends_and_stays_bounded():
    steps = steps_to_check(10_000, 12)
    assert steps[:2] == [0, 1] and steps[-2:] == [9_999, 10_000] and len(steps) <= 12


def test_assert_same_is_strict_about_types_and_dtypes():
    assert_same([np.float32(1)], [np.float32(1)])
    with pytest.raises(AssertionError, match="type"):
        assert_same((1, 2), [1, 2])
    with pytest.raises(AssertionError, match="int64"):
        assert_same(np.zeros(2, np.int64), np.zeros(2, np.int32))
    assert_same([float("nan")], [float("nan")])  # NaN equals NaN here
