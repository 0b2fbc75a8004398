"""Modules named as plugins: which bare names may be one, and why a user's file of a name is not found.

``readers.plugins.registry`` takes a name that is no plugin but an importable module
(``mydata``) as that module, except readerkit's own packages and the
standard library's: ``train`` or ``this`` is never a reader. These checks
read module specs; they import no module themselves (a dotted name's parent
packages aside). The messages of a name that finds nothing are made here
too: a file named instead of its module, a plugin's name used as a module,
a misspelt attribute.

>>> refusal("this"), refusal("mydata")
("'this' is a standard-library module", '')
"""
from __future__ import annotations

import difflib
import importlib.util
import inspect
import os
import sys
import sysconfig
from typing import Any

__all__ = ["OWN_PACKAGES", "attribute_advice", "file_advice", "importable", "not_found", "plugin_not_module",
           "refusal", "shadow_note"]

#: readerkit's own top-level packages (and module); a user's file of one of these names is shadowed.
OWN_PACKAGES = ("batching", "cli", "readers", "train")


def _under(path: str, *keys: str) -> bool:
    roots = [os.path.realpath(sysconfig.get_paths()[key]) for key in keys]
    return any(path == root or path.startswith(root + os.sep) for root in roots)


def _from_stdlib(top: str) -> bool:
    """Whether the top-level module ``top`` comes from the standard library, not a user's file of its name."""
    try:
        spec = importlib.util.find_spec(top)  # a top-level name is found, not imported
    except ValueError:  # loaded without a spec (__main__)
        return True
    if spec is None:
        return True
    places = [spec.origin] if spec.has_location else list(spec.submodule_search_locations or [])
    places = [os.path.realpath(place) for place in places]  # none: a built-in or frozen module
    return all(_under(place, "stdlib", "platstdlib") and not _under(place, "purelib", "platlib") for place in places)


def refusal(name: str) -> str:
    """Why the module ``name`` is never a plugin, or "" when it may be one; its spec is read, it is not imported.

    >>> refusal("train"), refusal("os.path"), refusal("readers.sources.mnist")
    ("'train' is readerkit's own package", "'os' is a standard-library module", '')
    """
    top = name.partition(".")[0]
    if name in OWN_PACKAGES:
        return f"{name!r} is readerkit's own {'module' if name == 'cli' else 'package'}"
    if top in sys.stdlib_module_names and _from_stdlib(top):
        return f"{top!r} is a standard-library module"
    return ""


def importable(name: str) -> bool:
    """Whether ``name`` is an importable module's dotted name (its parent packages are imported to tell).

    >>> importable("readers.sources.mnist"), importable("no_such_module_xyz"), importable("not a name")
    (True, False, False)
    """
    if not all(part.isidentifier() for part in name.split(".")):
        return False
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent that is no package, or does not import
        return False


def shadow_note(module_name: str) -> str:
    """Advice when a file in the current folder is named like readerkit's own package, loaded instead of it.

    "" when ``module_name`` is not readerkit's, or no such file is here.

    >>> shadow_note("mydata")
    ''
    """
    top = module_name.partition(".")[0]
    loaded = getattr(sys.modules.get(top), "__file__", None)
    if top not in OWN_PACKAGES or loaded is None:
        return ""
    loaded = os.path.realpath(loaded)
    for mine in (os.path.realpath(f"{top}.py"), os.path.realpath(top)):
        if os.path.exists(mine) and loaded != mine and not loaded.startswith(mine + os.sep):
            return (f"; your {os.path.basename(mine)!r} in the current folder is shadowed by readerkit's own "
                    f"{'module' if top == 'cli' else 'package'} {top!r}, so it is never imported: rename it "
                    f"(e.g. to 'my_{top}') and name that instead")
    return ""


def file_advice(name: str) -> str:
    """Advice when a plugin is named by its file (``blobs.py``, ``./data/blobs.py:train``), not its module; else "".

    >>> file_advice("data/blobs.py:train")
    "'data/blobs.py' is a file: name its module, 'blobs:train', without '.py' or a folder, and run from the folder 'data'"
    >>> file_advice("blobs")
    ''
    """
    path, colon, attribute = name.partition(":")
    if not (path.endswith(".py") or "/" in path or os.sep in path):
        return ""
    folder, file = os.path.split(path)
    module = file.removesuffix(".py")
    if not module.isidentifier():
        return f"{path!r} is a path: name a module, a file's name without '.py', and run from the folder that holds it"
    where = "" if folder in ("", ".") else f", and run from the folder {folder!r}"
    return f"{path!r} is a file: name its module, {module + colon + attribute!r}, without '.py' or a folder{where}"


