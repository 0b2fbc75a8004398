"""Stop fsspec's IO thread (``fsspecIO``, and its event loop's executor thread ``asyncio_0``) after tests that read
URLs: while it runs, ``prefetch(mode="process")`` sees other threads than the main one and picks the ``spawn``
start method, so a later test of the same process whose reader holds a lambda fails to pickle. fsspec starts a
new loop on its next use."""
from __future__ import annotations

import contextlib
import gc
import warnings

STOP_WAIT = 10.0  # seconds: bound on the wait for the IO thread to end


def stop_fsspec_io() -> None:
    """Stop and join fsspec's IO loop thread, if one runs, and drop the file systems made on it (their sessions
    belong to that loop); fsspec makes a new loop when next used."""
    try:
        import fsspec
        import fsspec.asyn as asyn
    except ImportError:
        return
    loop, thread = asyn.loop[0], asyn.iothread[0]
    if loop is None or thread is None:
        return
    for cls in _file_systems():
        for fs in list(getattr(cls, "_cache", {}).values()):  # close their sessions on their loop, then drop them
            client = getattr(fs, "_session", None) or getattr(fs, "_s3", None)
            if client is not None and getattr(fs, "loop", None) is loop:
                with contextlib.suppress(Exception):
                    asyn.sync(loop, client.close, timeout=STOP_WAIT)
        cls.clear_instance_cache()
    fsspec.AbstractFileSystem.clear_instance_cache()
    with warnings.catch_warnings():  # what is left unclosed goes now, not in a later test's gc
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    loop.call_soon_threadsafe(loop.stop)
    thread.join(STOP_WAIT)
    if not thread.is_alive():
        with contextlib.suppress(RuntimeError):
            loop.run_until_complete(loop.shutdown_default_executor())  # joins the asyncio_0 thread
        loop.close()
        asyn.loop[0] = asyn.iothread[0] = None


def _file_systems() -> list:
    """The fsspec file system classes that keep a client session on the IO loop."""
    found = []
    with contextlib.suppress(ImportError):
        from fsspec.implementations.http import HTTPFileSystem
        found.append(HTTPFileSystem)
    with contextlib.suppress(ImportError):
        import s3fs
        found.append(s3fs.S3FileSystem)
    return found
