"""The reader protocol: the base class every readerkit reader derives from.

A stage is a reader (a zero-argument callable returning a fresh iterable)
that also knows its parents, so a pipeline can print itself, be told which
pass it is on, and, when it is made of index-addressable parts, plan a pass
as a stream of sample indices instead of entries (the batch fast path,
sharding and resume all stand on that plan).
"""
from __future__ import annotations

import functools
import inspect
import itertools
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np

from readers import allocator
from readers.plans import Plan, index_chunks, rechunk, slice_chunks

__all__ = [
    "Curried",
    "Derived",
    "IndexedReader",
    "Plan",
    "Reader",
    "PassIterator",
    "Stage",
    "advance",
    "append_column",
    "as_indexed",
    "check_reader",
    "close_iterator",
    "describe",
    "index_chunks",
    "is_native",
    "is_planned",
    "iterate",
    "open_plan",
    "rechunk",
    "slice_chunks",
    "walk",
    "whole",
    "within",
]

T = TypeVar("T")
Reader = Callable[[], Iterable[T]]

def describe(reader: Any) -> str:
    """A one-line name for any reader, for error messages and reprs; no memory addresses.

    >>> def numbers():
    ...     yield 1
    >>> describe(numbers)
    'numbers'
    >>> import functools
    >>> describe(functools.partial(numbers))
    'partial(numbers)'
    """
    if isinstance(reader, Stage):
        return reader._title()
    if isinstance(reader, functools.partial):
        args = [describe(reader.func), *map(repr, reader.args), *(f"{k}={v!r}" for k, v in reader.keywords.items())]
        return f"partial({', '.join(args)})"
    name = getattr(reader, "__qualname__", None) or getattr(reader, "__name__", None)
    return name or type(reader).__name__


def check_reader(reader: Any, role: str = "reader") -> Any:
    """Check eagerly that ``reader`` is a zero-argument callable; return it.

    >>> check_reader(lambda: [1, 2]) is not None
    True
    >>> check_reader([1, 2])
    Traceback (most recent call last):
    ...
    TypeError: reader must be a zero-argument callable returning an iterable, got list [1, 2]; wrap data with readers.from_sequence(...) or pass the generator function itself
    """
    if inspect.isgenerator(reader):
        raise TypeError(
            f"{role} must be a zero-argument callable, got a generator object "
            f"{describe(reader)!r}; pass the generator function itself (without "
            "calling it) so every pass can start afresh"
        )
    if not callable(reader):
        shown = repr(reader)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        raise TypeError(
            f"{role} must be a zero-argument callable returning an iterable, got "
            f"{type(reader).__name__} {shown}; wrap data with readers.from_sequence(...) "
            "or pass the generator function itself"
        )
    if not isinstance(reader, Stage):
        try:
            inspect.signature(reader).bind()
        except TypeError:
            raise TypeError(
                f"{role} {describe(reader)!r} cannot be called with no arguments; a reader "
                "takes none (use functools.partial or a reader creator to bind them)"
            ) from None
        except ValueError:  # builtins without a signature: accept and find out later
            pass
    return reader


def iterate(reader: Reader, pass_id: int | None = None, cursor: int = 0) -> Iterator:
    """Start a pass of ``reader`` and return its iterator, checking what it returned.

    Stages start their parents' passes with their own ``pass_id``, so a whole
    pipeline's randomness follows the pass of its outermost stage. A nonzero
    ``cursor`` starts the pass there (in ``reader``'s position units, see
    ``advance``); a plain function's pass is read past its first ``cursor`` entries.

    >>> list(iterate(lambda: (x * x for x in range(3))))
    [0, 1, 4]
    >>> list(iterate(lambda: iter("abcd"), cursor=3))
    ['d']
    >>> iterate(lambda: 42)
    Traceback (most recent call last):
    ...
    TypeError: reader <lambda> returned int, which is not iterable; a reader must return a fresh iterable (a list, or a generator from a generator function)
    """
    if isinstance(reader, Stage) and (pass_id is not None or cursor):
        return reader._start(reader._pass if pass_id is None else pass_id, cursor)
    result = reader()
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
    return isinstance(reader, Stage) and reader._planned()


