"""train.checkpoints.resume: a new run never overwrites a checkpoint, a resume needs one, and every field is checked."""
import os

import numpy as np
import pytest

import readers
from tests.helpers.recording import MAPPING, RecordingModel, dataset
from train.checkpoints.files import (
    CheckpointError,
    FolderInUse,
    hold_run,
    lock_folder,
    save_checkpoint,
)
from train.checkpoints.resume import (
    Difference,
    ResumeRefused,
    check_meta,
    claim,
    open_run,
)
from train.checkpoints.settings import Checkpoints
from train.driver import train

DATA = {"pipeline": ["from_sequence(str of 2)"], "length": 2, "content": "ab"}
META = {"pass": 1, "cursor": 0, "reader_state": {"pass": 1, "cursor": 0}, "totals": None, "history": [],
        "seed": 0, "data": DATA}


def test_new_run_into_a_folder_with_a_checkpoint_is_refused_and_leaves_it_byte_identical(tmp_path):
    """New-user trial (issue 12): --passes 1 on a 5-pass checkpoint silently trained afresh over it."""
    train(dataset(), MAPPING, 16, 2, model=RecordingModel(), checkpoints=Checkpoints(str(tmp_path)))
    before = (tmp_path / "checkpoint.npz").read_bytes()
    with pytest.raises(CheckpointError, match="holds a checkpoint .*add resume=True to continue that run, or overwrite=True"):
        train(dataset(), MAPPING, 16, 1, model=RecordingModel(), checkpoints=Checkpoints(str(tmp_path)))
    assert (tmp_path / "checkpoint.npz").read_bytes() == before


def test_overwrite_starts_over_and_removes_the_old_checkpoints(tmp_path):
    train(dataset(), MAPPING, 16, 2, model=RecordingModel(), checkpoints=Checkpoints(str(tmp_path)))
    save_checkpoint(str(tmp_path / "rank3"), {"w": np.zeros(1)}, {"pass": 9})  # of an earlier, larger job
    history = train(dataset(), MAPPING, 16, 1, model=RecordingModel(),
                    checkpoints=Checkpoints(str(tmp_path), overwrite=True))
    assert [r["pass"] for r in history] == [0]
    assert not (tmp_path / "rank3" / "checkpoint.npz").exists()


def test_resume_without_a_checkpoint_is_an_error_naming_the_folder(tmp_path):
    """New-user trial (issue 12): a mistyped --resume folder quietly started over."""
    typo = tmp_path / "chekpoints"
    with pytest.raises(CheckpointError, match=f"resume=True: {typo} does not exist; check the folder's name"):
        train(dataset(), MAPPING, 16, 1, model=RecordingModel(), checkpoints=Checkpoints(str(typo), resume=True))


def test_resume_and_overwrite_together_are_refused(tmp_path):
    with pytest.raises(ValueError, match="resume=True continues the checkpoint and overwrite=True starts over"):
        open_run(str(tmp_path), resume=True, overwrite=True, rank=0, world_size=1)


def _saved_by(folder, world_size, job=None):
    """A checkpoint as a rank of a job of ``world_size`` processes (launch ``job``) saves it."""
    meta = {"pass": 0, "job": {"world_size": world_size, "id": job}}
    return save_checkpoint(str(folder), {"w": np.zeros(1)}, meta)


def test_a_rank_of_a_new_job_sees_only_its_own_folder_and_the_folders(tmp_path):
    # rank 0 of this job saved (and may even have finished) before rank 1 started: rank 1 is not refused
    _saved_by(tmp_path / "rank0", 2)
    assert open_run(str(tmp_path), resume=False, overwrite=False, rank=1, world_size=2) is None
    with pytest.raises(CheckpointError, match="rank0"):
        open_run(str(tmp_path), resume=False, overwrite=False, rank=0, world_size=2)
    save_checkpoint(str(tmp_path), {"w": np.zeros(1)}, {"pass": 0})  # a single-process run's
    with pytest.raises(CheckpointError, match="holds a checkpoint"):
        open_run(str(tmp_path), resume=False, overwrite=False, rank=1, world_size=2)


