"""readers.ops.replay: repeat (several passes as one) and cache (the first complete pass kept)."""
import pickle

import pytest

import readers
from tests.helpers.toys import CountingReader, tag_draw, ten_reader


def test_repeat_runs_passes_back_to_back():
    assert list(readers.repeat(lambda: [1, 2], 2)()) == [1, 2, 1, 2]


def test_repeat_reshuffles_each_repetition():
    r = readers.repeat(readers.shuffle(readers.from_sequence(range(20)), seed=4), 2)
    out = list(r())
    assert sorted(out[:20]) == sorted(out[20:]) == list(range(20))
    assert out[:20] != out[20:]


def test_repeat_passes_do_not_overlap():
    """Regression from the review of issue 2."""
    r = readers.repeat(readers.shuffle(readers.from_sequence(list(range(6))), seed=0), 2)
    a, b = list(r()), list(r())
    halves = [tuple(a[:6]), tuple(a[6:]), tuple(b[:6]), tuple(b[6:])]
    assert len(set(halves)) == 4


def test_repeat_forever_of_an_empty_pass_raises():
    """Regression from the review of issue 2."""
    r = readers.repeat(readers.filter_entries(ten_reader(), lambda x: x > 100))
    with pytest.raises(ValueError, match="gave no entries"):
        next(iter(r()))


def test_repeat_bad_times_raises_value_error_when_applied():
    with pytest.raises(ValueError, match="times must be an int"):
        readers.repeat(ten_reader(), 1.5)


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


def test_cache_pickles_empty_so_a_copy_reads_its_own():
    r = readers.cache(readers.from_sequence([1, 2]))
    list(r())
    assert repr(r).startswith("cache(filled)")
    clone = pickle.loads(pickle.dumps(r))
    assert repr(clone).startswith("cache(empty)") and list(clone()) == [1, 2]


def test_cache_refuses_a_reader_that_draws_anew_every_pass():
    """Review of issue 26: cache replayed pass 0's draws for good, where cached refused the same pipeline."""
    noisy = readers.random_map(tag_draw, readers.from_sequence(range(4)), seed=0)
    with pytest.raises(ValueError, match=r"cache: random_map\(tag_draw, seed=0\) below it draws its entries anew"):
        readers.cache(noisy)
    assert len(list(readers.random_map(tag_draw, readers.cache(readers.from_sequence(range(4))), seed=0)())) == 4
