"""Parts of the served data: the interval of sample indices one server holds, and a digest of its rows.

A data-provider server may hold a part of an indexed reader: the half-open
interval ``[start, stop)`` of its sample indices. It still announces the
whole length (``entries`` in its welcome) and adds ``part``: ``[start, stop]``
and ``part_digest``, so that a client can route each index to a server that
holds it and compare replicas of one part. ``cli.py serve`` takes a part as
``--part K/N`` (the K-th of N equal contiguous parts, K from 1) or as
``--range START:STOP``.

>>> [part_interval(k, 4, 10) for k in range(1, 5)]
[(0, 2), (2, 5), (5, 7), (7, 10)]
>>> check_part(parse_range("3:"), 10)
(3, 10)
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from readers.digests import BLOCKS, WHOLE, array_digest, hasher
from readers.errors import BadType, BadValue

__all__ = ["check_part", "digest_rows", "parse_part", "parse_range", "part_digest", "part_interval", "show_part"]


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def part_interval(k: int, n: int, entries: int) -> tuple[int, int]:
    """``(start, stop)``, half-open, of the ``k``-th of ``n`` equal contiguous parts of ``entries`` indices, ``k``
    counted from 1: part k starts at ``(k - 1) * entries // n``, so parts 1..n cover ``[0, entries)`` exactly,
    their sizes within one of each other. A part that would be empty (more parts than entries) is refused.

    >>> part_interval(1, 3, 10), part_interval(2, 3, 10), part_interval(3, 3, 10)
    ((0, 3), (3, 6), (6, 10))
    >>> part_interval(0, 3, 10)
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: part 0/3: parts count from 1 to 3 (1/3 is the first, 3/3 the last); give K/N with 1 <= K <= N
    >>> part_interval(1, 4, 3)
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: part 1/4 of 3 entries is empty: 4 parts of 3 entries leave some empty; give at most 3 parts
    """
    if not (_is_int(k) and _is_int(n)):
        raise BadType(f"a part is K/N, two ints, got {k!r}/{n!r}")
    if n < 1:
        raise BadValue(f"part {k}/{n}: N, the number of parts, must be 1 or more")
    if not 1 <= k <= n:
        raise BadValue(f"part {k}/{n}: parts count from 1 to {n} (1/{n} is the first, {n}/{n} the last); give K/N "
                       f"with 1 <= K <= N")
    start, stop = (k - 1) * entries // n, k * entries // n
    if start == stop:
        raise BadValue(f"part {k}/{n} of {entries:,} entries is empty: {n} parts of {entries:,} entries leave some "
                       f"empty; give at most {entries:,} parts")
    return int(start), int(stop)


def check_part(part: Any, entries: int, what: str | None = None) -> tuple[int, int]:
    """``part`` as ``(start, stop)``, ints with ``0 <= start < stop <= entries``; a ``stop`` of None is ``entries``
    (``parse_range("3:")``). Anything else is refused, naming the part (as ``what`` when given) and the length.

    >>> check_part([2, 5], 10), check_part((0, None), 10)
    ((2, 5), (0, 10))
    >>> check_part((5, 12), 10)
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: part [5, 12) runs past the data: it has 10 entries, so a part ends at 10 at most
    """
    if not (isinstance(part, (tuple, list)) and len(part) == 2 and _is_int(part[0])
            and (part[1] is None or _is_int(part[1]))):
        raise BadType(f"part must be (start, stop), two ints (a half-open interval of sample indices), got {part!r}")
    start, stop = int(part[0]), entries if part[1] is None else int(part[1])
    what = what or f"part [{start}, {stop})"
    if start < 0:
        raise BadValue(f"{what} starts before 0: sample indices count from 0")
    if stop > entries:
        raise BadValue(f"{what} runs past the data: it has {entries:,} entries, so a part ends at {entries:,} at "
                       "most")
    if start >= stop:
        raise BadValue(f"{what} holds no entries: it is half-open, so it needs start < stop (one entry i is "
                       "[i, i + 1))")
    return start, stop


def parse_part(text: str) -> tuple[int, int]:
    """``(k, n)`` of ``--part K/N``: the K-th of N parts, K from 1 to N.

    >>> parse_part("2/4")
    (2, 4)
    >>> parse_part("0/4")
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: --part '0/4': parts count from 1 to 4 (1/4 is the first, 4/4 the last); give K/N with 1 <= K <= N
    >>> parse_part("2-4")
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: --part '2-4' is not K/N; give the part and the number of parts, such as --part 1/4 (the first quarter of the entries)
    """
    k, slash, n = text.strip().partition("/")
    if not (slash and k.strip().isdigit() and n.strip().isdigit()):
        raise BadValue(f"--part {text!r} is not K/N; give the part and the number of parts, such as --part 1/4 "
                       "(the first quarter of the entries)")
    k_, n_ = int(k), int(n)
    if n_ < 1:
        raise BadValue(f"--part {text!r}: N, the number of parts, must be 1 or more")
    if not 1 <= k_ <= n_:
        raise BadValue(f"--part {text!r}: parts count from 1 to {n_} (1/{n_} is the first, {n_}/{n_} the last); "
                       "give K/N with 1 <= K <= N")
    return k_, n_


def parse_range(text: str) -> tuple[int, int | None]:
    """``(start, stop)`` of ``--range START:STOP``, half-open as a Python slice; ``START:`` runs to the end
    (stop None; ``check_part`` makes it the length).

    >>> parse_range("100:200"), parse_range("100:")
    ((100, 200), (100, None))
    >>> parse_range("200:100")
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: --range '200:100' holds no entries: it is START:STOP, half-open, so it needs START < STOP (one entry i is i:i+1)
    """
    start, colon, stop = text.strip().partition(":")
    start, stop = start.strip() or "0", stop.strip()
    if not (colon and start.isdigit() and (stop.isdigit() or not stop)):
        raise BadValue(f"--range {text!r} is not START:STOP; give the first sample index and the one after the "
                       "last, such as --range 0:1000 (STOP left out: to the end)")
    if stop and int(start) >= int(stop):
        raise BadValue(f"--range {text!r} holds no entries: it is START:STOP, half-open, so it needs START < STOP "
                       "(one entry i is i:i+1)")
    return int(start), int(stop) if stop else None


def show_part(part: tuple[int, int], entries: int) -> str:
    """A part as the server announces it: the interval and the whole length.

    >>> show_part((13, 25), 50)
    'entries [13, 25) of 50'
    """
    return f"entries [{part[0]}, {part[1]}) of {entries}"


def digest_rows(part: tuple[int, int], row_bytes: int) -> np.ndarray:
    """The sample indices ``part_digest`` reads: every row of the part when they are 4 MiB or less (as
    ``array_digest`` hashes an array whole), else as many rows as 4 MiB holds (at least 2, at most 1,024)
    spread evenly over the part, the first and the last included. They depend on the part and the row size
    alone, so replicas read the same rows.

    >>> digest_rows((10, 14), 8).tolist()
    [10, 11, 12, 13]
    >>> rows = digest_rows((0, 10 ** 9), 8192)
    >>> len(rows), int(rows[0]), int(rows[-1])
    (512, 0, 999999999)
    """
    start, stop = part
    count = stop - start
    if count * max(row_bytes, 1) <= WHOLE:
        return np.arange(start, stop, dtype=np.int64)
    picks = min(count, BLOCKS, max(2, WHOLE // max(row_bytes, 1)))
    return np.unique(np.linspace(start, stop - 1, picks).round().astype(np.int64))


def _columns(reader: Any, indices: np.ndarray) -> Any:
    columns = reader.gather_columns(indices)
    if columns is not None:
        return columns
    entries = list(reader.gather(indices))
    if isinstance(entries[0], tuple):
        return tuple(np.stack([np.asarray(e[k]) for e in entries]) for k in range(len(entries[0])))
    return np.stack([np.asarray(e) for e in entries])


def part_digest(reader: Any, part: tuple[int, int], *,
                gather: Callable[[np.ndarray], Any] | None = None) -> str:
    """A digest of the rows of indexed ``reader`` in ``part`` (``(start, stop)``, half-open): the interval, then
    ``array_digest`` of the rows ``digest_rows`` picks, gathered as columns. It reads nothing outside the
    part, about 4 MiB of it at most; servers of the same part of the same data announce the same digest.
    ``gather``: how to read the rows' columns (default: the reader's ``gather_columns``).

    >>> import readers
    >>> a = readers.from_arrays(np.arange(10), np.arange(10) * 2.0)
    >>> part_digest(a, (2, 5)) == part_digest(readers.from_arrays(np.arange(10), np.arange(10) * 2.0), (2, 5))
    True
    >>> part_digest(a, (2, 5)) == part_digest(readers.from_arrays(np.arange(10), np.arange(10) * 3.0), (2, 5))
    False
    """
    start, stop = part
    read = gather if gather is not None else (lambda indices: _columns(reader, indices))
    first = read(np.array([start], np.int64))
    row_bytes = sum(np.asarray(c).nbytes for c in (first if isinstance(first, tuple) else (first,)))
    rows = digest_rows(part, row_bytes)
    columns = read(rows)
    h = hasher()
    h.update(f"part {start}:{stop}; rows {len(rows)};".encode())
    h.update(array_digest(*(columns if isinstance(columns, tuple) else (columns,))).encode())
    return h.hexdigest()
