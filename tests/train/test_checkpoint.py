"""train.checkpoint: one atomic .npz file per checkpoint, and which checkpoint each rank resumes from."""
import os

import numpy as np
import pytest

from tests.train.recording import MAPPING, RecordingModel, dataset
from train.checkpoint import (
    CheckpointError,
    load_checkpoint,
    load_for_rank,
    rank_folder,
    save_checkpoint,
)
from train.driver import train


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
    train(dataset(), MAPPING, 16, 1, model=RecordingModel(), checkpoint_dir=str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["checkpoint.npz"]


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 not really a zip"])
def test_corrupt_checkpoint_is_a_checkpoint_error(tmp_path, content):
    (tmp_path / "checkpoint.npz").write_bytes(content)
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        train(dataset(), MAPPING, 16, 1, model=RecordingModel(), checkpoint_dir=str(tmp_path), resume=True)


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
