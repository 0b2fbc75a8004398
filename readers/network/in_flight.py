"""The remote reader's bookkeeping of one read: gathers (``Job``), the requests that carry them (``Request``), and
the read as a whole (``Read``): what it has asked for and the consumer has not yet taken.

A job is one gather's indices and its columns as they arrive. A request asks
the server for rows of one or more jobs, end to end: consecutive small
gathers share a request, and a gather larger than a frame is split over
several. ``Request.place`` hands each answer's rows to their jobs as views;
``Request.rebase`` keeps only the rows not yet received, for asking again
on a new connection.

>>> a, b = Job(np.array([4, 5])), Job(np.array([9]))
>>> r = Request()
>>> r.add(a, 0, a.indices); r.add(b, 0, b.indices); r.seal().header(7)
{'type': 'get', 'id': 7, 'indices': [4, 5, 9]}
>>> r.place(0, 3, np.array([40, 50, 90]))
>>> a.result().tolist(), b.result().tolist()
([40, 50], [90])
"""
from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["Job", "Read", "Request"]


class Job:
    """One gather: its indices, the requests it was split into, and the columns as they arrive."""

    __slots__ = ("indices", "parts", "missing", "seq")
    _made = itertools.count()  # (next() on it is atomic: threads reading at once get distinct numbers)

    def __init__(self, indices: np.ndarray):
        self.indices, self.parts, self.missing = indices, [], len(indices)
        self.seq = next(Job._made)

    def done(self) -> bool:
        return self.missing == 0 and bool(self.parts)

    def place(self, offset: int, columns: Any) -> None:
        self.parts.append((offset, columns))
        self.missing -= len(columns[0] if isinstance(columns, tuple) else columns)

    def result(self) -> Any:
        if len(self.parts) == 1:  # one frame: its arrays over the received bytes, not copied again
            return self.parts[0][1]
        single = not isinstance(self.parts[0][1], tuple)
        parts = [(offset, (c,) if single else c) for offset, c in self.parts]
        n = len(self.indices)
        kinds = [np.result_type(*(c[k] for _, c in parts)) for k in range(len(parts[0][1]))]  # (strings of
        out = tuple(np.empty((n, *c.shape[1:]), kind) for c, kind in zip(parts[0][1], kinds))  # other widths)
        for offset, columns in parts:
            for target, column in zip(out, columns):
                target[offset:offset + len(column)] = column
        return out[0] if single else out


class Request:
    """Rows asked for under one id: pieces of one or more jobs, end to end (consecutive small gathers share a
    request, so a pass of small batches travels in requests of about ``request_bytes``); ``got`` rows of it
    have arrived."""

    __slots__ = ("segments", "pieces", "indices", "rows", "got", "asked")

    def __init__(self):
        self.segments: list[tuple[Job, int, int]] = []  # (job, its first row here, rows)
        self.pieces: list[np.ndarray] = []
        self.indices, self.rows, self.got, self.asked = None, 0, 0, 0  # asked: the bytes of its request frame

    def add(self, job: Job, start: int, indices: np.ndarray) -> None:
        self.segments.append((job, start, len(indices)))
        self.pieces.append(indices)
        self.rows += len(indices)

    def seal(self) -> Request:
        self.indices = self.pieces[0] if len(self.pieces) == 1 else np.concatenate(self.pieces)
        self.pieces = []
        return self

    def order(self) -> tuple[int, int]:
        job, start, _ = self.segments[0]
        return job.seq, start

    def rebase(self) -> None:
        """Ask again for the rows not received: they become the whole request."""
        skip, kept = self.got, []
        for job, start, n in self.segments:
            if skip >= n and n:
                skip -= n
                continue
            kept.append((job, start + skip, n - skip))
            skip = 0
        self.segments, self.indices, self.rows, self.got = kept, self.indices[self.got:], self.rows - self.got, 0

    def place(self, first: int, count: int, columns: Any) -> None:
        """Hand rows ``first .. first + count - 1`` of the answer to the jobs they belong to (views, no copy)."""
        at = 0
        for job, start, n in self.segments:
            lo, hi = max(first, at), min(first + count, at + n)
            if lo < hi or (n == 0 and count == 0):
                part = (tuple(c[lo - first:hi - first] for c in columns) if isinstance(columns, tuple)
                        else columns[lo - first:hi - first])
                job.place(start + lo - at, part)
            at += n

    def header(self, ident: int, pass_id: int | None = None) -> dict[str, Any]:
        """The ``get`` that asks for this request's rows, as request ``ident`` (in pass ``pass_id``, for a served
        reader that draws per pass), its indices listed in the header.

        >>> request = Request()
        >>> request.add(Job(np.arange(3, 6)), 0, np.arange(3, 6))
        >>> request.seal().header(7), request.header(8, pass_id=2)["pass"]
        ({'type': 'get', 'id': 7, 'interval': [3, 5]}, 2)
        """
        return self.frame(ident, pass_id, binary=False)[0]

    def frame(self, ident: int, pass_id: int | None = None, binary: bool = True) -> tuple[dict[str, Any], list]:
        """(header, body) of the ``get`` for this request's rows: an interval when they are consecutive; else,
        with ``binary`` (the server's welcome says ``binary_indices``), the indices as int64 in the body, which
        costs both ends far less than a JSON list.

        >>> request = Request()
        >>> request.add(Job(np.array([5, 2])), 0, np.array([5, 2]))
        >>> header, body = request.seal().frame(1)
        >>> header, np.frombuffer(body[0], "<i8").tolist()
        ({'type': 'get', 'id': 1, 'indices': {'dtype': '<i8', 'shape': [2]}}, [5, 2])
        """
        idx, body = self.indices, []
        if len(idx) and int(idx[-1]) - int(idx[0]) == len(idx) - 1 and (len(idx) < 3 or
                                                                       bool(np.all(np.diff(idx) == 1))):
            header = {"type": "get", "id": ident, "interval": [int(idx[0]), int(idx[-1])]}
        elif binary:
            body = [memoryview(np.ascontiguousarray(idx, "<i8")).cast("B")]
            header = {"type": "get", "id": ident, "indices": {"dtype": "<i8", "shape": [len(idx)]}}
        else:
            header = {"type": "get", "id": ident, "indices": idx.tolist()}
        if pass_id is not None:
            header["pass"] = int(pass_id)
        return header, body


