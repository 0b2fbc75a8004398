"""readers.workers.consumer: the merge of a pool's workers, its statistics, restarts and WorkerDiedError."""
from __future__ import annotations

import collections
import functools
import multiprocessing
import os
import signal
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import readers
from readers import (
    from_sequence,
    map_readers,
    multiprocess_reader,
    prefetch,
    xmap_readers,
)
from readers.errors import ReaderkitError
from readers.testing import assert_same
from readers.workers.consumer import Pool, WorkerDiedError, merged_cursors
from tests.conftest import finishes
from tests.helpers import worker_jobs as jobs
from tests.helpers.pool_helpers import (
    METHODS,
    MODES,
    count_to,
    kill_a_worker,
    options,
    shuffled,
    source,
)

STATS_KEYS = {"mode", "workers", "entries", "seconds", "entries_per_s", "input_wait", "output_wait",
              "consumer_wait", "queue_fill", "shm_bytes", "restarts"}
FRACTIONS = ["input_wait", "output_wait", "consumer_wait", "queue_fill"]


def drain(it) -> None:
    collections.deque(it, maxlen=0)


# -- merge order ----------------------------------------------------------------------------


@pytest.mark.parametrize("ordered", [True, False])
def test_pool_ordered_merge_is_round_robin_and_a_worker_that_runs_out_leaves_the_round(ordered, no_leaks):
    parts = [from_sequence("abc"), from_sequence("x"), from_sequence("yz")]
    pool = Pool("test", parts, [None] * 3, processes=False, ordered=ordered, limit=None, labels=["a", "x", "y"])
    got = list(pool.run(0, [0, 0, 0]))
    if ordered:
        assert got == ["a", "x", "y", "b", "z", "c"]
    else:
        assert sorted(got) == sorted("abcxyz")
        assert [e for e in got if e in "abc"] == ["a", "b", "c"]  # each worker's own order is kept


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["indexed", "stream"])
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_prefetch_ordered_equals_serial_over_passes(mode, kind, workers, no_leaks):
    serial = shuffled(kind, 37)
    want = [list(serial()), list(serial())]
    assert want[0] != want[1]  # the shuffle orders each pass anew
    r = prefetch(shuffled(kind, 37), workers, **options(mode))
    assert [list(r()), list(r())] == want


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 50), workers=st.integers(1, 5), kind=st.sampled_from(["indexed", "stream"]),
       buffer_size=st.sampled_from([None, 1, 3]))
def test_prefetch_ordered_equals_serial_for_any_length(n, workers, kind, buffer_size):
    want = list(shuffled(kind, n)())
    r = prefetch(shuffled(kind, n), workers, buffer_size=buffer_size)
    assert list(r()) == want
    unordered = prefetch(shuffled(kind, n), workers, buffer_size=buffer_size, ordered=False)
    assert sorted(unordered()) == sorted(want)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["indexed", "stream"])
def test_prefetch_unordered_gives_the_same_multiset(mode, kind, no_leaks):
    src = map_readers(functools.partial(jobs.remainder, m=7), source(kind, 40))
    want = collections.Counter(i % 7 for i in range(40))  # repeats: a multiset, not a set
    r = prefetch(src, 3, ordered=False, **options(mode))
    assert collections.Counter(r()) == want and collections.Counter(r()) == want


