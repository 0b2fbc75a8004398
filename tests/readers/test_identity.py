"""readers.identity: a pipeline's data known by its stages, length and content, not by its paths."""
import functools
import os
import pathlib
import shutil

import numpy as np
import pytest

import readers
from readers import identity, mnist
from readers.identity import (
    array_digest,
    differences,
    file_digest,
    fingerprint,
    value_digest,
)
from readers.pipeline import describe
from tests.train.recording import write_mnist


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


def test_a_source_that_cannot_say_leaves_content_out_of_the_comparison():
    def rows():
        yield 1
    assert fingerprint(rows)["content"] is None
    assert fingerprint(readers.from_sequence([object()]))["content"] is None
    same = {"pipeline": ["rows"], "length": None, "content": None}
    assert differences(same, {**same, "content": "abc"}) == []


@pytest.mark.parametrize("change", [lambda a: a[:-1], lambda a: a.astype(np.float64), lambda a: a.reshape(-1, 2),
                                    lambda a: np.concatenate([a[:-1], a[-1:] + 1])])
def test_array_digest_sees_shape_type_and_sampled_values(change):
    a = np.arange(4 << 20, dtype=np.float32).reshape(-1, 4)  # 16 MiB: sampled
    assert array_digest(a) == array_digest(a.copy())
    assert array_digest(a) != array_digest(change(a))


def test_array_digest_of_long_rows_reads_a_byte_budget_not_whole_rows(monkeypatch):
    """Review of issue 12: sampling 1,024 whole rows read all of an array of few, long rows."""
    a = np.zeros((3, 4 << 20), np.float32)  # 48 MiB in three rows
    fed = []
    real = identity._hasher

    def counting():
        h = real()
        update = h.update
        return type("Counting", (), {"update": lambda self, b: fed.append(len(memoryview(b).cast("B"))) or update(b),
                                     "hexdigest": lambda self: h.hexdigest()})()
    monkeypatch.setattr(identity, "_hasher", counting)
    digest = array_digest(a)
    assert sum(fed) <= identity.WHOLE + 64
    b = a.copy()
    b[-1, -1] = 1  # the very last value is in the last block
    assert array_digest(b) != digest
    view = a[:, ::2]  # a strided view: sampled by values, the same budget
    fed.clear()
    array_digest(view)
    assert sum(fed) <= identity.WHOLE + 64
    c = a.copy()
    c[0, 0] = 1
    assert array_digest(c[:, ::2]) != array_digest(view)


def test_value_digest_is_none_for_objects_without_a_stable_form():
    assert value_digest([{"b": 1, "a": (2, b"x")}]) == value_digest([{"a": (2, b"x"), "b": 1}])
    assert value_digest([np.zeros(2), None]) is not None
    assert value_digest([1, object()]) is None


def test_file_digest_is_the_sha256(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"")
    assert file_digest(path) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


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
                                         ("test", "'test'"), ((28, 28), "(28, 28)"), ("x" * 41, "<str>"),
                                         (f"data{os.sep}rows", "<path>"), (pathlib.PurePath("rows"), "<path>"),
                                         (b"raw", "<bytes>")])
def test_a_partials_plain_values_stay_in_the_fingerprint(value, shown):
    assert fingerprint(functools.partial(lines, option=value))["pipeline"] == [f"partial(lines, option={shown})"]