class Read:
    """One read under way (a ``gather_ahead``, a streamed ``gather``): the chunks still to come, the jobs not yet
    handed over, the requests not yet sent (``waiting``) and those sent and not yet answered (``sent``, by id),
    and its connection.

    ``take_chunks`` puts chunks into jobs and requests: up to ``in_flight`` requests waiting or under way, each of
    about ``request_rows`` rows (``index_rows`` at most when they are listed), a job of up to ``whole_rows`` never
    split. ``pending`` counts the rows asked of the server (each request counted once, when first sent) that the
    consumer has not taken yet; ``handed`` the jobs handed over. What travels ahead of the consumer is bounded
    by ``ahead``, in rows of the served entries' size. The consumer takes each job ``whole`` (a gather), or its
    entries one at a time (a pass's entries).

    >>> read = Read(iter([np.arange(3), np.arange(5, 9)]), None, whole=True, in_flight=2, request_rows=8,
    ...             index_rows=100, whole_rows=8)
    >>> read.take_chunks(); [r.header(0) for r in read.waiting]
    [{'type': 'get', 'id': 0, 'indices': [0, 1, 2, 5, 6, 7, 8]}]
    >>> read.pending = 7; read.jobs[0].place(0, np.zeros(2)); read.ahead(waiting=False), read.ahead(waiting=True)
    (7, 5)
    >>> read.whole = False; read.ahead(waiting=True)  # it waits for one entry: the other is ahead
    6
    """

    __slots__ = ("chunks", "conn", "whole", "in_flight", "request_rows", "index_rows", "whole_rows", "jobs",
                 "waiting", "sent", "building", "ident", "failed_at", "more", "pending", "handed")

    def __init__(self, chunks: Iterator[np.ndarray], conn: Any, *, whole: bool, in_flight: int, request_rows: int,
                 index_rows: int, whole_rows: int):
        self.chunks, self.conn, self.whole = chunks, conn, whole
        self.in_flight, self.request_rows, self.index_rows, self.whole_rows = (in_flight, request_rows, index_rows,
                                                                               whole_rows)
        self.jobs: deque[Job] = deque()
        self.waiting: deque[Request] = deque()
        self.sent: dict[int, Request] = {}
        self.building: Request | None = None  # the newest request, while later chunks may still join it
        self.ident, self.failed_at, self.more, self.pending, self.handed = 0, None, True, 0, 0

    def ahead(self, waiting: bool) -> int:
        """The rows asked for and not taken; while the consumer is ``waiting`` on the first job, less those of the
        rows it waits for that arrived: they are what it asked for, not read ahead (so a job larger than the bound
        still arrives)."""
        if waiting and self.jobs:
            first = self.jobs[0]
            arrived = len(first.indices) - first.missing
            return self.pending - (arrived if self.whole else min(arrived, 1))
        return self.pending

    def take_chunks(self) -> None:
        """Take chunks into jobs and requests while fewer than ``in_flight`` requests wait or are under way."""
        while self.more and len(self.waiting) + len(self.sent) < self.in_flight:
            idx = next(self.chunks, None)
            if idx is None:
                self.more = False
                break
            job = Job(np.asarray(idx, np.int64))
            self.jobs.append(job)
            self._split(job)
        if self.building is not None and (not self.more or not (self.waiting or self.sent)):
            self.waiting.append(self.building.seal())  # nothing else is under way, or nothing more will join it
            self.building = None

    def _rows(self, indices: np.ndarray) -> int:
        """The rows one request of ``indices`` asks for: ``request_rows``, and a list of indices no longer than
        ``index_rows`` (an interval is two numbers however long)."""
        if len(indices) > self.index_rows and not bool(np.all(np.diff(indices) == 1)):
            return min(self.request_rows, self.index_rows)
        return self.request_rows

    def _split(self, job: Job) -> None:
        """Put ``job``'s rows into requests: first the one being built, then new ones of at most ``_rows``;
        full ones go to ``waiting``, in the order of their jobs."""
        if not len(job.indices):  # asked alone, so the answer says the columns' types
            if self.building is not None:
                self.waiting.append(self.building.seal())
                self.building = None
            self.waiting.append(Request())
            self.waiting[-1].add(job, 0, job.indices)
            self.waiting[-1].seal()
            return
        rows, lo, building = self._rows(job.indices), 0, self.building
        whole = len(job.indices) <= self.whole_rows  # one frame answers it, within the bound: its columns are views
        if building is not None and (rows > self.index_rows or whole and building.rows + len(job.indices) > rows):
            self.waiting.append(building.seal())  # (so that its columns arrive whole, as views, not copied together)
            building = None
        if whole:
            building = building or Request()
            building.add(job, 0, job.indices)
            if building.rows >= rows:
                self.waiting.append(building.seal())
                building = None
            self.building = building
            return
        while lo < len(job.indices):
            if building is None:
                building = Request()
            take = min(len(job.indices) - lo, rows - building.rows)
            if take > 0:
                building.add(job, lo, job.indices[lo:lo + take])
                lo += take
            if building.rows >= rows or take <= 0:
                self.waiting.append(building.seal())
                building = None
        self.building = building
