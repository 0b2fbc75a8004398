"""readers.workers.persistent: prefetch(..., persistent=True) and xmap_readers' keep their worker processes.

Each pass must be exactly a fresh start's (pass ids and seeds reach the kept
workers), run on the same processes; a pass abandoned midway, a failing pass,
a dead or stuck worker, two passes at once, and every way a reader ends
(close, ``with``, garbage collection, interpreter exit, the parent killed)
must leave nothing behind.
"""
from __future__ import annotations

import functools
import gc
import itertools
import json
import multiprocessing
import multiprocessing.util
import os
import signal
import textwrap
import warnings

import numpy as np
import pytest

import readers
from readers import (
    WorkerDiedError,
    from_sequence,
    map_readers,
    prefetch,
    shard,
    shuffle,
    xmap_readers,
)
from readers.launch import worker_context
from readers.testing import assert_resumes_at_every_step
from readers.workers.persistent import Keeper
from tests.conftest import HANG, finishes, wait_until
from tests.helpers import worker_jobs as jobs
from tests.helpers.child_processes import python_child, read_line
from tests.helpers.paths import ROOT
from tests.helpers.pool_helpers import METHODS
from tests.helpers.processes import gone, open_descriptors


def tagged(method: str, workers: int = 2, n: int = 300, **options):
    """(entry, pid of the worker that mapped it) over a seeded global shuffle: each pass has its own order."""
    src = shuffle(from_sequence(list(range(n))), seed=3)
    return prefetch(map_readers(jobs.tag_pid, src), workers, mode="process", start_method=method, **options)


def values(entries) -> list:
    return [x for x, _ in entries]


def pids(entries) -> set:
    return {p for _, p in entries}


def children() -> set:
    return {p.pid for p in multiprocessing.active_children()}


@pytest.mark.parametrize("method", METHODS)
def test_every_pass_is_a_fresh_starts_pass_on_the_same_workers(method, no_leaks):
    fresh = tagged(method)
    with tagged(method, persistent=True) as kept:
        passes = [list(kept()) for _ in range(3)]
        assert [values(p) for p in passes] == [values(fresh()) for _ in range(3)]
        assert values(passes[0]) != values(passes[1])  # the seeds of each pass reached the workers
        assert len(pids(passes[0])) == 2 and pids(passes[0]) == pids(passes[1]) == pids(passes[2])
        assert pids(passes[0]) <= children()  # kept alive between passes
    wait_until(lambda: all(map(gone, pids(passes[0]))), HANG, "the kept workers to end after the with block")


def test_set_pass_and_a_saved_state_resume_on_kept_workers(no_leaks):
    serial = shuffle(from_sequence(list(range(40))), seed=3)
    pass0, pass1, pass2 = list(serial()), list(serial()), list(serial())
    with prefetch(shuffle(from_sequence(list(range(40))), seed=3), 3, mode="process", start_method="fork",
                  persistent=True) as r:
        it = r()
        assert list(itertools.islice(it, 7)) == pass0[:7]
        state = json.loads(json.dumps(it.get_state()))
        it.close()
        assert list(r()) == pass1  # the abandoned pass was pass 0
        r.set_pass(2)
        assert list(r()) == pass2
        r.set_state(state)
        assert list(r()) == pass0[7:]
        assert list(r()) == pass1


def test_resumes_at_every_step(no_leaks):
    assert_resumes_at_every_step(lambda: prefetch(shuffle(from_sequence(list(range(9))), seed=1), 2, mode="process",
                                                  start_method="fork", persistent=True), max_steps=10)
    gc.collect()  # the readers it made go, and their workers with them


@pytest.mark.parametrize("method", METHODS)
def test_a_pass_abandoned_midway_is_cancelled_and_the_next_is_whole(method, no_leaks):
    big = tagged(method, n=200_000, buffer_size=64)
    with tagged(method, n=200_000, buffer_size=64, persistent=True) as r:
        first = list(itertools.islice(r(), 5))  # (the iterator is dropped: garbage collection ends the pass)
        whole = list(r())
        assert values(whole) == values(big.run(1))
        assert pids(first) <= pids(whole)  # drained and kept, not stopped


