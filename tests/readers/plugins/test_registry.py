"""The plugin registry: built-ins, real entry points from a .dist-info folder, module:attribute specs."""
import importlib
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

import readers.checks
import readers.sources.mnist
from readers.graph import describe
from readers.identity import fingerprint
from readers.plugins import registry
from readers.plugins.registry import (
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
from tests.helpers import paths as _paths

ROOT = _paths.ROOT

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
    import train.models.classifiers

    assert find_model(name) is getattr(train.models.classifiers, attribute)
    summary = {p.name: p.summary for p in list_plugins("models")}[name]
    assert not summary.startswith("error")


def test_builtin_mnist_has_train_and_test_splits():
    assert find_reader("mnist") is readers.sources.mnist.train
    assert find_test_reader("mnist") is readers.sources.mnist.test


def test_importing_the_registry_imports_no_plugin():
    code = "import sys, readers.plugins.registry; print(sorted(m for m in ('readers.sources.mnist', 'train.models.classifiers') if m in sys.modules))"
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
    assert find_reader("mnist") is readers.sources.mnist.train
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
    assert find_reader("mnist") is readers.sources.mnist.train
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
    train, test = reader_splits("readers.sources.in_memory:from_sequence", seq=[1], data_dir="ignored")
    assert (list(train()), test) == ([1], None)


PLUGIN_READERS = '''
CALLS = []


def rows(data_dir=None):
    """A reader itself: calling it gives the entries."""
    CALLS.append(data_dir)
    yield from [data_dir, data_dir]


def listed(data_dir):
    """A reader whose body makes the whole list at once."""
    CALLS.append(data_dir)
    return [data_dir, len(CALLS)]


gen = rows()
'''


def test_reader_splits_keep_the_options_of_a_plugin_that_is_a_reader(install):
    """New-user trial: a generator-function plugin was returned bare, so later calls lost the CLI's data_dir."""
    install("plugin-readers", "", plugin_readers=PLUGIN_READERS)
    train, test = reader_splits("plugin_readers:rows", data_dir="here", download=False)
    assert test is None
    assert list(train()) == ["here", "here"] and list(train()) == ["here", "here"]
    assert readers.checks.check_reader(train) is train  # a zero-argument reader, whatever the plugin takes
    again = pickle.loads(pickle.dumps(train))  # may cross into a worker process
    assert list(again()) == ["here", "here"]


def test_reader_splits_serve_a_listed_plugins_first_result_once(install):
    """New-user trial: a plugin returning a list ran its whole body once extra, just to be told from a creator."""
    install("plugin-readers", "", plugin_readers=PLUGIN_READERS)
    import plugin_readers

    plugin_readers.CALLS.clear()
    train, _ = reader_splits("plugin_readers:listed", data_dir="d", progress=None)
    assert plugin_readers.CALLS == ["d"]
    assert list(train()) == ["d", 1] and plugin_readers.CALLS == ["d"]  # the detecting call's list, served
    assert list(train()) == ["d", 2] and list(train()) == ["d", 3]  # then the plugin again, each pass
    assert list(pickle.loads(pickle.dumps(train))()) == ["d", 4]  # a pickled one never carries the list


@pytest.mark.parametrize("spec", ["plugin_readers:rows", "plugin_readers:listed"])
def test_a_plugin_reader_keeps_its_name_and_not_its_options_in_the_fingerprint(install, tmp_path, spec):
    """The same files reached by another --data-dir are the same data to a checkpoint."""
    install("plugin-readers", "", plugin_readers=PLUGIN_READERS)
    one, two = (reader_splits(spec, data_dir=str(tmp_path / folder))[0] for folder in ("one", "two"))
    name = spec.partition(":")[2]
    assert describe(one) == name and one.__name__ == name and one.__doc__.startswith("A reader")
    assert fingerprint(one)["pipeline"] == fingerprint(two)["pipeline"] == [name]
    assert str(tmp_path) not in repr(one)


def test_a_generator_object_is_refused_with_advice_to_name_its_function(install):
    """New-user trial: 'mod:gen' (gen = rows() at module level) got advice about a reader creator, its name doubled."""
    install("plugin-readers", "", plugin_readers=PLUGIN_READERS)
    with pytest.raises(PluginTypeError) as info:
        find_reader("plugin_readers:gen")
    assert str(info.value) == (
        "reader 'plugin_readers:gen' is a generator object, a one-shot iterator that gives its entries once and then "
        "none; point it at the generator function 'rows' itself, not at the result of calling it")


def test_a_missing_attribute_is_named_once(install):
    """New-user trial: "module 'bad' has no attribute 'nosuch' (bad has no 'nosuch')" said it twice."""
    install("holder-dist", "", holder_mod="class Holder:\n    pass\n")
    with pytest.raises(PluginLoadError) as info:
        find_reader("holder_mod:nosuch")
    assert str(info.value) == (
        "module 'holder_mod' has no attribute 'nosuch'; check the spelling, or define 'nosuch' in holder_mod")
    with pytest.raises(PluginLoadError) as info:
        find_reader("holder_mod:holder.make")
    assert str(info.value) == (
        "module 'holder_mod' has no attribute 'holder.make' (holder_mod has no 'holder'); did you mean 'Holder'?")


@pytest.mark.parametrize("mine", ["train.py", "train"])
def test_a_users_file_named_like_readerkits_package_is_said_to_be_shadowed(tmp_path, monkeypatch, mine):
    """New-user trial: a train.py beside the user lost to readerkit's train, and the error did not say so."""
    (tmp_path / mine).mkdir() if "." not in mine else (tmp_path / mine).write_text("def rows():\n    yield 1\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PluginLoadError) as info:
        find_reader("train:rows")
    assert str(info.value) == (
        f"module 'train' has no attribute 'rows'; your {mine!r} in the current folder is shadowed by readerkit's "
        "own package 'train', so it is never imported: rename it (e.g. to 'my_train') and name that instead")


def test_readerkits_own_package_in_its_own_folder_is_not_said_to_be_shadowed(monkeypatch):
    monkeypatch.chdir(ROOT)  # holds train/, which is readerkit's own train
    with pytest.raises(PluginLoadError) as info:
        find_reader("train:rows")
    assert str(info.value) == "module 'train' has no attribute 'rows'; check the spelling, or define 'rows' in train"


@pytest.mark.parametrize("name,why", [("train", "'train' is readerkit's own package"),
                                      ("readers", "'readers' is readerkit's own package"),
                                      ("json", "'json' is a standard-library module"),
                                      ("os.path", "'os' is a standard-library module")])
def test_a_bare_module_of_readerkit_or_the_standard_library_is_no_plugin(name, why):
    """New-user trial: --reader train, this or antigravity was imported and taken as a plugin."""
    with pytest.raises(PluginNotFound) as info:
        find_reader(name)
    assert f"{why}, never a plugin: rename a module of yours that has this name" in str(info.value)


def test_a_standard_library_name_is_refused_without_importing_it():
    """Importing `this` prints the Zen of Python; refusing it must not."""
    code = ("import sys\nfrom readers.plugins.registry import PluginNotFound, find_reader\ntry:\n    find_reader('this')\n"
            "except PluginNotFound as exc:\n    print(exc)\nprint('this' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert "'this' is a standard-library module" in out.stdout and "Beautiful" not in out.stdout
    assert out.stdout.splitlines()[-1] == "False"


def test_cli_imports_readerkits_packages_before_a_users_files_of_the_same_names(tmp_path):
    """New-user trial: train.py, readers.py or batching.py beside the user shadowed readerkit's own packages."""
    for name in ("train", "readers", "batching"):
        (tmp_path / f"{name}.py").write_text(f"raise SystemExit('the user\\'s {name}.py was imported')\n")
    (tmp_path / "mydata.py").write_text("def rows():\n    for i in range(40):\n        yield [float(i % 2)], i % 2\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    command = [sys.executable, str(ROOT / "cli.py"), "train", "--reader", "mydata:rows", "--passes", "1",
               "--batch-size", "8"]
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1].startswith("pass 0: loss")


@pytest.mark.parametrize("name,advice", [
    ("blobs.py", "'blobs.py' is a file: name its module, 'blobs', without '.py' or a folder"),
    ("./blobs.py", "'./blobs.py' is a file: name its module, 'blobs', without '.py' or a folder"),
    ("data/blobs.py", "name its module, 'blobs', without '.py' or a folder, and run from the folder 'data'"),
])
def test_a_file_named_as_a_reader_is_told_to_name_its_module(install, name, advice):
    """Review of issue 12: --reader blobs.py or ./mydata.py said "unknown reader" without a hint."""
    install("blobs-dist", "", blobs="def train():\n    return lambda: iter([1])\n")
    with pytest.raises(PluginNotFound) as info:
        find_reader(name)
    assert f"unknown reader {name!r} (" in str(info.value) and advice in str(info.value)
    with pytest.raises(PluginLoadError, match="name its module, 'blobs:train', without '.py'"):
        find_reader(f"{name}:train")
    assert list(find_reader("blobs")()()) == [1]  # what the advice says works


def test_a_plugins_name_as_a_module_is_told_to_name_the_plugin_alone(register):
    """Review of issue 12: --reader mnist:train said only "No module named 'mnist'"."""
    with pytest.raises(PluginLoadError) as info:
        find_reader("mnist:train")
    assert str(info.value) == (
        "cannot import module 'mnist' (from 'mnist:train'): 'mnist' is the name of a reader plugin, not a module; "
        "name the plugin alone, 'mnist' (--reader mnist): its test split comes with it")
    register("readers", "letters", lambda: lambda: iter("ab"))
    with pytest.raises(PluginLoadError, match=r"name the plugin alone, 'letters' \(--reader letters\)$"):
        find_reader("letters:train")  # no test split to speak of
    with pytest.raises(PluginLoadError, match=r"--model mlp\)$"):
        find_model("mlp:MLP")


def test_a_missing_attribute_suggests_only_callables_the_module_defines(install):
    """Review of issue 12: --reader mygen:nope suggested "did you mean 'np'?", the module's import of numpy."""
    install("mygen-dist", "", mygen="import numpy as np\nfrom os.path import join\n\n\ndef rows():\n    yield 1\n")
    with pytest.raises(PluginLoadError) as info:
        find_reader("mygen:nope")
    assert str(info.value) == "module 'mygen' has no attribute 'nope'; check the spelling, or define 'nope' in mygen"
    with pytest.raises(PluginLoadError, match="define 'jion' in mygen"):
        find_reader("mygen:jion")  # join is imported, not defined there
    with pytest.raises(PluginLoadError, match=r"did you mean 'rows'\?"):
        find_reader("mygen:rws")


def test_a_bug_in_a_users_module_keeps_its_traceback_while_a_missing_one_is_one_line(install, tmp_path, monkeypatch):
    """Review of issue 26: a NameError at import in --reader mymod became one line, without its file or line."""
    (tmp_path / "mymod.py").write_text("import numpy\n\nrows = undefined_name\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(NameError, match="undefined_name") as info:
        find_reader("mymod:rows")
    assert not isinstance(info.value, PluginError)
    assert any("while importing module 'mymod'" in note for note in getattr(info.value, "__notes__", ["while "
                                                                                                      "importing module 'mymod'"]))
    with pytest.raises(PluginLoadError, match="cannot import module 'no_such_mod_xyz'"):
        find_reader("no_such_mod_xyz:rows")
    install("buggy-plugin", "[readerkit.readers]\nbuggy = buggy_plugin:make\n", buggy_plugin="make = 1 / 0\n")
    assert {p.name: p.summary for p in list_plugins("readers")}["buggy"].startswith("error: ZeroDivisionError")
    with pytest.raises(ZeroDivisionError):
        find_reader("buggy")
