"""readers.position: states and cursors; every stateful stage and typical pipelines resume exactly at every step."""
import functools
import json

import numpy as np
import pytest

import batching
import readers
from readers.testing import assert_resumes_at_every_step

N = 11
X = np.arange(N * 2, dtype=np.float32).reshape(N, 2)
Y = np.arange(N, dtype=np.int64) % 3
WORDS = [f"w{i}" * (i % 4 + 1) for i in range(N)]
SEQUENCES = [np.arange(i % 4 + 1, dtype=np.int32) for i in range(N)]


def arrays():
    return readers.from_arrays(X, Y)


def words():
    return readers.from_sequence(WORDS)


def stream():
    """A plain generator function: a reader without len or [i]."""
    yield from WORDS


def numbers():
    yield from range(N)


def upper(word):
    return word.upper()


def joined(a, b):
    return f"{a}+{b}"


def scaled(entry):
    x, y = entry
    return x * 2, y


def even_length(word):
    return len(word) % 2 == 0


def is_odd(x):
    return x % 2 == 1


def first_length(entry):
    return len(entry[0]) if isinstance(entry, tuple) else len(entry)


def label_of(entry):
    return entry[-1]


PIPELINES = {
    # sources
    "from_arrays": arrays,
    "from_sequence": words,
    "np_array": lambda: readers.np_array(X),
    # maps
    "map_indexed": lambda: readers.map_readers(scaled, arrays()),
    "map_stream": lambda: readers.map_readers(upper, stream),
    "map_two_indexed": lambda: readers.map_readers(joined, words(), readers.from_sequence(WORDS[::-1])),
    "map_two_mixed": lambda: readers.map_readers(joined, words(), stream),
    "map_two_shortest": lambda: readers.map_readers(joined, readers.firstn(words(), 7), stream),
    "map_of_planned": lambda: readers.map_readers(upper, readers.shuffle(words(), seed=2)),
    # shuffles
    "shuffle_global": lambda: readers.shuffle(words(), seed=3),
    "shuffle_global_of_map": lambda: readers.shuffle(readers.map_readers(scaled, arrays()), seed=4),
    "shuffle_buffer_planned": lambda: readers.shuffle(arrays(), 4, seed=5),
    "shuffle_buffer_stream": lambda: readers.shuffle(stream, 4, seed=5),
    "shuffle_buffer_of_global": lambda: readers.shuffle(readers.shuffle(words(), seed=1), 3, seed=6),
    "shuffle_buffer_of_buffer": lambda: readers.shuffle(readers.shuffle(stream, 3, seed=1), 5, seed=6),
    "shuffle_buffer_size_1": lambda: readers.shuffle(stream, 1, seed=7),
    "shuffle_buffer_bigger_than_pass": lambda: readers.shuffle(stream, 100, seed=7),
    # batches
    "batch_planned": lambda: batching.batch(readers.shuffle(arrays(), seed=1), 4),
    "batch_planned_drop_last": lambda: batching.batch(readers.shuffle(arrays(), seed=1), 4, drop_last=True),
    "batch_stream": lambda: batching.batch(stream, 3),
    "batch_stream_drop_last": lambda: batching.batch(stream, 3, drop_last=True),
    "batch_of_batch": lambda: batching.batch(batching.batch(words(), 2), 2),
    "collated_columns": lambda: batching.collated(batching.batch(readers.shuffle(arrays(), seed=2), 4)),
    "collated_padded": lambda: batching.collated(batching.batch(readers.from_sequence(SEQUENCES), 3)),
    "collated_stream": lambda: batching.collated(batching.batch(stream, 4)),
    "bucket_by_length": lambda: batching.bucket_by_length(stream, [5], 2),
    "bucket_by_length_planned": lambda: batching.bucket_by_length(readers.shuffle(words(), seed=1), [5, 9], [3, 2, 1]),
    # windows, filters, repeats
    "firstn_indexed": lambda: readers.firstn(words(), 6),
    "firstn_planned": lambda: readers.firstn(readers.shuffle(words(), seed=1), 6),
    "firstn_stream": lambda: readers.firstn(stream, 6),
    "firstn_of_buffer": lambda: readers.firstn(readers.shuffle(words(), 4, seed=1), 7),
    "skip_indexed": lambda: readers.skip(arrays(), 3),
    "skip_planned": lambda: readers.skip(readers.shuffle(words(), seed=1), 3),
    "skip_stream": lambda: readers.skip(stream, 3),
    "skip_of_batch": lambda: readers.skip(batching.batch(words(), 2), 2),
    "filter_planned": lambda: readers.filter_entries(readers.shuffle(words(), seed=1), even_length),
    "filter_stream": lambda: readers.filter_entries(numbers, is_odd),
    "repeat_planned": lambda: readers.repeat(readers.shuffle(words(), seed=1), 2),
    "repeat_stream": lambda: readers.repeat(numbers, 3),
    "repeat_forever_firstn": lambda: readers.firstn(readers.repeat(readers.shuffle(words(), seed=1)), 25),
    "with_index_indexed": lambda: readers.with_index(arrays()),
    "with_index_planned": lambda: readers.with_index(readers.shuffle(words(), seed=1)),
    "with_index_stream": lambda: readers.with_index(stream),
    "with_index_of_filter": lambda: readers.with_index(readers.filter_entries(numbers, is_odd)),
    # combinations
    "chain_indexed": lambda: readers.chain(words(), arrays()),
    "chain_mixed": lambda: readers.chain(stream, readers.shuffle(words(), seed=1)),
    "shuffle_of_chain": lambda: readers.shuffle(readers.chain(words(), readers.firstn(words(), 4)), seed=1),
    "compose_indexed": lambda: readers.compose(arrays(), words()),
    "compose_mixed": lambda: readers.compose(readers.shuffle(arrays(), seed=1), stream),
    "cache_stream": lambda: readers.cache(readers.shuffle(stream, 4, seed=1)),
    "cache_planned": lambda: readers.cache(readers.shuffle(words(), seed=1)),
    "buffered_planned": lambda: readers.buffered(readers.shuffle(arrays(), seed=1), 3),
    "buffered_stream": lambda: readers.buffered(stream, 2),
    "buffered_unbounded_batches": lambda: readers.buffered(batching.batch(stream, 2), 0),
    "xmap_ordered_planned": lambda: readers.xmap_readers(scaled, readers.shuffle(arrays(), seed=1), 3, 4, order=True),
    "xmap_ordered_stream": lambda: readers.xmap_readers(upper, stream, 2, 2, order=True),
    "batch_of_xmap": lambda: batching.batch(readers.xmap_readers(upper, words(), 2, 3, order=True), 4),
    # a map over a stage whose cursor is not its own count (regression: it skipped `cursor` batches)
    "map_over_batch_stream": lambda: readers.map_readers(len, batching.batch(stream, 2)),
    "map_over_batch_planned": lambda: readers.map_readers(len, batching.batch(words(), 2)),
    "map_over_shard_stream": lambda: readers.map_readers(upper, readers.shard(stream, 1, 3)),
    "collated_over_map_over_batch": lambda: batching.collated(readers.map_readers(list, batching.batch(arrays(), 3))),
    "shard_of_shard": lambda: readers.shard(readers.shard(readers.shuffle(words(), seed=1), 1, 2), 1, 2),
    "firstn_over_shard": lambda: readers.firstn(readers.shard(readers.shuffle(words(), seed=1), 1, 2), 3),
    "shuffle_buffer_over_batch": lambda: readers.shuffle(batching.batch(stream, 2), 3, seed=1),
    # typical training pipelines
    "train_indexed": lambda: batching.collated(batching.batch(
        readers.map_readers(scaled, readers.shuffle(arrays(), seed=9)), 3, drop_last=True)),
    "train_stream": lambda: batching.batch(readers.shuffle(readers.map_readers(upper, stream), 5, seed=9), 2),
    "train_prefetched": lambda: readers.buffered(batching.collated(batching.batch(
        readers.with_index(readers.shuffle(arrays(), seed=9)), 4)), 2),
}


