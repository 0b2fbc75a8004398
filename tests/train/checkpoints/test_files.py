"""train.checkpoints.files: one atomic .npz file per checkpoint, and which checkpoint each rank resumes from."""
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import paths as _paths
from tests.helpers.child_processes import python_child
from tests.helpers.recording import MAPPING, RecordingModel, dataset
from train.checkpoints.files import (
    CheckpointError,
    checkpoints_in,
    load_checkpoint,
    load_for_rank,
    lock_folder,
    rank_folder,
    remove_checkpoints,
    save_checkpoint,
)
from train.checkpoints.settings import Checkpoints
from train.driver import train

ROOT = _paths.ROOT


def test_checkpoint_round_trips_arrays_numbers_and_meta_without_pickle(tmp_path):
    state = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "step": 7}
    path = save_checkpoint(str(tmp_path), state, {"pass": 1, "cursor": 32, "seed": [2, 1]})
    assert path == str(tmp_path / "checkpoint.npz")
    loaded, meta = load_checkpoint(str(tmp_path))
    assert loaded["w"].dtype == np.float32 and loaded["w"].tolist() == state["w"].tolist() and int(loaded["step"]) == 7
    assert meta == {"pass": 1, "cursor": 32, "seed": [2, 1]}
    with np.load(path, allow_pickle=False) as archive:  # readable without pickle
        assert sorted(archive.files) == ["meta", "model/step", "model/w"]


def test_save_replaces_the_previous_checkpoint_and_leaves_no_part_file(tmp_path):
    save_checkpoint(str(tmp_path), {"w": np.zeros(2)}, {"pass": 0})
    save_checkpoint(str(tmp_path), {"w": np.ones(2)}, {"pass": 1})
    state, meta = load_checkpoint(str(tmp_path))
    assert state["w"].tolist() == [1.0, 1.0] and meta == {"pass": 1}
    assert os.listdir(tmp_path) == ["checkpoint.npz"]


def test_save_refuses_state_that_is_not_numeric(tmp_path):
    with pytest.raises(TypeError, match="model state 'names' is not numeric"):
        save_checkpoint(str(tmp_path), {"names": ["a", None]}, {})
    assert load_checkpoint(str(tmp_path)) is None  # nothing was written


def test_stale_part_files_are_swept_by_the_next_save(tmp_path):
    (tmp_path / ".checkpoint.dead.npz.part").write_bytes(b"half")
    train(dataset(), MAPPING, 16, 1, model=RecordingModel(), checkpoints=Checkpoints(str(tmp_path)))
    assert sorted(os.listdir(tmp_path)) == [".readerkit.lock", "checkpoint.npz"]


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 not really a zip"])
def test_corrupt_checkpoint_is_a_checkpoint_error(tmp_path, content):
    (tmp_path / "checkpoint.npz").write_bytes(content)
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        train(dataset(), MAPPING, 16, 1, model=RecordingModel(), checkpoints=Checkpoints(str(tmp_path), resume=True))


def test_checkpoint_whose_meta_is_not_an_object_is_a_checkpoint_error(tmp_path):
    np.savez(tmp_path / "checkpoint.npz", meta=np.array("[1, 2]"))
    with pytest.raises(CheckpointError, match="meta data is not a JSON object"):
        load_checkpoint(str(tmp_path))


def test_rank_folder_is_the_folder_itself_for_one_process():
    assert rank_folder("ck", 0, 1) == "ck"
    assert rank_folder("ck", 2, 3) == os.path.join("ck", "rank2")


def test_load_for_rank_prefers_its_own_checkpoint_else_the_earliest(tmp_path):
    for rank, cursor in [(0, 64), (1, 32)]:
        save_checkpoint(rank_folder(str(tmp_path), rank, 2), {"rank": rank}, {"pass": 0, "cursor": cursor})
    with pytest.warns(RuntimeWarning, match=r"different positions \(rank0: pass 0, entry 64, rank1: pass 0, entry 32"):
        own = load_for_rank(str(tmp_path), 0, 2)
    assert int(own[0]["rank"]) == 0
    with pytest.warns(RuntimeWarning):
        new = load_for_rank(str(tmp_path), 2, 3)  # a rank new to the job takes the earliest position
    assert int(new[0]["rank"]) == 1
    assert load_for_rank(str(tmp_path / "empty"), 0, 2) is None


