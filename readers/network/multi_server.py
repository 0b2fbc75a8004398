"""``readers.remote`` over several data-provider servers: replicas, parts and failover.

Each server is a ``Remote`` of its own (its connections, one per thread and
process), told not to wait for itself: a failure is the many-server reader's
to handle. Every read is cut into pieces of at most ``request_rows`` entries
of one span of holders (the servers whose part holds those indices), and each
piece goes to the live holder with the fewest bytes asked of it and not yet
answered, so a slower or busier replica gets less. A piece runs on a thread of
a small pool per process; consecutive small gathers share a piece, and up
to ``in_flight`` pieces (two per server at least) travel ahead of the consumer.

A server that fails (refused, reset, timed out) is down for a back-off that
doubles with each failure in a row (``BACKOFF`` to ``MAX_BACKOFF``); its
pieces not yet answered go to the other holders at once, and it is tried
again when its back-off is over (it rejoins when it answers). A piece is
asked for again whole, and its rows land where the first asking put them:
nothing is lost or doubled. A piece no live server holds waits for a holder's
back-off, up to ``deadline`` from its first failure, then
``RemoteUnavailable`` names its interval and the addresses tried.
"""
from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from readers.errors import BadValue
from readers.network.client import Remote, RemoteUnavailable, check_options
from readers.network.client import remote as one_remote
from readers.network.wire import read_secret

__all__ = ["BACKOFF", "MAX_BACKOFF", "SAMPLED_ROWS", "Servers", "addresses_of", "holders_of", "remote"]

#: Seconds a server that failed is left out, doubled for each failure in a row, up to ``MAX_BACKOFF``.
BACKOFF = 0.25
MAX_BACKOFF = 4.0
#: Rows of the overlap of two unequal parts read from both to compare them at the start.
SAMPLED_ROWS = 8


class _Member(Remote):
    """One server of several: a failed connection raises at once (no wait of its own), and the first frame of
    each fetch is timed."""

    _first = threading.local()

    def _open(self, failed_at: float | None, why: BaseException | None, first: bool = False) -> Any:
        # A connection broken during a fetch is opened again once (the server may have closed it as idle), with
        # one attempt (deadline 0); a timeout, or a second failure, is the server's: RemoteUnavailable, and the
        # many-server reader asks another.
        if why is not None:
            if isinstance(why, TimeoutError) or getattr(_Member._first, "reopened", True):
                raise RemoteUnavailable(f"{self.address}: {type(why).__name__}: {why}") from why
            _Member._first.reopened = True
        return super()._open(None, None, first)

    def _receive(self, conn: Any, sent: dict) -> None:
        if getattr(_Member._first, "at", 0.0) is None:
            _Member._first.at = time.monotonic()
        super()._receive(conn, sent)


def holders_of(parts: list[tuple[int, int]], entries: int) -> tuple[np.ndarray, list[list[int]]]:
    """The spans ``[bounds[k], bounds[k + 1])`` of ``[0, entries)`` and, for each, the servers whose part holds it.

    >>> bounds, holders = holders_of([(0, 6), (4, 10), (0, 6)], 10)
    >>> bounds.tolist(), holders
    ([0, 4, 6, 10], [[0, 2], [0, 1, 2], [1]])
    """
    bounds = np.unique(np.array([0, entries, *[x for part in parts for x in part]], np.int64))
    bounds = bounds[(bounds >= 0) & (bounds <= entries)]
    holders = [[s for s, (lo, hi) in enumerate(parts) if lo <= a and b <= hi] for a, b in zip(bounds[:-1], bounds[1:])]
    return bounds, holders


class _Piece:
    """Rows of one chunk asked of one server: their positions in the chunk, and the answer under way."""

    __slots__ = ("positions", "indices", "span", "server", "future", "failed_at", "charge")

    def __init__(self, positions: np.ndarray, indices: np.ndarray, span: int):
        self.positions, self.indices, self.span = positions, indices, span
        self.server, self.future, self.failed_at, self.charge = -1, None, None, 0


class _State:
    """What one process knows of the servers: bytes asked and not answered, back-offs, the pool, the stats."""

    def __init__(self, count: int, workers: int):
        self.pid, self.lock = os.getpid(), threading.Lock()
        self.outstanding = [0] * count
        self.down_until = [0.0] * count
        self.failures_in_row = [0] * count
        self.stats = [{"requests": 0, "rows": 0, "bytes": 0, "failures": 0, "ttfb_s": 0.0, "ttfb_max_s": 0.0}
                      for _ in range(count)]
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="readers.remote")


