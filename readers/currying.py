"""Curried decorators: ``toolz.curry`` that waits only for the reader.

``toolz.curry`` calls a function once its required arguments are all given
and otherwise returns a partial application. A decorator's reader is one of
them, so ``shuffle(buf_size=10, seed=0)`` waits for it, as ``toolz.pipe``
needs; but once the reader is there the decorator runs at once, so a missing
or wrong option is reported on that line rather than turned into a partial
that fails later. A partial application shows itself as the call it stands
for, and checks its keywords against the decorator's signature when made.
A misspelt keyword is refused with the decorator's options listed, whether
the reader is given or not.

Each curried decorator is an instance of a subclass of ``Curried`` named
after its function, so ``help(readers.shuffle)`` is headed "Help on shuffle"
(pydoc names an object that is no function by its class), then shows the
function's signature and docstring.
"""
from __future__ import annotations

import inspect
from typing import Any

import toolz
from toolz.functoolz import no_default

from readers.errors import BadType
from readers.graph import describe

__all__ = ["Curried"]


def _shown(value: Any) -> str:
    return describe(value) if callable(value) else repr(value)


def _signature(func: Any) -> inspect.Signature:
    """``func``'s signature with its annotations evaluated (modules here postpone them)."""
    try:
        return inspect.signature(func, eval_str=True)
    except (NameError, TypeError, SyntaxError):  # an annotation naming what only a type checker sees
        return inspect.signature(func)


#: The subclass of Curried named after each curried function, by (module, qualified name).
_NAMED: dict[tuple[str | None, str], type] = {}


def _named_class(func: Any) -> type:
    """The subclass of ``Curried`` named after ``func`` (``Curried`` itself for a lambda or a nameless callable)."""
    func = func.func if isinstance(func, toolz.curry) else func
    name = getattr(func, "__name__", None)
    if not isinstance(name, str) or not name.isidentifier():
        return Curried
    key = (getattr(func, "__module__", None), getattr(func, "__qualname__", name))
    if key not in _NAMED:
        _NAMED[key] = type(name, (Curried,), {"__module__": __name__, "__qualname__": name,
                                              "__doc__": f"``{name}``, curried: see ``readers.Curried``."})
    return _NAMED[key]


def _plain(sig: inspect.Signature) -> str:
    """A signature without annotations, as a call would read it."""
    empty = inspect.Parameter.empty
    return str(sig.replace(parameters=[p.replace(annotation=empty) for p in sig.parameters.values()],
                           return_annotation=inspect.Signature.empty))


