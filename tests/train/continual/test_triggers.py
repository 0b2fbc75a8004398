"""train.continual.triggers: trigger points on timestamped streams, in any chunking, and the specs that build them."""
import numpy as np
import pytest

from train.continual.triggers import Drift, EveryN, EveryT, Trigger, parse_trigger

DAY = 86400


def run(trigger, times, labels, features=None, sizes=None):
    """All the points of a stream fed in chunks of ``sizes`` (one chunk when None), then finish()'s."""
    sizes = [len(times)] if sizes is None else sizes
    points, start = [], 0
    for size in sizes:
        chunk = slice(start, start + size)
        points += trigger.feed(times[chunk], labels[chunk], None if features is None else features[chunk])
        start += size
    assert start == len(times)
    return points, trigger.finish()


def random_sizes(n, rng):
    sizes = []
    while sum(sizes) < n:
        sizes.append(int(min(rng.integers(0, 40), n - sum(sizes))))
    return sizes


def split_mnist_like(tasks=5, per_task=100, classes_per_task=2, seed=0):
    """Times task*DAY + j*DAY/per_task, labels of the task's classes, features whose mean follows the class."""
    rng = np.random.default_rng(seed)
    times = np.concatenate([k * DAY + np.arange(per_task) * DAY / per_task for k in range(tasks)])
    labels = np.concatenate([k * classes_per_task + rng.integers(0, classes_per_task, per_task)
                             for k in range(tasks)]).astype(np.int64)
    features = (rng.normal(size=(len(labels), 6)) * 0.1 + labels[:, None]).astype(np.float32)
    return times, labels, features


def test_every_n_fires_at_multiples_and_finish_covers_the_rest():
    times, labels = np.arange(10.0), np.zeros(10, np.int64)
    assert run(EveryN(3), times, labels, sizes=[2, 5, 3]) == ([3, 6, 9], 10)
    assert run(EveryN(5), times, labels) == ([5, 10], None)
    assert run(EveryN(20), times, labels) == ([], 10)


def test_every_t_fires_at_each_task_boundary_of_split_mnist_like_times():
    times, labels, _ = split_mnist_like()
    assert run(EveryT(DAY), times, labels) == ([100, 200, 300, 400], 500)
    assert parse_trigger("time:86400").feed(times, labels) == [100, 200, 300, 400]


def test_every_t_windows_are_aligned_on_multiples_of_t_and_a_gap_fires_once():
    times = np.array([5.0, 9.0, 10.0, 19.9, 20.0, 75.0, 75.5])
    assert run(EveryT(10), times, np.zeros(7, np.int64)) == ([2, 4, 5], 7)
    # t0 = floor(5 / 7) * 7 = 0: the first window is [0, 7), so 9.0 starts a new one
    assert run(EveryT(7), times, np.zeros(7, np.int64)) == ([1, 3, 5], 7)


def test_every_t_on_equal_times_never_fires():
    assert run(EveryT(1), np.full(5, 3.0), np.zeros(5, np.int64)) == ([], 5)


@pytest.mark.parametrize("sizes", [[3, 2], [4, 1], [1, 1, 1, 1, 1]])
def test_times_going_backwards_name_the_position_and_the_times(sizes):
    times = np.array([0.0, 1.0, 2.0, 1.5, 3.0])
    trigger, start = EveryT(1), 0
    with pytest.raises(ValueError, match=r"times go backwards at stream position 3: 2\.0 then 1\.5"):
        for size in sizes:
            trigger.feed(times[start:start + size], np.zeros(size, np.int64))
            start += size


def test_a_time_that_is_not_finite_is_refused():
    with pytest.raises(ValueError, match=r"time at stream position 1 is nan"):
        EveryN(2).feed([0.0, np.nan], [0, 0])


def test_drift_fires_when_the_label_distribution_changes():
    rng = np.random.default_rng(0)
    labels = np.concatenate([rng.integers(0, 2, 1000), rng.integers(2, 4, 1000)])
    trigger = parse_trigger("drift:window=500,threshold=0.3")
    assert run(trigger, np.arange(2000.0), labels) == ([1500], 2000)


