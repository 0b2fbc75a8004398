"""The stage protocol: the base class every readerkit reader derives from, and every hook it may define.

A stage is a reader (a zero-argument callable returning a fresh iterable of
entries) that knows its parents, so a pipeline can print itself, be told
which pass it is on, and say where a pass is. A pass runs in one of three
ways, declared by ``access``: as a stream of entries, as an index plan (a
source and the sample indices to read, which ``batch`` gathers with
vectorised takes and ``shard`` splits by arithmetic), or over the stage itself
when it has random access (``len`` and ``[i]``).

Every hook a stage may define, each with its contract. Every stage:

=================  ==========================================================
``name``           class attribute: the stage's name in reprs and errors
``_options()``     the options shown in the repr
``access``         "stream", "plan" or "index": how its passes run (above)
``_stream(p)``     pass p as an iterator of entries ("stream")
``_seek(p, c)``    pass p from cursor c; the default reads past c entries of
                   ``_stream(p)``, and a stage that can jump overrides it
``_plan(p, c)``    pass p from cursor c as an index ``Plan`` ("plan")
``positions``      how its cursor counts: its own entries (None), or its
                   parent's positions, k per entry (``readers.pipeline``)
``seed``           the seed that orders its passes, recorded in states
=================  ==========================================================

A stage with random access ("index"; ``IndexedReader`` is their base):

=================  ==========================================================
``__len__()``      the number of entries
``_get(i)``        entry i, for 0 <= i < len
``gather(idx)``    the entries at many indices, as any iterable: a list made
                   at once (vectorised), or an iterator making each as read
``gather_columns`` one array per column for many indices, or None
``sample_ids``     the source's sample IDs of many indices (a stage that
                   moves indices maps them back)
=================  ==========================================================

Stages that shard or run workers (``readers.pipeline.Node``):

=================  ==========================================================
``share()``        the share of its input's pass it keeps, or None
``per_entry``      whether a shard above may split the pass below it
``unresumable``    why no position of its passes can be saved, or None
=================  ==========================================================

Instance state must pickle: threads and processes belong to a pass, never
to the stage. The guide ``readers.guide`` works through two examples.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import numpy as np

from readers.checks import whole
from readers.passes import PassIterator, opened
from readers.pipeline import Node, describe
from readers.plans import Plan, index_chunks
from readers.position import check_layout, check_state

__all__ = ["IndexedReader", "Reader", "Stage", "access_of", "as_indexed", "is_indexed", "is_planned", "iterate",
           "open_plan"]

T = TypeVar("T")
Reader = Callable[[], Iterable[T]]

ACCESS = ("stream", "plan", "index")


class Stage(Node):
    """Base class of readerkit's readers: a picklable callable with parents (see the module doc for the hooks).

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
        return Plan(self, index_chunks(len(self), start=cursor))

    # -- running passes ------------------------------------------------------------------
    def run(self, pass_id: int, cursor: int = 0) -> Iterator:
        """The entries of pass ``pass_id`` from ``cursor``, whatever this stage's own count of calls says.

        >>> from readers import from_sequence, shuffle
        >>> r = shuffle(from_sequence(range(6)), seed=0)
        >>> list(r.run(3)) == list(r.run(3)), list(r.run(3, cursor=4)) == list(r.run(3))[4:]
        (True, True)
        """
        if self.access == "stream":
            return self._seek(pass_id, cursor)
        if self.access not in ACCESS:
            raise ValueError(f"{type(self).__name__} declares access={self.access!r}; access is one of {ACCESS}")
        return self._plan(pass_id, cursor).entries()

    def plan(self, pass_id: int, cursor: int = 0) -> Plan | None:
        """Pass ``pass_id`` from ``cursor`` as an index plan, or None when passes are streams.

        >>> from readers import from_sequence
        >>> plan = from_sequence("abc").plan(0, 1)
        >>> [plan.source[int(i)] for chunk in plan.chunks for i in chunk]
        ['b', 'c']
        """
        return None if self.access == "stream" else self._plan(pass_id, cursor)

    def __call__(self) -> PassIterator:
        if "parents" not in self.__dict__:
            raise TypeError(f"{type(self).__name__}.__init__ must call super().__init__(*parents) with the readers "
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

    # -- random access (access == "index") -----------------------------------------------
    def _get(self, i: int) -> Any:
        """Entry ``i``, for 0 <= i < len(self)."""
        raise NotImplementedError(f"{type(self).__name__} defines no _get")

    def __getitem__(self, i: int) -> Any:
        if self.access != "index":
            raise TypeError(f"{self.title()} has no random access ([i]): it is not built on an indexed reader")
        n = len(self)
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"sample index must be an int, got {type(i).__name__} {i!r}")
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

        >>> from readers import from_sequence, map_readers
        >>> it = iter(map_readers(lambda x: 1 // x, from_sequence([1, 0])).gather(np.arange(2)))
        >>> next(it)
        1
        """
        return map(self._get, indices.tolist())

    def gather_columns(self, indices: np.ndarray) -> tuple | np.ndarray | None:
        """One array per column for ``indices``, or None when entries are not columnar."""
        return None

    def sample_ids(self, indices: np.ndarray) -> np.ndarray:
        """The unique IDs of the samples at ``indices``: their index in the underlying source."""
        return indices


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


class _UserIndexed(IndexedReader):
    """Adapter for a user's object that is callable and has len and [i]."""

    def __init__(self, obj: Any):
        super().__init__()  # the object is shown in the options, not as a parent: it is no reader
        self.obj = obj

    def __len__(self) -> int:
        return len(self.obj)

    def _get(self, i: int) -> Any:
        return self.obj[i]

    def _options(self) -> str:
        return f"{describe(self.obj)}, len={len(self.obj)}"


def iterate(reader: Reader, pass_id: int | None = None, cursor: int = 0) -> Iterator:
    """Start a pass of ``reader`` and return its iterator, checking what it returned.

    Stages start their parents' passes with their own ``pass_id``, so a whole
    pipeline's randomness follows the pass of its outermost stage. A nonzero
    ``cursor`` starts the pass there (in ``reader``'s position units, see
    ``readers.position.advance``); a plain function's pass is read past its
    first ``cursor`` entries.

    >>> list(iterate(lambda: (x * x for x in range(3))))
    [0, 1, 4]
    >>> list(iterate(lambda: iter("abcd"), cursor=3))
    ['d']
    >>> iterate(lambda: 42)
    Traceback (most recent call last):
    ...
    TypeError: reader <lambda> returned int, which is not iterable; a reader must return a fresh iterable (a list, or a generator from a generator function)
    """
    if isinstance(reader, Stage) and pass_id is not None:
        return opened(reader.run(pass_id, cursor))
    result = opened(reader())
    try:
        it = iter(result)
        return itertools.islice(it, cursor, None) if cursor else it
    except TypeError:
        raise TypeError(
            f"reader {describe(reader)} returned {type(result).__name__}, which is not "
            "iterable; a reader must return a fresh iterable (a list, or a generator "
            "from a generator function)"
        ) from None


def is_planned(reader: Any) -> bool:
    """Whether ``reader``'s passes are index plans (indexed sources and what keeps them).

    >>> from readers import from_sequence, shuffle
    >>> is_planned(shuffle(from_sequence("abc"), seed=0)), is_planned(lambda: "abc")
    (True, False)
    """
    return isinstance(reader, Stage) and reader.access != "stream"


def access_of(reader: Any) -> str:
    """How ``reader``'s passes run: its declared ``access``, or "stream" for a plain reader.

    >>> from readers import from_sequence
    >>> access_of(from_sequence("ab")), access_of(lambda: iter("ab"))
    ('index', 'stream')
    """
    return reader.access if isinstance(reader, Stage) else "stream"


def is_indexed(reader: Any) -> bool:
    """Whether ``reader`` is a stage with random access (``len`` and ``[i]``).

    >>> from readers import from_sequence, shuffle
    >>> is_indexed(from_sequence("ab")), is_indexed(shuffle(from_sequence("ab"), seed=0))
    (True, False)
    """
    return isinstance(reader, Stage) and reader.access == "index"


def open_plan(reader: Any, pass_id: int, cursor: int = 0) -> Plan | None:
    """Start pass ``pass_id`` of ``reader`` (at ``cursor``) as an index plan, or return None for a stream.

    >>> from readers import from_sequence
    >>> plan = open_plan(from_sequence("abc"), 0)
    >>> [plan.source[int(i)] for chunk in plan.chunks for i in chunk]
    ['a', 'b', 'c']
    >>> open_plan(lambda: iter("abc"), 0) is None
    True
    """
    return reader.plan(pass_id, cursor) if isinstance(reader, Stage) else None


def as_indexed(reader: Any) -> Stage | None:
    """``reader`` as a stage with random access when it has ``len`` and ``[i]``, else None.

    >>> from readers import from_sequence
    >>> r = from_sequence([3, 4])
    >>> as_indexed(r) is r
    True
    >>> as_indexed(lambda: iter([3, 4])) is None
    True
    """
    if isinstance(reader, Stage):
        return reader if reader.access == "index" else None
    if callable(reader) and hasattr(reader, "__len__") and hasattr(reader, "__getitem__"):
        return _UserIndexed(reader)
    return None
