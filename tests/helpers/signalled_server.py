"""A server run until a signal (``run_until_signal``) in a process of its own, sent a second signal at the worst
moments: while its handler runs for the first (at every call the handler makes, as a signal arriving there would
run it again inside itself), or while the server drains.

Run from the repository root as ``python -m tests.helpers.signalled_server MODE`` (``reentrant`` or
``draining``); it prints ``stopped`` and exits 0 once the server has stopped. A test bounds its wait: a
deadlocked or killed server does neither.

Importing this module starts nothing (pytest imports it to look for doctests).
"""
from __future__ import annotations

import os
import signal
import sys
from typing import Any

MODES = ("reentrant", "draining")


def again_inside(handler: Any) -> None:
    """Profile the main thread so that every call the signal ``handler`` makes runs the handler again first, as a
    SIGTERM arriving at that moment would (Python runs a handler between two steps, inside the handler too). The
    nested runs are not profiled (a profile function runs unprofiled), so each nests one deep."""
    code = getattr(handler, "__func__", handler).__code__
    inside: list = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if not inside:
            if event == "call" and frame.f_code is code:
                inside.append(frame)
        elif event == "return" and frame is inside[0]:
            inside.clear()
            sys.setprofile(None)
        elif event in ("call", "c_call"):
            handler(signal.SIGTERM, None)

    sys.setprofile(profile)


def main(mode: str) -> None:
    import numpy as np

    import readers
    from readers.network.server import Server, run_until_signal

    server = Server(readers.np_array(np.arange(3)), log=lambda line: None)
    if mode == "draining":
        stop = server.stop

        def signalled_then_stop() -> None:
            os.kill(os.getpid(), signal.SIGTERM)  # the second SIGTERM, once the first has ended the serving
            stop()

        server.stop = signalled_then_stop

    def announce(host: str, port: int) -> None:
        if mode == "reentrant":
            again_inside(signal.getsignal(signal.SIGTERM))
        os.kill(os.getpid(), signal.SIGTERM)

    run_until_signal(server, "127.0.0.1", 0, announce)
    print("stopped" if server.stopping else "not stopped", flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in MODES:
        sys.exit(f"usage: python -m tests.helpers.signalled_server {'|'.join(MODES)}")
    main(sys.argv[1])
