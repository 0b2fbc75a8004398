"""Trainings as torchrun jobs (issue 31, item 3): ``run_pipeline(..., nproc=2)`` and ``pipeline run --nproc 2``.

Every torchrun start costs seconds, so the runs are shared (module fixtures) and small: a few hundred
samples, 2 ranks, a few dozen steps. The tolerance the README states: the same pipeline with nproc=2 and
nproc=1 (the same torch model in one process) gives accuracies equal to 1e-6 and model weights equal to
1e-5 (absolute) + 1e-4 (relative): DDP's average of 2 ranks' gradients of B/2 entries is one process's
gradient of B, up to float summation order.
"""
import json
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import readers  # noqa: E402
from readers.continual.store import PipelineStore  # noqa: E402
from tests.helpers import continual_ranks  # noqa: E402
from tests.helpers.continual_data import DAY, blobs, fake_mnist  # noqa: E402
from tests.helpers.paths import ROOT  # noqa: E402
from tests.helpers.torchrun_job import run_torchrun  # noqa: E402
from train.continual.config import PipelineConfigError  # noqa: E402
from train.continual.rank_jobs import RankJobFailed  # noqa: E402
from train.continual.supervisor import run_pipeline  # noqa: E402
from train.models.torch_classifiers import TorchMLP  # noqa: E402

ACCURACY_TOLERANCE = 1e-6
WEIGHTS_ATOL, WEIGHTS_RTOL = 1e-5, 1e-4
PER_TASK = 121  # odd: the last batch of every pass is padded on one rank


def _model(seed):
    return TorchMLP(6, (16,), 4, lr=0.01, seed=seed)


def _run(db, nproc, *, tasks=2, source="blob_source", strategy="all", **options):
    stream, test, _ = blobs(tasks=tasks, per_task=PER_TASK)
    source_reader = getattr(continual_ranks, source)(tasks=tasks, per_task=PER_TASK)
    return run_pipeline(stream, "time:86400", strategy, _model, db=db, test=test, source=source_reader,
                        batch_size=16, min_steps=30, task_seconds=DAY, nproc=nproc, keep_models=None,
                        rank_source={"call": f"tests.helpers.continual_ranks:{source}",
                                     "kwargs": {"tasks": tasks, "per_task": PER_TASK}}, **options)


def _models(db):
    with PipelineStore(db, create=False) as store:
        return [store.model_state(t["training_id"]) for t in store.trainings() if t["status"] == "finished"]


def _assert_same(records, reference, db, reference_db):
    assert [(r["trigger_id"], r["set_size"], r["steps"], r["passes"]) for r in records] == \
        [(r["trigger_id"], r["set_size"], r["steps"], r["passes"]) for r in reference]
    for mine, theirs in zip(records, reference):
        np.testing.assert_allclose(mine["accuracies"], theirs["accuracies"], atol=ACCURACY_TOLERANCE, rtol=0)
        np.testing.assert_allclose(mine["train_loss"], theirs["train_loss"], rtol=WEIGHTS_RTOL)
    for mine, theirs in zip(_models(db), _models(reference_db), strict=True):
        assert sorted(mine) == sorted(theirs)
        for name in theirs:
            np.testing.assert_allclose(mine[name], theirs[name], atol=WEIGHTS_ATOL, rtol=WEIGHTS_RTOL, err_msg=name)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    db = str(tmp_path_factory.mktemp("one") / "runs.db")
    return _run(db, 1), db


@pytest.fixture(scope="module")
def one_task_one_process(tmp_path_factory):
    db = str(tmp_path_factory.mktemp("one-task") / "runs.db")
    return _run(db, 1, tasks=1, source="killing_source"), db


def test_nproc_2_pipeline_equals_one_process(tmp_path, one_process):
    """Two triggers ("all" goes on from the first one's model, read from the store by the ranks)."""
    reference, reference_db = one_process
    db = str(tmp_path / "runs.db")
    records = _run(db, 2)
    assert len(records) == 2 and records[-1]["average_accuracy"] > 0.9
    _assert_same(records, reference, db, reference_db)
    with PipelineStore(db, create=False) as store:
        trainings = store.trainings()
    assert [t["status"] for t in trainings] == ["finished", "finished"]
    assert [t["progress"]["step"] for t in trainings] == [r["steps"] for r in records]  # rank 0's reports
    assert not [name for name in os.listdir(tmp_path) if name != "runs.db"]  # the work folder is gone


def test_weighted_set_under_torchrun_equals_one_process(tmp_path):
    """A set with weights: the ranks multiply them by the padding's (readers.shard's weight column)."""
    one, two = str(tmp_path / "one.db"), str(tmp_path / "two.db")
    reference = _run(one, 1, tasks=1, strategy=continual_ranks.half_weighted())
    records = _run(two, 2, tasks=1, strategy=continual_ranks.half_weighted())
    with PipelineStore(two, create=False) as store:
        assert store.trigger(1, 0).weights[:4].tolist() == [1.0, 0.5, 1.0, 0.5]
    _assert_same(records, reference, two, one)


