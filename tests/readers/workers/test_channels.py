"""readers.workers.channels: starting, stopping and interrupting a pool's thread and process workers.

However a pass ends (run out, break, close(), garbage collection, an error,
Ctrl-C), its workers are stopped and joined, and a process worker that does
not stop in time is terminated.
"""
from __future__ import annotations

import functools
import gc
import mmap
import multiprocessing
import os
import signal
import subprocess
import threading
import time
import warnings

import numpy as np
import pytest

from readers import (
    from_sequence,
    map_readers,
    multiprocess_reader,
    np_array,
    prefetch,
    xmap_readers,
)
from readers.graph import describe
from readers.workers import channels
from readers.workers.channels import pick_start_method
from readers.workers.prefetch import buffered
from tests.conftest import HANG, finishes, wait_for, wait_until, worker_threads
from tests.helpers import worker_jobs as jobs
from tests.helpers.child_processes import python_child, read_line, read_to_end
from tests.helpers.paths import ROOT
from tests.helpers.pool_helpers import (
    METHODS,
    assert_nothing_new_in_dev_shm,
    assert_rings_gone,
    closed_by_its_thread,
    dev_shm,
    endless,
    views_ring,
)
from tests.helpers.processes import gone, session, waiting
from tests.helpers.threads import running_in


def ctrl_c_while_draining(it, then: threading.Event | None = None) -> None:
    """Read the rest of the pass ``it``, and press Ctrl-C (SIGINT to the main thread) once it waits inside the
    pass: it must raise.

    ``then`` is set right after Ctrl-C is pressed: a source that waits for it is still blocked when it comes.
    """
    main, late = threading.main_thread(), []

    def press() -> None:
        if not wait_for(lambda: running_in(main, "readers"), HANG):
            late.append(f"the consumer did not enter the pass within {HANG} s")  # pressed all the same
        signal.pthread_kill(main.ident, signal.SIGINT)
        if then is not None:
            then.set()

    ctrl_c = threading.Thread(target=press, name="test-ctrl-c")
    ctrl_c.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            list(it)
    finally:
        ctrl_c.join()
    assert not late, late


# -- start methods ------------------------------------------------------------------------------


def test_pick_start_method_forks_only_while_no_other_thread_runs():
    assert pick_start_method("spawn") == "spawn" and pick_start_method("fork") == "fork"
    release = threading.Event()
    other = threading.Thread(target=release.wait, args=(HANG,))
    other.start()
    try:
        assert pick_start_method(None) == "spawn"  # a fork would copy that thread's locks mid-use
    finally:
        release.set()
        other.join()


def test_process_workers_fork_after_a_url_was_read(tmp_path):
    """Regression from issue 29: reading a URL leaves fsspec's IO thread running for good, which made every
    later prefetch(mode="process") spawn its workers: slower, and a lambda in the reader no longer worked."""
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    from readers.sources.locations import read_range
    from tests.helpers.fsspec_io import io_threads, stop_io
    from tests.helpers.http_server import serve_folder

    (tmp_path / "a.bin").write_bytes(b"0123456789")
    try:
        with serve_folder(tmp_path) as server:
            assert read_range(f"{server.url}/a.bin", 2, 3) == b"234"
        assert "fsspecIO" in io_threads()
        if [t for t in threading.enumerate() if t is not threading.main_thread() and t.name not in io_threads()]:
            pytest.skip("another thread runs in this test process")
        assert pick_start_method(None) == "fork"
        r = prefetch(map_readers(lambda x: x * 2, from_sequence(range(6))), 2, mode="process")  # spawn: no lambdas
        assert list(r()) == [0, 2, 4, 6, 8, 10]
    finally:
        stop_io()


@pytest.mark.parametrize("use_pipe", [True, False])
def test_multiprocess_reader_spawn_with_importable_readers(use_pipe, no_leaks):
    parts = [from_sequence([1, None, ""]), np_array(np.arange(4))]
    got = list(multiprocess_reader(parts, use_pipe, start_method="spawn")())
    assert sorted(x for x in got if isinstance(x, np.integer)) == [0, 1, 2, 3]
    assert [x for x in got if not isinstance(x, np.integer)] == [1, None, ""]


