"""train() and ``cli.py train`` choose numpy's BLAS threads (issue 27, item 7: a run took 16-29 s under load with
a thread per core, 8.5 s steadily with one), for readerkit's built-in models only by default (review of issue 27,
finding 7: every model, a user's own with wide layers too, was made single-threaded)."""
import sys

import numpy as np
import pytest
from click.testing import CliRunner

import cli
import readers
import train
import train.blas
from readers.errors import BadValue
from readers.tokenized.schedule import BatchSchedule
from train.models.classifiers import SoftmaxRegression
from train.models.language import NextTokenMLP

threadpoolctl = pytest.importorskip("threadpoolctl")


def blas_now() -> int:
    return max(pool["num_threads"] for pool in threadpoolctl.threadpool_info() if pool["user_api"] == "blas")


class ThreadsSeen(SoftmaxRegression):
    """A model that notes the BLAS threads each step runs with."""

    seen: list[int] = []

    def step(self, batch):
        ThreadsSeen.seen.append(blas_now())
        return super().step(batch)


class OwnModel:
    """A user's own model, not one of readerkit's: it notes the BLAS threads each step runs with."""

    seen: list[int] = []

    def __init__(self, n_inputs=3, n_classes=2, **options):
        self.weights = np.zeros((n_inputs, n_classes))

    def step(self, batch):
        OwnModel.seen.append(blas_now())
        return {"loss": float(np.abs(batch["image"] @ self.weights).sum())}

    def evaluate(self, batch):
        return {"loss": 0.0}

    def state_dict(self):
        return {"weights": self.weights}

    def load_state_dict(self, state):
        self.weights = state["weights"]


def data():
    x = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    return readers.from_arrays(x, (x[:, 0] > 0).astype(np.int64))


@pytest.mark.parametrize("given, expected", [({}, 1), ({"blas_threads": 2}, 2), ({"blas_threads": None}, 3)])
def test_train_runs_its_steps_with_the_blas_threads_chosen_and_puts_the_process_setting_back(given, expected):
    ThreadsSeen.seen = []
    with threadpoolctl.threadpool_limits(3, user_api="blas"):  # the process's own setting, e.g. a thread per core
        train.train(data(), ["image", "label"], 16, 1, model=ThreadsSeen(3, 2), **given)
        assert blas_now() == 3
    assert ThreadsSeen.seen == [expected] * 4


@pytest.mark.parametrize("given, expected", [({}, 3), ({"blas_threads": "auto"}, 3), ({"blas_threads": 2}, 2),
                                             ({"blas_threads": None}, 3)])
def test_train_leaves_a_users_own_model_the_librarys_blas_threads_unless_told(given, expected):
    """Regression (review of issue 27, finding 7): the default of 1 thread held for every model, not only the
    built-in ones, so a user's own model with wide layers silently ran single-threaded BLAS."""
    OwnModel.seen = []
    with threadpoolctl.threadpool_limits(3, user_api="blas"):  # the process's own setting
        train.train(data(), ["image", "label"], 16, 1, model=OwnModel(), **given)
        assert blas_now() == 3
    assert OwnModel.seen == [expected] * 4


def test_train_gives_a_built_in_model_named_or_given_one_blas_thread_by_default():
    ThreadsSeen.seen = []
    with threadpoolctl.threadpool_limits(3, user_api="blas"):
        train.train(data(), ["image", "label"], 16, 1, model=SoftmaxRegression(3, 2))
        train.train(data(), ["image", "label"], 16, 1, model=ThreadsSeen(3, 2))  # a subclass is still built in
    assert train.blas.threads_for("auto", SoftmaxRegression(3, 2)) == 1 and ThreadsSeen.seen == [1] * 4


@pytest.mark.parametrize("count", [0, -1, 1.5, True, "2", "Auto", "library"])
def test_train_refuses_a_blas_thread_count_that_is_not_a_whole_number_from_1(count):
    with pytest.raises(BadValue, match=r'^train: blas_threads=.*: give a number of threads from 1, "auto" \(one for '
                                       r"readerkit's built-in models, .*\) or None"):
        train.train(data(), ["image", "label"], 16, 1, model=SoftmaxRegression(3, 2), blas_threads=count)


