"""readers.stage: the stage protocol, and the rules every decorator built on it keeps."""
import pickle

import numpy as np
import pytest

import batching
import readers
from readers.parents import iterate
from readers.stage import Stage
from tests.helpers.toys import CountingReader, add_one, is_odd

# -- rules every decorator keeps ------------------------------------------------------

DECORATORS = {
    "map_readers": lambda r: readers.map_readers(add_one, r),
    "shuffle_buffer": lambda r: readers.shuffle(r, 4, seed=1),
    "chain": lambda r: readers.chain(r, r),
    "compose": lambda r: readers.compose(r, r),
    "firstn": lambda r: readers.firstn(r, 3),
    "skip": lambda r: readers.skip(r, 2),
    "filter_entries": lambda r: readers.filter_entries(r, is_odd),
    "repeat": lambda r: readers.repeat(r, 2),
    "with_index": readers.with_index,
    "cache": readers.cache,
    "batch": lambda r: batching.batch(r, 3),
}


@pytest.mark.parametrize("name", sorted(DECORATORS))
def test_decorator_is_lazy(name):
    source = CountingReader(range(10))
    DECORATORS[name](source)
    assert source.calls == 0 and source.pulled == 0


@pytest.mark.parametrize("name", sorted(DECORATORS))
def test_decorator_is_recallable_and_deterministic(name):
    r = DECORATORS[name](CountingReader(range(10)))
    twin = DECORATORS[name](CountingReader(range(10)))
    passes = [list(r()) for _ in range(3)]
    assert passes[0] and [list(twin()) for _ in range(3)] == passes
    if name != "shuffle_buffer":
        assert passes[0] == passes[1] == passes[2]


@pytest.mark.parametrize("name", sorted(DECORATORS))
def test_decorator_pickles_with_module_level_functions(name):
    r = DECORATORS[name](readers.from_sequence(list(range(10))))
    clone = pickle.loads(pickle.dumps(r))
    assert list(clone()) == list(r())


@pytest.mark.parametrize("name", sorted(DECORATORS))
def test_decorator_repr_shows_one_stage_per_line(name):
    r = DECORATORS[name](readers.from_sequence(list(range(10))))
    lines = repr(r).splitlines()
    assert len(lines) >= 2
    assert lines[-1].endswith("from_sequence(list of 10)")


@pytest.mark.parametrize("name", sorted(set(DECORATORS) - {"map_readers", "filter_entries"}))
@pytest.mark.parametrize("indexed", [False, True])
def test_decorator_passes_arrays_none_and_empty_strings_unharmed(name, indexed):
    items = [np.arange(3), None, "", np.zeros((2, 2)), None, "", np.ones(1)]
    source = readers.from_sequence(items) if indexed else (lambda: iter(items))
    out = list(DECORATORS[name](source)())
    flat = []
    for entry in out:
        parts = entry if isinstance(entry, (tuple, list)) else (entry,)
        flat.extend(p for p in parts if not isinstance(p, int))
    expected = {"firstn": items[:3], "skip": items[2:], "chain": items * 2, "repeat": items * 2}.get(name, items)
    if name == "compose":
        expected = [x for item in items for x in (item, item)]
    if name == "shuffle_buffer":  # the same items in another order: compare as multisets of (kind, value)
        flat, expected = sorted(map(_key, flat)), sorted(map(_key, expected))
        assert flat == expected
        return
    assert len(flat) == len(expected)
    for got, want in zip(flat, expected):
        if want is None or isinstance(want, str):
            assert got is want or got == want and type(got) is type(want), name
        else:
            assert isinstance(got, np.ndarray) and got.shape == want.shape and (got == want).all()


def _key(x):
    return (type(x).__name__, repr(x))


# -- passes ---------------------------------------------------------------------------


@pytest.mark.parametrize("make", [
    lambda r: readers.repeat(r, 2),
    lambda r: readers.chain(r, r),
    lambda r: readers.compose(r, r),
    lambda r: readers.map_readers(add_one, r),
])
def test_set_pass_replays_the_bare_pass_through_stages_that_call_a_parent_twice(make):
    """Regression from the review of issue 2."""
    r = make(readers.shuffle(readers.from_sequence(list(range(8))), seed=0))
    bare = [list(r()) for _ in range(3)]
    for k in (2, 0, 1):
        r.set_pass(k)
        assert list(r()) == bare[k]


def test_set_pass_accepts_numpy_ints():
    """Regression from the review of issue 2."""
    r = readers.shuffle(readers.from_sequence(list(range(5))), seed=0)
    r.set_pass(np.int64(1))
    assert r._pass == 1


@pytest.mark.parametrize("bad", [-1, 1.0, True])
def test_set_pass_refuses_what_is_not_a_pass_number(bad):
    with pytest.raises(ValueError, match="set_pass: pass_id must be an int >= 0"):
        readers.from_sequence("ab").set_pass(bad)


def test_run_gives_any_pass_from_any_cursor_without_moving_the_pass_count():
    r = readers.shuffle(readers.from_sequence(range(10)), seed=1)
    second = list(r.run(1))
    assert list(r.run(1, cursor=4)) == second[4:]
    assert list(r()) == list(r.run(0))  # run() did not count as a call