def test_a_larger_job_refuses_to_start_beside_an_earlier_jobs_checkpoints(tmp_path, monkeypatch):
    """Review of issue 12: ranks 2 and 3 of a new job of 4 trained beside a job of 2's checkpoints."""
    for rank in (0, 1):
        _saved_by(tmp_path / f"rank{rank}", 2)
    for rank in range(4):
        with pytest.raises(CheckpointError, match=r"holds a checkpoint \(.*rank0/checkpoint.npz\); add resume=True"):
            open_run(str(tmp_path), resume=False, overwrite=False, rank=rank, world_size=4)
    # a checkpoint of another launch of a job of the same size counts too, where the launcher names launches
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "second")
    (tmp_path / "rank1" / "checkpoint.npz").unlink()
    _saved_by(tmp_path / "rank0", 2, "torchrun:first")
    with pytest.raises(CheckpointError, match="rank0"):
        open_run(str(tmp_path), resume=False, overwrite=False, rank=1, world_size=2)
    _saved_by(tmp_path / "rank0", 2, "torchrun:second")
    assert open_run(str(tmp_path), resume=False, overwrite=False, rank=1, world_size=2) is None
    # a rank that holds its folder now is one of this job, whatever it recorded
    with hold_run(str(tmp_path), 0, 4), hold_run(str(tmp_path), 1, 4):
        assert open_run(str(tmp_path), resume=False, overwrite=False, rank=2, world_size=4) is None


def test_a_job_of_another_size_cannot_start_beside_a_live_job(tmp_path):
    """Review of issue 12: ranks 2 and 3 of a job of 4 started beside a live job of 2 (ranks 0, 1 refused)."""
    with hold_run(str(tmp_path), 0, 2), hold_run(str(tmp_path), 1, 2):
        for rank in range(4):
            with pytest.raises(FolderInUse, match=f"a job of 2 processes is using {tmp_path}"):
                with hold_run(str(tmp_path), rank, 4):
                    pass
        assert not (tmp_path / "rank2").exists() and not (tmp_path / "rank3").exists()
    with hold_run(str(tmp_path), 2, 4):  # free again once the job has ended
        pass


def test_a_one_process_run_cannot_clear_a_live_jobs_folders(tmp_path):
    """Review of issue 12: a one-process --overwrite deleted the checkpoints of a job still running."""
    for rank in (0, 1):
        save_checkpoint(str(tmp_path / f"rank{rank}"), {"w": np.zeros(1)}, {"pass": 1})
    with hold_run(str(tmp_path), 1, 2):  # rank 1 of the job is live
        with pytest.raises(FolderInUse, match=f"another run is using {tmp_path} "):
            train(dataset(), MAPPING, 16, 1, model=RecordingModel(),
                  checkpoints=Checkpoints(str(tmp_path), overwrite=True))
    assert (tmp_path / "rank0" / "checkpoint.npz").exists() and (tmp_path / "rank1" / "checkpoint.npz").exists()
    with lock_folder(str(tmp_path)):  # and a job cannot start while a one-process run holds the folder
        with pytest.raises(FolderInUse):
            with hold_run(str(tmp_path), 0, 2):
                pass


def test_resume_into_a_folder_in_use_says_so_not_that_it_holds_no_checkpoint(tmp_path):
    """Review of issue 12: a --resume while another run had not saved yet said "holds no checkpoint"."""
    with lock_folder(str(tmp_path)):
        with pytest.raises(FolderInUse, match="another run is using"):
            train(dataset(), MAPPING, 16, 1, model=RecordingModel(),
                  checkpoints=Checkpoints(str(tmp_path), resume=True))


class _FailsAt:
    """A RecordingModel that fails at its first step, or at its first checkpoint (state that is no array)."""

    def __init__(self, where):
        self.inner, self.where = RecordingModel(), where

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def step(self, batch):
        if self.where == "step":
            raise RuntimeError("the model failed")
        return self.inner.step(batch)

    def state_dict(self):
        return {**self.inner.state_dict(), **({"extra": {"a": 1}} if self.where == "save" else {})}


@pytest.mark.parametrize("where", ["step", "save"])
def test_overwrite_keeps_the_old_checkpoint_until_the_new_run_saves(tmp_path, where):
    """Reviews of issue 12: --overwrite removed the checkpoint at the start, then before its own first
    save, so a run that failed first (at a step, or in that save) lost it."""
    train(dataset(), MAPPING, 16, 2, model=RecordingModel(), checkpoints=Checkpoints(str(tmp_path)))
    before = (tmp_path / "checkpoint.npz").read_bytes()
    with pytest.raises((RuntimeError, TypeError)):
        train(dataset(), MAPPING, 16, 1, model=_FailsAt(where),
              checkpoints=Checkpoints(str(tmp_path), every=1, overwrite=True))
    assert (tmp_path / "checkpoint.npz").read_bytes() == before
    train(dataset(), MAPPING, 16, 1, model=RecordingModel(), checkpoints=Checkpoints(str(tmp_path), overwrite=True))
    assert (tmp_path / "checkpoint.npz").read_bytes() != before


