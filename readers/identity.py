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
    files, a sampled hash of arrays, ...; a source that cannot say (a plain
    generator function) is known by its first 64 entries, when they are
    plain data. None when they are not, and then only the other two are
    compared.

The same files reached through another folder give the same fingerprint;
other files of the same shape do not. A stage that holds a function (a map,
a filter) shows its name and ``function_digest``, so changed preprocessing
is other data. The digests are ``readers.digests``' (also importable from here).

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
import os
import types
import weakref
from typing import Any

import numpy as np

from readers.digests import (
    SHORT,
    array_digest,
    file_digest,
    function_digest,
    hasher,
    plain_digest,
    value_digest,
)
from readers.graph import Node, describe, describe_partial, walk

__all__ = [
    "array_digest", "differences", "file_digest", "fingerprint", "function_digest", "function_identity",
    "served_fingerprint", "value_digest",
]


_remembered: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def function_identity(func: Any) -> str:
    """``func`` in a stage's identity: its name, as ``describe`` shows it, and its ``function_digest``.

    The digest is taken once per function object and remembered while it
    lives, so a callable whose attributes change as it runs (a call counter,
    a model put in eval mode) is the same function on a resume in the same
    process as when training began.

    >>> function_identity(abs)
    'abs ...'
    """
    try:
        found = _remembered.get(func)
    except TypeError:  # not weakly referable: taken afresh
        return f"{describe(func)} {function_digest(func)}"
    if found is None:
        found = _remembered[func] = f"{describe(func)} {function_digest(func)}"
    return found


def fingerprint(reader: Any) -> dict[str, Any]:
    """What ``reader``'s data is: ``{"pipeline": [...], "length": n, "content": digest}`` (see above).

    A stage that is a ``functools.partial`` shows plain arguments (numbers,
    short strings such as ``split='test'``) but not paths or objects, so the
    same data reached through another folder fingerprints the same. A path
    is a ``PathLike``; a string with a folder separator; a string given to a
    keyword named as a path (``data_dir=``, ``root=``, ``path=``); or one
    given by position that names a file or folder that exists (``"data"``,
    read from the current folder). ``split="train"`` stays a value.
    Other data (a dict, a long list, an array) shows its type and a digest
    of its values; a function, its name and ``function_digest``.

    >>> fingerprint(lambda: iter([1, 2]))["pipeline"]
    ['<lambda>']
    >>> fingerprint(lambda: iter([1, 2]))["content"] == fingerprint(lambda: iter([1, 3]))["content"]
    False
    >>> def rows(path, split):
    ...     with open(path) as f:
    ...         yield from f
    >>> fingerprint(functools.partial(rows, "/data/rows.txt", split="test"))["pipeline"]
    ["partial(rows, <path>, split='test')"]
    >>> fingerprint(functools.partial(rows, "/data/rows.txt", names={"a": 0}))["pipeline"]
    ['partial(rows, <path>, names=<dict ...>)']
    """
    found = _found(reader)
    del found["digests"]
    return found


def _found(reader: Any, content: bool = True) -> dict[str, Any]:
    """The fingerprint, with its sources' own ``digests`` too (each source digested once); without ``content``,
    no source is digested or read, and the digests are None."""
    pipeline, digests = _parts(reader, content)
    content = None
    if all(d is not None for d in digests):
        h = hasher()
        for d in digests:
            h.update(d.encode() + b";")
        content = h.hexdigest()
    try:
        length: int | None = len(reader)
    except TypeError:
        length = None
    found = {"pipeline": pipeline, "length": length, "content": content}
    if content is not None and any(d.startswith("head:") for d in digests):
        found["head"] = HEAD  # the content is known only by the first entries of a source
    found["digests"] = digests
    return found


def _parts(reader: Any, content: bool = True) -> tuple[list[str], list[str | None]]:
    """(each stage's identity, each source's digest), top down. A stage that stands for a pipeline read
    elsewhere (``readers.remote``: its ``stands_for()`` gives the served pipeline's parts) adds those, so the
    same data read through a server is the same data."""
    pipeline: list[str] = []
    digests: list[str | None] = []
    for stage in walk(reader):
        served = stage.stands_for() if isinstance(stage, Node) else None
        if served is not None:
            pipeline.extend(served["pipeline"])
            digests.extend(served["digests"])
        elif not (isinstance(stage, Node) and stage.parents):
            pipeline.append(_identity(stage))
            if not content:
                digests.append(None)
                continue
            digest = stage.digest() if isinstance(stage, Node) else None
            digests.append(_head(stage) if digest is None else digest)
        else:
            pipeline.append(_identity(stage))
    return pipeline, digests


