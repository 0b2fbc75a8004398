"""train.checkpoints.settings: a run's checkpoint and resume settings, checked when made."""
import pathlib

import pytest

from train.checkpoints.settings import Checkpoints, checkpoints_of


def test_checkpoints_keep_their_settings_and_show_what_differs_from_the_defaults():
    ck = Checkpoints(pathlib.Path("runs") / "a", every=50, config={"lr": 0.1})
    assert (ck.folder, ck.every, ck.resume, ck.overwrite, ck.config) == ("runs/a", 50, False, False, {"lr": 0.1})
    assert repr(ck) == "Checkpoints(folder='runs/a', every=50, resume=False, overwrite=False, config={'lr': 0.1})"
    assert ck == Checkpoints("runs/a", every=50, config={"lr": 0.1}) != Checkpoints("runs/a")
    assert Checkpoints("a", config={"x": 1, "y": 2}) == Checkpoints("a", config={"y": 2, "x": 1})
    with pytest.raises(AttributeError):
        ck.resume = True  # frozen: settings checked when made stay as checked


@pytest.mark.parametrize("kwargs, error, match", [
    ({"folder": ""}, TypeError, "folder must be a path"),
    ({"folder": 3}, TypeError, "folder must be a path"),
    ({"every": 0}, ValueError, "every must be"),
    ({"every": 2.5}, ValueError, "every must be"),
    ({"resume": "yes"}, TypeError, "resume must be True or False, got 'yes'"),
    ({"resume": True, "overwrite": True}, ValueError, "give one of them"),
    ({"config": [1]}, TypeError, "config must be a dict of your own settings"),
])
def test_checkpoints_refuse_bad_settings_when_made(kwargs, error, match):
    with pytest.raises(error, match=match):
        Checkpoints(**{"folder": "runs/a", **kwargs})


def test_checkpoints_of_takes_an_object_a_path_or_none():
    ck = Checkpoints("runs/a")
    assert checkpoints_of(ck, "train") is ck and checkpoints_of(None, "train") is None
    assert checkpoints_of(pathlib.Path("runs/b"), "train") == Checkpoints("runs/b")
    with pytest.raises(TypeError, match="train_steps: checkpoints must be"):
        checkpoints_of({"folder": "runs/a"}, "train_steps")
