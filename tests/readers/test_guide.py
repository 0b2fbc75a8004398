"""The stage guide (readers.guide): its examples hold up in the pipelines a user would build with them."""
import ast
import doctest
import pathlib
import re

import numpy as np
import pytest

import batching
import readers
import readers.guide
import readers.stage
from readers.graph import Node
from readers.stage import Stage
from readers.testing import assert_resumes_at_every_step
from tests.helpers.paths import ROOT


@pytest.fixture(scope="module")
def guide():
    """The names the guide's examples define (Every, every, Noisy, DropRepeats, drop_repeats...), after running them."""
    (test,) = doctest.DocTestFinder().find(readers.guide)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test, clear_globs=False)
    assert runner.failures == 0, "the guide's examples fail; run pytest readers/guide.py"
    return test.globs


def test_guide_every_batches_by_index_over_arrays(guide):
    x = np.arange(20, dtype=np.float32).reshape(10, 2)
    r = guide["every"](readers.from_arrays(x, np.arange(10)), 2)
    images, labels = next(iter(batching.collated(batching.batch(r, 3))()))
    assert labels.tolist() == [0, 2, 4] and images.shape == (3, 2)


def test_guide_every_keeps_sample_ids_through_a_shuffle(guide):
    ids = [i for _, i in readers.with_index(readers.shuffle(guide["every"](readers.from_sequence("abcdefgh"), 3),
                                                                   seed=0))()]
    assert sorted(ids) == [0, 3, 6]


def test_guide_every_stays_planned_over_a_shuffle_and_batches_with_vectorised_takes(guide):
    x = np.arange(40, dtype=np.float32).reshape(20, 2)
    source = readers.from_arrays(x, np.arange(20))
    r = guide["every"](readers.shuffle(source, seed=2), 3)
    plan = r.plan(0)
    assert plan is not None and plan.source is source  # the parent's source: batch gathers from it by index
    batches = list(batching.collated(batching.batch(r, 4))())
    labels = np.concatenate([labels for _, labels in batches])
    shuffled = [label for _, label in readers.shuffle(source, seed=2)()]
    assert labels.tolist() == shuffled[::3]


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_guide_stages_run_in_prefetch_workers(guide, mode, no_leaks):
    every, drop_repeats = guide["every"], guide["drop_repeats"]
    pipeline = drop_repeats(readers.shuffle(every(readers.from_sequence([k // 3 for k in range(80)]), 2), 5, seed=3))
    parallel = readers.prefetch(pipeline, 2, mode=mode, start_method="fork" if mode == "process" else None)
    assert list(parallel()) == list(pipeline())
    assert_resumes_at_every_step(lambda: readers.prefetch(pipeline, 2), max_steps=8)


def test_guide_drop_repeats_resumes_by_reading_past_what_it_gave(guide):
    pulled = []

    def counted():
        for i in [0, 0, 1, 1, 2, 3, 3, 4]:
            pulled.append(i)
            yield i

    r = guide["drop_repeats"](counted)
    it = r()
    assert [next(it) for _ in range(2)] == [0, 1]
    state = it.get_state()
    r.set_state(state)
    pulled.clear()
    assert list(r()) == [2, 3, 4] and pulled[0] == 0  # read past, from the stream's start


def test_guide_noisy_draws_alike_in_every_shard_and_worker(guide, no_leaks):
    def make():
        return readers.shuffle(guide["Noisy"](readers.from_sequence(np.arange(30.0)), 7), seed=1)

    whole = sorted(make().run(2))
    parts = []
    for k in range(3):
        part = readers.shard(make(), k, 3, equalize=None)
        part.set_pass(2)
        parts += list(part())
    assert sorted(parts) == whole
    parallel = readers.prefetch(make(), 2, mode="thread")
    parallel.set_pass(2)
    assert sorted(parallel()) == whole


def _hooks_in_tables(doc: str) -> list[list[str]]:
    """The hook names in the first column of each of the docstring's tables (between its ===== rules)."""
    tables = doc.split("==================  ")[1::2]  # each table: a rule with its rows, then a closing rule
    return [re.findall(r"^``([A-Za-z_]+)(?:\(.*?\))?``", table, flags=re.M) for table in tables]


HOOKS = [["name", "_options", "access", "_stream", "_seek", "_plan", "positions", "seed", "finish_pass",
          "with_parents"],
         ["__len__", "_get", "gather", "gather_columns", "column_arrays",
          "wire_columns", "sample_ids", "groups", "gather_ahead", "bound_pass"],
         ["share", "per_entry", "unresumable", "in_workers", "share_count"],
         ["draws_per_pass", "unrepeatable", "batched", "identity", "digest", "stands_for", "by_key"]]


def test_protocol_tables_name_every_hook_each_with_a_default():
    assert _hooks_in_tables(readers.stage.__doc__) == HOOKS
    for hook in sum(HOOKS, []):
        assert hasattr(readers.IndexedReader, hook), hook


def _code(path: pathlib.Path) -> ast.AST:
    return ast.parse(path.read_text())


def test_no_module_looks_for_a_hook_by_name_with_getattr():
    """Regression from issue 26: identity read stands_for, the driver buf_size, with getattr: undeclared hooks."""
    hooks = set(sum(HOOKS, [])) | {"buf_size", "max_token", "access", "_end_pass"}
    found = []
    for path in sorted(p for pkg in ("readers", "batching", "train") for p in (ROOT / pkg).rglob("*.py")):
        for node in ast.walk(_code(path)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in hooks \
                    and not node.args[1].value.startswith("__"):  # a user's own sequence is known by len and [i]
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert found == [], "declare the hook in readers.stage's tables and call it; do not guess with getattr"


def test_declarations_have_the_documented_defaults():
    assert (Node.positions, Node.seed, Node.unresumable, Node.per_entry) == (None, None, None, None)
    assert Stage.access == "stream" and readers.IndexedReader.access == "index"
    assert Node().share() is None
    assert Node().digest() is None and Node().identity() == Node().title()
