"""A next-token language model in pure numpy, and the unigram entropy to judge it by.

``NextTokenMLP`` reads the embeddings of the last ``context`` tokens,
concatenated, through one ReLU hidden layer to logits over the vocabulary (a
Bengio-style neural language model), trained with Adam in float32. It sees a
few previous tokens, so it can beat a bigram model; ``unigram_entropy`` is the
loss of the best model that sees none.

A batch is ``{"tokens": int array (batch, seq_len + 1)}``, the windows
``readers.tokens`` gives: position t predicts ``tokens[:, t + 1]`` from
``tokens[:, t - context + 1 : t + 1]``. Slots before a window's start hold a
learned start embedding (row ``vocab_size`` of the embedding table), and so
does a token of -100 read as an input. A target of -100 is ignored (the
seed's convention for padded labels), and so are windows of ``"weight"`` 0
(padding from sharding), which may hold anything.

>>> rng = np.random.default_rng(0)
>>> text = np.tile(rng.integers(0, 16, 12), 20)  # a 12-token pattern, repeated
>>> batch = {"tokens": np.lib.stride_tricks.sliding_window_view(text, 33)[::32]}
>>> model = NextTokenMLP(16, context=3, embed=8, hidden=32, lr=0.01)
>>> for _ in range(100):
...     metrics = model.step(batch)
>>> model.evaluate(batch)["loss"] < 0.2 < unigram_entropy(text, 16)
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
from train.models.classifiers import softmax_cross_entropy

__all__ = ["NextTokenMLP", "TokenRangeError", "unigram_entropy"]

#: A target that counts for nothing; as an input, it reads as the start of the text.
IGNORE = -100
_EMPTY = {"loss": 0.0, "accuracy": 0.0, "count": 0, "weight": 0.0, "tokens": 0}
_NAMES = ("embedding", "W0", "b0", "W1", "b1")


class TokenRangeError(BadValue):
    """A token id outside 0..vocab_size-1: ``token`` is the value, ``where`` its index in the array given.

    >>> try:
    ...     NextTokenMLP(8).evaluate({"tokens": np.array([[1, 2, 3], [4, 9, 5]])})
    ... except TokenRangeError as exc:
    ...     print(exc.token, exc.vocab_size, exc.where)
    9 8 (1, 1)
    """

    def __init__(self, message: str, token: int, vocab_size: int, where: tuple[int, ...]):
        super().__init__(message)
        self.token, self.vocab_size, self.where = token, vocab_size, where

    def __reduce__(self) -> tuple:  # the default passes only the message back to __init__
        return type(self), (str(self), self.token, self.vocab_size, self.where)


def _check_range(tokens: np.ndarray, vocab_size: int, keep: np.ndarray | None = None) -> None:
    """Raise TokenRangeError for the first id that is neither -100 nor in 0..vocab_size-1 (in kept rows)."""
    bad = (tokens >= vocab_size) | ((tokens < 0) & (tokens != IGNORE))
    if keep is not None:
        bad &= keep.reshape(-1, *(1,) * (tokens.ndim - 1))  # padding may hold anything
    if not bad.any():
        return
    where = tuple(int(i) for i in np.unravel_index(int(bad.argmax()), bad.shape))
    token = int(tokens[where])
    place = f"window {where[0]}, position {where[1]}" if len(where) == 2 else f"index {where}"
    fix = (f"token ids must be 0..{vocab_size - 1}, or {IGNORE} for none: renumber them in the reader" if token < 0
           else f"build the model with vocab_size greater than the largest token id (at least {token + 1})")
    raise TokenRangeError(f"token {token} ({place} of the tokens) is out of range for vocab_size={vocab_size} "
                          f"(0..{vocab_size - 1}); {fix}", token, vocab_size, where)


def _integers(value: Any, name: str) -> np.ndarray:
    a = np.asarray(value)
    if a.dtype.kind not in "iu":
        raise BadValue(f"{name!r} must be integer token ids, got {a.dtype}; read the tokens as integers")
    return a


def unigram_entropy(tokens: Any, vocab_size: int) -> float:
    """The entropy, in nats per token, of the tokens' own frequencies: the loss of the best model that
    ignores context, to compare a language model's loss with. Tokens of -100 are not counted.

    >>> unigram_entropy([0, 1, 0, 1, -100], 2)
    0.693...
    >>> unigram_entropy(np.zeros((4, 9), np.uint16), 256)
    0.0
    >>> unigram_entropy([3], 2)
    Traceback (most recent call last):
    ...
    train.models.language.TokenRangeError: token 3 (index (0,) of the tokens) is out of range for vocab_size=2 (0..1); ...
    """
    t = _integers(tokens, "tokens")
    _check_range(t, vocab_size)
    t = t[t != IGNORE] if t.dtype.kind == "i" else t.ravel()
    if t.size == 0:
        raise BadValue("unigram_entropy: no tokens to count (all -100, or none given)")
    counts = np.bincount(t.astype(np.intp, copy=False), minlength=vocab_size)
    p = counts[counts > 0] / t.size
    return float(max(-(p * np.log(p)).sum(), 0.0))


def _forward(params: Sequence[np.ndarray], ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Logits, the concatenated context embeddings and the hidden layer, for contexts ``ids`` (n, context)."""
    embedding, w0, b0, w1, b1 = params
    x = embedding[ids].reshape(len(ids), -1)
    h = x @ w0
    h += b0
    np.maximum(h, 0, out=h)
    logits = h @ w1
    logits += b1
    return logits, x, h