def test_xmap_readers_ordered_raises_after_earlier_entries(no_leaks):
    got = []
    with pytest.raises(ZeroDivisionError):
        for x in xmap_readers(lambda x: 10 // (x - 5), count_to(10), 4, 8, True)():
            got.append(x)
    assert got == [10 // (x - 5) for x in range(5)]


# -- stats --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("workers", [1, 3])
def test_prefetch_stats_describe_the_latest_pass(mode, workers, no_leaks):
    r = prefetch(from_sequence(range(50)), workers, **options(mode))
    assert r.stats() is None
    assert len(list(r())) == 50
    s = r.stats()
    assert set(s) == STATS_KEYS
    assert (s["mode"], s["workers"], s["entries"], s["restarts"], s["shm_bytes"]) == (mode, workers, 50, 0, 0)
    assert s["seconds"] > 0 and s["entries_per_s"] > 0
    assert all(0 <= s[k] <= 1 for k in FRACTIONS), s
    shorter = prefetch(readers.firstn(from_sequence(range(50)), 20), workers, **options(mode))
    list(shorter())
    assert shorter.stats()["entries"] == 20


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ordered", [True, False])
def test_prefetch_stats_count_only_entries_handed_out(mode, ordered, no_leaks):
    r = prefetch(from_sequence(range(5000)), 2, ordered=ordered, **options(mode))
    it = r()
    try:
        # read between entries, the count is the entries handed out so far, whatever the messages were
        ahead = {r.stats()["entries"] - taken for taken, _ in enumerate(it, 1)}
    finally:
        it.close()
    assert ahead == {0}


# -- dealt blocks (issue 32) --------------------------------------------------------------------


@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("kind", ["sequence", "shuffled"])
def test_process_workers_deal_blocks_so_a_slow_worker_makes_fewer_entries(kind, persistent, no_leaks):
    # Issue 32: worker w made entries w, w + n, ... (a fixed share), so one slow worker (a busy core, a
    # core's other hyperthread) held every worker to its pace, where multiprocessing.Pool.imap deals chunks
    # to whichever worker is free. Now process workers of an index-addressed job are dealt blocks as they
    # finish: worker 0, 20 ms an entry, makes a few of the 200 entries, not its fixed 100.
    src = from_sequence(range(200)) if kind == "sequence" else shuffled("indexed", 200)
    with prefetch(map_readers(jobs.slow_in_worker_0, src), 2, mode="process", start_method="fork",
                  persistent=persistent) as r:
        for pass_id in range(2 if persistent else 1):
            got = list(r())
            assert [x for x, _ in got] == list(r.reader.parents[0].run(pass_id))
            made = collections.Counter(w for _, w in got)
            assert set(made) == {0, 1} and made[0] < 50, made


@pytest.mark.parametrize("buffer_size", [None, 1, 2, 64])
def test_dealt_blocks_give_the_order_of_the_reader_from_any_position(buffer_size, no_leaks):
    src = shuffled("indexed", 500)
    want = [x + 1 for x in src.run(1)]
    r = prefetch(map_readers(jobs.plus_one, src), 3, mode="process", start_method="fork", buffer_size=buffer_size)
    assert r._deals()
    for cursor in (0, 1, 7, 250, 499, 500):
        assert list(r.run(1, cursor)) == want[cursor:]
    unordered = prefetch(map_readers(jobs.plus_one, src), 3, mode="process", start_method="fork", ordered=False)
    assert sorted(unordered()) == sorted(x + 1 for x in src.run(0))


# -- workers that die -------------------------------------------------------------------------


@pytest.mark.parametrize("start_method", METHODS)
def test_prefetch_sigkilled_worker_raises_worker_died_error(start_method, no_leaks):
    # entries (i, pid of the worker that mapped i): entry 1 comes from worker 1, which then waits
    # for credit (buffer_size=2), in the middle of its share
    r = prefetch(map_readers(jobs.tag_pid, from_sequence(range(400))), 2, mode="process",
                 start_method=start_method, buffer_size=2)
    it = r()
    first = [next(it) for _ in range(4)]
    assert [x for x, _ in first] == [0, 1, 2, 3]
    victim = first[1][1]
    assert victim in {p.pid for p in multiprocessing.active_children()}
    os.kill(victim, signal.SIGKILL)
    with pytest.raises(WorkerDiedError, match=r"prefetch worker 1 \(.*\).* SIGKILL.*check its memory use"):
        finishes(lambda: drain(it), "the pass after a worker was SIGKILLed")


@pytest.mark.parametrize("use_pipe", [True, False])
def test_multiprocess_reader_sigkilled_worker_raises(use_pipe, no_leaks):
    def sleeper():
        yield os.getpid()
        time.sleep(60)

    r = multiprocess_reader([sleeper, count_to(5)], use_pipe, start_method="fork")
    it = r()
    pid = next(x for x in it if x >= 5)  # the others are small ints
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(WorkerDiedError, match=r"worker 0 \(.*sleeper\) was killed by SIGKILL"):
        finishes(lambda: drain(it), "the pass after its sleeping worker was SIGKILLed")


@pytest.mark.parametrize("start_method", METHODS)
@pytest.mark.parametrize("kind", ["indexed", "stream", "arrays"])
def test_prefetch_restarted_worker_gives_exactly_the_serial_output(kind, start_method, no_leaks):
    src = functools.partial(jobs.arrays, 60, 1024) if kind == "arrays" else source(kind, 60)
    want = list(src())
    # buffer_size=2 keeps each worker waiting for credit in the middle of its share, so a kill lands mid-pass
    r = prefetch(src, 2, mode="process", start_method=start_method, buffer_size=2, restarts=2)
    it = r()
    got = [next(it) for _ in range(10)]
    kill_a_worker()
    with pytest.warns(RuntimeWarning, match=r"prefetch worker \d .*SIGKILL.*restarted"):
        got += list(it)
    assert_same(got, want)  # arrays received before the kill are intact, too
    assert r.stats()["restarts"] == 1 and r.stats()["entries"] == 60


def test_prefetch_unordered_restart_loses_and_doubles_nothing(no_leaks):
    r = prefetch(source("indexed", 100), 2, mode="process", start_method="fork", buffer_size=2, ordered=False,
                 restarts=1)
    it = r()
    got = [next(it) for _ in range(10)]
    kill_a_worker()
    with pytest.warns(RuntimeWarning, match="restarted"):
        got += list(it)
    assert sorted(got) == list(range(100))


def test_prefetch_raises_once_restarts_run_out(no_leaks):
    r = prefetch(source("indexed", 400), 2, mode="process", start_method="fork", buffer_size=2, restarts=1)
    it = r()
    got = [next(it) for _ in range(4)]
    kill_a_worker()
    with pytest.warns(RuntimeWarning, match="restart 1 of 1"):
        got += [next(it) for _ in range(10)]
    kill_a_worker()
    with pytest.raises(WorkerDiedError, match="SIGKILL.*restarted 1 times already"):
        got += list(it)
    assert got == list(range(len(got)))  # nothing lost or doubled before the error


@pytest.mark.parametrize("name", ["xmap_readers", "multiprocess_reader"])
def test_process_workers_restart_for_xmap_and_multiprocess_reader(name, no_leaks):
    if name == "xmap_readers":
        r = xmap_readers(jobs.busy_sum, source("indexed", 100), 2, 4, True, mode="process",
                         start_method="fork", restarts=1)
        want = [jobs.busy_sum(x) for x in range(100)]
    else:
        parts = [source("indexed", 100), from_sequence(range(1000, 1100))]
        r = multiprocess_reader(parts, queue_size=4, start_method="fork", restarts=1)
        want = list(range(100)) + list(range(1000, 1100))
    it = r()
    got = [next(it) for _ in range(10)]
    kill_a_worker()
    with pytest.warns(RuntimeWarning, match=f"{name} worker \\d .*SIGKILL.*restarted"):
        got += list(it)
    assert (got if name == "xmap_readers" else sorted(got)) == want



def _round_robin(lengths):
    """The ordered merge of streams of these lengths, as (worker, its entry number), written out."""
    out, rounds = [], max(lengths, default=0)
    for t in range(rounds):
        out += [(w, t) for w, k in enumerate(lengths) if t < k]
    return out


@given(st.lists(st.integers(0, 9), min_size=1, max_size=5), st.data())
@settings(max_examples=200, deadline=None)
def test_merged_cursors_inverts_the_round_robin_merge(lengths, data):
    merged = _round_robin(lengths)
    cursor = data.draw(st.integers(0, len(merged)))
    asked = []

    def count(w, limit):
        asked.append(limit)
        return min(lengths[w], limit)
    cursors, first = merged_cursors(cursor, len(lengths), count)
    assert cursors == [sum(1 for w2, _ in merged[:cursor] if w2 == w) for w in range(len(lengths))]
    if cursor < len(merged):
        assert first == merged[cursor][0]  # the merge goes on with the worker of the next entry
    assert max(asked) <= cursor + 1  # no stream is counted past what the merge could have taken


def test_merged_cursors_past_the_end_is_an_error():
    with pytest.raises(ReaderkitError, match="position 7 is past the end of the pass \\(6 entries\\)"):
        merged_cursors(7, 2, lambda w, limit: min(3, limit))
