"""Decorators: Paddle's contract, laziness, re-calls, currying, pickling, indexing."""
import functools
import gc
import pickle
import warnings

import numpy as np
import pytest
import toolz

import batching
import readers
from readers.stage import as_indexed, is_planned


def ten(offset=0):
    """Paddle's test reader: entries offset..offset+9."""
    yield from range(offset, offset + 10)


def ten_reader(offset=0):
    return functools.partial(ten, offset)


def double(x):
    return 2 * x


def add_one(x):
    return x + 1


def is_odd(x):
    return x % 2 == 1


class CountingReader:
    """A stream that counts the passes started and entries pulled."""

    def __init__(self, items):
        self.items = list(items)
        self.calls = 0
        self.pulled = 0

    def __call__(self):
        self.calls += 1
        for item in self.items:
            self.pulled += 1
            yield item


# -- Paddle's contract ----------------------------------------------------------


def test_map_readers_applies_function_to_each_entry():
    r = readers.map_readers(double, ten_reader())
    for _ in range(3):
        assert list(r()) == [2 * i for i in range(10)]


def test_map_readers_zips_several_readers_and_stops_at_shortest():
    r = readers.map_readers(lambda a, b: (a, b), ten_reader(), lambda: "abc")
    assert list(r()) == [(0, "a"), (1, "b"), (2, "c")]


def test_compose_flattens_tuples_one_level():
    r = readers.compose(lambda: [(1, (2,)), (3, (4,))], lambda: [0, 1])
    assert list(r()) == [(1, (2,), 0), (3, (4,), 1)]


def test_compose_not_aligned_raises_after_the_shortest_ends():
    r = readers.compose(readers.chain(ten_reader(), ten_reader()), ten_reader())
    total = 0
    with pytest.raises(readers.ComposeNotAligned, match="reader 2 is shorter than reader 1"):
        for _ in r():
            total += 1
    assert total == 10
    assert issubclass(readers.ComposeNotAligned, ValueError)


def test_compose_without_alignment_check_stops_at_shortest():
    r = readers.compose(readers.chain(ten_reader(), ten_reader()), ten_reader(), check_alignment=False)
    assert len(list(r())) == 10


def test_compose_indexed_readers_checks_lengths():
    r = readers.compose(readers.from_sequence("abc"), readers.from_sequence("xy"))
    with pytest.raises(readers.ComposeNotAligned, match=r"lengths \[3, 2\]"):
        list(r())
    loose = readers.compose(readers.from_sequence("abc"), readers.from_sequence("xy"), check_alignment=False)
    assert list(loose()) == [("a", "x"), ("b", "y")] and loose[1] == ("b", "y")


def test_chain_concatenates():
    r = readers.chain(ten_reader(0), ten_reader(10), ten_reader(20))
    assert list(r()) == list(range(30))


@pytest.mark.parametrize("buf_size", [0, 1])
def test_shuffle_small_buffer_keeps_order(buf_size):
    assert list(readers.shuffle(ten_reader(), buf_size)()) == list(range(10))


@pytest.mark.parametrize("buf_size", [3, 10, 100])
def test_shuffle_buffer_keeps_every_entry(buf_size):
    out = list(readers.shuffle(ten_reader(), buf_size, seed=0)())
    assert sorted(out) == list(range(10))


def test_firstn_pulls_no_more_than_n():
    source = CountingReader(range(100))
    assert list(readers.firstn(source, 5)()) == [0, 1, 2, 3, 4]
    assert source.pulled == 5


def test_firstn_fewer_than_n_is_fine():
    assert list(readers.firstn(ten_reader(), 50)()) == list(range(10))


def test_cache_reads_lazily_then_replays():
    source = CountingReader(range(4))
    r = readers.cache(source)
    assert source.calls == 0
    assert list(r()) == list(r()) == [0, 1, 2, 3]
    assert source.calls == 1


def test_cache_does_not_keep_an_interrupted_first_pass():
    source = CountingReader(range(4))
    r = readers.cache(source)
    it = r()
    next(it)
    it.close()
    assert list(r()) == [0, 1, 2, 3]
    assert list(r()) == [0, 1, 2, 3] and source.calls == 2


# -- the small ones -----------------------------------------------------------------


def test_filter_skip_repeat():
    assert list(readers.filter_entries(ten_reader(), is_odd)()) == [1, 3, 5, 7, 9]
    assert list(readers.skip(ten_reader(), 7)()) == [7, 8, 9]
    assert list(readers.repeat(lambda: [1, 2], 2)()) == [1, 2, 1, 2]


