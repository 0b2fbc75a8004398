"""readers.identity: a pipeline's data known by its stages, length and content, not by its paths."""
import functools
import os
import pathlib
import re
import shutil

import numpy as np
import pytest

import readers
from readers.digests import function_digest, plain_digest
from readers.graph import describe
from readers.identity import differences, fingerprint
from readers.sources import mnist
from tests.helpers.recording import write_mnist


def test_fingerprint_has_the_pipeline_length_and_content():
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    found = fingerprint(readers.firstn(readers.from_arrays(x, np.arange(6)), 4))
    assert found["pipeline"] == ["firstn(n=4)", "from_arrays(6 rows: float32[2], int64)"]
    assert found["length"] == 4 and isinstance(found["content"], str)


def test_mnist_in_two_folders_is_the_same_data_and_other_files_are_not(tmp_path):
    """New-user trial (issue 12): the same files by --data-dir and by READERKIT_DATA were refused."""
    one, two, other = tmp_path / "one", tmp_path / "two", tmp_path / "other"
    write_mnist(one.mkdir() or one)
    shutil.copytree(one, two)
    write_mnist(other.mkdir() or other, seed=1)
    a, b = fingerprint(mnist.train(one, download=False)), fingerprint(mnist.train(two, download=False))
    assert a == b and a["pipeline"] == ["mnist('train')"] and a["length"] == 300
    assert differences(a, fingerprint(mnist.train(other, download=False))) == [
        "content: the data itself differs (same pipeline and length, other values)"]


def test_every_indexed_source_of_the_package_supplies_a_digest(tmp_path):
    write_mnist(tmp_path)
    sources = [readers.from_arrays(np.zeros(3)), readers.np_array(np.zeros((3, 2))), readers.from_sequence("abc"),
               readers.from_sequence(range(10 ** 12)), mnist.train(tmp_path, download=False),
               mnist.test(tmp_path, download=False)]
    assert all(isinstance(s.digest(), str) for s in sources)
    assert readers.from_sequence(range(5)).digest() != readers.from_sequence(range(6)).digest()


def test_a_generator_function_is_known_by_its_first_entries():
    """New-user trial of issue 12: a resume after the generator's data changed was accepted without a word."""
    def rows(seed=0):
        rng = np.random.default_rng(seed)
        yield from ((rng.normal(size=3).astype(np.float32), i % 2) for i in range(1000))
    assert fingerprint(rows)["content"] == fingerprint(rows)["content"] is not None
    assert differences(fingerprint(rows), fingerprint(functools.partial(rows, 7)))[-1].startswith("content:")
    stopped = []

    def counted():
        try:
            yield from range(10 ** 9)
        finally:
            stopped.append(True)  # the pass was closed after its first entries, not read to the end
    assert fingerprint(counted)["content"] is not None and stopped == [True]

    def broken():
        raise OSError("the data is not there")
    assert fingerprint(broken)["content"] is None  # reported by training, not by the fingerprint


def test_a_source_that_cannot_say_leaves_content_out_of_the_comparison():
    def rows():
        yield object()
    assert fingerprint(rows)["content"] is None
    assert fingerprint(readers.from_sequence([object()]))["content"] is None
    same = {"pipeline": ["rows"], "length": None, "content": None}
    assert differences(same, {**same, "content": "abc"}) == []


def test_differences_name_the_first_stage_that_differs():
    a = {"pipeline": ["shuffle(seed=0)", "mnist('train')"], "length": 5, "content": "x"}
    assert differences(a, {**a, "pipeline": ["shuffle(seed=1)", "mnist('train')"]}) == [
        "pipeline: stage 0 was 'shuffle(seed=0)', now 'shuffle(seed=1)'"]
    assert differences(a, {**a, "pipeline": ["shuffle(seed=0)"]})[0].startswith("pipeline: 2 stages were")


def test_ordered_prefetch_is_the_same_data_with_any_number_of_workers():
    source = readers.from_sequence(range(8))
    two, eight = fingerprint(readers.prefetch(source, 2)), fingerprint(readers.prefetch(source, 8, mode="process"))
    assert two == eight and two["pipeline"][0] == "prefetch()"
    assert fingerprint(readers.prefetch(source, 2, ordered=False))["pipeline"][0] == "prefetch(2 threads, ordered=False)"


