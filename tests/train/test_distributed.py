"""train() as one of several processes: sharding by rank, equal steps, elastic resume from checkpoints.

The ranks run one after another in this process, each under the environment
torchrun would give it; the numpy models need no collectives, so this checks
the data each rank trains on, not communication (tests/readers/test_torchrun.py
runs real processes).
"""
import os

import numpy as np
import pytest

import readers
from tests.train.recording import MAPPING, N, RecordingModel, dataset
from train.checkpoint import load_checkpoint
from train.driver import train
from train.events import EndIteration
from train.models import SoftmaxRegression


class WeightedRecorder(RecordingModel):
    """Records (id, weight) pairs; declares a 'weight' input as the numpy models do."""

    inputs = ("image", "label", "id")
    optional_inputs = ("weight",)

    def __init__(self, seed=0):
        super().__init__(seed)
        self.weights = np.zeros(0)

    def step(self, batch):
        self.weights = np.concatenate([self.weights, np.asarray(batch.get("weight", np.ones(len(batch["id"]))))])
        return super().step(batch)

    def state_dict(self):
        return {**super().state_dict(), "seen_weights": self.weights}

    def load_state_dict(self, state):
        state = dict(state)
        self.weights = np.asarray(state.pop("seen_weights"))
        super().load_state_dict(state)


def as_rank(rank, world):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                      GROUP_RANK=str(rank))


def run_rank(rank, world, passes=1, then=None, batch_size=16, **kwargs):
    as_rank(rank, world)
    model = WeightedRecorder()
    steps = []

    def handler(event):
        if isinstance(event, EndIteration):
            steps.append(event)
        if then is not None:
            then(event)

    train(dataset(), MAPPING, batch_size, passes, model=model, event_handler=handler, **kwargs)
    return model, len(steps)


@pytest.mark.parametrize("world", [2, 3, 4])
def test_train_shards_by_rank_with_equal_steps_and_zero_weight_padding(world):
    runs = [run_rank(r, world, passes=2) for r in range(world)]
    assert len({steps for _, steps in runs}) == 1, "every rank must take the same number of steps"
    per_rank = -(-N // world)
    for pass_id in range(2):
        real = []
        for model, _ in runs:
            ids = model.seen[pass_id * per_rank:(pass_id + 1) * per_rank]
            weights = model.weights[pass_id * per_rank:(pass_id + 1) * per_rank]
            real += ids[weights == 1.0].tolist()
            assert set(weights.tolist()) <= {0.0, 1.0}
        assert sorted(real) == list(range(N)), f"pass {pass_id} must train every sample exactly once"


def test_train_drop_mode_gives_floor_entries_per_rank():
    runs = [run_rank(r, 4, equalize="drop") for r in range(4)]
    assert [len(m.seen) for m, _ in runs] == [N // 4] * 4
    seen = np.concatenate([m.seen for m, _ in runs])
    assert len(set(seen.tolist())) == len(seen)


def test_train_unsharded_when_asked():
    model, _ = run_rank(1, 2, shard=False)
    assert sorted(model.seen.tolist()) == list(range(N))


def test_train_pad_needs_a_model_that_takes_weights():
    as_rank(0, 2)
    x, y = np.zeros((10, 3), np.float32), np.zeros(10, np.int64)
    with pytest.raises(ValueError, match="takes no 'weight' input; use equalize='drop'"):
        train(readers.from_arrays(x, y), ["image", "label"], 4, 1, model=_NoWeights(SoftmaxRegression(3, 2)))


class _NoWeights:
    inputs = ("image", "label")

    def __init__(self, inner):
        self.inner = inner

    def step(self, batch):
        return self.inner.step(batch)

    def evaluate(self, batch):
        return self.inner.evaluate(batch)


class _Crash(Exception):
    pass


def crash_after(step):
    def handler(event):
        if isinstance(event, EndIteration) and event.batch_id == step:
            raise _Crash
    return handler


# the ranks run one after another here, so those resumed first have saved again before the rest start
@pytest.mark.filterwarnings("ignore:.*checkpoints are at different positions:RuntimeWarning")
@pytest.mark.parametrize("before, after", [(4, 3), (3, 4), (2, 1)])
def test_train_resumes_on_another_world_size_exactly_once(tmp_path, before, after):
    """Ranks checkpoint at step 4, the job dies, and a job of another size finishes the pass."""
    folder = str(tmp_path)  # one folder for the job: train() keeps a subfolder per rank
    dirs = [str(tmp_path / (f"rank{r}" if before > 1 else "")) for r in range(max(before, after))]
    for rank in range(before):
        with pytest.raises(_Crash):
            run_rank(rank, before, checkpoint_dir=folder, checkpoint_every=4, then=crash_after(5), batch_size=8)
    done_before = []
    states = []
    for rank in range(before):
        state, meta = load_checkpoint(dirs[rank])
        states.append(meta["reader_state"])
        ids, weights = state["seen_ids"], state["seen_weights"]
        done_before += ids[weights == 1.0].tolist()
    assert all(s == states[0] for s in states), "ranks at the same step save the same reader state"
    assert states[0]["cursor"] == 4 * 8 * before
    # a rank new to the job resumes from another rank's checkpoint (every rank saved the same reader state);
    # the ranks of a real job start together, so here the new ones go first, before any rank saves again
    loads = [dirs[rank] if rank < before else dirs[0] for rank in range(after)]
    known = [len(load_checkpoint(d)[0]["seen_ids"]) for d in loads]
    done_after = []
    for rank in [*range(before, after), *range(min(before, after))]:
        model, _ = run_rank(rank, after, checkpoint_dir=folder, resume=True, batch_size=8)
        done_after += model.seen[known[rank]:][model.weights[known[rank]:] == 1.0].tolist()
    assert sorted(done_before + done_after) == list(range(N))


def test_train_pads_dict_entries_with_a_weight_key():
    """Review of issue 4: dict entries trained on one process but failed as (dict, weight) pairs on two."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(11, 3)).astype(np.float32), rng.integers(0, 2, 11)
    data = readers.from_sequence([{"image": a, "label": int(b)} for a, b in zip(x, y)])
    for rank in range(2):
        as_rank(rank, 2)
        history = train(data, {"image": "image", "label": "label"}, 4, 1, model=SoftmaxRegression(3, 2))
        assert history[0]["pass"] == 0


def test_resume_warns_when_rank_checkpoints_disagree(tmp_path):
    """Verification of issue 4: a stale folder from an earlier, larger job resumed a rank behind the others."""
    folder = str(tmp_path)
    for rank in range(3):
        with pytest.raises(_Crash):
            run_rank(rank, 3, checkpoint_dir=folder, checkpoint_every=2, then=crash_after(2 + 2 * (rank == 2)),
                     batch_size=8)
    as_rank(0, 3)
    from train.checkpoint import load_for_rank
    with pytest.warns(RuntimeWarning, match=r"checkpoints are at different positions \(rank0: pass 0, entry 48"):
        load_for_rank(folder, 0, 3)
