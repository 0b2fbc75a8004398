"""Plugins: reader creators and models found by name.

Two kinds, ``"readers"`` and ``"models"``. A name is looked up in this order,
and the first match wins (``list_plugins`` shows the rest as "shadowed by"):

1. registrations made with ``register_reader`` / ``register_model``;
2. ``BUILTINS``, so an installed package cannot hijack ``"mnist"``;
3. entry points in the groups ``readerkit.readers`` / ``readerkit.models``,
   the first distribution by name winning when several declare one name.

A name containing ``":"`` is a ``module:attribute`` spec (the attribute may be
dotted: ``pkg.mod:Class.create``) and is imported directly; a name that is no
plugin but an importable module (``mydata``, ``pkg.mydata``) is that module,
unless it is readerkit's own package (``train``) or the standard library's.
Plugins are imported by import string only when asked for, so importing this
module imports none of them.

A reader plugin is either a reader or a reader creator (any callable: the
train split, no test split), or a non-callable object, usually a module,
with a callable ``train`` and an optional callable ``test``; built-in
``"mnist"`` is the module ``readers.sources.mnist``. ``reader_splits`` tells a
reader from a creator by what a call returns: a reader returns its entries,
a creator returns a reader. A model plugin is a class or factory. A
third-party package declares its plugins, nothing here changes::

    [options.entry_points]
    readerkit.readers =
        squares = squares_plugin:make_reader
    readerkit.models =
        zero = squares_plugin:ZeroModel

Every error is a ``PluginError``: ``PluginNotFound`` (a ``LookupError``),
``PluginLoadError`` (an ``ImportError``) or ``PluginTypeError`` (a ``TypeError``).

>>> find_reader("mnist").__module__, find_reader("mnist").__name__
('readers.sources.mnist', 'train')
>>> list(find_reader("readers.sources.in_memory:from_sequence")("ab")())
['a', 'b']
"""
from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable, Iterable, Iterator
from importlib.metadata import EntryPoint, entry_points
from typing import Any, NamedTuple

from readers.errors import BadValue, ReaderkitError
from readers.plugins.modules import (
    attribute_advice,
    file_advice,
    importable,
    not_found,
    plugin_not_module,
    refusal,
    shadow_note,
)

__all__ = [
    "BUILTINS", "PluginError", "PluginInfo", "PluginLoadError", "PluginNotFound", "PluginTypeError",
    "find_model", "find_reader", "find_test_reader", "list_plugins", "reader_splits", "register_model",
    "register_reader", "unregister",
]

#: Import strings (``module`` or ``module:attribute``) of the built-in plugins, by kind and name.
BUILTINS: dict[str, dict[str, str]] = {
    "readers": {"arrow": "readers.sources.columnar:from_data_dir",
                "image-folder": "readers.sources.image_folder:from_data_dir", "jsonl": "readers.sources.jsonl:from_data_dir",
                "mnist": "readers.sources.mnist", "parquet": "readers.sources.parquet:from_data_dir",
                "split-mnist": "readers.sources.split_mnist", "tar-shards": "readers.sources.tar_shards:from_data_dir"},
    "models": {"mlp": "train.models.classifiers:MLP", "softmax": "train.models.classifiers:SoftmaxRegression",
               "torch-cnn": "train.models.torch_classifiers:TorchCNN",
               "torch-mlp": "train.models.torch_classifiers:TorchMLP"},
}
_SINGULAR = {"readers": "reader", "models": "model"}
_registered: dict[str, dict[str, Any]] = {kind: {} for kind in BUILTINS}


class PluginError(ReaderkitError):
    """Any failure to find or load a plugin. The message says what to change."""


class PluginNotFound(PluginError, LookupError):
    """No plugin has this name. The message lists the known names and how to add one."""


class PluginLoadError(PluginError, ImportError):
    """A plugin's module did not import, its attribute is missing, or its entry point failed."""


class PluginTypeError(PluginError, TypeError):
    """A plugin was found but is not a callable (or, for readers, a module with ``train``)."""


class PluginInfo(NamedTuple):
    """One row of ``list_plugins``: name, source (where it comes from) and a one-line summary."""

    name: str
    source: str
    summary: str


def _check_kind(kind: str) -> None:
    if kind not in BUILTINS:
        raise BadValue(f"unknown plugin kind {kind!r}; use one of {', '.join(map(repr, BUILTINS))}")


def _dist_name(ep: EntryPoint) -> str:
    return ep.dist.name if ep.dist is not None else "unknown distribution"


def _source_of(target: Any) -> str:
    """Where a registration points: its import string, module name or ``module:qualname``."""
    if isinstance(target, str) or inspect.ismodule(target):
        return target if isinstance(target, str) else target.__name__
    return f"{getattr(target, '__module__', '?')}:{getattr(target, '__qualname__', type(target).__qualname__)}"