def test_a_stage_without_stream_or_seek_says_which_hook_is_missing():
    class Empty(readers.Stage):
        name = "empty"

    with pytest.raises(NotImplementedError, match="Empty defines neither _stream nor _seek"):
        list(Empty()())


# -- random access ---------------------------------------------------------------------


def test_indexed_reader_index_out_of_range_names_the_index_and_length():
    src = readers.from_sequence(list("abcdefgh"))
    with pytest.raises(IndexError, match="sample index 8 out of range"):
        src[8]
    assert src[-1] == "h"


@pytest.mark.parametrize("index", ["1", 1.0, True])
def test_indexed_reader_index_must_be_an_int(index):
    with pytest.raises(TypeError, match="sample index must be an int"):
        readers.from_sequence("abc")[index]


def test_stream_stage_has_no_random_access():
    with pytest.raises(TypeError, match="has no random access"):
        readers.shuffle(readers.from_sequence("abc"), seed=0)[0]


def test_indexed_subclass_gather_may_wrap_the_default():
    class Logged(readers.IndexedReader):
        calls: list = []

        def __len__(self):
            return 10

        def _get(self, i):
            return i * i

        def gather(self, indices):
            self.calls.append(len(indices))
            return super().gather(indices)

    assert list(Logged()()) == [i * i for i in range(10)] and Logged.calls == [10]


class _Pairs(Stage):
    """Declares positions = 2 (its cursor is its parent's) but defines only _stream."""

    name = "pairs"
    positions = 2

    def _stream(self, pass_id):
        entries = iterate(self.parents[0], pass_id)
        return zip(entries, entries)


def test_a_stage_with_positions_but_no_seek_refuses_to_resume_in_the_wrong_place():
    r = _Pairs(readers.from_sequence(range(6)))
    assert list(r()) == [(0, 1), (2, 3), (4, 5)]
    with pytest.raises(NotImplementedError, match=r"declares positions=2, so its cursor counts its parent's "
                                                  r"positions.*define _seek\(pass_id, cursor\)"):
        list(r.run(0, cursor=2))


def test_a_stage_that_forgot_super_init_says_so():
    class NoSuper(Stage):
        def __init__(self, reader):
            self.reader = reader

    with pytest.raises(TypeError, match=r"NoSuper.__init__ must call super\(\).__init__\(\*parents\)"):
        NoSuper(readers.from_sequence("ab"))()


def test_a_stage_with_an_unknown_access_says_which_there_are():
    class Wrong(Stage):
        access = "indexed"

    with pytest.raises(ValueError, match=r"Wrong declares access='indexed'; access is one of \('stream', 'plan', 'index'\)"):
        list(Wrong()())


class _CountsLen(readers.IndexedReader):
    calls = 0

    def __len__(self):
        type(self).calls += 1
        return 100

    def _get(self, i):
        return i


def test_random_access_through_a_deep_pipeline_checks_bounds_once_per_level():
    source = _CountsLen()
    r = source
    for _ in range(8):
        r = readers.map_readers(abs, readers.skip(r, 1))
    _CountsLen.calls = 0
    assert r[3] == 11
    assert _CountsLen.calls == 1  # one len() down the pipeline for [i]; the stages below ask each other at(i)


def test_a_stream_stage_is_not_iterable_and_says_to_call_it():
    with pytest.raises(TypeError, match=r"'BufferShuffle' object is not iterable: a reader is called for a pass"):
        list(readers.shuffle(readers.from_sequence(range(3)), 2, seed=0))
    assert list(readers.from_sequence("ab")) == ["a", "b"]  # an indexed one iterates its entries


def test_from_sequence_refuses_a_stage_without_random_access():
    with pytest.raises(TypeError, match="from_sequence needs a sequence with len and"):
        readers.from_sequence(readers.shuffle(readers.from_sequence(range(3)), 2, seed=0))


def test_a_stage_written_with_iter_gather_still_works_but_is_told_to_rename_it():
    with pytest.warns(DeprecationWarning, match="defines iter_gather, which is now gather"):
        class Old(readers.IndexedReader):
            def __len__(self):
                return 3

            def _get(self, i):
                return -i

            def iter_gather(self, indices):
                return (10 * i for i in indices.tolist())

    assert list(Old()()) == [0, 10, 20]
    with pytest.warns(DeprecationWarning, match="iter_gather is deprecated"):
        assert list(readers.from_sequence("abc").iter_gather(np.arange(2))) == ["a", "b"]


def test_a_stage_that_jumps_its_parent_meets_a_cursor_only_where_the_parent_can_jump():
    seen = []

    class Jumps(Stage):
        def _seek(self, pass_id, cursor):
            seen.append(cursor)
            return iterate(self.parents[0], pass_id, cursor)

    r = Jumps(batching.batch(readers.from_sequence(range(6)), 2))  # the batch's cursor counts entries
    assert list(r.run(0, cursor=1)) == [[2, 3], [4, 5]] and seen == [0]  # read past: one batch
    seen.clear()
    assert list(Jumps(readers.from_sequence(range(6))).run(0, cursor=4)) == [4, 5] and seen == [4]