def not_found(kind: str, name: str, known: list[str]) -> str:
    """Why no plugin of ``kind`` ("readers", "models") is called ``name``, among the ``known`` ones, and how to add one.

    >>> not_found("readers", "nmist", ["mnist"])
    "unknown reader 'nmist' (did you mean 'mnist'?); known readers: mnist. To add one, ..."
    >>> not_found("models", "mpl", ["mlp", "softmax"])
    "unknown model 'mpl' (did you mean 'mlp'?); known models: mlp, softmax. To add one, declare ... or name a model class or factory as 'module:attribute' ('mymodels:TinyNet'); modules ..."
    >>> not_found("readers", "./blobs.py", ["mnist"])
    "unknown reader './blobs.py' ('./blobs.py' is a file: name its module, 'blobs', without '.py' or a folder); ..."
    """
    close = difflib.get_close_matches(name, known, n=1)
    advice = file_advice(name)  # the module it names is the suggestion, not a plugin spelt alike
    stem = os.path.basename(name.partition(":")[0]).removesuffix(".py")
    if advice and stem in known:  # mnist.py: a plugin of that name wins over the module
        advice += f"; but {stem!r} is also a plugin's name, which wins over a module of that name: rename the file"
    hints = [advice] if advice else [f"did you mean {close[0]!r}?"] if close else []
    if why_not := refusal(name):
        hints.append(f"{why_not}, never a plugin: rename a module of yours that has this name")
    names = ", ".join(sorted(set(known))) or "none"
    named = ("an importable module ('mydata', with train and test) or 'module:attribute'" if kind == "readers" else
             "a model class or factory as 'module:attribute' ('mymodels:TinyNet')")  # a module is never a model
    return (f"unknown {kind[:-1]} {name!r}{''.join(f' ({hint})' for hint in hints)}; known {kind}: {names}. To add one, "
            f"declare an entry point in group 'readerkit.{kind}' in a package's metadata, or name {named}; modules "
            f"are found on the import path (the CLI puts the current folder first)")


def plugin_not_module(kind: str, spec: str, test_split: bool) -> str:
    """Why ``spec`` (``mnist:train``) does not import when its module part is a plugin's name, not a module.

    >>> plugin_not_module("readers", "mnist:train", True)
    "cannot import module 'mnist' (from 'mnist:train'): 'mnist' is the name of a reader plugin, not a module; name the plugin alone, 'mnist' (--reader mnist): its test split comes with it"
    """
    name, singular = spec.partition(":")[0], kind[:-1]
    split = ": its test split comes with it" if test_split else ""
    return (f"cannot import module {name!r} (from {spec!r}): {name!r} is the name of a {singular} plugin, not a "
            f"module; name the plugin alone, {name!r} (--{singular} {name}){split}")


def _defined_in(value: Any, module_name: str) -> bool:
    """Whether a callable was defined in ``module_name``; an object that says no module of its own (a reader made
    there) counts as defined where it is found."""
    own = inspect.isroutine(value) or inspect.isclass(value) or "__module__" in getattr(value, "__dict__", {})
    return not own or getattr(value, "__module__", None) == module_name


def attribute_advice(obj: Any, attribute: str, module_name: str, where: str) -> str:
    """What to do when ``obj`` (the module ``module_name``, or a class of it) has no ``attribute``.

    Only callables defined there are suggested: not the modules or functions
    it imports (``np``, ``join``).

    >>> from readers.sources import in_memory as sources
    >>> attribute_advice(sources, "from_aray", "readers.sources.in_memory", "readers.sources.in_memory")
    "did you mean 'from_arrays'?"
    >>> attribute_advice(sources, "is_indexd", "readers.sources.in_memory", "readers.sources.in_memory")  # imported from readers.parents
    "check the spelling, or define 'is_indexd' in readers.sources.in_memory"
    """
    names = [n for n in dir(obj) if not n.startswith("_") and callable(value := getattr(obj, n, None))
             and _defined_in(value, module_name)]
    close = difflib.get_close_matches(attribute, names, n=1)
    return f"did you mean {close[0]!r}?" if close else f"check the spelling, or define {attribute!r} in {where}"