def _candidates(kind: str) -> Iterator[tuple[str, str, Any]]:
    """Every (name, source, target) of ``kind`` in precedence order; entry points are scanned last, lazily."""
    for name, target in list(_registered[kind].items()):
        yield name, _source_of(target), target
    for name, target in BUILTINS[kind].items():
        yield name, "built-in", target
    for ep in sorted(entry_points(group=f"readerkit.{kind}"), key=lambda ep: (_dist_name(ep), ep.name)):
        yield ep.name, _dist_name(ep), ep


def _import(spec: str) -> Any:
    """The object an import string ``module`` or ``module:attr.path`` names."""
    module_name, colon, attribute = spec.partition(":")
    parts = attribute.split(".") if colon else []
    if not module_name or not all(part.isidentifier() for part in parts):
        raise PluginLoadError(f"{spec!r} is not a valid 'module:attribute' spec, e.g. 'mypackage.data:make_reader'")
    try:
        if not all(part.isidentifier() for part in module_name.split(".")):  # a path, not a module's name
            raise ModuleNotFoundError(f"{module_name!r} is not a module's name")
        obj = importlib.import_module(module_name)
    except ImportError as exc:  # the module, or one it needs, is not there: say which and what to do
        advice = shadow_note(module_name) or (f"; {hint}" if (hint := file_advice(spec)) else "")
        raise PluginLoadError(f"cannot import module {module_name!r} (from {spec!r}): {type(exc).__name__}: {exc}"
                              f"{advice}") from exc
    except Exception as exc:  # a bug in the module's own code: its traceback says where
        _note(exc, f"(raised while importing module {module_name!r}, named by {spec!r})")
        raise
    for i, part in enumerate(parts):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            where = module_name if i == 0 else f"{module_name}:{'.'.join(parts[:i])}"
            detail = f" ({where} has no {part!r})" if len(parts) > 1 else ""
            advice = attribute_advice(obj, part, module_name, where)
            raise PluginLoadError(f"module {module_name!r} has no attribute {attribute!r}{detail}"
                                  f"{shadow_note(module_name) or '; ' + advice}") from None
    return obj


def _note(exc: BaseException, note: str) -> None:
    """Add ``note`` to ``exc``'s traceback where Python shows notes (3.11 and later)."""
    if hasattr(exc, "add_note"):
        exc.add_note(note)


def _load(kind: str, name: str, source: str, target: Any) -> Any:
    if isinstance(target, EntryPoint):
        try:
            return target.load()
        except Exception as exc:
            if not isinstance(exc, (ImportError, AttributeError)):  # a bug in the plugin's code: its traceback
                _note(exc, f"(raised while loading the entry point '{target.name} = {target.value}' of {source!r})")
                raise
            raise PluginLoadError(
                f"{_SINGULAR[kind]} {name!r}: entry point '{target.name} = {target.value}' in group "
                f"{target.group!r} of distribution {source!r} failed to load: {type(exc).__name__}: {exc}"
            ) from exc
    return _import(target) if isinstance(target, str) else target


def _checked(kind: str, name: str, source: str, obj: Any) -> tuple[Callable[..., Any], Callable[..., Any] | None]:
    """The (train or model, test) callables of a loaded plugin; PluginTypeError if it has none."""
    if callable(obj):
        return obj, None
    at = "" if source == name else f" ({source})"
    if kind == "readers" and isinstance(obj, Iterator):  # gen = rows() at module level
        made, function = ("a generator object", obj.__qualname__) if inspect.isgenerator(obj) else ("an iterator", "<")
        function = "" if "<" in function else f" {function!r}"  # not a <genexpr> or <locals>
        raise PluginTypeError(
            f"reader {name!r}{at} is {made}, a one-shot iterator that gives its entries once and then none; "
            f"point it at the generator function{function} itself, not at the result of calling it")
    if kind == "readers":
        train, test = getattr(obj, "train", None), getattr(obj, "test", None)
        if callable(train) and (test is None or callable(test)):
            return train, test
        what = "a reader creator (a callable returning a reader), or a module with a callable train and optional test"
    else:
        what = "a model class or factory"
    raise PluginTypeError(
        f"{_SINGULAR[kind]} {name!r}{at} is not callable (got {type(obj).__name__}); point it at {what}")


def _find(kind: str, name: str) -> tuple[Callable[..., Any], Callable[..., Any] | None]:
    _check_kind(kind)
    if ":" in name:
        module = name.partition(":")[0]
        if not importable(module) and any(module == candidate for candidate, _, _ in _candidates(kind)):
            raise PluginLoadError(plugin_not_module(kind, name, _find(kind, module)[1] is not None))  # mnist:train
        return _checked(kind, name, name, _import(name))
    known = []
    for candidate, source, target in _candidates(kind):
        if candidate == name:
            return _checked(kind, name, source, _load(kind, name, source, target))
        known.append(candidate)
    if not refusal(name) and importable(name):
        return _checked(kind, name, name, _import(name))
    raise PluginNotFound(not_found(kind, name, known))


