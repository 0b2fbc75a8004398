"""Shared test helpers: nothing hangs, nothing leaks.

Every test under tests/ runs under a watchdog (``TEST_LIMIT``, or the seconds
of its ``@pytest.mark.limit(seconds)``): a test still running past its limit
fails, saying how long it ran and what its limit was, instead of stalling the
whole run. A test slow by nature (a whole example script, a training run) is
marked with a limit sized to it: several times what it takes alone (it may
take 5x that on a loaded machine), and above its own subprocess's timeout, so
that the message that ends it is the one that names its command. Tests that start
workers take ``no_leaks``, which fails them if readerkit threads or worker
processes outlive them. Waits are bounded by ``HANG``, the spec's promise that
a pass stops, raises or cleans up without hanging; it is a bound for a
condition to come true, never a measure of speed (timings go in benchmarks/).

(tests/fixtures.py, loaded as a plugin from setup.cfg, isolates os.environ for
the package doctests too; these helpers are for the test suite only.)
"""
from __future__ import annotations

import contextlib
import importlib.util
import multiprocessing
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.helpers.certificates import make_certificate

#: The libraries tests/helpers/s3_server.py imports: where one is missing, its doctest is not collected (the tests that
#: use it skip, through the ``s3_service`` fixture or their own importorskip).
S3_LIBRARIES = ("fsspec", "s3fs", "aiohttp", "boto3", "moto", "flask")
collect_ignore = [] if all(importlib.util.find_spec(name) for name in S3_LIBRARIES) else ["helpers/s3_server.py"]

HANG = 10.0  # seconds: generous bound for "stops, raises or cleans up without hanging"
TEST_LIMIT = 60  # seconds a test may run unless its limit mark says otherwise; then it fails rather than stall the suite
#: The limits of the watchdogs armed now, outermost first: what a test of the watchdog reads, not the timer's seconds.
ARMED: list[float] = []


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


@pytest.fixture(scope="session")
def certificate(tmp_path_factory) -> tuple[str, str]:
    """(certificate, key): PEM files of one self-signed certificate for 127.0.0.1 and localhost, made once a session
    (a worker process) for the tests of TLS; skips them where there is no openssl command."""
    return make_certificate(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="session")
def s3_service():
    """One moto S3 server a test process (tests/helpers/s3_server.py), checking signatures; no environment set.

    Session-scoped: a server takes about 0.5 s to start (moto's imports in its child process, the IAM user). Skips
    where the test extra's S3 libraries are missing.
    """
    for name in S3_LIBRARIES:
        pytest.importorskip(name)
    from tests.helpers.s3_server import serve_s3

    with serve_s3() as server:
        yield server


@pytest.fixture
def s3_server(s3_service):
    """The test process's moto S3 server (an ``S3Server``), with the environment a user sets for it during the test
    (key, secret, region, ``AWS_ENDPOINT_URL_S3``), so ``fsspec.open("s3://...")`` reaches it; s3fs's cached
    filesystems are dropped before and after. ``with s3_server.wrong_credentials():`` for a wrong secret.

    After the test, fsspec's IO thread is stopped (tests/helpers/fsspec_io.py), so that later tests of the process
    still fork their process workers: make filesystems inside the test, not in a longer-lived fixture."""
    from tests.helpers.fsspec_io import stop_io

    try:
        with s3_service.environment():
            yield s3_service
    finally:
        stop_io()


@pytest.fixture
def s3_bucket(s3_server) -> str:
    """The name of a fresh, empty bucket on ``s3_server``, for this test only."""
    return s3_server.make_bucket()


@pytest.fixture
def no_leaks():
    """Fail a test that leaves readerkit threads or worker processes behind."""
    before = set(worker_threads())
    yield
    wait_until(lambda: set(worker_threads()) <= before, HANG,
               lambda: f"the test's worker threads to end; still running: {sorted(set(worker_threads()) - before)}")
    assert multiprocessing.active_children() == []


@contextlib.contextmanager
def watchdog(limit: float) -> Iterator[None]:
    """Raise ``TimeoutError`` in the main thread once the block has run ``limit`` seconds, saying so.

    The message gives the seconds it ran and its limit, not a verdict: a test
    past its limit may hang, or be slow on a loaded machine (give it a larger
    ``@pytest.mark.limit``, or make it faster). A watchdog around part of a
    test puts the test's own back when it ends.
    """
    started = time.monotonic()

    def overran(signum, frame):
        raise TimeoutError(f"test ran {time.monotonic() - started:.1f} s, past its limit of {limit:g} s; "
                           "if it is slow rather than stuck, give it @pytest.mark.limit(seconds) or make it faster")

    previous = signal.signal(signal.SIGALRM, overran)
    outer, _ = signal.setitimer(signal.ITIMER_REAL, limit)  # not inherited by forked workers
    ARMED.append(limit)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        ARMED.pop()
        if outer:  # the enclosing watchdog's time, less what this block took
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - started), 0.001))


def pytest_configure(config):
    config.addinivalue_line("markers", "limit(seconds): the seconds this test may run before the watchdog fails it "
                                       f"(default {TEST_LIMIT}); for tests slow by nature, several times their time alone")


def limit_of(item: pytest.Item) -> float:
    """The seconds ``item`` may run: its ``limit`` mark's, else ``TEST_LIMIT``."""
    mark = item.get_closest_marker("limit")
    if mark is None:
        return TEST_LIMIT
    seconds = mark.args[0] if mark.args else mark.kwargs["seconds"]
    if not (isinstance(seconds, (int, float)) and seconds > 0):
        raise ValueError(f"{item.nodeid}: @pytest.mark.limit({seconds!r}): give the seconds, a number above 0")
    return seconds


@pytest.fixture(autouse=True)
def _watchdog(request):
    """Fail a test that runs past its limit (a pass that never ends) instead of stalling the whole run."""
    with watchdog(limit_of(request.node)):
        yield
