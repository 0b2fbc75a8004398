"""Tests of readers.parallel: buffered, xmap_readers, multiprocess_reader."""
from __future__ import annotations

import functools
import gc
import multiprocessing
import operator
import os
import pickle
import signal
import threading
import time

import numpy as np
import pytest
import toolz

import readers
from readers import from_sequence, np_array
from readers.parallel import (
    WorkerDiedError,
    buffered,
    multiprocess_reader,
    xmap_readers,
)

# Generous bound for "nothing hangs": far above what any step needs.
HANG = 10.0


def _wait_until(predicate, timeout: float = HANG) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _worker_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("readerkit-")]


@pytest.fixture
def no_leaks():
    """Fail a test that leaves readerkit threads or worker processes behind."""
    before = set(threading.enumerate())
    yield
    assert _wait_until(lambda: set(threading.enumerate()) <= before), _worker_threads()
    assert multiprocessing.active_children() == []


def count_to(n: int, pulled: list | None = None):
    def numbers():
        for i in range(n):
            if pulled is not None:
                pulled.append(i)
            yield i
    return numbers


def endless():
    # Far more than any test reads, yet finite, so a test that fails to stop still ends.
    yield from range(1_000_000)


def fails_at(k: int, exc: BaseException):
    def reader():
        for i in range(k):
            yield i
        raise exc
    return reader


def odd_entries():
    return [np.arange(6).reshape(2, 3), None, "", (np.zeros(2), None), 0]


