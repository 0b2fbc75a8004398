"""Digests of data and of code: arrays, sequences of values, files, and what a function computes.

Each is the same in every process (no ``hash()``, no addresses), so it can
be saved in a checkpoint or key a cache and be compared by a later run.
``readers.fingerprint`` builds a pipeline's identity from them.

>>> import numpy as np
>>> array_digest(np.arange(3)) == array_digest(np.arange(3)), function_digest(len) == function_digest(abs)
(True, False)
"""
from __future__ import annotations

import functools
import inspect
import os
import threading
import types
from typing import Any

import numpy as np

from readers.errors import BadType

__all__ = ["SHORT", "array_digest", "file_digest", "function_digest", "hasher", "plain_digest", "value_digest"]

#: Arrays up to this many bytes are hashed whole; larger ones by BLOCKS spread over them, as many bytes in all.
WHOLE = 1 << 22
BLOCKS = 1024
SAMPLES = 1024  # entries of a long sequence hashed by value_digest
#: Hex digits of a function_digest, and of a value's digest in a stage's identity.
SHORT = 16


def hasher() -> Any:
    """The hash every digest here is made with: BLAKE2b of 16 bytes.

    >>> hasher().hexdigest() == hasher().hexdigest()
    True
    """
    import hashlib  # on first use: it loads OpenSSL, a cost no pass without digests should pay at import

    return hashlib.blake2b(digest_size=16)


