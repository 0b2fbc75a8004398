"""The torch classifiers (issue 31, item 3): readerkit's model protocol, numpy states, seeded init, weights."""
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from readers.continual.schema import decode_state, encode_state  # noqa: E402
from readers.errors import BadValue  # noqa: E402
from readers.plugins.registry import find_model  # noqa: E402
from train.models.classifiers import LabelRangeError  # noqa: E402
from train.models.torch_classifiers import (  # noqa: E402
    TorchCNN,
    TorchMLP,
    is_torch_model,
    require_torch,
)


def _batch(n=32, dim=5, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dim)).astype(np.float32)
    return {"image": x, "label": (x[:, 0] > 0).astype(np.int64)}


def _params(model):
    return {k: v for k, v in model.state_dict().items() if k.startswith("param.")}


@pytest.mark.parametrize("name,cls", [("torch-mlp", TorchMLP), ("torch-cnn", TorchCNN)])
def test_torch_models_are_registered(name, cls):
    assert find_model(name) is cls and is_torch_model(cls)


def test_seeded_init_is_the_same_everywhere_and_leaves_the_global_generator():
    before = torch.random.get_rng_state()
    a, b = TorchMLP(5, (8,), 2, seed=3), TorchMLP(**TorchMLP(5, (8,), 2, seed=3).settings())
    assert torch.equal(torch.random.get_rng_state(), before)
    for name, value in _params(a).items():
        np.testing.assert_array_equal(value, _params(b)[name])
    assert not np.array_equal(_params(a)["param.0.weight"], _params(TorchMLP(5, (8,), 2, seed=4))["param.0.weight"])


def test_weight_zero_entries_change_nothing_even_with_garbage():
    batch = _batch()
    padded = {"image": np.concatenate([batch["image"], np.full((3, 5), np.nan, np.float32)]),
              "label": np.concatenate([batch["label"], [99, -1, 7]]),
              "weight": np.concatenate([np.ones(32, np.float32), np.zeros(3, np.float32)])}
    a, b = TorchMLP(5, (8,), 2, seed=0), TorchMLP(5, (8,), 2, seed=0)
    assert a.step(batch) == b.step(padded)
    for name, value in _params(a).items():
        np.testing.assert_array_equal(value, _params(b)[name])


def test_weights_weight_the_loss_as_repeated_entries():
    batch = _batch(8)
    doubled = {"image": np.concatenate([batch["image"], batch["image"][:1]]),
               "label": np.concatenate([batch["label"], batch["label"][:1]])}
    weighted = {**batch, "weight": np.array([2.0] + [1.0] * 7, np.float32)}
    a, b = TorchMLP(5, (8,), 2, seed=0), TorchMLP(5, (8,), 2, seed=0)
    metrics_a, metrics_b = a.step(doubled), b.step(weighted)
    assert metrics_b["weight"] == 9.0 and metrics_b["count"] == 8
    assert metrics_a["loss"] == pytest.approx(metrics_b["loss"], rel=1e-6)
    for name, value in _params(a).items():
        np.testing.assert_allclose(value, _params(b)[name], rtol=1e-5, atol=1e-7)


def test_a_batch_without_weight_trains_nothing():
    model = TorchMLP(5, (8,), 2)
    batch = {**_batch(4), "weight": np.zeros(4, np.float32)}
    assert model.step(batch) == {"loss": 0.0, "accuracy": 0.0, "count": 0, "weight": 0.0}
    assert model.state_dict()["step"] == 0


def test_state_goes_through_the_store_and_training_goes_on_alike():
    batch = _batch()
    a = TorchMLP(5, (8,), 2, lr=0.05, seed=0)
    for _ in range(3):
        a.step(batch)
    state = decode_state(*encode_state(a.state_dict()), "the model")
    assert state["step"] == 3
    b = TorchMLP(5, (8,), 2, lr=0.05, seed=9)
    b.load_state_dict(state)
    assert a.step(batch) == b.step(batch)  # Adam's moments and step count came along
    for name, value in _params(a).items():
        np.testing.assert_array_equal(value, _params(b)[name])


def test_training_learns():
    model, batch = TorchMLP(5, (16,), 2, lr=0.05, seed=0), _batch(256)
    for _ in range(60):
        model.step(batch)
    assert model.evaluate(batch)["accuracy"] > 0.95
    assert model.predict(batch["image"][:3]).dtype == np.int64


def test_cnn_trains_on_square_images_and_refuses_others():
    model = TorchCNN(64, (2, 4), 3, seed=0)
    x = np.random.default_rng(0).random((6, 8, 8), np.float32)
    assert model.step({"image": x, "label": np.array([0, 1, 2, 0, 1, 2])})["count"] == 6
    with pytest.raises(BadValue, match="n_inputs must be the pixels of a square image of side >= 4"):
        TorchCNN(60)


def test_label_out_of_range_names_the_label():
    with pytest.raises(LabelRangeError, match="label 5 .entry 1 of the minibatch. is out of range for 2 classes"):
        TorchMLP(2, (4,), 2).step({"image": np.zeros((2, 2)), "label": np.array([0, 5])})


def test_a_launcher_without_process_group_is_refused(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(BadValue, match=r"WORLD_SIZE is 2 but torch.distributed has no process group: call "
                                       r"torch.distributed.init_process_group\('gloo'\)"):
        TorchMLP(2, (4,), 2)


def test_missing_torch_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install torch==2\.13\.0"):
        require_torch()
