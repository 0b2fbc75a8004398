"""The public namespaces: complete, sorted __all__, curried decorators, and a runnable example on every public name."""
import inspect

import pytest
import toolz

import batching
import readers
import train
from readers.testing import assert_same
from tests.helpers.toys import add_one, is_odd, tag_draw, ten_reader

PACKAGES = [readers, batching, train]
#: Exported type aliases: an alias reports the module of what it aliases (collections.abc), not ours.
ALIASES = {"Reader"}
#: Public names a package imports for its own use and does not export (none: such imports are _named).
IMPORTED: dict[str, set[str]] = {}


def _defined_in(package, obj) -> bool:
    module = getattr(obj, "__module__", None) or ""
    return module == package.__name__ or module.startswith(package.__name__ + ".")


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_all_is_sorted_and_complete(package):
    assert package.__all__ == sorted(package.__all__)
    # dir(), not vars(): readers imports some names on first use (PEP 562), and its __dir__ lists them
    public = {name for name in dir(package) if not name.startswith("_") and not inspect.ismodule(getattr(package, name))}
    imported = {name for name in public - ALIASES if not _defined_in(package, getattr(package, name))}
    assert imported == IMPORTED.get(package.__name__, set()), (
        f"{package.__name__} holds public names from elsewhere; export them (and list them here) or import "
        "them under a _name")
    # every decorator, function and class of the namespace is listed, and nothing else
    assert set(package.__all__) == public - imported


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


# -- curried decorators ---------------------------------------------------------------------

SOURCE = readers.from_sequence(range(10))
WORDS = readers.from_sequence(["a", "bb", "ccccc", "d", "eeeeee", "ff", "g"])
# name: (decorator, arguments before the reader, options that make it work, the reader it takes)
CURRIED = {
    "batch": (batching.batch, (), {"batch_size": 3}, SOURCE),
    "bucket_by_length": (batching.bucket_by_length, (), {"boundaries": [3], "batch_size": 2}, WORDS),
    "buffered": (readers.buffered, (), {"size": 2}, SOURCE),
    "cached": (readers.cached, (), {"func": add_one}, readers.from_sequence(list(range(10)))),
    "collated": (batching.collated, (), {"pad_value": -1},
                 batching.batch(readers.from_sequence([[1], [2, 3], [4]]), 2)),
    "filter_entries": (readers.filter_entries, (), {"predicate": is_odd}, SOURCE),
    "firstn": (readers.firstn, (), {"n": 3}, SOURCE),
    "map_readers": (readers.map_readers, (add_one,), {}, SOURCE),
    "multiprocess_reader": (readers.multiprocess_reader, (), {"start_method": "fork"}, [SOURCE]),
    "node_shuffle": (readers.node_shuffle, (), {"seed": 0}, SOURCE),
    "prefetch": (readers.prefetch, (), {"workers": 2}, SOURCE),
    "random_map": (readers.random_map, (tag_draw,), {"seed": 0}, SOURCE),
    "repeat": (readers.repeat, (), {"times": 2}, SOURCE),
    "mix": (readers.mix, (), {"weights": [1, 2], "seed": 0}, [SOURCE, WORDS]),
    "round_share": (readers.round_share, (), {"assignment": {0: (0, 4)}, "client": 0}, SOURCE),
    "shard": (readers.shard, (), {"index": 1, "count": 3}, SOURCE),
    "shuffle": (readers.shuffle, (), {"buf_size": 4, "seed": 0}, SOURCE),
    "shuffle_row_groups": (readers.shuffle_row_groups, (), {"window": 2, "seed": 0, "group_size": 3}, SOURCE),
    "skip": (readers.skip, (), {"n": 2}, SOURCE),
    "xmap_readers": (readers.xmap_readers, (add_one,), {"process_num": 2, "buffer_size": 2, "order": True}, SOURCE),
}


def test_curried_table_lists_every_curried_decorator():
    curried = {name for package in (readers, batching) for name in package.__all__
               if isinstance(getattr(package, name), readers.Curried)}
    assert curried == set(CURRIED)


@pytest.mark.parametrize("name", sorted(CURRIED))
def test_decorators_are_curried(name, no_leaks):
    decorator, before, options, reader = CURRIED[name]
    waiting = decorator(*before, **options)
    assert not isinstance(waiting, readers.Stage)  # options only: it waits for its reader
    assert_same(list(waiting(reader)()), list(decorator(*before, reader, **options)()))
    after = list(inspect.signature(decorator.func).parameters.values())[len(before) + 1:]
    required = [p.name for p in after if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if required:  # given the reader, it runs at once: a missing option is an error now, not a partial
        with pytest.raises(TypeError, match=f"missing .*'{required[-1]}'"):
            decorator(*before, reader)


def test_decorators_curry_by_keyword_in_a_pipe():
    r = toolz.pipe(
        readers.from_sequence(list(range(20))),
        readers.map_readers(add_one),
        readers.shuffle(buf_size=5, seed=0),
        readers.firstn(n=12),
        readers.skip(n=2),
        readers.filter_entries(predicate=is_odd),
        batching.batch(batch_size=2),
    )
    out = [x for b in r() for x in b]
    assert len(out) == len(set(out)) and all(x % 2 for x in out)


@pytest.mark.parametrize("call, match", [
    (lambda: batching.batch(ten_reader()), "missing 1 required positional argument: 'batch_size'"),
    (lambda: readers.firstn(ten_reader()), "missing 1 required positional argument: 'n'"),
    (lambda: readers.xmap_readers(add_one, ten_reader(), 4), "missing 1 required positional argument"),
])
def test_missing_option_with_the_reader_given_fails_at_once(call, match):
    """Regression from the review of issue 2."""
    with pytest.raises(TypeError, match=match):
        call()


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