def test_a_text_file_is_known_by_its_content_not_its_path(tmp_path):
    (tmp_path / "a.txt").write_text("one\ntwo\n")
    (tmp_path / "b.txt").write_text("one\ntwo\n")
    (tmp_path / "c.txt").write_text("one\nthree\n")
    a, b, c = (fingerprint(readers.text_file(tmp_path / n, errors="replace")) for n in ("a.txt", "b.txt", "c.txt"))
    assert a == b and a["pipeline"] == ["text_file(file, errors='replace')"] and a != c


class Settings:
    """An arbitrary object: its repr has a memory address."""


def lines(path, *options, split="train", **more):
    with open(path) as f:
        yield from f


def test_describe_shows_no_address_and_no_long_argument():
    """New-user trial: describe of a partial showed each argument's repr, <Settings object at 0x...> included."""
    shown = describe(functools.partial(lines, Settings(), "x" * 60, split="test", key=len, n=3))
    assert shown == "partial(lines, <Settings>, <str>, split='test', key=<built-in function len>, n=3)"


@pytest.mark.parametrize("where", [lambda d: str(d / "rows.txt"), lambda d: d / "rows.txt"], ids=["str", "pathlike"])
def test_a_partials_path_and_objects_stay_out_of_the_fingerprint(tmp_path, where):
    """New-user trial: a partial's path and object reprs (with addresses) made every run's fingerprint differ."""
    for folder in ("one", "two"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "rows.txt").write_text("a\nb\n")
    one, two = (fingerprint(functools.partial(lines, where(tmp_path / f), Settings(), split="test", n=2))
                for f in ("one", "two"))
    assert one == two and one["pipeline"] == ["partial(lines, <path>, <Settings>, split='test', n=2)"]
    assert fingerprint(functools.partial(lines, where(tmp_path / "one"), split="train"))["pipeline"] == [
        "partial(lines, <path>, split='train')"]


@pytest.mark.parametrize("value,shown", [(None, "None"), (True, "True"), (3, "3"), (np.float32(0.5), "0.5"),
                                         ("test", "'test'"), ((28, 28), "(28, 28)"),
                                         ("x" * 41, f"<str {plain_digest('x' * 41)[:16]}>"),
                                         (f"data{os.sep}rows", "<path>"), (pathlib.PurePath("rows"), "<path>"),
                                         (b"raw", f"<bytes {plain_digest(b'raw')[:16]}>")])
def test_a_partials_plain_values_stay_in_the_fingerprint(value, shown):
    assert fingerprint(functools.partial(lines, option=value))["pipeline"] == [f"partial(lines, option={shown})"]


@pytest.mark.parametrize("make", [
    lambda f, r: readers.map_readers(f, r),
    lambda f, r: readers.xmap_readers(f, r, 2, 4, True),
    lambda f, r: readers.xmap_readers(f, r, 2, 4, False),
], ids=["map_readers", "xmap_readers", "xmap_readers unordered"])
def test_a_map_with_other_code_is_other_data(make):
    """Review of issue 12: map_readers(lambda e: (e[0]*2, e[1]), r) and the same with *3 fingerprinted alike,
    so a resume after a change of preprocessing was accepted."""
    source = readers.from_arrays(np.arange(4), np.arange(4))
    double, triple = lambda e: (e[0] * 2, e[1]), lambda e: (e[0] * 3, e[1])
    twice, thrice = make(double, source), make(triple, source)
    assert fingerprint(twice)["pipeline"][0] != fingerprint(thrice)["pipeline"][0]
    assert fingerprint(twice) == fingerprint(make(lambda e: (e[0] * 2, e[1]), source))
    name = fingerprint(twice)["pipeline"][0]
    assert name.startswith(f"{twice.name}({describe(double)} {function_digest(double)}")
    assert function_digest(double) not in repr(twice)  # what users are shown keeps the name alone


def test_an_ordered_xmap_is_the_same_data_with_any_number_of_workers():
    source = readers.from_sequence(range(8))
    two, four = (fingerprint(readers.xmap_readers(abs, source, n, 8, True)) for n in (2, 4))
    assert two == four and two["pipeline"][0] == f"xmap_readers(abs {function_digest(abs)})"


