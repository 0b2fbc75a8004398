"""Tests of readers.prefetch, and of xmap_readers and multiprocess_reader on process workers.

What a spawned worker runs comes from ``tests.readers.worker_jobs`` (module
level, importable). Bounds such as "within 5 s" are the spec's promises that
nothing hangs, not speed measurements.
"""
from __future__ import annotations

import collections
import functools
import gc
import itertools
import json
import mmap
import multiprocessing
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import readers
from readers import (
    from_arrays,
    from_sequence,
    map_readers,
    multiprocess_reader,
    prefetch,
    shard,
    shuffle,
    xmap_readers,
)
from tests.readers import worker_jobs as jobs
from readers.testing import assert_resumes_at_every_step, assert_same
from tests.readers.test_workers import _wait_until

HANG = 5.0  # seconds: the spec's bound for "stops, raises or cleans up without hanging"
TEST_LIMIT = 60  # seconds: a test still running by then hangs, and fails rather than stall the suite
ROOT = Path(__file__).resolve().parents[2]
MODES = ["thread", "process"]
METHODS = ["fork", "spawn"]
STATS_KEYS = {"mode", "workers", "entries", "seconds", "entries_per_s", "input_wait", "output_wait",
              "consumer_wait", "queue_fill", "shm_bytes", "restarts"}
FRACTIONS = ["input_wait", "output_wait", "consumer_wait", "queue_fill"]


# -- helpers ----------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _bounded():
    """Fail a test that hangs (a pass that never ends) instead of stalling the whole run."""
    def hung(signum, frame):
        raise TimeoutError(f"test still running after {TEST_LIMIT} s: something in it hangs")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.setitimer(signal.ITIMER_REAL, TEST_LIMIT)  # not inherited by forked workers
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def no_leaks():
    """Fail a test that leaves readerkit threads or worker processes behind."""
    before = set(threading.enumerate())
    yield
    assert _wait_until(lambda: set(threading.enumerate()) <= before), [t.name for t in threading.enumerate()]
    assert multiprocessing.active_children() == []


def options(mode: str) -> dict:
    """prefetch options for a mode; process workers fork unless a test is about spawn (fork starts fast)."""
    return {"mode": mode, "start_method": "fork"} if mode == "process" else {"mode": mode}


def source(kind: str, n: int):
    """n entries 0..n-1: index-addressed (workers read only their own) or a stream (every worker reads all)."""
    if kind == "indexed":
        return from_sequence(list(range(n)))
    return functools.partial(jobs.count, n)


def shuffled(kind: str, n: int):
    if kind == "indexed":
        return shuffle(source(kind, n), seed=0)  # a global shuffle: a keyed permutation
    return shuffle(source(kind, n), 4, seed=0)  # a buffer shuffle of the stream


def ring_maps() -> list[str]:
    with open("/proc/self/maps") as maps:
        return [line.strip() for line in maps if "readerkit-ring" in line]


def ring_fds() -> list[str]:
    links = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the descriptor listdir itself used
            continue
        if target.startswith("/memfd:readerkit-ring"):
            links.append(target)
    return links


def dev_shm() -> list[str]:
    return sorted(os.listdir("/dev/shm"))


def assert_rings_gone() -> None:
    gc.collect()
    assert ring_maps() == []
    assert ring_fds() == []
    with open("/proc/self/maps") as maps:
        assert [line for line in maps if "/dev/shm/" in line] == []


def views_ring(array: np.ndarray) -> bool:
    """Whether ``array``'s memory is a shared-memory mapping (its base chain ends in an mmap), not its own."""
    if array.flags.owndata:
        return False
    base = array.base
    for _ in range(16):
        if isinstance(base, mmap.mmap):
            return True
        if isinstance(base, np.ndarray):
            base = base.base
        elif isinstance(base, memoryview):
            base = base.obj
        else:
            return False
    return False