def test_without_threadpoolctl_the_library_default_stays_with_one_warning_naming_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "threadpoolctl", None)  # an import of it fails, as when it is not installed
    monkeypatch.setattr(train.blas, "_warned", [])
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    with train.blas.limit_blas(1):  # the environment says so already: nothing to warn of
        pass
    with pytest.warns(RuntimeWarning, match=r"^BLAS threads left at the library's default, not 2: pip install "
                                            r"threadpoolctl \(or set OPENBLAS_NUM_THREADS=2 before starting\)"):
        with train.blas.limit_blas(2):
            pass
    with train.blas.limit_blas(2):  # once a process
        pass


@pytest.mark.parametrize("model, option, expected", [
    ("ThreadsSeen", [], 1), ("ThreadsSeen", ["--blas-threads", "auto"], 1), ("ThreadsSeen", ["--blas-threads", "2"], 2),
    ("ThreadsSeen", ["--blas-threads", "library"], 3), ("OwnModel", [], 3), ("OwnModel", ["--blas-threads", "2"], 2),
])
def test_cli_train_blas_threads_option_reaches_the_models_steps(model, option, expected):
    seen = ThreadsSeen.seen = OwnModel.seen = []
    with threadpoolctl.threadpool_limits(3, user_api="blas"):
        result = CliRunner().invoke(cli.main, ["train", "--reader", f"{__name__}:data", "--model",
                                               f"{__name__}:{model}", "--passes", "1", "--batch-size", "32",
                                               *option])
    assert result.exit_code == 0, result.output
    assert seen == [expected] * 2


@pytest.mark.parametrize("value", ["0", "-1", "1.5", "all"])
def test_cli_train_refuses_a_blas_threads_value_it_does_not_know(value):
    result = CliRunner().invoke(cli.main, ["train", "--blas-threads", value])
    assert result.exit_code == 2
    assert f"Invalid value for '--blas-threads': {value!r}: give auto (one thread for the built-in models, the " \
           "library's own for others), library (the BLAS library's own setting) or a number of threads from 1" \
           in result.output


class TokenThreadsSeen(NextTokenMLP):
    seen: list[int] = []

    def step(self, batch):
        TokenThreadsSeen.seen.append(blas_now())
        return super().step(batch)


@pytest.mark.parametrize("given, expected", [({}, 1), ({"blas_threads": 2}, 2), ({"blas_threads": None}, 3)])
def test_train_steps_runs_its_steps_with_the_blas_threads_chosen(given, expected):
    text = np.frombuffer(b"abcabcabc" * 30, np.uint8).astype(np.int32)
    windows = readers.np_array(np.lib.stride_tricks.sliding_window_view(text, 9)[::8].copy())
    TokenThreadsSeen.seen = []
    with threadpoolctl.threadpool_limits(3, user_api="blas"):
        train.train_steps(windows, model=TokenThreadsSeen(256, context=2, embed=8, hidden=16), steps=3,
                          schedule=BatchSchedule(4, 4, 0, 8), **given)
        assert blas_now() == 3
    assert TokenThreadsSeen.seen == [expected] * 3


def test_train_steps_leaves_a_users_own_model_the_librarys_blas_threads_by_default():
    """Regression (review of issue 27, finding 7), for train_steps."""
    text = np.frombuffer(b"abcabcabc" * 30, np.uint8).astype(np.int32)
    windows = readers.np_array(np.lib.stride_tricks.sliding_window_view(text, 9)[::8].copy())
    seen = []

    class Own:
        def step(self, batch):
            seen.append(blas_now())
            return {"loss": 1.0, "tokens": int(batch["tokens"].size)}

    with threadpoolctl.threadpool_limits(3, user_api="blas"):
        train.train_steps(windows, model=Own(), steps=3, schedule=BatchSchedule(4, 4, 0, 8))
    assert seen == [3] * 3
