"""Positions and state: where a pass is, as a small plain dict, and how to resume there.

A state is ``{"pass": k, "cursor": c, "seed": s}``. The cursor counts the
entries of pass k taken so far, in the pipeline's order *before* any shard:
a shard of ``count`` shards that has given m entries since cursor c0 stands at
c0 + m * count, and a batch of b entries counts as the b entries in it (so
b * count above a shard). Ranks that take the same number of steps therefore
all report the same state, and a state resumes on any other shard layout: the
rest of the pass, from c on, is split over the new shards, so every sample of
the pass is seen exactly once.

Everything here is worked out from the stages' declarations
(``readers.graph.Node``): ``positions`` says how each stage's cursor
counts, ``seed`` which seeds go into the state, ``share()`` which shards the
pipeline has and ``unresumable`` which stages cannot say where they are.

When a stage that keeps its own count (a filter, a buffer shuffle, firstn...)
sits above a shard, the cursor counts that stage's entries of one shard, so
the state also records the shard layout, and resuming checks it is the same.
"""
from __future__ import annotations

import contextlib
import numbers
from typing import Any

from readers.errors import BadType, BadValue
from readers.graph import Node, describe, walk
from readers.launch import worker_context

__all__ = ["advance", "check_layout", "check_resumable", "check_state", "end_of", "fixed_layout", "is_native",
           "seeds_of", "start_of", "state_of", "within"]

KEYS = ("pass", "cursor", "seed", "layout")


def is_native(reader: Any) -> bool:
    """Whether ``reader``'s cursor is the count of its own entries (false for batch and shard).

    >>> from readers import from_sequence, shard
    >>> is_native(from_sequence("ab")), is_native(shard(from_sequence("ab"), 0, 2))
    (True, False)
    """
    if not isinstance(reader, Node) or reader.positions is None:
        return True
    return reader.positions == 1 and reader.share() is None and is_native(reader.parents[0])


def advance(reader: Any, start: int, consumed: int) -> int:
    """The cursor of a pass of ``reader`` begun at ``start`` once ``consumed`` items were taken.

    A stage whose cursor is its parent's (``positions`` k) moves the parent's
    by k per entry, and stops at the end of the parent's pass (the last batch,
    a shard's last round, may be short).

    >>> from readers import from_sequence
    >>> import batching
    >>> advance(from_sequence("abcdef"), 2, 3), advance(batching.batch(from_sequence("abcdef"), 4), 0, 2)
    (5, 6)
    """
    if not isinstance(reader, Node) or reader.positions is None:
        return start + consumed
    parent, k = reader.parents[0], reader.positions
    cursor = advance(parent, start, consumed * k)
    return within(parent, cursor) if k > 1 else cursor


def end_of(reader: Any) -> int | None:
    """The cursor at the end of a pass, where one applies on every shard: else None.

    It is the length of the stage whose entries the cursor counts (below
    every stage that counts its parent's positions); there is none for a
    stream, nor inside a node's block (blocks differ in size, and a position
    counts alike on every node).

    >>> from readers import from_sequence, shard
    >>> end_of(shard(from_sequence("abcde"), 0, 2)), end_of(lambda: iter("ab"))
    (5, None)
    """
    stage = reader
    while isinstance(stage, Node) and stage.positions is not None:
        stage = stage.parents[0]
    for node in walk(stage):
        share = node.share() if isinstance(node, Node) else None
        if share is not None and share.index is None:
            return None
    try:
        return len(stage)
    except Exception:  # a stream has no length; a reader's own __len__ may refuse to say: no end is known
        return None


def within(reader: Any, cursor: int) -> int:
    """``cursor`` no further than the end of ``reader``'s pass, when it has one (see ``end_of``).

    >>> from readers import from_sequence
    >>> within(from_sequence("abc"), 5), within(lambda: iter("abc"), 5)
    (3, 5)
    """
    end = end_of(reader)
    return cursor if end is None else min(cursor, end)


def seeds_of(reader: Any) -> Any:
    """The seeds of a pipeline's seeded stages: None, one int, or a list top down.

    >>> from readers import from_sequence, shuffle
    >>> seeds_of(shuffle(shuffle(from_sequence("ab"), seed=1), 4, seed=2)), seeds_of(from_sequence("ab"))
    ([2, 1], None)
    """
    seeds = [int(s.seed) for s in walk(reader) if isinstance(s, Node) and s.seed is not None]
    return None if not seeds else seeds[0] if len(seeds) == 1 else seeds