class Servers(Remote):
    """The entries several data-provider servers hold, read by index (see ``readers.remote``)."""

    name = "remote"

    def __init__(self, addresses: list[Any], secret: bytes | None, in_flight: int, deadline: float, timeout: float,
                 ca_file: str | None, tls: bool, request_bytes: int | None = None, connect_timeout: float = 5.0):
        super(Remote, self).__init__()
        self.members = [_Member(a, secret, in_flight, 0.0, timeout, ca_file, tls, request_bytes, connect_timeout)
                        for a in addresses]
        self.secret, self.in_flight, self.deadline, self.timeout = secret, in_flight, deadline, timeout
        self.connect_timeout, self.ca_file, self.tls = connect_timeout, ca_file, bool(tls or ca_file)
        self.addresses = [m.address for m in self.members]
        self.address = ", ".join(self.addresses)
        first = self.members[0]
        whole = [m for m in self.members if "part" not in m.welcome]  # (a part's welcome has no content digest)
        self.row_bytes = max(1, int(first.welcome.get("row_bytes", 0)))
        self.welcome = (whole or self.members)[0].welcome  # the data's facts: fingerprint, info, draws_per_pass
        self.request_bytes, self.request_rows = first.request_bytes, first.request_rows
        self.window_rows, self.frame_rows = first.window_rows, first.frame_rows
        self.host, self.port = first.host, first.port
        self.parts = [self._part(m) for m in self.members]
        self._check()
        self.bounds, self.holders = holders_of(self.parts, len(self))
        self._state: _State | None = None

    # -- the start: what each server holds, and whether they agree ---------------------------
    def _part(self, member: Remote) -> tuple[int, int]:
        entries, part = int(member.welcome["entries"]), member.welcome.get("part")
        if part is None:
            return 0, entries
        if (not isinstance(part, (list, tuple)) or len(part) != 2 or not all(isinstance(x, int) for x in part)
                or not 0 <= part[0] <= part[1] <= entries):
            raise BadValue(f"{member.address} announces part {part!r}, not [start, stop] within [0, {entries}]: "
                           "is it a readerkit data-provider server of this version?")
        return int(part[0]), int(part[1])

    def _check(self) -> None:
        """Refuse, naming them, servers of other lengths or pipelines, replicas of other data, and parts that leave
        indices to no one."""
        first, fixes = self.members[0], "start every server on the same data (python cli.py serve ...), or leave "
        for m in self.members[1:]:
            if m.welcome["entries"] != first.welcome["entries"]:
                raise BadValue(f"{m.address} serves {m.welcome['entries']:,} entries of {m.welcome.get('reader')} and "
                               f"{first.address} {first.welcome['entries']:,} of {first.welcome.get('reader')}: "
                               f"{fixes}one of them out")
            pipes = [x.welcome.get("fingerprint", {}).get("pipeline") for x in (first, m)]
            if pipes[0] != pipes[1]:
                raise BadValue(f"{m.address} serves {' / '.join(pipes[1] or ['?'])} and {first.address} "
                               f"{' / '.join(pipes[0] or ['?'])}: {fixes}one of them out")
        for a in range(len(self.members)):
            for b in range(a + 1, len(self.members)):
                self._check_replicas(a, b)
        bounds, holders = holders_of(self.parts, len(self))
        gaps = [(int(lo), int(hi)) for lo, hi, h in zip(bounds[:-1], bounds[1:], holders) if not h and hi > lo]
        if gaps:
            shown = ", ".join(f"[{lo}, {hi})" for lo, hi in gaps)
            held = ", ".join(f"{m.address} [{lo}, {hi})" for m, (lo, hi) in zip(self.members, self.parts))
            raise BadValue(f"no server holds entries {shown} of {len(self):,} ({held}): start a server for them "
                           "(python cli.py serve --part K/N or --range START:STOP), or give its address too")

    def _check_replicas(self, a: int, b: int) -> None:
        (lo_a, hi_a), (lo_b, hi_b) = self.parts[a], self.parts[b]
        lo, hi = max(lo_a, lo_b), min(hi_a, hi_b)
        if lo >= hi:
            return
        ma, mb = self.members[a], self.members[b]
        if (lo_a, hi_a) == (lo_b, hi_b):
            key = "part_digest" if "part_digest" in ma.welcome or "part_digest" in mb.welcome else None
            if key is None:
                same = ma.welcome.get("fingerprint", {}).get("content") == mb.welcome.get("fingerprint", {}).get("content")
            else:
                same = ma.welcome.get(key) == mb.welcome.get(key)
        else:  # overlapping, unequal parts: a few rows of the overlap, read from both
            rows = np.unique(np.linspace(lo, hi - 1, min(SAMPLED_ROWS, hi - lo)).round().astype(np.int64))
            same = _same_columns(ma.gather_columns(rows), mb.gather_columns(rows))
        if not same:
            raise BadValue(f"{ma.address} and {mb.address} both hold entries [{lo}, {hi}) but serve other data there: "
                           "start them on the same data, or leave one of them out")

    # -- the per-process state: pool, outstanding bytes, back-offs ---------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_state"] = None  # each worker process has its own pool and counts
        return state

    def _here(self) -> _State:
        if self._state is None or self._state.pid != os.getpid():
            self._state = _State(len(self.members), max(4, self.in_flight * len(self.members) + len(self.members)))
        return self._state

    def stats(self) -> dict[str, Any]:
        """This process's requests, rows, bytes, failures and time to first byte (mean and most) per server, and
        their totals.

        >>> import numpy as np, readers
        >>> with readers.serve(readers.np_array(np.arange(6))) as a, readers.serve(readers.np_array(np.arange(6))) as b:
        ...     r = readers.remote([a.address, b.address])
        ...     _ = r.gather_columns(np.arange(6))
        ...     s = r.stats()
        >>> sorted(s["servers"]) == sorted([a.address, b.address]), s["total"]["rows"], s["total"]["failures"]
        (True, 6, 0)
        """
        here = self._here()
        with here.lock:
            per = {address: dict(s) for address, s in zip(self.addresses, here.stats)}
        for s in per.values():
            s["ttfb_s"] = s["ttfb_s"] / s["requests"] if s["requests"] else 0.0
        total = {k: sum(s[k] for s in per.values()) for k in ("requests", "rows", "bytes", "failures")}
        return {"servers": per, "total": total}

    # -- reads ---------------------------------------------------------------------------
    def _fetch(self, server: int, indices: np.ndarray, charge: int) -> Any:
        """One piece from one server, on a pool thread (its connections are this thread's). A failure marks the
        server down before the piece's future says so, so that asking again goes elsewhere."""
        member, here = self.members[server], self._here()
        if self.bound_pass is not None:
            member = member.for_pass(self.bound_pass)
        _Member._first.at, _Member._first.reopened, started = None, False, time.monotonic()
        try:
            columns = member.gather_columns(indices)
        except OSError:
            with here.lock:
                here.stats[server]["failures"] += 1
                now = time.monotonic()
                if here.down_until[server] <= now:  # (one outage fails every piece under way: one back-off step)
                    here.failures_in_row[server] += 1
                    backoff = min(MAX_BACKOFF, BACKOFF * 2 ** (here.failures_in_row[server] - 1))
                    here.down_until[server] = now + backoff
            raise
        finally:
            with here.lock:
                here.outstanding[server] -= charge
        ttfb = (_Member._first.at or time.monotonic()) - started
        with here.lock:
            s = here.stats[server]
            s["requests"] += 1
            s["rows"] += len(indices)
            s["bytes"] += sum(c.nbytes for c in columns) if isinstance(columns, tuple) else columns.nbytes
            s["ttfb_s"] += ttfb
            s["ttfb_max_s"] = max(s["ttfb_max_s"], ttfb)
            here.failures_in_row[server] = 0
        return columns

    def _submit(self, piece: _Piece, exclude: frozenset[int] = frozenset()) -> bool:
        """Send ``piece`` to the live holder with the fewest bytes outstanding; False when no holder is live."""
        here, now = self._here(), time.monotonic()
        charge = max(1, len(piece.indices)) * self.row_bytes
        with here.lock:
            live = [s for s in self.holders[piece.span] if here.down_until[s] <= now and s not in exclude]
            if not live:
                return False
            server = min(live, key=lambda s: (here.outstanding[s], s))
            here.outstanding[server] += charge
        piece.server, piece.charge = server, charge
        piece.future = here.pool.submit(self._fetch, server, piece.indices, charge)
        return True

    def _pieces(self, indices: np.ndarray) -> list[_Piece]:
        """``indices`` cut by span of holders, then into pieces of at most ``request_rows``."""
        spans = np.searchsorted(self.bounds, indices, side="right") - 1
        if len(indices) and (int(indices.min()) < 0 or int(indices.max()) >= len(self)):
            raise IndexError(f"index out of range for {len(self)} entries served by {self.address}")
        if not len(indices):  # asked alone of a server that holds its span: the answer says the columns' types
            return [_Piece(indices, indices, int(np.searchsorted(self.bounds, 0, side="right") - 1))]
        pieces = []
        for span in (np.unique(spans) if len(self.holders) > 1 else [0]):
            positions = np.flatnonzero(spans == span) if len(self.holders) > 1 else np.arange(len(indices))
            for lo in range(0, max(1, len(positions)), self.request_rows):
                pos = positions[lo:lo + self.request_rows]
                pieces.append(_Piece(pos, indices[pos], int(span)))
        return pieces

    def _wait(self, piece: _Piece, others: Iterable[list[_Piece]]) -> Any:
        """``piece``'s columns: when its server fails, the server's other pieces under way go to other holders at
        once, and this one to another holder, or, when none is live, once a holder's back-off is over."""
        while True:
            try:
                return piece.future.result()
            except OSError as exc:
                failed = piece.server
                piece.failed_at = piece.failed_at or time.monotonic()
                for pieces in others:  # what else that server was asked: to the others now, not after its timeout
                    for other in pieces:
                        if other is not piece and other.server == failed and not other.future.done():
                            self._submit(other, exclude=frozenset([failed]))
                self._again(piece, exc)

    def _again(self, piece: _Piece, why: BaseException) -> None:
        """Send ``piece`` to a live holder, waiting within ``deadline`` for one whose back-off is over."""
        while not self._submit(piece):
            here = self._here()
            waited = time.monotonic() - piece.failed_at
            holders = self.holders[piece.span]
            if waited > self.deadline:
                lo, hi = int(self.bounds[piece.span]), int(self.bounds[piece.span + 1])
                tried = ", ".join(self.addresses[s] for s in holders)
                raise RemoteUnavailable(f"no server holding entries [{lo}, {hi}) answered for {waited:.0f} s "
                                        f"(tried {tried}; the last error: {type(why).__name__}: {why}); check that "
                                        "`python cli.py serve` runs there, or give readers.remote a longer deadline "
                                        f"(now {self.deadline:g} s)") from why
            with here.lock:
                until = min(here.down_until[s] for s in holders)
            time.sleep(min(max(0.0, until - time.monotonic()) + 0.005, self.deadline - waited + 0.01, 1.0))

    def _groups(self, chunks: Iterable[np.ndarray]) -> Iterator[list[np.ndarray]]:
        """Consecutive chunks in groups of about ``request_rows`` entries, asked for together (so a pass of small
        batches travels in requests of about ``request_bytes``); the first chunk alone (reading one entry costs
        one request), and a chunk larger than a group alone."""
        group, rows, first = [], 0, True
        for idx in chunks:
            idx = np.asarray(idx, np.int64)
            if first:
                first = False
                yield [idx]
                continue
            if group and rows + len(idx) > self.request_rows:
                yield group
                group, rows = [], 0
            group.append(idx)
            rows += len(idx)
        if group:
            yield group

    def gather_ahead(self, chunks: Iterable[np.ndarray]) -> Iterator[tuple[np.ndarray, Any]]:
        """(indices, columns) for each chunk in order: consecutive chunks asked for together in pieces of about
        ``request_bytes``, spread over the servers that hold them, and the next pieces under way meanwhile (up to
        ``in_flight`` pieces, and two per server at least).

        >>> import numpy as np, readers
        >>> with readers.serve(readers.np_array(np.arange(10) * 2)) as a, readers.serve(readers.np_array(np.arange(10) * 2)) as b:
        ...     r = readers.remote([a.address, b.address], in_flight=2)
        ...     [(i.tolist(), c.tolist()) for i, c in r.gather_ahead([np.arange(2), np.array([9, 0])])]
        [([0, 1], [0, 2]), ([9, 0], [18, 0])]
        """
        groups, ahead = self._groups(chunks), deque()
        limit, under_way, more, handed = max(self.in_flight, 2 * len(self.members)), 0, True, False
        try:
            while True:
                while more and (not ahead or (handed and under_way < limit)):
                    group = next(groups, None)
                    if group is None:
                        more = False
                        break
                    idx = group[0] if len(group) == 1 else np.concatenate(group)
                    pieces = self._pieces(idx)
                    for piece in pieces:
                        if not self._submit(piece):
                            piece.failed_at = time.monotonic()
                            self._again(piece, ConnectionError("every server holding it is backing off"))
                    ahead.append((group, idx, pieces))
                    under_way += len(pieces)
                if not ahead:
                    return
                group, idx, pieces = ahead[0]
                results = [self._wait(p, [q for _, _, q in ahead]) for p in pieces]
                ahead.popleft()
                under_way -= len(pieces)
                handed = True
                columns = self._assemble(idx, pieces, results)
                if len(group) == 1:
                    yield idx, columns
                    continue
                lo = 0
                for chunk in group:
                    hi = lo + len(chunk)
                    yield chunk, (tuple(c[lo:hi] for c in columns) if isinstance(columns, tuple) else columns[lo:hi])
                    lo = hi
        finally:
            for _, _, pieces in ahead:
                for piece in pieces:
                    if piece.future is not None and piece.future.cancel():
                        with self._here().lock:
                            self._here().outstanding[piece.server] -= piece.charge

    @staticmethod
    def _assemble(idx: np.ndarray, pieces: list[_Piece], results: list[Any]) -> Any:
        if len(pieces) == 1:
            return results[0]
        single = not isinstance(results[0], tuple)
        parts = [(r,) if single else r for r in results]
        kinds = [np.result_type(*(p[k] for p in parts)) for k in range(len(parts[0]))]
        out = tuple(np.empty((len(idx), *c.shape[1:]), kind) for c, kind in zip(parts[0], kinds))
        for piece, columns in zip(pieces, parts):
            for target, column in zip(out, columns):
                target[piece.positions] = column
        return out[0] if single else out

    # (gather and gather_columns are Remote's, over this gather_ahead and _streamed)
    def _streamed(self, indices: np.ndarray) -> Iterator:
        step = self.request_rows
        for _, columns in self.gather_ahead(indices[lo:lo + step] for lo in range(0, len(indices), step)):
            yield from (zip(*columns) if isinstance(columns, tuple) else columns)

    def _options(self) -> str:
        return f"{self.address}: {len(self):,} entries of {self.welcome.get('reader', '?')}"