def find_reader(name: str) -> Callable[..., Any]:
    """The training-split reader creator called ``name``, or named by a ``module:attribute`` spec.

    >>> find_reader("readers.sources.in_memory:from_arrays").__name__
    'from_arrays'
    >>> find_reader("nmist")
    Traceback (most recent call last):
    ...
    readers.plugins.registry.PluginNotFound: unknown reader 'nmist' (did you mean 'mnist'?); known readers: ...mnist...

    See Also: find_test_reader, list_plugins
    """
    return _find("readers", name)[0]


def find_test_reader(name: str) -> Callable[..., Any] | None:
    """The test-split reader creator of plugin ``name``, or None when it has no test split.

    >>> find_test_reader("mnist").__name__
    'test'
    >>> find_test_reader("readers.sources.in_memory:from_arrays") is None
    True
    """
    return _find("readers", name)[1]


def _call_with(creator: Callable[..., Any], options: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """What ``creator`` returns given the ``options`` its signature accepts, and those options."""
    try:
        params = inspect.signature(creator).parameters.values()
    except (TypeError, ValueError):  # no signature to read: give it everything
        return creator(**options), options
    if not any(p.kind is p.VAR_KEYWORD for p in params):
        named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        options = {key: value for key, value in options.items() if key in named}
    return creator(**options), options


class _PluginReader:
    """A plugin that is a reader itself, called with the options it accepted; the first call serves ``made`` (once).

    Named as the plugin, so its fingerprint leaves the options out: a ``data_dir`` says where, not what.
    """

    def __init__(self, plugin: Callable[..., Any], options: dict[str, Any], made: list[Any] | None = None):
        functools.update_wrapper(self, plugin, updated=())
        self.__signature__ = inspect.Signature()  # a reader takes no arguments, whatever the plugin takes
        self.plugin, self.options, self._made = plugin, options, made or []

    def __call__(self) -> Iterable[Any]:
        try:
            return self._made.pop()  # atomic: served once, even with threads
        except IndexError:
            return self.plugin(**self.options)

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.plugin, self.options)  # what was made stays here

    def __repr__(self) -> str:
        return f"<reader {self.__qualname__}>"


def _as_reader(plugin: Callable[..., Any], options: dict[str, Any], name: str) -> Any:
    """The reader a plugin's callable stands for, told by what calling it with the ``options`` it accepts gives."""
    made, options = _call_with(plugin, options)
    if callable(made):  # a reader creator: it made a reader
        return made
    if isinstance(made, Iterable) or hasattr(made, "__iter__"):  # a reader: the call started a pass of it
        if inspect.isgenerator(made):  # its body has not run: nothing worth keeping
            made.close()
            return _PluginReader(plugin, options)
        return _PluginReader(plugin, options, [made])  # a list is not made again for the first pass
    raise PluginTypeError(
        f"reader {name!r}: calling {getattr(plugin, '__qualname__', plugin)!r} returned {type(made).__name__}, "
        "neither entries nor a reader; point it at a reader (a generator function: calling it gives the "
        "entries) or a reader creator (calling it gives a reader)")


def reader_splits(name: str, **options: Any) -> tuple[Any, Any | None]:
    """The (train reader, test reader or None) of plugin ``name``, its callables called with ``options``.

    Each callable gets only the options its signature accepts, so ``data_dir``
    reaches ``readers.sources.mnist`` while one without that parameter still works. A
    callable that returns a reader is a reader creator, and that reader is
    used. One that returns entries (a generator function, or one returning a
    list) is a reader itself: what is used calls it with the same options on
    every pass, under its name, and serves the entries of that first call to
    the first pass (so a list is not made twice).

    >>> train, test = reader_splits("readers.sources.in_memory:from_sequence", seq="ab", data_dir=None)
    >>> list(train()), test
    (['a', 'b'], None)
    >>> def letters(data_dir=None):
    ...     yield from data_dir or "xy"
    >>> register_reader("letters", letters)
    >>> train = reader_splits("letters", data_dir="ab", download=False)[0]
    >>> train.__name__, list(train()), list(train())
    ('letters', ['a', 'b'], ['a', 'b'])
    >>> unregister("readers", "letters")
    """
    train, test = _find("readers", name)
    train_reader = _as_reader(train, options, name)
    return train_reader, None if test is None else _as_reader(test, options, f"{name} (test split)")


def find_model(name: str) -> Callable[..., Any]:
    """The model class or factory called ``name``, or named by a ``module:attribute`` spec.

    >>> find_model("mlp")
    <class 'train.models.classifiers.MLP'>
    >>> find_model("math:pi")
    Traceback (most recent call last):
    ...
    readers.plugins.registry.PluginTypeError: model 'math:pi' is not callable (got float); point it at a model class or factory
    """
    return _find("models", name)[0]


