"""The reader a data-provider server holds, and what it does with a request apart from the network.

``Served`` wraps the indexed reader a server holds, or a part of it
(``readers.network.parts``). It checks a ``get`` request's interval or
indices against the reader's length and the part held (a typed
``RequestError`` otherwise), splits the rows into parts that each fit a frame,
and gathers one part as packed columns. It is plain synchronous code: each
connection's thread calls it (``readers.network.session``), so a slow reader
holds up only the connection that asked.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from readers.errors import BadType, BadValue
from readers.graph import drawing_stage
from readers.identity import served_fingerprint
from readers.network.parts import check_part, part_digest
from readers.network.wire import (
    MAX_FRAME,
    VERSION,
    ProtocolError,
    pack_columns,
    unpack_columns,
)
from readers.parents import is_indexed
from readers.stage import Stage

__all__ = ["BODY", "RequestError", "Served"]

#: How many entries, spread over the reader, are gathered at the start to check them.
SAMPLE = 16
#: The most bytes of columns one part carries: a frame, less room for its header.
BODY = MAX_FRAME - (64 << 10)


class RequestError(Exception):
    """A request the server answers with a typed rejection: ``kind`` (one of ``readers.network.wire.KINDS``) and a
    message saying what was wrong and what to send instead."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind, self.message = kind, message


def _stack(entries: list) -> Any:
    """Columns of entries that have no columnar gather: one array per tuple position, or one array."""
    if entries and isinstance(entries[0], tuple):
        return tuple(np.stack([np.asarray(e[k]) for e in entries]) for k in range(len(entries[0])))
    return np.stack([np.asarray(e) for e in entries])


