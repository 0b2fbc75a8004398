"""Child processes of the tests: this Python started in the repository root, its output read within a bound, and
the child ended, with whatever it started, however the test ends.

    with python_child("cli.py", "serve", "--port", "0", text=True) as proc:
        line = read_line(proc.stdout, 30, "the server's announcement")

Imports only the standard library and tests.helpers (tests/helpers/torchrun_job.py, run as a script, imports it).
"""
from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import IO, Any

from tests.helpers import processes
from tests.helpers.paths import ROOT

GRACE = 10.0  # seconds a child signalled by ``stop`` has to end by itself before it is killed


def start_python(*args: Any, session: bool = False, **options: Any) -> subprocess.Popen:
    """``python *args`` (this interpreter), in the repository root unless ``cwd`` is given, with its standard output
    and error piped unless given; ``session``: the child leads a session of its own, so that ``stop`` reaches
    everything it starts, even what outlives it. Other options go to ``subprocess.Popen``."""
    options = {"cwd": ROOT, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **options}
    return subprocess.Popen([sys.executable, *map(str, args)], start_new_session=session, **options)


def stop(proc: subprocess.Popen, signum: int | None = None, grace: float = GRACE) -> None:
    """End ``proc`` and all it started, wait for it and close its pipes; nothing is left whatever state it is in.

    With ``signum``, the child is sent that signal first and given ``grace``
    seconds to end. Then whatever still runs of it, of its descendants and of
    the session it leads, if any, is killed and waited for (at most ``grace``
    seconds). Those are looked for while the child is not yet reaped (its pid,
    and a session it leads, are its own until then): a child already waited
    for leaves only itself to stop.
    """
    def its_processes() -> list[processes.Identity]:
        if proc.returncode is not None:  # reaped: its pid may be another process's by now
            return []
        return processes.descendants(proc.pid) + processes.session(proc.pid)

    left = its_processes()
    if signum is not None and proc.poll() is None:
        proc.send_signal(signum)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace)
    left += its_processes()
    if proc.returncode is None:
        proc.kill()
    proc.wait()
    processes.kill(left)
    deadline = time.monotonic() + grace  # SIGKILL is not instant: the next test must not meet them
    while processes.still_running(left) and time.monotonic() < deadline:
        time.sleep(0.01)
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


@contextlib.contextmanager
def python_child(*args: Any, session: bool = False, **options: Any) -> Iterator[subprocess.Popen]:
    """``start_python(*args, ...)``, stopped (``stop``) on leaving the block, however it is left."""
    proc = start_python(*args, session=session, **options)
    try:
        yield proc
    finally:
        stop(proc)


def _read(pipe: IO, timeout: float, what: str, line: bool) -> str:
    deadline, data = time.monotonic() + timeout, b""
    while not (line and data.endswith(b"\n")):
        ready, _, _ = select.select([pipe], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise AssertionError(f"waited {timeout} s for {what}, in vain: the child wrote {data!r} and no more")
        chunk = os.read(pipe.fileno(), 1 if line else 1 << 16)
        if not chunk:
            if line:
                raise AssertionError(f"the child closed its output before {what}; it wrote {data!r}")
            break
        data += chunk
    return data.decode()


def read_line(pipe: IO, timeout: float, what: str = "a line") -> str:
    """The next line of a child's output ``pipe``, waiting at most ``timeout`` seconds; else fail saying ``what``
    was awaited. Read a byte at a time from the descriptor, so that what follows stays in the pipe; read nothing
    from the pipe's file object before (its buffer would hold what this does not see)."""
    return _read(pipe, timeout, what, line=True)


def read_to_end(pipe: IO, timeout: float, what: str = "the end of its output") -> str:
    """All that is left of a child's output ``pipe``, up to its end, waiting at most ``timeout`` seconds in all
    (a process that outlives the child may hold the pipe open); else fail saying ``what`` was awaited."""
    return _read(pipe, timeout, what, line=False)



# -- multiprocessing children -------------------------------------------------------------------


def joined(process: Any, timeout: float) -> int | None:
    """Wait at most ``timeout`` seconds for the started ``multiprocessing`` ``process`` to end; its exit code, or
    None if it hung (it is killed then)."""
    process.join(timeout)
    if process.is_alive():
        process.kill()
        process.join()
        return None
    return process.exitcode


def exit_codes(processes: list, timeout: float, gate: Any = None) -> list[int | None]:
    """Start the ``multiprocessing`` ``processes`` (and open ``gate``, a ``tests.helpers.cache_jobs.Gate``, once
    all have reached it) and give their exit codes, each as ``joined`` gives it. None is left running."""
    with contextlib.ExitStack() as entered:
        for p in processes:
            entered.enter_context(started(p))
        if gate is not None:
            gate.open(timeout)
        return [joined(p, timeout) for p in processes]


@contextlib.contextmanager
def started(process: Any) -> Iterator[Any]:
    """Start the ``multiprocessing`` ``process``; on leaving the block, kill it if it still runs, and join it."""
    process.start()
    try:
        yield process
    finally:
        if process.is_alive():
            process.kill()
        process.join()
