"""The code's layout: a folder per capability whose docstring says its job, one meaning per module name, tests that
mirror the packages, no import cycles and no calls into another object's private methods."""
import ast
import importlib
import inspect
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("readers", "batching", "train")
NAMEDTUPLE_API = {"_make", "_replace", "_asdict"}  # public, underscored only to stay clear of field names
MODULES = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")) + [ROOT / "cli.py"]
SUBPACKAGES = sorted(p.parent for p in MODULES if p.name == "__init__.py" and p.parent.parent != ROOT)


def _name(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _imports() -> dict[str, set[str]]:
    """Module -> the package modules it imports (``from pkg import mod`` counts as importing ``pkg.mod``)."""
    names = {_name(p) for p in MODULES}
    graph = {}
    for path in MODULES:
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name in names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                subs = {f"{node.module}.{a.name}" for a in node.names} & names
                found |= subs or ({node.module} & names)
        graph[_name(path)] = found - {_name(path)}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle among the packages' modules, or None; a package's __init__ is left out as a
    target (importing the package namespace from inside it is how its own submodules are reached)."""
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt in PACKAGES:
                continue
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt, path + [nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_no_import_cycles():
    assert _cycle(_imports()) is None, f"import cycle: {' -> '.join(_cycle(_imports()))}"


def test_cycle_finder_finds_a_cycle():
    assert _cycle({"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}}) == ["a.x", "a.y", "a.z", "a.x"]
    assert _cycle({"a.x": {"a.y"}, "a.y": set()}) is None


def test_no_module_name_means_two_things():
    seen: dict[str, list[str]] = {}
    for path in MODULES:
        if path.name != "__init__.py" and path.parent != ROOT:
            seen.setdefault(path.stem, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


@pytest.mark.parametrize("folder", SUBPACKAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_subpackage_says_what_it_holds(folder):
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
    assert len(doc.split()) >= 8, f"{folder.relative_to(ROOT)}/__init__.py: say the subpackage's job in its docstring"


def _private_calls(tree: ast.AST) -> list[str]:
    """Calls of ``obj._method(...)`` where obj is not self, cls or super(): a reach into another's privates."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr, owner = node.func.attr, node.func.value
            if not attr.startswith("_") or attr.startswith("__") or attr in NAMEDTUPLE_API:
                continue
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
                continue
            found.append(f"line {node.lineno}: {ast.unparse(node.func)}()")
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_calls_into_other_objects_private_methods(path):
    assert _private_calls(ast.parse(path.read_text())) == []


def test_private_call_finder_tells_self_from_others():
    tree = ast.parse("self._a()\nsuper()._b()\nparent._c()\nx.public()\n")
    assert _private_calls(tree) == ["line 3: parent._c()"]


@pytest.mark.parametrize("path", [p for p in MODULES if p.parent != ROOT and p.name != "__init__.py"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_has_its_test_module(path):
    rel = path.relative_to(ROOT)
    test = ROOT / "tests" / rel.parent / f"test_{rel.name}"
    assert test.is_file(), f"{rel} has no test module: tests mirror the packages, add {test.relative_to(ROOT)}"


@pytest.mark.parametrize("folder", SUBPACKAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_package_attribute_named_as_a_subpackage_is_that_subpackage(folder):
    """Review of issue 26: readers/__init__ bound readers.caching to the cached module, so readers.caching.disk
    failed to import; readers.selection and readers.parallel lived on under their old names."""
    name = ".".join(folder.relative_to(ROOT).parts)
    sub = importlib.import_module(name)
    parent = importlib.import_module(name.rpartition(".")[0])
    assert getattr(parent, folder.name) is sub
    for path in sorted(folder.glob("*.py")):
        if path.name != "__init__.py":
            importlib.import_module(f"{name}.{path.stem}")  # each module imports by its path


def test_no_module_of_the_old_flat_layout_is_reachable_by_its_old_name():
    import readers
    import train

    old = {"readers": ["selection", "parallel", "paddle_parallel", "caching", "sources", "rounds", "maps", "combine",
                       "replay", "sharding", "shuffling", "pipeline", "remote", "tokens", "mnist"],
           "train": ["models", "checkpoint", "command", "console", "supervisor", "strategies"]}
    for package, names in ((readers, old["readers"]), (train, old["train"])):
        for name in names:
            found = getattr(package, name, None)
            assert found is None or not inspect.ismodule(found) or found.__name__ == f"{package.__name__}.{name}" \
                and (ROOT / package.__name__ / name / "__init__.py").is_file(), f"{package.__name__}.{name} is {found!r}"
