"""Triggers: where a continual-learning pipeline cuts its timestamped stream into trainings.

A trigger reads the stream chunk by chunk: ``feed(times, labels, features=None)``
returns the trigger points found in the chunk as global stream positions n (a
trigger at n covers the stream's first n entries), strictly increasing across
calls; ``finish()`` at the end of the stream gives a last point covering what is
left, or None. Triggers are pure and deterministic on the stream: the same
stream cut into any chunks gives the same points.

Each trigger has a ``spec`` that ``parse_trigger`` reads back (the CLI's form):

- ``every:N``: ``EveryN(n)``, every n entries;
- ``time:SECONDS``: ``EveryT(seconds)``, when the data time enters a new window;
- ``drift:window=W,threshold=X[,on=label|feature][,bins=B][,bounds=LO:HI]``:
  ``Drift``, when a window's distribution moves away from the reference's
  (bins and bounds with ``on=feature`` only).

>>> import numpy as np
>>> trigger = parse_trigger("every:3")
>>> trigger.feed(np.arange(4.0), np.zeros(4, np.int64)), trigger.feed(np.arange(4.0, 7.0), np.zeros(3, np.int64))
([3], [6])
>>> trigger.finish()
7

A new trigger subclasses ``Trigger``, sets its options before calling
``super().__init__()``, resets its own state in ``reset()`` and implements
``_points(times, labels, features, start)``: the global points in a chunk that
starts at stream position ``start`` (the chunk is already checked); one that
reads ``features`` says so with ``uses_features``. How specs are written and
read is ``train.continual.trigger_specs``'s.
"""
from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from readers.errors import BadType, BadValue
from train.continual.trigger_specs import FORMS, drift_options, read_value, spec_number

__all__ = ["Drift", "EveryN", "EveryT", "Trigger", "parse_trigger"]