def _loss_and_gradients(params: Sequence[np.ndarray], ids: np.ndarray, y: np.ndarray,
                        scale: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Cross-entropy, correctness and the gradient of ``sum(scale * ce)`` for each parameter.

    Works in the dtype of ``params`` (a float64 copy makes a precise gradient check).
    """
    embedding, w0, _, w1, _ = params
    logits, x, h = _forward(params, ids)
    ce, correct, g = softmax_cross_entropy(logits, y)
    g[np.arange(len(y)), y] -= 1  # the softmax buffer becomes d(ce)/d(logits) in place
    g *= scale[:, None]
    grad_w1, grad_b1 = h.T @ g, g.sum(axis=0)
    g = g @ w1.T
    g *= h > 0
    grad_w0, grad_b0 = x.T @ g, g.sum(axis=0)
    g = g @ w0.T  # (n, context * embed): one row of the embedding per context slot
    rows, width = embedding.shape
    # Each slot adds its gradient to its token's row: one bincount over (row, column) cells, far faster
    # than np.add.at, and exact whatever the order (float64 sums, rounded once).
    cells = (ids.reshape(-1, 1) * width + np.arange(width)).ravel()
    grad_embedding = np.bincount(cells, weights=g.ravel(), minlength=rows * width).reshape(rows, width)
    return ce, correct, [grad_embedding.astype(embedding.dtype), grad_w0, grad_b0, grad_w1, grad_b1]


def _positive_int(value: Any, name: str, least: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise BadValue(f"{name} must be an integer of at least {least}, got {value!r}")
    return int(value)


class NextTokenMLP(AdamModel):
    """A next-token language model: the last ``context`` tokens' embeddings, a ReLU layer, a softmax.

    The embeddings are concatenated, so the model knows which slot each token is in. Adam, float32;
    ``lr`` may change between steps.

    ``step(batch)`` and ``evaluate(batch)`` return ``loss`` (mean cross-entropy in nats per token)
    and ``accuracy`` (top-1), means over the target tokens weighted by their window's weight;
    ``count``, the windows of weight > 0; ``tokens``, the target tokens counted; and ``weight``,
    their total weight, so a driver's ``sum(loss * weight) / sum(weight)`` is a per-token mean.

    >>> NextTokenMLP()
    NextTokenMLP(vocab_size=256, context=4, embed=32, hidden=256, lr=0.003, seed=0)
    >>> model = NextTokenMLP(4, context=2, embed=2, hidden=8)
    >>> model.step({"tokens": np.array([[0, 1, 2, 3], [3, 2, -100, 0]]), "weight": np.array([1.0, 0.5])})
    {'loss': 1.6..., 'accuracy': 0.25, 'count': 2, 'weight': 4.0, 'tokens': 5}
    """

    inputs = ("tokens",)
    optional_inputs = ("weight",)

    def __init__(self, vocab_size: int = 256, context: int = 4, embed: int = 32, hidden: int = 256, *,
                 lr: float = 3e-3, seed: int | np.random.Generator = 0):
        self.vocab_size = _positive_int(vocab_size, "vocab_size", 2)
        self.context = _positive_int(context, "context")
        self.embed, self.hidden = _positive_int(embed, "embed"), _positive_int(hidden, "hidden")
        if isinstance(lr, bool) or not (isinstance(lr, numbers.Real) and math.isfinite(lr) and lr > 0):
            raise BadValue(f"lr must be a positive number, got {lr!r}")
        self.lr, self._built_lr, self.seed = float(lr), float(lr), seed
        rng = np.random.default_rng(seed)
        fan_in = self.context * self.embed

        def normal(shape: tuple[int, int], std: float) -> np.ndarray:
            w = rng.standard_normal(shape, dtype=np.float32)
            w *= np.float32(std)
            return w

        # Unit-variance embeddings and He weights keep the hidden layer's variance; the output layer
        # is scaled to unit-variance logits, so the first loss is near log(vocab_size).
        self._params = [normal((self.vocab_size + 1, self.embed), 1.0),
                        normal((fan_in, self.hidden), math.sqrt(2.0 / fan_in)), np.zeros(self.hidden, np.float32),
                        normal((self.hidden, self.vocab_size), math.sqrt(1.0 / self.hidden)),
                        np.zeros(self.vocab_size, np.float32)]
        self._names = list(_NAMES)
        self._init_adam()

    @staticmethod
    def memory_needed(vocab_size: int, context: int = 4, embed: int = 32, hidden: int = 256) -> int:
        """Bytes a model of these sizes holds once it has taken a step, before any batch's own arrays: the float32
        parameters, Adam's two moments and its scratch copy, and one step's gradients (the embedding's summed in
        float64). The embedding and the output layer grow with ``vocab_size``; check this before building one.

        >>> round(NextTokenMLP.memory_needed(256) / 2**20, 1), round(NextTokenMLP.memory_needed(2_097_153) / 2**30, 1)
        (2.1, 11.9)
        """
        v, e, h, c = vocab_size, embed, hidden, context
        params = (v + 1) * e + c * e * h + h + h * v + v
        return 4 * 4 * params + 12 * (v + 1) * e + 4 * (c * e * h + h + h * v + v)

    def __repr__(self) -> str:
        return (f"NextTokenMLP(vocab_size={self.vocab_size}, context={self.context}, embed={self.embed}, "
                f"hidden={self.hidden}, lr={self.lr!r}, seed={self.seed!r})")

    def settings(self) -> dict[str, Any]:
        """What the model was built with, as JSON, for a checkpoint to compare on resume (``lr`` as built).

        >>> NextTokenMLP(16, context=2, embed=4, hidden=8, lr=0.01).settings()
        {'vocab_size': 16, 'context': 2, 'embed': 4, 'hidden': 8, 'lr': 0.01, 'seed': 0}
        """
        seed = int(self.seed) if isinstance(self.seed, (int, np.integer)) else None
        return {"vocab_size": self.vocab_size, "context": self.context, "embed": self.embed, "hidden": self.hidden,
                "lr": self._built_lr, "seed": seed}

    def window_bytes(self, seq_len: int) -> int:
        """About the most bytes one window of ``seq_len + 1`` tokens takes in a ``step``, on top of the model:
        for each of its ``seq_len`` targets, the logits over the vocabulary, the hidden layer and its gradient,
        the context's embeddings, their gradient and its scatter into the table (an estimate that errs high:
        measured peaks are 0.65 to 0.9 of it). What a run's batch and sequence length are checked against.

        >>> NextTokenMLP(256).window_bytes(2048)
        15400960
        """
        per_target = 4 * self.vocab_size + 9 * self.hidden + 32 * self.context * self.embed + 8 * self.context + 64
        return int(seq_len) * per_target

    def step(self, batch: Mapping[str, Any]) -> dict[str, float | int]:
        """Train on one batch of windows and return its metrics, computed before the update.

        A batch with no target to count returns zero metrics and leaves the model alone (Adam's step
        count does not advance), as if it had never been seen.

        >>> model = NextTokenMLP(8, context=2, embed=4, hidden=8)
        >>> model.step({"tokens": np.array([[1, 2, 3]])})["tokens"], model.state_dict()["step"]
        (2, 1)
        >>> model.step({"tokens": np.array([[1, 2, 3]]), "weight": np.zeros(1)})["tokens"]
        0
        >>> model.state_dict()["step"]
        1
        """
        ids, y, scale, counts = self._prepare(batch)
        if not len(y):
            return dict(_EMPTY)
        ce, correct, grads = _loss_and_gradients(self._params, ids, y, scale)
        self._adam(grads)
        return self._metrics(ce, correct, scale, counts)

    def evaluate(self, batch: Mapping[str, Any]) -> dict[str, float | int]:
        """The metrics of one batch of windows, without training.

        >>> model = NextTokenMLP(2, context=1, embed=1, hidden=1)
        >>> model.evaluate({"tokens": np.array([[0, 1, -100]], np.int32)})
        {'loss': 0.69..., 'accuracy': ..., 'count': 1, 'weight': 1.0, 'tokens': 1}
        """
        ids, y, scale, counts = self._prepare(batch)
        if not len(y):
            return dict(_EMPTY)
        ce, correct, _ = softmax_cross_entropy(_forward(self._params, ids)[0], y)
        return self._metrics(ce, correct, scale, counts)

    def _metrics(self, ce: np.ndarray, correct: np.ndarray, scale: np.ndarray,
                 counts: tuple[int, float]) -> dict[str, float | int]:
        return {"loss": float(scale @ ce), "accuracy": float(scale @ correct), "count": counts[0],
                "weight": counts[1], "tokens": len(ce)}

    def _prepare(self, batch: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, float]]:
        """Contexts (n, context), targets and loss scale (w / sum w) of the target tokens that count, and
        (windows of weight > 0, total weight of the counted tokens)."""
        if "tokens" not in batch:
            raise BadValue(f"the batch has no 'tokens' input, only {sorted(batch)!r}; fix the mapping so it "
                           "names the column of token windows 'tokens' (and optionally 'weight')")
        tokens = _integers(batch["tokens"], "tokens")
        if tokens.ndim != 2 or tokens.shape[1] < 2:
            raise BadValue(f"'tokens' must have shape (batch, seq_len + 1) with seq_len >= 1, got {tokens.shape}; "
                           "give windows of inputs plus one next-token target, as readers.tokens reads them")
        w, keep = batch.get("weight"), None
        if w is not None:
            w = np.asarray(w, dtype=np.float32)
            if w.shape != (len(tokens),):
                raise BadValue(f"'weight' must have shape ({len(tokens)},), one per window, got {w.shape}")
            if not (np.isfinite(w).all() and (w >= 0).all()):
                bad = w[~(np.isfinite(w) & (w >= 0))][0]
                raise BadValue(f"weights must be finite and >= 0, got {float(bad)}")
            keep = w > 0
        _check_range(tokens, self.vocab_size, keep)
        if keep is not None and not keep.all():  # dropped, not multiplied by 0: padding may hold garbage
            tokens, w = tokens[keep], w[keep]
        tokens = tokens.astype(np.intp)  # a copy: -100 inputs are rewritten below
        targets = tokens[:, 1:]
        counted = targets != IGNORE
        n_windows, c = len(tokens), self.context
        padded = np.full((n_windows, c - 1 + targets.shape[1]), self.vocab_size, np.intp)
        padded[:, c - 1:] = tokens[:, :-1]
        padded[padded == IGNORE] = self.vocab_size
        contexts = np.lib.stride_tricks.sliding_window_view(padded, c, axis=1)  # (windows, seq_len, context)
        if counted.all():
            ids, y = contexts.reshape(-1, c), targets.ravel()
            per_token = None if w is None else np.repeat(w, targets.shape[1])
        else:
            ids, y = contexts[counted], targets[counted]
            per_token = None if w is None else np.broadcast_to(w[:, None], counted.shape)[counted]
        if per_token is None:
            total = float(len(y))
            scale = np.full(len(y), 1 / max(len(y), 1), np.float32)
        else:
            total = float(per_token.sum(dtype=np.float64))
            scale = (per_token / max(total, 1e-30)).astype(np.float32)
        return ids, y, scale, (n_windows, total)