def test_settings_compare_as_json_and_what_json_cannot_hold_fails_at_the_start(tmp_path):
    """Review of issue 12: a tuple in config (or settings()) refused the resume of the same run, and a
    numpy number failed only at the first save."""
    train(dataset(), MAPPING, 16, 1, model=RecordingModel(),
          checkpoints=Checkpoints(str(tmp_path), config={"sizes": (4, 2), "scale": np.float32(0.5)}))
    history = train(dataset(), MAPPING, 16, 2, model=RecordingModel(),
                    checkpoints=Checkpoints(str(tmp_path), resume=True,
                                            config={"sizes": (4, 2), "scale": np.float32(0.5)}))
    assert [r["pass"] for r in history] == [0, 1]
    with pytest.raises(TypeError, match="must be JSON data; <object object at .*> \\(object\\) is not"):
        train(dataset(), MAPPING, 16, 3, model=RecordingModel(),
              checkpoints=Checkpoints(str(tmp_path), resume=True, config={"sizes": object()}))


def test_a_nested_claim_must_use_the_outer_claims_flags(tmp_path):
    """Review of issue 12: inside a resume claim a new run resumed; inside a new-run claim a resume started over."""
    train(dataset(), MAPPING, 16, 1, model=RecordingModel(), checkpoints=Checkpoints(str(tmp_path)))
    with claim(str(tmp_path), resume=True, overwrite=False, rank=0, world_size=1):
        with pytest.raises(ValueError, match="claimed already in this thread with resume=True, overwrite=False"):
            train(dataset(), MAPPING, 16, 2, model=RecordingModel(), checkpoints=Checkpoints(str(tmp_path)))


def test_runs_inside_one_claim_see_what_the_runs_before_them_saved(tmp_path):
    """Review of issue 12: a second run inside one claim got the claim's stale view of the folder."""
    with claim(str(tmp_path), resume=False, overwrite=False, rank=0, world_size=1):
        train(dataset(), MAPPING, 16, 1, model=RecordingModel(), checkpoints=Checkpoints(str(tmp_path)))
        with pytest.raises(CheckpointError, match="holds a checkpoint"):
            train(dataset(), MAPPING, 16, 1, model=RecordingModel(), checkpoints=Checkpoints(str(tmp_path)))
    with claim(str(tmp_path), resume=True, overwrite=False, rank=0, world_size=1):
        first = train(dataset(), MAPPING, 16, 2, model=RecordingModel(),
                      checkpoints=Checkpoints(str(tmp_path), resume=True))
        second = train(dataset(), MAPPING, 16, 3, model=RecordingModel(),
                       checkpoints=Checkpoints(str(tmp_path), resume=True))
    assert [r["pass"] for r in first] == [0, 1] and [r["pass"] for r in second] == [0, 1, 2]
    assert second[:2] == first


def test_resume_with_another_learning_rate_is_refused_in_the_api_too(tmp_path):
    """New-user trial of issue 12: train(model=MLP(lr=0.5), resume=True) resumed a run made with lr=0.01."""
    from train.models.classifiers import MLP
    x = np.random.default_rng(0).normal(size=(64, 5)).astype(np.float32)
    data = readers.shuffle(readers.from_arrays(x, (x[:, 0] > 0).astype(np.int64)), seed=0)
    train(data, ["image", "label"], 16, 1, model=MLP(5, (8,), 2, lr=0.01), checkpoints=Checkpoints(str(tmp_path)))
    with pytest.raises(CheckpointError, match=r"model\.lr: 0\.01 then, 0\.5 now"):
        train(data, ["image", "label"], 16, 2, model=MLP(5, (8,), 2, lr=0.5),
              checkpoints=Checkpoints(str(tmp_path), resume=True))


def test_a_claim_is_reentrant_in_its_thread_and_loads_the_checkpoint_once(tmp_path, monkeypatch):
    train(dataset(), MAPPING, 16, 1, model=RecordingModel(), checkpoints=Checkpoints(str(tmp_path)))
    import train.checkpoints.files as checkpoint
    loads = []
    real = checkpoint.load_checkpoint
    monkeypatch.setattr(checkpoint, "load_checkpoint", lambda d: loads.append(d) or real(d))
    with claim(str(tmp_path), resume=True, overwrite=False, rank=0, world_size=1) as found:
        history = train(dataset(), MAPPING, 16, 2, model=RecordingModel(),
                        checkpoints=Checkpoints(str(tmp_path), resume=True))
    assert found[1]["pass"] == 1 and [r["pass"] for r in history] == [0, 1] and len(loads) == 1