def first_entry_once_blocked(r, blocked) -> list:
    """The first entry of a pass of ``r``, which is abandoned once its worker has begun to block in its source
    (the file ``blocked`` appears)."""
    it = r()
    try:
        first = next(it)
        wait_until(blocked.exists, HANG, "the worker to block in its source after its first entry")
    finally:
        it.close()
    return [first]


def test_a_worker_stuck_in_its_source_is_stopped_and_replaced(tmp_path, no_leaks):
    # Regression (a flaky test): the pass was abandoned as soon as entry 0 came, and on a loaded machine the
    # cancel could reach the worker before it went back into its source; the worker then stopped the pass as
    # asked and was rightly kept, so {pid} != {pid} failed. Now the pass ends once the worker is stuck.
    blocked = tmp_path / "blocked"
    source = functools.partial(jobs.count_then_block, 1, blocked=str(blocked))
    with prefetch(map_readers(jobs.tag_pid, source), 1, mode="process", start_method="fork", persistent=True) as r:
        first = finishes(lambda: first_entry_once_blocked(r, blocked), "a pass abandoned while its worker blocks")
        blocked.unlink()
        second = finishes(lambda: first_entry_once_blocked(r, blocked), "the next pass, on a new worker")
        assert values(first) == values(second) == [0]
        assert pids(first) != pids(second)


def test_a_failing_pass_raises_and_the_workers_stay_for_the_next(no_leaks):
    with prefetch(map_readers(jobs.tag_pid, functools.partial(jobs.fails_at, 50, "row 50 is bad")), 1,
                  mode="process", start_method="fork", persistent=True) as r:
        got = []
        for _ in range(2):
            with pytest.raises(ValueError, match="row 50 is bad"):
                for entry in r():
                    got.append(entry)
        assert values(got) == list(range(50)) * 2 and len(pids(got)) == 1


def test_a_worker_killed_between_passes_is_started_again_unnoticed(no_leaks):
    with tagged("fork", persistent=True) as r:
        before = list(r())
        victim = min(pids(before))
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: gone(victim), HANG, "the killed worker to end")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            after = list(r())
        assert values(after) == values(tagged("fork").run(1))
        assert victim not in pids(after) and len(pids(after)) == 2


def test_a_worker_killed_midway_is_named_or_restarted_and_later_passes_run(no_leaks):
    def kill_midway(r):
        got = []
        for i, entry in enumerate(r()):
            got.append(entry)
            if i == 20:
                os.kill(entry[1], signal.SIGKILL)
        return got

    with tagged("fork", n=50_000, buffer_size=16, persistent=True) as r:
        with pytest.raises(WorkerDiedError, match="was killed by SIGKILL"):
            kill_midway(r)
        assert values(r()) == values(tagged("fork", n=50_000).run(1))
    with tagged("fork", n=50_000, buffer_size=16, persistent=True, restarts=1) as r:
        with pytest.warns(RuntimeWarning, match="restarted it at position"):
            assert values(kill_midway(r)) == values(tagged("fork", n=50_000).run(0))
        assert values(r()) == values(tagged("fork", n=50_000).run(1))


def test_two_passes_at_once_are_both_whole(no_leaks):
    fresh = tagged("fork")
    with tagged("fork", persistent=True) as r:
        a, b = r(), r()  # b starts while a holds the kept workers: it gets workers of its own
        got_a, got_b = [], []
        for x, y in zip(a, b):
            got_a.append(x)
            got_b.append(y)
        assert values(got_a) == values(fresh.run(0)) and values(got_b) == values(fresh.run(1))
        assert pids(r()) == pids(got_a) != pids(got_b)


