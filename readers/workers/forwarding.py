"""Exceptions raised in a worker, sent to the consumer and raised there as themselves.

A worker's exception crosses a pipe as its pickle, its traceback text and its
type's name and message (``pack_error``); the consumer raises it again chained
from the worker's traceback (``unpack_error``), rebuilding one that does not
pickle from its type and message where that gives the same text.
"""
from __future__ import annotations

import importlib
import pickle
import pickletools
import sys
import traceback
from typing import Any

__all__ = ["interactive_names", "pack_error", "unpack_error"]


class _RemoteTraceback(Exception):
    """The cause of a re-raised worker exception: the worker's traceback, as text."""


def pack_error(exc: BaseException) -> tuple:
    """An exception as (its pickle or None, its traceback text, (module, qualname, message)) to cross a pipe;
    the last part rebuilds the type of one that does not pickle (see ``unpack_error``)."""
    try:
        blob: bytes | None = pickle.dumps(exc)
        pickle.loads(blob)  # some exceptions pickle but cannot be rebuilt
    except Exception:
        blob = None
    kind = type(exc)
    return blob, "".join(traceback.format_exception(exc)), (kind.__module__, kind.__qualname__, str(exc))


def _rebuilt(module: str, qualname: str, message: str) -> BaseException | None:
    """An exception of the type ``module.qualname`` made from ``message`` alone, when that gives the same text."""
    try:
        kind: Any = importlib.import_module(module)
        for part in qualname.split("."):
            kind = getattr(kind, part)
        exc = kind(message) if isinstance(kind, type) and issubclass(kind, BaseException) else None
        return exc if exc is not None and str(exc) == message else None
    except Exception:  # not importable (a class local to a function), or its __init__ wants more: no rebuild
        return None


def unpack_error(payload: tuple, where: str) -> BaseException:
    """The exception ``pack_error`` packed, chained from the worker's traceback text.

    One that does not pickle comes back as its type made from its message, when
    its type can be imported and made so; else as a RuntimeError naming its type.

    >>> exc = unpack_error(pack_error(KeyError("row 7")), "worker 1")
    >>> type(exc).__name__, str(exc), "Traceback in worker 1" in str(exc.__cause__)
    ('KeyError', "'row 7'", True)
    >>> class Local(Exception):
    ...     def __init__(self, row, why):
    ...         super().__init__(f"row {row}: {why}")
    >>> unpack_error(pack_error(Local(7, "bad")), "worker 1")
    RuntimeError('readers.workers.forwarding.Local: row 7: bad (raised in worker 1; the exception could not be pickled, so it comes as a RuntimeError: to get it as itself, let its __init__ take its message alone and give it only attributes that pickle)')
    """
    blob, text, (module, qualname, message) = payload
    try:
        exc = pickle.loads(blob) if blob is not None else None
    except Exception:
        exc = None
    if not isinstance(exc, BaseException):
        exc = _rebuilt(module, qualname, message)
    if exc is None:
        name = qualname if module == "builtins" else f"{module}.{qualname}"
        exc = RuntimeError(f"{name}: {message} (raised in {where}; the exception could not be pickled, so it comes "
                           "as a RuntimeError: to get it as itself, let its __init__ take its message alone and give "
                           "it only attributes that pickle)")
    exc.__cause__ = _RemoteTraceback(f'\n"""\nTraceback in {where}:\n{text}"""')
    return exc


def interactive_names(blob: bytes) -> list[str]:
    """Names a pickle takes from ``__main__`` when that is an interactive session (a notebook, a REPL),
    which a spawned process cannot import: it would fail only once started, so tell before.

    >>> import pickle
    >>> interactive_names(pickle.dumps(abs, 5))
    []
    """
    if hasattr(sys.modules.get("__main__"), "__file__"):
        return []  # a script: spawned workers import it
    names, strings = [], []
    for op, arg, _ in pickletools.genops(blob):
        if op.name == "STACK_GLOBAL" and len(strings) >= 2 and strings[-2] == "__main__":
            names.append(strings[-1])
        elif op.name == "GLOBAL" and str(arg).startswith("__main__ "):
            names.append(str(arg).split(" ", 1)[1])
        elif isinstance(arg, str) and op.name.endswith("UNICODE"):
            strings.append(arg)
    return names
