"""readers.workers.forwarding: a worker's exception, packed to cross a pipe and raised again as itself."""
from __future__ import annotations

import threading

import pytest

from readers.workers.forwarding import pack_error, unpack_error


class TwoArgError(Exception):
    def __init__(self, a, b):
        super().__init__(f"{a}-{b}")


def test_unpack_error_rebuilds_the_exception_chained_from_the_workers_traceback():
    try:
        raise KeyError("row 7")
    except KeyError as exc:
        packed = pack_error(exc)
    rebuilt = unpack_error(packed, "prefetch worker 1")
    assert type(rebuilt) is KeyError and rebuilt.args == ("row 7",)
    assert "Traceback in prefetch worker 1" in str(rebuilt.__cause__) and 'raise KeyError("row 7")' in str(
        rebuilt.__cause__)


def test_unpack_error_of_an_exception_that_cannot_be_rebuilt_is_a_runtime_error_naming_it():
    rebuilt = unpack_error(pack_error(TwoArgError(1, 2)), "worker 0")
    assert type(rebuilt) is RuntimeError
    assert str(rebuilt).startswith(
        "tests.readers.workers.test_forwarding.TwoArgError: 1-2 (raised in worker 0; the exception could not be pickled, ")
    assert "let its __init__ take its message alone" in str(rebuilt)


class LockedError(Exception):
    """An exception holding what does not pickle; made from its message alone it is whole again."""

    def __init__(self, message):
        super().__init__(message)
        self.lock = threading.Lock()


class LoudError(Exception):
    """Made from its message alone, its text differs: rebuilding it so would change the message."""

    def __init__(self, message, *, code=0):
        super().__init__(f"{message} (code {code})")
        self.lock = threading.Lock()


def _raise_locked():
    try:
        raise LockedError("disk 3 is gone")
    except LockedError as exc:
        return exc


@pytest.mark.parametrize("exc, kind, text", [
    # regression: these came back as RuntimeError, their type lost
    (_raise_locked(), LockedError, "disk 3 is gone"),
    (TwoArgError(1, 2), RuntimeError, "tests.readers.workers.test_forwarding.TwoArgError: 1-2 (raised in worker 2; "),
    (LoudError("bad", code=3), RuntimeError, "tests.readers.workers.test_forwarding.LoudError: bad (code 3) (raised in "),
    (type("Local", (Exception,), {"__reduce__": lambda self: (dict, 1)})("x"), RuntimeError,
     "tests.readers.workers.test_forwarding.Local: x (raised in worker 2; "),
])
def test_unpack_error_rebuilds_an_unpicklable_exception_as_its_type_when_its_message_makes_it(exc, kind, text):
    packed = pack_error(exc)
    assert packed[0] is None  # it does not pickle whole
    rebuilt = unpack_error(packed, "worker 2")
    assert type(rebuilt) is kind and str(rebuilt).startswith(text)
    assert "Traceback in worker 2" in str(rebuilt.__cause__) and f"{type(exc).__name__}: " in str(rebuilt.__cause__)


def test_unpack_error_keeps_the_workers_traceback_of_a_rebuilt_exception():
    rebuilt = unpack_error(pack_error(_raise_locked()), "prefetch worker 0")
    remote = str(rebuilt.__cause__)
    assert 'raise LockedError("disk 3 is gone")' in remote and "_raise_locked" in remote


def _interactive_main(monkeypatch):
    """A ``__main__`` like a notebook's (no file), holding a function ``double`` defined in it."""
    import sys
    import types

    main = types.ModuleType("__main__")

    def double(x):
        return 2 * x

    double.__module__, double.__qualname__ = "__main__", "double"
    main.double = double
    monkeypatch.setitem(sys.modules, "__main__", main)
    return double


def test_interactive_names_finds_what_an_interactive_main_holds(monkeypatch):
    import functools
    import pickle

    from readers.workers.forwarding import interactive_names
    double = _interactive_main(monkeypatch)
    assert interactive_names(pickle.dumps(functools.partial(double, 3), 5)) == ["double"]
    assert interactive_names(pickle.dumps((functools.partial(abs, 3), "__main__"), 5)) == []


def test_a_spawned_pool_refuses_a_notebook_function_before_starting_a_process(monkeypatch, no_leaks):
    from readers import from_sequence, map_readers, prefetch
    double = _interactive_main(monkeypatch)
    r = prefetch(map_readers(double, from_sequence(range(3))), 2, mode="process", start_method="spawn")
    with pytest.raises(TypeError, match=r"uses double from this interactive session \(__main__\), which a new "
                                        r"process cannot import: define it in a module"):
        list(r())
