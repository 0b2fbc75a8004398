"""The stage protocol: the base class every readerkit reader derives from, and every hook it may define.

A stage is a reader (a zero-argument callable returning a fresh iterable of
entries) that knows its parents, so a pipeline can print itself, be told
which pass it is on, and say where a pass is. A pass runs in one of three
ways, declared by ``access``: as a stream of entries, as an index plan (a
source and the sample indices to read, which ``batch`` gathers with
vectorised takes and ``shard`` splits by arithmetic), or over the stage itself
when it has random access (``len`` and ``[i]``).

These tables are the whole contract: every hook a stage may define, each with
its default in ``Stage`` or ``readers.graph.Node``. Nothing else in readerkit
looks for an attribute a stage did not declare here. Every stage:

==================  ==========================================================
``name``            class attribute: the stage's name in reprs and errors
``_options()``      the options shown in the repr ("buf_size=10, seed=0")
``access``          "stream", "plan" or "index": how its passes run (above)
``_stream(p)``      pass p as an iterator of entries ("stream")
``_seek(p, c)``     pass p from cursor c; the default reads past c entries of
                    ``_stream(p)``, and a stage that can jump overrides it
``_plan(p, c)``     pass p from cursor c as an index ``Plan`` ("plan"); the
                    default (for "index") plans this stage's own indices
``positions``       how its cursor counts: its own entries (None), or its
                    parent's positions, k per entry (1 for a map)
``seed``            the seed that orders or draws its passes: pass p depends
                    on (seed, p) only; recorded in states
``finish_pass()``   called on every stage when a pass of its pipeline runs
                    out or is closed (also by workers when their part ends): a
                    stage that buffers writes (``readers.cached``) ends them
``with_parents()``  a copy of the stage reading other parents (a shard that
                    splits below it; a pass binding it); the default copies
                    its fields, and a stage with per-copy state overrides it
==================  ==========================================================

A stream may define ``__len__`` too, when the exact number of entries of a
pass is known before it (a batch over an indexed reader), and raise
TypeError when it is not; ``readers.position`` takes it as the end of a pass.

A stage with random access ("index"; ``IndexedReader`` is their base). A
pass reads random access through ``for_pass(p)``: the stage itself, or, when
a stage of the pipeline draws per pass, a copy whose ``bound_pass`` is p:

==================  ==========================================================
``__len__()``       the number of entries
``_get(i)``         entry i, for 0 <= i < len
``gather(idx)``     the entries at many indices, as any iterable: a list made
                    at once (vectorised), or an iterator making each as read
``gather_columns``  one array per column for many indices, or None
``column_arrays``   the arrays ``gather_columns`` takes its columns from
                    (a tuple, or one array): ``gather_columns(idx)`` is
                    ``plans.take_rows(a, idx)`` of each; None (the default)
                    when it does more than take. ``batching.collated`` takes
                    numeric ones itself, with C iterators and no check a batch
``wire_columns``    ``gather_columns`` in fewer bytes for a server to send
                    (a token file's own dtype), and how the client turns
                    them back (``readers.network.wire.decode_column``); None
                    (the default) sends ``gather_columns``
``sample_ids``      the source's sample IDs of many indices (a stage that
                    moves indices maps them back)
``groups()``        the row offsets of the groups its rows are read in (a
                    Parquet file's row groups), or None (the default);
                    ``readers.shuffle_row_groups`` keeps to them
``gather_ahead``    (indices, columns) for each of many index chunks, in
                    order; a source that fetches (``readers.remote``) has the
                    next chunks under way while the consumer works
``bound_pass``      read, not defined: the pass this copy's random access
                    serves, None outside a pass (read as pass 0); a stage
                    that draws per pass keys its draws on it
==================  ==========================================================

Stages that shard or run workers (``readers.ops.sharding``, ``readers.workers``):

==================  ==========================================================
``share()``         the share of its input's pass it keeps, or None
``per_entry``       whether a shard above may split the pass below it
``unresumable``     why no position of its passes can be saved, or None
``in_workers()``    the worker contexts its parent's passes run in, when
                    the shares below follow those workers (a prefetch
                    over ``tar_shards``); a position's layout lists each
``share_count()``   for a source that splits its files by worker: its
                    share's entries in a pass, counted cheaply up to a
                    limit, so a prefetch resumes each worker where it was
==================  ==========================================================

What the pipeline is (``readers.inspection``, ``readers.identity``):

==================  ==========================================================
``draws_per_pass``  whether its entries are drawn anew each pass from its
                    seed (``readers.random_map``), not only reordered
``unrepeatable``    why another run would not give its passes again (a seed
                    drawn with seed=None), or None
``batched``         whether its entries are minibatches (``batching.batch``)
``identity()``      the stage in the data's identity: its title, less the
                    paths or folders its data was read from; a stage that
                    holds a user function adds ``function_identity(func)``
``digest()``        a source's digest of its data (a file's SHA-256, a
                    sampled hash of arrays), or None when it cannot say
``stands_for()``    for a stage that reads a pipeline held elsewhere
                    (``readers.remote``), that pipeline's identity parts
``by_key()``        for a timestamped stream, the indexed reader its keys
                    index (continual pipelines read trigger sets from it)
==================  ==========================================================

Instance state must pickle: threads and processes belong to a pass, never
to the stage. The guide ``readers.guide`` works through three examples;
``readers.parents`` has the helpers a stage uses on its parents.
"""
from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import numpy as np