def _real(value: Any, what: str) -> float:
    """``value`` as a float; when it is no number, a TypeError: ``what`` (it "must be ...") and the value."""
    try:
        if isinstance(value, (bool, np.bool_)):
            raise TypeError
        return float(value)
    except (TypeError, ValueError):
        raise BadType(f"{what}, got {value!r}") from None


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise BadType(f"{what} must be an integer >= 1, got {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise BadType(f"{what} must be an integer >= 1, got {value!r}") from None
    if value < 1:
        raise BadValue(f"{what} must be an integer >= 1, got {value!r}")
    return value


class Trigger:
    """Base of the triggers: checks each chunk, counts positions and implements ``finish``.

    Contract: ``feed`` takes the next chunk (``times`` float64 seconds, finite and
    non-decreasing along the whole stream; ``labels`` int64; ``features`` optional,
    one row per entry) and returns its trigger points as global positions, each
    greater than the last; ``finish`` returns the stream's length when entries
    after the last point are left (else None), and no chunk may follow it.
    ``seen`` counts the entries fed, ``last_point`` is the last trigger point (0: none).

    >>> trigger = EveryN(2)
    >>> trigger.feed([0.0, 1.0, 0.5], [0, 0, 0])
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: times go backwards at stream position 2: 1.0 then 0.5; a timestamped stream's times must be non-decreasing (sort the stream by time)
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget the stream, to read a new one from its start.

        >>> trigger = EveryN(2)
        >>> trigger.feed([0.0], [0]), trigger.finish()
        ([], 1)
        >>> trigger.reset(); trigger.feed([0.0, 1.0], [0, 0])
        [2]
        """
        self.seen, self.last_point = 0, 0
        self._last_time: float | None = None
        self._finished = False

    @property
    def spec(self) -> str:
        """The string ``parse_trigger`` reads back to this trigger.

        >>> EveryT(3600.0).spec
        'time:3600'
        """
        raise NotImplementedError(f"{type(self).__name__} must define spec")

    @property
    def uses_features(self) -> bool:
        """Whether ``feed`` reads its ``features``: when False, a caller need not work them out.

        >>> EveryN(2).uses_features, Drift(window=9, threshold=0.2, on="feature").uses_features
        (False, True)
        """
        return False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec!r})"

    def feed(self, times: Any, labels: Any, features: Any = None) -> list[int]:
        """The trigger points in the stream's next chunk, as global positions.

        >>> trigger = EveryN(2)
        >>> trigger.feed([0.0, 1.0, 2.0], [0, 1, 0]), trigger.feed([3.0], [1])
        ([2], [4])
        """
        if self._finished:
            raise RuntimeError(f"{self!r} was finished; call reset() before feeding a new stream")
        times, labels, features = self._check(times, labels, features)
        points = self._points(times, labels, features, self.seen) if len(times) else []
        if len(times):  # only once the chunk is taken: a chunk refused can be fed again, mended
            self._last_time = float(times[-1])
        self.seen += len(times)
        if points:
            self.last_point = points[-1]
        return points

    def finish(self) -> int | None:
        """At the end of the stream: a last point covering the entries after the last one, or None.

        >>> trigger = EveryN(2)
        >>> trigger.feed([0.0, 1.0], [0, 0]), trigger.finish()
        ([2], None)
        """
        self._finished = True
        if self.seen > self.last_point:
            self.last_point = self.seen
            return self.seen
        return None

    def _points(self, times: np.ndarray, labels: np.ndarray, features: np.ndarray | None,
                start: int) -> list[int]:
        raise NotImplementedError(f"{type(self).__name__} must implement _points")

    def _check(self, times: Any, labels: Any, features: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        times, labels = np.asarray(times, np.float64), np.asarray(labels)
        if times.ndim != 1 or labels.shape != times.shape:
            raise BadValue(f"times and labels must be 1-D arrays of one length, got shapes {times.shape} "
                           f"and {labels.shape}")
        if labels.size and labels.dtype.kind not in "iu":
            raise BadType(f"labels must be integers, got {labels.dtype}")
        labels = labels.astype(np.int64, copy=False)
        if features is not None:
            features = np.asarray(features)
            if features.ndim < 1 or len(features) != len(times):
                raise BadValue(f"features must have one row per entry: {len(times)} rows, got shape {features.shape}")
            features = features.reshape(len(times), int(np.prod(features.shape[1:])))
        if not np.isfinite(times).all():
            i = int(np.flatnonzero(~np.isfinite(times))[0])
            raise BadValue(f"time at stream position {self.seen + i} is {float(times[i])!r}; times must be finite seconds")
        before = np.concatenate(([self._last_time], times[:-1])) if self._last_time is not None else times[:-1]
        after = times if self._last_time is not None else times[1:]
        back = np.flatnonzero(after < before)
        if back.size:
            i = int(back[0])
            position = self.seen + i + (self._last_time is None)
            raise BadValue(f"times go backwards at stream position {position}: {float(before[i])!r} then {float(after[i])!r}; "
                           "a timestamped stream's times must be non-decreasing (sort the stream by time)")
        return times, labels, features


class EveryN(Trigger):
    """``every:N``: a trigger every ``n`` entries, at n, 2n, 3n, ...

    >>> trigger = EveryN(4)
    >>> trigger.feed(np.zeros(10), np.zeros(10, np.int64)), trigger.finish(), trigger
    ([4, 8], 10, EveryN('every:4'))
    """

    def __init__(self, n: int) -> None:
        self.n = _count(n, "EveryN: n")
        super().__init__()

    @property
    def spec(self) -> str:
        return f"every:{self.n}"

    def _points(self, times: np.ndarray, labels: np.ndarray, features: np.ndarray | None,
                start: int) -> list[int]:
        return list(range((start // self.n + 1) * self.n, start + len(times) + 1, self.n))


class EveryT(Trigger):
    """``time:SECONDS``: a trigger each time the data time enters a later window of ``seconds``.

    Windows are ``[t0 + k*T, t0 + (k+1)*T)`` with ``t0 = floor(first time / T) * T``,
    that is windows aligned on multiples of T. The trigger fires at the position of
    the first entry whose time lies in a later window than the entry before it (so
    the point covers the entries before it); a gap of several empty windows fires
    once. With Split-MNIST's times ``task * 86400 + ...``, ``time:86400`` fires at
    each task boundary and ``finish()`` covers the last task.

    >>> trigger = EveryT(10)
    >>> trigger.feed([3.0, 9.5, 10.0, 12.0], [0, 0, 1, 1]), trigger.feed([45.0, 46.0], [2, 2])
    ([2], [4])
    >>> trigger.finish()
    6
    """

    def __init__(self, seconds: float) -> None:
        seconds = _real(seconds, "EveryT: seconds must be a number > 0")
        if not (math.isfinite(seconds) and seconds > 0):
            raise BadValue(f"EveryT: seconds must be a finite number > 0, got {seconds!r}")
        self.seconds = seconds
        super().__init__()

    def reset(self) -> None:
        super().reset()
        self._window: int | None = None  # the window of the last entry seen

    @property
    def spec(self) -> str:
        return f"time:{spec_number(self.seconds)}"

    def _points(self, times: np.ndarray, labels: np.ndarray, features: np.ndarray | None,
                start: int) -> list[int]:
        # floor(t / T) per entry (not (t - t0) / T): no rounding of t0 can move an entry's window.
        window = np.floor(times / self.seconds).astype(np.int64)
        previous = np.concatenate(([window[0] if self._window is None else self._window], window[:-1]))
        self._window = int(window[-1])
        return [start + int(i) for i in np.flatnonzero(window > previous)]


def _histogram(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct values, sorted; the fraction of entries each holds)."""
    keys, counts = np.unique(values, return_counts=True)
    return keys, counts / len(values)


def _total_variation(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> float:
    keys = np.union1d(a[0], b[0])
    pa, pb = np.zeros(len(keys)), np.zeros(len(keys))
    pa[np.searchsorted(keys, a[0])] = a[1]
    pb[np.searchsorted(keys, b[0])] = b[1]
    return 0.5 * float(np.abs(pa - pb).sum())


class Drift(Trigger):
    """``drift:window=W,threshold=X[,on=label|feature][,bins=B][,bounds=LO:HI]``: a trigger on a change of distribution.

    The stream is read in windows of ``window`` entries, ``[0, W)``, ``[W, 2W)``, ...
    The first window is the reference. At the end of each later window, its
    distribution is compared with the reference's by the total variation distance
    ``TV(p, q) = 1/2 * sum_v |p(v) - q(v)|`` of the normalised histograms; when
    ``TV > threshold`` the trigger fires at the window's end, and the next window (the
    first whole one after the trigger: the window that fired may straddle the change)
    becomes the reference, without being compared. A partial window at the end of the
    stream is never compared; ``finish()`` covers it.

    TV lies in [0, 1]: it is the largest difference in probability the two windows
    give to any one set of values. 0: the same histogram; 1: no value in common.
    Swapping a quarter of the entries' classes for unseen ones gives 0.25; so
    ``threshold=0.3`` ignores that but fires when classes {0, 1} give way to {2, 3} (TV 1).

    ``on="label"``: the histogram of the labels. ``on="feature"``: of one scalar per
    entry, the mean of its features row, in ``bins`` equal bins (None: 10) over
    ``bounds`` (LO, HI), or when None over [min, max] of the first window's means
    ([min, min + 1] if they are equal); a mean outside the range counts in the nearest
    edge bin. Bins and bounds are for ``on="feature"`` only (so a spec says all).

    >>> trigger = Drift(window=4, threshold=0.3)
    >>> trigger.feed(np.arange(12.0), [0, 1, 0, 1, 1, 0, 1, 1, 2, 3, 3, 2])
    [12]
    >>> trigger.spec
    'drift:window=4,threshold=0.3'
    """

    def __init__(self, *, window: int, threshold: float, on: str = "label", bins: int | None = None,
                 bounds: tuple[float, float] | None = None) -> None:
        self.window = _count(window, "Drift: window")
        threshold = _real(threshold, "Drift: threshold must be a number in [0, 1) (a total variation distance)")
        if not 0 <= threshold < 1:
            raise BadValue(f"Drift: threshold must be in [0, 1) (a total variation distance), got {threshold!r}")
        if on not in ("label", "feature"):
            raise BadValue(f"Drift: on must be 'label' or 'feature', got {on!r}")
        for name, value in (("bins", bins), ("bounds", bounds)):
            if value is not None and on != "feature":
                raise BadValue(f"Drift: {name} are for on='feature' only; drop them or set on='feature'")
        self.bins = None if on != "feature" else 10 if bins is None else _count(bins, "Drift: bins")
        if bounds is not None:
            try:
                low, high = (float(b) for b in bounds)
            except (TypeError, ValueError):
                raise BadType(f"Drift: bounds must be two numbers (LO, HI), got {bounds!r}") from None
            if not (math.isfinite(low) and math.isfinite(high) and low < high):
                raise BadValue(f"Drift: bounds must be finite with LO < HI, got {bounds!r}")
            bounds = (low, high)
        self.threshold, self.on, self.bounds = threshold, on, bounds
        super().__init__()

    @property
    def uses_features(self) -> bool:
        """True with ``on="feature"``: ``feed`` then needs ``features``, one row per entry.

        >>> Drift(window=9, threshold=0.2).uses_features, Drift(window=9, threshold=0.2, on="feature").uses_features
        (False, True)
        """
        return self.on == "feature"

    def reset(self) -> None:
        super().reset()
        self._pending = np.empty(0, np.int64 if self.on == "label" else np.float64)
        self._reference: tuple[np.ndarray, np.ndarray] | None = None
        self._range = self.bounds

    @property
    def spec(self) -> str:
        spec = f"drift:window={self.window},threshold={spec_number(self.threshold)}"
        if self.on == "feature":
            spec += f",on=feature,bins={self.bins}"
            if self.bounds is not None:
                spec += f",bounds={spec_number(self.bounds[0])}:{spec_number(self.bounds[1])}"
        return spec

    def _values(self, window: np.ndarray) -> np.ndarray:
        """A window's histogram keys: its labels, or the bin of each entry's features mean."""
        if self.on == "label":
            return window
        if self._range is None:
            low, high = float(window.min()), float(window.max())
            self._range = (low, high if high > low else low + 1.0)
        low, high = self._range
        return np.clip(np.floor((window - low) / (high - low) * self.bins), 0, self.bins - 1).astype(np.int64)

    def _points(self, times: np.ndarray, labels: np.ndarray, features: np.ndarray | None,
                start: int) -> list[int]:
        if self.on == "label":
            values = labels
        elif features is None:
            raise BadValue(f"{self!r} needs features; pass features= to feed (one row per entry)")
        else:
            values = features.astype(np.float64).mean(axis=1)
        values = np.concatenate((self._pending, values))
        first = start - len(self._pending)  # the stream position of values[0], a window's start
        points, size = [], self.window
        for end in range(size, len(values) + 1, size):
            histogram = _histogram(self._values(values[end - size:end]))
            if self._reference is None:  # the first window, or the first whole one after a trigger
                self._reference = histogram
            elif _total_variation(histogram, self._reference) > self.threshold:
                points.append(first + end)
                # the window that fired may straddle the change: the next one, all after it, is the reference
                self._reference = None
        self._pending = values[len(values) // size * size:]
        return points


def parse_trigger(spec: str) -> Trigger:
    """A trigger from its spec: ``every:N``, ``time:SECONDS`` or ``drift:window=W,threshold=X[,...]``.

    >>> parse_trigger("time:86400"), parse_trigger("drift:window=500,threshold=0.3,on=feature")
    (EveryT('time:86400'), Drift('drift:window=500,threshold=0.3,on=feature,bins=10'))
    >>> parse_trigger("every:2.5")
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: bad trigger spec 'every:2.5': every:N needs a whole number N >= 1, got '2.5'; accepted forms: every:N (N >= 1), ...
    """
    if not isinstance(spec, str):
        raise BadType(f"a trigger spec must be a str, got {spec!r}; accepted forms: {FORMS}")
    kind, sep, argument = spec.strip().partition(":")
    builders = {"every": lambda a: EveryN(read_value(a, int, "every:N needs a whole number N >= 1")),
                "time": lambda a: EveryT(read_value(a, float, "time:SECONDS needs a number of seconds > 0")),
                "drift": lambda a: Drift(**drift_options(a))}
    if not sep or kind not in builders:
        raise BadValue(f"unknown trigger spec {spec!r}; accepted forms: {FORMS}")
    try:
        return builders[kind](argument)
    except (TypeError, ValueError) as error:
        raise BadValue(f"bad trigger spec {spec!r}: {error}; accepted forms: {FORMS}") from None
