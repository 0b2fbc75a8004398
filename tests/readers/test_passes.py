"""readers.passes: the iterator of one pass, what it has handed out, and closing it."""
import gc
import multiprocessing

import pytest

import batching
import readers
from readers.passes import PassIterator, close_iterator
from tests.conftest import HANG, wait_until, worker_threads


def test_pass_iterator_counts_only_entries_handed_out():
    it = readers.from_sequence(range(10))()
    assert isinstance(it, PassIterator) and it.consumed == 0 and not it.done
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    for x in it:
        if x == 6:
            break
    assert it.consumed == 7 and not it.done
    assert list(it) == [7, 8, 9] and it.consumed == 10 and it.done


def test_pass_iterator_state_moves_to_the_next_pass_only_once_the_pass_ran_out():
    r = readers.shuffle(readers.from_sequence(range(3)), seed=2)
    it = r()
    [next(it) for _ in range(3)]
    assert it.get_state() == {"pass": 0, "cursor": 3, "seed": 2}  # the end is not known yet
    assert list(it) == []
    assert it.get_state() == {"pass": 1, "cursor": 0, "seed": 2}


def test_pass_iterator_of_a_resumed_pass_counts_from_its_start():
    r = readers.from_sequence(range(10))
    r.set_state({"pass": 0, "cursor": 4, "seed": None})
    it = r()
    assert (it.pass_id, it.start) == (0, 4)
    assert next(it) == 4 and it.get_state()["cursor"] == 5


def test_close_stops_the_pass_and_runs_the_sources_cleanup():
    closed = []

    class Source(readers.Stage):
        def _stream(self, pass_id):
            try:
                yield from range(100)
            finally:
                closed.append(pass_id)

    it = Source()()
    assert next(it) == 0
    it.close()
    assert closed == [0] and list(it) == []


def _closing_source(closed: list):
    def source():
        try:
            yield from range(40)
        finally:
            closed.append(True)
    return source


@pytest.mark.parametrize("wrap", [
    lambda r: readers.map_readers(abs, r),
    lambda r: readers.map_readers(lambda a, b: a + b, r, r),
    readers.with_index,
    lambda r: readers.firstn(r, 30),
    lambda r: readers.skip(r, 3),
    lambda r: readers.filter_entries(r, bool),
    lambda r: readers.shuffle(r, 4, seed=0),
    lambda r: readers.shard(r, 1, 2, equalize="pad"),
    lambda r: readers.chain(r, r),
    lambda r: readers.compose(r, r),
    lambda r: readers.repeat(r, 2),
    lambda r: batching.collated(batching.batch(readers.map_readers(abs, r), 4)),
], ids=["map", "map2", "with_index", "firstn", "skip", "filter", "shuffle", "shard", "chain", "compose", "repeat",
        "collated"])
def test_close_reaches_a_generator_under_c_level_stages(wrap):
    # a map, filter or islice has no close() of its own: closing the pass closes the passes it opened
    closed = []
    it = wrap(_closing_source(closed))()
    next(it)
    it.close()
    assert closed and set(closed) == {True}
    assert list(it) == [] and not it.done


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_close_stops_workers_under_a_map(mode, no_leaks):
    pipeline = readers.map_readers(abs, readers.prefetch(readers.from_sequence(range(10_000)), 2, mode=mode))
    it = pipeline()
    next(it)
    it.close()
    wait_until(lambda: not worker_threads() and not multiprocessing.active_children(), HANG,
               "the prefetch workers under the map to stop once the pass was closed")


def test_an_abandoned_pass_is_closed_by_garbage_collection():
    """The pass iterator holds no reference cycle that would keep an abandoned pass open."""
    closed = []

    def source():
        try:
            yield from range(100)
        finally:
            closed.append(True)

    it = readers.map_readers(abs, source)()
    next(it)
    del it
    gc.collect()
    assert closed == [True]


@pytest.mark.parametrize("it", [iter([1, 2]), map(abs, [1]), (x for x in [1])])
def test_close_iterator_closes_what_can_be_closed(it):
    close_iterator(it)
    if hasattr(it, "close"):
        assert list(it) == []


def test_closing_a_pass_that_ran_out_keeps_its_state_at_the_next_pass():
    r = readers.shuffle(readers.from_sequence(range(4)), seed=0)
    it = r()
    list(it)
    it.close()
    assert it.done and it.get_state() == {"pass": 1, "cursor": 0, "seed": 0}


def test_iter_of_a_pass_is_the_pass_itself_with_close_and_state():
    # iter(r()) used to return the C-level map inside the pass, which has neither get_state nor close
    closed = []
    it = iter(readers.map_readers(abs, _closing_source(closed))())
    assert isinstance(it, PassIterator) and iter(it) is it
    assert next(it) == 0 and it.get_state() == {"pass": 0, "cursor": 1, "seed": None}
    it.close()
    assert closed == [True] and list(it) == [] and it.get_state()["cursor"] == 1


@pytest.mark.parametrize("wrap", [lambda r: readers.map_readers(abs, r), lambda r: readers.skip(r, 0)],
                         ids=["map", "skip"])
def test_a_for_loop_that_closes_its_pass_ends_at_its_next_step(wrap):
    # a C-level map or islice over a list's iterator: closing leaves it able to go on, the pass must not
    it = wrap(lambda: iter(range(10)))()
    seen = []
    for x in it:
        seen.append(x)
        if x == 2:
            it.close()
    assert seen == [0, 1, 2] and it.consumed == 3 and not it.done


def test_pass_iterator_counts_no_entry_for_a_step_that_raised():
    def check(x):
        if x == 2:
            raise ValueError(f"bad entry {x}")
        return x

    it = readers.map_readers(check, readers.from_sequence(range(5)))()
    assert [next(it), next(it)] == [0, 1]
    with pytest.raises(ValueError, match="bad entry 2"):
        next(it)
    assert it.get_state()["cursor"] == 2  # a resume reads the entry that failed again


def test_close_is_idempotent_and_keeps_the_pass_iterator_type():
    it = readers.from_sequence("abc")()
    next(it)
    it.close()
    it.close()
    assert isinstance(it, PassIterator) and next(it, None) is None and it.get_state()["cursor"] == 1
