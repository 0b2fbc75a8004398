"""The batch-size schedule of a run of rounds: how big step s's global batch is, and where it starts.

A run warms its global batch size up from ``start`` to ``end`` samples over
its first ``warmup_tokens`` tokens, as the reference system's ``state.toml``
does (``global_batch_size_start``, ``global_batch_size_end``,
``global_batch_size_warmup_tokens``, with ``max_seq_len`` tokens a sample).
Step s's size depends on the tokens consumed before it, ``t = data_index(s) *
seq_len``: ``end`` once ``t >= warmup_tokens``, else ``start + (end - start) *
t / warmup_tokens`` rounded half up, linear in tokens, not in steps. Steps
count from 0 here; the reference's step s + 1 is step s.

The warm-up is a recurrence (each size depends on where its step starts), but
the size only changes ``|end - start|`` times at most, and between changes the
steps go by in an arithmetic progression. The schedule keeps one segment per
size (its first step, its first sample index, its size), so every question is
a bisection over at most ``|end - start| + 2`` segments, in exact integers.
"""
from __future__ import annotations

import bisect
from typing import Any

from readers.checks import whole
from readers.errors import BadValue

__all__ = ["BatchSchedule"]

#: The most batch sizes a warm-up may go through: a reference run's goes through some 20,000 (12,288 to 32,768),
#: and each takes about a microsecond to find.
MAX_SIZES = 1 << 19


