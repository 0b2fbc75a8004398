"""The stage guide (readers.guide): its examples hold up in the pipelines a user would build with them."""
import doctest
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


@pytest.fixture(scope="module")
def guide():
    """The names the guide's examples define (Every, every, Sliding, sliding...), after running them."""
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


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_guide_stages_run_in_prefetch_workers(guide, mode, no_leaks):
    every, sliding = guide["every"], guide["sliding"]
    pipeline = sliding(readers.shuffle(every(readers.from_sequence(range(40)), 2), seed=3), 2)
    parallel = readers.prefetch(pipeline, 2, mode=mode, start_method="fork" if mode == "process" else None)
    assert list(parallel()) == list(pipeline())
    assert_resumes_at_every_step(lambda: readers.prefetch(pipeline, 2), max_steps=8)


def test_guide_sliding_resumes_by_jumping_when_it_can(guide):
    pulled = []

    def counted():
        for i in range(10):
            pulled.append(i)
            yield i

    r = guide["sliding"](readers.from_sequence(range(10)), 3)
    it = r()
    [next(it) for _ in range(4)]
    r.set_state(it.get_state())
    assert list(r()) == [(4, 5, 6), (5, 6, 7), (6, 7, 8), (7, 8, 9)]
    streamed = guide["sliding"](counted, 3)
    streamed.set_state({"pass": 0, "cursor": 4, "seed": None})
    assert list(streamed())[0] == (4, 5, 6) and pulled[0] == 0  # a plain stream is read past, from its start


def _hooks_in_tables(doc: str) -> list[list[str]]:
    """The hook names in the first column of each of the docstring's tables (between its ===== rules)."""
    tables = doc.split("=================  ")[1::2]  # each table: a rule with its rows, then a closing rule
    return [re.findall(r"^``([A-Za-z_]+)(?:\(.*?\))?``", table, flags=re.M) for table in tables]


def test_protocol_tables_name_every_hook_each_with_a_default():
    tables = _hooks_in_tables(readers.stage.__doc__)
    assert tables == [["name", "_options", "access", "_stream", "_seek", "_plan", "positions", "seed",
                       "_end_pass"],
                      ["__len__", "_get", "gather", "gather_columns", "sample_ids", "gather_ahead"],
                      ["share", "per_entry", "unresumable"],
                      ["identity", "digest"]]
    for hook in sum(tables, []):
        assert hasattr(readers.IndexedReader, hook), hook


def test_declarations_have_the_documented_defaults():
    assert (Node.positions, Node.seed, Node.unresumable, Node.per_entry) == (None, None, None, None)
    assert Stage.access == "stream" and readers.IndexedReader.access == "index"
    assert Node().share() is None
    assert Node().digest() is None and Node().identity() == Node().title()
