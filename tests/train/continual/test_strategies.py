"""train.continual.strategies: the training sets NewData, AllData and GDumb select, their seeds and their specs."""
import numpy as np
import pytest

from train.continual.strategies import AllData, GDumb, NewData, Strategy, parse_strategy


def class_incremental(tasks=5, classes_per_task=2, per_task=600, seed=0):
    """Keys 0..n-1 in stream order; task k holds classes 2k, 2k+1 in random order."""
    rng = np.random.default_rng(seed)
    labels = np.concatenate([k * classes_per_task + rng.integers(0, classes_per_task, per_task)
                             for k in range(tasks)]).astype(np.int64)
    return np.arange(len(labels), dtype=np.int64), labels


def feed(strategy, keys, labels, cuts):
    """Inform the strategy trigger by trigger (cuts are trigger points) and collect each select()."""
    selected, start = [], 0
    for cut in cuts:
        strategy.inform(keys[start:cut], labels[start:cut])
        selected.append(strategy.select())
        start = cut
    return selected


def test_new_data_selects_exactly_the_samples_since_the_last_trigger():
    keys, labels = class_incremental()
    selected = feed(NewData(), keys, labels, [600, 1200, 1250, 3000])
    assert [s[0].tolist() for s in selected] == [list(range(0, 600)), list(range(600, 1200)),
                                                 list(range(1200, 1250)), list(range(1250, 3000))]
    assert all(s[0].dtype == np.int64 and s[1].dtype == np.float32 and (s[1] == 1).all() for s in selected)


def test_new_data_with_no_new_samples_selects_nothing():
    strategy = NewData()
    strategy.inform([1, 2], [0, 0])
    strategy.select()
    assert strategy.select()[0].tolist() == []


@pytest.mark.parametrize("keep", [0.1, 0.25, 1.0])
def test_new_data_keeps_a_fraction_of_the_older_samples(keep):
    keys, labels = class_incremental()
    cuts = [600, 1200, 1800]
    selected = feed(NewData(keep, seed=3), keys, labels, cuts)
    for start, cut, (chosen, weights) in zip([0] + cuts, cuts, selected):
        old, new = chosen[:len(chosen) - (cut - start)], chosen[len(chosen) - (cut - start):]
        assert new.tolist() == list(range(start, cut))
        assert len(old) == round(keep * start) and len(set(old.tolist())) == len(old)
        assert (np.diff(old) > 0).all() and (old < start).all()
        assert len(weights) == len(chosen)


def test_new_data_is_deterministic_by_seed_and_seeds_differ():
    keys, labels = class_incremental()
    runs = [feed(NewData(0.2, seed=s), keys, labels, [600, 1200, 1800]) for s in (0, 0, 1)]
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(runs[0], runs[1]))
    assert not np.array_equal(runs[0][2][0], runs[2][2][0])


def test_new_data_does_not_depend_on_how_inform_was_chunked():
    keys, labels = class_incremental()
    whole = NewData(0.3, seed=5)
    whole.inform(keys[:1000], labels[:1000])
    whole.select()
    whole.inform(keys[1000:], labels[1000:])
    pieces = NewData(0.3, seed=5)
    for start in range(0, 1000, 7):
        pieces.inform(keys[start:min(start + 7, 1000)], labels[start:min(start + 7, 1000)])
    pieces.select()
    pieces.inform(keys[1000:2000], labels[1000:2000])
    pieces.inform(keys[2000:], labels[2000:])
    assert np.array_equal(whole.select()[0], pieces.select()[0])


def test_all_data_grows_with_everything_seen():
    keys, labels = class_incremental()
    selected = feed(AllData(), keys, labels, [1, 600, 2999, 3000])
    assert [s[0].tolist() for s in selected] == [list(range(n)) for n in (1, 600, 2999, 3000)]
    assert not AllData.from_scratch and not NewData.from_scratch and GDumb.from_scratch