from readers.checks import whole
from readers.errors import BadType, BadValue
from readers.graph import Node, drawing_stage
from readers.passes import PassIterator
from readers.plans import Plan, index_chunks, slice_chunks
from readers.position import check_layout, check_state, is_native

__all__ = ["ACCESS", "IndexedReader", "Reader", "Stage"]

T = TypeVar("T")
Reader = Callable[[], Iterable[T]]

ACCESS = ("stream", "plan", "index")


class Stage(Node):
    """Base class of readerkit's readers: a picklable callable with parents (see the module doc for the hooks).

    >>> from readers.parents import iterate
    >>> class Doubled(Stage):
    ...     name = "doubled"
    ...     positions = 1  # one entry per parent entry, in order: it resumes at its parent's cursor
    ...     def _seek(self, pass_id, cursor):
    ...         return (2 * x for x in iterate(self.parents[0], pass_id, cursor))
    >>> r = Doubled(lambda: iter(range(4)))
    >>> list(r()), list(r.run(0, cursor=2))
    ([0, 2, 4, 6], [4, 6])
    """

    #: How passes run: "stream" (``_stream``/``_seek``), "plan" (``_plan``) or "index" (random access).
    access: str = "stream"

    def __init__(self, *parents: Any):
        super().__init__(*parents)
        self._pass = 0

    # -- the hooks ---------------------------------------------------------------------
    def _stream(self, pass_id: int) -> Iterator:
        """Pass ``pass_id`` from its start, as an iterator of entries."""
        raise NotImplementedError(f"{type(self).__name__} defines neither _stream nor _seek")

    def _seek(self, pass_id: int, cursor: int) -> Iterator:
        """Pass ``pass_id`` from ``cursor`` (in this stage's position units): reads past by default."""
        if cursor and self.positions is not None:
            raise NotImplementedError(
                f"{type(self).__name__} declares positions={self.positions!r}, so its cursor counts its parent's "
                f"positions, not its own entries, and reading past {cursor} of them would resume in the wrong "
                "place: define _seek(pass_id, cursor), starting the parent there with "
                "iterate(self.parents[0], pass_id, cursor)")
        entries = self._stream(pass_id)
        return itertools.islice(entries, cursor, None) if cursor else entries

    def _plan(self, pass_id: int, cursor: int) -> Plan:
        """Pass ``pass_id`` from ``cursor`` as an index plan; by default, this stage's own indices in order."""
        if self.access != "index":
            raise NotImplementedError(f"{type(self).__name__} declares access={self.access!r} and defines no _plan")
        return Plan(self.for_pass(pass_id), index_chunks(len(self), start=cursor))

    # -- running passes ------------------------------------------------------------------
    def _reads_past(self, cursor: int) -> bool:
        """Whether a pass from ``cursor`` must read past entries: the stage counts its own entries (positions
        None), and a parent's cursor counts other things (a batch's, a shard's), so no parent can jump there."""
        return bool(cursor) and self.positions is None and not all(map(is_native, self.parents))

    def run(self, pass_id: int, cursor: int = 0) -> Iterator:
        """The entries of pass ``pass_id`` from ``cursor``, whatever this stage's own count of calls says.

        Where no parent can jump to the cursor, the pass is read past it, so
        ``_seek`` and ``_plan`` meet a nonzero cursor only when they can.

        >>> from readers import from_sequence, shuffle
        >>> r = shuffle(from_sequence(range(6)), seed=0)
        >>> list(r.run(3)) == list(r.run(3)), list(r.run(3, cursor=4)) == list(r.run(3))[4:]
        (True, True)
        """
        if self.access == "stream":
            if self._reads_past(cursor):
                return itertools.islice(self._seek(pass_id, 0), cursor, None)
            return self._seek(pass_id, cursor)
        return self.plan(pass_id, cursor).entries()

    def plan(self, pass_id: int, cursor: int = 0) -> Plan | None:
        """Pass ``pass_id`` from ``cursor`` as an index plan, or None when passes are streams.

        >>> from readers import from_sequence
        >>> plan = from_sequence("abc").plan(0, 1)
        >>> [plan.source[int(i)] for chunk in plan.chunks for i in chunk]
        ['b', 'c']
        """
        if self.access == "stream":
            return None
        if self.access not in ACCESS:
            raise BadValue(f"{type(self).__name__} declares access={self.access!r}; access is one of {ACCESS}")
        if self._reads_past(cursor):
            plan = self._plan(pass_id, 0)
            return Plan(plan.source, slice_chunks(plan.chunks, cursor))
        return self._plan(pass_id, cursor)

    @property
    def next_pass(self) -> int:
        """The pass the next call starts (``set_pass`` and ``set_state`` choose it; each call moves it on).

        >>> from readers import from_sequence
        >>> r = from_sequence("ab")
        >>> _ = list(r()); r.next_pass
        1
        """
        return self._pass

    def __call__(self) -> PassIterator:
        if "parents" not in self.__dict__:
            raise BadType(f"{type(self).__name__}.__init__ must call super().__init__(*parents) with the readers "
                          "the stage reads (none for a source)")
        resume = self.__dict__.pop("_resume", None)
        if resume is None:
            pass_id, cursor = self._pass, 0
        else:
            pass_id, cursor, layout = resume
            check_layout(self, layout, cursor)
        self._pass = pass_id + 1
        return PassIterator(self, pass_id, cursor)

    def set_pass(self, pass_id: int) -> None:
        """Make the next call start pass ``pass_id``; later calls go on from there.

        >>> from readers import from_sequence, shuffle
        >>> r = shuffle(from_sequence(range(5)), seed=1)
        >>> first = list(r())
        >>> r.set_pass(0)
        >>> list(r()) == first
        True
        """
        self._pass = whole(pass_id, "pass_id", "set_pass", floats=False)
        self.__dict__.pop("_resume", None)

    def set_state(self, state: dict) -> None:
        """Make the next call resume where ``state`` (from ``get_state()`` of a pass) was taken.

        The state is a small plain dict ``{"pass", "cursor", "seed"}``. Its
        cursor counts entries in the pipeline's order before any shard, so a
        state saved by one shard layout resumes on another: ranks that saved
        at the same step with 4 shards can resume with 3, and together they see
        the rest of the pass exactly once. Streams resume by reading past the
        cursor; index-addressed pipelines jump there.

        >>> from readers import from_sequence, shuffle
        >>> r = shuffle(from_sequence(range(6)), seed=0)
        >>> it = r()
        >>> head = [next(it), next(it)]
        >>> state = it.get_state()
        >>> state
        {'pass': 0, 'cursor': 2, 'seed': 0}
        >>> r.set_state(state)
        >>> head + list(r()) == list(shuffle(from_sequence(range(6)), seed=0)())
        True
        """
        self._resume = check_state(self, state)
        self._pass = self._resume[0]

    def __iter__(self) -> Iterator:
        if self.access != "index":
            raise BadType(f"{type(self).__name__!r} object is not iterable: a reader is called for a pass, so "
                          f"iterate {self.name}(...)() rather than {self.name}(...)")
        return map(self._get, range(len(self)))  # a sequence's entries, as before random access had its own __iter__

    # -- random access (access == "index") -----------------------------------------------
    #: The pass this copy's random access serves (``for_pass``); None outside a pass, read as pass 0.
    bound_pass: int | None = None

    def for_pass(self, pass_id: int) -> Stage:
        """This stage's random access as pass ``pass_id`` reads it.

        It is the stage itself unless a stage of its pipeline draws per pass
        (``draws_per_pass``): then a copy, over parents bound alike, whose
        ``bound_pass`` is ``pass_id``. A pass's plan reads through it, so a
        stage's ``_get`` and ``gather`` know the pass without being told.

        >>> from readers import from_sequence, random_map
        >>> plain = from_sequence("ab")
        >>> plain.for_pass(3) is plain
        True
        >>> noisy = random_map(lambda entry, rng: entry, plain, seed=0)
        >>> noisy.bound_pass, noisy.for_pass(3).bound_pass
        (None, 3)
        """
        if self.bound_pass == pass_id or drawing_stage(self) is None:
            return self
        bound = self.with_parents(*(p.for_pass(pass_id) if isinstance(p, Stage) else p for p in self.parents))
        bound.bound_pass = pass_id
        return bound

    def _get(self, i: int) -> Any:
        """Entry ``i``, for 0 <= i < len(self)."""
        raise NotImplementedError(f"{type(self).__name__} defines no _get")

    def at(self, i: int) -> Any:
        """Entry ``i`` without the checks of ``[i]`` (0 <= i < len): what a stage asks of its parent.

        >>> from readers import from_sequence
        >>> from_sequence("abc").at(1)
        'b'
        """
        return self._get(i)

    def __getitem__(self, i: int) -> Any:
        if self.access != "index":
            raise BadType(f"{self.title()} has no random access ([i]): it is not built on an indexed reader")
        n = len(self)
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise BadType(f"sample index must be an int, got {type(i).__name__} {i!r}")
        i = int(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"sample index {i} out of range for {self.title()} of length {n}")
        return self._get(i)

    def gather(self, indices: np.ndarray) -> Iterable:
        """The entries at ``indices`` (in range, non-negative), in order.

        A pass reads through this, one chunk of a plan at a time: return a list
        when the entries are made at once (a vectorised take), or an iterator
        that makes each as it is read (per-entry work, such as a map).

        Callers that want a sequence call ``list(r.gather(indices))``.

        >>> from readers import from_sequence, map_readers
        >>> it = iter(map_readers(lambda x: 1 // x, from_sequence([1, 0])).gather(np.arange(2)))
        >>> next(it)
        1
        """
        return map(self._get, indices.tolist())

    def iter_gather(self, indices: np.ndarray) -> Iterator:
        """Deprecated: ``gather`` itself may give the entries lazily now; use ``iter(r.gather(indices))``."""
        warnings.warn("iter_gather is deprecated: gather may give the entries lazily now; use iter(r.gather(...))",
                      DeprecationWarning, stacklevel=2)
        return iter(self.gather(indices))

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "iter_gather" in vars(cls) and "gather" not in vars(cls):  # written for the two gathers of readerkit 0.1
            warnings.warn(f"{cls.__name__} defines iter_gather, which is now gather (it may return an iterator); "
                          "rename it", DeprecationWarning, stacklevel=2)
            cls.gather = vars(cls)["iter_gather"]

    def gather_columns(self, indices: np.ndarray) -> tuple | np.ndarray | None:
        """One array per column for ``indices``, or None when entries are not columnar."""
        return None

    def column_arrays(self) -> tuple | np.ndarray | None:
        """The arrays ``gather_columns`` takes from, when ``gather_columns(idx)`` is ``take_rows(a, idx)`` of each (a
        tuple of arrays, or one array for one), or None (the default) when it does more than that.

        >>> from readers import from_arrays, from_sequence
        >>> [a.tolist() for a in from_arrays(np.arange(2), np.ones(2)).column_arrays()]
        [[0, 1], [1.0, 1.0]]
        >>> from_sequence("ab").column_arrays() is None
        True
        """
        return None

    def wire_columns(self, indices: np.ndarray) -> tuple[Any, Any] | None:
        """``(columns, decodes)``: ``gather_columns(indices)`` in narrower dtypes, and for each column (or the one
        array) None or ``{"as": dtype, "divide": number}``, how ``readers.network.wire.decode_column`` turns it
        into ``gather_columns``'s exactly; None (the default) when there is nothing narrower to send.

        >>> from readers import from_sequence
        >>> from_sequence("ab").wire_columns(np.arange(2)) is None
        True
        """
        return None

    def gather_ahead(self, chunks: Iterable[np.ndarray]) -> Iterator[tuple[np.ndarray, Any]]:
        """``(indices, gather_columns(indices))`` for each chunk of ``chunks``, in order, read as the consumer
        takes them; a source whose reads wait on a network overrides it to read ahead (``readers.remote``).

        >>> from readers import from_sequence
        >>> [(i.tolist(), c) for i, c in from_sequence("ab").gather_ahead([np.arange(2)])]
        [([0, 1], None)]
        """
        for indices in chunks:
            yield indices, self.gather_columns(indices)

    def sample_ids(self, indices: np.ndarray) -> np.ndarray:
        """The unique IDs of the samples at ``indices``: their index in the underlying source."""
        return indices

    def groups(self) -> np.ndarray | None:
        """The row offsets of the groups rows are read in (group g: rows ``offsets[g]`` to ``offsets[g + 1] - 1``),
        or None when rows are read one by one alike."""
        return None


class IndexedReader(Stage):
    """A reader with ``len(r)`` and ``r[i]``; iterating gives entries 0..len-1.

    Subclasses define ``__len__`` and ``_get(i)`` for 0 <= i < len, and may
    define ``gather`` (vectorised), ``gather_columns`` and ``sample_ids``.

    >>> class Squares(IndexedReader):
    ...     name = "squares"
    ...     def __len__(self):
    ...         return 4
    ...     def _get(self, i):
    ...         return i * i
    >>> r = Squares()
    >>> list(r()), r[-1]
    ([0, 1, 4, 9], 9)
    """

    name = "indexed"
    access = "index"

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} defines no __len__")
