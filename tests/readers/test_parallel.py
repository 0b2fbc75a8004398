"""readers.parallel: the decorators prefetch, buffered, xmap_readers and multiprocess_reader.

What they promise as decorators: the entries and order they give, their
options, reprs and pickling, the worker context each worker reads in, and
saving and resuming positions. How the pool merges, runs and stops its
workers is tested beside its modules (test_pool_*.py, test_shm.py).
"""
from __future__ import annotations

import functools
import itertools
import json
import multiprocessing
import operator
import pickle
import time

import pytest
import toolz

import readers
from readers import (
    from_sequence,
    map_readers,
    multiprocess_reader,
    prefetch,
    shard,
    xmap_readers,
)
from readers.launch import worker_context
from readers.parallel import buffered
from readers.testing import assert_resumes_at_every_step, assert_same
from tests.conftest import worker_threads
from tests.readers import worker_jobs as jobs
from tests.readers.pool_helpers import (
    METHODS,
    MODES,
    count_to,
    options,
    shuffled,
    source,
)

# -- buffered -----------------------------------------------------------------------------


@pytest.mark.parametrize("size", range(20))
def test_buffered_keeps_order(size):
    # Paddle's test_buffered: every size, including 0 (unbounded), keeps the order.
    r = buffered(count_to(10), size)
    assert list(r()) == list(range(10))


def test_buffered_passes_odd_entries_unharmed(no_leaks):
    assert_same(list(buffered(from_sequence(jobs.odd_entries()), 2)()), jobs.odd_entries())


def test_buffered_is_lazy(no_leaks):
    pulled: list = []
    r = buffered(count_to(5, pulled), 2)
    it = r()
    time.sleep(0.05)  # room for a thread that was started too early to read
    assert pulled == [] and worker_threads() == []
    assert next(it) == 0
    it.close()


def test_buffered_recall_is_independent_pass(no_leaks):
    r = buffered(from_sequence(range(5)), 1)
    a, b = r(), r()
    assert [next(a), next(a), next(b)] == [0, 1, 0]
    assert list(a) == [2, 3, 4] and list(b) == [1, 2, 3, 4]
    assert list(r()) == list(range(5))


def test_buffered_validates_eagerly():
    with pytest.raises(TypeError, match="zero-argument callable"):
        buffered([1, 2], 2)
    with pytest.raises(TypeError, match="size must be an int"):
        buffered(count_to(2), 2.5)


def test_buffered_repr_and_pickle():
    r = buffered(from_sequence([1, 2]), 0)
    assert repr(r) == "buffered(unbounded)\n└─ from_sequence(list of 2)"
    assert list(pickle.loads(pickle.dumps(r))()) == [1, 2]


def test_buffered_curried_in_pipe():
    r = toolz.pipe(from_sequence(range(4)), readers.buffered(size=2))
    assert list(r()) == [0, 1, 2, 3]


# -- xmap_readers ---------------------------------------------------------------------------


