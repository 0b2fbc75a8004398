"""train.checkpoints.folders: rank folders, and locks that keep runs and jobs apart."""
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import paths as _paths
from tests.helpers.recording import MAPPING, RecordingModel, dataset
from train.checkpoints.files import save_checkpoint
from train.checkpoints.folders import (
    FolderInUse,
    held_by_this_process,
    lock_folder,
    rank_folders,
)
from train.checkpoints.settings import Checkpoints
from train.driver import train

ROOT = _paths.ROOT


def test_a_second_run_into_a_locked_folder_fails_naming_the_holder(tmp_path):
    """New-user trial (issue 12): two runs in one folder deleted each other's part files and crashed."""
    with lock_folder(str(tmp_path)):
        with pytest.raises(FolderInUse, match=rf"another run is using {tmp_path} \(pid {os.getpid()}\)"):
            train(dataset(), MAPPING, 16, 1, model=RecordingModel(), checkpoints=Checkpoints(str(tmp_path)))
    train(dataset(), MAPPING, 16, 1, model=RecordingModel(), checkpoints=Checkpoints(str(tmp_path)))  # released


def test_the_lock_is_released_when_its_holder_dies(tmp_path):
    code = ("import os, sys; from train.checkpoints.files import lock_folder\n"
            "with lock_folder(sys.argv[1]):\n    os._exit(0)")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, check=True, timeout=60,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    with lock_folder(str(tmp_path)):
        pass


def test_a_refused_nested_lock_keeps_the_outer_holders_claim(tmp_path):
    """Review of issue 12: a refused second lock_folder forgot that the first still held the folder, so
    stale part files of reused pids were no longer swept."""
    with lock_folder(str(tmp_path)):
        with pytest.raises(FolderInUse):
            with lock_folder(str(tmp_path)):
                pass
        assert held_by_this_process(str(tmp_path))
        (tmp_path / ".checkpoint.1.x.npz.part").write_bytes(b"left long ago by a pid now in use")
        save_checkpoint(str(tmp_path), {"w": np.zeros(1)}, {"pass": 0})
        assert not (tmp_path / ".checkpoint.1.x.npz.part").exists()
    assert not held_by_this_process(str(tmp_path))


def test_rank_folders_are_the_rank_subfolders_in_order(tmp_path):
    for name in ("rank10", "rank2", "ranks", "rank3.txt"):
        (tmp_path / name).mkdir()
    (tmp_path / "rank4").write_text("a file, not a folder")
    assert [os.path.basename(p) for p in rank_folders(str(tmp_path))] == ["rank10", "rank2"]
