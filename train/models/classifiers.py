"""Built-in models for the train driver: softmax regression and an MLP, in pure numpy.

A model is any object with ``step(batch) -> metrics`` (one training step) and
``evaluate(batch) -> metrics`` (no update), plus ``state_dict()`` and
``load_state_dict(state)`` for checkpoints. A batch is a dict of arrays:
``"image"`` (batch, n_inputs), ``"label"`` int (batch,) and optionally
``"weight"`` (batch,), the per-entry weight of the loss. Metrics are plain
Python numbers: ``loss`` and ``accuracy`` are weighted means over the batch,
``count`` the number of entries with weight > 0 and ``weight`` their total, so
a driver aggregates a pass as ``sum(loss * weight) / sum(weight)``.

Everything is float32: ReLU hidden layers with He initialisation, softmax
cross-entropy through log-sum-exp, and Adam with bias correction. Images of
any numeric dtype are converted to float32 as they are, not rescaled: scale
uint8 pixels in the reader.

>>> model = MLP(2, hidden=(16,), n_classes=2, lr=0.05, seed=0)
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
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from readers.errors import BadValue
from train.models.adam import AdamModel

__all__ = ["LabelRangeError", "MLP", "SoftmaxRegression", "softmax_cross_entropy"]

_EMPTY = {"loss": 0.0, "accuracy": 0.0, "count": 0, "weight": 0.0}


class LabelRangeError(BadValue):
    """A label outside 0..n_classes-1 of the model: ``label`` is the value, ``n_classes`` the model's count.

    >>> try:
    ...     SoftmaxRegression(2, 3).step({"image": np.zeros((2, 2)), "label": np.array([0, 7])})
    ... except LabelRangeError as exc:
    ...     print(exc.label, exc.n_classes)
    7 3
    """

    def __init__(self, message: str, label: int, n_classes: int):
        super().__init__(message)
        self.label, self.n_classes = label, n_classes

    def __reduce__(self) -> tuple:  # the default passes only the message back to __init__
        return type(self), (str(self), self.label, self.n_classes)


def _forward(params: Sequence[np.ndarray], x: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Logits and the input of every layer; params is [W0, b0, W1, b1, ...]."""
    layer_inputs, h = [], x
    last = len(params) // 2 - 1
    for k in range(last + 1):
        layer_inputs.append(h)
        h = h @ params[2 * k]
        h += params[2 * k + 1]
        if k < last:
            np.maximum(h, 0, out=h)
    return h, layer_inputs