class BatchSchedule:
    """A global batch size ramped linearly in tokens from ``start`` to ``end`` over ``warmup_tokens`` tokens.

    ``batch_size(s)`` is step s's global batch size, ``data_index(s)`` the
    sample index where step s starts (the sizes of the steps before it, added
    up) and ``step_at(i)`` the step whose batch holds sample i: a client that
    joins or restarts at step s knows where the run is. Each is O(log) in the
    number of sizes the warm-up goes through, with exact integers.
    ``warmup_steps`` is the number of steps that start inside the warm-up:
    from that step on, every batch has ``end`` samples.

    >>> s = BatchSchedule(start=4, end=8, warmup_tokens=64, seq_len=4)
    >>> [s.batch_size(k) for k in range(6)], [s.data_index(k) for k in range(6)]
    ([4, 5, 6, 8, 8, 8], [0, 4, 9, 15, 23, 31])
    >>> s.step_at(8), s.step_at(9), s.warmup_steps
    (1, 2, 4)
    >>> BatchSchedule(start=16, end=16, warmup_tokens=0, seq_len=2048).data_index(1000)
    16000

    See Also:
        readers.tokenized.rounds.assign_batches: the clients' shares of one step's batch.
    """

    def __init__(self, start: int, end: int, warmup_tokens: int, seq_len: int):
        self.start = whole(start, "start", "BatchSchedule", 1, floats=False)
        self.end = whole(end, "end", "BatchSchedule", 1, floats=False)
        self.warmup_tokens = whole(warmup_tokens, "warmup_tokens", "BatchSchedule", floats=False)
        self.seq_len = whole(seq_len, "seq_len", "BatchSchedule", 1, floats=False)
        self._steps, self._indices, self._sizes, self.warmup_steps = self._segments()

    @classmethod
    def of_run(cls, run: Any) -> BatchSchedule:
        """The schedule of a run file (``readers.tokenized.runfiles.load_run``'s ``RunConfig``, which has checked it).

        >>> from types import SimpleNamespace
        >>> BatchSchedule.of_run(SimpleNamespace(batch_start=2, batch_end=4, warmup_tokens=100, seq_len=10))
        BatchSchedule(start=2, end=4, warmup_tokens=100, seq_len=10)
        """
        return cls(run.batch_start, run.batch_end, run.warmup_tokens, run.seq_len)

    # -- the size at a sample index, and where it next changes ----------------------------
    def _size_at(self, index: int) -> int:
        """The size of a step that starts at sample ``index``: linear in tokens, rounded half up."""
        tokens, w = index * self.seq_len, self.warmup_tokens
        if tokens >= w:
            return self.end
        return (2 * self.start * w + 2 * (self.end - self.start) * tokens + w) // (2 * w)

    def _next_change(self, index: int, size: int, last: int) -> int:
        """The first sample index after ``index`` whose size is not ``size`` (``last`` at most: the warm-up's end).

        Inverting the rounding of ``_size_at``: rising, the size reaches
        ``size + 1`` from ``ceil(w (2 (size + 1 - start) - 1) / (2 (end - start) L))``;
        falling, it drops to ``size - 1`` after ``w (2 (start - size) + 1) / (2 (start - end) L)``.
        """
        w, rise = self.warmup_tokens, self.end - self.start
        if rise > 0:
            found = -(-w * (2 * (size + 1 - self.start) - 1) // (2 * rise * self.seq_len))
        elif rise < 0:
            found = w * (2 * (self.start - size) + 1) // (-2 * rise * self.seq_len) + 1
        else:
            found = last
        return max(index + 1, min(found, last))

    def _segments(self) -> tuple[list[int], list[int], list[int], int]:
        """(first step, first sample index, size) of each run of steps of one size, and the warm-up's steps."""
        last = -(-self.warmup_tokens // self.seq_len)  # the first sample index at or past the warm-up
        steps, indices, sizes = [0], [0], [self._size_at(0)]
        step, index, size = 0, 0, sizes[0]
        while index < last:
            taken = -(-(self._next_change(index, size, last) - index) // size)  # steps until the size changes
            step, index = step + taken, index + taken * size
            if (size := self._size_at(index)) != sizes[-1]:
                if len(sizes) >= MAX_SIZES:
                    raise BadValue(f"BatchSchedule: end={self.end:,}: a warm-up from start={self.start:,} over "
                                   f"warmup_tokens={self.warmup_tokens:,} goes through more than {MAX_SIZES:,} batch "
                                   "sizes (one a step); ramp over fewer sizes: an end nearer start, or fewer "
                                   "warm-up tokens")
                steps.append(step)
                indices.append(index)
                sizes.append(size)
        return steps, indices, sizes, step

    # -- questions ----------------------------------------------------------------------
    def _segment(self, step: int) -> tuple[int, int]:
        """The segment of ``step``, and the step as a checked int."""
        step = whole(step, "step", "BatchSchedule", floats=False)
        return bisect.bisect_right(self._steps, step) - 1, step

    def batch_size(self, step: int) -> int:
        """The global batch size of step ``step`` (from 0).

        >>> BatchSchedule(start=8, end=2, warmup_tokens=40, seq_len=2).batch_size(0)
        8
        """
        return self._sizes[self._segment(step)[0]]

    def data_index(self, step: int) -> int:
        """The sample index where step ``step`` starts: the sizes of steps 0 .. step - 1, added up.

        >>> BatchSchedule(start=8, end=2, warmup_tokens=40, seq_len=2).data_index(3)
        18
        """
        k, step = self._segment(step)
        return self._indices[k] + (step - self._steps[k]) * self._sizes[k]

    def step_at(self, data_index: int) -> int:
        """The step whose global batch holds sample ``data_index``.

        >>> s = BatchSchedule(start=8, end=2, warmup_tokens=40, seq_len=2)
        >>> s.step_at(17), s.step_at(18), s.data_index(s.step_at(18))
        (2, 3, 18)
        """
        data_index = whole(data_index, "data_index", "BatchSchedule.step_at", floats=False)
        k = bisect.bisect_right(self._indices, data_index) - 1
        return self._steps[k] + (data_index - self._indices[k]) // self._sizes[k]

    def __repr__(self) -> str:
        return (f"BatchSchedule(start={self.start}, end={self.end}, warmup_tokens={self.warmup_tokens}, "
                f"seq_len={self.seq_len})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BatchSchedule):
            return NotImplemented
        return repr(self) == repr(other)

    def __hash__(self) -> int:
        return hash(repr(self))
