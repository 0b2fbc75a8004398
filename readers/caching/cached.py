"""cached: a map computed once per sample, kept in memory and, optionally, on disk for every process of a node.

``cached(reader, func)`` is ``map_readers(func, reader)`` that remembers:
the first time a sample is asked for, ``func`` runs on it; later passes
(which reorder the samples) get the result by the sample's ID, never by its
position. Put it below the shuffle, ``shuffle(cached(source, f), seed=0)``:
the result is again an indexed reader, and shuffles, shards and resumes as
before. With ``node_shuffle`` each node reads the same samples every pass,
so its cache stays warm.

What a cached entry is known by:

- the data: the wrapped reader's ``fingerprint`` (its pipeline, length and
  content digest: what checkpoints compare), so two datasets cached with one
  function in one folder never share entries;
- the function: ``function_identity(func)`` (its qualified name, and a
  digest of its bytecode, constants, defaults, closure and, for a
  ``functools.partial``, its arguments), and ``version``;
- the sample: its ID (``sample_ids``: its index in the source), or
  ``key(entry)`` when a key function is given.

What the function's digest cannot see: what it reads by a global name (a
module-level table, another module's function: only the name counts), files
it opens, a model's weights it reaches through an object, and a random state.
Change any of these and pass a new ``version=``, or the cache serves what the
old one computed.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from readers.caching.disk import DiskStore, row_keys
from readers.caching.memory import MISSING, MemoryTier
from readers.checks import check_reader, whole
from readers.errors import BadType, BadValue
from readers.graph import describe, drawing_stage
from readers.identity import fingerprint, function_digest, function_identity
from readers.ops.maps import Mapped
from readers.parents import access_of, as_indexed, iterate, open_plan
from readers.plans import index_chunks

__all__ = ["MEMORY_BYTES", "CachedMap", "cached"]

#: The memory tier's default budget: per cached reader, in each process that runs it.
MEMORY_BYTES = 256 << 20
#: The least ``disk_bytes``: an empty cache's database takes about 50 KiB.
MIN_DISK_BYTES = 64 << 10
_STEP = 256  # samples looked up at a time
_WINDOW = 64  # entries of a stream read ahead to look up at once
_GROUP = 16  # misses computed between two looks at the disk, when computing takes long

_COUNTS = ("memory_hits", "disk_hits", "misses", "corrupt", "compute_s")


def _blocks(indices: np.ndarray) -> Iterator[np.ndarray]:
    return (indices[lo:lo + _STEP] for lo in range(0, len(indices), _STEP))


class CachedMap(Mapped):
    """``func`` over a reader's entries, computed once per sample and kept (see ``cached``)."""

    name = "cached"

    def __init__(self, func: Callable, reader: Any, *, directory: str | None, version: str | None,
                 key: Callable | None, memory_bytes: int, disk_bytes: int | None):
        super().__init__(func, reader)
        self.version, self.key, self.directory = version, key, directory
        self.memory = MemoryTier(memory_bytes)
        self.store = None if directory is None else DiskStore(directory, disk_bytes)
        self.wrapped = reader  # whose fingerprint names the data (a planned pass reads a copy over its source)
        self.known: dict[str, Any] = {}  # shared by the copies: the namespace, once found, and the counts

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        # a worker counts its own hits, and asks its store for the namespace's number (its database may be a new
        # one, the one this process opened having been found damaged and set aside since)
        state["known"] = {"space": self.known["space"]} if "space" in self.known else {}
        return state

    # -- keys ------------------------------------------------------------------------
    def _space(self) -> int:
        """The namespace of this function over this data in the disk store (0 without one)."""
        return self._where()[0]

    def _where(self) -> tuple[int, int]:
        """(the namespace's number, the store's ``generation`` it holds in): asked of the store again when it has
        started a new database since (the one it had was found damaged)."""
        if self.store is None:
            return 0, 0
        known, gen = self.known, self.store.generation
        where = known.get("where")
        if where is None or where[1] != gen:
            if "space" not in known:
                known["space"] = (*self._describe(), self._ids())
            where = known["where"] = (self.store.space(*known["space"]), gen)
        return where

    def _ids(self) -> tuple[int, int] | None:
        """The range of sample IDs this reads (for the disk tier's dense files), or None when keyed otherwise."""
        parent = self.parents[0]
        if self.key is not None or access_of(parent) != "index" or not len(parent):
            return None
        lo, hi = None, None
        for chunk in index_chunks(len(parent), 1 << 20):  # a bounded array at a time, however long the reader
            ids = parent.sample_ids(chunk)
            lo = int(ids.min()) if lo is None else min(lo, int(ids.min()))
            hi = int(ids.max()) + 1 if hi is None else max(hi, int(ids.max()) + 1)
        return lo, hi

    def _describe(self) -> tuple[str, dict]:
        source = self.wrapped
        if access_of(source) == "plan":  # above a shuffle or shard: the data is the indexed reader they reorder,
            source = open_plan(source, 0).source  # whose sample IDs key the cache, whatever the seed
        data = fingerprint(source)
        if data["content"] is None:
            warnings.warn(f"cached: the cache in {self.directory} cannot tell this data from other data with the "
                          f"same pipeline and length, because a source of {describe(self.wrapped)} has no digest "
                          "and its first entries are not plain data; give each dataset its own directory",
                          RuntimeWarning, stacklevel=4)
        # the digest taken now, not the one remembered for checkpoints: an object whose attributes changed since
        # (a callable's scale, a model's weights) is another function here
        about = {"func": f"{describe(self.func)} {function_digest(self.func)}", "version": self.version,
                 "key": None if self.key is None else f"{describe(self.key)} {function_digest(self.key)}",
                 "data": data["pipeline"], "length": data["length"], "content": data["content"]}
        name = hashlib.blake2b(json.dumps(about, sort_keys=True).encode(), digest_size=16).hexdigest()
        return name, about

    def _count(self, what: str, n: float) -> None:
        self.known[what] = self.known.get(what, 0) + n

    # -- lookups -----------------------------------------------------------------------
    def _lookup(self, keys: list, ids: np.ndarray | None = None) -> tuple[list, int]:
        """(the cached value of each key, or MISSING; how many are MISSING); disk hits are kept in memory too.
        ``ids``: the keys as an array, when they are sample IDs (rows of a dense file, read all at once when
        every one is there)."""
        memory = self.memory
        values = memory.get_many(keys)
        misses = [j for j, v in enumerate(values) if v is MISSING] if len(memory) else list(range(len(keys)))
        self._count("memory_hits", len(keys) - len(misses))
        if misses and self.store is not None:
            ns, gen = self._where()
            if ids is not None:
                rows = self.store.get_dense(ns, ids[misses] if len(misses) < len(keys) else ids, gen)
                if rows is not None:  # every one a row of the dense file, intact
                    if memory.budget > 0:  # (its arrays are read-only, and fresh: nothing to freeze otherwise)
                        rows = [memory.keep(keys[j], v) for j, v in zip(misses, rows)]
                    for j, v in zip(misses, rows):
                        values[j] = v
                    self._count("disk_hits", len(rows))
                    return values, 0
            asked = [keys[j] for j in misses]
            ks, names = row_keys(ns, np.array(asked, dtype=np.int64) if self.key is None else asked)
            found, corrupt = self.store.get_many(ks, names, gen)
            keep = memory.budget > 0
            for j, k in zip(misses, ks):
                if k in found:
                    values[j] = found[k]
                    if keep:
                        memory.keep(keys[j], found[k])
            self._count("disk_hits", len(found))
            if corrupt:
                self._corrupt(len(corrupt))
            if found:
                return values, sum(1 for j in misses if values[j] is MISSING)
        return values, len(misses)

    def _corrupt(self, n: int) -> None:
        if not self.known.get("corrupt"):
            warnings.warn(f"cached: {n} entries in the cache in {self.directory} were damaged (checksum mismatch or "
                          "cut short); they are computed again and rewritten (stats()['corrupt'] counts any more)",
                          RuntimeWarning, stacklevel=5)
        self._count("corrupt", n)

    def _compute(self, key: Any, entry: Any) -> Any:
        start = time.perf_counter()
        value = self.func(entry)
        cost = time.perf_counter() - start
        self._count("misses", 1)
        self._count("compute_s", cost)
        value = self.memory.keep(key, value)
        if self.store is not None:
            ns, gen = self._where()
            ks, names = row_keys(ns, [key])
            self.store.put(ks[0], ns, names[0], value, cost, gen)
        return value

    # -- passes ------------------------------------------------------------------------
    def _get(self, i: int) -> Any:
        return next(iter(self.gather(np.array([i], dtype=np.int64))))

    def gather(self, indices: np.ndarray) -> Iterable:
        if self.key is not None:
            return self._gather_keyed(indices)
        if len(indices) <= _STEP:
            return self._block(indices)
        # blocks looked up as they are reached, their entries handed out by C-level iterators: a block of memory
        # hits costs a few vectorised steps and no Python per entry
        return itertools.chain.from_iterable(map(self._block, _blocks(indices)))

    def _block(self, part: np.ndarray) -> Iterable:
        """The values of the samples at ``part``: a list when the cache holds them all (the memory tier, by
        ``get_ids``, or the disk tier), else as ``_through`` computes the misses."""
        ids = self.parents[0].sample_ids(part)
        values = self.memory.get_ids(ids)
        if values is not None:
            self._count("memory_hits", len(values))
            return values
        keys = ids.tolist()
        values, missing = self._lookup(keys, ids)
        return self._through(keys, None, part, values) if missing else values

    def _gather_keyed(self, indices: np.ndarray) -> Iterator:
        parent = self.parents[0]
        for lo in range(0, len(indices), _STEP):  # the entries name themselves: read them all
            entries = list(parent.gather(indices[lo:lo + _STEP]))
            yield from self._through([self._key_of(e) for e in entries], entries, None)

    def _key_of(self, entry: Any) -> Any:
        k = self.key(entry)
        if isinstance(k, (np.integer, np.str_, np.bytes_)):
            k = k.item()
        if isinstance(k, bool) or not isinstance(k, (int, str, bytes)):
            raise BadType(f"cached: key {describe(self.key)} returned {type(k).__name__} {k!r:.60}, and a key must "
                          "be an int, str or bytes that names the entry's sample for good")
        return k

    def _through(self, keys: list, entries: list | None, part: np.ndarray | None,
                 values: list | None = None) -> Iterator:
        """The values of ``keys`` in order, computing the misses a few at a time (from ``entries``, or from the
        parent's entries at ``part``); with a disk tier, what is still missing is looked up again every
        ``interval / 2`` seconds, so another process's fresh results are found rather than computed twice.
        ``values``: what a lookup of ``keys`` just found, if one was made."""
        if values is None:
            values = self._lookup(keys)[0]
        done, looked = 0, time.monotonic()
        recheck = None if self.store is None else self.store.interval / 2
        made = {} if len(set(keys)) < len(keys) else None  # a key asked for twice (a padded shard's): computed once
        while True:
            misses = [j for j in range(done, len(values)) if values[j] is MISSING]
            if not misses:
                yield from values[done:]
                return
            if recheck is not None and time.monotonic() - looked > recheck:
                again = self._lookup([keys[j] for j in misses])[0]
                for j, v in zip(misses, again):
                    values[j] = v
                looked = time.monotonic()
                continue
            group = misses[:_GROUP] if recheck is not None else misses
            fresh = iter(entries[j] for j in group) if entries is not None else \
                iter(self.parents[0].gather(part[group]))
            for j in group:
                yield from values[done:j]
                entry = next(fresh)
                if made is not None and keys[j] in made:
                    values[j] = made[keys[j]]
                else:
                    values[j] = self._compute(keys[j], entry)
                    if made is not None:
                        made[keys[j]] = values[j]
                yield values[j]
                done = j + 1

    def _seek(self, pass_id: int, cursor: int) -> Iterator:
        """A stream, looked up a window at a time: 1 entry, then 2, 4, ... up to 64, so the first comes at once;
        an error reading the stream comes after the entries read before it, as from a plain map."""
        entries, size = iterate(self.parents[0], pass_id, cursor), 1
        while True:
            window: list = []
            try:
                for _ in range(size):
                    window.append(next(entries))
            except StopIteration:
                yield from self._through([self._key_of(e) for e in window], window, None)
                return
            except Exception:
                yield from self._through([self._key_of(e) for e in window], window, None)
                raise
            yield from self._through([self._key_of(e) for e in window], window, None)
            size = min(2 * size, _WINDOW)

    def finish_pass(self) -> None:
        if self.store is not None:
            self.store.flush()

    # -- what it is --------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """What the cache did in this process: hits (from memory, from disk), misses, bytes, evictions, time saved.

        ``time_saved_s`` is the hits times the mean time ``func`` took per
        entry (measured here, or, when this process computed none, as recorded
        in the disk store by the processes that did). Worker processes count
        their own, and these counts are not theirs.

        >>> from readers import from_arrays
        >>> r = cached(from_arrays(np.arange(4)), lambda x: x * 2)
        >>> _ = list(r()), list(r())
        >>> s = r.stats()
        >>> s["hits"], s["misses"], s["hit_rate"]
        (4, 4, 0.5)
        """
        known = self.known
        counts = {name: known.get(name, 0) for name in _COUNTS}
        hits = counts["memory_hits"] + counts["disk_hits"]
        cost = counts["compute_s"] / counts["misses"] if counts["misses"] else 0.0
        if not cost and hits and self.store is not None:
            cost = self.store.mean_cost(self._space())
        disk_evictions = 0 if self.store is None else self.store.evictions
        return {"hits": hits, **counts, "hit_rate": hits / (hits + counts["misses"]) if hits else 0.0,
                "memory_entries": len(self.memory), "memory_bytes": self.memory.bytes,
                "memory_budget": self.memory.budget, "memory_evictions": self.memory.evictions,
                "disk_evictions": disk_evictions, "evictions": self.memory.evictions + disk_evictions,
                "disk_bytes_written": 0 if self.store is None else self.store.written_bytes,
                "time_saved_s": hits * cost}

    def close(self) -> None:
        """Write what is waiting and close this process's connections to the disk tier; the reader opens them
        again if used after. Calling it twice is harmless.

        >>> from readers import from_arrays
        >>> r = cached(from_arrays(np.arange(2)), abs)
        >>> r.close(); r.close()
        """
        if self.store is not None:
            self.store.close()

    def flush(self) -> None:
        """Write to disk now what this process computed and has not yet written (a pass's end does it too).

        >>> from readers import from_arrays
        >>> cached(from_arrays(np.arange(2)), abs).flush()
        """
        if self.store is not None:
            self.store.flush()

    def _options(self) -> str:
        shown = [describe(self.func)]
        if self.version is not None:
            shown.append(f"version={self.version!r}")
        if self.key is not None:
            shown.append(f"key={describe(self.key)}")
        if self.directory is not None:
            shown.append(f"directory={self.directory!r}")
        return ", ".join(shown)

    def identity(self) -> str:
        """The stage by its function and version, without its folder: where a cache lives is not what it holds.

        >>> from readers import from_sequence
        >>> cached(from_sequence([1]), abs, directory="/tmp/c", version="2").identity()
        "cached(abs ..., version='2')"
        """
        version = "" if self.version is None else f", version={self.version!r}"
        return f"{self.name}({function_identity(self.func)}{version})"


def cached(reader: Any, func: Callable, *, directory: str | os.PathLike | None = None, version: str | None = None,
           key: Callable | None = None, memory_bytes: int = MEMORY_BYTES, disk_bytes: int | None = None) -> CachedMap:
    """``map_readers(func, reader)``, computed once per sample and served from a cache after that.

    ``reader`` is an indexed reader (or a pipeline of one: put ``cached``
    below the shuffle), whose sample IDs key the cache; or any reader with
    ``key``, a function that gets each entry of ``reader`` (before ``func``)
    and returns what names its sample for good, an int, str or bytes (a
    record's ID column, a file name); entries with one key get one result.
    With ``key``, entries are read each pass, and only ``func`` is saved.

    Tiers: memory first, least recently used entries out, within
    ``memory_bytes`` (256 MiB by default, per cached reader, in each process:
    process workers start theirs afresh; arrays count their ``nbytes``,
    other values an estimate, and 0 turns the tier off); then, with
    ``directory``, a sqlite3 database in that folder (which must be
    writable), shared by every process that opens it
    (``readers.caching.disk``). Entries are written within about half a
    second of being computed and all of them when a pass ends or a worker
    process ends; ``disk_bytes`` bounds the database's pages in use,
    evicting the oldest-written entries, and holds for every process that
    opens the folder after. Disk entries must be arrays, numbers, strings,
    bytes, or plain tuples, lists and dicts of them (``readers.storage.codec``).

    Cached arrays are read-only: every pass hands out the same object, and
    writing into one would change later passes (an array ``func`` could
    still write into is copied first). Each hit gets fresh copies of an
    entry's lists, dicts and sets. Two processes that ask for an entry before
    either has written it both compute it, and both write the same value. The window: the first commits within about half a second of
    computing it, and the other, while computing its misses, looks at the
    disk again every quarter second (and between groups of 16 misses), so it
    is about 0.75 s plus the time of 16 calls of ``func``.

    >>> from readers import from_sequence, shuffle
    >>> calls = []
    >>> def slow_square(x):
    ...     calls.append(int(x))
    ...     return x * x
    >>> r = shuffle(cached(from_sequence(range(5)), slow_square), seed=0)
    >>> sorted(int(v) for v in r()) == sorted(int(v) for v in r()) == [0, 1, 4, 9, 16]
    True
    >>> len(calls)  # computed once per sample, over two passes in different orders
    5
    """
    if not callable(func):
        raise BadType(f"cached: func must be callable, got {type(func).__name__} {func!r}")
    check_reader(reader, "cached reader")
    reader = as_indexed(reader) or reader
    drawn = drawing_stage(reader)
    if drawn is not None:
        raise BadValue(f"cached: {describe(drawn)} below it draws its entries anew every pass, and a cache keeps "
                       "a sample's first result for good: put the random stage above the cache, e.g. "
                       "random_map(augment, cached(reader, func), seed=0)")
    if key is not None and not callable(key):
        raise BadType(f"cached: key must be a function of an entry, got {type(key).__name__} {key!r}")
    if key is None and access_of(reader) == "stream":
        raise BadType(f"cached: {describe(reader)} is a stream, so its entries have no sample IDs to key the cache "
                      "by: give key=, a function of an entry that returns what names its sample for good (an int, "
                      "str or bytes), or cache an indexed reader (from_arrays, mnist, tokens) below any shuffle")
    if version is not None and not isinstance(version, str):
        raise BadType(f"cached: version must be a string, got {type(version).__name__} {version!r}")
    memory_bytes = whole(memory_bytes, "memory_bytes", "cached", floats=False)
    if disk_bytes is not None:
        disk_bytes = whole(disk_bytes, "disk_bytes", "cached", 1, floats=False)
        if disk_bytes < MIN_DISK_BYTES:
            raise BadValue(f"cached: disk_bytes={disk_bytes:,} is less than the database's own pages take "
                           f"(give at least {MIN_DISK_BYTES:,}), so the cache would keep nothing")
        if directory is None:
            raise BadValue("cached: disk_bytes limits the disk tier, which needs directory=")
    if directory is not None and not isinstance(directory, (str, os.PathLike)):
        raise BadType(f"cached: directory must be a folder's path, got {type(directory).__name__} {directory!r}")
    if directory is not None and (not os.fspath(directory) or os.path.isfile(directory)):
        raise BadValue(f"cached: directory={os.fspath(directory)!r} is not a folder: give the folder to keep the "
                       "cache in (it is made when missing)")
    return CachedMap(func, reader, directory=None if directory is None else os.fspath(directory), version=version,
                     key=key, memory_bytes=memory_bytes, disk_bytes=disk_bytes)