def test_killed_rank_resumes_from_its_checkpoint_and_equals_an_uninterrupted_run(tmp_path, monkeypatch,
                                                                                   one_task_one_process):
    reference, reference_db = one_task_one_process
    marker = tmp_path / "killed"
    monkeypatch.setenv(continual_ranks.KILL_MARKER, str(marker))
    db = str(tmp_path / "runs.db")
    records = _run(db, 2, tasks=1, source="killing_source", max_restarts=1, checkpoint_every=3)
    assert marker.exists()  # rank 1 was SIGKILLed mid-training
    with PipelineStore(db, create=False) as store:
        training, = store.trainings()
    assert training["status"] == "finished"
    assert training["metrics"]["restarts"] == 1
    assert training["metrics"]["resumed_at"]["pass"] + training["metrics"]["resumed_at"]["entry"] > 0  # not anew
    assert training["progress"]["step"] == records[0]["steps"]
    _assert_same(records, reference, db, reference_db)


def test_restarts_run_out_fail_the_training_and_resume_trains_it_again(tmp_path, monkeypatch,
                                                                        one_task_one_process):
    reference, reference_db = one_task_one_process
    monkeypatch.setenv(continual_ranks.KILL_MARKER, str(tmp_path / "killed"))
    db = str(tmp_path / "runs.db")
    with pytest.raises(RankJobFailed) as failed:
        _run(db, 2, tasks=1, source="killing_source", max_restarts=0)
    message = str(failed.value)
    assert "torchrun job of 2 processes failed after 0 restart(s): rank 1 ended with exit code -9 (SIGKILL)" in message
    assert f"resume={failed.value.pipeline_id}" in message
    with PipelineStore(db, create=False) as store:
        training, = store.trainings()
    assert training["status"] == "failed" and training["error"].startswith("RankJobFailed: training 1:")
    records = _run(db, 2, tasks=1, source="killing_source", resume=failed.value.pipeline_id)  # the marker is left
    with PipelineStore(db, create=False) as store:
        assert [t["status"] for t in store.trainings()] == ["failed", "finished"]
    _assert_same(records, reference, db, reference_db)


def test_nproc_2_on_a_postgresql_store_equals_one_process_on_sqlite(postgres_server, one_task_one_process):
    """The ranks open the store by the URL the supervisor was given: the set, the progress and the model."""
    reference, reference_db = one_task_one_process
    db = postgres_server.database()
    records = _run(db, 2, tasks=1, source="killing_source")
    with PipelineStore(db, create=False) as store:
        training, = store.trainings()
    assert training["status"] == "finished" and training["progress"]["step"] == records[0]["steps"]
    _assert_same(records, reference, db, reference_db)


def test_a_launcher_of_your_own_runs_the_ranks(tmp_path, monkeypatch, one_task_one_process):
    """launcher= (--launcher): the command the supervisor runs for each training, here the loopback torchrun."""
    from train.continual.torchrun import loopback_interface

    if loopback_interface():
        monkeypatch.setenv("GLOO_SOCKET_IFNAME", loopback_interface())
    reference, reference_db = one_task_one_process
    db, work = str(tmp_path / "runs.db"), tmp_path / "shared"
    launcher = (f"{sys.executable} -m train.continual.torchrun --nnodes 1 --nproc-per-node {{nproc}} "
                "--max-restarts 0 -m train.continual.ranks {spec}")
    records = _run(db, 2, tasks=1, source="killing_source", launcher=launcher, work_dir=str(work))
    _assert_same(records, reference, db, reference_db)
    assert work.is_dir() and not list(work.iterdir())  # each finished training's folder is removed


def test_trigger_set_read_by_two_torchrun_ranks_is_the_stored_set_once(tmp_path, store_db):
    keys = np.random.default_rng(3).choice(1000, size=101, replace=False)  # odd: one rank pads
    db = store_db
    with PipelineStore(db) as store:
        p = store.register_pipeline({})
        store.add_trigger(p, 0, keys, position=101)
    result = run_torchrun(str(ROOT / "tests" / "helpers" / "continual_ranks.py"), db, str(p), "0", str(tmp_path),
                          log_dir=str(tmp_path / "logs"))
    assert result.returncode == 0, result.stderr[-2000:]
    read = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert len(read[0]["ids"]) == len(read[1]["ids"]) == 51
    real = [i for r in read for i, w in zip(r["ids"], r["weights"]) if w > 0]
    assert sorted(real) == sorted(keys.tolist())  # every stored key once, none twice
    assert sum(w == 0 for r in read for w in r["weights"]) == 1  # and one pad


