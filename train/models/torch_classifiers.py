"""Torch classifiers for the train driver and continual pipelines: an MLP and a small CNN, trained with Adam.

They keep readerkit's model protocol (``train.models.classifiers``): a batch
is ``{"image", "label", optional "weight"}`` of numpy arrays, ``step`` and
``evaluate`` return plain-number metrics (``loss`` and ``accuracy`` weighted
means, ``count`` the entries of weight > 0, ``weight`` their total), and
``state_dict()`` gives numpy arrays (parameters, Adam's moments and step
count), so a pipeline store keeps it like a numpy model's. The initial
weights are a function of ``seed`` alone: every rank of a job builds the same
model.

Under a launcher with several processes (torchrun's ``WORLD_SIZE`` > 1) the
module is wrapped in ``DistributedDataParallel`` over the process group,
which the caller initialises first (gloo on CPU; ``train.continual.ranks``
does). Each step all-reduces the global weight of the batch before the
backward pass and scales its local loss by it, so the gradient DDP averages
is the gradient of the weighted mean loss over the *global* batch: N ranks
with batches of B/N train as one process with batches of B (up to float
summation order), padding of weight 0 included. The metrics are global too.

torch is imported when a model is built, not with this module; without it
the error says ``pip install torch==2.13.0``.

>>> torch = __import__("pytest").importorskip("torch")
>>> model = TorchMLP(2, hidden=(16,), n_classes=2, lr=0.05, seed=0)
>>> x = np.random.default_rng(1).normal(size=(256, 2)).astype(np.float32)
>>> batch = {"image": x, "label": (x[:, 0] > x[:, 1]).astype(np.int64)}
>>> for _ in range(100):
...     metrics = model.step(batch)
>>> model.evaluate(batch)["accuracy"] > 0.95
True
"""
from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from readers.errors import BadValue
from train.models.classifiers import LabelRangeError

__all__ = ["TorchClassifier", "TorchCNN", "TorchMLP", "is_torch_model", "require_torch"]

_EMPTY = {"loss": 0.0, "accuracy": 0.0, "count": 0, "weight": 0.0}


def require_torch() -> Any:
    """The ``torch`` module, or a ModuleNotFoundError saying how to install it.

    >>> torch = __import__("pytest").importorskip("torch")
    >>> require_torch().__name__
    'torch'
    """
    try:
        import torch
    except ImportError:
        raise ModuleNotFoundError("the torch models (torch-mlp, torch-cnn) need PyTorch, which is not installed; "
                                  "install it with pip install torch==2.13.0 (or pip install readerkit[torch])"
                                  ) from None
    return torch


def is_torch_model(model: Any) -> bool:
    """Whether ``model`` (an instance or a class) is one of these torch models, which train under torchrun.

    >>> from train.models.classifiers import MLP
    >>> is_torch_model(TorchMLP), is_torch_model(MLP(2, (4,), 2))
    (True, False)
    """
    return isinstance(model, TorchClassifier) or isinstance(model, type) and issubclass(model, TorchClassifier)


def _world() -> int:
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


