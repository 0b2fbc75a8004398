"""The data-provider protocol: frames, messages, columns, rejections, auth and versioning.

Frames
------
Every message is a **frame**: a 4-byte big-endian length, then that many
bytes of payload. One limit, ``MAX_FRAME`` (16 MiB), holds for both ends and
is checked before anything is allocated; before login the limit is
``HELLO_FRAME`` (4 KiB), and a request (what a client sends after login) is
at most ``REQUEST_FRAME`` (2 MiB). A payload is a 4-byte big-endian header
length, a JSON **header** (an object with a ``"type"``), then a raw **body**. Columns
travel as their dtype, shape and raw bytes, described in the header and laid
end to end in the body: never pickle.

Messages
--------
In the order a connection sees them (C: client, S: server):

=========  ====  ==============================================================
type       from  fields
=========  ====  ==============================================================
hello      C     ``version``: the client's protocol version (``VERSION``);
                 ``narrow``: true when the client decodes narrowed columns
                 (``as``, below)
challenge  S     ``nonce``: 32 random bytes as hex, new for every connection;
                 sent only when the server has a secret
auth       C     ``proof``: ``proof(secret, nonce)``, HMAC-SHA256 as hex
welcome    S     ``version``, ``entries`` (the number of entries), ``reader``
                 (the served pipeline, one line), ``fingerprint`` (what its
                 data is, ``readers.fingerprint``), ``info`` (facts of the
                 data such as a token set's ``seq_len``), ``row_bytes`` (the
                 bytes of one entry), ``max_frame``, ``draws_per_pass``
                 (whether the entries are drawn anew each pass:
                 ``readers.random_map``); a server of part of the data adds
                 ``part``: ``[start, stop]``, the half-open interval of
                 sample indices it holds (absent: all of ``[0, entries)``,
                 and ``entries`` is the whole length either way), and
                 ``part_digest``: a digest of those rows
                 (``readers.network.parts``), equal on replicas of one
                 part; its ``fingerprint``'s ``content``, and each of its
                 ``digests``, is then null (nothing outside the part is read);
                 ``binary_indices``: true when the server takes a get's
                 indices in the body (below)
get        C     ``id`` (an int the client picks, >= 0) and either
                 ``interval``: ``[start, end]``, inclusive, or ``indices``: a
                 list of sample indices, or (to a server whose welcome says
                 ``binary_indices``) a column's description,
                 ``{"dtype": "<i8", "shape": [n]}``, and the n indices in the
                 body; ``pass``: the pass the entries are drawn for, when the
                 welcome says they are (else pass 0)
entries    S     ``id``, ``first`` and ``count`` (the rows of the request this
                 part holds), ``columns`` (each column's dtype and shape, or
                 one such object for a single-value entry); the body holds
                 the columns' bytes. A response larger than a frame comes as
                 several parts, in order, each of whole rows
error      S     ``kind`` (one of ``KINDS``), ``message``, and the ``id`` of
                 the request it answers when there is one
=========  ====  ==============================================================

A column's ``dtype`` is numpy's string for it, byte order included
(``"<i4"``), and its ``shape`` counts the rows first; the body holds the
columns one after another, each C-contiguous. To a client whose hello said
``narrow``, a server may send a column narrower than the reader gives it
(a token file's own 2-byte ids, MNIST's bytes) with ``as``: the dtype the
column is turned into, and ``divide``, a number it is then divided by in
that dtype (``decode_column``); the receiver's column is then exactly the
served reader's, in fewer bytes. ``row_bytes`` tells a client
how many rows make a request of a given size, ``max_frame`` the limit it
shares. Ids are the client's own: one id names one request while it is in
flight. A receiver ignores header fields it does not know, so a field may be
added without a new version; any other change bumps ``VERSION``. A server may
close an idle connection without a word; a client opens another and checks
that ``entries`` and ``fingerprint`` are as before.

A client may keep several requests in flight. A server may answer them in
any order and interleave the parts of different requests (readerkit's own
answers each connection's requests in turn, but a client goes by the ids);
the parts of one request come in order. Every request gets its parts or one
``error``. A
rejection of a request (``out_of_range``, ``malformed``) leaves the
connection open (a server of a part answers an index outside it with
``out_of_range``, naming the interval it holds); a broken frame
(``too_large``, a header that is not JSON), a refused login
(``not_authorised``) or another version (``unsupported_version``) closes
it after the error. ``server_error`` says the served reader failed on the
request.

Auth and versions
-----------------
Auth is an HMAC-SHA256 challenge-response on a shared secret: the server
sends a fresh random challenge per connection and the client answers with
``proof(secret, challenge)``; the secret never crosses the wire and an answer
is good for its own challenge only, so a replayed answer fails. A server
refuses a hello of another ``version`` with ``unsupported_version``.

>>> header, body = {"type": "entries", "id": 7}, b"xyz"
>>> frame = encode(header, [body])
>>> found, rest = decode(frame[4:])
>>> found, bytes(rest)
({'type': 'entries', 'id': 7}, b'xyz')
"""
from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import struct
from collections.abc import Iterable
from typing import Any

