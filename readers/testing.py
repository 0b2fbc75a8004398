"""Checks for writing your own stages: does a reader resume exactly at every step of a pass?

One generic check for resumable readers, in the manner of Grain's checkpoint test helper.

``assert_resumes_at_every_step(make)`` takes a zero-argument factory of fresh
readers, records passes 0 and 1, and then, at every step of pass 0 (or at a
bounded, evenly spread selection of them for long passes, always with the
first steps and the end), saves the state, restores it into a fresh reader and
into the same reader, and checks that the rest of pass 0 and then all of pass 1
come out exactly as they did without interruption.
"""
from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["assert_resumes_at_every_step", "assert_same", "steps_to_check"]


def assert_same(got: Any, want: Any, where: str = "output") -> None:
    """Deep, type-strict equality over arrays, tuples (named ones too), lists, dicts and scalars.

    >>> assert_same((np.arange(3), [1, "a"]), (np.arange(3), [1, "a"]))
    >>> assert_same([np.zeros(2)], [np.ones(2)])
    Traceback (most recent call last):
    ...
    AssertionError: output[0]: arrays differ: [0.0, 0.0] != [1.0, 1.0]
    """
    if type(got) is not type(want):
        raise AssertionError(f"{where}: type {type(got).__name__} != {type(want).__name__} ({got!r} vs {want!r})")
    if isinstance(got, np.ndarray):
        if got.dtype != want.dtype or got.shape != want.shape:
            raise AssertionError(f"{where}: array {got.dtype}{list(got.shape)} != {want.dtype}{list(want.shape)}")
        if not np.array_equal(got, want, equal_nan=got.dtype.kind in "fc"):
            raise AssertionError(f"{where}: arrays differ: {got.tolist()} != {want.tolist()}")
    elif isinstance(got, (tuple, list)):
        if len(got) != len(want):
            raise AssertionError(f"{where}: length {len(got)} != {len(want)}")
        for k, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}[{k}]")
    elif isinstance(got, dict):
        if list(got) != list(want):
            raise AssertionError(f"{where}: keys {list(got)} != {list(want)}")
        for k in got:
            assert_same(got[k], want[k], f"{where}[{k!r}]")
    elif not (got == want or got != got and want != want):  # NaN equals NaN here
        raise AssertionError(f"{where}: {got!r} != {want!r}")


def steps_to_check(n: int, max_steps: int) -> list[int]:
    """Steps 0..n (n is the end of the pass), or ``max_steps`` of them spread out, with both ends.

    >>> steps_to_check(3, 10)
    [0, 1, 2, 3]
    >>> steps_to_check(100, 6)
    [0, 1, 33, 67, 99, 100]
    """
    if n + 1 <= max_steps:
        return list(range(n + 1))
    spread = np.linspace(0, n, max(2, max_steps - 2)).round().astype(int).tolist()
    return sorted(set(spread) | {0, 1, n - 1, n})


def _saved(it: Any, where: str) -> dict:
    state = it.get_state()
    if not isinstance(state, dict):
        raise AssertionError(f"{where}: get_state() returned {type(state).__name__}, not a dict")
    text = json.dumps(state)  # raises on anything JSON cannot carry
    again = json.loads(text)
    if again != state:
        raise AssertionError(f"{where}: state {state!r} does not survive a JSON round trip ({again!r})")
    return again


def assert_resumes_at_every_step(make: Callable[[], Any], *, max_steps: int = 40) -> list[dict]:
    """Check that a reader from ``make()`` resumes exactly at every step of a pass; return the states.

    For each checked step i of pass 0: a fresh reader gives i entries and its
    state is saved (through JSON); a second fresh reader restored from it must
    give entries i.. of pass 0 and then, on its next call, pass 1; the first
    reader restored from the same state must do the same. The state after the
    whole pass has been read (the iterator exhausted) must resume at pass 1.

    >>> from readers import from_sequence, shuffle
    >>> states = assert_resumes_at_every_step(lambda: shuffle(from_sequence(range(5)), seed=0))
    >>> [s["cursor"] for s in states]
    [0, 1, 2, 3, 4, 5, 0]
    """
    reader = make()
    expected = [list(reader()), list(reader())]
    pass0 = expected[0]
    states = []
    last_cursor = -1
    for i in steps_to_check(len(pass0), max_steps):
        where = f"{reader!r}\nstep {i} of {len(pass0)}"
        first = make()
        it = first()
        head = list(itertools.islice(it, i))
        assert_same(head, pass0[:i], f"{where}: entries before saving")
        state = _saved(it, where)
        it.close()
        if state.get("pass") != 0:
            raise AssertionError(f"{where}: state {state!r} left pass 0 before its end was read")
        if state["cursor"] < last_cursor:
            raise AssertionError(f"{where}: cursor went back from {last_cursor} to {state['cursor']}")
        last_cursor = state["cursor"]
        states.append(state)
        for label, target in (("a fresh reader", make()), ("the same reader", first)):
            target.set_state(state)
            assert_same(list(target()), pass0[i:], f"{where}: rest of pass 0 in {label} restored from {state}")
            assert_same(list(target()), expected[1], f"{where}: pass 1 in {label} restored from {state}")
    # read to exhaustion: the state is the start of pass 1
    first = make()
    it = first()
    assert_same(list(it), pass0, f"{reader!r}: pass 0 read again")
    state = _saved(it, f"{reader!r}: after pass 0")
    if state.get("pass") != 1 or state.get("cursor") != 0:
        raise AssertionError(f"{reader!r}: state after a whole pass is {state!r}, expected pass 1 at cursor 0")
    states.append(state)
    restored = make()
    restored.set_state(state)
    assert_same(list(restored()), expected[1], f"{reader!r}: pass 1 restored from {state}")
    return states
