"""readers.caching.memory: the least recently used entries go first, and the byte budget holds, under any sequence
of puts and gets and from many threads at once."""
from __future__ import annotations

import pickle
import sys
import threading
from collections import OrderedDict

import numpy as np
import pytest

from readers.caching.memory import MISSING, MemoryTier
from readers.storage.codec import size_of
from tests.conftest import HANG


class Model:
    """What a least-recently-used cache of ``budget`` bytes must hold, the slow obvious way."""

    def __init__(self, budget: int):
        self.budget, self.entries = budget, OrderedDict()

    def put(self, key, value, size: int) -> None:
        if size > self.budget:
            return
        self.entries.pop(key, None)
        self.entries[key] = (value, size)
        while sum(s for _, s in self.entries.values()) > self.budget:
            self.entries.popitem(last=False)

    def get(self, key):
        if key not in self.entries:
            return MISSING
        self.entries.move_to_end(key)
        return self.entries[key][0]


def held(tier: MemoryTier, keys) -> dict:
    return {k: v for k, v in zip(keys, tier.get_many(list(keys))) if v is not MISSING}


def test_least_recently_used_goes_first():
    tier = MemoryTier(budget=300)
    for key in "abc":
        tier.put(key, key.upper(), size=100)
    assert tier.get_many(["a"]) == ["A"]  # now "b" is the least recently used
    tier.put("d", "D", size=100)
    assert tier.get_many(["b", "c", "a", "d"]) == [MISSING, "C", "A", "D"]
    tier.put("e", "E", size=200)  # "c" then "a" go: the get above used them in that order
    assert tier.get_many(["c", "a", "d", "e"]) == [MISSING, MISSING, "D", "E"]
    assert tier.evictions == 3 and tier.bytes == 300 and len(tier) == 2


def test_a_miss_does_not_count_as_a_use():
    tier = MemoryTier(budget=200)
    tier.put("a", 1, size=100)
    tier.put("b", 2, size=100)
    assert tier.get_many(["zz", "a", "zz"]) == [MISSING, 1, MISSING]
    tier.put("c", 3, size=100)
    assert tier.get_many(["a", "b", "c"]) == [1, MISSING, 3]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_random_sequence_matches_the_model_and_never_exceeds_the_budget(seed):
    rng = np.random.default_rng(seed)
    budget = 1000
    tier, model = MemoryTier(budget), Model(budget)
    keys = list(range(40))
    for step in range(3000):
        key = int(rng.integers(len(keys)))
        if rng.random() < 0.5:
            size = int(rng.integers(1, budget + 1)) if rng.random() < 0.1 else int(rng.integers(1, 200))
            value = (key, step)
            tier.put(key, value, size=size)
            model.put(key, value, size)
        else:
            wanted = rng.choice(keys, size=3).tolist()
            assert tier.get_many(wanted) == [model.get(k) for k in wanted]
        assert tier.bytes <= budget
        assert tier.bytes == sum(s for _, s in model.entries.values()) and len(tier) == len(model.entries)
    assert held(tier, keys) == {k: v for k, (v, _) in model.entries.items()}


@pytest.mark.parametrize("budget", [100, 1])
def test_an_entry_bigger_than_the_budget_is_not_kept(budget):
    tier = MemoryTier(budget)
    tier.put("small", "s", size=budget)
    tier.put("big", "b", size=budget + 1)
    assert tier.get_many(["big", "small"]) == [MISSING, "s"]  # nor does it push out what fits
    assert tier.bytes == budget and tier.evictions == 0
    tier.put("array", np.zeros(budget))  # measured: more than budget bytes
    assert tier.get_many(["array"]) == [MISSING]


@pytest.mark.parametrize("budget", [0, -5])
def test_a_budget_of_nothing_keeps_nothing(budget):
    tier = MemoryTier(budget)
    tier.put("a", 1, size=0)
    tier.put("b", b"xy")
    assert tier.get_many(["a", "b"]) == [MISSING, MISSING]
    assert len(tier) == 0 and tier.bytes == 0


def test_replacing_a_key_adjusts_the_bytes():
    tier = MemoryTier(budget=1000)
    tier.put("a", "old", size=100)
    tier.put("b", "other", size=500)
    tier.put("a", "new", size=300)
    assert tier.get_many(["a", "b"]) == ["new", "other"]
    assert tier.bytes == 800 and len(tier) == 2 and tier.evictions == 0
    tier.put("a", "newer", size=50)
    assert tier.bytes == 550
    tier.put("b", "grown", size=960)  # with "a" it would be over: "a" (least recently used) goes
    assert tier.get_many(["a", "b"]) == [MISSING, "grown"]
    assert tier.bytes == 960 and tier.evictions == 1