def softmax_cross_entropy(logits: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-row cross-entropy, correctness and softmax of ``logits`` against labels ``y``; overwrites
    ``logits`` with the softmax. The loss of every numpy model here (the language model's too).

    >>> ce, correct, p = softmax_cross_entropy(np.array([[0.0, 0.0], [5.0, 0.0]]), np.array([1, 0]))
    >>> ce.round(3).tolist(), correct.tolist(), p[0].tolist()
    ([0.693, 0.007], [False, True], [0.5, 0.5])
    """
    rows = np.arange(len(y))
    z = logits
    z -= z.max(axis=1, keepdims=True)  # log-sum-exp: exp never overflows and the sum is >= 1
    z_label = z[rows, y]
    np.exp(z, out=z)
    total = z.sum(axis=1)
    z /= total[:, None]
    return np.log(total) - z_label, z.argmax(axis=1) == y, z


def _loss_and_gradients(params: Sequence[np.ndarray], x: np.ndarray, y: np.ndarray,
                        scale: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Cross-entropy, correctness and the gradient of ``sum(scale * ce)`` for each parameter.

    Works in the dtype of ``params`` (a float64 copy makes a precise gradient check).
    """
    logits, layer_inputs = _forward(params, x)
    ce, correct, g = softmax_cross_entropy(logits, y)
    g[np.arange(len(y)), y] -= 1  # the softmax buffer becomes d(ce)/d(logits) in place
    g *= scale[:, None]
    grads: list[np.ndarray] = [np.empty(0)] * len(params)
    for k in range(len(params) // 2 - 1, -1, -1):
        h = layer_inputs[k]
        grads[2 * k], grads[2 * k + 1] = h.T @ g, g.sum(axis=0)
        if k:
            g = g @ params[2 * k].T
            g *= h > 0  # ReLU: h is the previous layer's output, zero where it was clipped
    return ce, correct, grads


class _Network(AdamModel):
    """A ReLU network trained with Adam: the machinery shared by the public models.

    ``inputs`` are the batch names a mapping must provide; ``lr`` may be changed
    between steps, for a schedule.
    """

    inputs = ("image", "label")
    optional_inputs = ("weight",)

    def __init__(self, sizes: Sequence[int], lr: float, seed: int | np.random.Generator):
        for n in sizes:
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
                raise BadValue(f"layer sizes must be positive integers, got {n!r} in {tuple(sizes)!r}")
        if sizes[-1] < 2:
            raise BadValue(f"n_classes must be at least 2, got {sizes[-1]!r}")
        if isinstance(lr, bool) or not (isinstance(lr, numbers.Real) and math.isfinite(lr) and lr > 0):
            raise BadValue(f"lr must be a positive number, got {lr!r}")
        self.n_inputs, self.n_classes, self.lr, self.seed = int(sizes[0]), int(sizes[-1]), float(lr), seed
        self._built_lr = self.lr
        rng = np.random.default_rng(seed)
        self._names, self._params = [], []
        for k, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            w = rng.standard_normal((fan_in, fan_out), dtype=np.float32)
            w *= np.float32(math.sqrt(2.0 / fan_in))  # He: keeps activations' variance through ReLUs
            self._names += [f"W{k}", f"b{k}"]
            self._params += [w, np.zeros(fan_out, np.float32)]
        self._init_adam()

    def settings(self) -> dict[str, Any]:
        """What the model was built with, as JSON: checkpoints record it, so a resume with another
        learning rate or size is refused (``lr`` as built, before any schedule changes it).

        >>> MLP(4, (8,), 3, lr=0.01).settings()
        {'n_inputs': 4, 'hidden': [8], 'n_classes': 3, 'lr': 0.01, 'seed': 0}
        """
        sizes = [len(w) for w in self._params[0::2]][1:]
        seed = int(self.seed) if isinstance(self.seed, (int, np.integer)) else None
        return {"n_inputs": self.n_inputs, "hidden": sizes, "n_classes": self.n_classes, "lr": self._built_lr,
                "seed": seed}

    def step(self, batch: Mapping[str, Any]) -> dict[str, float | int]:
        """Train on one batch and return its metrics, computed before the update.

        Entries of weight 0 are dropped first, so padding changes nothing, even
        when it holds garbage. A batch without positive weight returns zero
        metrics and leaves the model alone: no update, and Adam's step count
        does not advance, exactly as if the batch had never been seen.

        >>> model = SoftmaxRegression(3, 2)
        >>> batch = {"image": np.eye(3, dtype=np.float32), "label": np.array([0, 1, 1]),
        ...          "weight": np.array([1.0, 1.0, 0.0])}
        >>> metrics = model.step(batch)
        >>> metrics["count"], metrics["weight"], model.state_dict()["step"]
        (2, 2.0, 1)
        >>> model.step({**batch, "weight": np.zeros(3)})
        {'loss': 0.0, 'accuracy': 0.0, 'count': 0, 'weight': 0.0}
        >>> model.state_dict()["step"]
        1
        """
        x, y, scale, total = self._prepare(batch)
        if total == 0:
            return dict(_EMPTY)
        ce, correct, grads = _loss_and_gradients(self._params, x, y, scale)
        self._adam(grads)
        return self._metrics(ce, correct, scale, total)

    def evaluate(self, batch: Mapping[str, Any]) -> dict[str, float | int]:
        """The metrics of one batch, without training.

        >>> model = SoftmaxRegression(2, 2)
        >>> model.evaluate({"image": np.zeros((4, 2)), "label": np.array([0, 1, 1, 0])})
        {'loss': 0.693..., 'accuracy': 0.5, 'count': 4, 'weight': 4.0}
        """
        x, y, scale, total = self._prepare(batch)
        if total == 0:
            return dict(_EMPTY)
        ce, correct, _ = softmax_cross_entropy(_forward(self._params, x)[0], y)
        return self._metrics(ce, correct, scale, total)

    def predict(self, images: np.ndarray) -> np.ndarray:
        """The most likely class of each image, as int64.

        >>> SoftmaxRegression(3, 2).predict(np.zeros((2, 3)))
        array([0, 0])
        """
        return _forward(self._params, self._images(images))[0].argmax(axis=1).astype(np.int64)

    def _metrics(self, ce: np.ndarray, correct: np.ndarray, scale: np.ndarray,
                 total: float) -> dict[str, float | int]:
        return {"loss": float(scale @ ce), "accuracy": float(scale @ correct),
                "count": len(ce), "weight": total}

    def _images(self, images: Any) -> np.ndarray:
        x = np.asarray(images)
        if x.ndim < 2 or math.prod(x.shape[1:]) != self.n_inputs or x.dtype.kind not in "fiub":
            raise BadValue(f"'image' must be numbers of shape (batch, {self.n_inputs}), got {x.dtype} "
                           f"of shape {x.shape}; map the column that holds the images to 'image'")
        return x.reshape(len(x), self.n_inputs).astype(np.float32, copy=False)

    def _prepare(self, batch: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """Validated images, labels and loss scale (w / sum w) of the entries of weight > 0, and sum w."""
        for name in self.inputs:
            if name not in batch:
                raise BadValue(f"the batch has no {name!r} input, only {sorted(batch)!r}; fix the mapping so it "
                               f"names the model's inputs {list(self.inputs)!r} (and optionally 'weight')")
        x, y = self._images(batch["image"]), np.asarray(batch["label"])
        if y.shape != (len(x),) or y.dtype.kind not in "iu":
            raise BadValue(f"'label' must be integers of shape ({len(x)},) to match the images, "
                           f"got {y.dtype} of shape {y.shape}")
        w = batch.get("weight")
        keep = None
        if w is not None:
            w = np.asarray(w, dtype=np.float32)
            if w.shape != y.shape:
                raise BadValue(f"'weight' must have shape {y.shape} to match the labels, got {w.shape}")
            if not (np.isfinite(w).all() and (w >= 0).all()):
                bad = w[~(np.isfinite(w) & (w >= 0))][0]
                raise BadValue(f"weights must be finite and >= 0, got {float(bad)}")
            keep = w > 0
        bad = (y < 0) | (y >= self.n_classes)
        if keep is not None:
            bad &= keep  # padding may carry any label
        if bad.any():
            i = int(bad.argmax())
            label, n = int(y[i]), self.n_classes
            fix = ("labels must be 0..n_classes-1: renumber them in the reader" if label < 0 else
                   f"build the model with n_classes greater than the largest label (at least {label + 1})")
            raise LabelRangeError(f"label {label} (entry {i} of the minibatch) is out of range for {n} classes "
                                  f"(0..{n - 1}); {fix}", label, n)
        y = y.astype(np.intp, copy=False)
        if keep is None:
            return x, y, np.full(len(y), 1 / max(len(y), 1), np.float32), float(len(y))
        if not keep.all():  # dropped, not multiplied by 0: garbage such as NaN in padding stays out
            x, y, w = x[keep], y[keep], w[keep]
        total = float(w.sum(dtype=np.float64))
        return x, y, (w / max(total, 1e-30)).astype(np.float32), total


class SoftmaxRegression(_Network):
    """Multinomial logistic regression: one linear layer and a softmax.

    >>> SoftmaxRegression(lr=0.01)
    SoftmaxRegression(n_inputs=784, n_classes=10, lr=0.01, seed=0)
    """

    def __init__(self, n_inputs: int = 784, n_classes: int = 10, *, lr: float = 1e-3,
                 seed: int | np.random.Generator = 0):
        super().__init__((n_inputs, n_classes), lr, seed)

    def __repr__(self) -> str:
        return (f"SoftmaxRegression(n_inputs={self.n_inputs}, n_classes={self.n_classes}, "
                f"lr={self.lr!r}, seed={self.seed!r})")


class MLP(_Network):
    """A multilayer perceptron: ReLU hidden layers of the given sizes, then a softmax.

    >>> MLP(hidden=(256, 128))
    MLP(n_inputs=784, hidden=(256, 128), n_classes=10, lr=0.001, seed=0)
    """

    def __init__(self, n_inputs: int = 784, hidden: Sequence[int] = (256,), n_classes: int = 10, *,
                 lr: float = 1e-3, seed: int | np.random.Generator = 0):
        self.hidden = (int(hidden),) if isinstance(hidden, (int, np.integer)) else tuple(hidden)
        super().__init__((n_inputs, *self.hidden, n_classes), lr, seed)

    def __repr__(self) -> str:
        return (f"MLP(n_inputs={self.n_inputs}, hidden={self.hidden!r}, n_classes={self.n_classes}, "
                f"lr={self.lr!r}, seed={self.seed!r})")
