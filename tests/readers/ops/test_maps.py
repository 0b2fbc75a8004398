"""readers.ops.maps: map_readers, random_map and with_index, over streams, index plans and indexed readers."""
import pickle

import numpy as np
import pytest
import toolz

import batching
import readers
from readers.identity import fingerprint
from readers.inspection import inspect_pipeline
from readers.ops.maps import append_column, key_id, sample_rng
from readers.parents import is_indexed, is_planned
from readers.testing import assert_seeded_passes
from tests.helpers.layouts import set_env
from tests.helpers.toys import double, name_of, named_entries, tag_draw, ten_reader


def test_map_readers_applies_function_to_each_entry():
    r = readers.map_readers(double, ten_reader())
    for _ in range(3):
        assert list(r()) == [2 * i for i in range(10)]


def test_map_readers_zips_several_readers_and_stops_at_shortest():
    r = readers.map_readers(lambda a, b: (a, b), ten_reader(), lambda: "abc")
    assert list(r()) == [(0, "a"), (1, "b"), (2, "c")]


def test_map_readers_of_an_indexed_reader_is_indexed():
    src = readers.from_sequence(list("abcdefgh"))
    assert readers.map_readers(str.upper, src)[2] == "C"


def test_map_readers_indexed_error_comes_after_the_entries_before_it():
    def invert(x):
        return 1 / (x - 5)

    got = []
    with pytest.raises(ZeroDivisionError):
        for entry in readers.map_readers(invert, readers.from_sequence(range(10)))():
            got.append(entry)
    assert got == [invert(x) for x in range(5)]


def test_map_readers_of_several_readers_has_no_length():
    with pytest.raises(TypeError, match="map_readers of several readers has no length"):
        len(readers.map_readers(lambda a, b: a, readers.from_sequence("ab"), readers.from_sequence("cd")))


@pytest.mark.parametrize("entry, value, expected", [
    (("x", 1), 0.0, ("x", 1, 0.0)),
    ("x", 0.0, ("x", 0.0)),
    ({"x": 1}, 0.0, {"x": 1, "weight": 0.0}),
])
def test_append_column_adds_a_last_column(entry, value, expected):
    assert append_column(entry, value) == expected


def test_append_column_refuses_to_overwrite_a_dict_key():
    with pytest.raises(ValueError, match="already have a 'weight' key"):
        append_column({"weight": 2.0}, 1.0)


def test_with_index_attaches_source_index_after_shuffle():
    data = [("x%d" % i, i % 3) for i in range(50)]
    r = readers.with_index(readers.shuffle(readers.from_sequence(data), seed=2))
    out = list(r())
    assert sorted(e[-1] for e in out) == list(range(50))
    assert all(data[i] == (name, label) for name, label, i in out)


def test_with_index_on_a_stream_counts_positions():
    assert list(readers.with_index(lambda: "ab")()) == [("a", 0), ("b", 1)]


def test_with_index_of_an_indexed_reader_is_indexed():
    assert readers.with_index(readers.from_sequence(list("abcdefgh")))[4] == ("e", 4)


def test_with_index_ids_are_source_indices_through_windows():
    """Regression from the review of issue 2."""
    src = readers.from_sequence(list("abcdef"))
    direct = list(readers.with_index(readers.skip(src, 2))())
    shuffled = list(readers.with_index(readers.skip(readers.shuffle(src, 1, seed=0), 2))())
    assert direct == shuffled == [("c", 2), ("d", 3), ("e", 4), ("f", 5)]
    assert readers.with_index(readers.firstn(readers.skip(src, 1), 2))[1] == ("c", 2)


def test_with_index_columns_gain_an_int64_id_column():
    r = readers.with_index(readers.skip(readers.from_arrays(np.arange(5) * 10), 2))
    (values, ids) = r.gather_columns(np.array([0, 2]))
    assert values.tolist() == [20, 40] and ids.tolist() == [2, 4] and ids.dtype == np.int64


# -- random_map ------------------------------------------------------------------------------------------------