def test_drift_does_not_fire_on_a_stationary_stream():
    labels = np.random.default_rng(1).integers(0, 10, 5000)
    assert run(Drift(window=500, threshold=0.3), np.arange(5000.0), labels) == ([], 5000)


def test_drift_compares_with_the_window_before_the_last_trigger():
    # windows of 2: {0,0} ref, {1,1} fires (TV 1) and becomes the reference, {1,1} then does not
    labels = np.array([0, 0, 1, 1, 1, 1, 0, 0])
    assert run(Drift(window=2, threshold=0.5), np.arange(8.0), labels) == ([4, 8], None)
    # TV of {0: .5, 1: .5} against {0: .75, 1: .25} is exactly 0.25: not above a threshold of 0.25
    labels = np.array([0, 1, 0, 1, 0, 0, 0, 1])
    assert run(Drift(window=4, threshold=0.25), np.arange(8.0), labels) == ([], 8)
    assert run(Drift(window=4, threshold=0.24), np.arange(8.0), labels) == ([8], None)


def test_drift_on_features_bins_each_rows_mean():
    times, labels, features = split_mnist_like(tasks=2, per_task=400)
    trigger = parse_trigger("drift:window=200,threshold=0.3,on=feature,bins=4")
    assert run(trigger, times, labels, features) == ([600], 800)
    # the range comes from the first window's means (classes 0 and 1): task 2's means fall in the top bin
    stationary = np.random.default_rng(2).normal(size=(800, 3)).astype(np.float32)
    assert run(Drift(window=200, threshold=0.3, on="feature", bounds=(-3, 3)), times, labels, stationary) == ([], 800)


def test_drift_on_features_without_features_says_what_to_pass():
    with pytest.raises(ValueError, match="needs features; pass features= to feed"):
        Drift(window=2, threshold=0.1, on="feature").feed([0.0, 1.0], [0, 0])


SPECS = ["every:7", "time:86400", "time:30000", "drift:window=50,threshold=0.3",
         "drift:window=37,threshold=0.2,on=feature,bins=5", "drift:window=40,threshold=0.1,on=feature,bins=8,bounds=-1:9"]


@pytest.mark.parametrize("spec", SPECS)
def test_any_chunking_gives_the_same_points(spec):
    times, labels, features = split_mnist_like(per_task=150)
    whole = run(parse_trigger(spec), times, labels, features)
    assert whole[0]  # points to tell chunkings apart by
    rng = np.random.default_rng(0)
    for _ in range(20):
        assert run(parse_trigger(spec), times, labels, features, random_sizes(len(times), rng)) == whole


@pytest.mark.parametrize("spec", SPECS)
def test_points_increase_and_each_is_past_the_last(spec):
    times, labels, features = split_mnist_like(per_task=150)
    trigger = parse_trigger(spec)
    points, last = run(trigger, times, labels, features, random_sizes(len(times), np.random.default_rng(1)))
    everything = points + ([last] if last is not None else [])
    assert everything == sorted(set(everything)) and all(0 < p <= len(times) for p in everything)
    assert everything[-1] == len(times) == trigger.last_point == trigger.seen


@pytest.mark.parametrize("spec", SPECS)
def test_a_spec_parses_back_to_the_same_trigger(spec):
    trigger = parse_trigger(spec)
    assert trigger.spec == spec and parse_trigger(trigger.spec).spec == spec
    assert repr(trigger) == f"{type(trigger).__name__}({spec!r})"


def test_specs_are_written_canonically():
    assert parse_trigger(" every:5 ").spec == "every:5"
    assert parse_trigger("time:1.5").spec == "time:1.5"
    assert parse_trigger("drift:threshold=0.5,window=10,on=label").spec == "drift:window=10,threshold=0.5"
    assert Drift(window=3, threshold=0, on="feature", bounds=(0, 1)).spec == \
        "drift:window=3,threshold=0,on=feature,bins=10,bounds=0:1"