def test_close_stops_the_workers_and_a_later_pass_starts_new_ones(no_leaks):
    r = tagged("fork", persistent=True)
    first = pids(r())
    r.close()
    assert not first & children()
    second = pids(r())
    assert second and not first & second
    r.close()
    r.close()  # twice: nothing more to do


def test_a_reader_garbage_collected_stops_its_workers(no_leaks):
    r = tagged("fork", persistent=True)
    kept = pids(r())
    del r
    gc.collect()
    wait_until(lambda: all(map(gone, kept)), HANG, "the workers of a collected reader to end")


def test_close_during_a_pass_lets_it_finish_then_stops_the_workers(no_leaks):
    r = tagged("fork", persistent=True)
    got = []
    for entry in r():
        got.append(entry)
        if len(got) == 10:
            r.close()
            assert pids(got) <= children()
    assert values(got) == values(tagged("fork").run(0))
    wait_until(lambda: all(map(gone, pids(got))), HANG, "the workers to end with the pass")


def test_kept_workers_started_from_a_thread_outlive_it(no_leaks):
    """Linux kills a PR_SET_PDEATHSIG child when the *thread* that started it ends; kept workers must not die so."""
    with tagged("fork", persistent=True) as r:
        first = finishes(lambda: list(r()), "a pass in a thread")
        second = list(r())
        assert pids(first) == pids(second)


def test_xmap_readers_keeps_its_workers_too(no_leaks):
    src = shuffle(from_sequence(list(range(200))), seed=5)
    with xmap_readers(jobs.tag_pid, src, 2, 8, order=True, mode="process", start_method="fork",
                      persistent=True) as r:
        passes = [list(r()) for _ in range(2)]
        assert values(passes[0]) == list(src.run(0)) and values(passes[1]) == list(src.run(1))
        assert pids(passes[0]) == pids(passes[1])
        assert repr(r).startswith("xmap_readers(tag_pid, process_num=2, buffer_size=8, order=True, mode='process', "
                                  "start_method='fork', persistent=True)")


def test_close_reaches_the_copies_a_shard_above_runs(no_leaks):
    inner = tagged("fork", persistent=True)
    r = shard(inner, index=0, count=2)
    kept = pids(r())
    assert kept <= children()
    inner.close()
    assert not kept & children()
    assert values(r()) == values(tagged("fork").run(1))[0::2]
    inner.close()


def test_a_thread_prefetch_above_keeps_the_kept_workers_below(no_leaks):
    """The outer workers' jobs are the same objects every pass, so the copies they split below are too."""
    inner = tagged("fork", persistent=True)
    outer = prefetch(inner, 2)
    first, second = list(outer()), list(outer())
    assert values(first) == values(tagged("fork").run(0)) and values(second) == values(tagged("fork").run(1))
    assert pids(first) == pids(second) and len(pids(first)) == 4
    inner.close()


def test_an_interrupt_in_the_middle_of_a_message_ends_the_pass_without_a_hang(monkeypatch, no_leaks):
    """Ctrl-C between a message's length and its body leaves the pipe mid-message: that worker is replaced."""
    import multiprocessing.connection as connection
    real = connection.Connection._recv
    armed = [True]

    def interrupted(self, size, *args):
        if armed[0] and size > 100_000:
            armed[0] = False
            raise KeyboardInterrupt
        return real(self, size, *args)

    monkeypatch.setattr(connection.Connection, "_recv", interrupted)
    with prefetch(map_readers(jobs.tag_pid, functools.partial(jobs.big_bytes, 50, 300_000)), 1, mode="process",
                  start_method="fork", persistent=True, buffer_size=4) as r:
        with pytest.raises(KeyboardInterrupt):
            finishes(lambda: sum(1 for _ in r()), "a pass interrupted mid-message")
        again = finishes(lambda: list(r()), "the next pass")
        assert [len(x) for x, _ in again] == [300_000] * 50