@pytest.mark.parametrize("make", PIPELINES.values(), ids=PIPELINES.keys())
def test_pipeline_resumes_exactly_at_every_step(make):
    assert_resumes_at_every_step(make)


def test_text_file_resumes_exactly_at_every_step(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_text("".join(f"line {i}\n" for i in range(9)) + "last, no newline")
    assert_resumes_at_every_step(lambda: readers.text_file(path))
    assert_resumes_at_every_step(lambda: batching.batch(readers.shuffle(readers.text_file(path), 4, seed=1), 3))


@pytest.mark.parametrize("n", [0, 1])
def test_tiny_pipelines_resume_at_every_step(n):
    assert_resumes_at_every_step(lambda: readers.shuffle(readers.from_sequence(range(n)), seed=0))
    assert_resumes_at_every_step(lambda: batching.batch(readers.shuffle(readers.from_sequence(range(n)), 3, seed=0), 2))


def test_global_shuffle_beyond_explicit_permutation_resumes_exactly():
    # more than 65536 samples: the keyed permutation path, not an explicit one
    n = 70_000
    states = assert_resumes_at_every_step(
        lambda: batching.batch(readers.shuffle(readers.from_sequence(range(n)), seed=11), 4096), max_steps=6)
    assert states[-2]["cursor"] == n
    assert_resumes_at_every_step(lambda: readers.shuffle(readers.from_sequence(range(n)), seed=11), max_steps=4)


# -- shards ------------------------------------------------------------------------


@pytest.mark.parametrize("equalize", [None, "pad", "drop"])
@pytest.mark.parametrize("index", [0, 2])
@pytest.mark.parametrize("source", ["planned", "stream"])
def test_shard_resumes_exactly_at_every_step(source, index, equalize):
    def make():
        below = readers.shuffle(words(), seed=1) if source == "planned" else readers.shuffle(stream, 4, seed=1)
        return readers.shard(below, index, 3, equalize=equalize)

    states = assert_resumes_at_every_step(make)
    assert all("layout" not in s for s in states)
    # the cursor counts entries before the shard: 3 per step of one shard
    assert [s["cursor"] for s in states[:3]] == [0, 3, 6]


@pytest.mark.parametrize("equalize", [None, "pad", "drop"])
def test_shard_pipelines_resume_exactly_at_every_step(equalize):
    planned = functools.partial(readers.shuffle, arrays(), seed=3)
    for make in (
        lambda: batching.batch(readers.shard(planned(), 1, 4, equalize=equalize), 2),
        lambda: batching.collated(batching.batch(readers.shard(planned(), 3, 4, equalize=equalize), 2)),
        lambda: readers.map_readers(label_of, readers.shard(planned(), 0, 2, equalize=equalize)),
        lambda: readers.shard(readers.filter_entries(numbers, is_odd), 1, 2, equalize=equalize),
        lambda: readers.shard(batching.batch(planned(), 2), 1, 2, equalize=equalize),
        lambda: readers.buffered(readers.shard(planned(), 1, 3, equalize=equalize), 2),
    ):
        assert_resumes_at_every_step(make)


def test_shard_under_a_stateful_stage_records_its_layout():
    def make():
        return readers.shuffle(readers.shard(readers.from_sequence(range(20)), 1, 3), 3, seed=2)

    states = assert_resumes_at_every_step(make)
    assert [s.get("layout") for s in states[1:-1]] == [[[1, 3]]] * (len(states) - 2)
    assert_resumes_at_every_step(lambda: readers.filter_entries(readers.shard(numbers, 0, 2), is_odd))


def test_shard_state_refuses_another_layout_when_counted_inside_the_shard():
    def make(index, count):
        return readers.shuffle(readers.shard(readers.from_sequence(range(20)), index, count), 3, seed=2)

    it = make(1, 3)()
    next(it), next(it)
    state = it.get_state()
    assert state["layout"] == [[1, 3]]
    for index, count in [(1, 4), (0, 3)]:
        other = make(index, count)
        other.set_state(state)
        with pytest.raises(ValueError, match=r"saved with shards \[\[1, 3\]\].*put shard\(\) after every shuffle"):
            next(iter(other()))
    same = make(1, 3)
    same.set_state(state)
    assert list(same()) == list(make(1, 3)())[2:]


@pytest.mark.parametrize("n", [10, 23])
@pytest.mark.parametrize("equalize", [None, "pad", "drop"])
@pytest.mark.parametrize("env", [
    dict(RANK="3", WORLD_SIZE="4", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2", GROUP_RANK="1"),
    dict(RANK="0", WORLD_SIZE="3", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1"),  # 3 nodes: blocks 3, 3, 4
    dict(RANK="2", WORLD_SIZE="3", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1"),
], ids=["rank3of4-2nodes", "rank0of3-3nodes", "rank2of3-3nodes"])
def test_node_shuffle_resumes_exactly_at_every_step(monkeypatch, env, equalize, n):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert_resumes_at_every_step(lambda: readers.node_shuffle(readers.from_sequence(range(n)), seed=5,
                                                              equalize=equalize))
    assert_resumes_at_every_step(
        lambda: batching.batch(readers.node_shuffle(readers.from_arrays(np.arange(n)), seed=5, equalize=equalize), 2))


# -- what cannot be resumed, and bad states ----------------------------------------------


def _unordered():
    return readers.xmap_readers(upper, words(), 2, 2)


def _merged():
    return readers.multiprocess_reader([words(), words()])


@pytest.mark.parametrize("make, reason", [
    (_unordered, r"xmap_readers\(order=False\).*give order=True"),
    (_merged, r"multiprocess_reader merges its readers"),
    (lambda: batching.batch(_unordered(), 2), r"xmap_readers\(order=False\)"),
])
def test_unordered_stages_refuse_to_save_or_restore(make, reason):
    r = make()
    it = r()
    try:
        next(it)
        with pytest.raises(ValueError, match="cannot save or restore a position.*" + reason):
            it.get_state()
    finally:
        it.close()
    with pytest.raises(ValueError, match="cannot save or restore a position.*" + reason):
        r.set_state({"pass": 0, "cursor": 1, "seed": None})


def _state_of_shuffle():
    it = readers.shuffle(words(), seed=3)()
    next(it)
    return it.get_state()


@pytest.mark.parametrize("state, error, message", [
    ([0, 1, 3], TypeError, r"must be the dict get_state\(\) returned, got list"),
    ('{"pass": 0}', TypeError, r"must be the dict get_state\(\) returned, got str"),
    ({"cursor": 1, "seed": 3}, ValueError, r"has keys \['cursor', 'seed'\]; expected \['pass', 'cursor', 'seed'\]"),
    ({"pass": 0, "seed": 3}, ValueError, r"has keys \['pass', 'seed'\]"),
    ({"pass": 0, "cursor": 1, "seed": 3, "epoch": 2}, ValueError, r"has keys \['cursor', 'epoch', 'pass', 'seed'\]"),
    ({"pass": 0, "cursor": 1, "seed": 4}, ValueError, r"saved with seed 4, but this pipeline's seed is 3"),
    ({"pass": 0, "cursor": 1}, ValueError, r"has keys \['cursor', 'pass'\]; expected \['pass', 'cursor', 'seed'\]"),
    ({"pass": 0, "cursor": -1, "seed": 3}, ValueError, r"'cursor' must be an int >= 0, got -1"),
    ({"pass": -2, "cursor": 0, "seed": 3}, ValueError, r"'pass' must be an int >= 0, got -2"),
    ({"pass": 0, "cursor": 1.5, "seed": 3}, ValueError, r"'cursor' must be an int >= 0, got 1.5"),
    ({"pass": True, "cursor": 1, "seed": 3}, ValueError, r"'pass' must be an int >= 0, got True"),
])
def test_set_state_rejects_bad_states_clearly(state, error, message):
    r = readers.shuffle(words(), seed=3)
    with pytest.raises(error, match=message):
        r.set_state(state)
    # a rejected state changes nothing
    assert list(r()) == list(readers.shuffle(words(), seed=3)())


def test_set_state_rejects_a_state_of_a_pipeline_with_other_seeds():
    it = readers.shuffle(readers.shuffle(words(), seed=1), 3, seed=2)()
    next(it)
    state = it.get_state()
    assert state["seed"] == [2, 1]
    with pytest.raises(ValueError, match=r"saved with seed \[2, 1\], but this pipeline's seed is \[2, 5\]"):
        readers.shuffle(readers.shuffle(words(), seed=5), 3, seed=2).set_state(state)


def test_state_is_small_and_plain():
    state = _state_of_shuffle()
    assert state == {"pass": 0, "cursor": 1, "seed": 3}
    assert json.loads(json.dumps(state)) == state


def test_set_state_applies_to_the_next_call_only():
    r = readers.shuffle(words(), seed=3)
    passes = [list(r()) for _ in range(3)]
    r2 = readers.shuffle(words(), seed=3)
    r2.set_state({"pass": 1, "cursor": 4, "seed": 3})
    assert list(r2()) == passes[1][4:]
    assert list(r2()) == passes[2]
    r2.set_pass(0)  # set_pass forgets a pending state
    r2.set_state({"pass": 2, "cursor": 1, "seed": 3})
    r2.set_pass(1)
    assert list(r2()) == passes[1]


def test_state_cursor_at_the_end_gives_an_empty_rest_of_pass():
    r = readers.shuffle(words(), seed=3)
    r.set_state({"pass": 0, "cursor": len(r), "seed": 3})
    assert list(r()) == []
    again = readers.shuffle(words(), seed=3)
    again.set_pass(1)
    assert list(r()) == list(again())


def test_state_cursor_past_the_end_is_refused():
    """Review of issue 4: a state from other (longer) data resumed silently as an empty pass."""
    r = readers.shuffle(words(), seed=3)
    with pytest.raises(ValueError, match=r"reader state is at entry 50 of a pass, past the end of .* 11 entries"):
        r.set_state({"pass": 0, "cursor": 50, "seed": 3})


def test_plain_function_state_via_stage_above_counts_entries():
    r = readers.map_readers(upper, stream)
    it = r()
    [next(it) for _ in range(4)]
    assert it.get_state() == {"pass": 0, "cursor": 4, "seed": None}


def test_a_cursor_past_a_batch_of_one_is_refused_as_past_the_end():
    with pytest.raises(ValueError, match="past the end"):
        batching.batch(readers.from_sequence(range(3)), 1).set_state({"pass": 0, "cursor": 10, "seed": None})


def test_a_plain_reader_whose_len_refuses_still_says_where_it_is():
    class Lines:
        def __call__(self):
            return iter(range(6))

        def __len__(self):
            raise NotImplementedError

    it = batching.batch(Lines(), 2)()
    next(it)
    assert it.get_state() == {"pass": 0, "cursor": 2, "seed": None}


@pytest.mark.parametrize("layout, item", [
    ([[1]], r"item 0 of \[\[1\]\] is \[1\]"),  # regression: "not enough values to unpack"
    ([[1, 3], [0, 2, 5]], r"item 1 of .* is \[0, 2, 5\]"),
    ([3], r"item 0 of \[3\] is 3"),
    ([["1", 3]], r"item 0 of .* is \['1', 3\]"),
    ([[1.0, 3]], r"item 0 of .* is \[1.0, 3\]"),
    ([[3, 3]], r"item 0 of .* is \[3, 3\]"),
    ([[0, 0]], r"item 0 of .* is \[0, 0\]"),
    ([[True, 3]], r"item 0 of .* is \[True, 3\]"),
    ("1,3", r"got str '1,3'"),
])
def test_set_state_rejects_a_malformed_layout_naming_the_item_and_the_form(layout, item):
    r = readers.shuffle(readers.shard(readers.from_sequence(range(20)), 1, 3), 3, seed=2)
    state = {"pass": 0, "cursor": 2, "seed": 2, "layout": layout}
    with pytest.raises(ValueError, match=r"'layout' must be a list of \[index, count\] pairs.*" + item):
        r.set_state(state)
    assert list(r()) == list(readers.shuffle(readers.shard(readers.from_sequence(range(20)), 1, 3), 3, seed=2)())


def test_set_state_takes_a_layout_back_from_json_as_lists():
    def make():
        return readers.shuffle(readers.shard(readers.from_sequence(range(20)), 1, 3), 3, seed=2)

    it = make()()
    head = [next(it), next(it)]
    state = json.loads(json.dumps(it.get_state()))
    state["layout"] = [tuple(pair) for pair in state["layout"]]  # as another serialiser may give it
    r = make()
    r.set_state(state)
    assert head + list(r()) == list(make()())
