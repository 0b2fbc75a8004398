"""Entry-by-entry decorators: map_readers, random_map and with_index.

Entry i of each is made from entry i of its parent, so each keeps its
parent's access: over an indexed reader it is indexed (``len``, ``[i]``,
vectorised gathers), over an index-planned pipeline (a shuffle, a shard) it is
planned, and over a stream it streams. One class per decorator serves all three.
"""
from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from readers.checks import check_reader
from readers.errors import BadType, BadValue
from readers.graph import describe
from readers.identity import function_identity
from readers.ops.shuffling import check_seed
from readers.parents import access_of, as_indexed, iterate, open_plan
from readers.plans import Plan
from readers.stage import Stage

__all__ = ["append_column", "key_id", "map_readers", "random_map", "sample_rng", "with_index"]


def append_column(entry: Any, value: Any, key: str = "weight") -> Any:
    """``entry`` with ``value`` as a new last column; a single value becomes a pair, a dict gains ``key``.

    >>> append_column(("x", 1), 0.0), append_column("x", 0.0), append_column({"x": 1}, 0.0)
    (('x', 1, 0.0), ('x', 0.0), {'x': 1, 'weight': 0.0})
    """
    if isinstance(entry, tuple):
        return entry + (value,)
    if isinstance(entry, dict):
        if key in entry:
            raise BadValue(f"entries already have a {key!r} key, so a new {key!r} column would overwrite it; "
                           f"rename that key (entry keys: {sorted(entry)})")
        return {**entry, key: value}
    return (entry, value)


class _EntryByEntry(Stage):
    """A stage whose entry i is made from its parent's entry i: it keeps the parent's access, length and IDs."""

    @property
    def access(self) -> str:
        return access_of(self.parents[0])

    def __len__(self) -> int:
        return len(self.parents[0])

    def sample_ids(self, indices: np.ndarray) -> np.ndarray:
        return self.parents[0].sample_ids(indices)

    def groups(self) -> np.ndarray | None:
        # entry i is read with the parent's row i, so its row groups are this stage's (a zip of several has none)
        return self.parents[0].groups() if len(self.parents) == 1 else None

    def _plan(self, pass_id: int, cursor: int) -> Plan:
        if self.access == "index":
            return super()._plan(pass_id, cursor)
        plan = open_plan(self.parents[0], pass_id, cursor)  # the same indices, this stage over their source
        return Plan(self.with_parents(plan.source).for_pass(pass_id), plan.chunks)


# -- map ---------------------------------------------------------------------------


class Mapped(_EntryByEntry):
    """``func`` over the zipped entries of the parents (see ``map_readers``)."""

    name = "map_readers"
    per_entry = "map"

    def __init__(self, func: Callable, *readers: Any):
        super().__init__(*readers)
        self.func = func

    @property
    def access(self) -> str:
        return super().access if len(self.parents) == 1 else "stream"

    @property
    def positions(self) -> int | None:
        return 1 if len(self.parents) == 1 else None  # one reader: its cursor is the parent's

    def __len__(self) -> int:
        if len(self.parents) != 1:
            raise BadType("map_readers of several readers has no length (it stops at the shortest)")
        return super().__len__()

    def _get(self, i: int) -> Any:
        return self.func(self.parents[0].at(i))

    def gather(self, indices: np.ndarray) -> Iterator:
        return map(self.func, self.parents[0].gather(indices))

    def _seek(self, pass_id: int, cursor: int) -> Iterator:
        return map(self.func, *[iterate(r, pass_id, cursor) for r in self.parents])

    def _options(self) -> str:
        return describe(self.func)

    def identity(self) -> str:
        """The map by its function's name and code, so that other preprocessing is other data.

        >>> from readers import from_sequence
        >>> map_readers(lambda e: e * 2, from_sequence([1])).identity()
        'map_readers(<lambda> ...)'
        """
        return f"{self.name}({function_identity(self.func)})"


def map_readers(func: Callable, *readers: Any) -> Stage:
    """Apply ``func`` to the zipped entries of ``readers``; stops at the shortest.

    With one reader, ``func`` gets each entry; with several, one argument per
    reader. A map over an indexed reader is indexed. Without readers it
    returns a stage waiting for them, for ``toolz.pipe``.

    >>> def double(x):
    ...     return 2 * x
    >>> list(map_readers(double, lambda: range(3))())
    [0, 2, 4]
    >>> list(map_readers(lambda a, b: a + b, lambda: [1, 2, 3], lambda: [10, 20])())
    [11, 22]
    >>> from readers import from_sequence
    >>> map_readers(double, from_sequence([5, 6]))[1]
    12
    >>> import readers
    >>> list(readers.map_readers(double)(lambda: [4])())
    [8]

    See Also:
        xmap_readers: the same in parallel threads.
    """
    if not callable(func):
        raise BadType(f"map_readers: func must be callable, got {type(func).__name__} {func!r}")
    if not readers:
        raise BadType("map_readers needs at least one reader after func (readers.map_readers(func) waits for them)")
    for i, r in enumerate(readers):
        check_reader(r, f"map_readers reader {i}")
    if len(readers) == 1:
        readers = (as_indexed(readers[0]) or readers[0],)
    return Mapped(func, *readers)


