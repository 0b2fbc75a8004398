"""readers.launch: worker_info from the launcher's variables (torchrun, SLURM, MPI), and worker_context."""
import collections
import os
import subprocess
import sys
import threading
import types

import pytest

import readers
from readers.launch import worker_context, worker_info
from tests.helpers import paths as _paths
from tests.helpers.layouts import as_rank, set_env

LAUNCHER_PREFIXES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                     "SLURM_", "OMPI_", "PMI_", "MPI_LOCAL")


def test_worker_info_defaults_to_rank_0_of_1():
    assert worker_info() == readers.WorkerInfo(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, "none")


def test_worker_info_reads_torchrun(monkeypatch):
    set_env(monkeypatch, RANK=5, WORLD_SIZE=8, LOCAL_RANK=1, LOCAL_WORLD_SIZE=4, GROUP_RANK=1)
    info = worker_info()
    assert info == readers.WorkerInfo(rank=5, world_size=8, worker_id=0, workers_per_process=1, global_id=5,
                                      total=8, node_rank=1, num_nodes=2, local_rank=1, local_world_size=4,
                                      launcher="torchrun")
    with worker_context(2, 3):
        info = worker_info()
        assert (info.worker_id, info.workers_per_process, info.global_id, info.total) == (2, 3, 17, 24)


def test_worker_info_torchrun_without_local_variables_is_one_node(monkeypatch):
    set_env(monkeypatch, RANK=2, WORLD_SIZE=3)
    info = worker_info()
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size, info.node_rank, info.num_nodes) == (
        2, 3, 2, 3, 0, 1)


@pytest.mark.parametrize("launcher, env, expected", [
    # rank, world, local rank, local world, node, nodes
    ("slurm", dict(SLURM_PROCID=4, SLURM_STEP_NUM_TASKS=6, SLURM_LOCALID=0, SLURM_NODEID=2, SLURM_TASKS_PER_NODE="2(x3)"),
     (4, 6, 0, 2, 2, 3)),
    ("slurm", dict(SLURM_PROCID=3, SLURM_STEP_NUM_TASKS=8, SLURM_LOCALID=3, SLURM_NODEID=0, SLURM_NNODES=2), (3, 8, 3, 4, 0, 2)),
    ("slurm", dict(SLURM_PROCID=1, SLURM_STEP_NUM_TASKS=2), (1, 2, 0, 2, 0, 1)),
    ("slurm", dict(SLURM_PROCID=1, SLURM_STEP_NUM_TASKS=4, SLURM_NTASKS_PER_NODE=2, SLURM_NODEID=0), (1, 4, 0, 2, 0, 2)),
    ("slurm", dict(SLURM_PROCID=0, SLURM_STEP_NUM_TASKS=5, SLURM_LOCALID=0, SLURM_NODEID=2, SLURM_TASKS_PER_NODE="2(x2),1"),
     (0, 5, 0, 1, 2, 3)),
    ("mpi", dict(OMPI_COMM_WORLD_RANK=3, OMPI_COMM_WORLD_SIZE=4, OMPI_COMM_WORLD_LOCAL_RANK=1,
          OMPI_COMM_WORLD_LOCAL_SIZE=2), (3, 4, 1, 2, 1, 2)),
    ("mpi", dict(PMI_RANK=2, PMI_SIZE=3), (2, 3, 0, 1, 2, 3)),
    ("mpi", dict(PMI_RANK=5, PMI_SIZE=6, MPI_LOCALRANKID=2, MPI_LOCALNRANKS=3), (5, 6, 2, 3, 1, 2)),
])
def test_worker_info_reads_slurm_and_mpi(monkeypatch, launcher, env, expected):
    set_env(monkeypatch, **env)
    info = worker_info()
    assert info.launcher == launcher
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size, info.node_rank,
            info.num_nodes) == expected


def test_worker_info_prefers_torchrun_then_slurm_then_mpi(monkeypatch):
    set_env(monkeypatch, OMPI_COMM_WORLD_RANK=1, OMPI_COMM_WORLD_SIZE=2)
    assert worker_info().launcher == "mpi"
    set_env(monkeypatch, SLURM_PROCID=2, SLURM_STEP_NUM_TASKS=3)
    assert worker_info()[:2] == (2, 3)
    set_env(monkeypatch, RANK=0, WORLD_SIZE=1)
    assert worker_info().launcher == "torchrun"


@pytest.mark.parametrize("env, message", [
    (dict(RANK="one", WORLD_SIZE=2), r"environment variable RANK='one' is not an int; fix or unset it"),
    (dict(RANK=0, WORLD_SIZE="2.0"), r"environment variable WORLD_SIZE='2.0' is not an int"),
    (dict(RANK=0, WORLD_SIZE=2, LOCAL_RANK="x"), r"environment variable LOCAL_RANK='x'"),
    (dict(SLURM_PROCID="a", SLURM_STEP_NUM_TASKS=2), r"environment variable SLURM_PROCID='a'"),
    (dict(SLURM_PROCID=0, SLURM_STEP_NUM_TASKS=2, SLURM_TASKS_PER_NODE="2(x"),
     r"SLURM_TASKS_PER_NODE='2\(x' is not in SLURM's '2\(x3\),1' form"),
    (dict(OMPI_COMM_WORLD_RANK=0, OMPI_COMM_WORLD_SIZE="many"), r"environment variable OMPI_COMM_WORLD_SIZE='many'"),
    (dict(PMI_RANK="?", PMI_SIZE=2), r"environment variable PMI_RANK='\?'"),
])
def test_worker_info_names_a_bad_variable(monkeypatch, env, message):
    set_env(monkeypatch, **env)
    with pytest.raises(ValueError, match=message):
        worker_info()


