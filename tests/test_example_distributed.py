"""examples/distributed.py runs under torchrun (2 ranks on 127.0.0.1) and as a single process."""
import re

import pytest

from tests.helpers.torchrun_job import ROOT, run_torchrun
from tests.test_examples import run_example

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("this torch build has no torch.distributed", allow_module_level=True)

EXAMPLE = f"{ROOT}/examples/distributed.py"
EPOCH = re.compile(r"^rank (\d)/(\d): epoch (\d): (\d+) steps, (\d+) samples \(\+(\d+) padding\), mean loss \d+\.\d{3}$",
                   flags=re.M)
ACCURACY = re.compile(r"^accuracy on the training data: (\d+\.\d\d)% of (\d+) samples$", flags=re.M)


def epochs(output):
    """{epoch: {rank: (world, steps, samples, padding)}} from the example's output."""
    found = {}
    for rank, world, epoch, steps, samples, pads in EPOCH.findall(output):
        found.setdefault(int(epoch), {})[int(rank)] = (int(world), int(steps), int(samples), int(pads))
    return found


@pytest.mark.limit(150)  # 4.4 s alone: two processes started by torchrun, under its own 120 s limit
def test_example_distributed_under_torchrun_takes_equal_steps_on_every_rank(tmp_path):
    done = run_torchrun(EXAMPLE, "--samples", 1001, "--epochs", 2, nproc=2, timeout=120,
                        log_dir=str(tmp_path / "torchrun-logs"))
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    found = epochs(done.stdout)
    assert sorted(found) == [0, 1], output
    for ranks in found.values():
        assert sorted(ranks) == [0, 1], output
        assert {world for world, *_ in ranks.values()} == {2}
        assert len({steps for _, steps, _, _ in ranks.values()}) == 1, f"unequal steps: {ranks}"
        # 1001 samples over 4 workers: 251 each, the 3 short ones padded with one entry of weight 0
        assert sum(samples for _, _, samples, _ in ranks.values()) == 1001
        assert sum(pads for _, _, _, pads in ranks.values()) == 3
    accuracy = ACCURACY.findall(done.stdout)
    assert len(accuracy) == 1 and accuracy[0][1] == "1001", output
    assert float(accuracy[0][0]) > 90


def test_example_distributed_runs_as_a_single_process():
    output = run_example("distributed.py", "--samples", 501, "--epochs", 1).stdout
    assert epochs(output)[0] == {0: (1, 8, 501, 1)}  # 2 DataLoader workers x 251 entries: 4 batches each
    assert ACCURACY.findall(output)[0][1] == "501"