import numpy as np

from readers.errors import BadType, BadValue, ReaderkitError

__all__ = ["HELLO_FRAME", "KINDS", "MAX_FRAME", "REQUEST_FRAME", "VERSION", "NotAuthorised", "ProtocolError",
           "RemoteError", "UnsupportedVersion", "challenge", "check_kind", "decode", "decode_column", "encode",
           "frame_length", "frame_parts", "pack_columns", "parse_address", "proof", "raise_rejection", "read_secret",
           "rejection", "show_address", "unpack_columns"]

#: The protocol's version, sent in the hello; a server refuses another with ``unsupported_version``.
VERSION = 1
#: The largest frame either end sends or accepts, in bytes (a response larger than this comes in chunks).
MAX_FRAME = 16 << 20
#: The largest frame accepted before login: a hello or an auth answer is a few hundred bytes.
HELLO_FRAME = 4096
#: The largest request a server accepts after login: room for a list of some 200,000 indices (a longer list
#: goes in several requests), and a bound on what parsing one costs.
REQUEST_FRAME = 2 << 20
#: The kinds of rejection a request can get instead of its response.
KINDS = ("out_of_range", "malformed", "too_large", "not_authorised", "unsupported_version", "server_error")
_LENGTH = struct.Struct(">I")
_JSON = json.JSONEncoder(separators=(",", ":"))  # (json.dumps with options makes an encoder a call)
_DTYPES: dict[str, np.dtype] = {}  # dtype strings seen in column descriptions, parsed once
_AUTH = b"readerkit-auth-v1:"


class RemoteError(ReaderkitError):
    """A request the server answered with a rejection: ``kind`` (one of ``KINDS``), the server's message, and
    the address it came from.

    >>> str(RemoteError("out_of_range", "index 9 of 5 entries", "127.0.0.1:20001"))
    'out_of_range from 127.0.0.1:20001: index 9 of 5 entries'
    """

    def __init__(self, kind: str, message: str, address: str = "?"):
        super().__init__(f"{kind} from {address}: {message}")
        self.kind, self.message, self.address = kind, message, address

    def __reduce__(self) -> tuple:
        return type(self), (self.kind, self.message, self.address)


class NotAuthorised(RemoteError):
    """The server refused the secret (or wants one): not retried, since trying again cannot help."""


class UnsupportedVersion(RemoteError):
    """The server speaks another protocol version: not retried; upgrade the older end."""


class ProtocolError(BadValue):
    """Bytes that break the protocol: a frame over its limit, a header that is not a JSON object, a column
    description that does not match its body. The message says which."""


def encode(header: dict[str, Any], body: Iterable[bytes | memoryview] = ()) -> bytes:
    """One frame: the length, then the JSON ``header`` and the ``body`` buffers end to end.

    >>> encode({"type": "hello"})[:4]
    b'\\x00\\x00\\x00\\x14'
    >>> encode({"type": "x"}, [bytes(MAX_FRAME)])
    Traceback (most recent call last):
    ...
    readers.network.wire.ProtocolError: a frame of 16,777,232 bytes is over the limit of 16,777,216 (MAX_FRAME); send it in chunks
    """
    return b"".join(frame_parts(header, body))


def frame_parts(header: dict[str, Any], body: Iterable[bytes | memoryview] = ()) -> list[bytes | memoryview]:
    """The pieces of ``encode``'s frame, not yet joined: a socket writes them without another copy.

    >>> [bytes(p) for p in frame_parts({"type": "x"}, [b"ab"])]
    [b'\\x00\\x00\\x00\\x12', b'\\x00\\x00\\x00\\x0c', b'{"type":"x"}', b'ab']
    """
    head = _JSON.encode(header).encode()
    parts: list[bytes | memoryview] = [_LENGTH.pack(len(head)), head, *body]
    size = sum(len(p) for p in parts)
    if size > MAX_FRAME:
        raise ProtocolError(f"a frame of {size:,} bytes is over the limit of {MAX_FRAME:,} (MAX_FRAME); send it "
                            "in chunks")
    return [_LENGTH.pack(size), *parts]


