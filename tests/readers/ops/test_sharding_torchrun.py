"""A real torchrun job (2 ranks x 2 DataLoader workers, gloo on 127.0.0.1): shard + torch_dataset end to end."""
import json

import pytest

from tests.helpers import paths as _paths
from tests.helpers.torchrun_job import run_torchrun

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("this torch build has no torch.distributed", allow_module_level=True)

N = 1001  # not a multiple of the 4 global workers
GLOBAL_WORKERS = 4  # 2 ranks x 2 DataLoader workers
JOB = str(_paths.ROOT / "tests" / "helpers" / "torchrun_job.py")


@pytest.mark.parametrize("equalize", ["pad", "drop"])
def test_torchrun_job_sees_each_sample_once_with_equal_steps(tmp_path, equalize):
    out = tmp_path / "result.json"
    done = run_torchrun(JOB, "--equalize", equalize, "--samples", N, "--out", out, timeout=120,
                        log_dir=str(tmp_path / "torchrun-logs"))
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())

    assert result["world_size"] == 2
    steps = result["steps"]
    assert steps[0] == steps[1] > 0, f"ranks took different numbers of steps: {steps}"
    pairs = [(i, w) for ids, weights in zip(result["ids"], result["weights"]) for i, w in zip(ids, weights)]
    real = sorted(i for i, w in pairs if w == 1.0)
    pads = [(i, w) for i, w in pairs if w != 1.0]
    if equalize == "pad":
        assert real == list(range(N))
        per_worker = -(-N // GLOBAL_WORKERS)
        assert len(pads) == per_worker * GLOBAL_WORKERS - N
        assert all(w == 0.0 and 0 <= i < N for i, w in pads)
    else:
        assert pads == []
        assert len(real) == len(set(real)) == N // GLOBAL_WORKERS * GLOBAL_WORKERS
        assert set(real) <= set(range(N))
    # every socket the job listened on (rendezvous store, rank 0's gloo pairs) was on loopback
    for key in ("store_listens_on", "rank0_listens_on"):
        assert set(result[key]) <= {"127.0.0.1"}, (key, result[key])
