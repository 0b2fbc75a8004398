import collections
import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from batching.bucket import bucket_by_length
from readers.stage import Stage


def words():
    yield from ["a", "bb", "ccccc", "d", "eeeeee", "ff", "g", "hhhhhhhhhh"]


def pairs():
    for n in [1, 4, 2, 7, 3, 9, 0]:
        yield (list(range(n)), n)


def second_column(entry):
    return entry[1]


@pytest.mark.parametrize(
    "boundaries, batch_size, expected",
    [
        ([3], 2, [["a", "bb"], ["ccccc", "eeeeee"], ["d", "ff"], ["g"], ["hhhhhhhhhh"]]),
        ([2, 6], 2, [["bb", "ccccc"], ["a", "d"], ["eeeeee", "hhhhhhhhhh"], ["g"], ["ff"]]),
        ([], 3, [["a", "bb", "ccccc"], ["d", "eeeeee", "ff"], ["g", "hhhhhhhhhh"]]),
        ([100], 3, [["a", "bb", "ccccc"], ["d", "eeeeee", "ff"], ["g", "hhhhhhhhhh"]]),
    ],
)
def test_bucket_by_length_groups_by_length(boundaries, batch_size, expected):
    assert list(bucket_by_length(words, boundaries, batch_size)()) == expected


@pytest.mark.parametrize("n, bucket", [(0, 0), (2, 0), (3, 1), (4, 1), (5, 2), (50, 2)])
def test_bucket_by_length_boundary_starts_the_next_bucket(n, bucket):
    one_per_bucket = ["", "xxx", "xxxxxxx"]  # lengths 0, 3, 7 with boundaries [3, 5]

    def reader():
        yield "x" * n
        yield from one_per_bucket

    # With batch_size 2 the probe's bucket fills first and pairs it with that bucket's entry.
    assert list(bucket_by_length(reader, [3, 5], 2)())[0] == ["x" * n, one_per_bucket[bucket]]


def test_bucket_by_length_yields_full_buckets_as_soon_as_full():
    pulled = []

    def reader():
        for w in ["a", "bbbb", "c", "dddd"]:
            pulled.append(w)
            yield w

    it = iter(bucket_by_length(reader, [2], 2)())
    assert next(it) == ["a", "c"]
    assert pulled == ["a", "bbbb", "c"]  # the short bucket filled before "dddd" was read


@pytest.mark.parametrize(
    "drop_last, expected",
    [
        (False, [["a", "bb"], ["ccccc", "eeeeee"], ["d", "ff"], ["g"], ["hhhhhhhhhh"]]),
        (True, [["a", "bb"], ["ccccc", "eeeeee"], ["d", "ff"]]),
    ],
)
def test_bucket_by_length_flushes_partial_buckets_unless_drop_last(drop_last, expected):
    assert list(bucket_by_length(words, [3], 2, drop_last=drop_last)()) == expected


def test_bucket_by_length_per_bucket_batch_sizes():
    batches = list(bucket_by_length(words, [3], [3, 1])())
    assert batches == [["ccccc"], ["a", "bb", "d"], ["eeeeee"], ["hhhhhhhhhh"], ["ff", "g"]]


def test_bucket_by_length_default_length_is_first_column_of_tuples():
    batches = list(bucket_by_length(pairs, [3], 2)())
    assert [[n for _, n in b] for b in batches] == [[1, 2], [4, 7], [3, 9], [0]]


def test_bucket_by_length_custom_length():
    batches = list(bucket_by_length(pairs, [3], 2, length=second_column)())
    assert [[n for _, n in b] for b in batches] == [[1, 2], [4, 7], [3, 9], [0]]
    assert list(bucket_by_length(lambda: iter(range(6)), [3], 3, length=int)()) == [[0, 1, 2], [3, 4, 5]]


def test_bucket_by_length_is_lazy_and_recallable():
    calls = []

    def reader():
        calls.append(1)
        yield from words()

    r = bucket_by_length(reader, [3], 2)
    assert calls == []
    first = list(r())
    assert list(r()) == first and len(calls) == 2


def test_bucket_by_length_is_a_stage_with_a_repr():
    r = bucket_by_length(words, [3, 8], [4, 2, 1], length=len, drop_last=True)
    assert isinstance(r, Stage)
    assert repr(r).splitlines() == [
        "bucket_by_length(boundaries=[3, 8], batch_size=[4, 2, 1], length=len, drop_last=True)",
        "└─ words",
    ]