def frame_length(prefix: bytes, limit: int = MAX_FRAME) -> int:
    """The payload length a frame's 4-byte prefix announces, refused before anything is read if over ``limit``.

    >>> frame_length(b"\\x00\\x00\\x01\\x00")
    256
    >>> frame_length(b"\\xff\\xff\\xff\\xff", HELLO_FRAME)
    Traceback (most recent call last):
    ...
    readers.network.wire.ProtocolError: a frame announces 4,294,967,295 bytes, over the limit of 4,096 here
    """
    (size,) = _LENGTH.unpack(prefix)
    if size > limit:
        raise ProtocolError(f"a frame announces {size:,} bytes, over the limit of {limit:,} here")
    return size


def decode(payload: bytes | memoryview) -> tuple[dict[str, Any], memoryview]:
    """(header, body) of a frame's payload; ``ProtocolError`` for anything malformed.

    >>> decode(b"\\x00\\x00\\x00\\x02[]")
    Traceback (most recent call last):
    ...
    readers.network.wire.ProtocolError: the header is not a JSON object with a "type" (got list)
    """
    view = memoryview(payload)
    if len(view) < 4:
        raise ProtocolError(f"a payload of {len(view)} bytes is too short for its header length")
    (size,) = _LENGTH.unpack(view[:4])
    if size > len(view) - 4:
        raise ProtocolError(f"the header length {size:,} runs past the payload's {len(view) - 4:,} bytes")
    try:
        header = json.loads(bytes(view[4:4 + size]))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"the header is not JSON ({exc})") from None
    except RecursionError:
        raise ProtocolError("the header is JSON nested deeper than it may be") from None
    if not isinstance(header, dict) or not isinstance(header.get("type"), str):
        raise ProtocolError(f'the header is not a JSON object with a "type" (got {type(header).__name__})')
    return header, view[4 + size:]


def pack_columns(columns: Any, decodes: Any = None) -> tuple[list[dict[str, Any]] | dict[str, Any], list[memoryview]]:
    """(description, buffers) of collated columns: one array, or a tuple of arrays, each as dtype, shape and
    its raw bytes. Object arrays have no bytes to send: a ``ProtocolError`` says so. ``decodes``, one per
    column (or one for a single array), each None or ``{"as": dtype, "divide": number}`` (``divide``
    optional), says how the receiver turns a narrowed column into the reader's (``decode_column``).

    >>> meta, buffers = pack_columns((np.arange(3, dtype=np.int32), np.zeros((3, 2))))
    >>> meta
    [{'dtype': '<i4', 'shape': [3]}, {'dtype': '<f8', 'shape': [3, 2]}]
    >>> [len(b) for b in buffers]
    [12, 48]
    >>> pack_columns(np.arange(3, dtype="<u2"), {"as": "<i4"})[0]
    {'dtype': '<u2', 'shape': [3], 'as': '<i4'}
    """
    single = not isinstance(columns, tuple)
    meta, buffers = [], []
    ways = (decodes,) if single else (decodes or (None,) * len(columns))
    for k, (column, way) in enumerate(zip((columns,) if single else columns, ways)):
        a = np.ascontiguousarray(column)
        if a.dtype.hasobject or a.dtype.kind not in "biufcSUVmM":
            raise ProtocolError(f"column {k} holds {a.dtype} values, which have no bytes to send; a served "
                                "reader's entries must be numbers, strings or fixed-size records")
        meta.append({"dtype": a.dtype.str if a.dtype.names is None else a.dtype.descr, "shape": list(a.shape),
                     **(way or {})})
        buffers.append(memoryview(a.reshape(-1)).cast("B") if a.size else memoryview(b""))
    return (meta[0] if single else meta), buffers


