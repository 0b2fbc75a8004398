"""readers.plugins.modules: which bare module names may be plugins, told from specs without importing them."""
import importlib
import subprocess
import sys

import pytest

from readers.plugins.modules import (
    OWN_PACKAGES,
    file_advice,
    importable,
    not_found,
    refusal,
    shadow_note,
)
from tests.helpers import paths as _paths

ROOT = _paths.ROOT


@pytest.mark.parametrize("name,why", [("train", "'train' is readerkit's own package"),
                                      ("cli", "'cli' is readerkit's own module"),
                                      ("this", "'this' is a standard-library module"),
                                      ("antigravity", "'antigravity' is a standard-library module"),
                                      ("json.decoder", "'json' is a standard-library module"),
                                      ("sys", "'sys' is a standard-library module"),
                                      ("readers.sources.mnist", ""), ("mydata", "")])
def test_refusal_names_readerkits_packages_and_the_standard_library(name, why):
    assert refusal(name) == why


def test_refusal_imports_no_module_to_tell():
    """New-user trial: --reader this printed the Zen of Python (antigravity opens a web browser)."""
    code = ("import sys\nfrom readers.plugins.modules import refusal\nprint([refusal(n) != '' for n in "
            "('this', 'antigravity')], [n in sys.modules for n in ('this', 'antigravity', 'webbrowser')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[True, True] [False, False, False]"


def test_refusal_takes_a_users_own_file_named_like_a_standard_library_module(tmp_path, monkeypatch):
    (tmp_path / "tabnanny.py").write_text("def train():\n    return lambda: iter([1])\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    assert refusal("tabnanny") == "" and "tabnanny" not in sys.modules


@pytest.mark.parametrize("name,found", [("readers.sources.mnist", True), ("readers.no_such", False), ("json.nope.x", False),
                                        ("my-data", False), ("", False)])
def test_importable_tells_modules_from_other_names(name, found):
    assert importable(name) is found


def test_shadow_note_names_the_users_file_and_says_to_rename_it(tmp_path, monkeypatch):
    importlib.import_module("cli")  # the note speaks of readerkit's cli once it is the one loaded
    monkeypatch.chdir(tmp_path)
    assert shadow_note("cli") == shadow_note("mydata") == ""
    (tmp_path / "cli.py").write_text("")
    assert shadow_note("cli") == ("; your 'cli.py' in the current folder is shadowed by readerkit's own module 'cli', "
                                  "so it is never imported: rename it (e.g. to 'my_cli') and name that instead")


def test_shadow_note_is_empty_in_readerkits_own_folder(monkeypatch):
    monkeypatch.chdir(ROOT)
    assert [shadow_note(name) for name in OWN_PACKAGES] == [""] * len(OWN_PACKAGES)


@pytest.mark.parametrize("name,advice", [
    ("blobs.py", "'blobs.py' is a file: name its module, 'blobs', without '.py' or a folder"),
    ("./mydata.py", "'./mydata.py' is a file: name its module, 'mydata', without '.py' or a folder"),
    ("data/mydata.py:train", ("'data/mydata.py' is a file: name its module, 'mydata:train', without '.py' or a "
                              "folder, and run from the folder 'data'")),
    ("data/", "'data/' is a path: name a module, a file's name without '.py', and run from the folder that holds it"),
    ("mydata", ""), ("pkg.mydata:train", ""),
])
def test_file_advice_names_the_module_of_a_file(name, advice):
    """Review of issue 12: --reader blobs.py and ./mydata.py said "unknown reader" without a hint."""
    assert file_advice(name) == advice


def test_not_found_says_when_a_files_module_would_lose_to_a_plugin_of_its_name():
    message = not_found("readers", "mnist.py", ["mnist"])
    assert "name its module, 'mnist', without '.py'" in message and "rename the file" in message
    assert "did you mean" not in message


def test_not_found_advises_a_model_in_models_words_not_a_readers():
    """Issue 27, item 9: an unknown model was told to name "an importable module ('mydata', with train and test)"."""
    message = not_found("models", "mpl", ["mlp", "softmax"])
    assert message == ("unknown model 'mpl' (did you mean 'mlp'?); known models: mlp, softmax. To add one, declare an "
                       "entry point in group 'readerkit.models' in a package's metadata, or name a model class or "
                       "factory as 'module:attribute' ('mymodels:TinyNet'); modules are found on the import path (the "
                       "CLI puts the current folder first)")
    assert "with train and test" in not_found("readers", "nmist", ["mnist"])