@pytest.mark.parametrize("spec, message", [
    ("every", "unknown trigger spec 'every'"),
    ("hourly:3", "unknown trigger spec 'hourly:3'"),
    ("every:0", "every:N needs a whole number N >= 1, got '0'"),
    ("every:2.5", "every:N needs a whole number N >= 1, got '2.5'"),
    ("every:", "every:N needs a whole number N >= 1, got ''"),
    ("time:-1", "EveryT: seconds must be a finite number > 0, got -1.0"),
    ("time:inf", "EveryT: seconds must be a finite number > 0, got inf"),
    ("time:daily", "time:SECONDS needs a number of seconds > 0, got 'daily'"),
    ("drift:window=5", "drift needs threshold="),
    ("drift:threshold=0.5", "drift needs window="),
    ("drift:window=2.5,threshold=0.1", "window=W needs a whole number W >= 1, got '2.5'"),
    ("drift:window=0,threshold=0.1", "window=W needs a whole number W >= 1, got '0'"),
    ("drift:window=5,threshold=x", "threshold=X needs a number X, 0 <= X < 1, got 'x'"),
    ("drift:window=5,threshold=1.5", "Drift: threshold must be in \\[0, 1\\) \\(a total variation distance\\), got 1.5"),
    ("drift:window=5,threshold=0.1,on=pixels", "on= needs label or feature, got 'pixels'"),
    ("drift:window=5,threshold=0.1,color=red", "'color=red' is not one of window=, threshold="),
    ("drift:window=5,threshold=0.1,window=6", "window= is given twice"),
    ("drift:window=5,threshold=0.1,bounds=0:1", "Drift: bounds are for on='feature' only; drop them or set on="),
    ("drift:window=5,threshold=0.1,bins=4", "Drift: bins are for on='feature' only; drop them or set on="),
    ("drift:window=5,threshold=0.1,on=label,bins=4", "Drift: bins are for on='feature' only"),
    ("drift:window=5,threshold=0.1,on=feature,bins=2.5", "bins=B needs a whole number B >= 1, got '2.5'"),
    ("drift:window=5,threshold=0.1,on=feature,bounds=3", "bounds=LO:HI needs two numbers, LO < HI, got '3'"),
    ("drift:window=5,threshold=0.1,on=feature,bounds=0:x", "bounds=LO:HI needs two numbers, LO < HI, got '0:x'"),
    ("drift:window=5,threshold=0.1,on=feature,bounds=3:1", "Drift: bounds must be finite with LO < HI"),
])
def test_a_bad_spec_says_what_is_wrong_and_lists_the_forms(spec, message):
    with pytest.raises(ValueError, match=message) as error:
        parse_trigger(spec)
    text = str(error.value)
    assert text.startswith(f"{'bad' if ':' in spec and 'hourly' not in spec else 'unknown'} trigger spec {spec!r}")
    assert "accepted forms: every:N (N >= 1), time:SECONDS (SECONDS > 0), drift:window=W,threshold=X" in text
    assert "int()" not in text and "float()" not in text and "could not convert" not in text


@pytest.mark.parametrize("kwargs, error, message", [
    ({"window": "x", "threshold": 0.1}, TypeError, r"Drift: window must be an integer >= 1, got 'x'"),
    ({"window": 2.5, "threshold": 0.1}, TypeError, r"Drift: window must be an integer >= 1, got 2.5"),
    ({"window": 5, "threshold": "x"}, TypeError,
     r"Drift: threshold must be a number in \[0, 1\) \(a total variation distance\), got 'x'"),
    ({"window": 5, "threshold": None}, TypeError, r"Drift: threshold must be a number .* got None"),
    ({"window": 5, "threshold": True}, TypeError, r"Drift: threshold must be a number .* got True"),
    ({"window": 5, "threshold": 0.1, "bins": 4}, ValueError, r"Drift: bins are for on='feature' only"),
    ({"window": 5, "threshold": 0.1, "on": "feature", "bins": "4"}, TypeError,
     r"Drift: bins must be an integer >= 1, got '4'"),
    ({"window": 5, "threshold": 0.1, "on": "feature", "bounds": 3}, TypeError,
     r"Drift: bounds must be two numbers \(LO, HI\), got 3"),
    ({"window": 5, "threshold": 0.1, "on": "feature", "bounds": (0, 1, 2)}, TypeError,
     r"Drift: bounds must be two numbers \(LO, HI\), got \(0, 1, 2\)"),
    ({"window": 5, "threshold": 0.1, "on": "feature", "bounds": ("a", 1)}, TypeError, r"Drift: bounds must be two numbers"),
])
def test_drift_options_of_the_wrong_type_are_refused_by_name(kwargs, error, message):
    with pytest.raises(error, match=f"^{message}"):
        Drift(**kwargs)