def decode_column(column: np.ndarray, way: dict[str, Any]) -> np.ndarray:
    """A narrowed column as the served reader gives it: a column of numbers cast to ``way["as"]`` (a numeric dtype),
    then divided by ``way["divide"]`` in that (floating) dtype when it says one, as the reader itself computes it
    (so bit for bit).

    >>> decode_column(np.array([1, 65535], "<u2"), {"as": "<i4"})
    array([    1, 65535], dtype=int32)
    >>> decode_column(np.array([0, 51, 255], np.uint8), {"as": "<f4", "divide": 255}).tolist()
    [0.0, 0.20000000298023224, 1.0]
    >>> decode_column(np.zeros(2, np.uint8), {"as": "O"})
    Traceback (most recent call last):
    ...
    readers.network.wire.ProtocolError: a column's "as" must name a numeric dtype and "divide" be a number, got {'as': 'O'}
    """
    try:
        if not isinstance(way["as"], str):  # (np.dtype(None) is float64)
            raise TypeError
        kind, divide = _dtype(way["as"]), way.get("divide")
        if kind.kind not in "biuf" or kind.itemsize > 8 or column.dtype.kind not in "biuf" or (divide is not None and (
                kind.kind != "f" or isinstance(divide, bool) or not isinstance(divide, (int, float)))):
            raise TypeError
        if divide is None:
            return column.astype(kind)
        return np.divide(column, kind.type(divide), dtype=kind)
    except (KeyError, TypeError, ValueError, OverflowError):
        raise ProtocolError(f'a column\'s "as" must name a numeric dtype and "divide" be a number, got {way!r}') from None


def _dtype(name: str) -> np.dtype:
    """``np.dtype(name)``, parsed once for each name (a frame's columns name the same few dtypes every time)."""
    found = _DTYPES.get(name)
    if found is None:
        found = np.dtype(name)
        if len(_DTYPES) < 1024:  # (a peer naming ever new dtypes does not grow it without bound)
            _DTYPES[name] = found
    return found