def served_fingerprint(reader: Any, *, content: bool = True) -> dict[str, Any]:
    """``fingerprint(reader)`` with its sources' own ``digests``: what a data-provider server announces, so a
    remote reader's fingerprint (``stands_for``) is the local reader's.

    Without ``content`` nothing of the data is read: the pipeline and the
    length alone, the content and digests None (a server of a part of the
    data announces that, and the digest of its own rows beside it).

    >>> import numpy as np
    >>> from readers import from_arrays
    >>> sorted(served_fingerprint(from_arrays(np.arange(4))))
    ['content', 'digests', 'length', 'pipeline']
    >>> served_fingerprint(from_arrays(np.arange(4)), content=False)
    {'pipeline': ['from_arrays(4 rows: int64)'], 'length': 4, 'content': None, 'digests': [None]}
    """
    return _found(reader, content)


#: Entries of a source that has no digest of its own read to know it by.
HEAD = 64


def _head(source: Any) -> str | None:
    """A digest of the first HEAD entries of pass 0 of a source that cannot digest its data, or None when
    they are not plain data (see ``value_digest``)."""
    head: list[Any] = []
    entries = None
    try:
        entries = source.run(0) if isinstance(source, Node) else source()  # run(0) leaves the pass count alone
        if not isinstance(source, Node) and iter(entries) is entries and source() is entries:
            return None  # one iterator, handed out again on every call: what is read here, training loses
        for entry in entries:
            head.append(entry)
            if len(head) == HEAD:
                break
    except Exception:  # a reader that cannot be read now fails in training, where it is reported
        return None
    finally:
        close = getattr(entries, "close", None)
        if callable(close):
            close()
    found = value_digest(head)
    return None if found is None else f"head:{found}"


def _identity(stage: Any) -> str:
    """A stage as part of what the data is; a partial's paths and objects are left out, as a source's are."""
    if isinstance(stage, Node):
        return stage.identity()
    if isinstance(stage, functools.partial):
        return describe_partial(stage, _argument, _identity)
    return describe(stage)


#: Parts of a keyword's name (split at "_") that say its string is a path: data_dir=, root=, cache_path=.
_PATH_WORDS = {"path", "paths", "dir", "dirs", "directory", "folder", "root", "file", "files", "filename", "location"}


def _is_path(value: Any, key: str | None) -> bool:
    """Whether a partial's argument is a path: a ``PathLike``; a string with a folder separator, given to a
    keyword named as a path, or given by position and naming a file or folder that exists ("data")."""
    if isinstance(value, os.PathLike):
        return True
    if not isinstance(value, str):
        return False
    if os.sep in value or (os.altsep is not None and os.altsep in value):
        return True
    if key is not None:  # split="train" is a value, even beside a folder train/
        return not _PATH_WORDS.isdisjoint(key.lower().split("_"))
    return os.path.exists(value)


def _argument(value: Any, key: str | None = None) -> str:
    """A partial's argument in an identity: plain values as they are; a path ``<path>``; a function by name
    and ``function_digest``; other data by type and digest (``<dict 1a2b...>``); an object by its type."""
    if _is_path(value, key):
        return "<path>"
    if isinstance(value, (np.number, np.bool_)):
        value = value.item()  # the same identity whichever numpy prints it
    if value is None or isinstance(value, (bool, int, float, complex)):
        return repr(value)
    if isinstance(value, str) and len(value) <= 40:
        return repr(value)
    if isinstance(value, (tuple, list)) and len(value) <= 8:  # a shape, a few column names
        inner = ", ".join(_argument(v, key) for v in value)
        inner += "," if isinstance(value, tuple) and len(value) == 1 else ""
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    if isinstance(value, (types.FunctionType, types.MethodType, functools.partial)):
        return function_identity(value)  # what it computes, as a map's function is known
    if callable(value) and getattr(value, "__qualname__", None):
        return describe(value)  # a class or a built-in is known by its name, which no run changes
    digest = plain_digest(value)  # a dict, a long list, an array: different values, different identities
    return f"<{type(value).__qualname__}{'' if digest is None else ' ' + digest[:SHORT]}>"


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
        if saved.get("head") or now.get("head"):
            same += f"; a source without a digest of its own is known by its first {HEAD} entries: a reader " \
                    "must give the same entries in every run to be resumed"
        out.append(f"content: the data itself differs ({same})")
    return out