# -- random_map --------------------------------------------------------------------


def sample_rng(seed: int, pass_id: int, sample_id: int) -> np.random.Generator:
    """The random generator of one sample in one pass: a function of ``(seed, pass_id, sample_id)`` alone.

    Its stream is independent of every other sample's and pass's (numpy's
    ``SeedSequence`` with the pass and the sample as its spawn key), so a
    sample drawn in any worker, shard, rank or resumed run draws the same.

    >>> a, b = sample_rng(0, 1, 7).random(), sample_rng(0, 1, 7).random()
    >>> a == b, a != sample_rng(0, 2, 7).random(), a != sample_rng(0, 1, 8).random()
    (True, True, True)
    """
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(pass_id, sample_id))))


def key_id(value: Any) -> int:
    """A sample's ID from what names it: an int from 0 up as it is; a str, bytes or other int by a 63-bit digest.

    >>> key_id(7), key_id("cat.jpg") == key_id("cat.jpg") != key_id(b"cat.jpg")
    (7, True)
    """
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and 0 <= value < 1 << 63:
        return int(value)
    if isinstance(value, (bytes, bytearray)):
        named = b"b:" + bytes(value)
    elif isinstance(value, str):
        named = b"s:" + value.encode()
    elif isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        named = f"i:{int(value)}".encode()
    else:
        raise BadType(f"random_map: key returned {type(value).__name__} {value!r:.60}; a key names a sample for good: "
                      "an int, str or bytes")
    import hashlib  # on first use, as in readers.digests

    return int.from_bytes(hashlib.blake2b(named, digest_size=8).digest(), "little") >> 1


class RandomMapped(_EntryByEntry):
    """``func(entry, rng)`` with a generator per sample and pass (see ``random_map``)."""

    name = "random_map"
    draws_per_pass = True

    def __init__(self, func: Callable, reader: Any, seed: int, key: Callable | None):
        super().__init__(reader)
        self.func, self.seed, self.key = func, seed, key

    @property
    def positions(self) -> int | None:
        # a stream without a key draws by its own entries' positions; else each entry by its sample, one for one
        return None if self.key is None and self.access == "stream" else 1

    @property
    def per_entry(self) -> str | None:
        return None if self.key is None else "map"  # keyed: a shard above may split the stream below it

    def _rng(self, sample_id: int) -> np.random.Generator:
        return sample_rng(self.seed, self.bound_pass or 0, sample_id)

    def _keyed(self, entry: Any, pass_id: int) -> Any:
        return self.func(entry, sample_rng(self.seed, pass_id, key_id(self.key(entry))))

    def _get(self, i: int) -> Any:
        parent = self.parents[0]
        if self.key is not None:
            return self._keyed(parent.at(i), self.bound_pass or 0)
        return self.func(parent.at(i), self._rng(int(parent.sample_ids(np.array([i], np.int64))[0])))

    def gather(self, indices: np.ndarray) -> Iterator:
        parent = self.parents[0]
        if self.key is not None:
            return map(self._keyed, parent.gather(indices), itertools.repeat(self.bound_pass or 0))
        return map(self.func, parent.gather(indices), map(self._rng, parent.sample_ids(indices).tolist()))

    def _seek(self, pass_id: int, cursor: int) -> Iterator:
        entries = iterate(self.parents[0], pass_id, cursor)
        if self.key is not None:
            return map(self._keyed, entries, itertools.repeat(pass_id))
        return map(self.func, entries, (sample_rng(self.seed, pass_id, k) for k in itertools.count(cursor)))

    def _options(self) -> str:
        return f"{describe(self.func)}, seed={self.seed}" + ("" if self.key is None else f", key={describe(self.key)}")

    def identity(self) -> str:
        """The stage by its function's name and code, its seed and its key: other draws are other data.

        >>> from readers import from_sequence
        >>> random_map(lambda e, rng: e, from_sequence([1]), seed=3).identity()
        'random_map(<lambda> ..., seed=3)'
        """
        keyed = "" if self.key is None else f", key={function_identity(self.key)}"
        return f"{self.name}({function_identity(self.func)}, seed={self.seed}{keyed})"