@pytest.mark.parametrize("options,problem", [
    ({"nproc": 2, "model": lambda seed: __import__("train").MLP(6, (8,), 4, seed=seed)},
     "model(seed) gave MLP, a numpy model, which trains in one process (nproc=1)"),
    ({"nproc": 2, "batch_size": 15}, "batch_size must be a multiple of 2, got 15"),
    ({"nproc": 2, "rank_source": None}, "nproc=2: rank_source must be 'module:function'"),
    ({"nproc": 0}, "nproc must be an int >= 1, got 0"),
    ({"nproc": 2, "launcher": "torchrun -m train.continual.ranks spec.json"}, "launcher 'torchrun -m train.continual"
                                                                             ".ranks spec.json' has no {spec}"),
])
def test_nproc_refusals_come_before_anything_starts(tmp_path, options, problem):
    stream, test, source = blobs(tasks=1, per_task=20)
    arguments = {"model": _model, "batch_size": 16, "rank_source": "tests.helpers.continual_ranks:blob_source",
                 **options}
    with pytest.raises(PipelineConfigError, match="configuration has") as refused:
        run_pipeline(stream, "time:86400", "all", arguments.pop("model"), db=str(tmp_path / "runs.db"), test=test,
                     source=source, **arguments)
    assert any(problem in line for line in refused.value.problems), refused.value.problems
    assert not (tmp_path / "runs.db").exists()


# -- the command line ---------------------------------------------------------------------


def _cli(tmp_path, *flags):
    from click.testing import CliRunner

    import cli

    data = fake_mnist(tmp_path / "mnist", per_class=12, test_per_class=4)
    return CliRunner().invoke(cli.main, ["pipeline", "run", "--data-dir", data, "--no-download",
                                         "--trigger", "every:100000", "--strategy", "all", "--min-steps", "20",
                                         "--batch-size", "16", "--lr", "0.01", *flags])


@pytest.mark.parametrize("flags,message", [
    (["--nproc", "2"], "--nproc 2 trains each trigger under torchrun with DistributedDataParallel, which needs a torch "
                       "model: give --model torch-mlp (or torch-cnn); --model mlp is a numpy model"),
    (["--nproc", "2", "--model", "torch-mlp", "--batch-size", "15"], "--batch-size 15 is not a multiple of --nproc 2"),
])
def test_cli_nproc_refusals_name_the_option(tmp_path, flags, message):
    result = _cli(tmp_path, "--db", str(tmp_path / "runs.db"), *flags)
    assert result.exit_code == 1
    assert message in result.output
    assert not (tmp_path / "runs.db").exists()


def test_cli_nproc_2_equals_nproc_1(tmp_path):
    logs = {}
    for n in (1, 2):
        log = tmp_path / f"log{n}.json"
        result = _cli(tmp_path, "--db", str(tmp_path / f"runs{n}.db"), "--model", "torch-mlp", "--nproc", str(n),
                      "--log-json", str(log))
        assert result.exit_code == 0, result.output
        logs[n] = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["steps"] for r in logs[2]] == [r["steps"] for r in logs[1]] and len(logs[1]) == 1
    np.testing.assert_allclose(logs[2][0]["accuracies"], logs[1][0]["accuracies"], atol=ACCURACY_TOLERANCE)
    np.testing.assert_allclose(logs[2][0]["train_loss"], logs[1][0]["train_loss"], rtol=WEIGHTS_RTOL)
    for mine, theirs in zip(_models(str(tmp_path / "runs2.db")), _models(str(tmp_path / "runs1.db")), strict=True):
        for name in theirs:
            np.testing.assert_allclose(mine[name], theirs[name], atol=WEIGHTS_ATOL, rtol=WEIGHTS_RTOL, err_msg=name)


def test_rank_source_of_other_data_is_refused_by_the_ranks(tmp_path):
    stream, test, source = blobs(tasks=1, per_task=40)
    with pytest.raises(RankJobFailed, match="gives other data than the pipeline ran with"):
        run_pipeline(stream, "time:86400", "all", _model, db=str(tmp_path / "runs.db"), test=test, source=source,
                     batch_size=16, min_steps=4, task_seconds=DAY, nproc=2, max_restarts=0,
                     rank_source={"call": "tests.helpers.continual_ranks:blob_source",
                                  "kwargs": {"tasks": 1, "per_task": 40, "seed": 1}})


def test_rank_batches_make_up_the_one_process_batches():
    """The ranks' reader (shuffle(seed), then train()'s shard by global worker id, batches of B/2) gives global
    batch k = one process's batch k of B: the premise of the equality above."""
    ids = readers.from_arrays(np.arange(37))
    one = [int(e[0]) for e in readers.shuffle(ids, seed=5)()]
    ranks = [list(readers.shard(readers.shuffle(ids, seed=5), r, 2, equalize="pad")()) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) == 19
    for k in range(5):  # per-rank batches of 4, global ones of 8
        union = sorted(int(e[0]) for r in ranks for e in r[4 * k:4 * k + 4] if e[1] > 0)
        assert union == sorted(one[8 * k:8 * k + 8])