def test_multiprocess_reader_spawn_rejects_unpicklable_reader(no_leaks):
    r = multiprocess_reader([from_sequence([1]), lambda: iter([2])], start_method="spawn")
    with pytest.raises(TypeError, match=r"worker 1 \(.*lambda.*\) cannot be pickled.*module-level"):
        list(r())


def test_unpicklable_reader_under_spawn_chosen_for_other_threads_says_why_and_names_one(no_leaks):
    """Regression: the error said only that the reader cannot be pickled for 'spawn', which no one had asked for."""
    release = threading.Event()
    other = threading.Thread(target=release.wait, args=(HANG,), name="metrics-uploader")
    other.start()
    try:
        r = prefetch(lambda: iter([1, 2]), 1, mode="process")
        with pytest.raises(TypeError) as info:
            list(r())
    finally:
        release.set()
        other.join()
    message = str(info.value)
    assert "cannot be pickled for the 'spawn' start method" in message
    assert "'spawn' was chosen because this process has other threads than the main one ('" in message
    assert "'metrics-uploader'" in message
    assert "module-level functions" in message and 'mode="thread"' in message and 'start_method="fork"' in message


def test_unpicklable_reader_under_a_requested_spawn_says_nothing_of_threads(no_leaks):
    r = prefetch(lambda: iter([1, 2]), 1, mode="process", start_method="spawn")
    with pytest.raises(TypeError, match="cannot be pickled for the 'spawn' start method") as info:
        list(r())
    assert "other threads" not in str(info.value)


UNGUARDED_SCRIPT = """
import readers

# no `if __name__ == "__main__":`, so a spawned worker that imports this file dies starting up
r = readers.prefetch(readers.from_sequence(list(range({n}))), 1, mode="process", start_method="spawn")
print(len(list(r())))
"""


@pytest.mark.parametrize("n", [
    100,
    100_000,  # regression: the pickled reader outgrew a pipe buffer in the process arguments and start() hung
])
def test_prefetch_spawned_worker_dying_at_start_raises(n, tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED_SCRIPT.format(n=n))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with python_child(script, env=env, session=True) as proc:
        try:
            _, err = proc.communicate(timeout=HANG)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"a spawn prefetch over a reader of {n} entries hung when its worker died") from None
    assert proc.returncode != 0
    assert b"WorkerDiedError: prefetch worker 0" in err and b"exited with code 1" in err
    assert b'under `if __name__ == "__main__":`' in err and b"memory" not in err.splitlines()[-1]
    assert b"During handling" not in err  # the consumer's own bookkeeping is not shown


# -- stopping early -------------------------------------------------------------------------------


@pytest.mark.parametrize("stop", ["break", "close", "gc"])
def test_buffered_early_stop_joins_thread_and_closes_source(stop, no_leaks):
    closed_by: list = []
    it = buffered(closed_by_its_thread(closed_by), 4)()
    assert next(it) == 0
    if stop == "break":
        for _ in it:
            break
        it.close()
    elif stop == "close":
        it.close()
    else:
        del it
        gc.collect()
    assert worker_threads() == []  # joined before break, close or collection returned
    # The thread that iterated the source is the one that closed it.
    assert len(closed_by) == 1 and closed_by[0].startswith("readerkit-buffered")


@pytest.mark.parametrize("order", [True, False])
@pytest.mark.parametrize("stop", ["break", "gc"])
def test_xmap_readers_early_stop_joins_threads(order, stop, no_leaks):
    closed_by: list = []
    it = xmap_readers(jobs.slow_plus_one, closed_by_its_thread(closed_by), 4, 8, order)()
    for x in it:
        if x > 10:
            break
    if stop == "gc":
        del it
        gc.collect()
    else:
        it.close()
    assert worker_threads() == []
    # every worker reads its own pass of the source, and closes it in its own thread
    assert len(closed_by) == 4 and all(name.startswith("readerkit-xmap_readers") for name in closed_by)