class TorchClassifier:
    """What the torch models share: checks, the weighted step, DDP, and numpy states. Subclasses build
    ``self._net(torch)`` and say ``settings()``."""

    inputs = ("image", "label")
    optional_inputs = ("weight",)

    def __init__(self, n_inputs: int, n_classes: int, lr: float, seed: int):
        for name, value, low in (("n_inputs", n_inputs, 1), ("n_classes", n_classes, 2), ("seed", seed, 0)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise BadValue(f"{type(self).__name__}: {name} must be an int >= {low}, got {value!r}")
        if isinstance(lr, bool) or not (isinstance(lr, numbers.Real) and math.isfinite(lr) and lr > 0):
            raise BadValue(f"{type(self).__name__}: lr must be a positive number, got {lr!r}")
        self.n_inputs, self.n_classes, self.lr, self.seed = int(n_inputs), int(n_classes), float(lr), int(seed)
        torch = self._torch = require_torch()
        with torch.random.fork_rng(devices=[]):  # seeded here, the caller's generator left as it was
            torch.manual_seed(self.seed)
            self.module = self._net(torch)
        self.optimizer = torch.optim.Adam(self.module.parameters(), lr=self.lr)
        self._names = [name for name, _ in self.module.named_parameters()]
        self._ddp = None
        if _world() > 1:
            import torch.distributed as dist

            if not dist.is_initialized():
                raise BadValue(f"{type(self).__name__}: WORLD_SIZE is {_world()} but torch.distributed has no process "
                               "group: call torch.distributed.init_process_group('gloo') before building the model")
            self._ddp = torch.nn.parallel.DistributedDataParallel(self.module)

    def _net(self, torch: Any) -> Any:
        raise NotImplementedError

    def settings(self) -> dict[str, Any]:
        """What the model was built with, as JSON: the keyword arguments that build it again."""
        raise NotImplementedError

    # -- batches ------------------------------------------------------------------------
    def _prepare(self, batch: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Images (float32, flat), labels and weights (ones when none) of the entries of weight > 0."""
        for name in self.inputs:
            if name not in batch:
                raise BadValue(f"the batch has no {name!r} input, only {sorted(batch)!r}; fix the mapping so it "
                               f"names the model's inputs {list(self.inputs)!r} (and optionally 'weight')")
        x, y = np.asarray(batch["image"]), np.asarray(batch["label"])
        if x.ndim < 1 or x.dtype.kind not in "fiub" or (len(x) and math.prod(x.shape[1:]) != self.n_inputs):
            raise BadValue(f"'image' must be numbers of shape (batch, {self.n_inputs}), got {x.dtype} of shape "
                           f"{x.shape}; map the column that holds the images to 'image'")
        x = x.reshape(len(x), self.n_inputs).astype(np.float32, copy=False)
        if y.shape != (len(x),) or y.dtype.kind not in "iu":
            raise BadValue(f"'label' must be integers of shape ({len(x)},) to match the images, got {y.dtype} "
                           f"of shape {y.shape}")
        w = np.ones(len(y), np.float32) if batch.get("weight") is None else np.asarray(batch["weight"], np.float32)
        if w.shape != y.shape:
            raise BadValue(f"'weight' must have shape {y.shape} to match the labels, got {w.shape}")
        if not (np.isfinite(w).all() and (w >= 0).all()):
            raise BadValue(f"weights must be finite and >= 0, got {float(w[~(np.isfinite(w) & (w >= 0))][0])}")
        keep = w > 0  # padding is dropped, not multiplied by 0: garbage in it stays out
        bad = keep & ((y < 0) | (y >= self.n_classes))
        if bad.any():
            i, n = int(bad.argmax()), self.n_classes
            raise LabelRangeError(f"label {int(y[i])} (entry {i} of the minibatch) is out of range for {n} classes "
                                  f"(0..{n - 1}); build the model with n_classes greater than the largest label",
                                  int(y[i]), n)
        return x[keep], y[keep].astype(np.int64), w[keep]

    def _losses(self, net: Any, x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[Any, Any, Any]:
        torch = self._torch
        logits = net(torch.from_numpy(np.ascontiguousarray(x)))
        labels = torch.from_numpy(y)
        ce = torch.nn.functional.cross_entropy(logits, labels, reduction="none")
        weights = torch.from_numpy(w)
        return ce, weights, (logits.argmax(dim=1) == labels).to(weights.dtype)

    def _all_reduce(self, values: list[float]) -> list[float]:
        """Sums over the ranks (float64), or the values themselves in one process."""
        if self._ddp is None:
            return values
        import torch.distributed as dist

        tensor = self._torch.tensor(values, dtype=self._torch.float64)
        dist.all_reduce(tensor)
        return tensor.tolist()

    def step(self, batch: Mapping[str, Any]) -> dict[str, float | int]:
        """Train on one batch (this rank's part of the global one); metrics of the global batch, before the
        update. A global batch without positive weight changes nothing, as with the numpy models."""
        x, y, w = self._prepare(batch)
        total, = self._all_reduce([float(w.sum(dtype=np.float64))])
        if total == 0:  # every rank sees it: all skip alike, no collective left waiting
            return dict(_EMPTY)
        self.module.train()
        ce, weights, correct = self._losses(self._ddp or self.module, x, y, w)
        # DDP averages the ranks' gradients: scale by the ranks so the average is the global weighted mean's
        loss = (weights * ce).sum() * (_world() if self._ddp is not None else 1) / total
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        ce = ce.detach()
        sums = self._all_reduce([float((weights * ce).sum()), float((weights * correct).sum()), float(len(y))])
        return {"loss": sums[0] / total, "accuracy": sums[1] / total, "count": int(sums[2]), "weight": total}

    def evaluate(self, batch: Mapping[str, Any]) -> dict[str, float | int]:
        """The metrics of one batch (this process's), without training.

        >>> torch = __import__("pytest").importorskip("torch")
        >>> TorchMLP(2, (4,), 2).evaluate({"image": np.zeros((4, 2)), "label": np.array([0, 1, 1, 0])})["count"]
        4
        """
        x, y, w = self._prepare(batch)
        total = float(w.sum(dtype=np.float64))
        if total == 0:
            return dict(_EMPTY)
        self.module.eval()
        with self._torch.no_grad():
            ce, weights, correct = self._losses(self.module, x, y, w)
        return {"loss": float((weights * ce).sum()) / total, "accuracy": float((weights * correct).sum()) / total,
                "count": len(y), "weight": total}

    def predict(self, images: np.ndarray) -> np.ndarray:
        """The most likely class of each image, as int64.

        >>> torch = __import__("pytest").importorskip("torch")
        >>> TorchMLP(3, (4,), 2).predict(np.zeros((2, 3))).shape
        (2,)
        """
        x = np.asarray(images, np.float32).reshape(len(images), self.n_inputs)
        self.module.eval()
        with self._torch.no_grad():
            return self.module(self._torch.from_numpy(x)).argmax(dim=1).numpy().astype(np.int64)

    # -- states -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Parameters (``param.<name>``), Adam's moments (``adam_m.<name>``, ``adam_v.<name>``) and its ``step``,
        as numpy arrays and an int: what a checkpoint or the pipeline store keeps.

        >>> torch = __import__("pytest").importorskip("torch")
        >>> state = TorchMLP(2, (3,), 2).state_dict()
        >>> sorted(state)[:3], state["step"], state["param.0.weight"].shape
        (['adam_m.0.bias', 'adam_m.0.weight', 'adam_m.2.bias'], 0, (3, 2))
        """
        state: dict[str, Any] = {}
        step = 0
        for name, param in zip(self._names, self.module.parameters()):
            state[f"param.{name}"] = param.detach().numpy().copy()
            moments = self.optimizer.state.get(param, {})
            for key, moment in (("adam_m", "exp_avg"), ("adam_v", "exp_avg_sq")):
                value = moments.get(moment)
                state[f"{key}.{name}"] = (np.zeros_like(state[f"param.{name}"]) if value is None
                                          else value.detach().numpy().copy())
            if "step" in moments:
                step = int(moments["step"])
        state["step"] = step
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Put back what ``state_dict`` gave (a checkpoint's or the store's copy): parameters and Adam's state.

        >>> torch = __import__("pytest").importorskip("torch")
        >>> a, b = TorchMLP(2, (3,), 2, seed=0), TorchMLP(2, (3,), 2, seed=1)
        >>> b.load_state_dict(a.state_dict())
        >>> bool((b.state_dict()["param.0.weight"] == a.state_dict()["param.0.weight"]).all())
        True
        """
        torch = self._torch
        missing = [f"param.{name}" for name in self._names if f"param.{name}" not in state]
        if missing or "step" not in state:
            raise KeyError(f"{type(self).__name__}: the state has no {(missing or ['step'])[0]!r}; give a state "
                           "this model's state_dict() made")
        step = int(np.asarray(state["step"]))
        with torch.no_grad():
            for name, param in zip(self._names, self.module.parameters()):
                value = np.asarray(state[f"param.{name}"], np.float32)
                if value.shape != tuple(param.shape):
                    raise ValueError(f"{type(self).__name__}: {name} has shape {tuple(param.shape)}, the state's "
                                     f"{value.shape}")
                param.copy_(torch.from_numpy(value.copy()))
                if step:
                    self.optimizer.state[param] = {
                        "step": torch.tensor(float(step)),
                        "exp_avg": torch.from_numpy(np.array(state[f"adam_m.{name}"], np.float32)),
                        "exp_avg_sq": torch.from_numpy(np.array(state[f"adam_v.{name}"], np.float32))}
                else:
                    self.optimizer.state.pop(param, None)

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={tuple(v) if isinstance(v, list) else v!r}" for k, v in self.settings().items())
        return f"{type(self).__name__}({shown})"


class TorchMLP(TorchClassifier):
    """A multilayer perceptron in torch: ReLU hidden layers of the given sizes, then a softmax.

    >>> torch = __import__("pytest").importorskip("torch")
    >>> TorchMLP(hidden=(64,))
    TorchMLP(n_inputs=784, hidden=(64,), n_classes=10, lr=0.001, seed=0)
    """

    def __init__(self, n_inputs: int = 784, hidden: Sequence[int] | int = (256,), n_classes: int = 10, *,
                 lr: float = 1e-3, seed: int = 0):
        self.hidden = (int(hidden),) if isinstance(hidden, (int, np.integer)) else tuple(int(h) for h in hidden)
        if not all(h >= 1 for h in self.hidden):
            raise BadValue(f"TorchMLP: hidden sizes must be positive integers, got {hidden!r}")
        super().__init__(n_inputs, n_classes, lr, seed)

    def _net(self, torch: Any) -> Any:
        layers, width = [], self.n_inputs
        for size in self.hidden:
            layers += [torch.nn.Linear(width, size), torch.nn.ReLU()]
            width = size
        return torch.nn.Sequential(*layers, torch.nn.Linear(width, self.n_classes))

    def settings(self) -> dict[str, Any]:
        """The keyword arguments that build this model again, as JSON (a resume compares them).

        >>> torch = __import__("pytest").importorskip("torch")
        >>> TorchMLP(4, (8,), 3, lr=0.01).settings()
        {'n_inputs': 4, 'hidden': [8], 'n_classes': 3, 'lr': 0.01, 'seed': 0}
        """
        return {"n_inputs": self.n_inputs, "hidden": list(self.hidden), "n_classes": self.n_classes, "lr": self.lr,
                "seed": self.seed}


class TorchCNN(TorchClassifier):
    """A small convolutional net for square images (MNIST's 28x28): two 3x3 convolutions of ``channels``
    with ReLU and 2x2 max-pooling, then a linear softmax layer. ``n_inputs`` must be a square.

    >>> torch = __import__("pytest").importorskip("torch")
    >>> TorchCNN(channels=(4, 8))
    TorchCNN(n_inputs=784, channels=(4, 8), n_classes=10, lr=0.001, seed=0)
    """

    def __init__(self, n_inputs: int = 784, channels: Sequence[int] = (8, 16), n_classes: int = 10, *,
                 lr: float = 1e-3, seed: int = 0):
        side = math.isqrt(int(n_inputs)) if isinstance(n_inputs, (int, np.integer)) and n_inputs > 0 else 0
        if side * side != n_inputs or side < 4:
            raise BadValue(f"TorchCNN: n_inputs must be the pixels of a square image of side >= 4 (784 for 28x28), "
                           f"got {n_inputs!r}; use torch-mlp for other inputs")
        self.side, self.channels = side, tuple(int(c) for c in channels)
        if len(self.channels) != 2 or min(self.channels) < 1:
            raise BadValue(f"TorchCNN: channels must be two positive integers, got {channels!r}")
        super().__init__(n_inputs, n_classes, lr, seed)

    def _net(self, torch: Any) -> Any:
        nn, (a, b), side = torch.nn, self.channels, self.side // 4
        return nn.Sequential(nn.Unflatten(1, (1, self.side, self.side)), nn.Conv2d(1, a, 3, padding=1),
                                   nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(a, b, 3, padding=1), nn.ReLU(),
                                   nn.MaxPool2d(2), nn.Flatten(), nn.Linear(b * side * side, self.n_classes))

    def settings(self) -> dict[str, Any]:
        """The keyword arguments that build this model again, as JSON (a resume compares them).

        >>> torch = __import__("pytest").importorskip("torch")
        >>> TorchCNN(16, (2, 2), 3).settings()
        {'n_inputs': 16, 'channels': [2, 2], 'n_classes': 3, 'lr': 0.001, 'seed': 0}
        """
        return {"n_inputs": self.n_inputs, "channels": list(self.channels), "n_classes": self.n_classes,
                "lr": self.lr, "seed": self.seed}

