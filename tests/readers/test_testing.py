"""readers.testing: the restore-at-every-step and seeded-pass checks pass good stages and catch broken ones."""
import atexit
import importlib
import inspect
import io
import itertools
import os
import pkgutil
import re
import shutil
import tarfile
import tempfile

import numpy as np
import pytest

import readers
from readers.graph import walk
from readers.parents import iterate
from readers.stage import Stage
from readers.testing import (
    assert_resumes_at_every_step,
    assert_same,
    assert_seeded_passes,
    steps_to_check,
)


class ForgetsTheCursor(Stage):
    """Claims its cursor is its parent's (positions = 1) but restarts every resumed pass from the start."""

    name = "forgets_the_cursor"
    positions = 1

    def _seek(self, pass_id, cursor):
        return iterate(self.parents[0], pass_id)


class SkipsOneTooMany(Stage):
    """Resumes one entry late."""

    name = "skips_one_too_many"

    def _stream(self, pass_id):
        return iterate(self.parents[0], pass_id)

    def _seek(self, pass_id, cursor):
        return itertools.islice(iterate(self.parents[0], pass_id), cursor + 1 if cursor else 0, None)


class SameOrderEveryPass(Stage):
    """A 'shuffle' that ignores the pass: a restored reader's next pass differs from the original's."""

    name = "same_order"

    def __init__(self, reader, calls):
        super().__init__(reader)
        self.calls = calls

    def _stream(self, pass_id):
        self.calls.append(pass_id)
        order = np.random.default_rng(len(self.calls)).permutation(5)  # a state of its own, not (seed, pass)
        return iter(order.tolist())


def test_check_passes_good_pipelines():
    states = assert_resumes_at_every_step(lambda: readers.shuffle(readers.from_sequence(range(7)), 3, seed=1))
    assert [s["cursor"] for s in states] == list(range(8)) + [0]


@pytest.mark.parametrize("stage", [ForgetsTheCursor, SkipsOneTooMany], ids=lambda s: s.__name__)
def test_check_catches_a_stage_that_resumes_in_the_wrong_place(stage):
    with pytest.raises(AssertionError, match="rest of pass 0"):
        assert_resumes_at_every_step(lambda: stage(readers.from_sequence(range(6))))


def test_check_catches_passes_that_depend_on_the_history_of_calls():
    calls: list = []
    with pytest.raises(AssertionError):
        assert_resumes_at_every_step(lambda: SameOrderEveryPass(lambda: iter(()), calls))


def test_steps_to_check_always_has_both_ends_and_stays_bounded():
    steps = steps_to_check(10_000, 12)
    assert steps[:2] == [0, 1] and steps[-2:] == [9_999, 10_000] and len(steps) <= 12


def test_assert_same_is_strict_about_types_and_dtypes():
    assert_same([np.float32(1)], [np.float32(1)])
    with pytest.raises(AssertionError, match="type"):
        assert_same((1, 2), [1, 2])
    with pytest.raises(AssertionError, match="int64"):
        assert_same(np.zeros(2, np.int64), np.zeros(2, np.int32))
    assert_same([float("nan")], [float("nan")])  # NaN equals NaN here


# -- every seeded stage of the package draws each pass afresh and resumes in each ------------------------------

def _numbers():
    yield from range(20)


def _noise(entry, rng):
    return entry + rng.integers(1000)


def _tar_shards(seed: int):
    """Four small WebDataset shards written once per process by the standard library's tar writer."""
    global _SHARDS
    if _SHARDS is None:
        _SHARDS = tempfile.mkdtemp(prefix="readerkit-seeded-shards-")
        atexit.register(shutil.rmtree, _SHARDS, True)  # removed with the test process, not left in /tmp
        for k in range(4):
            with tarfile.open(os.path.join(_SHARDS, f"shard-{k}.tar"), "w") as tar:
                for i in range(5):
                    data = f"{k}-{i}".encode()
                    member = tarfile.TarInfo(f"{k:02d}{i:02d}.txt")
                    member.size = len(data)
                    tar.addfile(member, io.BytesIO(data))
    return readers.tar_shards(os.path.join(_SHARDS, "shard-{0..3}.tar"), seed=seed)


