"""Selection strategies: the samples a continual-learning pipeline trains on at each trigger.

A strategy is told the stream's samples as they arrive, ``inform(keys, labels)``
(keys name samples for good, in stream order), and at each trigger ``select()``
returns the training set: ``(keys int64, weights float32)``. ``from_scratch``
says whether a training on that set starts from a new model (GDumb, as in its
paper) or continues the previous one. Strategies are seeded and deterministic.

- ``new`` / ``new:KEEP``: ``NewData``, the samples since the last trigger (and a
  fraction of the older ones);
- ``all``: ``AllData``, everything seen so far;
- ``gdumb:K``: ``GDumb``, a class-balanced memory of at most K samples.

A user adds a strategy by subclassing ``Strategy``: set ``name``, implement
``_inform`` (given checked int64 arrays) and ``select``, and define ``spec``:

>>> import numpy as np
>>> class Newest(Strategy):
...     '''The last m samples seen.'''
...     name = "newest"
...     def __init__(self, m):
...         self.m, self._keys = m, np.empty(0, np.int64)
...     @property
...     def spec(self):
...         return f"newest:{self.m}"
...     def _inform(self, keys, labels):
...         self._keys = np.concatenate((self._keys, keys))[-self.m:]
...     def select(self):
...         return self._keys.copy(), np.ones(len(self._keys), np.float32)
>>> strategy = Newest(2)
>>> strategy.inform([1, 2, 3], [0, 0, 1])
>>> strategy.select(), strategy.from_scratch
((array([2, 3]), array([1., 1.], dtype=float32)), False)
"""
from __future__ import annotations

import operator
from typing import Any

import numpy as np

from readers.errors import BadType, BadValue
from train.continual.trigger_specs import read_value

__all__ = ["AllData", "GDumb", "NewData", "Strategy", "parse_strategy"]

FORMS = "new, new:KEEP (0 <= KEEP <= 1), all, gdumb:K (K >= 1)"


def _natural(value: Any, what: str, low: int) -> int:
    try:
        if isinstance(value, bool):
            raise TypeError
        value = operator.index(value)
    except TypeError:
        raise BadType(f"{what} must be an integer >= {low}, got {value!r}") from None
    if value < low:
        raise BadValue(f"{what} must be an integer >= {low}, got {value!r}")
    return value


class _Keys:
    """An int64 array grown by doubling: millions of keys without a Python object each."""

    def __init__(self) -> None:
        self._data, self.size = np.empty(1024, np.int64), 0

    def extend(self, keys: np.ndarray) -> None:
        need = self.size + len(keys)
        if need > len(self._data):
            grown = np.empty(max(need, 2 * len(self._data)), np.int64)
            grown[:self.size] = self._data[:self.size]
            self._data = grown
        self._data[self.size:need] = keys
        self.size = need

    def view(self) -> np.ndarray:
        return self._data[:self.size]


def _ones(n: int) -> np.ndarray:
    return np.ones(n, np.float32)


class Strategy:
    """Base of the strategies: checks what ``inform`` is given and hands it to ``_inform``.

    Contract: ``inform(keys, labels)`` takes the samples that arrived since the last
    call, in stream order; ``select()`` is called once per trigger, after ``inform``
    got everything up to the trigger point, and returns ``(keys int64, weights
    float32)``; ``from_scratch`` says whether to train a new model on that set.

    To write one (the module shows an example): subclass it, set ``name`` (what
    ``pipeline status`` shows) and, when it has options, ``spec`` (a string naming
    them, compared when a pipeline is resumed); override ``_inform(keys, labels)``
    (called by ``inform`` with checked int64 arrays) and ``select()``. There is no
    ``__init__`` to call. A strategy that draws at random takes a seed in its own
    ``__init__`` and must draw the same on every run, since a resumed pipeline
    replays the stream through it and checks each set against the stored one.
    ``train.run_pipeline`` takes an instance (``Newest(2)``, not ``Newest``) that
    has not been informed yet, and informs a copy of it.

    >>> AllData().inform([1, 2], [0])
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: keys and labels must be 1-D arrays of one length, got shapes (2,) and (1,)
    """

    name = "strategy"
    from_scratch = False

    @property
    def spec(self) -> str:
        """The string ``parse_strategy`` reads back to this strategy (its seed aside).

        >>> NewData(keep=0.25).spec, GDumb(100).spec
        ('new:0.25', 'gdumb:100')
        """
        return self.name

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.spec!r}>"

    def inform(self, keys: Any, labels: Any) -> None:
        """Take the samples that arrived since the last call, in stream order.

        >>> strategy = AllData()
        >>> strategy.inform(np.array([7, 3]), np.array([0, 1])); strategy.inform([5], [0])
        >>> strategy.select()[0]
        array([7, 3, 5])
        """
        keys, labels = np.asarray(keys), np.asarray(labels)
        if keys.ndim != 1 or labels.shape != keys.shape:
            raise BadValue(f"keys and labels must be 1-D arrays of one length, got shapes {keys.shape} "
                           f"and {labels.shape}")
        for what, values in (("keys", keys), ("labels", labels)):
            if values.size and values.dtype.kind not in "iu":
                raise BadType(f"{what} must be integers, got {values.dtype}")
        self._inform(keys.astype(np.int64, copy=False), labels.astype(np.int64, copy=False))
        self._informed = self.informed + len(keys)

    @property
    def informed(self) -> int:
        """How many samples ``inform`` has taken: a pipeline starts from a strategy that has taken none.

        >>> strategy = AllData()
        >>> strategy.informed, (strategy.inform([4, 5], [0, 1]), strategy.informed)[1]
        (0, 2)
        """
        return getattr(self, "_informed", 0)  # (a subclass need not call Strategy.__init__)

    def _inform(self, keys: np.ndarray, labels: np.ndarray) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _inform")

    def select(self) -> tuple[np.ndarray, np.ndarray]:
        """The training set at a trigger: ``(keys int64, weights float32)``.

        >>> strategy = NewData()
        >>> strategy.inform([4, 5], [0, 1])
        >>> strategy.select()
        (array([4, 5]), array([1., 1.], dtype=float32))
        """
        raise NotImplementedError(f"{type(self).__name__} must implement select")


