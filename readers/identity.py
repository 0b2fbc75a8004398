"""What a pipeline's data is, apart from where it was read from, so a checkpoint knows its data.

``fingerprint(reader)`` has three parts, each compared on its own so that a
refusal can say which differs:

``pipeline``
    each stage's ``identity()``, top down: its name and options, without
    the paths or folders the data was read from;
``length``
    the entries in a pass, or None for a stream;
``content``
    one digest of every source's ``digest()``: the SHA-256 of the MNIST
    files, a sampled hash of arrays, ...; None when a source cannot say
    (a plain generator function), and then only the other two are compared.

The same files reached through another folder give the same fingerprint;
other files of the same shape do not.

>>> import numpy as np
>>> from readers import from_arrays, shuffle
>>> a = fingerprint(shuffle(from_arrays(np.arange(4)), seed=1))
>>> a["pipeline"], a["length"], len(a["content"])
(['shuffle(buf_size=None (global), seed=1)', 'from_arrays(4 rows: int64)'], 4, 32)
>>> b = fingerprint(shuffle(from_arrays(np.arange(1, 5)), seed=1))
>>> differences(a, b)
['content: the data itself differs (same pipeline and length, other values)']
"""
from __future__ import annotations

import functools
import hashlib
import os
from typing import Any

import numpy as np

from readers.pipeline import Node, describe, walk

__all__ = ["array_digest", "differences", "file_digest", "fingerprint", "value_digest"]

#: Arrays up to this many bytes are hashed whole; larger ones by BLOCKS spread over them, as many bytes in all.
WHOLE = 1 << 22
BLOCKS = 1024
SAMPLES = 1024  # entries of a long sequence hashed by value_digest


def _hasher() -> Any:
    return hashlib.blake2b(digest_size=16)


