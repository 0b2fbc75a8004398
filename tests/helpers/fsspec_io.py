"""Ending fsspec's IO thread after a test, so that the test process has no thread it did not have before.

fsspec runs every async filesystem (http, s3) on one event loop in a daemon thread, ``fsspecIO``, started on first
use and kept for the life of the process, with the loop's executor threads (``asyncio_N``, aiohttp's name lookups)
beside it. A process with threads other than its main one makes prefetch start its process workers by spawn
instead of fork (``readers.workers.channels.pick_start_method``), so one test that read a URL would change how every
later test of its worker process starts its workers. ``stop_io()`` drops fsspec's cached filesystems, lets their
sessions close on the running loop, then stops the loop, joins its threads and leaves fsspec to start a fresh loop
when it is next used. A filesystem object kept past it (in a module global, a session fixture) is bound to the
stopped loop and fails on its next call: make filesystems inside the test.
"""
from __future__ import annotations

import asyncio
import gc
import sys
import threading

STOP_WAIT = 10.0  # seconds: bound on the wait for the loop's thread to end


def io_threads() -> list[str]:
    """Names of the live threads of fsspec's IO loop (its own and its executor's)."""
    return sorted(t.name for t in threading.enumerate() if t.name == "fsspecIO" or t.name.startswith("asyncio_"))


def filesystem_classes(base: type) -> list[type]:
    """``base`` and every subclass of it now imported."""
    found, todo = [], [base]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def stop_io() -> None:
    """Stop fsspec's IO loop and join its threads, if fsspec started one; fsspec starts a fresh one when needed.

    >>> stop_io()  # nothing to do where fsspec never ran a loop
    >>> io_threads()
    []
    """
    asyn = sys.modules.get("fsspec.asyn")
    if asyn is None or asyn.loop[0] is None:
        return
    loop, thread = asyn.loop[0], asyn.iothread[0]
    for cls in filesystem_classes(sys.modules["fsspec.spec"].AbstractFileSystem):
        cls.clear_instance_cache()
    gc.collect()  # the dropped filesystems' finalizers close their sessions while the loop still runs
    with asyn.get_lock():
        asyn.loop[0] = asyn.iothread[0] = None
    if loop.is_running():
        asyncio.run_coroutine_threadsafe(loop.shutdown_default_executor(), loop).result(STOP_WAIT)
        loop.call_soon_threadsafe(loop.stop)
    if thread is not None:
        thread.join(STOP_WAIT)
        if thread.is_alive():
            raise RuntimeError(f"fsspec's IO thread did not stop within {STOP_WAIT} s")
    loop.close()