class NewData(Strategy):
    """``new`` / ``new:KEEP``: the samples since the last trigger, plus a ``keep`` fraction of older ones.

    The older samples are all those informed before the last ``select()``; of them
    ``round(keep * their count)`` are drawn without replacement, by a generator
    seeded with ``(seed, trigger number)``, so each trigger's draw is reproducible.
    The set holds the kept older samples first, then the new ones, each in stream
    order; every weight is 1. With ``keep=0`` the older keys are not stored at all.

    >>> strategy = NewData(keep=0.5, seed=1)
    >>> strategy.inform([10, 11, 12, 13], [0, 0, 1, 1]); strategy.select()[0]
    array([10, 11, 12, 13])
    >>> strategy.inform([14, 15], [2, 2]); len(strategy.select()[0])
    4
    """

    name = "new"

    def __init__(self, keep: float = 0.0, *, seed: int = 0) -> None:
        try:
            if isinstance(keep, (bool, np.bool_)):
                raise TypeError
            keep = float(keep)
        except (TypeError, ValueError):
            raise BadType(f"NewData: keep must be a number, the fraction in [0, 1] of the older samples kept, got "
                          f"{keep!r}") from None
        if not 0 <= keep <= 1:
            raise BadValue(f"NewData: keep must be a fraction in [0, 1], got {keep!r}")
        self.keep, self.seed = keep, _natural(seed, "NewData: seed", 0)
        self._keys, self._old, self._triggers = _Keys(), 0, 0

    @property
    def spec(self) -> str:
        return "new" if self.keep == 0 else f"new:{self.keep!r}"

    def __repr__(self) -> str:
        return f"NewData(keep={self.keep!r}, seed={self.seed})"

    def _inform(self, keys: np.ndarray, labels: np.ndarray) -> None:
        self._keys.extend(keys)

    def select(self) -> tuple[np.ndarray, np.ndarray]:
        seen = self._keys.view()
        old, new = seen[:self._old], seen[self._old:]
        count = round(self.keep * len(old))
        rng = np.random.default_rng((self.seed, self._triggers))
        kept = old[np.sort(rng.choice(len(old), count, replace=False))] if count else old[:0]
        keys = np.concatenate((kept, new))
        self._triggers += 1
        if self.keep == 0:
            self._keys = _Keys()
        else:
            self._old = len(seen)
        return keys, _ones(len(keys))


class AllData(Strategy):
    """``all``: every sample seen so far, in stream order, each of weight 1.

    >>> strategy = AllData()
    >>> strategy.inform([1, 2], [0, 1]); strategy.select()[0]
    array([1, 2])
    >>> strategy.inform([3], [0]); strategy.select()[0], strategy
    (array([1, 2, 3]), AllData())
    """

    name = "all"

    def __init__(self) -> None:
        self._keys = _Keys()

    def __repr__(self) -> str:
        return "AllData()"

    def _inform(self, keys: np.ndarray, labels: np.ndarray) -> None:
        self._keys.extend(keys)

    def select(self) -> tuple[np.ndarray, np.ndarray]:
        keys = self._keys.view().copy()
        return keys, _ones(len(keys))