_SHARDS = None
SEEDED = {
    "shuffle, buffer, over a stream": lambda: readers.shuffle(_numbers, 4, seed=1),
    "shuffle, buffer, over an indexed reader": lambda: readers.shuffle(readers.from_sequence(range(20)), 4, seed=1),
    "shuffle, global": lambda: readers.shuffle(readers.from_sequence(range(20)), seed=1),
    "node_shuffle": lambda: readers.node_shuffle(readers.from_sequence(range(20)), seed=1),
    "tar_shards, shard order": lambda: _tar_shards(seed=1),
    "shuffle_row_groups": lambda: readers.shuffle_row_groups(readers.from_sequence(range(20)), window=2, seed=1,
                                                             group_size=3),
    "random_map, indexed": lambda: readers.random_map(_noise, readers.from_sequence(range(20)), seed=1),
    "random_map, planned": lambda: readers.random_map(_noise, readers.shard(readers.from_sequence(range(40)), 1, 2),
                                                      seed=1),
    "random_map, stream": lambda: readers.random_map(_noise, _numbers, seed=1),
    "random_map, below a shuffle and a shard": lambda: readers.shard(
        readers.shuffle(readers.random_map(_noise, readers.from_sequence(range(40)), seed=1), seed=2), 0, 2),
}
#: Seeded stages whose seed fixes one order for every pass, by design: the resume half of the check applies.
SAME_EVERY_PASS = {
    "mix": lambda: readers.mix([readers.from_sequence(range(10)), readers.from_sequence(range(100, 110))], seed=1),
}


@pytest.mark.parametrize("name", sorted(SEEDED))
def test_every_seeded_stage_draws_each_pass_afresh_and_resumes_exactly_in_each(name):
    assert_seeded_passes(SEEDED[name])


@pytest.mark.parametrize("name", sorted(SAME_EVERY_PASS))
def test_a_stage_whose_seed_fixes_one_order_resumes_exactly_in_every_pass(name):
    for pass_id in range(2):
        assert_resumes_at_every_step(SAME_EVERY_PASS[name], pass_id=pass_id)


def _stage_classes() -> set[type]:
    for module in pkgutil.walk_packages(readers.__path__, "readers."):
        importlib.import_module(module.name)
    importlib.import_module("batching")
    found, pending = set(), [Stage]
    while pending:
        cls = pending.pop()
        found.add(cls)
        pending.extend(cls.__subclasses__())
    return {cls for cls in found if cls.__module__.startswith(("readers.", "batching."))}


def _declares_a_seed(cls: type) -> bool:
    """A class that sets a seed of its own: an attribute ``seed`` in its body, or ``self.seed`` assigned."""
    source = inspect.getsource(cls)
    return "seed" in vars(cls) or re.search(r"self\.seed\b[^=\n]*=[^=]", source) is not None


def test_the_seeded_checks_cover_every_class_of_the_package_that_declares_a_seed():
    covered = {type(stage) for make in {**SEEDED, **SAME_EVERY_PASS}.values() for stage in walk(make())
               if isinstance(stage, Stage) and stage.seed is not None}
    seeded = {cls for cls in _stage_classes() if _declares_a_seed(cls)}
    assert seeded, "no seeded stage class found: the search is broken"
    assert seeded <= covered, f"seeded stages the checks above do not run: {sorted(c.__name__ for c in seeded - covered)}"


class BlindAugmentation(readers.IndexedReader):
    """An augmentation written before random access knew the pass: it draws from (seed, sample) alone."""

    name = "blind"
    seed = 5

    def __init__(self, reader):
        super().__init__(reader)

    def __len__(self):
        return len(self.parents[0])

    def _get(self, i):
        return self.parents[0].at(i) + np.random.default_rng([self.seed, i]).integers(1000)


def test_the_seeded_check_catches_an_augmentation_blind_to_the_pass_which_the_resume_check_passes():
    """Regression from issue 26: the blind augmentation gave the same noise every pass, and resumed 'exactly'."""
    make = lambda: readers.shuffle(BlindAugmentation(readers.from_sequence(range(20))), seed=0)  # noqa: E731
    assert_resumes_at_every_step(make)
    with pytest.raises(AssertionError, match="gave the same entries"):
        assert_seeded_passes(lambda: BlindAugmentation(readers.from_sequence(range(20))))


def test_the_seeded_check_with_draws_catches_the_blind_augmentation_even_under_a_shuffle():
    """Review of issue 26: a shuffle above made the passes differ by order alone, hiding draws that did not."""
    with pytest.raises(AssertionError, match="gave the same entries in another order"):
        assert_seeded_passes(lambda: readers.shuffle(BlindAugmentation(readers.from_sequence(range(20))), seed=0),
                             draws=True)
    assert_seeded_passes(lambda: readers.shuffle(readers.from_sequence(range(20)), seed=0))  # no draws: order is all


def test_the_seeded_check_says_to_give_a_seed_drawn_from_the_system():
    with pytest.raises(AssertionError, match=r"random_map\(seed=None\) draws a new seed in every run.*give it a seed"):
        assert_seeded_passes(lambda: readers.random_map(_noise, readers.from_sequence(range(10)), seed=None))


def test_the_seeded_check_refuses_a_pipeline_without_a_seed():
    with pytest.raises(AssertionError, match="no stage declares a seed"):
        assert_seeded_passes(lambda: readers.from_sequence(range(10)))
