"""readers.ops.shuffling: seeded buffer shuffle and the O(1)-memory global shuffle."""
import pytest

import readers
from tests.helpers.toys import ten_reader


def stream_of(n):
    def reader():
        yield from range(n)

    return reader


@pytest.mark.parametrize("buf_size", [0, 1])
def test_shuffle_small_buffer_keeps_order(buf_size):
    assert list(readers.shuffle(ten_reader(), buf_size)()) == list(range(10))


@pytest.mark.parametrize("buf_size", [3, 10, 100])
def test_shuffle_buffer_keeps_every_entry(buf_size):
    out = list(readers.shuffle(ten_reader(), buf_size, seed=0)())
    assert sorted(out) == list(range(10))


@pytest.mark.parametrize("buf_size", [None, 7])
def test_shuffle_same_seed_same_order_and_passes_differ(buf_size):
    make = lambda: readers.shuffle(readers.from_sequence(list(range(100))), buf_size, seed=42)
    a, b = make(), make()
    first, second = list(a()), list(a())
    assert first == list(b()) and second == list(b())
    assert first != second
    assert sorted(first) == sorted(second) == list(range(100))


@pytest.mark.parametrize("buf_size", [None, 7])
def test_shuffle_set_pass_replays_a_pass(buf_size):
    r = readers.shuffle(readers.from_sequence(list(range(50))), buf_size, seed=3)
    passes = [list(r()) for _ in range(3)]
    r.set_pass(1)
    assert list(r()) == passes[1]


def test_buffer_shuffle_same_order_for_indexed_and_stream_sources():
    indexed = readers.shuffle(readers.from_sequence(list(range(103))), 10, seed=9)
    stream = readers.shuffle(stream_of(103), 10, seed=9)
    for _ in range(2):
        assert list(indexed()) == list(stream())


def test_buffer_shuffle_only_moves_entries_within_their_block():
    out = list(readers.shuffle(stream_of(30), 10, seed=1)())
    for block in range(3):
        assert sorted(out[block * 10:(block + 1) * 10]) == list(range(block * 10, (block + 1) * 10))


def test_shuffle_seed_none_draws_one_seed_and_keeps_it():
    r = readers.shuffle(readers.from_sequence(list(range(30))))
    seed = r.seed
    assert f"seed={seed}" in repr(r)
    first = list(r())
    assert list(readers.shuffle(readers.from_sequence(list(range(30))), seed=seed)()) == first


def test_global_shuffle_reads_through_gather_not_item_by_item():
    class Source(readers.IndexedReader):
        def __init__(self):
            super().__init__()
            self.gets = 0

        def __len__(self):
            return 10_000

        def _get(self, i):
            self.gets += 1
            return i

        def gather(self, indices):
            return indices.tolist()

    src = Source()
    out = list(readers.shuffle(src, seed=0)())
    assert sorted(out) == list(range(10_000)) and src.gets == 0


@pytest.mark.parametrize("n", [3, 4, 5])
def test_global_shuffle_of_a_tiny_reader_reaches_every_order_uniformly(n):
    import math
    from collections import Counter

    passes = 300 * math.factorial(n)
    r = readers.shuffle(readers.from_sequence(list(range(n))), seed=5)
    counts = Counter(tuple(r()) for _ in range(passes))
    assert len(counts) == math.factorial(n)
    expected = passes / math.factorial(n)
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi2 < 3 * math.factorial(n)  # about dof + 7 sigma for these sizes


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: readers.shuffle(ten_reader(), -3), "buf_size must be an int >= 0"),
        (lambda: readers.shuffle(ten_reader(), 3, seed="x"), "seed must be an int"),
        (lambda: readers.shuffle(ten_reader()), "needs an indexed reader"),
    ],
)
def test_shuffle_bad_options_raise_value_error_when_applied(make, match):
    with pytest.raises(ValueError, match=match):
        make()