def open_plan(reader: Any, pass_id: int, cursor: int = 0) -> Plan | None:
    """Start pass ``pass_id`` of ``reader`` (at ``cursor``) as an index plan, or return None for a stream.

    >>> from readers import from_sequence
    >>> plan = open_plan(from_sequence("abc"), 0)
    >>> [plan.source[int(i)] for chunk in plan.chunks for i in chunk]
    ['a', 'b', 'c']
    >>> open_plan(lambda: iter("abc"), 0) is None
    True
    """
    if isinstance(reader, Stage) and reader._planned():
        return reader._plan(pass_id, cursor)
    return None


def advance(reader: Any, start: int, consumed: int) -> int:
    """The cursor of a pass of ``reader`` begun at ``start`` once ``consumed`` items were taken.

    A cursor counts entries of the pass in the order a shard-free pipeline
    gives them: for most stages that is the count of their own entries, a
    batch counts the entries in its batches, and a shard counts in its input's
    order, so one cursor means the same on every shard of any shard count.

    >>> from readers import from_sequence
    >>> import batching
    >>> advance(from_sequence("abcdef"), 2, 3), advance(batching.batch(from_sequence("abcdef"), 2), 0, 2)
    (5, 4)
    """
    if isinstance(reader, Stage):
        return reader._advance(start, consumed)
    return start + consumed


def is_native(reader: Any) -> bool:
    """Whether ``reader``'s cursor is the count of its own entries (see ``advance``).

    >>> from readers import from_sequence, shard
    >>> is_native(from_sequence("ab")), is_native(shard(from_sequence("ab"), 0, 2))
    (True, False)
    """
    return not isinstance(reader, Stage) or reader._native()


def append_column(entry: Any, value: Any, key: str = "weight") -> Any:
    """``entry`` with ``value`` as a new last column; a single value becomes a pair, a dict gains ``key``.

    >>> append_column(("x", 1), 0.0), append_column("x", 0.0), append_column({"x": 1}, 0.0)
    (('x', 1, 0.0), ('x', 0.0), {'x': 1, 'weight': 0.0})
    """
    if isinstance(entry, tuple):
        return entry + (value,)
    if isinstance(entry, dict):
        if key in entry:
            raise ValueError(f"entries already have a {key!r} key, so a new {key!r} column would overwrite it; "
                             f"rename that key (entry keys: {sorted(entry)})")
        return {**entry, key: value}
    return (entry, value)


def close_iterator(it: Any) -> None:
    """Close ``it`` when it can be closed (a generator, a pass iterator); plain iterators need nothing.

    >>> def numbers():
    ...     yield 1
    ...     yield 2
    >>> g = numbers(); next(g); close_iterator(g); list(g)
    1
    []
    >>> close_iterator(iter([1]))
    """
    close = getattr(it, "close", None)
    if close is not None:
        close()


def within(reader: Any, cursor: int) -> int:
    """``cursor`` no further than the end of ``reader``'s pass, when its cursor counts its entries and it has a length.

    >>> from readers import from_sequence
    >>> within(from_sequence("abc"), 5), within(lambda: iter("abc"), 5)
    (3, 5)
    """
    if isinstance(reader, Stage) and reader._native():
        try:
            return min(cursor, len(reader))
        except TypeError:  # a stream: it has no length
            pass
    return cursor


def walk(reader: Any) -> Iterator:
    """Every stage of a pipeline, top down and depth first, ending with plain readers.

    >>> from readers import from_sequence, shuffle
    >>> [describe(s) for s in walk(shuffle(from_sequence("ab"), seed=0))]
    ['shuffle(buf_size=None (global), seed=0)', 'from_sequence(str of 2)']
    """
    yield reader
    for parent in getattr(reader, "parents", ()) if isinstance(reader, Stage) else ():
        yield from walk(parent)