def _same_columns(a: Any, b: Any) -> bool:
    a, b = (a if isinstance(a, tuple) else (a,)), (b if isinstance(b, tuple) else (b,))
    return len(a) == len(b) and all(x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(a, b))


def addresses_of(address: Any) -> list[Any] | None:
    """The addresses of ``address`` when it lists several (a list, or a tuple that is not one (host, port) pair).

    >>> addresses_of("h:1"), addresses_of(("h", 1)), addresses_of(["h:1", "h:2"])
    (None, None, ['h:1', 'h:2'])
    """
    if isinstance(address, list) or (isinstance(address, tuple) and not (len(address) == 2 and isinstance(address[1], int))):
        if not address:
            raise BadValue("readers.remote was given no address: give 'host:port', or a list of them")
        return list(address)
    return None


def remote(address: Any, *, secret: str | bytes | None = None, in_flight: int = 8, deadline: float = 120.0,
           timeout: float = 30.0, ca_file: str | None = None, tls: bool = False,
           request_bytes: int | None = None, connect_timeout: float = 5.0) -> Remote:
    """An indexed reader of the entries one data-provider server, or several, hold (``readers.remote``).

    ``address`` is one server's ``"host:port"`` or (host, port) pair: then
    ``readers.network.client.remote``, whose docstring says what each option
    does. A list of addresses gives ``Servers``: replicas of the same data
    share the requests by outstanding bytes, servers of parts (``cli.py
    serve --part K/N``) get the indices they hold, a server that fails has
    its requests moved to the others and rejoins after its back-off, and
    ``stats()`` says what each server did in this process. They must agree
    (length, pipeline, the content of what two of them both hold) and cover
    every entry, or ``BadValue`` names the servers at fault. ``deadline``
    bounds the wait for an index no live server holds; ``in_flight``
    pieces of about ``request_bytes`` (two per server at least) travel
    ahead of the consumer.

    >>> import numpy as np, readers
    >>> data = readers.from_arrays(np.arange(10) * 3)
    >>> with readers.serve(data, part=(0, 6)) as a, readers.serve(data, part=(6, 10)) as b:
    ...     r = remote([a.address, b.address])
    ...     len(r), r.gather_columns(np.array([9, 1]))[0].tolist()
    (10, [27, 3])
    """
    addresses = addresses_of(address)
    options = {"in_flight": in_flight, "deadline": deadline, "timeout": timeout, "ca_file": ca_file, "tls": tls,
               "request_bytes": request_bytes, "connect_timeout": connect_timeout}
    if addresses is None or len(addresses) == 1:
        return one_remote(address if addresses is None else addresses[0], secret=secret, **options)
    check_options(in_flight=in_flight, deadline=deadline, timeout=timeout, connect_timeout=connect_timeout,
                  request_bytes=request_bytes)
    return Servers(addresses, read_secret(secret), in_flight, float(deadline), float(timeout), ca_file, tls,
                   request_bytes, float(connect_timeout))