def random_map(func: Callable, reader: Any, *, seed: int | None, key: Callable | None = None) -> Stage:
    """Apply ``func(entry, rng)`` to each entry, ``rng`` a numpy Generator drawn from (seed, pass, sample ID).

    For random augmentation: each pass draws afresh, and a sample gets the
    same draw wherever it is read (any number of thread or process workers,
    any shard or rank, after a resume), because its generator is
    ``sample_rng(seed, pass, sample ID)`` and nothing else. Over an indexed
    reader it stays indexed (``len``, ``[i]``, ``gather``), so a ``shuffle``,
    ``shard`` or ``batch`` above keeps its fast paths, and the sample ID is the
    source's index. Random access outside a pass (``r[i]``) reads pass 0.

    Over a stream the sample ID is the entry's position in the pass, which
    only the whole stream knows: a shard or workers above it then apply
    ``func`` to every entry in every one of them and keep their share. Give
    ``key``, a function of an entry that names its sample for good (an int,
    str or bytes: a WebDataset ``__key__``, a file name), and the draw follows
    that name instead, whatever the stream's order, and workers each augment
    only their own share.

    It exists because the usual way draws alike: numpy's global generator is
    copied into every DataLoader worker, so torch users get the same "random"
    crop in every worker, and again after a restart. In a torch DataLoader,
    call ``set_epoch(k)`` on the ``readers.torch_dataset`` before epoch k, as
    with DistributedSampler: workers that are started afresh each epoch run
    pass 0 otherwise, and draw alike every epoch. ``seed=None`` draws a seed
    from the operating system, different in every run (no checkpoint then). A
    sample read twice in one pass (an upsampled source of a ``mix``) draws
    alike both times.

    >>> import numpy as np
    >>> from readers import from_arrays, shuffle
    >>> def jitter(entry, rng):
    ...     image, label = entry
    ...     return image + rng.normal(0, 0.1, image.shape).astype(image.dtype), label
    >>> noisy = random_map(jitter, from_arrays(np.zeros((4, 2), np.float32), np.arange(4)), seed=0)
    >>> first, second = list(noisy()), list(noisy())
    >>> bool(np.array_equal(first[0][0], second[0][0]))  # each pass draws afresh
    False
    >>> again = random_map(jitter, from_arrays(np.zeros((4, 2), np.float32), np.arange(4)), seed=0)
    >>> bool(np.array_equal(again[2][0], first[2][0]))  # sample 2 of pass 0, read by index
    True
    >>> by_label = {int(label): image for image, label in shuffle(noisy, seed=1)()}  # pass 0, shuffled
    >>> bool(np.array_equal(by_label[3], first[3][0]))  # sample 3 draws as it did in order
    True
    >>> def files():
    ...     yield from [("b.jpg", np.zeros(2)), ("a.jpg", np.zeros(2))]
    >>> named = random_map(lambda entry, rng: (entry[0], rng.random()), files, seed=0, key=lambda entry: entry[0])
    >>> dict(named())["a.jpg"] == sample_rng(0, 0, key_id("a.jpg")).random()
    True

    See Also:
        map_readers: the same without randomness.
    """
    if not callable(func):
        raise BadType(f"random_map: func must be callable as func(entry, rng), got {type(func).__name__} {func!r}")
    if key is not None and not callable(key):
        raise BadType(f"random_map: key must be a function of an entry, got {type(key).__name__} {key!r}")
    check_reader(reader, "random_map reader")
    return RandomMapped(func, as_indexed(reader) or reader, check_seed(seed, "random_map"), key)


# -- with_index ----------------------------------------------------------------------


#: a dict entry gains the key "index"; a tuple, a last column
_add_id = functools.partial(append_column, key="index")


class WithId(_EntryByEntry):
    """Each entry with its sample ID as a last column (see ``with_index``)."""

    name = "with_index"

    @property
    def positions(self) -> int | None:
        return None if self.access == "stream" else 1  # a stream's IDs count its own entries

    def _get(self, i: int) -> Any:
        return _add_id(self.parents[0].at(i), int(self.parents[0].sample_ids(np.array([i]))[0]))

    def gather(self, indices: np.ndarray) -> Iterable:
        parent = self.parents[0]
        return map(_add_id, parent.gather(indices), parent.sample_ids(indices).tolist())

    def gather_columns(self, indices: np.ndarray) -> tuple | None:
        columns = self.parents[0].gather_columns(indices)
        if columns is None:
            return None
        columns = columns if isinstance(columns, tuple) else (columns,)
        return columns + (np.array(self.parents[0].sample_ids(indices), dtype=np.int64),)

    def _seek(self, pass_id: int, cursor: int) -> Iterator:
        return map(_add_id, iterate(self.parents[0], pass_id, cursor), itertools.count(cursor))


def with_index(reader: Any) -> Stage:
    """Append each entry's sample index (its unique ID) as a last column.

    For an indexed pipeline the ID is the sample's index in its source, the
    same through firstn, skip, maps and shuffles; for a stream it is the
    entry's position in the pass, so put ``with_index`` before any shuffle of
    a stream. prefetch, filter_entries and buffer shuffles make a pipeline a
    stream: put ``with_index`` below them to get sample IDs. Appending keeps
    existing column numbers (and mappings) valid.

    >>> list(with_index(lambda: [("a", 1), ("b", 0)])())
    [('a', 1, 0), ('b', 0, 1)]
    >>> from readers import from_sequence, shuffle
    >>> pairs = list(with_index(shuffle(from_sequence("abcd"), seed=3))())
    >>> all("abcd"[i] == letter for letter, i in pairs)
    True
    """
    check_reader(reader)
    return WithId(as_indexed(reader) or reader)
