"""A real torchrun job over a sharded readerkit pipeline, and the loopback-only launcher that starts it.

``run_torchrun(script, *args)`` runs ``torch.distributed.run`` on this machine
with every listening socket on 127.0.0.1, through the package's own launcher
(``train.continual.torchrun``, which a pipeline's ``--nproc`` trainings use).

As a script under torchrun this file is the job: each rank reads
``shard(shuffle(from_arrays(ids), seed=0), equalize=MODE)`` through
``torch_dataset`` and a 2-worker DataLoader, all-reduces on every step, then
gathers the sample IDs and weights every rank saw (tensors, no pickle) and
rank 0 writes them as JSON. By hand, from the repository root (Linux)::

    PYTHONPATH=. GLOO_SOCKET_IFNAME=lo python -m train.continual.torchrun \\
        --nnodes 1 --nproc-per-node 2 tests/helpers/torchrun_job.py --equalize pad --out /tmp/result.json

Importing this module imports no torch (pytest imports it to look for doctests).
"""
import argparse
import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import time

from tests.helpers.child_processes import start_python, stop
from tests.helpers.paths import ROOT
from tests.helpers.processes import open_descriptors
from train.continual.torchrun import (
    loopback_env,
    torchrun_command,
    torchrun_on_loopback,
)

# -- launching ------------------------------------------------------------------------


def run_torchrun(script: str, *args: str, nproc: int = 2, timeout: float = 120,
                 log_dir: str | None = None) -> subprocess.CompletedProcess:
    """Run ``script`` under torchrun with ``nproc`` ranks on this machine, on 127.0.0.1 only.

    Everything started is stopped when ``timeout`` seconds pass (then
    ``subprocess.TimeoutExpired`` is raised) or on any other error.
    """
    env = loopback_env({**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                                                os.environ.get("PYTHONPATH")]))})
    command = torchrun_command([script, *args], nproc=nproc, max_restarts=0, log_dir=log_dir)[1:]
    proc = start_python(*command, env=env, text=True, session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        stop(proc, signal.SIGTERM)  # torchrun's agent passes it on to its ranks, each in a session of its own
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


# -- the job --------------------------------------------------------------------------


def _listening_addresses(port: int | None = None) -> list[str]:
    """Local addresses of TCP sockets listening on ``port``, or of this process's own listening sockets."""
    mine = {target[8:-1] for target in open_descriptors() if target.startswith("socket:[")} if port is None else set()
    found = []
    for table, size in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            address, hex_port = fields[1].split(":")
            if fields[3] != "0A" or (port is not None and int(hex_port, 16) != port):
                continue  # 0A: LISTEN
            if port is None and fields[9] not in mine:
                continue
            raw = bytes.fromhex(address)
            # /proc shows each 32-bit word in host (little-endian) order
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, size, 4))
            ip = socket.inet_ntop(socket.AF_INET if size == 4 else socket.AF_INET6, raw)
            found.append(ip.removeprefix("::ffff:"))
    return sorted(set(found))


def job(equalize: str, n: int, out: str, batch_size: int = 8, workers: int = 2) -> None:
    import numpy as np
    import torch
    import torch.distributed as dist

    import readers
    from readers.interop.torch_dataset import torch_dataset

    # short: a rank left waiting in a collective fails in seconds instead of the default 30 minutes
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    rank, world = dist.get_rank(), dist.get_world_size()
    pipeline = readers.shard(readers.shuffle(readers.from_arrays(np.arange(n)), seed=0), equalize=equalize)
    dataset = torch_dataset(pipeline)
    dataset.set_epoch(0)
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, num_workers=workers)

    ids, weights, steps = [], [], 0
    batches = iter(loader)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        batch = next(batches, None)
        # Every step all ranks all-reduce (as a gradient all-reduce would): [has a batch, weight sum].
        # A rank that ran out keeps joining with has=0, so uneven steps show up in the result
        # instead of as a hang.
        mine = torch.zeros(2, dtype=torch.float64)
        if batch is not None:
            w = batch[1] if equalize == "pad" else torch.ones(len(batch[0]), dtype=torch.float64)
            ids += batch[0].tolist()
            weights += w.tolist()
            mine += torch.tensor([1.0, float(w.sum())], dtype=torch.float64)
            steps += 1
        dist.all_reduce(mine)
        if mine[0] == 0:
            break

    def gathered(values: list, dtype: torch.dtype) -> list[list]:
        length = torch.tensor([len(values)])
        lengths = [torch.zeros_like(length) for _ in range(world)]
        dist.all_gather(lengths, length)
        longest = int(max(lengths))
        padded = torch.zeros(longest, dtype=dtype)
        padded[:len(values)] = torch.tensor(values, dtype=dtype)
        parts = [torch.zeros_like(padded) for _ in range(world)]
        dist.all_gather(parts, padded)
        return [part[:int(k)].tolist() for part, k in zip(parts, lengths)]

    result = {
        "world_size": world,
        "steps": [int(s) for s, in gathered([steps], torch.int64)],
        "ids": gathered(ids, torch.int64),
        "weights": gathered(weights, torch.float64),
        "store_listens_on": _listening_addresses(int(os.environ["MASTER_PORT"])),
        "rank0_listens_on": _listening_addresses(),
    }
    if rank == 0:
        with open(out + ".part", "w") as f:
            json.dump(result, f)
        os.replace(out + ".part", out)
    dist.destroy_process_group()


def main(argv: list[str]) -> None:
    if argv[:1] == ["--torchrun"]:
        torchrun_on_loopback(argv[1:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--equalize", choices=["pad", "drop"], required=True)
    parser.add_argument("--samples", type=int, default=1001)
    parser.add_argument("--out", required=True)
    options = parser.parse_args(argv)
    job(options.equalize, options.samples, options.out)


if __name__ == "__main__":
    main(sys.argv[1:])
