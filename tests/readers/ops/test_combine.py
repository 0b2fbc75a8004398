"""readers.ops.combine: chain (one after another) and compose (side by side)."""
import numpy as np
import pytest

import readers
from tests.helpers.toys import ten_reader


def test_chain_concatenates():
    r = readers.chain(ten_reader(0), ten_reader(10), ten_reader(20))
    assert list(r()) == list(range(30))


def test_chain_of_indexed_readers_keeps_len_and_getitem():
    src = readers.from_sequence(list("abcdefgh"))
    assert len(readers.chain(src, src)) == 16 and readers.chain(src, src)[9] == "b"


def test_chain_of_streams_has_no_length():
    with pytest.raises(TypeError, match="a chain of streams has no length"):
        len(readers.chain(ten_reader(), readers.from_sequence("ab")))


def test_chained_indexed_gather_matches_getitem():
    a, b = readers.from_sequence(list(range(5))), readers.from_sequence(list(range(100, 107)))
    c = readers.chain(a, b)
    idx = np.array([11, 0, 5, 4, 6, 11, 3])
    assert list(c.gather(idx)) == [c[int(i)] for i in idx]
    mapped = readers.chain(readers.map_readers(str, a), b)
    assert list(mapped.gather(idx)) == [mapped[int(i)] for i in idx]


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


def test_compose_of_indexed_readers_keeps_getitem():
    src = readers.from_sequence(list("abcdefgh"))
    assert readers.compose(src, src)[1] == ("b", "b")