@pytest.mark.parametrize("use_pipe", [True, False])
def test_multiprocess_reader_early_break_stops_processes(use_pipe, no_leaks):
    r = multiprocess_reader([endless, endless], use_pipe, queue_size=4, start_method="fork")
    it = r()
    assert len([x for _, x in zip(range(50), it)]) == 50
    assert len(multiprocessing.active_children()) == 2
    it.close()
    assert multiprocessing.active_children() == []


def _marks_when_closed(path, made, w):
    def reader():
        try:
            for _ in range(1_000_000):
                made[w] += 1
                yield "x" * 100
        finally:
            path.touch()
    return reader


@pytest.mark.parametrize("use_pipe", [True, False])
def test_multiprocess_reader_early_stop_lets_blocked_workers_close_their_readers(
        use_pipe, tmp_path, no_leaks):
    marks = [tmp_path / "0", tmp_path / "1"]
    made = np.frombuffer(mmap.mmap(-1, 16), np.int64)  # entries each reader gave, in memory the forks share
    r = multiprocess_reader([_marks_when_closed(m, made, w) for w, m in enumerate(marks)], use_pipe, queue_size=10,
                            start_method="fork")
    it = r()
    next(it)
    workers = [p.pid for p in multiprocessing.active_children()]
    # a worker may be 5 entries (queue_size over 2 workers) ahead of what the consumer received, then waits
    wait_until(lambda: all(made >= 5) and all(map(waiting, workers)), HANG,
               lambda: f"both workers to wait for credit, 5 entries ahead; made {made.tolist()}")
    it.close()
    assert multiprocessing.active_children() == []
    assert [m.exists() for m in marks] == [True, True]  # stopped, not terminated


def test_multiprocess_reader_terminates_a_stuck_worker(no_leaks):
    def stuck():
        yield 1
        time.sleep(60)

    it = multiprocess_reader([stuck], start_method="fork")()
    assert next(it) == 1
    passes = [it]
    del it
    finishes(lambda: (passes.clear(), gc.collect()), "collecting a pass whose worker is stuck in its reader")
    assert multiprocessing.active_children() == []


def _blocked_source(release: threading.Event):
    def source():
        yield 1
        release.wait(HANG)  # like a socket read that does not return
        yield 2
    return source


def _fails(x):
    raise ValueError(f"mapper failed on {x}")


@pytest.mark.parametrize("make", [lambda s: buffered(s, 4), lambda s: xmap_readers(jobs.plus_one, s, 2, 4)])
def test_stop_returns_promptly_while_the_source_is_blocked(make, no_leaks):
    """Regression from the review of issue 2: the consumer waited for a thread stuck in its source."""
    release = threading.Event()

    def take_one_and_stop():
        with pytest.warns(RuntimeWarning, match="did not return"):
            for _ in make(_blocked_source(release))():
                break

    try:
        finishes(take_one_and_stop, "stopping a pass while its source is blocked", timeout=HANG / 2)
    finally:
        release.set()  # the left-behind thread now finishes its next() and exits (no_leaks waits)


def _stuck_passes(stage, passes: int) -> list:
    """The warnings of ``passes`` passes of ``stage`` each stopped while its source is blocked."""
    def run():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(passes):
                it = stage()
                next(it)
                it.close()  # its thread is blocked in the source's next()
        return caught

    return finishes(run, f"{passes} passes whose source is blocked", timeout=HANG / 2)


