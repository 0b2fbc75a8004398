"""Stop fsspec's IO thread (``fsspecIO``, and its event loop's executor thread ``asyncio_0``) after tests that read
URLs: while it runs, ``prefetch(mode="process")`` sees other threads than the main one and picks the ``spawn``
start method, so a later test of the same process whose reader holds a lambda fails to pickle. fsspec starts a
new loop on its next use."""
from __future__ import annotations

import contextlib

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
    fsspec.AbstractFileSystem.clear_instance_cache()
    for cls in list(getattr(fsspec.spec._Cached, "_registry", [])):  # (not every fsspec version has one)
        cls.clear_instance_cache()
    with contextlib.suppress(ImportError):
        import s3fs
        s3fs.S3FileSystem.clear_instance_cache()
    with contextlib.suppress(ImportError):
        from fsspec.implementations.http import HTTPFileSystem
        HTTPFileSystem.clear_instance_cache()
    loop.call_soon_threadsafe(loop.stop)
    thread.join(STOP_WAIT)
    if not thread.is_alive():
        with contextlib.suppress(RuntimeError):
            loop.run_until_complete(loop.shutdown_default_executor())  # joins the asyncio_0 thread
        loop.close()
        asyn.loop[0] = asyn.iothread[0] = None
