"""mix: several indexed readers blended into one, every prefix of a pass in proportion to the weights.

Entry i of a mix is item k of source d, where (d, k) comes from a closed
form, so the mix is an indexed reader like any other: a global shuffle, a
shard, a collated batch and a resume work on it unchanged, and it keeps
O(number of sources) memory, never an index array over the pass.

The order. The sources are the leaves of a binary tree built as a Huffman
code is (the two lightest merged first). Each inner node v of weight W_v
(the sum of its leaves') passes its m-th item (m = 0, 1, ...) to its first
child, of weight W_a, when C_v(m + 1) > C_v(m), where
``C_v(m) = floor((m * W_a + F_v) / W_v)``, and to its second child otherwise;
the child's item number is the count of items it got before. This is a
Sturmian (Beatty) sequence: of any first m items the first child gets
C_v(m), within one item of its share m * W_a / W_v. ``F_v``, the phase, is
drawn from the seed in [3/8, 5/8) of W_v, as is which child comes first.
Position i is found by walking down from the root: a few vectorised
integer steps per level for a whole batch of indices, no loop per index.

Exact. Weights are made integers (weights that are all whole numbers keep
their ratios exactly; others are rounded to parts of 2**50), and C_v is
computed in exact integer arithmetic, so it starts at 0 and steps by 0 or 1:
every node splits its items between its children one for one, and the pass
is an exact permutation of the items (no (source, k) twice or missing).
With the default weights (the sources' lengths) and length (their sum),
node v gets exactly W_v of the pass's items, so every entry of every
source is read exactly once.

The bound. Along the path from the root to source d, each split is off its
share by less than 5/8 of an item (the phase's range), scaled by
W_d / W_v below it, so for every prefix of n entries
``|count_d(n) - w_d * n| <= prefix_bound = max_d sum_v e_v * W_d / W_v``
(v runs over d and its ancestors below the root, e_v <= 5/8 the error of
the split above v). A Huffman tree at least doubles the weight every two
levels up, so prefix_bound < 2.5 for any weights; it is 5/8 for two sources
and under 1.25 for 2**k equal ones. Here w_d is parts[d] / sum(parts), the
weights as integers (``Mixed.parts``); weights that are not whole numbers were
rounded to them, which adds less than n * (D + 1) / 2**50 for D sources (a
thousandth of an item for D = 10 at n = 10**11). Megatron's sequential greedy
(pick the source with the largest ``w_d * (i + 1) - count_d``) measures 0.5 to
1 on the same weights and has no random access; this stays within about half
an item of it (tests/readers/ops/test_mixing.py measures both).

>>> import readers
>>> m = mix([readers.from_sequence("ab"), readers.from_sequence("CDEF")], seed=0)
>>> len(m), "".join(m())
(6, 'CaDEbF')
"""
from __future__ import annotations

import heapq
import numbers
from collections.abc import Iterator
from typing import Any

import numpy as np

from readers.checks import check_reader, whole
from readers.digests import hasher, plain_digest
from readers.errors import BadType, BadValue
from readers.graph import describe
from readers.identity import fingerprint
from readers.ops.maps import append_column
from readers.parents import access_of, as_indexed
from readers.stage import Stage

__all__ = ["Mixed", "mix"]

#: Float weights are rounded to integer parts of this total; whole-number weights are scaled up to about it.
PARTS = 1 << 50
#: Positions up to here are exact (int64 arithmetic with room to spare).
MAX_LENGTH = 1 << 62
#: The phase of every split is drawn in [PHASE, 1 - PHASE) of its node's weight.
PHASE = 3 / 8


