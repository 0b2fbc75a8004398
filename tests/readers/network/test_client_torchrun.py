"""A real torchrun job (2 ranks, gloo on 127.0.0.1) reading round shares from one data-provider server.

The server runs in this process (``readers.serve``); each rank of the job
(remote_job.py) reads its share of every round's global batch through
``readers.remote``. Together the ranks must read each round's batch exactly:
every sample of it once, none of another round.
"""
import json

import numpy as np
import pytest

import batching
import readers
from readers.tokenized.schedule import BatchSchedule
from tests.helpers import paths as _paths
from tests.helpers.remote_job import SCHEDULE
from tests.helpers.torchrun_job import run_torchrun

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("this torch build has no torch.distributed", allow_module_level=True)

JOB = str(_paths.ROOT / "tests" / "helpers" / "remote_job.py")
N = 23  # the 12 steps read 48 samples: the rounds cross into passes 1 and 2
STEPS, SEED = 12, 5


def round_batch(local, step: int) -> list[int]:
    """The ids of step ``step``'s global batch, read by one client alone."""
    schedule = BatchSchedule(**SCHEDULE)
    lo, size = schedule.data_index(step), schedule.batch_size(step)
    whole = readers.round_share(readers.shuffle(local, seed=SEED), {"all": (lo, lo + size - 1)}, "all")
    (column,) = next(iter(batching.collated(batching.batch(whole, size))()))
    return column.tolist()


def test_torchrun_ranks_read_each_rounds_batch_once_from_one_server(tmp_path):
    local = readers.from_arrays(np.arange(N) * 7 + 1000)  # ids that are not positions
    out = tmp_path / "result"
    with readers.serve(local, log=lambda line: None) as server:
        done = run_torchrun(JOB, "--address", server.address, "--out", out, "--steps", STEPS, "--seed", SEED,
                            timeout=120, log_dir=str(tmp_path / "torchrun-logs"))
        connections = server.stats["connections"]
    assert done.returncode == 0, done.stdout + done.stderr
    results = [json.loads((tmp_path / f"result.{rank}.json").read_text()) for rank in range(2)]
    assert [r["rank"] for r in results] == [0, 1] and results[0]["pid"] != results[1]["pid"]
    assert connections >= 2  # one (at least) for each rank

    left_out = 0
    for step in range(STEPS):
        assignment = results[0]["rounds"][step]["assignment"]
        assert results[1]["rounds"][step]["assignment"] == assignment, f"step {step}: the ranks' coordinators differ"
        read = {rank: results[rank]["rounds"][step]["ids"] for rank in range(2)}
        clients = [client for client, _ in assignment]
        left_out += sum(read[rank] is None for rank in range(2))
        assert all((read[rank] is None) == (rank not in clients) for rank in range(2)), (step, read, assignment)
        together = [i for client in clients for i in read[client]]
        assert together == round_batch(local, step), f"step {step}: {read} in the order of {assignment}"
    assert left_out == 2  # the two steps of one sample: a rank with nothing to do reads nothing