@pytest.mark.parametrize("order", [True, False])
@pytest.mark.parametrize("process_num", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("buffer_size", [1, 2, 4, 8, 16])
def test_xmap_readers_paddle_grid(order, process_num, buffer_size):
    # Paddle's test_xmap: all-positional call, the same reader iterated three times.
    r = xmap_readers(jobs.plus_one, count_to(10), process_num, buffer_size, order)
    for _ in range(3):
        result = list(r())
        if not order:
            result.sort()
        assert result == [i + 1 for i in range(10)]


@pytest.mark.parametrize("order", [True, False])
def test_xmap_readers_lambda_mapper_uneven_work(order, no_leaks):
    r = xmap_readers(lambda x: jobs.slow_plus_one(x), count_to(40), 4, 10, order)
    for _ in range(3):
        result = list(r())
        assert (result if order else sorted(result)) == list(range(1, 41))


@pytest.mark.parametrize("order", [True, False])
def test_xmap_readers_passes_odd_entries_unharmed(order, no_leaks):
    got = list(xmap_readers(lambda e: e, from_sequence(list(enumerate(jobs.odd_entries()))), 3, 4, order)())
    if order:
        assert [k for k, _ in got] == list(range(len(jobs.odd_entries())))
    assert_same([e for _, e in sorted(got, key=lambda pair: pair[0])], jobs.odd_entries())


def test_xmap_readers_is_lazy_and_recallable(no_leaks):
    pulled: list = []
    r = xmap_readers(jobs.plus_one, count_to(6, pulled), 2, 2, True)
    it = r()
    assert pulled == [] and worker_threads() == []
    other = r()
    assert next(it) == 1 and next(other) == 1
    assert list(it) == [2, 3, 4, 5, 6] and list(other) == [2, 3, 4, 5, 6]


@pytest.mark.parametrize(
    "args, error, match",
    [
        ((jobs.plus_one, [1], 2, 2), TypeError, "zero-argument callable"),
        ((None, count_to(2), 2, 2), TypeError, "mapper must be callable"),
        ((jobs.plus_one, count_to(2), 0, 2), ValueError, "process_num must be at least 1"),
        ((jobs.plus_one, count_to(2), 2, 0), ValueError, "buffer_size must be at least 1"),
        ((jobs.plus_one, count_to(2), "4", 2), TypeError, "process_num must be an int"),
    ],
)
def test_xmap_readers_validates_eagerly(args, error, match):
    with pytest.raises(error, match=match):
        xmap_readers(*args)


def test_xmap_readers_repr_and_pickle():
    r = xmap_readers(operator.neg, from_sequence(range(3)), 2, 4, order=True)
    assert repr(r) == (
        "xmap_readers(neg, process_num=2, buffer_size=4, order=True)\n"
        "└─ from_sequence(range of 3)"
    )
    assert list(pickle.loads(pickle.dumps(r))()) == [0, -1, -2]


def test_xmap_readers_curried_in_pipe():
    r = toolz.pipe(from_sequence(range(4)),
                   readers.xmap_readers(jobs.plus_one, process_num=2, buffer_size=2, order=True))
    assert list(r()) == [1, 2, 3, 4]


@pytest.mark.parametrize("kind", ["indexed", "stream"])
def test_xmap_readers_process_mode_ordered_equals_serial_map(kind, no_leaks):
    want = [jobs.busy_sum(x) for x in range(30)]
    r = xmap_readers(jobs.busy_sum, source(kind, 30), 3, 6, True, mode="process", start_method="fork")
    assert list(r()) == want and list(r()) == want
    unordered = xmap_readers(jobs.busy_sum, source(kind, 30), 3, 6, False, mode="process", start_method="fork")
    assert sorted(unordered()) == sorted(want)
    tagged = xmap_readers(jobs.tag_worker, source(kind, 9), 3, 6, True, mode="process", start_method="fork")
    assert list(tagged()) == [(i, i % 3, 3) for i in range(9)]


def test_xmap_readers_cpu_heavy_mapper_runs_under_spawn(no_leaks):
    r = xmap_readers(jobs.busy_sum, functools.partial(jobs.count, 24), 2, 4, True, mode="process",
                     start_method="spawn")
    assert list(r()) == [jobs.busy_sum(x) for x in range(24)]
    assert r.stats()["mode"] == "process" and r.stats()["entries"] == 24


# -- multiprocess_reader ------------------------------------------------------------------


def _paddle_samples():
    return [[[i], [i + 1, i + 2], i + 3] for i in range(1000)]


@pytest.mark.parametrize("use_pipe", [True, False])
def test_multiprocess_reader_paddle_call(use_pipe, no_leaks):
    # Paddle's test calls multiprocess_reader([r0, r1, r2], 100, use_pipe): use_pipe=100.
    samples = _paddle_samples()
    parts = [from_sequence(samples[k::3]) for k in range(3)]
    r = multiprocess_reader(parts, 100, use_pipe)
    assert sorted(r()) == sorted(samples)


@pytest.mark.parametrize("queue_size", [0, 1, 1000])
def test_multiprocess_reader_shared_queue_gives_all(queue_size, no_leaks):
    samples = _paddle_samples()
    parts = [from_sequence(samples[k::3]) for k in range(3)]
    r = multiprocess_reader(parts, use_pipe=False, queue_size=queue_size)
    assert sorted(r()) == sorted(samples)
    assert sorted(r()) == sorted(samples)


@pytest.mark.parametrize("use_pipe", [True, False])
def test_multiprocess_reader_keeps_each_readers_order(use_pipe, no_leaks):
    r = multiprocess_reader([count_to(200), from_sequence(range(1000, 1200))], use_pipe,
                            start_method="fork")
    got = list(r())
    assert [x for x in got if x < 1000] == list(range(200))
    assert [x for x in got if x >= 1000] == list(range(1000, 1200))


@pytest.mark.parametrize("start_method", METHODS)
def test_multiprocess_reader_runs_reader_i_as_worker_i(start_method, no_leaks):
    parts = [map_readers(jobs.tag_worker, from_sequence(range(10 * k, 10 * k + 10))) for k in range(2)]
    got = list(multiprocess_reader(parts, start_method=start_method)())
    for k in range(2):
        assert [e for e in got if e[1] == k] == [(x, k, 2) for x in range(10 * k, 10 * k + 10)]
    assert len(got) == 20


def test_multiprocess_reader_workers_take_their_own_shard(no_leaks):
    """Review of issue 4: each process of multiprocess_reader is local worker i of n, so shard() splits
    them without extra code."""
    r = readers.shard(readers.from_sequence(range(10)))
    assert sorted(readers.multiprocess_reader([r, r])()) == list(range(10))


def test_multiprocess_reader_is_lazy_and_recallable(no_leaks):
    r = multiprocess_reader([from_sequence(range(3)), from_sequence(range(3, 6))])
    it = r()
    assert multiprocessing.active_children() == []
    assert sorted(r()) == list(range(6))
    assert sorted(it) == list(range(6))


@pytest.mark.parametrize("start_method", METHODS)
def test_multiprocess_reader_passes_differ_and_replay_with_set_pass(start_method, no_leaks):
    """Regression from the review of issue 2."""
    r = multiprocess_reader([readers.shuffle(from_sequence(list(range(20))), seed=0)], start_method=start_method)
    first, second = list(r()), list(r())
    assert sorted(first) == sorted(second) == list(range(20)) and first != second
    r.set_pass(1)
    assert list(r()) == second


@pytest.mark.parametrize(
    "args, kwargs, error, match",
    [
        ((count_to(2),), {}, TypeError, "needs a list of readers"),
        (([],), {}, ValueError, "at least one reader"),
        (([count_to(2), [3]],), {}, TypeError, r"readers\[1\] must be a zero-argument"),
        (([count_to(2)],), {"start_method": "bogus"}, ValueError, "start_method must be one of"),
        (([count_to(2)], True, "big"), {}, TypeError, "queue_size must be an int"),
    ],
)
def test_multiprocess_reader_validates_eagerly(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        multiprocess_reader(*args, **kwargs)


def test_multiprocess_reader_repr_and_pickle():
    r = multiprocess_reader([from_sequence("ab")], use_pipe=False, queue_size=8,
                            start_method="spawn")
    assert repr(r) == (
        "multiprocess_reader(1 reader, use_pipe=False, queue_size=8, start_method='spawn')\n"
        "└─ from_sequence(str of 2)"
    )
    assert repr(pickle.loads(pickle.dumps(r))) == repr(r)


# -- prefetch: options ----------------------------------------------------------------------


@pytest.mark.parametrize("options, match", [
    ({"workers": 0}, "workers must be at least 1"),
    ({"buffer_size": 0}, "buffer_size must be at least 1"),
    ({"mode": "processes"}, "mode must be 'thread' or 'process', got 'processes'"),
    ({"start_method": "bogus"}, "start_method must be one of"),
    ({"restarts": 1}, "restarts=1 needs mode='process'"),
    ({"mode": "process", "restarts": -1}, "restarts must be at least 0"),
])
def test_prefetch_validates_options_eagerly(options, match):
    with pytest.raises(ValueError, match=match):
        prefetch(source("indexed", 3), **options)


def test_prefetch_repr_names_its_workers_and_options():
    assert prefetch(source("indexed", 3), 3, mode="process", buffer_size=4, ordered=False, restarts=2).title() == (
        "prefetch(3 processes, buffer_size=4, ordered=False, restarts=2)")
    assert prefetch(source("indexed", 3)).title() == "prefetch(1 thread)"


# -- prefetch: worker context ---------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["indexed", "stream"])
@pytest.mark.parametrize("workers", [1, 3])
def test_prefetch_workers_see_their_worker_context(mode, kind, workers, no_leaks):
    r = prefetch(map_readers(jobs.tag_worker, source(kind, 10)), workers, **options(mode))
    assert list(r()) == [(i, i % workers, workers) for i in range(10)]
    assert readers.worker_info().workers_per_process == 1  # the consumer's own context is untouched


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["indexed", "stream"])
def test_prefetch_with_worker_shard_reads_each_entry_once(mode, kind, no_leaks):
    # The shard follows the workers, so prefetch does not split: each worker keeps its global share.
    r = prefetch(shard(map_readers(jobs.tag_worker, source(kind, 20))), 3, **options(mode))
    got = list(r())
    assert [x for x, _, _ in got] == list(range(20))
    assert [(w, n) for _, w, n in got] == [(x % 3, 3) for x in range(20)]


@pytest.mark.parametrize("mode", MODES)
def test_prefetch_nested_in_a_worker_with_shard_gives_that_workers_share(mode, no_leaks):
    # Consumer: local worker 1 of 2. Its prefetch workers w are 1 + 2w of 4, so the shard they run
    # keeps 1, 5, 9, ... and 3, 7, 11, ...; merged round-robin that is exactly the consumer's share.
    with readers.worker_context(1, 2):
        got = list(prefetch(shard(map_readers(jobs.tag_worker, source("indexed", 20))), 2, **options(mode))())
    assert [x for x, _, _ in got] == list(range(1, 20, 2))
    assert [(w, n) for _, w, n in got] == [(1 + 2 * (k % 2), 4) for k in range(10)]


@pytest.mark.parametrize("mode", MODES)
def test_prefetch_nested_in_a_worker_without_shard_splits_the_whole_pass(mode, no_leaks):
    with readers.worker_context(1, 2):
        got = list(prefetch(map_readers(jobs.tag_worker, source("stream", 9)), 2, **options(mode))())
    assert got == [(i, 1 + 2 * (i % 2), 4) for i in range(9)]


@pytest.mark.parametrize("outer, inner", [("thread", "thread"), ("process", "thread"), ("process", "process")])
@pytest.mark.parametrize("kind", ["indexed", "stream"])
def test_prefetch_inside_prefetch_workers_gets_global_worker_ids(outer, inner, kind, no_leaks):
    # outer worker w of 2 runs an inner prefetch whose worker v is w + 2v of 4: entry i comes from i % 4
    r = prefetch(prefetch(map_readers(jobs.tag_worker, source(kind, 12)), 2, **options(inner)), 2,
                 **options(outer))
    assert list(r()) == [(i, i % 4, 4) for i in range(12)]


@pytest.mark.parametrize("make", [lambda r: readers.buffered(r, 2),
                                  lambda r: readers.xmap_readers(abs, r, 2, 4, order=True)])
def test_helper_threads_keep_the_consumers_worker(make, no_leaks):
    """Review of issue 4: buffered/xmap threads read the source for the worker that consumes them
    (the context was lost)."""
    with worker_context(1, 2):
        assert list(make(readers.shard(readers.from_sequence(range(6))))()) == [1, 3, 5]


# -- prefetch: resume -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["indexed", "stream"])
def test_prefetch_resumes_at_every_step(mode, kind, no_leaks):
    states = assert_resumes_at_every_step(lambda: prefetch(shuffled(kind, 9), 2, **options(mode)),
                                          max_steps=12 if mode == "thread" else 5)
    assert states[-1]["pass"] == 1 and states[-1]["cursor"] == 0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("k", [0, 1, 5, 12])
def test_prefetch_state_after_k_entries_resumes_on_a_fresh_reader(mode, k, no_leaks):
    def make():
        return prefetch(shuffled("indexed", 12), 3, **options(mode))

    serial = shuffled("indexed", 12)
    pass0, pass1 = list(serial()), list(serial())
    it = make()()
    assert list(itertools.islice(it, k)) == pass0[:k]
    state = json.loads(json.dumps(it.get_state()))
    it.close()
    fresh = make()
    fresh.set_state(state)
    assert list(fresh()) == pass0[k:]
    assert list(fresh()) == pass1


@pytest.mark.parametrize("make, match", [
    (lambda: prefetch(source("indexed", 5), 2, ordered=False), "give ordered=True"),
    (lambda: prefetch(shard(source("indexed", 5)), 2), "drop that shard"),
])
def test_prefetch_refuses_to_save_a_position_it_cannot_restore(make, match, no_leaks):
    it = make()()
    next(it)
    try:
        with pytest.raises(ValueError, match=match):
            it.get_state()
    finally:
        it.close()

