"""train.resume: a new run never overwrites a checkpoint, a resume needs one, and every field is checked."""
import os

import numpy as np
import pytest

from tests.train.recording import MAPPING, RecordingModel, dataset
from train.checkpoint import CheckpointError, save_checkpoint
from train.driver import train
from train.resume import check_meta, open_run

DATA = {"pipeline": ["from_sequence(str of 2)"], "length": 2, "content": "ab"}
META = {"pass": 1, "cursor": 0, "reader_state": {"pass": 1, "cursor": 0}, "totals": None, "history": [],
        "seed": 0, "data": DATA}


def test_new_run_into_a_folder_with_a_checkpoint_is_refused_and_leaves_it_byte_identical(tmp_path):
    """New-user trial (issue 12): --passes 1 on a 5-pass checkpoint silently trained afresh over it."""
    train(dataset(), MAPPING, 16, 2, model=RecordingModel(), checkpoint_dir=str(tmp_path))
    before = (tmp_path / "checkpoint.npz").read_bytes()
    with pytest.raises(CheckpointError, match="holds a checkpoint .*add resume=True to continue that run, or overwrite=True"):
        train(dataset(), MAPPING, 16, 1, model=RecordingModel(), checkpoint_dir=str(tmp_path))
    assert (tmp_path / "checkpoint.npz").read_bytes() == before


def test_overwrite_starts_over_and_removes_the_old_checkpoints(tmp_path):
    train(dataset(), MAPPING, 16, 2, model=RecordingModel(), checkpoint_dir=str(tmp_path))
    save_checkpoint(str(tmp_path / "rank3"), {"w": np.zeros(1)}, {"pass": 9})  # of an earlier, larger job
    history = train(dataset(), MAPPING, 16, 1, model=RecordingModel(), checkpoint_dir=str(tmp_path), overwrite=True)
    assert [r["pass"] for r in history] == [0]
    assert not (tmp_path / "rank3" / "checkpoint.npz").exists()


def test_resume_without_a_checkpoint_is_an_error_naming_the_folder(tmp_path):
    """New-user trial (issue 12): a mistyped --resume folder quietly started over."""
    typo = tmp_path / "chekpoints"
    with pytest.raises(CheckpointError, match=f"resume=True: {typo} does not exist; check the folder's name"):
        train(dataset(), MAPPING, 16, 1, model=RecordingModel(), checkpoint_dir=str(typo), resume=True)


def test_resume_and_overwrite_together_are_refused(tmp_path):
    with pytest.raises(ValueError, match="resume=True continues the checkpoint and overwrite=True starts over"):
        open_run(str(tmp_path), resume=True, overwrite=True, rank=0, world_size=1)


def test_a_rank_of_a_new_job_sees_only_its_own_folder_and_the_folders(tmp_path):
    # rank 0 of this job saved before rank 1 started: rank 1's new run is not refused for it
    save_checkpoint(str(tmp_path / "rank0"), {"w": np.zeros(1)}, {"pass": 0})
    assert open_run(str(tmp_path), resume=False, overwrite=False, rank=1, world_size=2) is None
    with pytest.raises(CheckpointError, match="rank0"):
        open_run(str(tmp_path), resume=False, overwrite=False, rank=0, world_size=2)
    save_checkpoint(str(tmp_path), {"w": np.zeros(1)}, {"pass": 0})  # a single-process run's
    with pytest.raises(CheckpointError, match="holds a checkpoint"):
        open_run(str(tmp_path), resume=False, overwrite=False, rank=1, world_size=2)


@pytest.mark.parametrize("field, value, wanted", [
    ("pass", "1", "a whole number >= 0"),
    ("cursor", -4, "a whole number >= 0"),
    ("cursor", True, "a whole number >= 0"),
    ("reader_state", "pass 1", "a JSON object"),
    ("totals", {"loss": 1.0}, "null or an object with the keys"),
    ("totals", {"loss": "x", "accuracy": 0, "weight": 0, "samples": 0, "batches": 0, "seconds": 0}, "a number"),
    ("history", "[]", "a list of pass records"),
    ("history", ["pass 0"], "an object with a 'pass' number"),
    ("data", "mnist", "an object"),
])
def test_check_meta_names_the_file_and_the_field_of_a_wrong_type(field, value, wanted):
    """New-user trial (issue 12): valid JSON of wrong types gave 'string indices must be integers'."""
    with pytest.raises(CheckpointError, match=rf"ck/checkpoint.npz: field '{field}[^']*' must be {wanted}"):
        check_meta("ck", {**META, field: value}, {"seed": 0, "data": DATA})


def test_check_meta_names_what_differs_in_the_data():
    with pytest.raises(CheckpointError, match=r"other data \(length: 2 entries per pass, now 3\)"):
        check_meta("ck", META, {"seed": 0, "data": {**DATA, "length": 3}})
    with pytest.raises(CheckpointError, match="does not record 'seed'"):
        check_meta("ck", {k: v for k, v in META.items() if k != "seed"}, {"seed": 0, "data": DATA})


def test_a_reader_state_that_does_not_fit_names_the_field(tmp_path):
    train(dataset(), MAPPING, 16, 2, model=RecordingModel(), checkpoint_dir=str(tmp_path), checkpoint_every=3)
    from train.checkpoint import load_checkpoint
    state, meta = load_checkpoint(str(tmp_path))
    meta.update({"pass": 1, "reader_state": {"pass": 1, "cursor": 5, "layout": [[1]]}})
    save_checkpoint(str(tmp_path), state, meta)
    with pytest.raises(CheckpointError, match="field 'reader_state' does not fit this pipeline"):
        train(dataset(), MAPPING, 16, 3, model=RecordingModel(), checkpoint_dir=str(tmp_path), resume=True)
    assert os.path.exists(tmp_path / "checkpoint.npz")