def fixed_layout(reader: Any) -> list[list]:
    """``[index, count]`` of each shard whose position is counted inside one shard (see module doc).

    A node_shuffle's block is ``[None, nodes]``: a position in it counts alike on every node.

    >>> from readers import from_sequence, shard, shuffle
    >>> fixed_layout(shard(shuffle(from_sequence(range(9)), seed=0), 1, 3))
    []
    >>> fixed_layout(shuffle(shard(from_sequence(range(9)), 1, 3), 4, seed=0))
    [[1, 3]]
    """
    pending = [reader]
    found: list[list] = []
    while pending:
        stage = pending.pop()
        if not isinstance(stage, Node):
            continue
        if is_native(stage):
            found += _shares(stage)
        else:
            pending.extend(reversed(stage.parents))
    return found


def _shares(reader: Any) -> list[list]:
    """``[index, count]`` of every share in ``reader``'s pipeline, top down; below a stage that runs
    its parent in workers whose shares follow them (``in_workers``), each worker's in turn.

    >>> from readers import from_sequence, shard
    >>> _shares(shard(shard(from_sequence(range(9)), 0, 3), 1, 2))
    [[1, 2], [0, 3]]
    """
    if not isinstance(reader, Node):
        return []
    share = reader.share()
    found = [] if share is None else [[share.index, share.count]]
    contexts = reader.in_workers() or [None]
    for parent in reader.parents:
        for pair in contexts:
            with contextlib.nullcontext() if pair is None else worker_context(*pair):
                found += _shares(parent)
    return found


def check_resumable(reader: Any) -> None:
    """Raise ValueError when a position in ``reader``'s passes cannot be saved (worker merges in arrival order).

    >>> from readers import from_sequence, multiprocess_reader
    >>> check_resumable(from_sequence("ab"))
    >>> check_resumable(multiprocess_reader([from_sequence("ab")]))
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: cannot save or restore a position of multiprocess_reader(1 reader, use_pipe=True): multiprocess_reader merges its readers in whatever order their entries arrive
    """
    for stage in walk(reader):
        reason = stage.unresumable if isinstance(stage, Node) else None
        if reason:
            raise BadValue(f"cannot save or restore a position of {describe(reader)}: {reason}")


def start_of(reader: Any, pass_id: int) -> dict:
    """The state at the start of pass ``pass_id``, before any entry.

    >>> from readers import from_sequence, shuffle
    >>> start_of(shuffle(from_sequence("ab"), seed=3), 2)
    {'pass': 2, 'cursor': 0, 'seed': 3}
    """
    return {"pass": pass_id, "cursor": 0, "seed": seeds_of(reader)}


def state_of(reader: Any, pass_id: int, start: int, consumed: int, done: bool) -> dict:
    """The state of a pass of ``reader`` begun at cursor ``start``, ``consumed`` entries on (``done``: run out).

    >>> from readers import from_sequence
    >>> state_of(from_sequence("abc"), 0, 0, 1, False)
    {'pass': 0, 'cursor': 1, 'seed': None}
    """
    check_resumable(reader)
    if done:
        return start_of(reader, pass_id + 1)
    state = {"pass": pass_id, "cursor": int(advance(reader, start, consumed)), "seed": seeds_of(reader)}
    layout = fixed_layout(reader)
    if layout:
        state["layout"] = layout
    return state


def _count(state: dict, key: str) -> int:
    value = state.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadValue(f"reader state: {key!r} must be an int >= 0, got {value!r}; pass the dict get_state() returned")
    return value


def _layout(state: dict) -> list | None:
    """The state's shard layout as ``[[index, count], ...]`` (lists, as JSON gives them back), checked."""
    layout = state.get("layout")
    if layout is None:
        return None
    form = ("'layout' must be a list of [index, count] pairs, index an int in 0..count-1 (or None for a "
            "node_shuffle's block) and count an int >= 1, e.g. [[1, 3]]")
    if not isinstance(layout, (list, tuple)):
        raise BadValue(f"reader state: {form}; got {type(layout).__name__} {layout!r}; pass the dict "
                       "get_state() returned")
    checked = []
    for k, item in enumerate(layout):
        pair = list(item) if isinstance(item, (list, tuple)) and len(item) == 2 else [None, None]
        index, count = (None if v is None or isinstance(v, bool) or not isinstance(v, numbers.Integral) else int(v)
                        for v in pair)
        if count is None or count < 1 or (pair[0] is not None and (index is None or not 0 <= index < count)):
            raise BadValue(f"reader state: {form}; item {k} of {layout!r} is {item!r}; pass the dict "
                           "get_state() returned")
        checked.append([index, count])
    return checked