def test_the_parent_watch_thread_does_not_rule_out_fork():
    import threading

    from readers.workers.channels import pick_start_method
    from readers.workers.process import WATCH_THREAD
    if threading.active_count() > 1:
        pytest.skip("other threads run in this test process")
    stop = threading.Event()
    watch = threading.Thread(target=stop.wait, name=WATCH_THREAD, daemon=True)
    watch.start()
    try:
        assert pick_start_method(None) == "fork"
    finally:
        stop.set()
        watch.join()


def test_a_shard_above_keeps_the_copy_it_splits_below(no_leaks):
    """A shard splits the pass below a prefetch by running a copy of it; the copy must be the same each pass."""
    r = shard(tagged("fork", persistent=True), index=1, count=2)
    first, second = list(r()), list(r())
    assert values(first) == values(tagged("fork").run(0))[1::2]
    assert pids(first) == pids(second)
    del r
    gc.collect()
    wait_until(lambda: all(map(gone, pids(first))), HANG, "the copy's workers to end with the shard")


def test_threads_are_refused_and_repr_and_pickle(no_leaks):
    for make in (lambda: prefetch(from_sequence(range(5)), 2, persistent=True),
                 lambda: xmap_readers(abs, from_sequence(range(5)), 2, 4, persistent=True)):
        with pytest.raises(ValueError, match="persistent=True keeps worker processes .* needs mode='process'"):
            make()
    assert repr(prefetch(from_sequence(range(5)), 2, mode="process", persistent=True)).startswith(
        "prefetch(2 processes, persistent)")
    with tagged("fork", persistent=True) as kept:
        list(kept())
        assert values(tagged("spawn").run(0)) == values(kept.run(0))
        clone = prefetch(kept, 1, mode="process", start_method="spawn")  # pickled for spawn: without the workers
        assert values(clone()) == values(kept.run(0))


def test_a_forked_child_closes_its_copies_of_the_kept_pipes(no_leaks):
    """Else a process forked later (another pool's worker) would keep a kept worker from seeing its pipe close."""
    with tagged("fork", persistent=True) as r:
        list(r())
        backend = r._keeper.backend
        procs = list(backend.procs)
        pid = os.fork()
        if pid == 0:  # the child: its copies are closed, and the workers are not its children
            ok = all(c is None for c in backend.conns)
            ok = ok and not set(procs) & multiprocessing.process._children
            multiprocessing.util._exit_function()  # what a child's normal exit runs: it must not stop them
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert all(c is not None for c in backend.conns)
        assert pids(r()) == {p.pid for p in procs}  # still the same, alive


def test_a_forked_childs_copy_of_a_kept_stage_keeps_workers_of_its_own(no_leaks):
    with tagged("fork", persistent=True) as r:
        mine = pids(r())
        pid = os.fork()
        if pid == 0:
            try:
                first, second = pids(r()), pids(r())
                r.close()
                os._exit(0 if first == second and not first & mine else 1)
            finally:
                os._exit(2)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert pids(r()) == mine


def test_keeper_without_workers_closes_quietly():
    keeper = Keeper()
    keeper.close()
    assert not keeper.running()


SCRIPT = textwrap.dedent("""
    import functools, os, sys, threading, time
    sys.path.insert(0, {root!r})
    from readers import from_sequence, map_readers, prefetch
    from tests.helpers import worker_jobs as jobs

    idle = prefetch(map_readers(jobs.tag_pid, from_sequence(list(range(100)))), 2, mode="process",
                    start_method="fork", persistent=True)
    pids, tids = {{p for _, p in idle()}}, []
    busy = prefetch(map_readers(jobs.tag_pid, functools.partial(jobs.count_then_block, 1)), 1, mode="process",
                    start_method="fork", persistent=True)
    it = busy()
    if {in_thread}:  # kept workers started by a thread, which ends
        starter = threading.Thread(target=lambda: (pids.add(next(it)[1]), tids.append(threading.get_native_id())))
        starter.start()
        starter.join()
        while os.path.exists(f"/proc/self/task/{{tids[0]}}"):  # until the kernel has ended that thread too
            time.sleep(0.01)
    else:
        pids.add(next(it)[1])
    print(" ".join(map(str, sorted(pids))), flush=True)
    {end}
""")


