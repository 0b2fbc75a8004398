"""readers.workers.prefetch: the decorators prefetch and buffered.

What they promise as decorators: the entries and order they give, their
options, reprs and pickling, the worker context each worker reads in, and
saving and resuming positions. How the pool merges, runs and stops its
workers is tested beside its modules (test_consumer.py, test_worker.py, test_channels.py, test_shared_memory.py).
"""
from __future__ import annotations

import itertools
import json
import pickle

import pytest
import toolz

import readers
from readers import (
    from_sequence,
    map_readers,
    prefetch,
    shard,
)
from readers.launch import worker_context
from readers.testing import assert_resumes_at_every_step, assert_same
from readers.workers.prefetch import buffered
from tests.conftest import worker_threads
from tests.helpers import worker_jobs as jobs
from tests.helpers.pool_helpers import (
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
    assert pulled == [] and worker_threads() == []  # no thread yet: none started, and none ran and ended
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
    got = list(r())
    if workers > 1 and r._deals():  # dealt blocks (issue 32): entry i from whichever worker was free
        assert [x for x, _, _ in got] == list(range(10))
        assert {(w, n) for _, w, n in got} == {(w, workers) for w in range(workers)}
    else:
        assert got == [(i, i % workers, workers) for i in range(10)]
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

