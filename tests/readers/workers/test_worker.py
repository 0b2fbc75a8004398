"""readers.workers.worker: inside a worker: flow control (buffer_size), messages, and exceptions sent home."""
from __future__ import annotations

import functools
import math
import operator
import threading
import traceback

import numpy as np
import pytest

from readers import map_readers, multiprocess_reader, prefetch, xmap_readers
from readers.graph import describe
from readers.workers.prefetch import buffered
from readers.workers.worker import MAX_AHEAD, Credits, cap, pump
from tests.conftest import HANG, finishes, wait_for
from tests.helpers import worker_jobs as jobs
from tests.helpers.pool_helpers import METHODS, count_to, endless, raises_after, source
from tests.helpers.threads import running_in


class TwoArgError(Exception):
    def __init__(self, a, b):
        super().__init__(f"{a}-{b}")


# -- flow control --------------------------------------------------------------------------


@pytest.mark.parametrize("limit, stats, bound", [
    (5, [0, 0.0, 0.0, 0], 5),
    (0, [0, 0.0, 0.0, 0], math.inf),
    (None, [0, 0.0, 0.0, 0], 2),  # rate unknown yet: the least
    (None, [1000, 1.0, 0.0, 0], 200),  # 1000 entries/s: 0.2 s of them
    (None, [10**9, 1.0, 0.0, 0], MAX_AHEAD),
])
def test_cap_is_the_limit_or_a_fifth_of_a_second_of_output(limit, stats, bound):
    assert cap(limit, stats) == bound


def test_credits_grant_no_more_than_the_window_and_wake_a_waiting_worker_to_stop():
    credits = Credits(3, [0, 0.0, 0.0, 0])
    assert credits.take(10) == 3
    credits.refund(1)
    assert credits.take(10) == 1  # the window is full again
    credits.give(2)  # the consumer received two
    assert credits.take(10) == 2
    taken = []
    waiting = threading.Thread(target=lambda: taken.append(credits.take(1)))
    waiting.start()
    credits.close()
    waiting.join(HANG)
    assert not waiting.is_alive(), "a worker waiting for credit was not woken by close()"
    assert taken == [0]


def test_pump_sends_the_entries_made_before_an_exception_then_raises_it():
    sent, stats = [], [0, 0.0, 0.0, 0]
    credits = Credits(0, stats)  # 0: no bound, so nothing waits for a consumer
    with pytest.raises(ValueError, match="bad row 3"):
        pump(iter(raises_after(3, ValueError("bad row 3"))()), sent.append, credits, stats)
    assert [x for message in sent for x in message] == [0, 1, 2]


def test_pump_stops_when_its_credit_is_closed():
    credits = Credits(2, [0, 0.0, 0.0, 0])
    sent = []
    credits.close()
    assert pump(iter(range(10)), sent.append, credits, [0, 0.0, 0.0, 0]) is False and sent == []


@pytest.mark.parametrize("size", [1, 3])
def test_buffered_bounds_prefetch(size):
    pulled: list = []
    r = buffered(count_to(50, pulled), size)
    for consumed, _ in enumerate(r(), 1):
        assert len(pulled) - consumed <= size


def test_xmap_readers_ordered_bounds_entries_in_flight(no_leaks):
    # Entry 0 is slow, so the other workers run ahead until their credit is spent: each may be
    # ceil(5 / 4) = 2 entries ahead of what the consumer received, and the consumer holds at
    # most one message per worker it has not yielded yet.
    mapped: list = []

    def out_of_credit(me: threading.Thread) -> bool:
        others = [t for t in threading.enumerate() if t.name.startswith("readerkit-xmap_readers-") and t is not me]
        return len(others) == 3 and all(running_in(t, "readers/workers/worker.py", "take") for t in others)

    def mapper(x):
        if x == 0:  # held back until the other workers wait for credit
            wait_for(lambda: out_of_credit(threading.current_thread()), HANG)
        mapped.append(x)
        return x

    r = xmap_readers(mapper, count_to(60), 4, 5, True)
    for consumed, x in enumerate(r(), 1):
        assert x == consumed - 1
        assert len(mapped) - consumed <= 2 * 2 * 4


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