def _divide(m: np.ndarray, p: np.ndarray, q: np.ndarray, f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Quotient and remainder of (m * p + f) / q, exactly, for int64 arrays with 0 <= m < 2**62,
    0 <= p <= q <= 2**51 and 0 <= f < q, though m * p overflows int64.

    >>> q, r = _divide(np.array([2**61 + 3]), np.array([3]), np.array([2**50 + 1]), np.array([5]))
    >>> int(q[0]) == (3 * (2**61 + 3) + 5) // (2**50 + 1), int(r[0]) == (3 * (2**61 + 3) + 5) % (2**50 + 1)
    (True, True)
    """
    whole_q, r = np.divmod(m, q)  # m * p = whole_q * q * p + r * p, and whole_q * p <= m fits
    estimate = np.floor(r * (p / q) + f / q).astype(np.int64)  # off by at most 2: r < 2**51 converts exactly
    rem = r * p + f - estimate * q  # int64 wraps around, but the true value is within 3 q of 0, so it is exact
    fix = rem // q
    return whole_q * p + estimate + fix, rem - fix * q


def _integer_weights(weights: list) -> list[int]:
    """The weights as integers with the same ratios (exactly for whole numbers), scaled up to about PARTS."""
    if all(float(w).is_integer() for w in weights) and sum(int(w) for w in weights) <= PARTS:
        total = sum(int(w) for w in weights)
        return [int(w) * (PARTS // total) for w in weights]
    top = max(float(w) for w in weights)  # (by the largest first, so that huge weights do not sum to inf)
    total = sum(float(w) / top for w in weights)
    return [max(1, round(float(w) / top / total * PARTS)) if w > 0 else 0 for w in weights]


def _tree(weights: list[int], seed: int) -> tuple[int, int, np.ndarray, float]:
    """The Huffman tree over the positive weights: its root, its depth, one row (first child, second child,
    first child's weight, weight, phase) per node (sources first, as rows that keep every item), and the
    prefix bound."""
    rng = np.random.Generator(np.random.PCG64(seed))
    rows = [(k, k, 1, 1, 0) for k in range(len(weights))]  # a source's items stay there, whatever the depth
    heap = [(w, k) for k, w in enumerate(weights) if w > 0]
    heapq.heapify(heap)
    parent, error = {}, {}
    while len(heap) > 1:
        (wa, a), (wb, b) = heapq.heappop(heap), heapq.heappop(heap)
        if rng.random() < 0.5:
            (wa, a), (wb, b) = (wb, b), (wa, a)
        total = wa + wb
        phase = int((PHASE + (1 - 2 * PHASE) * rng.random()) * total)
        parent[a] = parent[b] = len(rows)
        error[a] = error[b] = max(phase / total, 1 - phase / total)
        heapq.heappush(heap, (total, len(rows)))
        rows.append((a, b, wa, total, phase))
    root, sizes = heap[0][1], weights + [row[3] for row in rows[len(weights):]]
    depth, bound = 0, 0.0
    for leaf in parent.keys() & set(range(len(weights))):
        steps, s, v = 0, 0.0, leaf
        while v != root:
            steps, s, v = steps + 1, s + error[v] * sizes[leaf] / sizes[v], parent[v]
        depth, bound = max(depth, steps), max(bound, s)
    return root, depth, np.array(rows, dtype=np.int64), bound


def _tagged(entry: Any, source: int, index: int) -> Any:
    return append_column(append_column(entry, source, "source"), index, "source_index")


class Mixed(Stage):
    """Indexed readers blended by weight (see ``mix`` and this module's docstring)."""

    name = "mix"
    access = "index"

    def __init__(self, sources: tuple, weights: list | None, seed: int, length: int | None, origin: bool):
        super().__init__(*sources)
        self.weights, self.seed, self.length, self.origin = weights, seed, length, origin
        self.lengths = np.array([len(s) for s in sources], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)
        parts = _integer_weights(list(self.lengths) if weights is None else weights)
        self._root, self._depth, self._rows, self.prefix_bound = _tree(parts, seed)
        self.parts = tuple(parts)  # the weights as integers: source d's share is parts[d] / sum(parts)

    def __len__(self) -> int:
        return int(self.lengths.sum()) if self.length is None else self.length

    def locate(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each position, its source's number and its item number k in that source: the source's entry
        ``k % len(source)``, on its ``k // len(source)``-th repeat (0 for the first time it is read).

        >>> import readers
        >>> m = mix([readers.from_sequence("ab"), readers.from_sequence("CD")], [1, 3], seed=0)
        >>> [v.tolist() for v in m.locate(np.arange(4))]
        [[1, 1, 0, 1], [0, 1, 0, 2]]
        """
        node = np.full(np.shape(indices), self._root, dtype=np.int64)
        k = np.array(indices, dtype=np.int64)
        for _ in range(self._depth):  # one vectorised step per level for all the indices at once
            first, second, part, size, phase = self._rows[node].T
            before, rem = _divide(k, part, size, phase)
            to_first = rem + part >= size  # C(k + 1) > C(k): this item goes to the first child
            node = np.where(to_first, first, second)
            k = np.where(to_first, before, k - before)
        return node, k

    def _entries(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The source and the entry within it of each index."""
        source, k = self.locate(indices)
        return source, k % self.lengths[source]

    def _groups(self, source: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, list]:
        """The order that groups the positions by source, and (source, its entries there) for each source read."""
        order = np.argsort(source, kind="stable")
        present, starts = np.unique(source[order], return_index=True)
        ends = np.append(starts[1:], len(order))
        return order, [(d, index[order[a:b]]) for d, a, b in zip(present.tolist(), starts.tolist(), ends.tolist())]

    def _get(self, i: int) -> Any:
        source, index = (int(v[0]) for v in self._entries(np.array([i])))
        entry = self.parents[source].at(index)
        return _tagged(entry, source, index) if self.origin else entry

    def gather(self, indices: np.ndarray) -> Iterator:
        source, index = self._entries(indices)
        # each source gathers its own entries in their order, so each entry is the next of its source's
        parts = {d: iter(self.parents[d].gather(mine)) for d, mine in self._groups(source, index)[1]}
        entries = map(next, map(parts.__getitem__, source.tolist()))
        return map(_tagged, entries, source.tolist(), index.tolist()) if self.origin else entries

    def gather_columns(self, indices: np.ndarray) -> tuple | np.ndarray | None:
        source, index = self._entries(indices)
        order, groups = self._groups(source, index)
        parts = [self.parents[d].gather_columns(mine) for d, mine in groups]
        if not parts or any(p is None for p in parts) or len({type(p) is tuple and len(p) for p in parts}) > 1:
            return None  # not columns, or sources with other columns: gather and collate say what differs
        try:
            joined = [np.concatenate(c) for c in zip(*(p if type(p) is tuple else (p,) for p in parts))]
        except ValueError:  # shapes that do not stack (images of other sizes): collate pads them, or says why
            return None
        out = []
        for column in joined:  # the joined parts hold the positions in ``order``: put each back in its place
            placed = np.empty_like(column)
            placed[order] = column
            out.append(placed)
        if self.origin:
            return (*out, source, index)
        return tuple(out) if type(parts[0]) is tuple else out[0]

    def sample_ids(self, indices: np.ndarray) -> np.ndarray:
        """Each entry's ID: its index in ``chain(*sources)``, the offset of its source plus its index there.

        >>> import readers
        >>> m = mix([readers.from_sequence("ab"), readers.from_sequence("CDEF")], seed=0)
        >>> m.sample_ids(np.arange(6)).tolist()
        [2, 0, 3, 4, 1, 5]
        """
        source, index = self._entries(indices)
        return self.offsets[source] + index

    def _options(self) -> str:
        if self.weights is None:
            shown = "lengths"
        elif len(self.weights) <= 8:
            shown = repr(self.weights)
        else:  # long lists by digest, so the identity still tells other weights apart
            shown = f"<{len(self.weights)} weights {(plain_digest(self.weights) or '?')[:16]}>"
        opts = f"weights={shown}, seed={self.seed}"
        opts += "" if self.length is None else f", length={self.length}"
        return opts + (", origin=True" if self.origin else "")

    def digest(self) -> str | None:
        """One digest of the sources' data (each source's ``readers.fingerprint`` content), or None when
        one of them cannot say.

        >>> import readers
        >>> def of(text):
        ...     return mix([readers.from_sequence(text), readers.from_sequence("xy")], seed=0).digest()
        >>> of("ab") == of("ab") != of("ac")
        True
        """
        h = hasher()
        for k, source in enumerate(self.parents):
            content = fingerprint(source)["content"]
            if content is None:
                return None
            h.update(f"{k}:{content};".encode())
        return h.hexdigest()


def _sources(readers: Any) -> tuple:
    """The readers as indexed stages, or an error naming the one at fault and what to do."""
    if callable(readers) or not isinstance(readers, (list, tuple)):
        raise BadType(f"mix: readers must be a list of indexed readers, got {describe(readers)!r}; give them "
                      "as one list, e.g. mix([a, b], [0.7, 0.3], seed=0)")
    if not readers:
        raise BadValue("mix: readers is empty; give at least one indexed reader, e.g. mix([a, b], seed=0)")
    sources = []
    for k, reader in enumerate(readers):
        check_reader(reader, f"mix reader {k}")
        indexed = as_indexed(reader)
        if indexed is None and access_of(reader) == "plan":
            raise BadType(f"mix: reader {k} ({describe(reader)}) has passes but no random access (a shuffle or "
                          "shard of an indexed reader): mix the indexed readers below it, then shuffle or shard "
                          "the mix, e.g. readers.shuffle(readers.mix([a, b], seed=0), seed=1)")
        if indexed is None:
            raise BadType(f"mix: reader {k} ({describe(reader)}) is a stream, without len and [i]; mix blends "
                          "indexed readers: make it one, e.g. readers.from_sequence(list(reader())) or "
                          "readers.from_arrays(...) over its data")
        if len(indexed) == 0:
            raise BadValue(f"mix: reader {k} ({describe(reader)}) is empty, so it has no entry to give; leave "
                           "it out of the list")
        sources.append(indexed)
    return tuple(sources)


def _weights(weights: Any, count: int) -> list | None:
    """The weights as a list of plain numbers, or an error naming the bad one."""
    if weights is None:
        return None
    if callable(weights):
        raise BadType(f"mix: weights must be numbers, got the reader {describe(weights)!r}; give the readers as "
                      "one list, e.g. mix([a, b], [0.7, 0.3], seed=0)")
    try:
        values = [w.item() if isinstance(w, np.generic) else w for w in weights]
    except TypeError:
        raise BadType(f"mix: weights must be a list of numbers, one per reader, got {weights!r}") from None
    if len(values) != count:
        raise BadValue(f"mix: {len(values)} weights {values!r} for {count} readers; give one weight per reader")
    for k, w in enumerate(values):
        if isinstance(w, bool) or not isinstance(w, numbers.Real):
            raise BadType(f"mix: weight {k} is {w!r}, not a number; weights are numbers >= 0, one per reader")
        if not np.isfinite(w) or w < 0:
            raise BadValue(f"mix: weight {k} is {w!r}; weights are finite numbers >= 0 (0 leaves a reader out)")
    if not any(w > 0 for w in values):
        raise BadValue(f"mix: all weights are 0 ({values!r}); give at least one reader a positive weight")
    return values


def mix(readers: Any, weights: Any = None, *, seed: int | None = None, length: int | None = None,
        origin: bool = False) -> Mixed:
    """Blend indexed readers into one indexed reader whose every prefix follows ``weights``.

    ``weights`` (one number >= 0 per reader, any scale; 0 leaves a reader
    out) default to the readers' lengths, and ``length`` to the sum of their
    lengths: then a pass reads every entry of every reader exactly once. A
    reader whose share runs past its end starts again: item k of reader d is
    its entry ``k % len(d)``, on repeat ``k // len(d)`` (``Mixed.locate``
    tells both); each reader's entries come in their own order. For every
    prefix of n entries, ``|count_d(n) - w_d * n| <= m.prefix_bound`` (< 2.5,
    w normalised; see the module docstring of ``readers.ops.mixing``), a fixed order per
    ``seed`` (required, so every process has the same mix). Shuffle, shard or
    batch the mix as any indexed reader. An entry's sample ID (``with_index``)
    is its index in ``chain(*readers)``; ``origin=True`` appends two columns,
    the reader's number and the entry's index in it (a dict entry gains the
    keys "source" and "source_index").

    >>> import readers
    >>> a, b = readers.from_sequence("abcd"), readers.from_sequence("XY")
    >>> "".join(mix([a, b], seed=0)())
    'aXbcYd'
    >>> m = mix([a, b], [1, 1], seed=0, length=8)  # X and Y again: b wraps around
    >>> "".join(m()), m.prefix_bound <= 0.625
    ('XaYbXcYd', True)
    >>> list(mix([a, b], seed=0, origin=True)())[:3]
    [('a', 0, 0), ('X', 1, 0), ('b', 0, 1)]
    >>> list(readers.with_index(mix([a, b], seed=0))())[:3]
    [('a', 0), ('X', 4), ('b', 1)]
    >>> mix([a, lambda: iter("xyz")], seed=0)
    Traceback (most recent call last):
    ...
    readers.errors.BadType: mix: reader 1 (<lambda>) is a stream, without len and [i]; mix blends indexed readers: ...
    >>> mix([a, b], [1, -2], seed=0)
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: mix: weight 1 is -2; weights are finite numbers >= 0 (0 leaves a reader out)
    """
    sources = _sources(readers)
    values = _weights(weights, len(sources))
    if seed is None:
        raise BadType("mix() missing the required keyword argument 'seed': give seed=<int>, the same in every "
                      "process of a job, so that they all see one mix")
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise BadValue(f"mix: seed must be an int >= 0, got {seed!r}")
    if length is not None:
        length = whole(length, "length", "mix", 1, floats=False)
        if length >= MAX_LENGTH:
            raise BadValue(f"mix: length {length} is too long; give a length below 2**62")
    return Mixed(sources, values, int(seed), length, bool(origin))