def test_bucket_by_length_pickles():
    r = pickle.loads(pickle.dumps(bucket_by_length(pairs, [3], 2, length=second_column)))
    assert [[n for _, n in b] for b in r()] == [[1, 2], [4, 7], [3, 9], [0]]


def test_bucket_by_length_accepts_numpy_ints():
    r = bucket_by_length(words, np.array([3]), np.int64(2), length=lambda w: np.int32(len(w)))
    assert list(r())[0] == ["a", "bb"]


@pytest.mark.parametrize(
    "boundaries, batch_size, message",
    [
        ([3, 2], 2, r"strictly increasing, got \[3, 2\]"),
        ([3, 3], 2, r"strictly increasing.*boundaries\[1\] = 3 <= 3"),
        ([0, 4], 2, r"boundaries must be >= 1"),
        ([2.5], 2, r"boundaries must be ints, got 2.5 at boundaries\[0\]"),
        ([True], 2, r"boundaries must be ints"),
        (5, 2, r"boundaries must be a list of ints, got 5"),
        ([3], 0, r"batch_size must be an int >= 1, got 0"),
        ([3], True, r"batch_size must be an int >= 1 or a list of 2"),
        ([3], [2], r"2 sizes, got 1: \[2\]"),
        ([3, 6], [2, 2], r"2 boundaries need 3 sizes, got 2"),
        ([3], [2, 0], r"got 0 for bucket 1"),
        ([3], [2, 1.5], r"got 1.5 for bucket 1"),
        ([3], "ab", r"batch sizes must be ints >= 1, got 'a' for bucket 0"),
    ],
)
def test_bucket_by_length_bad_options_raise_when_called(boundaries, batch_size, message):
    with pytest.raises(ValueError, match=message):
        bucket_by_length(words, boundaries, batch_size)


def test_bucket_by_length_bad_reader_raises_when_called():
    with pytest.raises(TypeError, match="zero-argument callable"):
        bucket_by_length(["a", "b"], [3], 2)


def test_bucket_by_length_bad_length_function_type():
    with pytest.raises(ValueError, match="length must be a function"):
        bucket_by_length(words, [3], 2, length=3)


@pytest.mark.parametrize(
    "length, message",
    [
        (lambda w: -1 if w == "d" else 1, r"returned -1 for entry 3"),
        (lambda w: 2.0, r"returned 2.0 for entry 0"),
        (lambda w: True, r"returned True for entry 0"),
        (lambda w: None, r"returned None for entry 0; it must return an int >= 0"),
    ],
)
def test_bucket_by_length_bad_lengths_name_the_entry(length, message):
    r = bucket_by_length(words, [3], 2, length=length)
    with pytest.raises(ValueError, match=message):
        list(r())


def test_bucket_by_length_entry_without_len():
    with pytest.raises(TypeError, match="got a int, which has none; pass length="):
        list(bucket_by_length(lambda: iter([1, 2]), [3], 2)())


def test_bucket_by_length_batches_are_not_reused():
    batches = list(bucket_by_length(words, [3], 2)())
    assert len({id(b) for b in batches}) == len(batches)


@given(
    lengths=st.lists(st.integers(0, 30), max_size=60),
    boundaries=st.lists(st.integers(1, 30), max_size=4, unique=True).map(sorted),
    sizes=st.lists(st.integers(1, 5), min_size=5, max_size=5),
    drop_last=st.booleans(),
)
def test_bucket_by_length_every_entry_exactly_once(lengths, boundaries, sizes, drop_last):
    entries = [(i, n) for i, n in enumerate(lengths)]
    sizes = sizes[: len(boundaries) + 1]
    r = bucket_by_length(lambda: iter(entries), boundaries, sizes, length=second_column, drop_last=drop_last)
    batches = list(r())

    def bucket_of(n):
        return sum(b <= n for b in boundaries)

    seen = collections.Counter(e for b in batches for e in b)
    assert all(count == 1 for count in seen.values())
    for batch in batches:
        buckets = {bucket_of(n) for _, n in batch}
        assert len(buckets) == 1
        k = buckets.pop()
        assert 1 <= len(batch) <= sizes[k]
        if drop_last:
            assert len(batch) == sizes[k]
    per_bucket = collections.Counter(bucket_of(n) for n in lengths)
    for k, total in per_bucket.items():
        got = sum(len(b) for b in batches if bucket_of(b[0][1]) == k)
        assert got == (total - total % sizes[k] if drop_last else total)
    # Order within a bucket is the reader's order.
    for batch in batches:
        assert [i for i, _ in batch] == sorted(i for i, _ in batch)
    assert list(r()) == batches