def test_all_data_holds_millions_of_keys_in_one_array():
    strategy = AllData()
    for start in range(0, 3_000_000, 500_000):
        strategy.inform(np.arange(start, start + 500_000), np.zeros(500_000, np.int64))
    keys, weights = strategy.select()
    assert len(keys) == 3_000_000 and keys[-1] == 2_999_999 and weights.dtype == np.float32


def test_gdumb_never_holds_more_than_k():
    keys, labels = class_incremental()
    strategy = GDumb(37, seed=1)
    for start in range(0, len(keys), 13):
        strategy.inform(keys[start:start + 13], labels[start:start + 13])
        assert sum(strategy.class_counts().values()) == len(strategy.select()[0]) <= 37


def test_gdumb_ends_class_balanced_on_a_class_incremental_stream():
    keys, labels = class_incremental()
    strategy = GDumb(500, seed=0)
    sizes = []
    for (chosen, weights) in feed(strategy, keys, labels, [600, 1200, 1800, 2400, 3000]):
        sizes.append(len(chosen))
        assert (np.diff(chosen) > 0).all() and (weights == 1).all()
        counts = np.bincount(labels[chosen])
        counts = counts[counts > 0]
        assert counts.max() - counts.min() <= 1
    assert sizes == [500] * 5
    assert strategy.class_counts() == {c: 50 for c in range(10)}


def test_gdumb_keeps_every_class_within_one_once_each_has_enough():
    rng = np.random.default_rng(4)
    labels = rng.choice(4, size=2000, p=[0.55, 0.25, 0.15, 0.05])
    strategy = GDumb(40, seed=2)
    strategy.inform(np.arange(2000), labels)
    counts = strategy.class_counts()
    assert sorted(counts) == [0, 1, 2, 3] and max(counts.values()) - min(counts.values()) <= 1


def test_gdumb_follows_the_greedy_rule_on_a_small_stream():
    strategy = GDumb(3, seed=0)
    strategy.inform([10, 11, 12], [0, 0, 1])  # filling
    strategy.inform([13], [0])  # class 0 holds 2, the most: skipped
    assert strategy.select()[0].tolist() == [10, 11, 12]
    strategy.inform([14], [2])  # class 2 holds 0 < 2: one of class 0's goes
    chosen = strategy.select()[0].tolist()
    assert strategy.class_counts() == {0: 1, 1: 1, 2: 1} and 12 in chosen and 14 in chosen
    strategy.inform([15], [1])  # every class holds 1: ties, so skipped
    assert strategy.select()[0].tolist() == chosen


def test_gdumb_breaks_ties_between_largest_classes_by_the_smallest_label():
    strategy = GDumb(4, seed=0)
    strategy.inform([1, 2, 3, 4, 5], [7, 3, 7, 3, 5])
    assert strategy.class_counts() == {3: 1, 5: 1, 7: 2}


def test_gdumb_is_deterministic_by_seed_and_seeds_differ():
    keys, labels = class_incremental()
    runs = [feed(GDumb(100, seed=s), keys, labels, [600, 3000]) for s in (7, 7, 8)]
    assert np.array_equal(runs[0][1][0], runs[1][1][0])
    assert not np.array_equal(runs[0][1][0], runs[2][1][0])


@pytest.mark.parametrize("spec, expected", [
    ("new", "NewData(keep=0.0, seed=4)"), ("new:0.1", "NewData(keep=0.1, seed=4)"),
    ("all", "AllData()"), ("gdumb:500", "GDumb(500, seed=4)"), (" gdumb:8 ", "GDumb(8, seed=4)"),
])
def test_parse_strategy_builds_the_strategy_and_its_spec_parses_back(spec, expected):
    strategy = parse_strategy(spec, seed=4)
    assert repr(strategy) == expected
    assert repr(parse_strategy(strategy.spec, seed=4)) == expected
    assert strategy.name == spec.strip().split(":")[0]