def test_a_value_is_measured_unless_its_size_is_given():
    value = (np.zeros(100), "label")
    tier = MemoryTier(budget=10_000)
    tier.put("measured", value)
    assert tier.bytes == size_of(value)
    tier.put("given", value, size=7)
    assert tier.bytes == size_of(value) + 7


def test_none_and_falsy_values_are_hits():
    tier = MemoryTier(budget=100)
    for key, value in [("none", None), ("zero", 0), ("empty", ())]:
        tier.put(key, value, size=10)
    assert tier.get_many(["none", "zero", "empty", "missing"]) == [None, 0, (), MISSING]


def test_get_many_returns_the_same_object_in_the_order_asked():
    tier = MemoryTier(budget=10_000)
    value = np.arange(5)
    tier.put(3, value)
    got = tier.get_many([3, 4, 3])
    assert got[0] is value and got[2] is value and got[1] is MISSING
    assert MemoryTier(10).get_many([1, 2]) == [MISSING, MISSING] and repr(MISSING) == "MISSING"


def test_clear_drops_every_entry_and_keeps_the_evictions():
    tier = MemoryTier(budget=200)
    for key in range(4):
        tier.put(key, key, size=100)
    tier.clear()
    assert tier.get_many([2, 3]) == [MISSING, MISSING]
    assert len(tier) == 0 and tier.bytes == 0 and tier.evictions == 2
    tier.put("again", 1, size=200)
    assert tier.get_many(["again"]) == [1]


