"""Modules named as plugins: which bare names may be one, and why a user's file of a name is not found.

``readers.registry`` takes a name that is no plugin but an importable module
(``mydata``) as that module, except readerkit's own packages and the
standard library's: ``train`` or ``this`` is never a reader. These checks
read module specs; they import no module themselves (a dotted name's parent
packages aside).

>>> refusal("this"), refusal("mydata")
("'this' is a standard-library module", '')
"""
from __future__ import annotations

import importlib.util
import os
import sys
import sysconfig

__all__ = ["OWN_PACKAGES", "importable", "refusal", "shadow_note"]

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

    >>> refusal("train"), refusal("os.path"), refusal("readers.mnist")
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

    >>> importable("readers.mnist"), importable("no_such_module_xyz"), importable("not a name")
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