def _summary(kind: str, name: str, source: str, target: Any) -> str:
    try:
        obj = _load(kind, name, source, target)
        _checked(kind, name, source, obj)
    except PluginError as exc:  # a broken plugin is shown, not fatal to the listing
        return "error: " + " ".join(str(exc).split())
    except Exception as exc:  # a bug in the plugin's own code: shown too (naming it raises it with its traceback)
        return "error: " + " ".join(f"{type(exc).__name__}: {exc}".split())
    lines = (inspect.getdoc(obj) or "").strip().splitlines()
    return lines[0] if lines else "(no docstring)"


def list_plugins(kind: str) -> list[PluginInfo]:
    """Every plugin of ``kind`` ("readers" or "models") sorted by name, winners before shadowed ones.

    Each is imported to read the first line of its docstring; one that fails
    shows its error as the summary instead.

    >>> [p for p in list_plugins("readers") if p.source == "built-in"]
    [PluginInfo(name='arrow', source='built-in', summary='Arrow IPC files at --data or in the --data-dir folder, every column (a datasets save_to_disk folder too).'),
     PluginInfo(name='image-folder', source='built-in', summary='Images in one sub-folder per class (--data ROOT or --data-dir ROOT), as (uint8 RGB image, label).'),
     PluginInfo(name='jsonl', source='built-in', summary='The JSON lines files of a folder (--data-dir FOLDER), one entry (the parsed value) a line.'),
     PluginInfo(name='mnist', source='built-in', summary='MNIST (and anything in its format, such as Fashion-MNIST): indexed readers.'),
     PluginInfo(name='parquet', source='built-in', summary='Parquet files at --data (a file, folder, glob or brace pattern) or in the --data-dir folder, read by row group.'),
     PluginInfo(name='split-mnist', source='built-in', summary="Split-MNIST: MNIST's classes 0-1, then 2-3, and so on, as a timestamped stream of one day per task."),
     PluginInfo(name='tar-shards', source='built-in', summary='WebDataset .tar shards at --data or --data-dir (a folder, a glob or a brace pattern), as (image, label).')]
    """
    _check_kind(kind)
    winners: dict[str, str] = {}
    rows = []
    for name, source, target in _candidates(kind):
        summary = _summary(kind, name, source, target)
        if name in winners:
            summary = f"(shadowed by {winners[name]}) {summary}"
        winners.setdefault(name, source)
        rows.append(PluginInfo(name, source, summary))
    return sorted(rows, key=lambda row: row.name)  # stable: keeps precedence order within a name


def _register(kind: str, name: str, target: Any, replace: bool) -> None:
    if not isinstance(name, str) or not name or ":" in name or name != name.strip():
        raise BadValue(f"plugin name {name!r} must be a non-empty string without ':' or surrounding spaces")
    if not isinstance(target, str):
        _checked(kind, name, _source_of(target), target)
    taken = "registered" if name in _registered[kind] else "built-in" if name in BUILTINS[kind] else None
    if taken and not replace:
        raise BadValue(f"{_SINGULAR[kind]} {name!r} is already {taken}; pass replace=True to override it")
    _registered[kind][name] = target


def register_reader(name: str, target: Any, *, replace: bool = False) -> None:
    """Register a reader plugin: a reader creator, a module with ``train``/``test``, or an import string.

    An import string is imported only when the plugin is used. Registrations
    win over built-ins (with ``replace=True``) and entry points.

    >>> def letters():
    ...     '''The letters a to c.'''
    ...     return lambda: iter("abc")
    >>> register_reader("letters", letters)
    >>> list(find_reader("letters")()())
    ['a', 'b', 'c']
    >>> unregister("readers", "letters")
    """
    _register("readers", name, target, replace)


def register_model(name: str, target: Any, *, replace: bool = False) -> None:
    """Register a model plugin: a class, a factory or an import string ``module:attribute``.

    >>> register_model("ordered", "collections:OrderedDict")
    >>> find_model("ordered")(a=1)["a"]
    1
    >>> unregister("models", "ordered")
    """
    _register("models", name, target, replace)


def unregister(kind: str, name: str) -> None:
    """Remove a registration, bringing back the built-in or entry point it shadowed, if any.

    >>> unregister("readers", "mnist")
    Traceback (most recent call last):
    ...
    readers.plugins.registry.PluginNotFound: no reader 'mnist' was registered with register_reader
    """
    _check_kind(kind)
    if name not in _registered[kind]:
        raise PluginNotFound(f"no {_SINGULAR[kind]} {name!r} was registered with register_{_SINGULAR[kind]}")
    del _registered[kind][name]
