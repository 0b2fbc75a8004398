"""The public namespaces: complete, sorted __all__, and a runnable example on every public name."""
import inspect

import pytest

import batching
import readers
import train

PACKAGES = [readers, batching, train]


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_all_is_sorted_and_complete(package):
    assert package.__all__ == sorted(package.__all__)
    for name in package.__all__:
        assert hasattr(package, name), name


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_every_public_callable_has_a_runnable_example(package):
    missing = []
    for name in package.__all__:
        obj = getattr(package, name)
        if name == "Reader" or (inspect.isclass(obj) and issubclass(obj, BaseException)):
            continue
        doc = inspect.getdoc(obj) or ""
        if ">>>" not in doc and not (inspect.isclass(obj) and doc):
            missing.append(name)
    assert not missing, f"no >>> example in the docstring of {missing}"


@pytest.mark.parametrize(
    "name",
    ["buffered", "firstn", "filter_entries", "multiprocess_reader", "repeat", "shuffle", "skip", "xmap_readers"],
)
def test_decorators_are_curried(name):
    assert hasattr(getattr(readers, name), "func")  # readers.currying.Curried


def test_paddle_signatures_are_kept():
    def params(f):
        return list(inspect.signature(getattr(f, "func", f)).parameters)

    assert params(readers.map_readers) == ["func", "readers"]
    assert params(readers.shuffle) == ["reader", "buf_size", "seed"]
    assert params(readers.compose) == ["readers", "check_alignment"]
    assert params(readers.buffered) == ["reader", "size"]
    assert params(readers.firstn) == ["reader", "n"]
    assert params(readers.xmap_readers)[:5] == ["mapper", "reader", "process_num", "buffer_size", "order"]
    assert params(readers.multiprocess_reader)[:3] == ["readers", "use_pipe", "queue_size"]
    assert params(batching.batch) == ["reader", "batch_size", "drop_last"]