@pytest.mark.parametrize("env, message", [
    (dict(RANK=4, WORLD_SIZE=4), r"torchrun environment says rank 4 of world size 4.*check RANK and WORLD_SIZE"),
    (dict(RANK=-1, WORLD_SIZE=4), r"rank -1 of world size 4"),
    (dict(RANK=0, WORLD_SIZE=0), r"rank 0 of world size 0"),
    (dict(SLURM_PROCID=2, SLURM_STEP_NUM_TASKS=2), r"slurm environment says rank 2 of world size 2.*SLURM_PROCID"),
    (dict(OMPI_COMM_WORLD_RANK=3, OMPI_COMM_WORLD_SIZE=3), r"mpi environment says rank 3 of world size 3"),
    (dict(RANK=0, WORLD_SIZE=4, LOCAL_RANK=2, LOCAL_WORLD_SIZE=2), r"local rank 2 of 2 processes"),
    (dict(RANK=0, WORLD_SIZE=4, LOCAL_RANK=0, LOCAL_WORLD_SIZE=2, GROUP_RANK=2), r"node 2 of 2"),
])
def test_worker_info_rejects_a_rank_outside_the_world(monkeypatch, env, message):
    set_env(monkeypatch, **env)
    with pytest.raises(ValueError, match=message):
        worker_info()


def test_worker_info_a_slurm_batch_script_without_srun_is_one_process(monkeypatch):
    """Review of issue 4: an sbatch script is SLURM_PROCID=0 of SLURM_NTASKS, and would read 1/n of the data."""
    set_env(monkeypatch, SLURM_PROCID=0, SLURM_NTASKS=4, SLURM_NODEID=0)
    assert worker_info()[:2] == (0, 1)


@pytest.mark.parametrize("env", [dict(WORLD_SIZE=4), dict(RANK=1)])
def test_worker_info_refuses_half_a_torchrun_layout(monkeypatch, env):
    """Review of issue 4: WORLD_SIZE without RANK made every process rank 0, reading shard 0 four times."""
    set_env(monkeypatch, **env)
    with pytest.raises(ValueError, match="set both or neither"):
        worker_info()


def test_worker_context_nests_and_stays_in_its_thread():
    seen = []
    with worker_context(1, 3):
        with worker_context(0, 2):
            assert worker_info()[2:4] == (0, 2)
        assert worker_info()[2:4] == (1, 3)
        t = threading.Thread(target=lambda: seen.append(worker_info()[2:4]))
        t.start()
        t.join()
    assert seen == [(0, 1)]
    assert worker_info()[2:4] == (0, 1)


@pytest.mark.parametrize("worker_id, workers, message", [
    (2, 2, r"worker_id 2 is not below workers=2"),
    (0, 0, r"workers must be an int >= 1, got 0"),
    (-1, 2, r"worker_id must be an int >= 0, got -1"),
    (0, 1.0, r"workers must be an int >= 1, got 1.0"),
])
def test_worker_context_rejects_bad_arguments(worker_id, workers, message):
    with pytest.raises(ValueError, match=message):
        with worker_context(worker_id, workers):
            pass


def test_worker_info_asks_torch_for_the_dataloader_worker_when_torch_is_loaded(monkeypatch):
    fake = types.ModuleType("torch.utils.data")
    fake.get_worker_info = lambda: types.SimpleNamespace(id=2, num_workers=3)
    monkeypatch.setitem(sys.modules, "torch.utils.data", fake)
    set_env(monkeypatch, RANK=1, WORLD_SIZE=2)
    info = worker_info()
    assert (info.worker_id, info.workers_per_process, info.global_id, info.total) == (2, 3, 5, 6)
    with worker_context(0, 1):  # readerkit's own workers take precedence
        assert worker_info().global_id == 1
    fake.get_worker_info = lambda: None  # the main process of a DataLoader
    assert worker_info()[2:4] == (0, 1)


def test_worker_info_never_imports_torch():
    code = ("import sys, readers; info = readers.worker_info(); "
            "list(readers.shard(readers.from_sequence(range(4)))()); "
            "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch')); "
            "print(info.total)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_PREFIXES)}
    root = str(_paths.ROOT)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"


def test_worker_info_counts_each_global_worker_once():
    ids = collections.Counter()
    saved = os.environ.copy()
    try:
        for rank in range(3):
            as_rank(rank, 3, local_world=3)
            for w in range(2):
                with worker_context(w, 2):
                    info = worker_info()
                    ids[info.global_id] += 1
                    assert info.total == 6
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert sorted(ids) == list(range(6)) and set(ids.values()) == {1}


@pytest.mark.parametrize("env, expected", [
    ({}, None),
    ({"TORCHELASTIC_RUN_ID": "none"}, None),  # torchrun's default names no launch
    ({"TORCHELASTIC_RUN_ID": "a1b2"}, "torchrun:a1b2"),
    ({"SLURM_JOB_ID": "812", "SLURM_STEP_ID": "3"}, "slurm:812.3"),
    ({"PMIX_NAMESPACE": "prterun-host-1234@1"}, "pmix:prterun-host-1234@1"),
])
def test_job_id_names_the_launch_where_the_launcher_does(monkeypatch, env, expected):
    for name in ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_STEP_ID", "PMIX_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    from readers.launch import job_id
    assert job_id() == expected