# -- exceptions --------------------------------------------------------------------------------


@pytest.mark.parametrize("exc", [ValueError("bad row 3"), KeyError("k"), RuntimeError("boom")])
def test_buffered_forwards_source_exception(exc, no_leaks):
    r = buffered(raises_after(3, exc), 2)
    got = []
    with pytest.raises(type(exc)) as info:
        for x in r():
            got.append(x)
    assert got == [0, 1, 2]
    assert str(info.value) == str(exc)


def test_buffered_reader_returning_non_iterable_raises(no_leaks):
    with pytest.raises(TypeError, match="not iterable"):
        list(buffered(lambda: 42, 2)())


@pytest.mark.parametrize("order", [True, False])
def test_xmap_readers_forwards_mapper_exception(order, no_leaks):
    def mapper(x):
        if x == 7:
            raise ValueError(f"cannot map {x}")
        return x

    with pytest.raises(ValueError, match="^cannot map 7$"):
        finishes(lambda: list(xmap_readers(mapper, endless, 3, 4, order)()),
                 "a pass over a long source after its mapper failed")


@pytest.mark.parametrize("order", [True, False])
def test_xmap_readers_forwards_source_exception(order, no_leaks):
    with pytest.raises(OSError, match="disk gone"):
        list(xmap_readers(jobs.plus_one, raises_after(5, OSError("disk gone")), 2, 3, order)())


def test_prefetch_forwards_thread_worker_exception(no_leaks):
    r = prefetch(functools.partial(jobs.fails_at, 7, "bad row 7"), 3)
    got = []
    with pytest.raises(ValueError, match="^bad row 7$") as info:
        for x in r():
            got.append(x)
    assert got == list(range(7))
    assert "fails_at" in "".join(traceback.format_exception(info.value))  # the worker's frames


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


@pytest.mark.parametrize("use_pipe", [True, False])
def test_multiprocess_reader_forwards_worker_exception(use_pipe, no_leaks):
    def failing_reader():
        yield 1
        raise ValueError("bad record 2")

    r = multiprocess_reader([count_to(3), failing_reader], use_pipe, start_method="fork")
    with pytest.raises(ValueError, match="^bad record 2$") as info:
        finishes(lambda: list(r()), "a pass whose worker failed")
    remote = str(info.value.__cause__)
    assert "worker 1" in remote and "failing_reader" in remote
    assert 'raise ValueError("bad record 2")' in remote


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


def _with_a_lock_at(k: int, n: int):
    def reader():
        for i in range(n):
            yield (np.full(600, i), {"lock": threading.Lock()} if i == k else {"i": i})
    return reader


@pytest.mark.parametrize("k", [0, 5])  # alone in its message, and among other entries
def test_process_worker_entry_that_cannot_be_pickled_names_the_worker_the_entry_and_what_to_do(k, no_leaks):
    """Regression: the error was pickle's bare "cannot pickle '_thread.lock' object", naming no worker or entry."""
    r = prefetch(_with_a_lock_at(k, 9), 1, mode="process", start_method="fork", buffer_size=8)
    got = []
    with pytest.raises(TypeError) as info:
        finishes(lambda: got.extend(r()), "a pass whose entry cannot be pickled")
    message = str(info.value)
    assert message.startswith(f"prefetch worker 0 ({describe(r.reader)}, 1 of 1): its entry {k} is a tuple whose "
                              "item 1 is a dict whose item 'lock' is a _thread.lock, which cannot be pickled")
    assert "numpy arrays or plain data" in message and 'mode="thread"' in message
    assert [int(x[0]) for x, _ in got] == list(range(k))  # what came before it still arrives


def test_multiprocess_reader_spawn_forwards_worker_exception(no_leaks):
    # functools.partial of a stdlib function pickles, and raises when the worker calls it.
    r = multiprocess_reader([functools.partial(operator.truediv, 1, 0)], start_method="spawn")
    with pytest.raises(ZeroDivisionError, match="division by zero"):
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

