"""Adam for the numpy models: float32 parameters, their moments, and a state that resumes bit for bit.

``AdamModel`` is the part every readerkit numpy model shares: a model sets
``_names`` and ``_params`` (float32 arrays), calls ``_init_adam()``, and
calls ``_adam(grads)`` once per step; ``state_dict``/``load_state_dict`` then
save and restore the parameters, Adam's moments and its step count.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from readers.errors import BadValue

__all__ = ["AdamModel"]

_BETA1, _BETA2, _EPS = 0.9, 0.999, 1e-8
_FLUSH_EVERY, _TINY = 16, np.finfo(np.float32).tiny


class AdamModel:
    """Adam's update and the state of a model of named float32 parameters (see the module's docstring).

    >>> class Line(AdamModel):
    ...     def __init__(self):
    ...         self.lr, self._names, self._params = 0.1, ["w"], [np.zeros(2, np.float32)]
    ...         self._init_adam()
    >>> line = Line()
    >>> line._adam([np.ones(2, np.float32)])
    >>> line.state_dict()["w"].round(3).tolist(), line.state_dict()["step"]
    ([-0.1, -0.1], 1)
    """

    lr: float
    _names: list[str]
    _params: list[np.ndarray]

    def _init_adam(self) -> None:
        self._m = [np.zeros_like(p) for p in self._params]
        self._v = [np.zeros_like(p) for p in self._params]
        self._scratch = [np.empty_like(p) for p in self._params]
        self._step = 0

    def state_dict(self) -> dict[str, np.ndarray | int]:
        """A copy of the parameters, Adam's moments (``m.*``, ``v.*``) and its ``step`` count.

        >>> from train.models.classifiers import MLP
        >>> sorted(MLP(4, hidden=(3,), n_classes=2).state_dict())
        ['W0', 'W1', 'b0', 'b1', 'm.W0', 'm.W1', 'm.b0', 'm.b1', 'step', 'v.W0', 'v.W1', 'v.b0', 'v.b1']
        """
        state: dict[str, np.ndarray | int] = {"step": self._step}
        for prefix, arrays in (("", self._params), ("m.", self._m), ("v.", self._v)):
            state.update((prefix + name, a.copy()) for name, a in zip(self._names, arrays))
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a ``state_dict()``; training then continues bit for bit as it would have.

        Everything is checked before anything changes.

        >>> from train.models.classifiers import SoftmaxRegression
        >>> b = SoftmaxRegression(3, 2)
        >>> b.load_state_dict(SoftmaxRegression(4, 2).state_dict())
        Traceback (most recent call last):
        ...
        readers.errors.BadValue: state 'W0' has shape (4, 2) but SoftmaxRegression(n_inputs=3, n_classes=2, ...) needs (3, 2); ...
        """
        targets = dict(zip(self._names, self._params))
        targets.update((f"m.{n}", a) for n, a in zip(self._names, self._m))
        targets.update((f"v.{n}", a) for n, a in zip(self._names, self._v))
        expected = set(targets) | {"step"}
        missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
        if missing or unexpected:
            raise BadValue(f"state does not fit {self!r}: missing {missing}, unexpected {unexpected}; "
                           f"load a state saved by a {type(self).__name__} of the same sizes")
        step = np.asarray(state["step"])
        if step.shape != () or step.dtype.kind not in "iu" or step < 0:
            raise BadValue(f"state 'step' must be a non-negative integer, got {state['step']!r}")
        sources = {name: np.asarray(state[name]) for name in targets}
        for name, source in sources.items():
            if source.shape != targets[name].shape:
                raise BadValue(f"state {name!r} has shape {source.shape} but {self!r} needs "
                               f"{targets[name].shape}; build the model with the sizes it was saved with")
            if source.dtype.kind != "f":
                raise BadValue(f"state {name!r} must hold floats, got {source.dtype}")
        for name, source in sources.items():
            np.copyto(targets[name], source, casting="same_kind")
        self._step = int(step)

    def _adam(self, grads: list[np.ndarray]) -> None:
        """One Adam step with ``grads`` (consumed: they are scaled in place) at the current ``lr``."""
        self._step += 1
        t = self._step
        # Bias correction folded into the step size and epsilon, so it costs no pass over the arrays.
        root = math.sqrt(1 - _BETA2 ** t)
        lr, eps = self.lr * root / (1 - _BETA1 ** t), _EPS * root
        for p, m, v, g, s in zip(self._params, self._m, self._v, grads, self._scratch):
            np.multiply(g, g, out=s)
            s *= 1 - _BETA2
            v *= _BETA2
            v += s
            g *= 1 - _BETA1
            m *= _BETA1
            m += g
            np.sqrt(v, out=s)
            s += eps
            np.divide(m, s, out=s)
            s *= lr
            p -= s
            if t % _FLUSH_EVERY == 0:
                # A moment whose gradient stays 0 (MNIST's border pixels, a rare token's embedding)
                # decays into subnormal numbers, ~50x slower on x86: they made the fifth MNIST pass 60%
                # slower than the first. Zeroed, they cannot move a parameter (an update below 1e-28).
                for a in (m, v):
                    np.putmask(a, np.abs(a) < _TINY, 0)