def test_a_save_leaves_a_live_writers_part_file_and_sweeps_a_dead_ones(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    with python_child("-c", "import time; time.sleep(60)") as live:
        (tmp_path / f".checkpoint.{live.pid}.abc.npz.part").write_bytes(b"being written")
        (tmp_path / f".checkpoint.{dead}.abc.npz.part").write_bytes(b"left by a kill")
        save_checkpoint(str(tmp_path), {"w": np.zeros(2)}, {"pass": 0})
        assert sorted(os.listdir(tmp_path)) == [f".checkpoint.{live.pid}.abc.npz.part", "checkpoint.npz"]


def test_a_folder_named_checkpoint_npz_is_an_error_not_no_checkpoint(tmp_path):
    """New-user trial (issue 12): --resume said "no checkpoint", then the first save died."""
    (tmp_path / "checkpoint.npz").mkdir()
    with pytest.raises(CheckpointError, match=r"checkpoint.npz is not a file \(a folder\?\)"):
        load_checkpoint(str(tmp_path))
    for flags in ({}, {"overwrite": True}, {"resume": True}):  # each refused at the start, none at a save
        with pytest.raises(CheckpointError, match=r"checkpoint.npz is not a file \(a folder\?\)"):
            train(dataset(), MAPPING, 16, 1, model=RecordingModel(), checkpoints=Checkpoints(tmp_path, **flags))
    assert (tmp_path / "checkpoint.npz").is_dir()


def test_random_bytes_are_not_reported_as_pickled_data(tmp_path):
    (tmp_path / "checkpoint.npz").write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(CheckpointError, match=r"not an .npz archive") as caught:
        load_checkpoint(str(tmp_path))
    assert "pickle" not in str(caught.value)


def test_an_npz_without_meta_is_not_a_readerkit_checkpoint(tmp_path):
    np.savez(tmp_path / "checkpoint.npz", w=np.zeros(2))
    with pytest.raises(CheckpointError, match="not a readerkit checkpoint \\(no 'meta' entry"):
        load_checkpoint(str(tmp_path))


def test_nan_weights_are_refused_naming_the_array(tmp_path):
    save_checkpoint(str(tmp_path), {"W0": np.array([1.0, np.nan], np.float32), "step": 2}, {"pass": 1})
    with pytest.raises(CheckpointError, match=r"model state 'W0' holds 1 NaN of 2 values"):
        load_checkpoint(str(tmp_path))


def test_infinite_weights_are_refused_too(tmp_path):
    save_checkpoint(str(tmp_path), {"W0": np.array([1.0, np.inf, -np.inf], np.float32)}, {"pass": 1})
    with pytest.raises(CheckpointError, match=r"model state 'W0' holds 2 infinite of 3 values"):
        load_checkpoint(str(tmp_path))


def test_a_folder_held_by_this_run_is_swept_of_every_part_file_even_a_reused_pids(tmp_path):
    """Review of issue 12: a part file whose pid a live process has taken since was never swept."""
    with python_child("-c", "import time; time.sleep(60)") as live:
        (tmp_path / f".checkpoint.{live.pid}.abc.npz.part").write_bytes(b"left by a kill long ago")
        with lock_folder(str(tmp_path)):
            save_checkpoint(str(tmp_path), {"w": np.zeros(2)}, {"pass": 0})
        assert sorted(p for p in os.listdir(tmp_path) if not p.startswith(".readerkit")) == ["checkpoint.npz"]


def test_checkpoints_in_lists_the_folders_and_the_ranks(tmp_path):
    save_checkpoint(str(tmp_path), {"w": np.zeros(1)}, {})
    save_checkpoint(str(tmp_path / "rank1"), {"w": np.zeros(1)}, {})
    (tmp_path / "ranked").mkdir()
    assert checkpoints_in(str(tmp_path)) == [str(tmp_path / "checkpoint.npz"), str(tmp_path / "rank1" / "checkpoint.npz")]
    remove_checkpoints(str(tmp_path), 1, 2)  # rank 1 removes only its own
    assert checkpoints_in(str(tmp_path)) == [str(tmp_path / "checkpoint.npz")]


def test_ctrl_c_during_a_save_is_held_until_the_checkpoint_is_whole(tmp_path, monkeypatch):
    """New-user trial (issue 12): Ctrl-C inside np.savez gave a zipfile traceback and exit 1, not 130."""
    import signal

    import train.checkpoints.files as checkpoint
    real = checkpoint.np.savez

    def interrupted_savez(f, **arrays):
        os.kill(os.getpid(), signal.SIGINT)  # arrives in the middle of the save
        real(f, **arrays)

    monkeypatch.setattr(checkpoint.np, "savez", interrupted_savez)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(str(tmp_path), {"w": np.ones(2)}, {"pass": 1})
    state, meta = load_checkpoint(str(tmp_path))  # delivered after the save: the checkpoint is whole
    assert meta == {"pass": 1} and state["w"].tolist() == [1.0, 1.0]


def test_a_sigterm_during_a_save_is_held_until_the_checkpoint_is_whole(tmp_path):
    """Second review of issue 12: SIGINT was held during a save, SIGTERM abandoned it."""
    import signal
    seen = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(os.path.exists(tmp_path / "checkpoint.npz")))
    try:
        class Raising(dict):
            def items(self):  # the signal arrives in the middle of the save
                signal.raise_signal(signal.SIGTERM)
                return super().items()
        save_checkpoint(str(tmp_path), Raising(w=np.zeros(2)), {"pass": 0})
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert seen == [True]  # delivered once, after the file was in place