def pid_gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (gone, or a zombie waiting for its new parent to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def session_members(sid: int) -> list[int]:
    """Live processes of session ``sid`` (a subprocess started with start_new_session leads its own)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[4]) == sid and fields[0] != "Z":
            members.append(int(entry))
    return members


def ctrl_c_after(seconds: float) -> threading.Timer:
    """Deliver SIGINT to the main thread after ``seconds``, as Ctrl-C would."""
    timer = threading.Timer(seconds, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
    timer.start()
    return timer


# -- determinism --------------------------------------------------------------------------


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


# -- worker context ---------------------------------------------------------------------


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


# -- resume -------------------------------------------------------------------------------


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


# -- zero copy ------------------------------------------------------------------------------


@pytest.mark.parametrize("start_method", METHODS)
@pytest.mark.parametrize("kind", ["stream", "indexed"])
def test_prefetch_arrays_arrive_as_views_of_the_ring(kind, start_method, no_leaks):
    shm_before = dev_shm()
    if kind == "stream":
        src = functools.partial(jobs.arrays, 12, 1024)  # bare 8 KiB arrays
    else:
        src = from_arrays(np.arange(12 * 256.0).reshape(12, 256), np.arange(12))  # (2 KiB row, label)
    want = list(src())
    r = prefetch(src, 2, mode="process", start_method=start_method)
    got = list(r())
    assert_same(got, want)
    arrays = [e if kind == "stream" else e[0] for e in got]
    assert all(views_ring(a) for a in arrays)
    assert all(a.base.dtype == np.uint8 for a in arrays if isinstance(a.base, np.ndarray))
    assert ring_maps() != []  # mapped while entries view it
    assert r.stats()["shm_bytes"] > 0
    del got, arrays
    assert_rings_gone()
    assert dev_shm() == shm_before


@pytest.mark.parametrize("kind, start_method, passes", [("indexed", "fork", 2), ("stream", "fork", 2),
                                                        ("indexed", "spawn", 1)])
def test_prefetch_odd_entries_arrive_intact(kind, start_method, passes, no_leaks):
    src = from_sequence(jobs.odd_entries()) if kind == "indexed" else jobs.odd_stream
    r = prefetch(src, 2, mode="process", start_method=start_method)
    for _ in range(passes):
        assert_same(list(r()), jobs.odd_entries())


@pytest.mark.parametrize("start_method", METHODS)
def test_prefetch_entries_kept_beyond_the_ring_arrive_intact(start_method, no_leaks):
    # 80 arrays of 1 MiB, all kept: more than the worker's 64 MiB ring, so the rest goes in-band.
    n, size = 80, 1 << 17
    r = prefetch(functools.partial(jobs.arrays, n, size), 1, mode="process", start_method=start_method)
    kept = list(r())
    assert len(kept) == n
    assert all(a.shape == (size,) and a[0] == i and a[-1] == i and a.sum() == i * size for i, a in enumerate(kept))
    in_ring = [views_ring(a) for a in kept]
    assert any(in_ring) and not all(in_ring)
    del kept
    assert_rings_gone()


def test_prefetch_ring_reuse_never_overwrites_live_entries(no_leaks):
    # 600 arrays of 256 KiB wrap the 64 MiB ring twice; the consumer keeps a sliding window of 8
    # entries, so regions are freed and reused while their neighbours are still alive.
    window: collections.deque = collections.deque(maxlen=8)
    r = prefetch(functools.partial(jobs.arrays, 600, 1 << 15), 1, mode="process", start_method="fork",
                 buffer_size=4)
    for i, a in enumerate(r()):
        assert views_ring(a)
        window.append((i, a))
        assert all(kept[0] == j and (kept == j).all() for j, kept in window)
    assert r.stats()["shm_bytes"] >= 600 << 18
    del window, a
    assert_rings_gone()


def _kill_a_worker() -> None:
    """SIGKILL one worker process of the running pass."""
    os.kill(min(p.pid for p in multiprocessing.active_children()), signal.SIGKILL)


ENDINGS = {
    # ending: (reader, how the pass ends once the first entry arrived)
    "end": (functools.partial(jobs.arrays, 8, 1024), None),
    "break": (functools.partial(jobs.arrays, 10_000, 1024), None),
    "error": (functools.partial(jobs.arrays_then_fail, 4, 1024, "bad row 4"), ValueError),
    "sigkill": (functools.partial(jobs.arrays, 400, 1024), readers.WorkerDiedError),
}


@pytest.mark.parametrize("start_method", METHODS)
@pytest.mark.parametrize("ending", ENDINGS)
def test_prefetch_leaves_no_shared_memory_behind(ending, start_method, no_leaks):
    shm_before = dev_shm()
    reader, error = ENDINGS[ending]
    stage = prefetch(reader, 2, mode="process", start_method=start_method, buffer_size=4)
    it = stage()  # the stage outlives the pass: its stats must not keep entries alive
    first = next(it)
    assert views_ring(first) and ring_maps() != []
    if ending == "end":
        assert all(np.array_equal(a, np.full(1024, i + 1.0)) for i, a in enumerate(it))
    elif ending == "break":
        for entry in it:
            break
        it.close()
        assert np.array_equal(entry, np.ones(1024))
        del entry
    else:
        if ending == "sigkill":
            _kill_a_worker()  # it waits for credit (buffer_size=4), mid-pass
        with pytest.raises(error):
            list(it)
    assert multiprocessing.active_children() == []
    # the workers are gone, and the entry still alive still reads right
    assert np.array_equal(first, np.zeros(1024)) and ring_maps() != []
    del first, it
    assert_rings_gone()
    assert dev_shm() == shm_before and stage.stats()["entries"] >= 1


# -- faults ---------------------------------------------------------------------------------


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
    killed = time.monotonic()
    with pytest.raises(readers.WorkerDiedError, match=r"prefetch worker 1 \(.*\).* SIGKILL.*check its memory use"):
        for _ in it:
            pass
    assert time.monotonic() - killed < HANG


@pytest.mark.parametrize("start_method", METHODS)
@pytest.mark.parametrize("kind", ["indexed", "stream", "arrays"])
def test_prefetch_restarted_worker_gives_exactly_the_serial_output(kind, start_method, no_leaks):
    src = functools.partial(jobs.arrays, 60, 1024) if kind == "arrays" else source(kind, 60)
    want = list(src())
    # buffer_size=2 keeps each worker waiting for credit in the middle of its share, so a kill lands mid-pass
    r = prefetch(src, 2, mode="process", start_method=start_method, buffer_size=2, restarts=2)
    it = r()
    got = [next(it) for _ in range(10)]
    _kill_a_worker()
    with pytest.warns(RuntimeWarning, match=r"prefetch worker \d .*SIGKILL.*restarted"):
        got += list(it)
    assert_same(got, want)  # arrays received before the kill are intact, too
    assert r.stats()["restarts"] == 1 and r.stats()["entries"] == 60


def test_prefetch_unordered_restart_loses_and_doubles_nothing(no_leaks):
    r = prefetch(source("indexed", 100), 2, mode="process", start_method="fork", buffer_size=2, ordered=False,
                 restarts=1)
    it = r()
    got = [next(it) for _ in range(10)]
    _kill_a_worker()
    with pytest.warns(RuntimeWarning, match="restarted"):
        got += list(it)
    assert sorted(got) == list(range(100))


def test_prefetch_raises_once_restarts_run_out(no_leaks):
    r = prefetch(source("indexed", 400), 2, mode="process", start_method="fork", buffer_size=2, restarts=1)
    it = r()
    got = [next(it) for _ in range(4)]
    _kill_a_worker()
    with pytest.warns(RuntimeWarning, match="restart 1 of 1"):
        got += [next(it) for _ in range(10)]
    _kill_a_worker()
    with pytest.raises(readers.WorkerDiedError, match="SIGKILL.*restarted 1 times already"):
        got += list(it)
    assert got == list(range(len(got)))  # nothing lost or doubled before the error


@pytest.mark.parametrize("start_method", METHODS)
def test_prefetch_forwards_worker_exception_with_its_traceback(start_method, no_leaks):
    r = prefetch(functools.partial(jobs.fails_at, 7, "bad row 7"), 2, mode="process", start_method=start_method)
    got = []
    with pytest.raises(ValueError) as info:
        for x in r():
            got.append(x)
    assert got == list(range(7))
    assert type(info.value) is ValueError and str(info.value) == "bad row 7"
    remote = str(info.value.__cause__)
    assert "Traceback in prefetch worker" in remote
    assert "fails_at" in remote and "raise ValueError(message)" in remote


def test_prefetch_forwards_thread_worker_exception(no_leaks):
    r = prefetch(functools.partial(jobs.fails_at, 7, "bad row 7"), 3)
    got = []
    with pytest.raises(ValueError, match="^bad row 7$") as info:
        for x in r():
            got.append(x)
    assert got == list(range(7))
    assert "fails_at" in "".join(traceback.format_exception(info.value))  # the worker's frames


@pytest.mark.parametrize("start_method", METHODS)
def test_prefetch_keyboard_interrupt_in_consumer_stops_processes(start_method, no_leaks):
    shm_before = dev_shm()
    it = prefetch(functools.partial(jobs.arrays_then_block, 2, 1024), 2, mode="process",
                  start_method=start_method)()
    first = next(it)
    assert np.array_equal(next(it), np.ones(1024))  # now the consumer waits for entry 2, which never comes
    timer = ctrl_c_after(0.1)
    try:
        with pytest.raises(KeyboardInterrupt):
            list(it)
        interrupted = time.monotonic()
    finally:
        timer.join()
    assert _wait_until(lambda: multiprocessing.active_children() == [], HANG - (time.monotonic() - interrupted))
    assert np.array_equal(first, np.zeros(1024)) and views_ring(first)
    del first, it
    assert_rings_gone()
    assert dev_shm() == shm_before


CTRL_C_SCRIPT = """
import functools, multiprocessing, sys
import readers
from tests.readers import worker_jobs

it = readers.prefetch(functools.partial(worker_jobs.count_then_block, 2), 2, mode="process",
                      start_method=sys.argv[1])()
assert [next(it), next(it)] == [0, 1]
print(*[p.pid for p in multiprocessing.active_children()], flush=True)
list(it)
"""


def _read(pipe, timeout: float, until_eof: bool = False) -> bytes:
    """Bytes from ``pipe`` up to a newline (or, with ``until_eof``, to its end), waiting at most ``timeout``.

    Bounded because a worker that outlives the script would hold the pipe open.
    """
    deadline, data = time.monotonic() + timeout, b""
    while until_eof or not data.endswith(b"\n"):
        ready, _, _ = select.select([pipe], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise AssertionError(f"the subprocess's pipe gave {data!r} and no more within {timeout} s")
        chunk = os.read(pipe.fileno(), 65536)
        if not chunk:
            if until_eof:
                break
            raise AssertionError(f"the subprocess ended before writing a line: {data!r}")
        data += chunk
    return data


@pytest.mark.parametrize("start_method", METHODS)
def test_prefetch_ctrl_c_in_a_terminal_leaves_no_process(start_method):
    proc = subprocess.Popen([sys.executable, "-c", CTRL_C_SCRIPT, start_method], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        workers = [int(pid) for pid in _read(proc.stdout, 4 * HANG).split()]
        assert len(workers) == 2
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal does: the whole foreground group
        proc.wait(HANG)
        assert _wait_until(lambda: all(map(pid_gone, workers)))
        assert _wait_until(lambda: session_members(proc.pid) == []), session_members(proc.pid)
        assert b"KeyboardInterrupt" in _read(proc.stderr, HANG, until_eof=True)
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


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
    proc = subprocess.Popen([sys.executable, str(script)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=HANG)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError(f"a spawn prefetch over a reader of {n} entries hung when its worker died") from None
    assert proc.returncode != 0
    assert b"WorkerDiedError: prefetch worker 0" in err and b"exited with code 1" in err
    assert b'under `if __name__ == "__main__":`' in err and b"memory" not in err.splitlines()[-1]
    assert b"During handling" not in err  # the consumer's own bookkeeping is not shown


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


@pytest.mark.parametrize("kind", ["stream", "indexed"])
def test_prefetch_worker_makes_at_most_buffer_size_entries_ahead(kind, no_leaks):
    mapped: list = []

    def record(x):
        mapped.append(x)
        return x

    it = prefetch(map_readers(record, source(kind, 10_000)), 1, buffer_size=2)()
    try:
        assert next(it) == 0
        made = len(mapped)
    finally:
        it.close()
    assert made <= 1 + 2  # the consumer received 1; the worker may be 2 ahead, and no more


# -- xmap_readers and multiprocess_reader on process workers --------------------------------


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


@pytest.mark.parametrize("start_method", METHODS)
def test_multiprocess_reader_runs_reader_i_as_worker_i(start_method, no_leaks):
    parts = [map_readers(jobs.tag_worker, from_sequence(range(10 * k, 10 * k + 10))) for k in range(2)]
    got = list(multiprocess_reader(parts, start_method=start_method)())
    for k in range(2):
        assert [e for e in got if e[1] == k] == [(x, k, 2) for x in range(10 * k, 10 * k + 10)]
    assert len(got) == 20


def test_multiprocess_reader_arrays_cross_through_the_ring(no_leaks):
    parts = [functools.partial(jobs.arrays, 6, 1024), functools.partial(jobs.arrays, 6, 512)]
    got = list(multiprocess_reader(parts, start_method="fork")())
    assert sorted((a.size, a[0]) for a in got) == sorted((size, i) for size in (512, 1024) for i in range(6))
    assert all(views_ring(a) for a in got)
    del got
    assert_rings_gone()


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
    _kill_a_worker()
    with pytest.warns(RuntimeWarning, match=f"{name} worker \\d .*SIGKILL.*restarted"):
        got += list(it)
    assert (got if name == "xmap_readers" else sorted(got)) == want