@pytest.mark.parametrize("spec, message", [
    ("newest", "unknown strategy spec 'newest'"),
    ("all:3", "unknown strategy spec 'all:3'"),
    ("gdumb", "unknown strategy spec 'gdumb'"),
    ("gdumb:0", "bad strategy spec 'gdumb:0': gdumb:K needs a whole number K >= 1, got '0'"),
    ("gdumb:2.5", "bad strategy spec 'gdumb:2.5': gdumb:K needs a whole number K >= 1, got '2.5'"),
    ("gdumb:", "bad strategy spec 'gdumb:': gdumb:K needs a whole number K >= 1, got ''"),
    ("new:1.5", "bad strategy spec 'new:1.5': NewData: keep must be a fraction in \\[0, 1\\]"),
    ("new:x", "bad strategy spec 'new:x': new:KEEP needs a number KEEP, 0 <= KEEP <= 1, got 'x'"),
    ("new:lots", "bad strategy spec 'new:lots': new:KEEP needs a number KEEP"),
])
def test_a_bad_strategy_spec_says_what_is_wrong_and_lists_the_forms(spec, message):
    with pytest.raises(ValueError, match=message) as error:
        parse_strategy(spec)
    text = str(error.value)
    assert text.endswith("accepted forms: new, new:KEEP (0 <= KEEP <= 1), all, gdumb:K (K >= 1)")
    assert "int()" not in text and "float" not in text and "could not convert" not in text


@pytest.mark.parametrize("make, error, message", [
    (lambda: NewData(keep="x"), TypeError,
     r"NewData: keep must be a number, the fraction in \[0, 1\] of the older samples kept, got 'x'"),
    (lambda: NewData(keep=None), TypeError, r"NewData: keep must be a number.* got None"),
    (lambda: NewData(keep=True), TypeError, r"NewData: keep must be a number.* got True"),
    (lambda: NewData(keep=-0.5), ValueError, r"NewData: keep must be a fraction in \[0, 1\], got -0.5"),
    (lambda: GDumb(k=2.5), TypeError, r"GDumb: k \(the memory's size, in samples\) must be an integer >= 1, got 2.5"),
    (lambda: GDumb(k="x"), TypeError, r"GDumb: k \(the memory's size, in samples\) must be an integer >= 1, got 'x'"),
    (lambda: GDumb(k=0), ValueError, r"GDumb: k .* must be an integer >= 1, got 0"),
])
def test_a_strategys_bad_option_is_refused_naming_the_strategy_and_option(make, error, message):
    with pytest.raises(error, match=f"^{message}$"):
        make()


def test_new_data_takes_keep_as_any_real_number():
    assert NewData(keep=np.float32(0.5)).keep == 0.5 and NewData(keep=1).spec == "new:1.0"


def test_inform_refuses_keys_that_are_not_integers():
    with pytest.raises(TypeError, match="keys must be integers, got float64"):
        AllData().inform([1.5], [0])
    with pytest.raises(ValueError, match="must be an integer >= 0"):
        GDumb(3, seed=-1)


def test_a_user_defined_strategy_works_through_the_protocol():
    class EveryOther(Strategy):
        """Every other sample seen, weighted 2."""

        name = "every-other"

        def __init__(self):
            self.keys = []

        def _inform(self, keys, labels):
            self.keys += keys.tolist()

        def select(self):
            keys = np.asarray(self.keys[::2], np.int64)
            return keys, np.full(len(keys), 2, np.float32)

    strategy = EveryOther()
    strategy.inform(np.arange(5, dtype=np.int32), np.zeros(5, np.uint8))
    keys, weights = strategy.select()
    assert keys.tolist() == [0, 2, 4] and weights.tolist() == [2, 2, 2] and not strategy.from_scratch
    assert strategy.spec == "every-other" and repr(strategy) == "<EveryOther 'every-other'>"
    with pytest.raises(ValueError, match="one length"):
        strategy.inform([1, 2], [0])


def test_gdumb_settles_when_k_is_not_a_multiple_of_the_classes():
    strategy = GDumb(7, seed=0)
    keys, labels = np.arange(40), np.tile([0, 1], 20)
    strategy.inform(keys[:10], labels[:10])
    settled = strategy.select()[0]
    strategy.inform(keys[10:], labels[10:])  # more of the same two classes: nothing to balance
    assert strategy.select()[0].tolist() == settled.tolist() and strategy.class_counts() == {0: 4, 1: 3}