def test_thread_stuck_in_its_source_is_named_in_a_visible_warning_once_per_stage(monkeypatch, no_leaks):
    """Regression: the only notice was a ResourceWarning, which Python hides by default."""
    monkeypatch.setattr(channels, "GRACE", 0.05)
    release = threading.Event()
    stage, other = prefetch(_blocked_source(release), 1), buffered(_blocked_source(release), 2)
    try:
        caught = _stuck_passes(stage, 2)
        caught_other = _stuck_passes(other, 1)
    finally:
        release.set()  # the left-behind threads now finish their next() and exit (no_leaks waits)
    assert [w.category for w in caught] == [RuntimeWarning]  # shown by Python's default filters; once per stage
    message = str(caught[0].message)
    assert message.startswith(f"readerkit prefetch: worker thread readerkit-prefetch-0 ({describe(stage.reader)}, "
                              "1 of 1) did not return from its source within 0.05 s of the pass ending")
    assert "give the source a timeout" in message
    assert [str(w.message).split(":")[0] for w in caught_other] == ["readerkit buffered"]  # another stage: its own


def test_xmap_mapper_error_reaches_consumer_while_source_is_blocked(no_leaks):
    """Regression from the review of issue 2: a mapper's error waited for a thread stuck in its source."""
    release = threading.Event()

    def fail_the_pass():
        with pytest.warns(RuntimeWarning), pytest.raises(ValueError, match="mapper failed on 1"):
            list(xmap_readers(_fails, _blocked_source(release), 2, 4)())

    try:
        finishes(fail_the_pass, "a pass whose mapper failed while its source is blocked", timeout=HANG / 2)
    finally:
        release.set()


# -- Ctrl-C -----------------------------------------------------------------------------------

DECORATORS = {
    "buffered": lambda reader: buffered(reader, 2),
    "xmap_readers": lambda reader: xmap_readers(jobs.plus_one, reader, 2, 2, True),
    "multiprocess_reader": lambda reader: multiprocess_reader([reader], start_method="fork"),
}


@pytest.mark.parametrize("make", DECORATORS.values(), ids=DECORATORS.keys())
def test_workers_keyboard_interrupt_in_consumer_cleans_up(make, no_leaks):
    pressed = threading.Event()

    def slow():
        yield 1
        pressed.wait(HANG)  # the consumer is blocked waiting for entry 2 when Ctrl-C comes, however late
        yield 2

    it = make(slow)()
    next(it)
    ctrl_c_while_draining(it, then=pressed)


@pytest.mark.parametrize("start_method", METHODS)
def test_prefetch_keyboard_interrupt_in_consumer_stops_processes(start_method, no_leaks):
    shm_before = dev_shm()
    it = prefetch(functools.partial(jobs.arrays_then_block, 2, 1024), 2, mode="process",
                  start_method=start_method)()
    first = next(it)
    assert np.array_equal(next(it), np.ones(1024))  # now the consumer waits for entry 2, which never comes
    ctrl_c_while_draining(it)
    wait_until(lambda: multiprocessing.active_children() == [], HANG, "the worker processes to exit after Ctrl-C")
    assert np.array_equal(first, np.zeros(1024)) and views_ring(first)
    del first, it
    assert_rings_gone()
    assert_nothing_new_in_dev_shm(shm_before)


CTRL_C_SCRIPT = """
import functools, multiprocessing, sys
import readers
from tests.helpers import worker_jobs

it = readers.prefetch(functools.partial(worker_jobs.count_then_block, 2), 2, mode="process",
                      start_method=sys.argv[1])()
assert [next(it), next(it)] == [0, 1]
print(*[p.pid for p in multiprocessing.active_children()], flush=True)
list(it)
"""


@pytest.mark.parametrize("start_method", METHODS)
def test_prefetch_ctrl_c_in_a_terminal_leaves_no_process(start_method):
    with python_child("-c", CTRL_C_SCRIPT, start_method, session=True) as proc:
        workers = [int(pid) for pid in read_line(proc.stdout, 2 * HANG, "the workers' pids").split()]
        assert len(workers) == 2
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal does: the whole foreground group
        proc.wait(HANG)
        wait_until(lambda: all(map(gone, workers)), HANG, f"the workers {workers} to exit")
        wait_until(lambda: session(proc.pid) == [], HANG,
                   lambda: f"the script's session to end; still in it: {session(proc.pid)}")
        assert "KeyboardInterrupt" in read_to_end(proc.stderr, HANG, "the script's traceback")
