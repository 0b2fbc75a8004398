"""Checks for writing your own stages: does a reader resume exactly at every step of a pass, and does a
seeded one draw each pass afresh?

Generic checks for resumable readers, in the manner of Grain's checkpoint test helper.

``assert_resumes_at_every_step(make)`` takes a zero-argument factory of fresh
readers, records passes 0 and 1, and then, at every step of pass 0 (or at a
bounded, evenly spread selection of them for long passes, always with the
first steps and the end), saves the state, restores it into a fresh reader and
into the same reader, and checks that the rest of pass 0 and then all of pass 1
come out exactly as they did without interruption.

``assert_seeded_passes(make)`` is for a pipeline with a seed: its passes must
differ (a stage blind to the pass, such as an augmentation drawing from the
sample alone in random access, gives every pass the same draws), and each
pass must resume exactly at every step.
"""
from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import numpy as np

from readers.digests import plain_digest
from readers.graph import Node, drawing_stage, walk
from readers.position import seeds_of

__all__ = ["assert_resumes_at_every_step", "assert_same", "assert_seeded_passes", "steps_to_check"]


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


def assert_resumes_at_every_step(make: Callable[[], Any], *, max_steps: int = 40, pass_id: int = 0) -> list[dict]:
    """Check that a reader from ``make()`` resumes exactly at every step of a pass; return the states.

    For each checked step i of pass ``pass_id`` (0 by default): a fresh
    reader gives i entries and its state is saved (through JSON); a second
    fresh reader restored from it must give entries i.. of the pass and then,
    on its next call, the next pass; the first reader restored from the same
    state must do the same. The state after the whole pass has been read (the
    iterator exhausted) must resume at the next pass.

    >>> from readers import from_sequence, shuffle
    >>> states = assert_resumes_at_every_step(lambda: shuffle(from_sequence(range(5)), seed=0))
    >>> [s["cursor"] for s in states]
    [0, 1, 2, 3, 4, 5, 0]
    """
    reader = _fresh(make, pass_id)
    expected = [list(reader()), list(reader())]
    this, after = pass_id, pass_id + 1
    whole = expected[0]
    states = []
    last_cursor = -1
    for i in steps_to_check(len(whole), max_steps):
        where = f"{reader!r}\nstep {i} of {len(whole)} of pass {this}"
        first = _fresh(make, this)
        it = first()
        head = list(itertools.islice(it, i))
        assert_same(head, whole[:i], f"{where}: entries before saving")
        state = _saved(it, where)
        it.close()
        if state.get("pass") != this:
            raise AssertionError(f"{where}: state {state!r} left pass {this} before its end was read")
        if state["cursor"] < last_cursor:
            raise AssertionError(f"{where}: cursor went back from {last_cursor} to {state['cursor']}")
        last_cursor = state["cursor"]
        states.append(state)
        for label, target in (("a fresh reader", make()), ("the same reader", first)):
            target.set_state(state)
            assert_same(list(target()), whole[i:], f"{where}: rest of pass {this} in {label} restored from {state}")
            assert_same(list(target()), expected[1], f"{where}: pass {after} in {label} restored from {state}")
    # read to exhaustion: the state is the start of the next pass
    first = _fresh(make, this)
    it = first()
    assert_same(list(it), whole, f"{reader!r}: pass {this} read again")
    state = _saved(it, f"{reader!r}: after pass {this}")
    if state.get("pass") != after or state.get("cursor") != 0:
        raise AssertionError(f"{reader!r}: state after a whole pass is {state!r}, expected pass {after} at cursor 0")
    states.append(state)
    restored = make()
    restored.set_state(state)
    assert_same(list(restored()), expected[1], f"{reader!r}: pass {after} restored from {state}")
    return states


def _fresh(make: Callable[[], Any], pass_id: int) -> Any:
    reader = make()
    if pass_id:
        reader.set_pass(pass_id)
    return reader


