"""train.continual.trigger_specs: how a spec writes numbers and reads its values, refusing in the spec's own words."""
import pytest

from train.continual.trigger_specs import FORMS, drift_options, read_value, spec_number


@pytest.mark.parametrize("x, written", [(86400.0, "86400"), (3, "3"), (0.3, "0.3"), (-1.5, "-1.5"), (1e-7, "1e-07")])
def test_spec_number_writes_whole_numbers_without_a_point_and_others_exactly(x, written):
    assert spec_number(x) == written and float(written) == x


@pytest.mark.parametrize("text, parse, value", [(" 7 ", int, 7), ("1_000", int, 1000), ("0.25", float, 0.25),
                                                 ("-3", float, -3.0), ("1e3", float, 1000.0)])
def test_read_value_reads_what_parse_reads(text, parse, value):
    assert read_value(text, parse, "x needs y") == value


@pytest.mark.parametrize("text, parse", [("2.5", int), ("0", int), ("-1", int), ("", int), ("ten", int),
                                         ("x", float), ("", float), ("1,5", float)])
def test_read_value_says_what_the_value_needs(text, parse):
    with pytest.raises(ValueError, match=rf"^every:N needs a whole number N >= 1, got {text!r}$"):
        read_value(text, parse, "every:N needs a whole number N >= 1")


def test_drift_options_reads_each_option_and_leaves_the_checks_to_drift():
    assert drift_options(" window = 50 , threshold=0.3,on=feature,bins=4,bounds=-2.5:-1") == {
        "window": 50, "threshold": 0.3, "on": "feature", "bins": 4, "bounds": (-2.5, -1.0)}
    assert drift_options("threshold=1.5,window=3,bounds=3:1") == {"threshold": 1.5, "window": 3, "bounds": (3.0, 1.0)}


@pytest.mark.parametrize("text, message", [
    ("window=5", r"drift needs threshold="),
    ("on=label", r"drift needs window= and threshold="),
    ("window=5,threshold=0.1,", r"'' is not one of window=, threshold=, on=, bins=, bounds="),
    ("window=5,threshold=0.1,seed=3", r"'seed=3' is not one of window="),
    ("window=5,threshold", r"'threshold' is not one of window="),
    ("window=5,threshold=0.1,threshold=0.2", r"threshold= is given twice"),
    ("window=5.0,threshold=0.1", r"window=W needs a whole number W >= 1, got '5.0'"),
    ("window=5,threshold=1/2", r"threshold=X needs a number X, 0 <= X < 1, got '1/2'"),
    ("window=5,threshold=0.1,on=Feature", r"on= needs label or feature, got 'Feature'"),
    ("window=5,threshold=0.1,bins=0", r"bins=B needs a whole number B >= 1, got '0'"),
    ("window=5,threshold=0.1,bounds=1", r"bounds=LO:HI needs two numbers, LO < HI, got '1'"),
    ("window=5,threshold=0.1,bounds=", r"bounds=LO:HI needs two numbers, LO < HI, got ''"),
])
def test_drift_options_refuses_in_the_specs_words(text, message):
    with pytest.raises(ValueError, match=f"^{message}"):
        drift_options(text)


def test_forms_list_every_trigger_and_when_bins_and_bounds_apply():
    assert FORMS.startswith("every:N (N >= 1), time:SECONDS (SECONDS > 0), drift:window=W,threshold=X")
    assert "bins and bounds with on=feature" in FORMS