def _draws(entries):
    """{sample: draw} of random_map(tag_draw, ...)'s entries, whatever their order; each sample once."""
    entries = list(entries)
    found = dict(entries)
    assert len(found) == len(entries), "a sample came twice"
    return found


def _noisy(n=40, seed=0):
    return readers.random_map(tag_draw, readers.from_sequence(range(n)), seed=seed)


def test_random_map_draws_from_seed_pass_and_sample_alone():
    r = _noisy()
    first, second = _draws(r()), _draws(r())
    assert sorted(first) == list(range(40)) and all(first[k] != second[k] for k in first)
    assert all(first[k] == sample_rng(0, 0, k).random() and second[k] == sample_rng(0, 1, k).random() for k in first)
    assert _draws(_noisy()()) == first  # another reader, the same seed: the same draws
    assert _draws(_noisy(seed=1)()) != first


def test_random_map_gives_a_sample_the_same_draw_in_any_order_shard_or_batch():
    want = _draws(_noisy().run(3))
    shuffled = readers.shuffle(_noisy(), seed=7)
    shuffled.set_pass(3)
    assert _draws(shuffled()) == want
    parts = [readers.shard(readers.shuffle(_noisy(), seed=7), k, 3, equalize=None) for k in range(3)]
    for part in parts:
        part.set_pass(3)
    assert _draws(e for part in parts for e in part()) == want
    batched = batching.batch(readers.shuffle(_noisy(), buf_size=5, seed=2), 8)
    batched.set_pass(3)
    assert _draws(e for b in batched() for e in b) == want


@pytest.mark.parametrize("world", [1, 2, 3])
def test_random_map_gives_a_sample_the_same_draw_on_every_rank(world, monkeypatch):
    want = _draws(_noisy().run(1))
    got = []
    for rank in range(world):
        set_env(monkeypatch, RANK=rank, WORLD_SIZE=world)
        r = readers.shard(readers.shuffle(_noisy(), seed=4))  # the rank's share, from the launcher
        r.set_pass(1)
        got += list(r())
    assert _draws(got) == want


@pytest.mark.parametrize("mode, method", [("thread", None), ("process", "fork"), ("process", "spawn")])
def test_random_map_gives_a_sample_the_same_draw_in_any_number_of_workers(mode, method, no_leaks):
    want = _draws(_noisy().run(2))
    for workers in (1, 3):
        options = {"mode": mode} if method is None else {"mode": mode, "start_method": method}
        r = readers.prefetch(readers.shuffle(_noisy(), seed=5), workers, **options)
        r.set_pass(2)
        assert _draws(r()) == want
        stream = readers.prefetch(readers.random_map(tag_draw, ten_reader(), seed=0), workers, **options)
        assert list(stream()) == list(readers.random_map(tag_draw, ten_reader(), seed=0)())


def test_random_map_over_a_stream_is_keyed_by_the_position_in_the_pass():
    r = readers.random_map(tag_draw, ten_reader(), seed=3)
    entries = list(r())
    assert [draw for _, draw in entries] == [sample_rng(3, 0, k).random() for k in range(10)]
    assert list(r()) != entries and r.positions is None
    assert_seeded_passes(lambda: readers.random_map(tag_draw, ten_reader(), seed=3))


def test_random_map_keeps_random_access_and_the_fast_paths_above_it():
    r = _noisy()
    assert len(r) == 40 and is_indexed(r) and r[5] == (5, sample_rng(0, 0, 5).random())  # outside a pass: pass 0
    assert list(r.gather(np.array([5, 2]))) == [r[5], r[2]]
    assert is_planned(readers.shuffle(r, seed=0)) and is_planned(readers.shard(r, 0, 2))
    plan = readers.shuffle(r, seed=0).plan(4)
    assert plan.source.bound_pass == 4 and plan.source.parents[0] is r.parents[0]  # bound, over its own source
    over_a_shuffle = readers.random_map(tag_draw, readers.shuffle(readers.from_sequence(range(40)), seed=1), seed=0)
    assert is_planned(over_a_shuffle) and _draws(over_a_shuffle.run(2)) == _draws(r.run(2))