@pytest.mark.parametrize("end, in_thread, method", [
    ("time.sleep(60)", False, "fork"),  # killed: SIGKILL
    ("time.sleep(60)", True, "fork"),
    ("time.sleep(60)", False, "forkserver"),  # (a fork server's child cannot be tied to the consumer)
    ("sys.exit(0)", False, "fork"),  # the interpreter exits with a pass open and a reader never closed
])
def test_no_worker_outlives_its_process(end, in_thread, method):
    script = SCRIPT.format(root=str(ROOT), in_thread=in_thread, end=end).replace('"fork"', repr(method))
    with python_child("-c", script, stderr=None) as proc:
        line = read_line(proc.stdout, 60, "the script starting its workers")
        kept = [int(p) for p in line.split()]
        assert len(kept) == 3, line
        assert not any(map(gone, kept)) or end != "time.sleep(60)"
        if end == "time.sleep(60)":
            proc.send_signal(signal.SIGKILL)
        finishes(proc.wait, "the script to end")
        wait_until(lambda: all(map(gone, kept)), HANG, lambda: f"workers {[p for p in kept if not gone(p)]} to end")


def test_read_in_another_worker_context_the_stage_gets_workers_for_it(no_leaks):
    fresh = prefetch(map_readers(jobs.tag_worker, from_sequence(range(8))), 2, mode="process", start_method="fork")
    with prefetch(map_readers(jobs.tag_worker, from_sequence(range(8))), 2, mode="process", start_method="fork",
                  persistent=True) as r:
        for context in [(0, 2), (1, 2), (1, 2), (0, 2)]:
            with worker_context(*context):
                got = list(r())
                # which worker maps which entry is whichever was free (dealt blocks, issue 32)
                assert [x for x, _, _ in got] == [x for x, _, _ in fresh()] == list(range(8))
                assert {(w, n) for _, w, n in got} == {(context[0], 4), (context[0] + 2, 4)}


def test_arrays_held_from_a_pass_keep_later_passes_in_shared_memory(no_leaks):
    """The ring frees in order: a held array would stop it for good, so a kept worker gets a new ring."""
    fds = len(open_descriptors())
    with prefetch(functools.partial(jobs.arrays, 100, 32768), 1, mode="process", start_method="fork",
                  persistent=True) as r:
        held = []
        for _ in range(4):
            it = r()
            held.append(next(it))  # entry 0 of each pass, a view of that pass's ring
            assert sum(1 for _ in it) == 99
            assert r.stats()["shm_bytes"] >= 99 * 32768 * 8  # not in-band (4 passes outgrow one ring)
        assert all((a == 0).all() and a.shape == (32768,) for a in held)
    del held, it
    gc.collect()
    wait_until(lambda: len(open_descriptors()) <= fds, HANG, "the rings' descriptors to close")


def test_arrays_held_from_a_pass_keep_later_passes_of_dealt_blocks_in_shared_memory(no_leaks):
    """Issue 32: kept workers of dealt blocks get a new ring between passes too, as those of fixed shares do."""
    source = readers.from_arrays(np.zeros((100, 65536)))  # 25 MB a worker a pass: 4 passes outgrow one ring
    with prefetch(source, 2, mode="process", start_method="fork", persistent=True) as r:
        assert r._deals()
        held = []
        for _ in range(4):
            it = r()
            held.append(next(it))  # entry 0 of each pass, a view of that pass's ring
            assert sum(1 for _ in it) == 99
            assert r.stats()["shm_bytes"] >= 99 * 65536 * 8  # not in-band
        assert all((a == 0).all() and a.shape == (65536,) for (a,) in held)
    del held, it