def as_indexed(reader: Any) -> IndexedReader | None:
    """``reader`` as an IndexedReader when it has ``len`` and ``[i]``, else None.

    >>> from readers import from_sequence
    >>> r = from_sequence([3, 4])
    >>> as_indexed(r) is r
    True
    >>> as_indexed(lambda: iter([3, 4])) is None
    True
    """
    if isinstance(reader, IndexedReader):
        return reader
    if isinstance(reader, Stage):
        return None
    if callable(reader) and hasattr(reader, "__len__") and hasattr(reader, "__getitem__"):
        return _UserIndexed(reader)
    return None


def _end_of(flag: list) -> Iterator:
    """Chained after a pass's entries: runs once, when they run out, and yields nothing."""
    flag.append(True)  # a list, not the PassIterator: a cycle would delay closing an abandoned pass
    return
    yield


class PassIterator:
    """The iterator of one pass of a readerkit reader; ``get_state()`` says where it is.

    It counts what it hands out at C speed (``zip`` with ``itertools.count``),
    so a ``for`` loop over it costs no Python call per entry.

    >>> from readers import from_sequence
    >>> it = from_sequence("abc")()
    >>> next(it), it.get_state()
    ('a', {'pass': 0, 'cursor': 1, 'seed': None})
    >>> list(it), it.get_state()
    (['b', 'c'], {'pass': 1, 'cursor': 0, 'seed': None})
    """

    __slots__ = ("reader", "pass_id", "start", "_ended", "_raw", "_counter", "_fast")

    def __init__(self, reader: Stage, pass_id: int, start: int):
        self.reader, self.pass_id, self.start, self._ended = reader, pass_id, start, []
        self._raw = reader._start(pass_id, start)
        self._counter = itertools.count()
        # zip takes the entry first, so the counter moves only for entries handed out
        self._fast = map(_first, zip(itertools.chain(self._raw, _end_of(self._ended)), self._counter))

    @property
    def done(self) -> bool:
        """Whether the pass has run out."""
        return bool(self._ended)

    @property
    def consumed(self) -> int:
        """Entries handed out so far in this pass."""
        return int(repr(self._counter)[6:-1])  # "count(n)": the next value is the number taken

    def __iter__(self) -> Iterator:
        return self._fast

    def __next__(self) -> Any:
        return next(self._fast)

    def close(self) -> None:
        close_iterator(self._raw)

    def get_state(self) -> dict:
        """Where this pass is, as a small JSON-able dict for ``reader.set_state``.

        >>> from readers import from_sequence
        >>> it = from_sequence(range(5))()
        >>> [next(it) for _ in range(2)] and it.get_state()
        {'pass': 0, 'cursor': 2, 'seed': None}
        """
        from readers.state import state_of

        return state_of(self)


_first = operator.itemgetter(0)