def test_random_map_keys_a_sample_by_its_id_in_the_source_through_slices_and_chains():
    r = readers.random_map(tag_draw, readers.skip(readers.from_sequence(range(40)), 10), seed=0)
    assert r[0] == (10, sample_rng(0, 0, 10).random())


def test_random_map_is_curried_pickles_and_knows_its_function_and_seed():
    r = toolz.pipe(readers.from_sequence(range(10)), readers.random_map(tag_draw, seed=2))
    assert list(r()) == list(readers.random_map(tag_draw, readers.from_sequence(range(10)), seed=2)())
    assert list(pickle.loads(pickle.dumps(r))()) == list(r())
    assert repr(r).splitlines()[0] == "random_map(tag_draw, seed=2)"
    prints = {fingerprint(readers.random_map(f, readers.from_sequence(range(10)), seed=s))["pipeline"][0]
              for f in (tag_draw, double) for s in (1, 2)}
    assert len(prints) == 4


@pytest.mark.parametrize("call, error, match", [
    (lambda: readers.random_map(5, ten_reader(), seed=0), TypeError, "func must be callable as func"),
    (lambda: readers.random_map(tag_draw, ten_reader(), seed=-1), ValueError, "seed must be an int >= 0"),
    (lambda: readers.random_map(tag_draw, ten_reader()), TypeError, "missing 1 required keyword-only argument: 'seed'"),
])
def test_random_map_refuses_bad_arguments_at_once(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_random_map_with_a_drawn_seed_cannot_be_checkpointed(tmp_path):
    r = readers.random_map(tag_draw, readers.from_sequence(range(8)), seed=None)
    assert "draws a new seed in every run" in inspect_pipeline(r).unrepeatable


def test_random_map_below_a_padding_shard_and_a_map_draws_as_in_order():
    want = _draws(_noisy().run(1))
    got = []
    for k in range(3):
        r = readers.map_readers(tuple, readers.shard(readers.shuffle(_noisy(), seed=2), k, 3, equalize="pad"))
        r.set_pass(1)
        got += [(value, draw) for value, draw, weight in r() if weight == 1.0]
    assert _draws(got) == want


def test_random_map_with_a_key_draws_by_the_samples_name_whatever_the_streams_order():
    named = readers.random_map(tag_draw, named_entries, seed=4, key=name_of)
    entries = list(named())
    assert [draw for _, draw in entries] == [sample_rng(4, 0, key_id(f"{i:04d}.jpg")).random() for i in range(20)]
    reordered = readers.random_map(tag_draw, readers.shuffle(named_entries, 7, seed=1), seed=4, key=name_of)
    assert _draws(reordered()) == _draws(entries)  # the draw follows the name, not the position
    assert named.positions == 1 and named.per_entry == "map"
    assert_seeded_passes(lambda: readers.random_map(tag_draw, named_entries, seed=4, key=name_of))
    with pytest.raises(TypeError, match="key returned float 1.5; a key names a sample for good"):
        list(readers.random_map(tag_draw, named_entries, seed=4, key=lambda entry: 1.5)())


def test_random_map_with_a_key_lets_a_shard_or_workers_augment_only_their_share(no_leaks):
    """Review of issue 26: over a stream, every worker augmented every entry and kept 1/k of them."""
    seen = []

    def counted(entry, rng):
        seen.append(entry[0])
        return tag_draw(entry, rng)

    whole = _draws(readers.random_map(tag_draw, named_entries, seed=2, key=name_of)())
    part = list(readers.shard(readers.random_map(counted, named_entries, seed=2, key=name_of), 1, 4)())
    assert len(seen) == len(part) == 5 and all(whole[k] == d for k, d in part)
    r = readers.prefetch(readers.random_map(tag_draw, named_entries, seed=2, key=name_of), 3, mode="process",
                         start_method="fork")
    assert _draws(r()) == whole
