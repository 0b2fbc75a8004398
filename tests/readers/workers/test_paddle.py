"""readers.workers.paddle: Paddle's xmap_readers and multiprocess_reader, on prefetch's pool.

What they promise as decorators: the entries and order they give, their
options, reprs and pickling, and Paddle's own calls.
"""
from __future__ import annotations

import functools
import multiprocessing
import operator
import pickle

import pytest
import toolz

import readers
from readers import (
    from_sequence,
    map_readers,
    multiprocess_reader,
    xmap_readers,
)
from readers.testing import assert_same
from tests.conftest import worker_threads
from tests.helpers import worker_jobs as jobs
from tests.helpers.pool_helpers import (
    METHODS,
    count_to,
    source,
)

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
    tagged = list(xmap_readers(jobs.tag_worker, source(kind, 9), 3, 6, True, mode="process", start_method="fork")())
    assert [x for x, _, _ in tagged] == list(range(9))
    if kind == "stream":  # fixed shares: worker w maps entries w, w + 3, ...
        assert tagged == [(i, i % 3, 3) for i in range(9)]
    else:  # dealt blocks (issue 32): whichever worker is free
        assert {(w, n) for _, w, n in tagged} <= {(0, 3), (1, 3), (2, 3)}


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
