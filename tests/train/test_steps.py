"""train.steps: a run counted in steps, each reading its share of the step's global batch."""
import numpy as np
import pytest

import readers
from readers.tokenized.schedule import BatchSchedule
from train.checkpoints.files import CheckpointError, load_checkpoint
from train.checkpoints.resume import Difference, ResumeRefused
from train.checkpoints.settings import Checkpoints
from train.models.language import NextTokenMLP
from train.steps import train_steps


def _data(seed=0, n=64, seq_len=8):
    text = np.frombuffer(b"the quick brown fox jumps over the lazy dog. " * 20, np.uint8).astype(np.int32)
    windows = np.lib.stride_tricks.sliding_window_view(text, seq_len + 1)[::seq_len][:n].copy()
    return readers.shuffle(readers.np_array(windows), seed=seed)


def _model():
    return NextTokenMLP(256, context=3, embed=8, hidden=32, lr=0.01)


SCHEDULE = BatchSchedule(start=4, end=12, warmup_tokens=200, seq_len=8)


class _Reading:
    """A model that records the windows it is given and learns nothing."""

    def __init__(self):
        self.seen = []

    def step(self, batch):
        self.seen.append(batch["tokens"].copy())
        return {"loss": 1.0, "weight": 1.0, "tokens": batch["tokens"].size}

    def state_dict(self):
        return {"seen": np.concatenate(self.seen) if self.seen else np.zeros((0, 9), np.int32)}

    def load_state_dict(self, state):
        self.seen = [state["seen"]]


def test_every_sample_of_the_run_is_read_once_per_pass_whatever_the_number_of_processes(monkeypatch):
    data = _data()
    steps = 20  # data indices 0 .. SCHEDULE.data_index(20): several passes of 64 windows
    expected = np.concatenate([np.stack(list(data.run(p))) for p in range(SCHEDULE.data_index(steps) // 64 + 1)])
    expected = expected[:SCHEDULE.data_index(steps)]
    for world in (1, 3):
        seen = []
        for rank in range(world):
            monkeypatch.setenv("RANK", str(rank))
            monkeypatch.setenv("WORLD_SIZE", str(world))
            model = _Reading()
            train_steps(data, model=model, schedule=SCHEDULE, steps=steps, log_every=5)
            seen += [w for batch in model.seen for w in batch.tolist()]
        assert sorted(map(tuple, seen)) == sorted(map(tuple, expected.tolist())), world


def test_the_loss_falls_and_a_record_comes_every_log_every_steps():
    log = train_steps(_data(), model=_model(), schedule=SCHEDULE, steps=45, log_every=10)
    assert [r["step"] for r in log] == [10, 20, 30, 40, 45]
    assert log[-1]["loss"] < log[0]["loss"] and np.isclose(log[-1]["perplexity"], np.exp(log[-1]["loss"]))
    assert all(r["tokens_per_s"] > 0 for r in log)


def test_a_resumed_run_ends_with_the_weights_and_log_of_an_uninterrupted_one(tmp_path):
    whole_model = _model()
    whole = train_steps(_data(), model=whole_model, schedule=SCHEDULE, steps=30, log_every=5)
    ck = str(tmp_path / "ck")
    train_steps(_data(), model=_model(), schedule=SCHEDULE, steps=17, log_every=5,
                checkpoints=Checkpoints(ck, every=5))  # as if stopped after step 17, with a checkpoint at step 17
    assert load_checkpoint(ck)[1]["step"] == 17
    resumed_model = _model()
    resumed = train_steps(_data(), model=resumed_model, schedule=SCHEDULE, steps=30, log_every=5,
                          checkpoints=Checkpoints(ck, resume=True))
    for a, b in zip(whole_model.state_dict().values(), resumed_model.state_dict().values()):
        assert np.array_equal(a, b)
    assert [r["step"] for r in resumed] == [5, 10, 15, 17, 20, 25, 30]
    after = {r["step"]: r["loss"] for r in resumed}
    assert [after[25], after[30]] == [r["loss"] for r in whole if r["step"] in (25, 30)]  # the same steps, alike


def test_a_resume_with_another_schedule_or_data_is_refused(tmp_path):
    ck = str(tmp_path / "ck")
    train_steps(_data(), model=_model(), schedule=SCHEDULE, steps=5, checkpoints=Checkpoints(ck))
    with pytest.raises(ResumeRefused, match=r"schedule: \[4, 12, 200, 8\] then, \[4, 16, 200, 8\] now") as refused:
        train_steps(_data(), model=_model(), schedule=BatchSchedule(4, 16, 200, 8), steps=10,
                    checkpoints=Checkpoints(ck, resume=True))
    assert refused.value.settings == [Difference("schedule", [4, 12, 200, 8], [4, 16, 200, 8])]
    with pytest.raises(CheckpointError, match="pipeline: stage 0 was 'shuffle.*seed=0\\)', now '.*seed=1\\)'"):
        train_steps(_data(seed=1), model=_model(), schedule=SCHEDULE, steps=10,
                    checkpoints=Checkpoints(ck, resume=True))
    with pytest.raises(CheckpointError, match="holds a checkpoint"):
        train_steps(_data(), model=_model(), schedule=SCHEDULE, steps=10, checkpoints=Checkpoints(ck))


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="steps must be an int >= 1, got 0"):
        train_steps(_data(), model=_model(), schedule=SCHEDULE, steps=0)
    with pytest.raises(TypeError, match="train_steps: checkpoints must be a train.Checkpoints"):
        train_steps(_data(), model=_model(), schedule=SCHEDULE, steps=3, checkpoints=3)


def test_the_next_steps_windows_are_read_while_the_model_trains_on_this_one():
    import threading

    class Counted(readers.IndexedReader):
        name = "counted"

        def __init__(self):
            super().__init__()
            self.inner, self.gathers, self.changed = _data().parents[0], 0, threading.Condition()

        def __len__(self):
            return len(self.inner)

        def _get(self, i):
            return self.inner[i]

        def gather_columns(self, indices):
            with self.changed:
                self.gathers += 1
                self.changed.notify_all()
            return self.inner.gather_columns(indices)

    class Waiting(_Reading):
        def __init__(self, reader, steps):
            super().__init__()
            self.reader, self.steps, self.ahead = reader, steps, []

        def step(self, feed):
            done = len(self.seen) + 1  # steps read so far, this one included
            with self.reader.changed:  # the next step's read starts before this step ends (bounded wait)
                self.ahead.append(self.reader.changed.wait_for(
                    lambda: self.reader.gathers >= min(done + 1, self.steps), timeout=5.0))
            return super().step(feed)

    reader = Counted()
    model = Waiting(reader, 6)
    train_steps(reader, model=model, schedule=SCHEDULE, steps=6, log_every=3)
    assert model.ahead == [True] * 6 and reader.gathers == 6
