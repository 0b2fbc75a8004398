"""The readers package: ``import readers`` imports what a pass needs, and the rest on first use (PEP 562)."""
import importlib
import subprocess
import sys

import pytest

import readers
from tests.helpers.paths import ROOT

#: What only some passes need: the package's subpackages beyond the kernel, and heavy standard modules.
HEAVY = ["readers.caching", "readers.continual", "readers.interop", "readers.network", "readers.storage",
         "readers.tokenized", "readers.workers", "readers.plugins", "readers.sources.columnar",
         "readers.sources.image_folder", "readers.sources.jsonl", "readers.sources.parquet",
         "readers.sources.tar_shards", "readers.sources.text", "readers.allocator",
         "asyncio", "concurrent.futures", "ctypes", "hashlib", "json", "multiprocessing", "secrets", "socket",
         "sqlite3", "ssl", "subprocess", "tarfile", "tempfile"]

_LOADED = "import sys, {modules}; print(' '.join(sorted(sys.modules)))"


def _loaded_by(*modules: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", _LOADED.format(modules=", ".join(modules))], cwd=ROOT,
                         check=True, capture_output=True, text=True, timeout=60)
    return set(out.stdout.split())


def test_import_readers_leaves_what_only_some_passes_need_for_later():
    """Regression from issue 32: ``import readers`` imported the network, cache, continual store, workers,
    formats and torch interop with ssl, asyncio, sqlite3, multiprocessing and more: 0.46 s against numpy's
    0.15 s. Now it imports the kernel, the decorators and in-memory sources, beside numpy and toolz."""
    baseline = _loaded_by("numpy", "toolz")
    loaded = _loaded_by("readers") - baseline
    early = sorted(m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert early == [], f"import readers imports {early}; import them where they are first used"


def test_import_batching_imports_nothing_of_readers_beyond_import_readers():
    assert {m for m in _loaded_by("batching") - _loaded_by("readers") if not m.startswith("batching")} <= {
        "bisect", "_bisect"}


@pytest.mark.parametrize("name", sorted(getattr(readers, "_LAZY", {})))
def test_a_name_imported_on_first_use_is_the_one_its_module_defines(name):
    module, reader_at = readers._LAZY[name]
    value = getattr(readers, name)
    defined = getattr(importlib.import_module(module), name)
    if reader_at is None:
        assert value is defined
    else:
        assert isinstance(value, readers.Curried) and value.func is defined and value.reader_at == reader_at
    assert getattr(readers, name) is value  # kept: one object, however often it is asked for


def test_names_imported_on_first_use_work_with_from_import_and_dir():
    from readers import PipelineStore, cached, remote  # noqa: F401

    assert set(readers.__all__) <= set(dir(readers))
    assert set(readers._LAZY) <= set(readers.__all__)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="module 'readers' has no attribute 'shufle'"):
        readers.shufle  # noqa: B018