def test_threads_hammering_one_tier_keep_its_accounting():
    budget, keys = 5000, list(range(64))
    tier = MemoryTier(budget)
    errors: list = []

    def hammer(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(3000):
                key = int(rng.integers(len(keys)))
                if rng.random() < 0.6:
                    size = int(rng.integers(1, 400))
                    tier.put(key, (key, size), size=size)
                else:
                    for k, v in zip([key, key + 1], tier.get_many([key, key + 1])):
                        if v is not MISSING and v[0] != k:
                            raise AssertionError(f"key {k} gave {v}")
        except BaseException as exc:
            errors.append(exc)

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible, so races show
    threads = [threading.Thread(target=hammer, args=(seed,)) for seed in range(4)]
    try:
        for t in threads:
            t.start()
    finally:
        for t in threads:
            t.join(HANG)
        sys.setswitchinterval(switch)
    assert not any(t.is_alive() for t in threads) and errors == []
    kept = held(tier, keys)
    assert len(kept) == len(tier) and tier.bytes == sum(size for _, size in kept.values()) <= budget
    assert tier.evictions > 0


def test_a_pickled_tier_is_empty_with_the_same_budget():
    tier = MemoryTier(budget=1000)
    tier.put("a", np.ones(10))
    tier.put("b", b"x" * 2000)
    copy = pickle.loads(pickle.dumps(tier))
    assert copy.budget == 1000 and len(copy) == 0 and copy.bytes == 0 and copy.evictions == 0
    assert copy.get_many(["a"]) == [MISSING] and len(tier) == 1
    copy.put("c", 1, size=10)
    assert copy.get_many(["c"]) == [1] and tier.get_many(["c"]) == [MISSING]


# -- get_ids: blocks of int keys through arrays (issue 32, row 1) ---------------------------------------------


def test_get_ids_gives_every_value_or_none_and_uses_only_what_it_gives():
    tier = MemoryTier(budget=1000)
    for key in range(5):
        tier.put(key, f"v{key}", size=100)
    assert tier.get_ids(np.array([4, 0, 4])) == ["v4", "v0", "v4"]
    assert tier.get_ids(np.array([1, 9])) is None and tier.get_ids(np.array([-1])) is None
    assert tier.get_ids(np.array([], dtype=np.int64)) is None
    for key in range(5, 10):  # the budget full: 1, 2, 3, 0, 4 (the uses get_ids gave, in order), then 5-9
        tier.put(key, f"v{key}", size=100)
    tier.put(10, "v10", size=300)  # 1, 2, 3 go
    tier.put(11, "v11", size=100)  # then 0: 4 was used after it
    assert held(tier, range(5)) == {4: "v4"} and tier.evictions == 4


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_get_ids_keeps_the_tier_exactly_least_recently_used(seed):
    # Regression (issue 32, row 1): hits of a shuffled pass took two dict operations per key (a lookup and a
    # move to the LRU's end), each a cache miss; get_ids serves them from arrays, and applies the uses to the
    # LRU order later, in order: the model of an eager LRU must still hold after any mix of calls
    rng = np.random.default_rng(seed)
    budget = 3000
    tier, model = MemoryTier(budget), Model(budget)
    span = 200
    for step in range(4000):
        what = rng.random()
        if what < 0.4:
            key = int(rng.integers(span)) + (2000 if rng.random() < 0.01 else 0)  # now and then far out: the
            size = int(rng.integers(1, 100))                                        # index grows
            tier.put(key, (key, step), size=size)
            model.put(key, (key, step), size)
        elif what < 0.5:
            wanted = rng.integers(span, size=3).tolist()
            assert tier.get_many(wanted) == [model.get(k) for k in wanted]
        else:
            held_keys = list(model.entries)
            wanted = ([held_keys[int(i)] for i in rng.integers(len(held_keys), size=int(rng.integers(1, 8)))]
                      if held_keys and rng.random() < 0.9 else rng.integers(span, size=4).tolist())
            got = tier.get_ids(np.array(wanted, dtype=np.int64))
            if all(k in model.entries for k in wanted) and got is not None:
                assert got == [model.get(k) for k in wanted]
            else:
                assert got is None or not all(k in model.entries for k in wanted)
        assert tier.bytes == sum(s for _, s in model.entries.values()) <= budget
    assert held(tier, list(model.entries)) == {k: v for k, (v, _) in model.entries.items()}
    assert tier._index is not None  # (the index was in use: 200 keys, close together)


def test_get_ids_applies_more_uses_than_it_can_replay_in_the_order_of_the_lookups():
    tier = MemoryTier(budget=100 * 10)
    for key in range(100):
        tier.put(key, key, size=10)
    for key in list(range(100))[::-1] * 3:  # more uses than keys: the log is given up for the ``used`` counts
        assert tier.get_ids(np.array([key])) == [key]
    tier.put(100, 100, size=10 * 3)  # 99, 98, 97 were used least recently
    assert held(tier, [99, 98, 97, 96, 0]) == {96: 96, 0: 0}


def test_get_ids_of_keys_too_far_apart_or_not_ints_is_none_and_get_many_still_serves():
    sparse = MemoryTier(budget=10_000)
    for key in (0, 10**9):
        sparse.put(key, key, size=1)
    assert sparse.get_ids(np.array([0, 10**9])) is None and sparse.get_many([0, 10**9]) == [0, 10**9]
    mixed = MemoryTier(budget=10_000)
    mixed.put(1, "one", size=1)
    assert mixed.get_ids(np.array([1])) == ["one"]
    mixed.put("a", "A", size=1)  # a key that is not an int: no index from now on
    assert mixed.get_ids(np.array([1])) is None and mixed.get_many([1, "a"]) == ["one", "A"]
    mixed.clear()
    mixed.put(2, "two", size=1)
    assert mixed.get_ids(np.array([2])) == ["two"]  # cleared: an index again


@pytest.mark.parametrize("values", [[np.arange(2), np.arange(2)], [(), ()], [[1, 2], [3, 4]], [None, 0]],
                         ids=["arrays", "empty tuples", "lists", "none"])
def test_get_ids_gives_the_very_values_put_whatever_their_shape(values):
    tier = MemoryTier(budget=1 << 20)
    for key, value in enumerate(values):
        tier.put(key, value, size=1)
    got = tier.get_ids(np.array([1, 0]))  # the index is made from the entries held
    tier.put(2, values[0], size=1)  # and kept up to date by puts
    got2 = tier.get_ids(np.array([2]))
    assert got[0] is values[1] and got[1] is values[0] and got2[0] is values[0]


def test_get_ids_hands_out_fresh_containers_and_shared_read_only_arrays():
    tier = MemoryTier(budget=1 << 20)
    tier.keep(0, {"ids": [1, 2], "x": np.arange(3)})
    first, = tier.get_ids(np.array([0]))
    first["ids"].append(3)
    again, = tier.get_ids(np.array([0]))
    assert again["ids"] == [1, 2] and again["x"] is first["x"] and not again["x"].flags.writeable


def test_an_index_grown_by_keys_put_in_order_holds_them_all():
    tier = MemoryTier(budget=1 << 20)
    for key in range(10_000):  # a pass in order: the index grows a few times, never dropped
        tier.put(key, key, size=1)
        if key % 1000 == 0:
            assert tier.get_ids(np.array([key])) == [key]
    for key in range(-1, -3000, -1):  # and below its start
        tier.put(key, key, size=1)
    keys = np.arange(-2999, 10_000)
    assert tier.get_ids(keys) == keys.tolist() and len(tier._index.values) < 4 * len(keys)
    tier.put(10**9, "far", size=1)  # too far to grow to: dropped, and get_many serves
    assert tier.get_ids(np.array([0])) is None and tier.get_many([0, 10**9]) == [0, "far"]