class Stage:
    """Base class of readerkit's readers: a picklable callable with parents.

    Subclasses implement ``_stream(pass_id)`` (an iterator of entries) and,
    when ``_planned()`` is true, ``_plan(pass_id)`` (an index plan); or
    override ``_iter``. ``_options()`` feeds the repr. Instance state must
    pickle: threads and processes belong to a pass, never to the stage.
    """

    name = "stage"

    def __init__(self, *parents: Any):
        self.parents = parents
        self._pass = 0

    # -- passes -------------------------------------------------------------
    def _next_pass(self) -> int:
        k = self._pass
        self._pass = k + 1
        return k

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
        from readers.state import check_state

        self._resume = check_state(self, state)
        self._pass = self._resume[0]

    def __call__(self) -> Iterator:
        resume = self.__dict__.pop("_resume", None)
        if resume is None:
            return PassIterator(self, self._next_pass(), 0)
        from readers.state import check_layout

        pass_id, cursor, layout = resume
        check_layout(self, layout, cursor)
        self._pass = pass_id + 1
        return PassIterator(self, pass_id, cursor)

    def _start(self, pass_id: int, cursor: int = 0) -> Iterator:
        """Pass ``pass_id`` of this stage from ``cursor``, whatever its own count of calls says."""
        if not allocator._state["done"]:
            allocator.ensure_tuned()
        if not cursor:
            return self._iter(pass_id)
        if self._planned():
            return self._plan(pass_id, cursor).entries()
        return self._seek(pass_id, cursor)

    def _planned(self) -> bool:
        """Whether passes of this stage are index plans (fixed when it is built)."""
        return False

    # -- positions (see readers.state) ----------------------------------------
    #: True for stages whose entries are their parent's, one for one and in order (a map):
    #: their cursor is the parent's, whatever that counts.
    keeps_positions = False

    def _native(self) -> bool:
        """Whether this stage's cursor is the count of its own entries (false for batch and shard)."""
        return not self.keeps_positions or is_native(self.parents[0])

    def _advance(self, start: int, consumed: int) -> int:
        if self.keeps_positions:
            return advance(self.parents[0], start, consumed)
        return start + consumed

    def _seek(self, pass_id: int, cursor: int) -> Iterator:
        """A streamed pass ``pass_id`` from ``cursor``: stages that can jump override this; the rest read past.

        (A planned pass starts at its cursor through ``_plan`` instead.)
        """
        return itertools.islice(self._iter(pass_id), cursor, None)

    def _unresumable(self) -> str | None:
        """Why a position in this stage's passes cannot be saved, or None when it can."""
        return None

    def _iter(self, pass_id: int) -> Iterator:
        if self._planned():
            return self._plan(pass_id).entries()
        return self._stream(pass_id)

    def _stream(self, pass_id: int) -> Iterator:
        raise NotImplementedError(f"{type(self).__name__} defines neither _stream nor _plan")

    def _plan(self, pass_id: int, cursor: int = 0) -> Plan:
        raise NotImplementedError(f"{type(self).__name__} is not index-planned")

    def __bool__(self) -> bool:
        return True  # a reader is never falsy, even when it has a length

    # -- display ------------------------------------------------------------
    def _options(self) -> str:
        return ""

    def _title(self) -> str:
        return f"{self.name}({self._options()})"

    def _lines(self) -> list[str]:
        lines = [self._title()]
        for i, parent in enumerate(self.parents):
            last = i == len(self.parents) - 1
            sub = parent._lines() if isinstance(parent, Stage) else [describe(parent)]
            lines.append(("└─ " if last else "├─ ") + sub[0])
            lines.extend(("   " if last else "│  ") + line for line in sub[1:])
        return lines

    def __repr__(self) -> str:
        return "\n".join(self._lines())


class IndexedReader(Stage):
    """A reader with ``len(r)`` and ``r[i]``; iterating gives entries 0..len-1.

    Subclasses implement ``__len__`` and ``_get(i)`` for 0 <= i < len; they
    may override ``gather`` (a batch of entries, vectorised) or ``iter_gather``
    (the same, lazily: for per-entry work), and ``gather_columns`` (one array
    per column, for the collate fast path).
    """

    name = "indexed"

    def __len__(self) -> int:
        raise NotImplementedError

    def _get(self, i: int) -> Any:
        raise NotImplementedError

    def __getitem__(self, i: int) -> Any:
        n = len(self)
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"sample index must be an int, got {type(i).__name__} {i!r}")
        i = int(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"sample index {i} out of range for {self._title()} of length {n}")
        return self._get(i)

    def gather(self, indices: np.ndarray) -> Sequence:
        """Entries at ``indices`` (in-range, non-negative), as a sequence."""
        if type(self).iter_gather is not IndexedReader.iter_gather:  # a lazy form of its own
            return list(self.iter_gather(indices))
        get = self._get
        return [get(i) for i in indices.tolist()]

    def iter_gather(self, indices: np.ndarray) -> Iterator:
        """The entries of ``gather(indices)``, each made as it is read (a pass reads through this).

        Per-entry work (``_get``, a map) is done as the consumer takes entries,
        not a whole chunk ahead of it; a source with its own (vectorised)
        ``gather`` is read one gather at a time. Subclasses override one of the two
        (each defaults to the other's override).

        >>> from readers import from_sequence, map_readers
        >>> import numpy as np
        >>> it = map_readers(lambda x: 1 // x, from_sequence([1, 0])).iter_gather(np.arange(2))
        >>> next(it)
        1
        """
        if type(self).gather is not IndexedReader.gather:  # a vectorised gather of its own
            return iter(self.gather(indices))
        return map(self._get, indices.tolist())

    def gather_columns(self, indices: np.ndarray) -> tuple | None:
        """One array per column for ``indices``, or None when entries are not columnar."""
        return None

    def sample_ids(self, indices: np.ndarray) -> np.ndarray:
        """The unique IDs of the samples at ``indices``: their index in the underlying source."""
        return indices

    def _planned(self) -> bool:
        return True

    def _plan(self, pass_id: int, cursor: int = 0) -> Plan:
        return Plan(self, index_chunks(len(self), start=cursor))