class Served:
    """The reader a server holds: its length, its welcome and its answers to requests.

    >>> from readers import from_arrays
    >>> served = Served(from_arrays(np.arange(10) * 2, np.arange(10)))
    >>> served.welcome["entries"], served.row_bytes
    (10, 16)
    >>> idx = served.indices({"type": "get", "id": 1, "interval": [2, 4]})
    >>> meta, buffers = served.part(idx)
    >>> meta, [np.frombuffer(b, "<i8").tolist() for b in buffers]
    ([{'dtype': '<i8', 'shape': [3]}, {'dtype': '<i8', 'shape': [3]}], [[4, 6, 8], [2, 3, 4]])
    >>> served.indices({"type": "get", "id": 2, "indices": [3, 10]})
    Traceback (most recent call last):
    ...
    readers.network.served_reader.RequestError: index 10 is past the last entry (9): the server holds 10 entries

    With ``part`` (``(start, stop)``, half-open) it serves those entries alone,
    reads nothing of the others, and its welcome says so (``entries`` stays
    the whole length):

    >>> served = Served(from_arrays(np.arange(10) * 2, np.arange(10)), part=(4, 8))
    >>> served.welcome["entries"], served.welcome["part"], len(served.welcome["part_digest"])
    (10, [4, 8], 32)
    >>> served.indices({"indices": [5, 8]})
    Traceback (most recent call last):
    ...
    readers.network.served_reader.RequestError: index 8 is outside the part this server holds: entries [4, 8) of 10 (4..7); ask a server that holds it
    """

    def __init__(self, reader: Any, info: dict[str, Any] | None = None, *, part: Any = None):
        if not is_indexed(reader):
            shown = reader.title() if isinstance(reader, Stage) else repr(reader)
            raise BadType(f"a server serves an indexed reader (len and [i]), not {shown}; build it from "
                          "readers.tokens, readers.from_arrays or a registered reader with random access")
        self.reader, self.n = reader, len(reader)
        self.holds = None if part is None else check_part(part, self.n)  # (start, stop); None: the whole
        self.draws = drawing_stage(reader) is not None
        self.row_bytes, self.empty = 0, np.zeros(0, np.uint8)
        start, stop = self.holds or (0, self.n)
        if self.n:  # entries spread over the part say the columns' types and sizes, so a bad reader (objects,
            # entries of different sizes) fails here, not in the middle of a client's pass
            sample = np.unique(np.linspace(start, stop - 1, min(stop - start, SAMPLE)).round().astype(np.int64))
            try:
                columns = self.gather(sample)
                meta, buffers = pack_columns(columns)
            except ProtocolError as exc:
                raise BadType(f"cannot serve {reader.title()}: {exc}") from None
            except RequestError as exc:
                raise BadValue(f"cannot serve {reader.title()}: {exc.message}; a served reader's entries are "
                               "columns of one shape each (pad or cut them in a map)") from exc.__cause__
            self.row_bytes = sum(len(b) for b in buffers) // len(sample)
            self.empty = tuple(c[:0] for c in columns) if isinstance(columns, tuple) else columns[:0]
        whole = (start, stop) == (0, self.n)  # (a part reads nothing of the rest: no digest of the whole data)
        self.welcome = {"type": "welcome", "version": VERSION, "entries": self.n, "reader": reader.title(),
                        "fingerprint": served_fingerprint(reader, content=whole), "info": dict(info or {}),
                        "row_bytes": self.row_bytes, "max_frame": MAX_FRAME, "draws_per_pass": self.draws,
                        "binary_indices": True}
        if self.holds is not None:
            try:
                digest = part_digest(reader, self.holds, gather=self.gather)
            except RequestError as exc:
                raise BadValue(f"cannot serve {reader.title()}: {exc.message}") from exc.__cause__
            self.welcome.update(part=list(self.holds), part_digest=digest)

    def pass_of(self, header: dict[str, Any]) -> int | None:
        """The pass a ``get`` reads, for a reader whose entries are drawn anew each pass (``random_map``): its
        ``"pass"``, an int >= 0 (absent: pass 0, as random access outside a pass reads). None when the reader
        draws nothing, whatever the request says.

        >>> from readers import from_sequence, random_map
        >>> served = Served(random_map(lambda entry, rng: entry, from_sequence([1, 2]), seed=0))
        >>> served.welcome["draws_per_pass"], served.pass_of({"pass": 3}), served.pass_of({})
        (True, 3, 0)
        >>> served.pass_of({"pass": -1})
        Traceback (most recent call last):
        ...
        readers.network.served_reader.RequestError: "pass" must be an int >= 0 (the pass the entries are drawn for), got -1
        """
        if not self.draws:
            return None
        found = header.get("pass", 0)
        if not _is_int(found) or found < 0:
            raise RequestError("malformed", f'"pass" must be an int >= 0 (the pass the entries are drawn for), got '
                                            f"{found!r}")
        return found

    def indices(self, header: dict[str, Any], body: Any = b"") -> np.ndarray | range:
        """The sample indices a ``get`` asks for: a ``range`` for an interval (so a request for millions of
        rows allocates nothing until each part is gathered), int64 for a list, in the header or, described
        there as a column (``{"dtype": "<i8", "shape": [n]}``), in the frame's ``body``; ``RequestError``
        for a malformed or out-of-range one.

        >>> from readers import np_array
        >>> served = Served(np_array(np.arange(5)))
        >>> served.indices({"interval": [1, 3]}), served.indices({"indices": [4, 0]}).tolist()
        (range(1, 4), [4, 0])
        >>> served.indices({"indices": {"dtype": "<i8", "shape": [2]}}, np.array([3, 1], "<i8").tobytes()).tolist()
        [3, 1]
        >>> served.indices({"interval": [3, 1]})
        Traceback (most recent call last):
        ...
        readers.network.served_reader.RequestError: interval [3, 1] ends before it starts; both ends are included, so one entry is [i, i]
        """
        interval, listed = header.get("interval"), header.get("indices")
        if (interval is None) == (listed is None):
            raise RequestError("malformed", 'a get names either "interval": [start, end] or "indices": [...]')
        if interval is not None:
            if not (isinstance(interval, list) and len(interval) == 2 and all(_is_int(v) for v in interval)):
                raise RequestError("malformed", f"interval must be [start, end], two ints, got {interval!r}")
            start, end = interval
            if start > end:
                raise RequestError("malformed", f"interval [{start}, {end}] ends before it starts; both ends "
                                                "are included, so one entry is [i, i]")
            self._check_range(start, end)
            return range(start, end + 1)
        if isinstance(listed, dict):
            return self._body_indices(listed, body)
        if not isinstance(listed, list) or not all(_is_int(v) for v in listed):
            raise RequestError("malformed", "indices must be a list of ints")
        idx = np.array(listed, dtype=np.int64) if listed and abs(max(listed, key=abs)) < 2 ** 63 else None
        if idx is None:
            if listed:
                raise RequestError("out_of_range", f"index {max(listed, key=abs)} is out of range: the server "
                                                   f"holds {self.n} entries")
            return np.zeros(0, np.int64)
        self._check_range(int(idx.min()), int(idx.max()))
        return idx

    def _body_indices(self, described: dict[str, Any], body: Any) -> np.ndarray:
        try:
            idx = unpack_columns(described, memoryview(body))
        except ProtocolError as exc:
            raise RequestError("malformed", f"the indices in the body: {exc}") from None
        if idx.ndim != 1 or idx.dtype.kind != "i":
            raise RequestError("malformed", f'indices in the body must be one column of signed ints ("<i8"), '
                                            f"got {idx.dtype} of shape {list(idx.shape)}")
        idx = idx.astype(np.int64, copy=False)
        if len(idx):
            self._check_range(int(idx.min()), int(idx.max()))
        return idx

    def _check_range(self, low: int, high: int) -> None:
        if low < 0:
            raise RequestError("out_of_range", f"index {low} is negative: indices count from 0")
        if high >= self.n:
            raise RequestError("out_of_range", f"index {high} is past the last entry ({self.n - 1}): the server "
                                               f"holds {self.n} entries")
        if self.holds is not None and (low < self.holds[0] or high >= self.holds[1]):
            start, stop = self.holds
            raise RequestError("out_of_range", f"index {low if low < start else high} is outside the part this "
                                               f"server holds: entries [{start}, {stop}) of {self.n} "
                                               f"({start}..{stop - 1}); ask a server that holds it")

    def parts(self, count: int) -> Iterator[tuple[int, int]]:
        """(first, count) of each part of a request for ``count`` rows: as many rows as fit a frame's body.

        >>> s = Served(__import__("readers").from_arrays(np.zeros((4, BODY // 2), np.uint8)))
        >>> list(s.parts(5))
        [(0, 2), (2, 2), (4, 1)]
        """
        if self.row_bytes > BODY:
            raise RequestError("too_large", f"one entry is {self.row_bytes:,} bytes, over the {BODY:,} bytes a "
                                            "frame's body holds; serve smaller entries (split them in a map)")
        step = max(1, BODY // max(self.row_bytes, 1))
        if count == 0:
            yield 0, 0
        for first in range(0, count, step):
            yield first, min(step, count - first)

    def gather(self, indices: np.ndarray, pass_id: int | None = None) -> Any:
        """The collated columns of the entries at ``indices`` (int64, in range, not empty) in pass ``pass_id``
        (``pass_of``): the reader's own columnar gather, or its entries stacked; ``RequestError``
        (``server_error``) when the reader fails.

        >>> from readers import from_sequence
        >>> Served(from_sequence([(1, 2.5), (3, 4.5)])).gather(np.array([1, 0]))
        (array([3, 1]), array([4.5, 2.5]))
        """
        reader = self.reader if pass_id is None else self.reader.for_pass(pass_id)
        try:
            columns = reader.gather_columns(indices)
            return _stack(list(reader.gather(indices))) if columns is None else columns
        except Exception as exc:  # the reader's own failure: the request gets server_error, the server lives
            raise RequestError("server_error", f"the served reader failed on {len(indices)} entries from "
                                               f"{int(indices[0])}: {type(exc).__name__}: {exc}") from exc

    def part(self, indices: np.ndarray | range, pass_id: int | None = None,
             narrow: bool = False) -> tuple[Any, list[memoryview]]:
        """The packed columns (``readers.network.wire.pack_columns``) of the entries at ``indices`` (in range): an
        array, or a ``range`` as ``indices`` gives for an interval; in pass ``pass_id`` (``pass_of``). With
        ``narrow`` (the client's hello said it decodes them), a reader's ``wire_columns`` where it has them.

        >>> from readers import tokens
        >>> import tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> np.arange(9, dtype="<u2").tofile(f"{folder.name}/a.bin")
        >>> served = Served(tokens(folder.name, seq_len=4))
        >>> served.part(range(1, 2))[0], served.part(range(1, 2), narrow=True)[0]
        ({'dtype': '<i4', 'shape': [1, 5]}, {'dtype': '<u2', 'shape': [1, 5], 'as': '<i4'})
        """
        if isinstance(indices, range):
            indices = np.arange(indices.start, indices.stop, dtype=np.int64)
        columns, decodes = self.empty, None  # no entries: the columns' types still
        if len(indices):
            found = self._narrowed(indices, pass_id) if narrow else None
            columns, decodes = found if found is not None else (self.gather(indices, pass_id), None)
        try:
            meta, buffers = pack_columns(columns, decodes)
        except ProtocolError as exc:
            raise RequestError("server_error", str(exc)) from None
        if sum(len(b) for b in buffers) > BODY:
            raise RequestError("too_large", f"entries {indices[0]}.. are larger than the entries checked at the start, and "
                                            f"{len(indices)} of them are over the {BODY:,} bytes a frame's body "
                                            "holds; serve entries of one size")
        return meta, buffers

    def _narrowed(self, indices: np.ndarray, pass_id: int | None) -> tuple[Any, Any] | None:
        """The reader's ``wire_columns`` (None where it has none); ``RequestError`` when it fails, as ``gather``."""
        reader = self.reader if pass_id is None else self.reader.for_pass(pass_id)
        try:
            return reader.wire_columns(indices)
        except Exception as exc:
            raise RequestError("server_error", f"the served reader failed on {len(indices)} entries from "
                                               f"{int(indices[0])}: {type(exc).__name__}: {exc}") from exc


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