def _contents(entries: list) -> list[str] | None:
    """A pass's entries as a sorted list of digests (their order left out), or None when one is not plain data."""
    found = [plain_digest(entry) for entry in entries]
    return None if None in found else sorted(found)


def assert_seeded_passes(make: Callable[[], Any], *, passes: int = 3, max_steps: int = 20,
                         draws: bool | None = None) -> None:
    """Check a pipeline with a seed: its passes differ, and each of them resumes exactly at every step.

    A pass of a seeded stage is a function of (seed, pass): the first
    ``passes`` passes of a reader from ``make()`` must all differ from one
    another (give it enough entries, ten or more, that two passes cannot agree
    by chance), and ``assert_resumes_at_every_step`` must hold in each of them.
    With ``draws`` (by default, when a stage of the pipeline declares
    ``draws_per_pass``), the entries themselves must differ, not only their
    order: a shuffle above a stage that draws would hide, by its order alone,
    draws that are the same every pass. A stage that draws per entry but is
    blind to the pass in random access (it ignores ``bound_pass``) gives every
    pass the same draws, and fails here; check an augmentation of your own
    with ``draws=True``.

    >>> from readers import from_sequence, random_map, shuffle
    >>> assert_seeded_passes(lambda: shuffle(from_sequence(range(10)), seed=0))
    >>> def noise(entry, rng):
    ...     return entry + rng.random()
    >>> assert_seeded_passes(lambda: shuffle(random_map(noise, from_sequence(range(10)), seed=0), seed=1))
    >>> from readers.stage import IndexedReader
    >>> class BlindNoise(IndexedReader):  # draws from the sample alone: every pass alike
    ...     name, seed = "blind_noise", 0
    ...     def __len__(self):
    ...         return 10
    ...     def _get(self, i):
    ...         return i + np.random.default_rng([self.seed, i]).random()
    >>> assert_seeded_passes(BlindNoise)
    Traceback (most recent call last):
    ...
    AssertionError: blind_noise(): passes 0 and 1 gave the same entries, though the pipeline has seeds 0: ...
    >>> assert_seeded_passes(lambda: shuffle(BlindNoise(), seed=1), draws=True)
    Traceback (most recent call last):
    ...
    AssertionError: shuffle(buf_size=None (global), seed=1)...: passes 0 and 1 gave the same entries in another order, ...
    """
    reader = make()
    seeds = seeds_of(reader)
    if seeds is None:
        raise AssertionError(f"{reader!r}: no stage declares a seed; a stage whose passes are random declares "
                             "the seed they depend on (its seed attribute), so states record it")
    drawn = next((s.unrepeatable for s in walk(reader) if isinstance(s, Node) and s.unrepeatable), None)
    if drawn:
        raise AssertionError(f"{reader!r}: {drawn}, so no run repeats its passes; give it a seed to check it")
    if draws is None:
        draws = drawing_stage(reader) is not None
    runs = [list(reader()) for _ in range(passes)]
    contents = [_contents(run) for run in runs] if draws else []
    for a, b in itertools.combinations(range(passes), 2):
        if draws and contents[a] is not None and contents[a] == contents[b]:
            raise AssertionError(
                f"{reader!r}: passes {a} and {b} gave the same entries in another order, though a stage of it "
                "draws: its draws must come from (seed, pass, sample): in random access, from the stage's "
                "bound_pass (declare draws_per_pass = True; see readers.random_map)")
        try:
            assert_same(runs[b], runs[a])
        except AssertionError:
            continue
        raise AssertionError(
            f"{reader!r}: passes {a} and {b} gave the same entries, though the pipeline has seeds {seeds}: a "
            "stage that draws must draw from (seed, pass): in a stream, _stream(pass_id) has the pass; in random "
            "access, the stage's bound_pass (declare draws_per_pass = True; see readers.random_map)")
    for pass_id in range(passes - 1):
        assert_resumes_at_every_step(make, max_steps=max_steps, pass_id=pass_id)