class Derived(IndexedReader):
    """An indexed reader computed entry by entry from one indexed source of the same length."""

    def __init__(self, source: IndexedReader):
        super().__init__(source)
        self.source = source

    def __len__(self) -> int:
        return len(self.source)

    def sample_ids(self, indices: np.ndarray) -> np.ndarray:
        return self.source.sample_ids(indices)


class Curried:
    """A decorator that waits for its reader when only options are given.

    Called with the reader (at position ``reader_at``), it runs at once, so a
    missing option is reported then; called without it, it returns a
    ``functools.partial`` for ``toolz.pipe``. Module-level, so it pickles.

    >>> def scale(reader, factor):
    ...     return lambda: (x * factor for x in reader())
    >>> times3 = Curried(scale)
    >>> list(times3(factor=3)(lambda: [1, 2])())
    [3, 6]
    >>> times3(lambda: [1, 2])
    Traceback (most recent call last):
    ...
    TypeError: scale() missing 1 required positional argument: 'factor'
    """

    def __init__(self, func: Callable, reader_at: int = 0):
        self.func, self.reader_at = func, reader_at
        functools.update_wrapper(self, func)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) > self.reader_at:
            return self.func(*args, **kwargs)
        return functools.partial(self.func, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<readerkit decorator {self.func.__module__}.{self.func.__qualname__}>"


def whole(value: Any, name: str, where: str, minimum: int = 0, *, floats: bool = True) -> int:
    """``value`` as an int >= ``minimum``; integral floats are accepted (as Paddle does) unless not ``floats``.

    >>> whole(32.0, "batch_size", "batch", 1)
    32
    >>> whole(2.5, "n", "firstn")
    Traceback (most recent call last):
    ...
    ValueError: firstn: n must be an int >= 0, got 2.5
    >>> whole(3.0, "passes", "train", floats=False)
    Traceback (most recent call last):
    ...
    ValueError: train: passes must be an int >= 0, got 3.0
    """
    ok = not isinstance(value, (bool, np.bool_))
    if ok and isinstance(value, (float, np.floating)):
        ok = floats and float(value).is_integer()
    elif ok:
        try:
            value = operator.index(value)
        except TypeError:
            ok = False
    if not ok or value < minimum:
        raise ValueError(f"{where}: {name} must be an int >= {minimum}, got {value!r}")
    return int(value)


class _UserIndexed(IndexedReader):
    """Adapter for a user's object that is callable and has len and [i]."""

    name = "indexed"

    def __init__(self, obj: Any):
        super().__init__(obj)
        self.obj = obj

    def __len__(self) -> int:
        return len(self.obj)

    def _get(self, i: int) -> Any:
        return self.obj[i]

    def _title(self) -> str:
        return f"indexed({describe(self.obj)}, len={len(self.obj)})"

    def _lines(self) -> list[str]:
        return [self._title()]