def unpack_columns(meta: Any, body: memoryview) -> Any:
    """The columns ``pack_columns`` described, read from ``body``: arrays over its bytes (no copy), a narrowed
    column (``as``) decoded into an array of its own (``decode_column``).

    >>> meta, buffers = pack_columns((np.arange(3, dtype=np.int32), np.ones(2)))
    >>> [a.tolist() for a in unpack_columns(meta, memoryview(b"".join(buffers)))]
    [[0, 1, 2], [1.0, 1.0]]
    >>> unpack_columns({"dtype": "<i4", "shape": [4]}, memoryview(bytes(8)))
    Traceback (most recent call last):
    ...
    readers.network.wire.ProtocolError: column 0 (<i4 of shape [4]) needs 16 bytes, and the body has 8 left
    """
    single = isinstance(meta, dict)
    described = [meta] if single else meta
    if not isinstance(described, list):
        raise ProtocolError(f"the columns' description must be an object or a list of them, got {type(meta).__name__}")
    out, at = [], 0
    for k, column in enumerate(described):
        try:
            dtype = (_dtype(column["dtype"]) if isinstance(column["dtype"], str)
                     else np.dtype([tuple(field) for field in column["dtype"]]))
            shape = tuple(int(n) for n in column["shape"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"column {k}'s description {column!r} is malformed ({exc})") from None
        if dtype.hasobject or any(n < 0 for n in shape):
            raise ProtocolError(f"column {k} ({dtype} of shape {list(shape)}) cannot be sent as raw bytes")
        size = dtype.itemsize * math.prod(shape)
        if size > len(body) - at:
            raise ProtocolError(f"column {k} ({column['dtype']} of shape {list(shape)}) needs {size:,} bytes, and "
                                f"the body has {len(body) - at:,} left")
        found = np.frombuffer(body[at:at + size], dtype=dtype).reshape(shape)
        out.append(found if "as" not in column else decode_column(found, column))
        at += size
    if at != len(body):
        raise ProtocolError(f"the body has {len(body) - at:,} bytes more than its columns describe")
    return out[0] if single else tuple(out)


def challenge() -> bytes:
    """A fresh random challenge for one connection's login (32 bytes from the operating system).

    >>> len(challenge()), challenge() != challenge()
    (32, True)
    """
    return os.urandom(32)


def proof(secret: bytes, nonce: bytes) -> str:
    """The answer to challenge ``nonce``: HMAC-SHA256 of it under ``secret``, as hex. Only a holder of the
    secret can make it, and it is good for this challenge alone.

    >>> proof(b"s3cret", bytes(32)) == proof(b"s3cret", bytes(32)) != proof(b"other", bytes(32))
    True
    """
    return hmac.new(secret, _AUTH + nonce, hashlib.sha256).hexdigest()


def read_secret(secret: str | bytes | None = None, *, file: str | None = None,
                environ: str = "READERKIT_SECRET") -> bytes | None:
    """The shared secret as bytes: given as text or bytes, read from ``file`` (a trailing newline ignored),
    or from the environment variable ``environ`` (a trailing newline ignored too); None when there is none.

    >>> read_secret("s3cret"), read_secret(b"raw\\x00")
    (b's3cret', b'raw\\x00')

    Text is sent as UTF-8, so text that UTF-8 cannot encode (a lone surrogate,
    or an environment variable holding bytes that are not UTF-8) is refused at
    once, without showing the secret:

    >>> read_secret("s3cret\\udcff")
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: the secret is not text that UTF-8 can encode (it holds a lone surrogate); give text of UTF-8 characters, or bytes (secret=b"...")
    """
    if secret is not None and file is not None:
        raise BadValue("give the secret or a secret file, not both")
    if file is not None:
        with open(file, "rb") as f:
            secret = f.read()
        if secret.endswith(b"\n"):
            secret = secret[:-2] if secret.endswith(b"\r\n") else secret[:-1]
        if not secret:
            raise BadValue(f"{file}: the secret file is empty; write the shared secret in it")
    from_environ = secret is None and file is None
    if from_environ:
        secret = os.environ.get(environ) or None
        if secret is not None and secret.endswith("\n"):  # (as a file's: $(cat secret) keeps none, echo adds one)
            secret = secret[:-1]
    if secret is None:
        return None
    if not isinstance(secret, str):
        return bytes(secret)
    try:
        return secret.encode()
    except UnicodeEncodeError:  # (the message shows nothing of the secret, not even the character at fault)
        if from_environ:
            raise BadValue(f"${environ} is not text that UTF-8 can encode (it holds bytes that are not UTF-8): the "
                           f"secret must be UTF-8 text; set {environ} to UTF-8 text on the server and the clients "
                           "(or give the server a --secret-file and readers.remote the same bytes as secret=b\"...\")"
                           ) from None
        raise BadValue('the secret is not text that UTF-8 can encode (it holds a lone surrogate); give text of UTF-8 '
                       'characters, or bytes (secret=b"...")') from None


def check_kind(kind: str) -> str:
    """``kind`` when it is one of ``KINDS``; a ProtocolError otherwise (a server sends only those).

    >>> check_kind("too_large")
    'too_large'
    """
    if kind not in KINDS:
        raise ProtocolError(f"unknown rejection kind {kind!r}; the protocol's kinds are {', '.join(KINDS)}")
    return kind


def rejection(kind: str, message: str, request: int | None = None) -> bytes:
    """The frame of a typed rejection, for request ``request`` when it is known.

    >>> decode(rejection("out_of_range", "index 9 of 5 entries", 3)[4:])[0]
    {'type': 'error', 'kind': 'out_of_range', 'message': 'index 9 of 5 entries', 'id': 3}
    """
    header: dict[str, Any] = {"type": "error", "kind": check_kind(kind), "message": message}
    if request is not None:
        header["id"] = request
    return encode(header)


def raise_rejection(header: dict[str, Any], address: str) -> None:
    """Raise the typed error of a rejection ``header`` from ``address``.

    >>> raise_rejection({"type": "error", "kind": "not_authorised", "message": "wrong secret"}, "h:1")
    Traceback (most recent call last):
    ...
    readers.network.wire.NotAuthorised: not_authorised from h:1: wrong secret
    """
    kind = check_kind(header.get("kind", ""))
    error = {"not_authorised": NotAuthorised, "unsupported_version": UnsupportedVersion}.get(kind, RemoteError)
    raise error(kind, str(header.get("message", "")), address)


def show_address(host: str, port: int) -> str:
    """``host:port``, an IPv6 host in brackets: what ``parse_address`` reads back.

    >>> show_address("::1", 7), show_address("127.0.0.1", 20001)
    ('[::1]:7', '127.0.0.1:20001')
    """
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


def parse_address(address: Any) -> tuple[str, int]:
    """(host, port) of ``"host:port"``, ``"[v6 host]:port"`` or a (host, port) pair; port 1..65535.

    >>> parse_address("127.0.0.1:20001"), parse_address("[::1]:7"), parse_address(("localhost", 9))
    (('127.0.0.1', 20001), ('::1', 7), ('localhost', 9))
    >>> parse_address("localhost")
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: server address 'localhost' is not "host:port"; write it as "127.0.0.1:20001" (an IPv6 host in brackets)
    """
    if isinstance(address, tuple) and len(address) == 2:
        host, port = address
        text = f"{host}:{port}"
    elif isinstance(address, str):
        text = address
        host, _, port = address.rpartition(":")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    else:
        raise BadType(f"server address must be \"host:port\" or a (host, port) pair, got {type(address).__name__}")
    port = str(port)
    if not host or ":" in host and not text.startswith("[") and not isinstance(address, tuple) \
            or not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise BadValue(f'server address {text!r} is not "host:port"; write it as "127.0.0.1:20001" (an IPv6 '
                       "host in brackets)")
    return str(host), int(port)
