"""torchrun on this host with every socket on 127.0.0.1: how a pipeline's ``--nproc`` trainings are launched.

``python -m train.continual.torchrun TORCHRUN_ARGS...`` runs
``torch.distributed.run`` (torchrun's own ``main``) with its static
rendezvous store created first, on a socket already bound to
127.0.0.1:<free port> (torch's TCPStore would otherwise listen on all
interfaces, whatever address it is given), and ``--master-addr`` and
``--local-addr`` 127.0.0.1. ``loopback_env`` pins gloo to the loopback
interface. The port is never released between being chosen and being used,
so no other process can take it. Several hosts need a reachable rendezvous
instead: run torchrun itself there (the README's continual section says how).

Importing this module imports no torch.

>>> torchrun_command(["-m", "train.continual.ranks", "spec.json"], nproc=2, max_restarts=1)[1:4]
['-m', 'train.continual.torchrun', '--nnodes']
"""
from __future__ import annotations

import datetime
import os
import socket
import sys
from collections.abc import Sequence

__all__ = ["LOOPBACK", "loopback_env", "loopback_interface", "torchrun_command", "torchrun_on_loopback"]

LOOPBACK = "127.0.0.1"


def loopback_interface() -> str | None:
    """The name of this host's loopback interface (``lo``, ``lo0``), or None when it has none by those names.

    >>> loopback_interface() in ("lo", "lo0", None)
    True
    """
    names = [name for _, name in socket.if_nameindex()] if hasattr(socket, "if_nameindex") else []
    return next((name for name in names if name in ("lo", "lo0")), None)


def loopback_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (os.environ by default) with ``GLOO_SOCKET_IFNAME`` set to the loopback interface, where known:
    gloo would otherwise bind the address of the host's name.

    >>> loopback_env({})  # doctest: +ELLIPSIS
    {'GLOO_SOCKET_IFNAME': 'lo...'}
    """
    env = dict(os.environ if env is None else env)
    interface = loopback_interface()
    if interface:
        env["GLOO_SOCKET_IFNAME"] = interface
    return env


def torchrun_command(script: Sequence[str], *, nproc: int, max_restarts: int,
                     log_dir: str | None = None) -> list[str]:
    """The command that runs ``script`` (``[path, args...]`` or ``["-m", module, args...]``) as a torchrun job
    of ``nproc`` processes on this host, restarted up to ``max_restarts`` times when one fails.

    >>> torchrun_command(["job.py"], nproc=2, max_restarts=0, log_dir="logs")[4:]
    ['1', '--nproc-per-node', '2', '--max-restarts', '0', '--log-dir', 'logs', 'job.py']
    """
    command = [sys.executable, "-m", "train.continual.torchrun", "--nnodes", "1", "--nproc-per-node", str(nproc),
               "--max-restarts", str(max_restarts)]
    if log_dir is not None:
        command += ["--log-dir", log_dir]  # instead of a /tmp/torchelastic_* folder left behind
    return [*command, *script]


def torchrun_on_loopback(torchrun_args: Sequence[str]) -> None:
    """torchrun's main, with its rendezvous store already listening on 127.0.0.1 only."""
    from torch.distributed import TCPStore
    from torch.distributed.run import main

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind((LOOPBACK, 0))
    listener.listen(128)
    port = listener.getsockname()[1]
    # multi_tenant: torchrun's own TCPStore(127.0.0.1, port, is_master=True, multi_tenant=True)
    # then shares this server instead of binding a second one on all interfaces
    store = TCPStore(LOOPBACK, port, None, True, datetime.timedelta(seconds=60), wait_for_workers=False,
                     multi_tenant=True, master_listen_fd=listener.fileno())
    listener.detach()  # the store owns the descriptor now and closes it
    try:
        main(["--master-addr", LOOPBACK, "--master-port", str(port), "--local-addr", LOOPBACK, *torchrun_args])
    finally:
        del store


if __name__ == "__main__":
    torchrun_on_loopback(sys.argv[1:])