class Curried(toolz.curry):
    """A decorator that waits for its reader when only options are given.

    Called with the reader (at position ``reader_at``, or by its name), it
    runs at once, so a missing option is reported then; called without it, it
    returns a partial application for ``toolz.pipe``. Pickles like ``toolz.curry``.

    >>> def scale(reader, factor):
    ...     '''Multiply every entry by ``factor``.'''
    ...     return lambda: (x * factor for x in reader())
    >>> times = Curried(scale)
    >>> times(factor=3)
    scale(factor=3)
    >>> list(times(factor=3)(lambda: [1, 2])())
    [3, 6]
    >>> times(lambda: [1, 2])
    Traceback (most recent call last):
    ...
    TypeError: scale() missing 1 required positional argument: 'factor'
    >>> times(fator=3)
    Traceback (most recent call last):
    ...
    readers.errors.BadType: scale() got an unexpected keyword argument 'fator'; its options are reader, factor
    >>> times(lambda: [1, 2], fator=3)
    Traceback (most recent call last):
    ...
    readers.errors.BadType: scale() got an unexpected keyword argument 'fator'; its options are reader, factor
    >>> type(times).__name__, isinstance(times, Curried)  # what help(times) is headed with
    ('scale', True)
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Curried:
        if cls is Curried and args:  # a partial, made by type(self)(...), keeps its decorator's class
            cls = _named_class(args[0])
        return super().__new__(cls)

    def __init__(self, *args: Any, reader_at: int | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        inherited = getattr(args[0], "reader_at", 0) if args else 0  # a partial keeps its decorator's
        self.reader_at = inherited if reader_at is None else reader_at

    def _reader_given(self, args: tuple, kwargs: dict) -> bool:
        if len(self.args) + len(args) > self.reader_at:
            return True
        params = list(_signature(self.func).parameters.values())
        named = params[self.reader_at] if self.reader_at < len(params) else None
        return (named is not None and named.kind is not named.VAR_POSITIONAL
                and (named.name in kwargs or named.name in (self.keywords or {})))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._reader_given(args, kwargs):
            try:
                return self._partial(*args, **kwargs)
            except TypeError as exc:
                hint = self._hint(exc, (*self.args, *args)) or self._unexpected(kwargs)
                if hint is None:
                    raise
                raise hint from None
        keywords, signature = {**(self.keywords or {}), **kwargs}, _signature(self.func)
        try:
            signature.bind_partial(*self.args, *args, **keywords)
        except TypeError as exc:
            names = ", ".join(signature.parameters)
            raise BadType(f"{self.__name__}() {exc}; its options are {names}") from None
        # what comes before the reader, given by name (map_readers(func=f)), is bound by position, so
        # that the reader, given later by position, lands in its place
        given = [*self.args, *args]
        for param in list(signature.parameters.values())[len(given):self.reader_at]:
            if param.name not in keywords or param.kind is not param.POSITIONAL_OR_KEYWORD:
                break
            given.append(keywords.pop(param.name))
        return type(self)(self.func, *given, reader_at=self.reader_at, **keywords)

    def _unexpected(self, kwargs: dict) -> TypeError | None:
        """A keyword the decorator does not take, refused with its options listed, as a partial application words
        it; None when every keyword is one of them (the TypeError came from elsewhere: the body, a missing option)."""
        params = _signature(self.func).parameters
        if any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return None
        unknown = [k for k in {**(self.keywords or {}), **kwargs}
                   if k not in params or params[k].kind is inspect.Parameter.POSITIONAL_ONLY]
        if not unknown:
            return None
        return BadType(f"{self.__name__}() got an unexpected keyword argument {unknown[0]!r}; its options are "
                       f"{', '.join(params)}")

    def _hint(self, exc: TypeError, args: tuple) -> TypeError | None:
        """``exc`` saying that an option was taken for the reader (``toolz.pipe(r, batch(32))``); None if it was not."""
        if len(args) <= self.reader_at or callable(args[self.reader_at]) or "required" not in str(exc):
            return None
        params = list(_signature(self.func).parameters)
        value, option = args[self.reader_at], params[min(self.reader_at + 1, len(params) - 1)]
        if isinstance(value, (list, tuple)) and value and all(map(callable, value)):
            return None  # a list of readers (mix's) is the reader argument itself: the error stands as it is
        return BadType(f"{exc}; {value!r} was taken as the reader: to give options first and the reader "
                         f"later (toolz.pipe), name them, e.g. {self.__name__}({option}={value!r})")

    @property
    def __signature__(self) -> inspect.Signature:
        """The signature still to be given: the decorator's, less what is bound (shown as defaults)."""
        sig = _signature(self.func)
        if not self.args and not self.keywords:
            return sig
        sig = super().__signature__  # toolz marks what is still required with a sentinel default
        return sig.replace(parameters=[p.replace(default=inspect.Parameter.empty) if p.default is no_default else p
                                       for p in sig.parameters.values()])

    def __reduce__(self) -> tuple:
        restore, state = super().__reduce__()  # (its class, ...): Curried's __new__ makes the named class again
        return restore, (Curried, *state[1:])

    def __repr__(self) -> str:
        if not self.args and not self.keywords:
            return f"<decorator {self.__name__}{_plain(_signature(self.func))}>"
        shown = [*map(_shown, self.args), *(f"{k}={_shown(v)}" for k, v in (self.keywords or {}).items())]
        return f"{self.__name__}({', '.join(shown)})"

    __str__ = __repr__
