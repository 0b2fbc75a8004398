"""readers.digests: digests of arrays, values, files and functions that every process agrees on."""
import functools
import operator
import os
import subprocess
import sys

import numpy as np
import pytest

from readers import digests
from readers.digests import (
    array_digest,
    file_digest,
    function_digest,
    plain_digest,
    value_digest,
)
from tests.helpers import paths as _paths
from tests.helpers import toys

ROOT = _paths.ROOT


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
    real = digests.hasher

    def counting():
        h = real()
        update = h.update
        return type("Counting", (), {"update": lambda self, b: fed.append(len(memoryview(b).cast("B"))) or update(b),
                                     "hexdigest": lambda self: h.hexdigest()})()
    monkeypatch.setattr(digests, "hasher", counting)
    digest = array_digest(a)
    assert sum(fed) <= digests.WHOLE + 64
    b = a.copy()
    b[-1, -1] = 1  # the very last value is in the last block
    assert array_digest(b) != digest
    view = a[:, ::2]  # a strided view: sampled by values, the same budget
    fed.clear()
    array_digest(view)
    assert sum(fed) <= digests.WHOLE + 64
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


# -- array_digest and memory layout ----------------------------------------------------------


@pytest.mark.parametrize("layout", [np.asfortranarray, lambda x: x.T.copy().T, lambda x: np.repeat(x, 2, axis=1)[:, ::2]],
                         ids=["fortran", "transposed copy", "strided view"])
def test_array_digest_of_a_large_array_does_not_depend_on_its_memory_layout(layout):
    """Review of issue 12's fix: over 4 MiB, a Fortran-ordered copy digested otherwise than the C-ordered array."""
    x = np.random.default_rng(0).random((1000, 2000), dtype=np.float32)  # 8 MB: sampled
    other = layout(x)
    assert not other.flags.c_contiguous and np.array_equal(other, x)
    assert array_digest(other) == array_digest(x)


def test_array_digest_of_a_large_array_in_three_dimensions_reads_the_same_elements_in_any_layout():
    x = np.arange(3 * 700 * 900, dtype=np.float64).reshape(3, 700, 900)  # 15 MB
    moved = np.moveaxis(np.ascontiguousarray(np.moveaxis(x, 2, 0)), 0, 2)  # equal values, other strides
    assert array_digest(moved) == array_digest(x)
    changed = moved.copy(order="F")
    changed[-1, -1, -1] += 1  # the last element is in the last run
    assert array_digest(changed) != array_digest(x)


def test_array_digest_of_a_small_array_is_unchanged():
    """Small arrays are hashed whole, as before the layout fix: checkpoints of small data still resume."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert array_digest(x) == array_digest(np.asfortranarray(x)) == "7304badd40057db3d807d7bddc2110c3"


def test_plain_digest_tells_values_apart_and_refuses_objects():
    assert plain_digest({"a": [1, 2]}) == plain_digest({"a": [1, 2]}) != plain_digest({"a": [1, 3]})
    assert plain_digest(np.zeros(3)) != plain_digest(np.ones(3))
    assert plain_digest([1, object()]) is None


# -- function_digest -------------------------------------------------------------------------------


def _scale(k):
    return lambda e: e * k


def _with_default(k=2):
    def scaled(e, *, by=k):
        return e * by
    return scaled


class Scale:
    def __init__(self, k):
        self.k = k
        self._calls = 0  # private: a cache or a counter, left out

    def __call__(self, e):
        self._calls += 1
        return e * self.k

    def apply(self, e):
        return e * self.k


@pytest.mark.parametrize("one,other", [
    (lambda e: (e[0] * 2, e[1]), lambda e: (e[0] * 3, e[1])),  # the constants
    (lambda e: e + 1, lambda e: e - 1),  # the bytecode
    (lambda e: e.real, lambda e: e.imag),  # the names
    (lambda e: sorted(e, key=lambda v: v * 2), lambda e: sorted(e, key=lambda v: v * 3)),  # a nested function's code
    (_scale(2), _scale(3)),  # a closure cell
    (_with_default(2), _with_default(3)),  # a keyword-only default
    (lambda e, k=2: e * k, lambda e, k=3: e * k),  # a default
    (_scale(np.arange(3)), _scale(np.arange(4))),  # an array in a cell
    (_scale({1, 2}), _scale({1, 3})),  # a set in a cell: lambda e: e[1] in keep
    (functools.partial(round, ndigits=1), functools.partial(round, ndigits=2)),
    (functools.partial(_scale(2)), functools.partial(_scale(3))),  # a partial's function
    (Scale(2), Scale(3)),  # an object's public attributes
    (Scale(2).apply, Scale(3).apply),  # a bound method's object
    (len, abs), (operator.itemgetter(0), operator.itemgetter(1)),  # built-ins by name and repr
    (toys.double, toys.add_one),
], ids=["constants", "bytecode", "names", "nested code", "closure", "kwdefaults", "defaults", "array cell",
        "set cell", "partial args", "partial func", "callable object", "bound method", "builtins", "itemgetter", "functions"])
def test_function_digest_tells_apart_functions_that_compute_otherwise(one, other):
    """Review of issue 12: map_readers(lambda e: (e[0]*2, e[1]), r) and the same with *3 fingerprinted alike."""
    assert function_digest(one) != function_digest(other)


def test_function_digest_is_of_the_code_not_its_name_place_or_objects_without_a_stable_form():
    def first(e):
        return e * 2

    def second(e):
        return e * 2
    assert function_digest(first) == function_digest(second) == function_digest(lambda e: e * 2)
    assert function_digest(_scale(object())) == function_digest(_scale(object()))  # an object: its type only
    assert function_digest(_scale(object())) != function_digest(_scale(1))


def test_function_digest_does_not_change_when_a_function_is_called_or_a_private_cache_fills():
    scale = Scale(2)
    before, code_before = function_digest(scale), function_digest(toys.is_vowel)
    for _ in range(5000):  # long enough for the interpreter to specialise the bytecode it runs
        scale(1.5)
        toys.is_vowel("b")
    assert function_digest(scale) == before and function_digest(toys.is_vowel) == code_before


def test_function_digest_of_a_function_that_holds_itself_ends():
    def countdown(n):
        return n if n <= 0 else countdown(n - 1)  # countdown is a closure cell of its own
    assert len(function_digest(countdown)) == digests.SHORT


def test_function_digest_of_a_set_does_not_follow_the_hash_seed():
    code = ("from tests.readers import test_digests as t\nfrom readers.digests import function_digest\n"
            "print(function_digest(t._scale({'a', 'b', 'c', 'd', 'e', 'f'})))")
    found = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                            env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2", "3")}
    assert found == {function_digest(_scale({"a", "b", "c", "d", "e", "f"})) + "\n"}


def test_function_digest_is_the_same_in_another_process_with_another_hash_seed():
    """Set constants compile to frozensets whose order follows the hash seed; hash() is never used."""
    code = ("from tests.helpers import toys\nfrom readers.digests import function_digest\n"
            "print(function_digest(toys.is_vowel), function_digest(toys.ten_reader(3)))")
    here = f"{function_digest(toys.is_vowel)} {function_digest(toys.ten_reader(3))}"
    for seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                             env={**os.environ, "PYTHONHASHSEED": seed})
        assert out.stdout.strip() == here


def test_function_digest_refuses_what_is_not_callable():
    with pytest.raises(TypeError, match="function_digest: func must be callable, got int 3"):
        function_digest(3)