class GDumb(Strategy):
    """``gdumb:K``: a class-balanced memory of at most ``k`` samples, filled greedily; trains from scratch.

    For each new sample in stream order: while the memory holds fewer than k, it is
    added; else if its class holds fewer than ``k // classes seen so far`` samples
    (its own class counted; the GDumb paper's rule), a random sample of the largest
    class (ties: the smallest label) is evicted (from a generator seeded once with
    ``seed``) and it is added; else it is skipped. So the memory settles, balanced,
    rather than swapping a sample on every arrival when k is not a multiple of the
    classes.
    ``select()`` returns the memory's keys sorted, each of weight 1.

    >>> strategy = GDumb(4, seed=0)
    >>> strategy.inform([0, 1, 2, 3, 4, 5, 6], [0, 0, 0, 0, 1, 1, 1])
    >>> strategy.class_counts(), len(strategy.select()[0]), strategy
    ({0: 2, 1: 2}, 4, GDumb(4, seed=0))
    """

    name = "gdumb"
    from_scratch = True

    def __init__(self, k: int, *, seed: int = 0) -> None:
        self.k, self.seed = _natural(k, "GDumb: k (the memory's size, in samples)", 1), _natural(seed, "GDumb: seed", 0)
        self._rng = np.random.default_rng(seed)
        self._members: dict[int, list[int]] = {}  # label -> its keys in memory; at most k in all
        self._size = 0
        self._largest, self._most = 0, 0  # the largest class (smallest label on ties), its count
        self._seen: set[int] = set()  # every class seen, in memory or not

    @property
    def spec(self) -> str:
        return f"gdumb:{self.k}"

    def __repr__(self) -> str:
        return f"GDumb({self.k}, seed={self.seed})"

    def class_counts(self) -> dict[int, int]:
        """``{label: samples of that class in memory}``, by label.

        >>> strategy = GDumb(10)
        >>> strategy.inform([5, 6, 7], [2, 0, 2]); strategy.class_counts()
        {0: 1, 2: 2}
        """
        return {label: len(self._members[label]) for label in sorted(self._members)}

    def _inform(self, keys: np.ndarray, labels: np.ndarray) -> None:
        members, seen = self._members, self._seen
        for key, label in zip(keys.tolist(), labels.tolist()):
            own = members.get(label)
            seen.add(label)
            if self._size >= self.k:
                if (len(own) if own else 0) >= self.k // len(seen):
                    continue
                victims = members[self._largest]
                i = int(self._rng.integers(len(victims)))
                victims[i] = victims[-1]
                victims.pop()
                if not victims:
                    del members[self._largest]
                self._size -= 1
            if own is None:
                own = members[label] = []
            own.append(key)
            self._size += 1
            self._largest = min(members, key=lambda c: (-len(members[c]), c))
            self._most = len(members[self._largest])

    def select(self) -> tuple[np.ndarray, np.ndarray]:
        keys = np.sort(np.fromiter((k for own in self._members.values() for k in own), np.int64, self._size))
        return keys, _ones(len(keys))


def parse_strategy(spec: str, *, seed: int = 0) -> Strategy:
    """A strategy from its spec: ``new``, ``new:KEEP``, ``all`` or ``gdumb:K``; ``seed`` seeds it.

    >>> parse_strategy("new:0.1"), parse_strategy("all"), parse_strategy("gdumb:500", seed=3)
    (NewData(keep=0.1, seed=0), AllData(), GDumb(500, seed=3))
    >>> parse_strategy("gdumb")
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: unknown strategy spec 'gdumb'; accepted forms: new, new:KEEP (0 <= KEEP <= 1), all, gdumb:K (K >= 1)
    >>> parse_strategy("gdumb:2.5")
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: bad strategy spec 'gdumb:2.5': gdumb:K needs a whole number K >= 1, got '2.5'; accepted forms: ...
    """
    if not isinstance(spec, str):
        raise BadType(f"a strategy spec must be a str, got {spec!r}; accepted forms: {FORMS}")
    kind, sep, argument = spec.strip().partition(":")
    try:
        if kind == "new":
            keep = read_value(argument, float, "new:KEEP needs a number KEEP, 0 <= KEEP <= 1") if sep else 0.0
            return NewData(keep, seed=seed)
        if kind == "all" and not sep:
            return AllData()
        if kind == "gdumb" and sep:
            return GDumb(read_value(argument, int, "gdumb:K needs a whole number K >= 1"), seed=seed)
    except (TypeError, ValueError) as error:
        raise BadValue(f"bad strategy spec {spec!r}: {error}; accepted forms: {FORMS}") from None
    raise BadValue(f"unknown strategy spec {spec!r}; accepted forms: {FORMS}")