def check_state(reader: Any, state: Any) -> tuple[int, int, list | None]:
    """Check ``state`` against ``reader``; return (pass, cursor, layout).

    >>> from readers import from_sequence, shuffle
    >>> check_state(shuffle(from_sequence("abc"), seed=0), {"pass": 1, "cursor": 2, "seed": 0})
    (1, 2, None)
    >>> check_state(shuffle(from_sequence("abc"), seed=0), {"pass": 1, "cursor": 2, "seed": 5})
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: reader state was saved with seed 5, but this pipeline's seed is 0; resume with the same seed, or start the pass afresh
    >>> check_state(from_sequence("abc"), {"pass": 0, "cursor": 1, "seed": None, "layout": [[1, 3, 0]]})
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: reader state: 'layout' must be a list of [index, count] pairs, index an int in 0..count-1 (or None for a node_shuffle's block) and count an int >= 1, e.g. [[1, 3]]; item 0 of [[1, 3, 0]] is [1, 3, 0]; pass the dict get_state() returned
    """
    if not isinstance(state, dict):
        raise BadType(f"reader state must be the dict get_state() returned, got {type(state).__name__} {state!r}")
    unknown = sorted(set(state) - set(KEYS))
    if unknown or not {"pass", "cursor", "seed"} <= set(state):
        raise BadValue(f"reader state has keys {sorted(state)}; expected {list(KEYS[:3])} (and 'layout'), "
                       "as get_state() returns them")
    check_resumable(reader)
    seeds = seeds_of(reader)
    if state.get("seed") != seeds:
        raise BadValue(f"reader state was saved with seed {state.get('seed')!r}, but this pipeline's seed is "
                       f"{seeds!r}; resume with the same seed, or start the pass afresh")
    cursor = _count(state, "cursor")
    end = end_of(reader)
    if end is not None and cursor > end:
        raise BadValue(f"reader state is at entry {cursor} of a pass, past the end of {describe(reader)}'s "
                       f"{end} entries; it was saved from other data")
    return _count(state, "pass"), cursor, _layout(state)


def check_layout(reader: Any, layout: list | None, cursor: int) -> None:
    """Refuse to resume a shard-local position under another shard layout (checked as the pass starts).

    >>> from readers import from_sequence, shard, shuffle
    >>> r = shuffle(shard(from_sequence(range(9)), 1, 3), 4, seed=0)
    >>> check_layout(r, [[1, 3]], 2)
    >>> check_layout(r, [[1, 2]], 2)
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: reader state was saved with shards [[1, 2]] (as [index, count]) and this process has [[1, 3]]; shuffle(buf_size=4, seed=0) counts its position inside one shard, so it resumes only on the same layout. For elastic resume, put shard() after every shuffle, filter and skip of the pipeline
    """
    if not cursor:
        return
    now = fixed_layout(reader)
    nodes = [count for index, count in layout or [] if index is None]
    if nodes and [c for i, c in now if i is None] != nodes:
        raise BadValue(f"reader state was saved by a node_shuffle over {nodes[0]} nodes, and this job has "
                       f"{next((c for i, c in now if i is None), 'no')} nodes; a node_shuffle position resumes only "
                       "on the same number of nodes (start the pass afresh with set_pass)")
    if (layout or []) != now and any(isinstance(s, Node) and s.in_workers() for s in walk(reader)):
        raise BadValue(
            f"reader state was saved with worker shares {layout or []} (as [index, count]) and this process has "
            f"{now}; in {describe(reader)} each worker reads its own files, so a position resumes only with "
            "as many workers per process, and ranks, as saved it; or start the pass afresh with "
            "set_pass")
    if (layout or []) != now:
        raise BadValue(
            f"reader state was saved with shards {layout or []} (as [index, count]) and this process has "
            f"{now}; {describe(reader)} counts its position inside one shard, so it resumes only on the same "
            "layout. For elastic resume, put shard() after every shuffle, filter and skip of the pipeline")
