"""Shared test helpers: nothing hangs, nothing leaks.

Every test under tests/ runs under a watchdog (``TEST_LIMIT``): a test that
hangs fails with a message instead of stalling the whole run. Tests that start
workers take ``no_leaks``, which fails them if readerkit threads or worker
processes outlive them. Waits are bounded by ``HANG``, the spec's promise that
a pass stops, raises or cleans up without hanging; it is a bound for a
condition to come true, never a measure of speed (timings go in benchmarks/).

(tests/fixtures.py, loaded as a plugin from setup.cfg, isolates os.environ for
the package doctests too; these helpers are for the test suite only.)
"""
from __future__ import annotations

import multiprocessing
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

HANG = 10.0  # seconds: generous bound for "stops, raises or cleans up without hanging"
TEST_LIMIT = 60  # seconds: a test still running by then hangs, and fails rather than stall the suite


def wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    """Wait for ``predicate()`` to hold, at most ``timeout`` seconds; whether it did.

    For a thread other than the test's, which cannot fail the test; the test's own thread uses ``wait_until``.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def wait_until(predicate: Callable[[], bool], timeout: float, what: str | Callable[[], str]) -> None:
    """Wait for ``predicate()`` to hold, at most ``timeout`` seconds; else fail saying ``what`` was awaited.

    ``what`` may be a function, to describe the state at the time of failing.
    """
    if not wait_for(predicate, timeout):
        pytest.fail(f"waited {timeout} s for {what() if callable(what) else what}, in vain")


def finishes(work: Callable[[], Any], what: str, timeout: float = HANG) -> Any:
    """Run ``work()`` in a thread and return its result or raise its exception here; fail if it hangs.

    For "promptly raises / stops" checks: a hang fails with ``what`` did not
    finish, instead of stalling; how long it took is not asserted.
    """
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # handed to the test's thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="test-finishes", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        pytest.fail(f"{what} did not finish within {timeout} s: it hangs")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def worker_threads() -> list[str]:
    """Names of the live readerkit worker threads."""
    return [t.name for t in threading.enumerate() if t.name.startswith("readerkit-")]


@pytest.fixture
def no_leaks():
    """Fail a test that leaves readerkit threads or worker processes behind."""
    before = set(worker_threads())
    yield
    wait_until(lambda: set(worker_threads()) <= before, HANG,
               lambda: f"the test's worker threads to end; still running: {sorted(set(worker_threads()) - before)}")
    assert multiprocessing.active_children() == []


@pytest.fixture(autouse=True)
def _watchdog():
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