@pytest.mark.parametrize("era", ["repr and length", "fingerprint, no model settings"])
def test_a_checkpoint_of_an_earlier_version_resumes_with_a_warning(tmp_path, era):
    """Reviews of issue 12: checkpoints made before fingerprints (a repr and a length), or before model
    settings were recorded, were refused."""
    train(dataset(), MAPPING, 16, 1, model=RecordingModel(), checkpoints=Checkpoints(str(tmp_path), every=3))
    from train.checkpoints.files import load_checkpoint
    state, meta = load_checkpoint(str(tmp_path))
    old = {k: v for k, v in meta.items() if k not in ("model", "job")}
    if era == "repr and length":
        old = {**{k: v for k, v in old.items() if k != "data"}, "provider": "shuffle(...)", "length": meta["data"]["length"]}
    save_checkpoint(str(tmp_path), state, old)
    with pytest.warns(RuntimeWarning, match="made by an earlier readerkit, which did not record") as caught:
        history = train(dataset(), MAPPING, 16, 2, model=RecordingModel(),
                        checkpoints=Checkpoints(str(tmp_path), resume=True))
    assert ("only the length" in str(caught[0].message)) == (era == "repr and length")
    assert [r["pass"] for r in history] == [0, 1]
    assert {"data", "model", "job"} <= set(load_checkpoint(str(tmp_path))[1])
    if era == "repr and length":
        save_checkpoint(str(tmp_path), state, {**old, "length": 3})
        with pytest.raises(CheckpointError, match="length: 3 entries per pass"), pytest.warns(RuntimeWarning):
            train(dataset(), MAPPING, 16, 2, model=RecordingModel(),
                  checkpoints=Checkpoints(str(tmp_path), resume=True))


@pytest.mark.parametrize("field, value, wanted", [
    ("pass", "1", "a whole number >= 0"),
    ("cursor", -4, "a whole number >= 0"),
    ("cursor", True, "a whole number >= 0"),
    ("reader_state", "pass 1", "the reader's get_state"),
    ("reader_state", {}, "the reader's get_state"),  # was a KeyError traceback at the start of the pass
    ("reader_state", {"pass": 1, "cursor": 7}, r"the reader's get_state\(\) at pass 1, entry 0"),
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
    with pytest.raises(CheckpointError, match=r"other settings or data \(length: 2 entries per pass, now 3\)"):
        check_meta("ck", META, {"seed": 0, "data": {**DATA, "length": 3}})
    with pytest.raises(CheckpointError, match="does not record 'seed'"):
        check_meta("ck", {k: v for k, v in META.items() if k != "seed"}, {"seed": 0, "data": DATA})


def test_a_refused_resume_carries_its_differences_as_data():
    """Issue 26: the CLI named the flags by parsing this message's prose."""
    with pytest.raises(ResumeRefused) as refused:
        check_meta("ck", {**META, "config": {"lr": 0.1, "reader": "a"}},
                   {"seed": 1, "config": {"lr": 0.2, "reader": "a"}, "data": {**DATA, "length": 3}})
    assert refused.value.settings == [Difference("seed", 0, 1), Difference("config.lr", 0.1, 0.2)]
    assert refused.value.data == ["length: 2 entries per pass, now 3"] and refused.value.directory == "ck"
    assert str(refused.value) == ("ck: the checkpoint was made with other settings or data (seed: 0 then, 1 now; "
                                  "config.lr: 0.1 then, 0.2 now; length: 2 entries per pass, now 3); resume with the "
                                  "same settings and data, or train into another checkpoint folder")


def test_a_reader_state_that_does_not_fit_names_the_field(tmp_path):
    train(dataset(), MAPPING, 16, 2, model=RecordingModel(), checkpoints=Checkpoints(str(tmp_path), every=3))
    from train.checkpoints.files import load_checkpoint
    state, meta = load_checkpoint(str(tmp_path))
    meta.update({"pass": 1, "cursor": 5, "reader_state": {"pass": 1, "cursor": 5, "layout": [[1]]}})
    save_checkpoint(str(tmp_path), state, meta)
    with pytest.raises(CheckpointError, match="field 'reader_state' does not fit this pipeline"):
        train(dataset(), MAPPING, 16, 3, model=RecordingModel(), checkpoints=Checkpoints(str(tmp_path), resume=True))
    assert os.path.exists(tmp_path / "checkpoint.npz")