def assert_same_entries(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert type(g) is type(w)
        if isinstance(w, tuple):
            assert_same_entries(list(g), list(w))
        elif isinstance(w, np.ndarray):
            assert g.dtype == w.dtype and np.array_equal(g, w)
        else:
            assert g == w


def _plus_one(x):
    return x + 1


def _slow_plus_one(x):
    time.sleep((x * 7 % 5) * 0.002)  # uneven work, so completion order differs from input order
    return x + 1


# -- buffered -----------------------------------------------------------------------------


@pytest.mark.parametrize("size", range(20))
def test_buffered_keeps_order(size):
    # Paddle's test_buffered: every size, including 0 (unbounded), keeps the order.
    r = buffered(count_to(10), size)
    assert list(r()) == list(range(10))


@pytest.mark.parametrize("size", [1, 3])
def test_buffered_bounds_prefetch(size):
    pulled: list = []
    r = buffered(count_to(50, pulled), size)
    for consumed, _ in enumerate(r(), 1):
        assert len(pulled) - consumed <= size


def test_buffered_passes_odd_entries_unharmed(no_leaks):
    assert_same_entries(list(buffered(from_sequence(odd_entries()), 2)()), odd_entries())


@pytest.mark.parametrize("exc", [ValueError("bad row 3"), KeyError("k"), RuntimeError("boom")])
def test_buffered_forwards_source_exception(exc, no_leaks):
    r = buffered(fails_at(3, exc), 2)
    got = []
    with pytest.raises(type(exc)) as info:
        for x in r():
            got.append(x)
    assert got == [0, 1, 2]
    assert str(info.value) == str(exc)


def test_buffered_reader_returning_non_iterable_raises(no_leaks):
    with pytest.raises(TypeError, match="not iterable"):
        list(buffered(lambda: 42, 2)())


def test_buffered_is_lazy(no_leaks):
    pulled: list = []
    r = buffered(count_to(5, pulled), 2)
    it = r()
    time.sleep(0.05)
    assert pulled == [] and _worker_threads() == []
    assert next(it) == 0
    it.close()


@pytest.mark.parametrize("stop", ["break", "close", "gc"])
def test_buffered_early_stop_joins_thread_and_closes_source(stop, no_leaks):
    closed_by: list = []

    def source():
        try:
            yield from endless()
        finally:
            closed_by.append(threading.current_thread().name)

    it = buffered(source, 4)()
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
    assert _worker_threads() == []  # joined before break, close or collection returned
    # The thread that iterated the source is the one that closed it.
    assert len(closed_by) == 1 and closed_by[0].startswith("readerkit-buffered")


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
    r = xmap_readers(_plus_one, count_to(10), process_num, buffer_size, order)
    for _ in range(3):
        result = list(r())
        if not order:
            result.sort()
        assert result == [i + 1 for i in range(10)]


@pytest.mark.parametrize("order", [True, False])
def test_xmap_readers_lambda_mapper_uneven_work(order, no_leaks):
    r = xmap_readers(lambda x: _slow_plus_one(x), count_to(40), 4, 10, order)
    for _ in range(3):
        result = list(r())
        assert (result if order else sorted(result)) == list(range(1, 41))


def test_xmap_readers_ordered_bounds_entries_in_flight(no_leaks):
    # Entry 0 is slow, so the other workers run ahead until their credit is spent: each may be
    # ceil(5 / 4) = 2 entries ahead of what the consumer received, and the consumer holds at
    # most one message per worker it has not yielded yet.
    mapped: list = []

    def mapper(x):
        if x == 0:
            time.sleep(0.2)
        mapped.append(x)
        return x

    r = xmap_readers(mapper, count_to(60), 4, 5, True)
    for consumed, x in enumerate(r(), 1):
        assert x == consumed - 1
        assert len(mapped) - consumed <= 2 * 2 * 4


@pytest.mark.parametrize("order", [True, False])
def test_xmap_readers_passes_odd_entries_unharmed(order, no_leaks):
    got = list(xmap_readers(lambda e: e, from_sequence(list(enumerate(odd_entries()))), 3, 4, order)())
    if order:
        assert [k for k, _ in got] == list(range(len(odd_entries())))
    assert_same_entries([e for _, e in sorted(got, key=lambda pair: pair[0])], odd_entries())


@pytest.mark.parametrize("order", [True, False])
def test_xmap_readers_forwards_mapper_exception(order, no_leaks):
    def mapper(x):
        if x == 7:
            raise ValueError(f"cannot map {x}")
        return x

    start = time.monotonic()
    with pytest.raises(ValueError, match="^cannot map 7$"):
        list(xmap_readers(mapper, endless, 3, 4, order)())
    assert time.monotonic() - start < HANG


def test_xmap_readers_ordered_raises_after_earlier_entries(no_leaks):
    got = []
    with pytest.raises(ZeroDivisionError):
        for x in xmap_readers(lambda x: 10 // (x - 5), count_to(10), 4, 8, True)():
            got.append(x)
    assert got == [10 // (x - 5) for x in range(5)]


@pytest.mark.parametrize("order", [True, False])
def test_xmap_readers_forwards_source_exception(order, no_leaks):
    with pytest.raises(OSError, match="disk gone"):
        list(xmap_readers(_plus_one, fails_at(5, OSError("disk gone")), 2, 3, order)())


@pytest.mark.parametrize("order", [True, False])
@pytest.mark.parametrize("stop", ["break", "gc"])
def test_xmap_readers_early_stop_joins_threads(order, stop, no_leaks):
    closed_by: list = []

    def source():
        try:
            yield from endless()
        finally:
            closed_by.append(threading.current_thread().name)

    it = xmap_readers(_slow_plus_one, source, 4, 8, order)()
    for x in it:
        if x > 10:
            break
    if stop == "gc":
        del it
        gc.collect()
    else:
        it.close()
    assert _worker_threads() == []
    # every worker reads its own pass of the source, and closes it in its own thread
    assert len(closed_by) == 4 and all(name.startswith("readerkit-xmap_readers") for name in closed_by)


def test_xmap_readers_is_lazy_and_recallable(no_leaks):
    pulled: list = []
    r = xmap_readers(_plus_one, count_to(6, pulled), 2, 2, True)
    it = r()
    assert pulled == [] and _worker_threads() == []
    other = r()
    assert next(it) == 1 and next(other) == 1
    assert list(it) == [2, 3, 4, 5, 6] and list(other) == [2, 3, 4, 5, 6]


@pytest.mark.parametrize(
    "args, error, match",
    [
        ((_plus_one, [1], 2, 2), TypeError, "zero-argument callable"),
        ((None, count_to(2), 2, 2), TypeError, "mapper must be callable"),
        ((_plus_one, count_to(2), 0, 2), ValueError, "process_num must be at least 1"),
        ((_plus_one, count_to(2), 2, 0), ValueError, "buffer_size must be at least 1"),
        ((_plus_one, count_to(2), "4", 2), TypeError, "process_num must be an int"),
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
                   readers.xmap_readers(_plus_one, process_num=2, buffer_size=2, order=True))
    assert list(r()) == [1, 2, 3, 4]


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


@pytest.mark.parametrize("use_pipe", [True, False])
def test_multiprocess_reader_passes_odd_entries_unharmed(use_pipe, no_leaks):
    arrays = np.arange(12.0).reshape(4, 3)
    got = list(multiprocess_reader([from_sequence(odd_entries())], use_pipe)())
    assert_same_entries(got, odd_entries())
    rows = list(multiprocess_reader([np_array(arrays)], use_pipe)())
    assert_same_entries(rows, list(arrays))


@pytest.mark.parametrize("use_pipe", [True, False])
def test_multiprocess_reader_forwards_worker_exception(use_pipe, no_leaks):
    def failing_reader():
        yield 1
        raise ValueError("bad record 2")

    r = multiprocess_reader([count_to(3), failing_reader], use_pipe, start_method="fork")
    start = time.monotonic()
    with pytest.raises(ValueError, match="^bad record 2$") as info:
        list(r())
    assert time.monotonic() - start < HANG
    remote = str(info.value.__cause__)
    assert "worker 1" in remote and "failing_reader" in remote
    assert 'raise ValueError("bad record 2")' in remote


class TwoArgError(Exception):
    def __init__(self, a, b):
        super().__init__(f"{a}-{b}")


def test_multiprocess_reader_unpicklable_exception_becomes_runtime_error(no_leaks):
    def reader():
        raise TwoArgError(1, 2)
        yield

    with pytest.raises(RuntimeError, match="TwoArgError: 1-2") as info:
        list(multiprocess_reader([reader], start_method="fork")())
    assert "TwoArgError" in str(info.value.__cause__)


@pytest.mark.parametrize("use_pipe", [True, False])
def test_multiprocess_reader_unpicklable_entry_raises(use_pipe, no_leaks):
    def reader():
        yield 1
        yield threading.Lock()

    with pytest.raises(TypeError, match="cannot pickle"):
        list(multiprocess_reader([reader], use_pipe, start_method="fork")())


@pytest.mark.parametrize("use_pipe", [True, False])
def test_multiprocess_reader_sigkilled_worker_raises(use_pipe, no_leaks):
    def sleeper():
        yield os.getpid()
        time.sleep(60)

    r = multiprocess_reader([sleeper, count_to(5)], use_pipe, start_method="fork")
    it = r()
    pid = next(x for x in it if x >= 5)  # the others are small ints
    os.kill(pid, signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(WorkerDiedError, match=r"worker 0 \(.*sleeper\) was killed by SIGKILL"):
        for _ in it:
            pass
    assert time.monotonic() - start < HANG


@pytest.mark.parametrize("use_pipe", [True, False])
def test_multiprocess_reader_early_break_stops_processes(use_pipe, no_leaks):
    r = multiprocess_reader([endless, endless], use_pipe, queue_size=4, start_method="fork")
    it = r()
    assert len([x for _, x in zip(range(50), it)]) == 50
    assert len(multiprocessing.active_children()) == 2
    it.close()
    assert multiprocessing.active_children() == []


def _marks_when_closed(path):
    def reader():
        try:
            for _ in range(1_000_000):
                yield "x" * 100
        finally:
            path.touch()
    return reader


@pytest.mark.parametrize("use_pipe", [True, False])
def test_multiprocess_reader_early_stop_lets_blocked_workers_close_their_readers(
        use_pipe, tmp_path, no_leaks):
    marks = [tmp_path / "0", tmp_path / "1"]
    r = multiprocess_reader([_marks_when_closed(m) for m in marks], use_pipe, queue_size=10,
                            start_method="fork")
    it = r()
    next(it)
    time.sleep(0.3)  # long enough for the workers to fill the pipe or queue and block
    it.close()
    assert multiprocessing.active_children() == []
    assert [m.exists() for m in marks] == [True, True]  # stopped, not terminated


def test_multiprocess_reader_terminates_a_stuck_worker(no_leaks):
    def stuck():
        yield 1
        time.sleep(60)

    it = multiprocess_reader([stuck], start_method="fork")()
    assert next(it) == 1
    start = time.monotonic()
    del it
    gc.collect()
    assert multiprocessing.active_children() == []
    assert time.monotonic() - start < HANG


def test_multiprocess_reader_is_lazy_and_recallable(no_leaks):
    r = multiprocess_reader([from_sequence(range(3)), from_sequence(range(3, 6))])
    it = r()
    assert multiprocessing.active_children() == []
    assert sorted(r()) == list(range(6))
    assert sorted(it) == list(range(6))


@pytest.mark.parametrize("use_pipe", [True, False])
def test_multiprocess_reader_spawn_with_importable_readers(use_pipe, no_leaks):
    parts = [from_sequence([1, None, ""]), np_array(np.arange(4))]
    got = list(multiprocess_reader(parts, use_pipe, start_method="spawn")())
    assert sorted(x for x in got if isinstance(x, np.integer)) == [0, 1, 2, 3]
    assert [x for x in got if not isinstance(x, np.integer)] == [1, None, ""]


def test_multiprocess_reader_spawn_forwards_worker_exception(no_leaks):
    # functools.partial of a stdlib function pickles, and raises when the worker calls it.
    r = multiprocess_reader([functools.partial(operator.truediv, 1, 0)], start_method="spawn")
    with pytest.raises(ZeroDivisionError, match="division by zero"):
        list(r())


def test_multiprocess_reader_spawn_rejects_unpicklable_reader(no_leaks):
    r = multiprocess_reader([from_sequence([1]), lambda: iter([2])], start_method="spawn")
    with pytest.raises(TypeError, match=r"worker 1 \(.*lambda.*\) cannot be pickled.*module-level"):
        list(r())


class _FailsToLoad:
    """Pickles fine, but rebuilding it in the worker raises."""

    def __call__(self):
        return iter([])

    def __reduce__(self):
        return operator.truediv, (1, 0)


def test_multiprocess_reader_spawn_reports_reader_that_cannot_load(no_leaks):
    r = multiprocess_reader([_FailsToLoad()], start_method="spawn")
    with pytest.raises(TypeError, match="worker 0 could not load its reader"):
        list(r())


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


# -- all three --------------------------------------------------------------------------------

DECORATORS = {
    "buffered": lambda reader: buffered(reader, 2),
    "xmap_readers": lambda reader: xmap_readers(_plus_one, reader, 2, 2, True),
    "multiprocess_reader": lambda reader: multiprocess_reader([reader], start_method="fork"),
}


@pytest.mark.parametrize("make", DECORATORS.values(), ids=DECORATORS.keys())
def test_workers_keyboard_interrupt_in_consumer_cleans_up(make, no_leaks):
    def slow():
        yield 1
        time.sleep(0.5)  # the consumer is blocked waiting for entry 2 when Ctrl-C comes
        yield 2

    it = make(slow)()
    next(it)
    ctrl_c = threading.Timer(0.1, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
    ctrl_c.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            list(it)
    finally:
        ctrl_c.join()


# -- regressions from the review of issue 2 ----------------------------------------------------


def _blocked_source(release: threading.Event):
    def source():
        yield 1
        release.wait(HANG)  # like a socket read that does not return
        yield 2
    return source


def _fails(x):
    raise ValueError(f"mapper failed on {x}")


@pytest.mark.parametrize("make", [lambda s: buffered(s, 4), lambda s: xmap_readers(_plus_one, s, 2, 4)])
def test_stop_returns_promptly_while_the_source_is_blocked(make, no_leaks):
    release = threading.Event()
    started = time.monotonic()
    with pytest.warns(ResourceWarning, match="did not return"):
        for _ in make(_blocked_source(release))():
            break
    assert time.monotonic() - started < HANG / 2
    release.set()  # the left-behind thread now finishes its next() and exits (no_leaks waits)


def test_xmap_mapper_error_reaches_consumer_while_source_is_blocked(no_leaks):
    release = threading.Event()
    started = time.monotonic()
    with pytest.warns(ResourceWarning), pytest.raises(ValueError, match="mapper failed on 1"):
        list(xmap_readers(_fails, _blocked_source(release), 2, 4)())
    assert time.monotonic() - started < HANG / 2
    release.set()


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_multiprocess_reader_passes_differ_and_replay_with_set_pass(start_method, no_leaks):
    r = multiprocess_reader([readers.shuffle(from_sequence(list(range(20))), seed=0)], start_method=start_method)
    first, second = list(r()), list(r())
    assert sorted(first) == sorted(second) == list(range(20)) and first != second
    r.set_pass(1)
    assert list(r()) == second