def test_repeat_reshuffles_each_repetition():
    r = readers.repeat(readers.shuffle(readers.from_sequence(range(20)), seed=4), 2)
    out = list(r())
    assert sorted(out[:20]) == sorted(out[20:]) == list(range(20))
    assert out[:20] != out[20:]


def test_with_index_attaches_source_index_after_shuffle():
    data = [("x%d" % i, i % 3) for i in range(50)]
    r = readers.with_index(readers.shuffle(readers.from_sequence(data), seed=2))
    out = list(r())
    assert sorted(e[-1] for e in out) == list(range(50))
    assert all(data[i] == (name, label) for name, label, i in out)


def test_with_index_on_a_stream_counts_positions():
    assert list(readers.with_index(lambda: "ab")()) == [("a", 0), ("b", 1)]


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


def test_decorators_curry_by_keyword_in_a_pipe():
    r = toolz.pipe(
        readers.from_sequence(list(range(20))),
        readers.map_readers(add_one),
        readers.shuffle(buf_size=5, seed=0),
        readers.firstn(n=12),
        readers.skip(n=2),
        readers.filter_entries(predicate=is_odd),
        batching.batch(batch_size=2),
    )
    out = [x for b in r() for x in b]
    assert len(out) == len(set(out)) and all(x % 2 for x in out)


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


def test_reader_returning_non_iterable_gets_a_type_error():
    r = readers.map_readers(double, lambda: 42)
    with pytest.raises(TypeError, match="returned int, which is not iterable"):
        list(r())


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: readers.firstn(ten_reader(), -1), "n must be an int >= 0"),
        (lambda: readers.shuffle(ten_reader(), -3), "buf_size must be an int >= 0"),
        (lambda: readers.shuffle(ten_reader(), 3, seed="x"), "seed must be an int"),
        (lambda: readers.shuffle(ten_reader()), "needs an indexed reader"),
        (lambda: readers.repeat(ten_reader(), 1.5), "times must be an int"),
    ],
)
def test_bad_options_raise_value_error_when_applied(make, match):
    with pytest.raises(ValueError, match=match):
        make()


# -- indexed readers stay indexed ---------------------------------------------------------


def test_indexed_decorators_keep_len_and_getitem():
    src = readers.from_sequence(list("abcdefgh"))
    assert readers.map_readers(str.upper, src)[2] == "C"
    assert len(readers.chain(src, src)) == 16 and readers.chain(src, src)[9] == "b"
    assert readers.compose(src, src)[1] == ("b", "b")
    assert len(readers.firstn(src, 3)) == 3 and readers.firstn(src, 3)[-1] == "c"
    assert len(readers.skip(src, 3)) == 5 and readers.skip(src, 3)[0] == "d"
    assert readers.with_index(src)[4] == ("e", 4)
    with pytest.raises(IndexError, match="sample index 8 out of range"):
        src[8]
    assert is_planned(readers.firstn(readers.shuffle(src, seed=0), 3))
    assert not is_planned(readers.filter_entries(src, bool))


def test_chained_indexed_gather_matches_getitem():
    a, b = readers.from_sequence(list(range(5))), readers.from_sequence(list(range(100, 107)))
    c = readers.chain(a, b)
    idx = np.array([11, 0, 5, 4, 6, 11, 3])
    assert list(c.gather(idx)) == [c[int(i)] for i in idx]
    mapped = readers.chain(readers.map_readers(str, a), b)
    assert list(mapped.gather(idx)) == [mapped[int(i)] for i in idx]


@pytest.mark.parametrize("wrap", [
    lambda r: r,
    lambda r: readers.shuffle(r, seed=3),
    lambda r: readers.skip(r, 2),
    lambda r: readers.compose(r, readers.from_sequence(range(10_000))),
    readers.with_index,
    lambda r: readers.shard(r, 1, 2),
    lambda r: readers.shard(r, 0, 3, equalize="pad"),
    lambda r: readers.chain(r, readers.from_sequence(range(5))),
    lambda r: readers.shuffle(readers.chain(readers.from_sequence(range(5)), r), seed=1),
])
@pytest.mark.parametrize("kind", ["map", "user", "sequence"])
def test_indexed_pass_does_per_entry_work_only_for_entries_read(wrap, kind):
    calls = []

    class Loud:  # a user's indexed object whose r[i] is the work
        def __len__(self):
            return 10_000

        def __getitem__(self, i):
            calls.append(i)
            return i

        def __call__(self):
            return iter(range(10_000))

    def record(x):
        calls.append(x)
        return x

    base = {"map": lambda: readers.map_readers(record, readers.from_sequence(range(10_000))),
            "user": lambda: as_indexed(Loud()),
            "sequence": lambda: readers.from_sequence(Loud())}[kind]()
    it = iter(wrap(base)())
    first = [next(it) for _ in range(3)]
    assert len(calls) == 3, f"{len(calls)} entries made for the first 3 read (a plan chunk ahead)"
    assert first == list(wrap(base)())[:3]


