"""readers.ops.permutation: the keyed bijection behind the global shuffle of large readers."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from readers.ops.permutation import KeyedPermutation


@given(n=st.integers(0, 5000), seed=st.integers(0, 2**63 - 1), pass_id=st.integers(0, 1000))
@settings(max_examples=60, deadline=None)
def test_keyed_permutation_is_a_bijection(n, seed, pass_id):
    out = KeyedPermutation(n, seed, pass_id)(np.arange(n))
    assert out.dtype == np.int64
    assert np.array_equal(np.sort(out), np.arange(n))


def test_keyed_permutation_maps_any_chunking_the_same():
    p = KeyedPermutation(1000, 5, 2)
    whole = p(np.arange(1000))
    parts = np.concatenate([p(np.arange(a, min(a + 77, 1000))) for a in range(0, 1000, 77)])
    assert np.array_equal(whole, parts)


def test_global_shuffle_positions_are_close_to_uniform():
    # where sample 0 lands, over 4000 passes of 8 samples: a chi-square check
    n, passes = 8, 4000
    counts = np.zeros(n)
    for k in range(passes):
        counts[int(np.flatnonzero(KeyedPermutation(n, 11, k)(np.arange(n)) == 0)[0])] += 1
    chi2 = ((counts - passes / n) ** 2 / (passes / n)).sum()
    assert chi2 < 30, counts  # 7 degrees of freedom: p < 1e-4 beyond 30


def test_keyed_permutation_depends_on_seed_and_pass_only():
    def order(seed, pass_id):
        return KeyedPermutation(100, seed, pass_id)(np.arange(100)).tolist()

    assert order(1, 2) == order(1, 2)
    assert len({tuple(order(1, 2)), tuple(order(2, 2)), tuple(order(1, 3))}) == 3


def test_keyed_permutation_refuses_a_negative_size():
    with pytest.raises(ValueError, match="permutation size must be >= 0, got -1"):
        KeyedPermutation(-1, 0, 0)
