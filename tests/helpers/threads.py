"""Where a thread is now, read from its Python stack: for a test to act once another thread waits inside some code
(a consumer blocked on its queue, a worker out of credit) instead of sleeping and hoping it does by then."""
from __future__ import annotations

import os
import sys
import threading

from tests.helpers.paths import ROOT


def running_in(thread: threading.Thread, path: str, function: str | None = None) -> bool:
    """Whether ``thread`` now runs, or waits, inside the code of ``path`` (a file or folder of the repository:
    ``"readers"``, ``"readers/workers/worker.py"``), in a function named ``function`` if one is given.

    A thread blocked in C (a lock, a queue, a pipe, a sleep) shows the Python function that called it.
    """
    where = os.path.realpath(os.path.join(ROOT, path))
    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        code = frame.f_code
        name = os.path.realpath(code.co_filename)
        if (name == where or name.startswith(where + os.sep)) and function in (None, code.co_name):
            return True
        frame = frame.f_back
    return False