def test_indexed_map_error_comes_after_the_entries_before_it():
    def invert(x):
        return 1 / (x - 5)

    got = []
    with pytest.raises(ZeroDivisionError):
        for entry in readers.map_readers(invert, readers.from_sequence(range(10)))():
            got.append(entry)
    assert got == [invert(x) for x in range(5)]


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


def test_chain_reads_no_input_for_a_chunk_without_its_indices():
    class Stacked(readers.IndexedReader):
        """A vectorised gather that, like np.stack, needs at least one index."""

        def __init__(self, n):
            super().__init__()
            self.n, self.sizes = n, []

        def __len__(self):
            return self.n

        def _get(self, i):
            return np.full(2, i)

        def gather(self, indices):
            self.sizes.append(len(indices))
            return list(np.stack([np.full(2, i) for i in indices.tolist()]))

    a, b = Stacked(5000), Stacked(10)
    assert len(list(readers.chain(a, b)())) == 5010
    assert b.sizes == [10] and 0 not in a.sizes


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


# -- regressions from the review of issue 2 ----------------------------------------------------


@pytest.mark.parametrize("make", [
    lambda r: readers.repeat(r, 2),
    lambda r: readers.chain(r, r),
    lambda r: readers.compose(r, r),
    lambda r: readers.map_readers(add_one, r),
])
def test_set_pass_replays_the_bare_pass_through_stages_that_call_a_parent_twice(make):
    r = make(readers.shuffle(readers.from_sequence(list(range(8))), seed=0))
    bare = [list(r()) for _ in range(3)]
    for k in (2, 0, 1):
        r.set_pass(k)
        assert list(r()) == bare[k]


def test_repeat_passes_do_not_overlap():
    r = readers.repeat(readers.shuffle(readers.from_sequence(list(range(6))), seed=0), 2)
    a, b = list(r()), list(r())
    halves = [tuple(a[:6]), tuple(a[6:]), tuple(b[:6]), tuple(b[6:])]
    assert len(set(halves)) == 4


def test_repeat_forever_of_an_empty_pass_raises():
    r = readers.repeat(readers.filter_entries(ten_reader(), lambda x: x > 100))
    with pytest.raises(ValueError, match="gave no entries"):
        next(iter(r()))


def test_with_index_ids_are_source_indices_through_windows():
    src = readers.from_sequence(list("abcdef"))
    direct = list(readers.with_index(readers.skip(src, 2))())
    shuffled = list(readers.with_index(readers.skip(readers.shuffle(src, 1, seed=0), 2))())
    assert direct == shuffled == [("c", 2), ("d", 3), ("e", 4), ("f", 5)]
    assert readers.with_index(readers.firstn(readers.skip(src, 1), 2))[1] == ("c", 2)


@pytest.mark.parametrize("call, match", [
    (lambda: batching.batch(ten_reader()), "missing 1 required positional argument: 'batch_size'"),
    (lambda: readers.firstn(ten_reader()), "missing 1 required positional argument: 'n'"),
    (lambda: readers.xmap_readers(add_one, ten_reader(), 4), "missing 1 required positional argument"),
])
def test_missing_option_with_the_reader_given_fails_at_once(call, match):
    with pytest.raises(TypeError, match=match):
        call()


def test_integral_float_sizes_are_accepted_as_paddle_does():
    assert [len(b) for b in batching.batch(ten_reader(), 5.0)()] == [5, 5]
    assert sorted(readers.shuffle(ten_reader(), 4.0, seed=0)()) == list(range(10))


@pytest.mark.parametrize("make", [readers.chain, readers.compose, lambda *r: readers.map_readers(add_one, *r)])
def test_bad_reader_among_several_is_named(make):
    with pytest.raises(TypeError, match="reader 1 must be"):
        make(ten_reader(), [1, 2])


def test_set_pass_accepts_numpy_ints():
    r = readers.shuffle(readers.from_sequence(list(range(5))), seed=0)
    r.set_pass(np.int64(1))
    assert r._pass == 1


def test_text_file_pass_opens_the_file_only_when_iterated(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("a\nb\n")
    r = readers.text_file(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        it = r()
        del it  # never iterated: there must be no open file to leak
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert list(r()) == ["a", "b"]
    with pytest.raises(FileNotFoundError, match="no file at"):
        readers.text_file(tmp_path / "missing.txt")()
