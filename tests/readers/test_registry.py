"""The plugin registry: built-ins, real entry points from a .dist-info folder, module:attribute specs."""
import importlib
import os
import subprocess
import sys
import textwrap

import pytest

import readers.mnist
from readers import registry
from readers.registry import (
    PluginError,
    PluginInfo,
    PluginLoadError,
    PluginNotFound,
    PluginTypeError,
    find_model,
    find_reader,
    find_test_reader,
    list_plugins,
    reader_splits,
    register_model,
    register_reader,
    unregister,
)

SQUARES = '''
"""A third-party plugin: a reader of squares and a model."""


def make_reader(n=4):
    """Squares of 0..n-1."""
    def reader():
        return (i * i for i in range(n))
    return reader


class ZeroModel:
    """Predicts zero, whatever it is shown."""

    def __init__(self, seed=0):
        self.seed = seed


NOT_CALLABLE = 3
'''


@pytest.fixture
def install(tmp_path, monkeypatch):
    """Install a distribution as a real .dist-info folder plus module files on sys.path."""
    modules = []

    def install(dist, entry_points, **sources):
        info = tmp_path / f"{dist.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
        for module, source in sources.items():
            (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
            modules.append(module)
        monkeypatch.syspath_prepend(str(tmp_path))
        importlib.invalidate_caches()

    yield install
    for module in modules:
        sys.modules.pop(module, None)


@pytest.fixture
def register():
    """register_reader / register_model that undo themselves after the test."""
    done = []

    def register(kind, name, target, **options):
        (register_reader if kind == "readers" else register_model)(name, target, **options)
        done.append((kind, name))

    yield register
    for kind, name in done:
        unregister(kind, name)


def test_entry_point_plugin_is_found_listed_and_works(install):
    install(
        "squares-plugin",
        """
        [readerkit.readers]
        squares = squares_plugin:make_reader
        [readerkit.models]
        zero = squares_plugin:ZeroModel
        """,
        squares_plugin=SQUARES,
    )
    import squares_plugin

    assert find_reader("squares") is squares_plugin.make_reader
    assert find_test_reader("squares") is None
    assert list(find_reader("squares")(5)()) == [0, 1, 4, 9, 16]
    assert find_model("zero") is squares_plugin.ZeroModel
    assert find_model("zero")(seed=3).seed == 3
    assert PluginInfo("squares", "squares-plugin", "Squares of 0..n-1.") in list_plugins("readers")
    assert PluginInfo("zero", "squares-plugin", "Predicts zero, whatever it is shown.") in list_plugins("models")


def test_entry_point_to_a_module_gives_train_and_test_splits(install):
    source = '''
        """Numbers, split in two."""
        def train():
            return lambda: iter([1, 2, 3])
        def test():
            return lambda: iter([4])
    '''
    install("numbers-plugin", "[readerkit.readers]\nnumbers = numbers_plugin\n", numbers_plugin=source)
    assert list(find_reader("numbers")()()) == [1, 2, 3]
    assert list(find_test_reader("numbers")()()) == [4]
    assert PluginInfo("numbers", "numbers-plugin", "Numbers, split in two.") in list_plugins("readers")


def test_builtins_are_listed_with_their_source():
    names = {(p.name, p.source) for kind in ("readers", "models") for p in list_plugins(kind)}
    assert {("mnist", "built-in"), ("mlp", "built-in"), ("softmax", "built-in")} <= names


@pytest.mark.parametrize("name,attribute", [("mlp", "MLP"), ("softmax", "SoftmaxRegression")])
def test_builtin_models_resolve(name, attribute):
    import train.models

    assert find_model(name) is getattr(train.models, attribute)
    summary = {p.name: p.summary for p in list_plugins("models")}[name]
    assert not summary.startswith("error")


def test_builtin_mnist_has_train_and_test_splits():
    assert find_reader("mnist") is readers.mnist.train
    assert find_test_reader("mnist") is readers.mnist.test


def test_importing_the_registry_imports_no_plugin():
    code = "import sys, readers.registry; print(sorted(m for m in ('readers.mnist', 'train.models') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=os.getcwd())
    assert out.stdout.strip() == "[]"


def test_module_attribute_spec_with_dotted_attribute(install):
    source = """
        class Holder:
            @staticmethod
            def make():
                return lambda: iter("xy")
    """
    install("holder-dist", "", holder_mod=source)
    assert list(find_reader("holder_mod:Holder.make")()()) == ["x", "y"]
    assert find_test_reader("holder_mod:Holder.make") is None


@pytest.mark.parametrize(
    "spec,expected",
    [
        ("no_such_module_xyz:make", ["'no_such_module_xyz'", "No module named 'no_such_module_xyz'"]),
        ("broken_mod:make", ["'broken_mod'", "ImportError: needs libfoo"]),
        ("holder_mod:nothing", ["'holder_mod'", "'nothing'"]),
        ("holder_mod:Holder.nothing", ["'holder_mod'", "'Holder.nothing'", "holder_mod:Holder has no 'nothing'"]),
        ("holder_mod:", ["not a valid 'module:attribute' spec"]),
    ],
)
def test_module_attribute_spec_errors_name_module_and_attribute(install, spec, expected):
    install("holder-dist", "", holder_mod="class Holder:\n    pass\n", broken_mod="raise ImportError('needs libfoo')\n")
    with pytest.raises(PluginLoadError) as info:
        find_reader(spec)
    assert isinstance(info.value, ImportError)
    for text in expected:
        assert text in str(info.value)


@pytest.mark.parametrize("kind,find,known", [("readers", find_reader, "mnist"), ("models", find_model, "mlp, softmax")])
def test_unknown_name_lists_known_names_and_how_to_add_one(kind, find, known):
    with pytest.raises(PluginNotFound) as info:
        find("no-such-plugin")
    message = str(info.value)
    assert isinstance(info.value, LookupError)
    assert f"unknown {kind[:-1]} 'no-such-plugin'; known {kind}: " in message
    assert known in message
    assert f"entry point in group 'readerkit.{kind}'" in message
    assert "'module:attribute'" in message


def test_unknown_name_suggests_a_close_one():
    with pytest.raises(PluginNotFound, match=r"did you mean 'mnist'\?"):
        find_reader("mnsit")


def test_broken_plugin_is_listed_with_its_error_and_named_when_found(install):
    install(
        "broken-plugin",
        "[readerkit.readers]\nbroken = broken_plugin:make\n",
        broken_plugin="raise ImportError('needs libfoo')\n",
    )
    rows = {p.name: p for p in list_plugins("readers")}
    assert rows["broken"].source == "broken-plugin"
    assert "needs libfoo" in rows["broken"].summary and rows["broken"].summary.startswith("error: ")
    assert rows["mnist"].source == "built-in"  # the rest of the listing is intact
    with pytest.raises(PluginLoadError) as info:
        find_reader("broken")
    for text in ["'broken = broken_plugin:make'", "'readerkit.readers'", "'broken-plugin'", "needs libfoo"]:
        assert text in str(info.value)


@pytest.mark.parametrize("kind,find", [("readers", find_reader), ("models", find_model)])
def test_plugin_that_is_not_callable_is_a_type_error(install, kind, find):
    install("squares-plugin", f"[readerkit.{kind}]\nthree = squares_plugin:NOT_CALLABLE\n", squares_plugin=SQUARES)
    with pytest.raises(PluginTypeError, match=r"'three' \(squares-plugin\) is not callable \(got int\)") as info:
        find("three")
    assert isinstance(info.value, TypeError)
    assert {p.name: p.summary for p in list_plugins(kind)}["three"].startswith("error: ")


def test_builtin_wins_over_an_entry_point_of_the_same_name(install):
    install("hijack-plugin", "[readerkit.readers]\nmnist = squares_plugin:make_reader\n", squares_plugin=SQUARES)
    assert find_reader("mnist") is readers.mnist.train
    rows = [p for p in list_plugins("readers") if p.name == "mnist"]
    assert [p.source for p in rows] == ["built-in", "hijack-plugin"]
    assert rows[1].summary == "(shadowed by built-in) Squares of 0..n-1."


def test_first_distribution_by_name_wins_between_entry_points(install):
    install("b-plugin", "[readerkit.readers]\nsq = squares_plugin:make_reader\n", squares_plugin=SQUARES)
    install("a-plugin", "[readerkit.readers]\nsq = other_plugin:make\n", other_plugin="def make():\n    return list\n")
    import other_plugin

    assert find_reader("sq") is other_plugin.make
    assert [p.source for p in list_plugins("readers") if p.name == "sq"] == ["a-plugin", "b-plugin"]


def test_registered_plugins_are_found_listed_and_removed(register):
    def letters():
        """The letters a to c."""
        return lambda: iter("abc")

    register("readers", "letters", letters)
    register("models", "ordered", "collections:OrderedDict")  # an import string stays lazy
    assert find_reader("letters") is letters
    assert find_model("ordered")(a=1) == {"a": 1}
    assert PluginInfo("letters", f"{__name__}:{letters.__qualname__}", "The letters a to c.") in list_plugins("readers")
    assert [p.source for p in list_plugins("models") if p.name == "ordered"] == ["collections:OrderedDict"]
    with pytest.raises(ValueError, match="'letters' is already registered; pass replace=True"):
        register_reader("letters", letters)


def test_registering_over_a_builtin_needs_replace_and_unregister_restores_it():
    def mine():
        return lambda: iter(())

    with pytest.raises(ValueError, match="'mnist' is already built-in; pass replace=True"):
        register_reader("mnist", mine)
    register_reader("mnist", mine, replace=True)
    try:
        assert find_reader("mnist") is mine
    finally:
        unregister("readers", "mnist")
    assert find_reader("mnist") is readers.mnist.train
    with pytest.raises(PluginNotFound, match="no reader 'mnist' was registered"):
        unregister("readers", "mnist")


@pytest.mark.parametrize("name", ["", "a:b", " padded", None])
def test_register_rejects_bad_names(name):
    with pytest.raises(ValueError, match="must be a non-empty string"):
        register_reader(name, lambda: None)


@pytest.mark.parametrize("target,message", [(3, r"is not callable \(got int\)"), (registry, r"is not callable \(got module\)")])
def test_register_checks_objects_eagerly(target, message):
    with pytest.raises(PluginTypeError, match=message):
        register_reader("bad", target)
    with pytest.raises(PluginNotFound):
        find_reader("bad")


def test_unknown_kind_is_a_value_error():
    with pytest.raises(ValueError, match="unknown plugin kind 'reader'; use one of 'readers', 'models'"):
        list_plugins("reader")


def test_every_error_is_a_plugin_error():
    assert all(issubclass(e, PluginError) for e in (PluginNotFound, PluginLoadError, PluginTypeError))


def test_all_is_sorted_and_complete():
    assert registry.__all__ == sorted(registry.__all__)
    assert all(hasattr(registry, name) for name in registry.__all__)


def test_reader_splits_pass_each_creator_only_the_options_it_takes(install):
    source = '''
        def train(data_dir=None):
            return lambda: iter([data_dir])
        def test(**options):
            return lambda: iter([sorted(options)])
    '''
    install("split-plugin", "[readerkit.readers]\nsplit = split_plugin\n", split_plugin=source)
    train, test = reader_splits("split", data_dir="here", progress=None)
    assert list(train()) == ["here"]
    assert list(test()) == [["data_dir", "progress"]]
    train, test = reader_splits("readers.sources:from_sequence", seq=[1], data_dir="ignored")
    assert (list(train()), test) == ([1], None)