def test_drift_bins_default_to_10_on_features_and_are_none_on_labels():
    assert Drift(window=5, threshold=0.1, on="feature").bins == 10
    assert Drift(window=5, threshold=0.1, on="feature", bins=3).bins == 3
    assert Drift(window=5, threshold=0.1).bins is None
    # the spec says every option, so it parses back to the same trigger
    for trigger in (Drift(window=5, threshold=0.1, on="feature"), Drift(window=5, threshold=0.1, on="label")):
        assert parse_trigger(trigger.spec).spec == trigger.spec and parse_trigger(trigger.spec).bins == trigger.bins


@pytest.mark.parametrize("trigger, uses", [
    (EveryN(3), False), (EveryT(10), False), (Drift(window=5, threshold=0.1), False),
    (Drift(window=5, threshold=0.1, on="feature"), True),
    (parse_trigger("drift:window=5,threshold=0.1,on=feature,bins=4"), True),
])
def test_uses_features_says_whether_feed_reads_features(trigger, uses):
    assert trigger.uses_features is uses
    with pytest.raises(AttributeError):
        trigger.uses_features = not uses  # read-only


def test_a_trigger_that_does_not_use_features_gives_the_same_points_without_them():
    times, labels, features = split_mnist_like(tasks=2, per_task=400)
    for spec in ("every:150", "time:86400", "drift:window=200,threshold=0.3"):
        assert not parse_trigger(spec).uses_features
        assert run(parse_trigger(spec), times, labels) == run(parse_trigger(spec), times, labels, features)


def test_feeding_after_finish_is_refused_until_reset():
    trigger = EveryN(2)
    assert trigger.feed([0.0, 1.0, 2.0], [0, 0, 0]) == [2]
    assert (trigger.finish(), trigger.finish()) == (3, None)
    with pytest.raises(RuntimeError, match="was finished; call reset"):
        trigger.feed([3.0], [0])
    trigger.reset()
    assert trigger.feed([0.0, 1.0], [0, 0]) == [2] and trigger.finish() is None


def test_an_empty_chunk_changes_nothing():
    trigger = EveryT(10)
    assert trigger.feed([], []) == [] and trigger.feed([1.0, 12.0], [0, 0]) == [1]
    assert trigger.feed(np.empty(0), np.empty(0, np.int64)) == [] and trigger.finish() == 2


def test_a_user_defined_trigger_gets_the_checks_and_finish():
    class OnLabel(Trigger):
        """Fires before each entry of label 9."""

        @property
        def spec(self):
            return "on-label:9"

        def _points(self, times, labels, features, start):
            return [start + int(i) for i in np.flatnonzero(labels == 9) if start + i > self.last_point]

    trigger = OnLabel()
    assert trigger.feed([0.0, 1.0, 2.0], [1, 9, 2]) == [1] and trigger.feed([3.0], [9]) == [3]
    assert trigger.finish() == 4 and repr(trigger) == "OnLabel('on-label:9')"
    with pytest.raises(ValueError, match="one length"):
        OnLabel().feed([0.0], [1, 2])
    assert OnLabel().uses_features is False  # the base's: a trigger reads no features unless it says so


def test_a_chunk_refused_can_be_fed_again_once_mended():
    trigger = Drift(window=4, threshold=0.3, on="feature")
    times, labels = np.arange(8.0), np.zeros(8, np.int64)
    with pytest.raises(ValueError, match="needs features"):
        trigger.feed(times, labels)
    assert trigger.feed(times, labels, np.ones((8, 3))) == [] and trigger.seen == 8


def test_drift_at_a_change_inside_a_window_fires_once():
    # classes {0, 1} until 1250, {2, 3} until 2500, {4, 5} after: changes off the window edges
    labels = np.concatenate([np.tile([0, 1], 625), np.tile([2, 3], 625), np.tile([4, 5], 625)])
    trigger = Drift(window=500, threshold=0.3)
    assert trigger.feed(np.arange(len(labels), dtype=np.float64), labels) == [1500, 3000]
