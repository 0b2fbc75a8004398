"""The supervisor's side of nproc > 1: its checks and how it words a failed torchrun job (no torchrun here;
tests/train/continual/test_ranks.py runs the jobs)."""
import pytest

from readers.errors import BadValue
from train.continual.rank_jobs import (
    RankJobFailed,
    RankJobs,
    check_ranks,
    source_spec,
    why_failed,
)
from train.models.classifiers import MLP

ROOT_CAUSE = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 10464)  (SIGTERM)
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 10465)
  error_file: <N/A>
"""


def test_why_failed_names_the_root_cause_rank_and_its_own_error(tmp_path):
    log, errors = tmp_path / "torchrun.log", tmp_path / "error.txt"
    log.write_text(ROOT_CAUSE)
    errors.write_text("rank 0: RuntimeError: Connection closed by peer\nrank 1: BadValue: no data here\n")
    assert why_failed(str(log), str(errors)) == "rank 1 ended with exit code 1: rank 1: BadValue: no data here"


def test_why_failed_without_torchrun_summary_gives_the_last_lines(tmp_path):
    log = tmp_path / "torchrun.log"
    log.write_text("one\ntwo\n")
    assert why_failed(str(log), str(tmp_path / "none.txt")) == "one | two"


def test_nproc_1_asks_nothing_of_the_model_or_source():
    assert check_ranks(1, 2, 33, lambda seed: MLP(2, (4,), 2), 0, None) == []


@pytest.mark.parametrize("value", ["no_colon", {"kwargs": {}}, {"call": "m:f", "kwargs": [1]}, 3])
def test_source_spec_refuses_what_a_rank_cannot_call(value):
    with pytest.raises(BadValue, match="rank_source must be 'module:function'"):
        source_spec(value)


def test_a_url_password_reaches_the_ranks_environment_not_their_spec_file(tmp_path):
    """The spec is a file on disk (a shared folder, with --launcher): the password goes as PGPASSWORD instead."""
    pytest.importorskip("torch")
    from train.models import torch_classifiers
    jobs = RankJobs(nproc=2, max_restarts=0, db="postgresql://me:s3cret@127.0.0.1:1/runs", rank_source="m:f",
                    work_dir=str(tmp_path), checkpoint_every=None, keep_logs=True,
                    launcher="sh -c 'cp {spec} {spec}.seen; echo $PGPASSWORD > {spec}.pw; exit 3'")
    with pytest.raises(RankJobFailed, match="failed after 0 restart"):
        jobs.train(torch_classifiers.TorchMLP(2, (4,), 2), pipeline_id=1, trigger_id=0, training_id=7, seed=0,
                   batch_size=4, passes=1, steps=1, mapping={"image": 0, "label": 1}, weight_column=None,
                   start_from=None)
    spec = (tmp_path / "training-7" / "spec.json.seen").read_text()
    assert '"db": "postgresql://me@127.0.0.1:1/runs"' in spec and "s3cret" not in spec
    assert (tmp_path / "training-7" / "spec.json.pw").read_text().strip() == "s3cret"
