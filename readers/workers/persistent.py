"""Process workers kept between passes: the ``persistent=True`` of prefetch and xmap_readers.

A ``Keeper`` belongs to one stage. Its first pass starts the workers as any
pass does; at the end of a pass they are left idle instead of stopped (a pass
abandoned midway is cancelled, and what the workers had sent is taken and
dropped, so the next pass starts clean), and the next pass is one message per
worker: its pass id and cursor, so its order and seeds are exactly those of a
fresh start. A worker that died or was stopped in between is started again.

The workers stop when the keeper is closed (the stage's ``close()``, the stage
being garbage-collected, or the interpreter exiting), and by themselves when
the process that started them dies, even by SIGKILL: an idle worker waits on
its pipe, whose end of file it sees at once, and a busy one is killed by the
kernel (``PR_SET_PDEATHSIG``), or, if a thread other than the main one started
it (the kernel would kill it when that thread ends), by a thread of its own
that waits for the parent's end.

The workers run the jobs and worker contexts of the pass that started them;
a pass whose differ (the same stage read in another worker context) replaces
them.

One pass at a time uses the kept workers: a pass started while another is
still open gets workers of its own, for that pass only.
"""
from __future__ import annotations

import os
import threading
from typing import Any

from readers.workers.channels import Processes

__all__ = ["Keeper"]


class Keeper:
    """One stage's kept process workers (see the module doc).

    >>> keeper = Keeper()
    >>> keeper.running()
    False
    >>> keeper.close()  # nothing started: nothing to stop
    """

    def __init__(self) -> None:
        self.backend: Processes | None = None
        self.key: tuple | None = None  # what the kept workers run: their jobs' labels and worker contexts
        self.busy = self.closing = False
        self.lock = threading.Lock()
        self.pid = os.getpid()  # a forked child's copy starts afresh (the workers are the parent's)

    def running(self) -> bool:
        """Whether kept workers exist now (idle or in a pass)."""
        return self.backend is not None

    def open(self, pool: Any, pass_id: int, cursors: list[int]) -> Processes | None:
        """The kept workers, running pass ``pass_id`` of ``pool`` from ``cursors``; None while another pass
        holds them, for the caller to start workers of its own."""
        if self.pid != os.getpid():  # a copy forked with its process: the workers it names are not its own
            self.__init__()  # type: ignore[misc]
        with self.lock:
            if self.busy:
                return None
            self.busy, self.closing = True, False
            backend = self.backend
        key = (tuple(pool.labels), tuple(pool.contexts), getattr(pool, "blocks", False))
        try:
            if backend is not None and key != self.key:  # other jobs or contexts: other workers
                self.backend = None
                backend.stop()
                backend = None
            if backend is None:
                backend = Processes(pool, pass_id, cursors, persistent=True)
            else:
                backend.begin(pool, pass_id, cursors)
        except BaseException:
            self.backend = None
            if backend is not None:
                backend.stop()
            self.busy = False
            raise
        self.backend, self.key = backend, key
        return backend

    def release(self, backend: Processes) -> None:
        """End a pass ``open`` gave: leave the workers idle for the next, or stop them if ``close`` was
        asked for meanwhile (or the drain failed)."""
        try:
            backend.end()
        except BaseException:
            self.closing = True
            raise
        finally:
            with self.lock:
                self.busy = False
                stop, self.closing = self.closing, False
                if stop:
                    self.backend = None
            if stop:
                backend.stop()

    def close(self) -> None:
        """Stop the kept workers; during a pass, as soon as it ends. A later pass starts new ones."""
        with self.lock:
            if self.pid != os.getpid():
                return
            if self.busy:
                self.closing = True
                return
            backend, self.backend = self.backend, None
        if backend is not None:
            backend.stop()
