"""Sources for the pipeline tests' torchrun trainings, built again in each rank by import string
(``run_pipeline(..., rank_source="tests.helpers.continual_ranks:blob_source")``), and a rank killer.

``killing_source`` is ``blob_source`` whose entries pass through ``_kill_once``: in rank 1 of a torchrun
job, when ``KILL_MARKER`` names a file that does not exist yet, the rank makes it and SIGKILLs itself on
its ``KILL_AFTER``-th entry read, mid-training; the restarted job (the marker exists) runs through.
"""
import os
import signal

import readers
from tests.helpers.continual_data import blobs

KILL_MARKER = "READERKIT_TEST_KILL_MARKER"
KILL_AFTER = 150
_reads = [0]


def blob_source(tasks=2, per_task=120, dim=6, seed=0):
    """The indexed reader the keys of ``blobs(...)``'s stream index."""
    return blobs(tasks=tasks, per_task=per_task, dim=dim, seed=seed)[2]


def _kill_once(entry):
    marker = os.environ.get(KILL_MARKER)
    if marker and os.environ.get("RANK") == "1" and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        _reads[0] += 1
        if _reads[0] >= KILL_AFTER and not os.path.exists(marker):
            with open(marker, "w") as f:
                f.write(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
    return entry


def killing_source(tasks=2, per_task=120, dim=6, seed=0):
    """``blob_source`` through ``_kill_once``: rank 1 of a job kills itself once, mid-training (see the module)."""
    return readers.map_readers(_kill_once, blob_source(tasks, per_task, dim, seed))


def read_shards(db, pipeline_id, trigger_id, out):
    """As a torchrun job: each rank reads its shard of a stored trigger set (sharded by global worker id, padded)
    and writes the sample ids and weights it read to ``out/rank<r>.json``."""
    import json

    import numpy as np

    rank = readers.worker_info().rank
    data = readers.trigger_set(db, pipeline_id, trigger_id, source=readers.from_arrays(np.arange(1000)))
    entries = list(readers.shard(data, equalize="pad")())
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"ids": [int(e[0]) for e in entries], "weights": [float(e[-1]) for e in entries]}, f)


if __name__ == "__main__":
    import sys

    read_shards(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])


def half_weighted():
    """An ``all`` strategy whose sets are weighted (every other sample 0.5): a weighted set under torchrun."""
    from train.continual.strategies import AllData

    class _HalfWeighted(AllData):
        name = "half-weighted"

        @property
        def spec(self):
            return "half-weighted"

        def __repr__(self):
            return "HalfWeighted()"

        def select(self):
            keys, weights = super().select()
            weights[1::2] = 0.5
            return keys, weights

    return _HalfWeighted()