def test_a_filter_with_another_predicate_is_other_data():
    source = readers.from_sequence(range(8))
    odd, even = (fingerprint(readers.filter_entries(source, p)) for p in (lambda e: e % 2, lambda e: 1 - e % 2))
    assert re.fullmatch(r"filter_entries\(.*<lambda> [0-9a-f]{16}\)", odd["pipeline"][0]) and odd != even


def test_a_bare_folder_name_by_position_is_a_path(tmp_path, monkeypatch):
    """Review of issue 12: partial(rows, "data") showed 'data' while partial(rows, "/abs/data") showed <path>."""
    monkeypatch.chdir(tmp_path)
    for name in ("data", "train"):
        (tmp_path / name).mkdir()
    by_name = fingerprint(functools.partial(lines, "data", split="train"))["pipeline"]
    assert by_name == ["partial(lines, <path>, split='train')"]  # a value by keyword, though train/ is here
    assert by_name == fingerprint(functools.partial(lines, str(tmp_path / "data"), split="train"))["pipeline"]
    assert fingerprint(functools.partial(lines, "nothing", data_dir="data"))["pipeline"] == [
        "partial(lines, 'nothing', data_dir=<path>)"]


@pytest.mark.parametrize("one,other", [({"a": 0}, {"a": 1}), (list(range(10)), list(range(1, 11))),
                                       (np.zeros(3), np.ones(3)), ("x" * 50, "y" * 50)],
                         ids=["dict", "long list", "array", "long str"])
def test_a_partials_data_arguments_stay_in_the_fingerprint_by_digest(tmp_path, one, other):
    """Review of issue 12: dicts and arrays given to a partial all showed as <dict> or <ndarray>."""
    a, b = (fingerprint(functools.partial(lines, tmp_path, table=v))["pipeline"][0] for v in (one, other))
    assert a != b and a.startswith(f"partial(lines, <path>, table=<{type(one).__name__} ")
    assert fingerprint(functools.partial(lines, tmp_path, table={"a": Settings()}))["pipeline"] == [
        "partial(lines, <path>, table=<dict>)"]  # an object inside: no stable form, the type alone


def test_a_partials_function_argument_is_known_by_its_code():
    a, b = (fingerprint(functools.partial(lines, "/rows.txt", key=f))["pipeline"][0]
            for f in (lambda e: e * 2, lambda e: e * 3))
    assert a != b and re.fullmatch(r"partial\(lines, <path>, key=.*<lambda> [0-9a-f]{16}\)", a)


def test_a_one_shot_reader_is_not_read_for_its_fingerprint():
    """Second review of issue 12: the head digest took 64 entries from `lambda: it`, lost to training."""
    it = iter(range(100))
    assert fingerprint(lambda: it)["content"] is None
    assert next(it) == 0


def test_a_callable_whose_attributes_change_as_it_runs_keeps_its_identity_while_it_lives():
    """Second review of issue 12: a map's call counter refused the resume of the same run in one process."""
    class Augment:
        def __init__(self):
            self.calls = 0

        def __call__(self, entry):
            self.calls += 1
            return entry

    augment = Augment()
    stage = readers.map_readers(augment, readers.from_sequence(range(4)))
    before = fingerprint(stage)
    list(stage())
    assert augment.calls == 4 and fingerprint(stage) == before


def test_a_function_over_a_container_that_holds_itself_has_a_digest():
    """Second review of issue 12: a closure over a self-referencing dict raised RecursionError."""
    table = {"a": 1}
    table["self"] = table
    assert len(function_digest(lambda e: table.get(e))) == 16


def test_a_stage_standing_for_a_pipeline_read_elsewhere_takes_its_stages_and_digests():
    from readers.identity import served_fingerprint

    local = readers.shuffle(readers.from_arrays(np.arange(6)), seed=2)
    served = served_fingerprint(local.parents[0])

    class Elsewhere(readers.IndexedReader):
        name = "elsewhere"

        def __len__(self):
            return 6

        def _get(self, i):
            return (i,)

        def stands_for(self):
            return {"pipeline": served["pipeline"], "digests": served["digests"]}

    assert readers.fingerprint(readers.shuffle(Elsewhere(), seed=2)) == readers.fingerprint(local)