def _sampled(a: np.ndarray, h: Any) -> None:
    """Feed ``h`` about WHOLE bytes of a large array: BLOCKS runs of elements at evenly spread places.

    The places are flat positions in C order, the first and the last
    included, so the same elements are read whatever the memory layout: a
    C-contiguous array's runs are views of its bytes, any other's are copied
    out one run at a time (``a.flat``), reading nothing else.
    """
    run = max(1, WHOLE // BLOCKS // a.itemsize)
    starts = np.linspace(0, a.size - run, BLOCKS).astype(np.int64).tolist()
    flat = a.reshape(-1) if a.flags.c_contiguous else a.flat
    for start in starts:
        h.update(flat[start:start + run].view(np.uint8).data)


def array_digest(*arrays: Any) -> str:
    """A cheap digest of arrays: dtype, shape and their bytes, sampled when they are large.

    Arrays up to 4 MiB are hashed whole. A larger one is hashed by about
    4 MiB of its values: 1,024 runs of consecutive elements (in C order)
    spread evenly over it, the first and the last included. A digest costs
    about the same for any size, however long its rows, while any change of
    shape or type and most edits still show. It depends on the values alone,
    not on the memory layout: a Fortran-ordered copy or a strided view digests
    as its C-ordered copy does.

    >>> import numpy as np
    >>> array_digest(np.zeros(3)) == array_digest(np.zeros(3)), array_digest(np.zeros(3)) == array_digest(np.ones(3))
    (True, False)
    >>> x = np.arange(6.0).reshape(2, 3)
    >>> array_digest(x) == array_digest(np.asfortranarray(x))
    True
    """
    h = hasher()
    for a in arrays:
        a = np.asarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        if a.dtype == object:
            raise BadType(f"array_digest: an object array ({a.shape}) has no bytes to hash; use value_digest")
        if a.nbytes > WHOLE:
            _sampled(a, h)
        elif a.size:
            h.update(np.ascontiguousarray(a).reshape(-1).view(np.uint8).data)
    return h.hexdigest()


_local = threading.local()  # .inside: the containers _plain is inside of, in this thread's current call


def _plain(value: Any, h: Any) -> bool:
    """Feed ``value`` to ``h``; False when it holds something without a stable form (an object's repr)."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes, np.generic)):
        h.update(f"{type(value).__name__}:{value!r};".encode())
        return True
    if isinstance(value, np.ndarray) and value.dtype != object:
        h.update(array_digest(value).encode())
        return True
    if isinstance(value, (tuple, list, dict)):
        inside = _local.__dict__.setdefault("inside", set())
        if id(value) in inside:  # a container that holds itself has no finite form
            return False
        inside.add(id(value))
        try:
            h.update(f"{type(value).__name__}{len(value)}(".encode())
            if not isinstance(value, dict):
                return all(_plain(v, h) for v in value)
            return all(_plain(k, h) and _plain(v, h) for k, v in sorted(value.items(), key=lambda kv: repr(kv[0])))
        finally:
            inside.discard(id(value))
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
    h = hasher()
    h.update(f"{n};".encode())
    return h.hexdigest() if all(_plain(values[i], h) for i in picks) else None


def plain_digest(value: Any) -> str | None:
    """A digest of one value of plain data (see ``value_digest``), or None when it holds an object.

    >>> plain_digest({"a": [1, 2]}) == plain_digest({"a": [1, 2]}) != plain_digest({"a": [1, 3]}), plain_digest(object())
    (True, None)
    """
    h = hasher()
    return h.hexdigest() if _plain(value, h) else None


def _const(value: Any, h: Any) -> None:
    """Feed a code object's constant: nested code whole, a frozenset in an order no hash seed changes."""
    if isinstance(value, types.CodeType):
        _code(value, h)
    elif isinstance(value, (tuple, frozenset)):
        parts = []
        for item in value:
            sub = hasher()
            _const(item, sub)
            parts.append(sub.hexdigest())
        h.update(f"{type(value).__name__}({','.join(sorted(parts) if isinstance(value, frozenset) else parts)});".encode())
    else:  # numbers, strings, bytes, None, Ellipsis: their repr has no address
        h.update(f"{type(value).__name__}:{value!r};".encode())


def _code(code: types.CodeType, h: Any) -> None:
    """Feed what a code object computes: its bytecode, constants and names, not its file or line numbers."""
    h.update(code.co_code)  # specialised instructions read back as the generic ones: calls do not change it
    h.update(getattr(code, "co_exceptiontable", b""))
    h.update(repr((code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags,
                   code.co_names, code.co_freevars)).encode())
    for value in code.co_consts:
        _const(value, h)


def _held(value: Any, h: Any, seen: dict[int, Any]) -> None:
    """Feed a value a function holds (a default, a closure cell, an attribute): plain data, a function, or a type name."""
    sub = hasher()
    if isinstance(value, (tuple, list, dict, set, frozenset)) and id(value) in seen:  # holds itself
        h.update(b"<again>;")
        return
    if _plain(value, sub):
        h.update(b"plain:" + sub.digest())
        return
    seen[id(value)] = value
    if isinstance(value, (tuple, list)):
        h.update(f"{type(value).__name__}{len(value)}(".encode())
        for item in value:
            _held(item, h, seen)
    elif isinstance(value, dict):
        h.update(f"dict{len(value)}(".encode())
        for key, item in sorted(value.items(), key=lambda kv: repr(kv[0])):
            _held(key, h, seen)
            _held(item, h, seen)
    elif isinstance(value, (set, frozenset)):  # lambda e: e[1] in keep: in an order no hash seed changes
        parts = []
        for item in value:
            sub = hasher()
            _held(item, sub, seen)
            parts.append(sub.hexdigest())
        h.update(f"{type(value).__name__}({','.join(sorted(parts))});".encode())
    elif callable(value):
        _function(value, h, seen)
    else:  # no stable form: a lock, a file, a model
        h.update(f"<{type(value).__module__}.{type(value).__qualname__}>;".encode())


def _attributes(obj: Any, h: Any, seen: dict[int, Any]) -> None:
    """Feed an object's type and public attributes (private ones are often caches, filled in by a first call)."""
    h.update(f"{type(obj).__module__}.{type(obj).__qualname__}(".encode())
    for name, value in sorted(getattr(obj, "__dict__", {}).items()):
        if not name.startswith("_"):
            h.update(f"{name}=".encode())
            _held(value, h, seen)


def _function(func: Any, h: Any, seen: dict[int, Any]) -> None:
    """Feed what ``func`` computes (see ``function_digest``)."""
    if id(func) in seen:  # a function that holds itself, or one met before: said once
        h.update(b"<again>;")
        return
    seen[id(func)] = func  # held, so that no other object takes its id while the digest is made
    if isinstance(func, functools.partial):
        h.update(b"partial(")
        _function(func.func, h, seen)
        _held(func.args, h, seen)
        _held(func.keywords, h, seen)
    elif inspect.ismethod(func):
        h.update(b"method(")
        _function(func.__func__, h, seen)
        if inspect.isclass(func.__self__):  # a classmethod: its class
            _function(func.__self__, h, seen)
        else:
            _attributes(func.__self__, h, seen)
    elif isinstance(func, types.FunctionType):
        h.update(b"function(")
        _code(func.__code__, h)
        _held(func.__defaults__, h, seen)
        _held(func.__kwdefaults__, h, seen)
        for cell in func.__closure__ or ():
            try:
                _held(cell.cell_contents, h, seen)
            except ValueError:  # a cell not filled yet
                h.update(b"<empty>;")
    elif inspect.isclass(func):  # a class called as a function: its name and the code of its methods
        h.update(f"class {func.__module__}.{func.__qualname__}(".encode())
        for name, member in sorted(vars(func).items()):
            member = getattr(member, "__func__", member)  # a staticmethod's or classmethod's function
            if isinstance(member, types.FunctionType):
                h.update(f"{name}=".encode())
                _function(member, h, seen)
    elif isinstance(type(func).__call__, types.FunctionType):  # an object with a __call__ written in Python
        _function(type(func).__call__, h, seen)
        _attributes(func, h, seen)
    else:  # built in (len, str.upper, a ufunc, operator.itemgetter(0)): its name, its repr without an address
        shown = repr(func)
        shown = "" if " at 0x" in shown else shown
        h.update(f"builtin {type(func).__qualname__} {getattr(func, '__qualname__', '')} {shown}".encode())
        if getattr(func, "__self__", None) is not None and not inspect.ismodule(func.__self__):
            _held(func.__self__, h, seen)  # a bound method of data: {"a": 1}.get
        if callable(getattr(func, "__wrapped__", None)):  # functools.lru_cache and the like
            _function(func.__wrapped__, h, seen)
    h.update(b");")


def function_digest(func: Any) -> str:
    """A short digest of what ``func`` computes, the same in every process: for checkpoints and caches.

    A Python function is known by its code (bytecode, constants, nested
    functions, the names it uses) and by the plain data it holds: defaults,
    closure cells (numbers, strings, arrays, tuples, lists, dicts and sets of
    them; other objects by their type alone) and the functions it holds, recursively. A
    ``functools.partial`` adds its arguments; an object with a ``__call__``,
    that method and its public attributes; a bound method, its object's; a
    built-in is known by its name. Not its name, file or line: the same
    lambda moved or renamed digests the same, ``x * 2`` and ``x * 3`` do not.

    What it calls by a global name is known by that name only, and a cell
    that holds a mutable value digests as that value is now. Bytecode
    changes with the Python version, and so does the digest: compare digests
    made by one version.

    >>> function_digest(lambda e: e * 2) == function_digest(lambda e: e * 2)
    True
    >>> function_digest(lambda e: e * 2) == function_digest(lambda e: e * 3)
    False
    >>> def scale(k):
    ...     return lambda e: e * k
    >>> function_digest(scale(2)) == function_digest(scale(3)), len(function_digest(scale(2)))
    (False, 16)
    >>> function_digest(functools.partial(round, ndigits=1)) != function_digest(functools.partial(round, ndigits=2))
    True
    """
    if not callable(func):
        raise BadType(f"function_digest: func must be callable, got {type(func).__name__} {func!r}")
    import hashlib

    h = hashlib.blake2b(digest_size=SHORT // 2)
    _function(func, h, {})
    return h.hexdigest()


def file_digest(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB blocks.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile() as f:
    ...     _ = f.write(b"abc"); f.flush()
    ...     file_digest(f.name)[:16]
    'ba7816bf8f01cfea'
    """
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