def _sampled(a: np.ndarray, h: Any) -> None:
    """Feed ``h`` about WHOLE bytes of a large array, from evenly spread places, reading nothing else."""
    if a.flags.c_contiguous:  # 1,024 blocks of 4 KiB of its bytes, the first and the last included
        flat = a.reshape(-1).view(np.uint8)
        size = WHOLE // BLOCKS
        for start in np.linspace(0, flat.size - size, BLOCKS).astype(np.int64).tolist():
            h.update(flat[start:start + size].data)
    else:  # a strided view: single values at evenly spread flat positions, gathered without a copy of the rest
        picks = np.linspace(0, a.size - 1, max(1, WHOLE // a.itemsize)).astype(np.int64)
        h.update(np.ascontiguousarray(a[np.unravel_index(picks, a.shape)]).view(np.uint8).data)


def array_digest(*arrays: Any) -> str:
    """A cheap digest of arrays: dtype, shape and their bytes, sampled when they are large.

    Arrays up to 4 MiB are hashed whole. A larger one is hashed by 4 MiB of
    its bytes: 1,024 blocks spread evenly over it, the first and the last
    included (for a strided view, values at evenly spread places). A digest
    costs about the same for any size, however long its rows, while any
    change of shape or type and most edits still show.

    >>> import numpy as np
    >>> array_digest(np.zeros(3)) == array_digest(np.zeros(3)), array_digest(np.zeros(3)) == array_digest(np.ones(3))
    (True, False)
    """
    h = _hasher()
    for a in arrays:
        a = np.asarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        if a.dtype == object:
            raise TypeError(f"array_digest: an object array ({a.shape}) has no bytes to hash; use value_digest")
        if a.nbytes > WHOLE:
            _sampled(a, h)
        elif a.size:
            h.update(np.ascontiguousarray(a).reshape(-1).view(np.uint8).data)
    return h.hexdigest()


def _plain(value: Any, h: Any) -> bool:
    """Feed ``value`` to ``h``; False when it holds something without a stable form (an object's repr)."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes, np.generic)):
        h.update(f"{type(value).__name__}:{value!r};".encode())
        return True
    if isinstance(value, np.ndarray) and value.dtype != object:
        h.update(array_digest(value).encode())
        return True
    if isinstance(value, (tuple, list)):
        h.update(f"{type(value).__name__}{len(value)}(".encode())
        return all(_plain(v, h) for v in value)
    if isinstance(value, dict):
        h.update(f"dict{len(value)}(".encode())
        return all(_plain(k, h) and _plain(v, h) for k, v in sorted(value.items(), key=lambda kv: repr(kv[0])))
    return False


def value_digest(values: Any) -> str | None:
    """A digest of a sequence's entries (sampled when it is long), or None when one is not plain data.

    Plain data is numbers, strings, bytes, None, numpy arrays, and tuples,
    lists and dicts of them; an arbitrary object has no stable form to hash.

    >>> value_digest(["a", (1, 2.5)]) == value_digest(["a", (1, 2.5)]), value_digest([object()])
    (True, None)
    """
    n = len(values)
    picks = range(n) if n <= SAMPLES else np.unique(np.linspace(0, n - 1, SAMPLES).astype(np.int64)).tolist()
    h = _hasher()
    h.update(f"{n};".encode())
    return h.hexdigest() if all(_plain(values[i], h) for i in picks) else None


def file_digest(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB blocks.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile() as f:
    ...     _ = f.write(b"abc"); f.flush()
    ...     file_digest(f.name)[:16]
    'ba7816bf8f01cfea'
    """
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fingerprint(reader: Any) -> dict[str, Any]:
    """What ``reader``'s data is: ``{"pipeline": [...], "length": n, "content": digest}`` (see above).

    A stage that is a ``functools.partial`` shows plain arguments (numbers,
    short strings such as ``split='test'``) but not paths or objects, so the
    same data reached through another folder fingerprints the same.

    >>> fingerprint(lambda: iter([1, 2]))
    {'pipeline': ['<lambda>'], 'length': None, 'content': None}
    >>> def rows(path, split):
    ...     with open(path) as f:
    ...         yield from f
    >>> fingerprint(functools.partial(rows, "/data/rows.txt", split="test"))["pipeline"]
    ["partial(rows, <path>, split='test')"]
    """
    stages = list(walk(reader))
    sources = [s for s in stages if not (isinstance(s, Node) and s.parents)]
    digests = [s.digest() if isinstance(s, Node) else None for s in sources]
    content = None
    if all(d is not None for d in digests):
        h = _hasher()
        for d in digests:
            h.update(d.encode() + b";")
        content = h.hexdigest()
    try:
        length: int | None = len(reader)
    except TypeError:
        length = None
    return {"pipeline": [_identity(s) for s in stages], "length": length, "content": content}


def _identity(stage: Any) -> str:
    """A stage as part of what the data is; a partial's paths and objects are left out, as a source's are."""
    if isinstance(stage, Node):
        return stage.identity()
    if isinstance(stage, functools.partial):
        args = [_identity(stage.func), *map(_argument, stage.args),
                *(f"{k}={_argument(v)}" for k, v in stage.keywords.items())]
        return f"partial({', '.join(args)})"
    return describe(stage)


def _argument(value: Any) -> str:
    """A partial's argument in an identity: plain values as they are; a path is ``<path>``, an object its type."""
    if isinstance(value, os.PathLike) or isinstance(value, str) and (
            os.sep in value or (os.altsep is not None and os.altsep in value)):
        return "<path>"
    if isinstance(value, (np.number, np.bool_)):
        value = value.item()  # the same identity whichever numpy prints it
    if value is None or isinstance(value, (bool, int, float, complex)):
        return repr(value)
    if isinstance(value, str) and len(value) <= 40:
        return repr(value)
    if isinstance(value, (tuple, list)) and len(value) <= 8:  # a shape, a few column names
        inner = ", ".join(map(_argument, value)) + ("," if isinstance(value, tuple) and len(value) == 1 else "")
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    if callable(value) and getattr(value, "__qualname__", None):
        return describe(value)  # a function is known by its name, which no run changes
    return f"<{type(value).__qualname__}>"


def differences(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """What differs between two fingerprints, one line each; empty when they are the same data.

    A content digest missing on either side (a source that cannot say) is not
    compared.

    >>> differences({"pipeline": ["a"], "length": 2, "content": None},
    ...             {"pipeline": ["b"], "length": 2, "content": "x"})
    ["pipeline: stage 0 was 'a', now 'b'"]
    """
    out = []
    old, new = list(saved.get("pipeline") or []), list(now.get("pipeline") or [])
    if old != new:
        at = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), None)
        if at is None:
            out.append(f"pipeline: {len(old)} stages were {old!r}, now {len(new)}: {new!r}")
        else:
            out.append(f"pipeline: stage {at} was {old[at]!r}, now {new[at]!r}")
    if saved.get("length") != now.get("length"):
        out.append(f"length: {saved.get('length')} entries per pass, now {now.get('length')}")
    if None not in (saved.get("content"), now.get("content")) and saved["content"] != now["content"]:
        same = "same pipeline and length, other values" if not out else "other values"
        out.append(f"content: the data itself differs ({same})")
    return out
