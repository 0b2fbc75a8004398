"""train.driver: train()'s events, mapping, metrics, checkpoints, exactly-once resume after SIGKILL, and ranks."""
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

import readers
from tests.helpers import paths as _paths
from tests.helpers.recording import MAPPING, N, RecordingModel, dataset
from train.checkpoints.files import CheckpointError, load_checkpoint, load_for_rank
from train.checkpoints.settings import Checkpoints
from train.driver import train
from train.events import BeginIteration, BeginPass, EndIteration, EndPass, TestResult
from train.models.classifiers import SoftmaxRegression

ROOT = _paths.ROOT


def separable(n=256, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    return x, (x[:, 0] + x[:, 1] > 0).astype(np.int64)


def test_train_emits_events_in_order():
    x, y = separable(40)
    events = []
    train(readers.from_arrays(x, y), ["image", "label"], 16, 2, model=SoftmaxRegression(4, 2),
          event_handler=events.append, test_provider=readers.from_arrays(x, y))
    kinds = [type(e).__name__ for e in events]
    one_pass = ["BeginPass"] + ["BeginIteration", "EndIteration"] * 3 + ["EndPass", "TestResult"]
    assert kinds == one_pass * 2
    assert [e.batch_id for e in events if isinstance(e, EndIteration)] == [0, 1, 2] * 2
    assert events[0] == BeginPass(0, 3)
    assert isinstance(events[1], BeginIteration) and isinstance(events[-2], EndPass) and isinstance(events[-1], TestResult)
    assert events[-2].metrics["samples"] == 40


def test_train_learns_and_reports_history():
    x, y = separable()
    history = train(readers.shuffle(readers.from_arrays(x, y), seed=0), ["image", "label"], 32, 10,
                    model=SoftmaxRegression(4, 2, lr=0.05), test_provider=readers.from_arrays(x, y))
    assert [h["pass"] for h in history] == list(range(10))
    assert history[-1]["train_accuracy"] > 0.9 and history[-1]["test_accuracy"] > 0.9
    assert history[-1]["train_loss"] < history[0]["train_loss"]


def test_train_accepts_a_dict_mapping_with_reordered_columns():
    x, y = separable(256)
    reordered = train(readers.from_arrays(y, x), {"image": 1, "label": 0}, 16, 3, model=SoftmaxRegression(4, 2, lr=0.05))
    plain = train(readers.from_arrays(x, y), ["image", "label"], 16, 3, model=SoftmaxRegression(4, 2, lr=0.05))
    assert reordered == plain or [r["train_loss"] for r in reordered] == [r["train_loss"] for r in plain]


@pytest.mark.parametrize("mapping, match", [({"image": 0, "label": 5}, "entries have 2 columns"), ("image", "mapping must be")])
def test_train_bad_mapping_names_the_problem(mapping, match):
    x, y = separable(8)
    with pytest.raises((ValueError, TypeError), match=match):
        train(readers.from_arrays(x, y), mapping, 4, 1, model=SoftmaxRegression(4, 2))


@pytest.mark.parametrize("kwargs, error, match", [
    ({"batch_size": 0}, ValueError, "batch_size must be"), ({"passes": -1}, ValueError, "passes must be"),
    ({"checkpoints": True}, TypeError, r"checkpoints must be a train.Checkpoints\(folder, ...\), a folder's path"),
])
def test_train_bad_options_raise(kwargs, error, match):
    x, y = separable(8)
    args = {"batch_size": 4, "passes": 1, **kwargs}
    with pytest.raises(error, match=match):
        train(readers.from_arrays(x, y), ["image", "label"], args.pop("batch_size"), args.pop("passes"),
              model=SoftmaxRegression(4, 2), **args)


def test_train_takes_a_folder_as_its_checkpoints_and_its_settings_in_one_object(tmp_path):
    x, y = separable(16)
    train(readers.from_arrays(x, y), ["image", "label"], 4, 1, model=SoftmaxRegression(4, 2), checkpoints=tmp_path)
    assert load_checkpoint(str(tmp_path))[1]["pass"] == 1
    with pytest.raises(ValueError, match="resume=True continues the run in the folder and overwrite=True replaces"):
        Checkpoints(tmp_path, resume=True, overwrite=True)


def test_train_same_seed_same_weights():
    def run():
        model = RecordingModel(seed=1)
        train(dataset(), MAPPING, 16, 2, model=model)
        return model.state_dict()

    a, b = run(), run()
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_train_passes_have_different_orders_and_cover_every_sample():
    model = RecordingModel()
    train(dataset(), MAPPING, 16, 2, model=model)
    first, second = model.seen[:N], model.seen[N:]
    assert sorted(first.tolist()) == sorted(second.tolist()) == list(range(N))
    assert not np.array_equal(first, second)


def test_checkpoint_after_every_pass_and_every_n_steps(tmp_path):
    saved = []

    def handler(event):
        if isinstance(event, EndIteration):
            found = load_checkpoint(str(tmp_path))
            saved.append(None if found is None else found[1]["cursor"])

    train(dataset(), MAPPING, 16, 1, model=RecordingModel(), event_handler=handler,
          checkpoints=Checkpoints(str(tmp_path), every=5))
    # the checkpoint of step k is written after EndIteration(k) is handled
    assert saved[5] == 80 and saved[10] == 160 and saved[4] is None
    state, meta = load_checkpoint(str(tmp_path))
    assert meta["pass"] == 1 and meta["cursor"] == 0 and len(state["seen_ids"]) == N
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".part")]


def test_checkpoints_of_a_shuffle_that_draws_its_seed_are_refused_at_the_start(tmp_path):
    """Review of issue 12: seed=None draws another order on resume, which could never continue the pass."""
    x, y = np.zeros((8, 5), np.float32), np.zeros(8, np.int64)
    provider = readers.with_index(readers.shuffle(readers.from_arrays(x, y)))
    with pytest.raises(ValueError, match=r"shuffle\(seed=None\) draws a new seed in every run.*seed=0"):
        train(provider, MAPPING, 4, 1, model=RecordingModel(), checkpoints=Checkpoints(str(tmp_path)))
    assert not os.listdir(tmp_path)
    train(provider, MAPPING, 4, 1, model=RecordingModel())  # without checkpoints it is fine


@pytest.mark.parametrize("change, match", [
    ({"batch_size": 8}, "other settings or data (batch_size: 16 then, 8 now)"),
    ({"seed": 3}, "(seed: 0 then, 3 now)"),
    ({"drop_last": True}, "(drop_last: False then, True now)"),
    ({"provider": dataset(seed=1)}, "(pipeline: stage 1 was 'shuffle(buf_size=None (global), seed=0)', now 'shuffle(buf_size=None (global), seed=1)'; content: the data itself differs"),
    ({"config": {"lr": 0.1}}, "(config.lr: None then, 0.1 now)"),
    ({"seed": 3, "config": {"lr": 0.1, "momentum": 0.9}},  # every difference, not the first alone
     "(seed: 0 then, 3 now; config.lr: None then, 0.1 now; config.momentum: None then, 0.9 now)"),
])
def test_resume_refuses_a_checkpoint_of_another_run(tmp_path, change, match):
    """A resume under other settings would train some samples twice and others never (review of issue 3)."""
    train(dataset(), MAPPING, 16, 1, model=RecordingModel(), checkpoints=Checkpoints(str(tmp_path), every=3))
    args = {"provider": dataset(), "batch_size": 16, **change}
    checkpoints = Checkpoints(str(tmp_path), resume=True, config=args.pop("config", None))
    with pytest.raises(CheckpointError, match=re.escape(match)):
        train(args.pop("provider"), MAPPING, args.pop("batch_size"), 2, model=RecordingModel(),
              checkpoints=checkpoints, **args)


def test_resumed_pass_reports_its_total_and_first_batch(tmp_path):
    code = KILLED_RUN.format(kill_pass=0, kill_batch=9)
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT,
                   env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    events = []
    train(dataset(), MAPPING, 16, 1, model=RecordingModel(), checkpoints=Checkpoints(str(tmp_path), resume=True),
          event_handler=events.append)
    begin = events[0]
    assert (begin.batches, begin.first_batch) == (13, 8)
    assert [e.batch_id for e in events if isinstance(e, EndIteration)] == list(range(8, 13))


@pytest.mark.parametrize("mapping, error, match", [
    ({}, ValueError, "mapping is empty"),
    ({"image": 0, "label": 1, "weights": 2}, ValueError, r"mapping names \['weights'\]"),
])
def test_mapping_mistakes_are_named(mapping, error, match):
    with pytest.raises(error, match=match):
        train(dataset(), mapping, 16, 1, model=SoftmaxRegression(5, 3))


def test_mapping_accepts_numpy_integer_columns():
    x, y = separable(32)
    history = train(readers.from_arrays(x, y), {"image": np.int64(0), "label": np.int32(1)}, 8, 1,
                    model=SoftmaxRegression(4, 2))
    assert history[0]["train_accuracy"] >= 0


def test_a_step_that_returns_no_metrics_is_named():
    class Silent:
        def step(self, batch):
            return None

        def evaluate(self, batch):
            return {}

    with pytest.raises(TypeError, match=r"Silent.step\(\) returned NoneType; it must return a dict"):
        train(dataset(), MAPPING, 16, 1, model=Silent())


KILLED_RUN = """
import os, signal, sys
from train.checkpoints.settings import Checkpoints
from train.driver import train
from train.events import BeginIteration
from tests.helpers.recording import MAPPING, RecordingModel, dataset

def handler(event):
    if isinstance(event, BeginIteration) and (event.pass_id, event.batch_id) == ({kill_pass}, {kill_batch}):
        os.kill(os.getpid(), signal.SIGKILL)

train(dataset(), MAPPING, 16, 3, model=RecordingModel(), event_handler=handler,
      checkpoints=Checkpoints(sys.argv[1], every=4))
"""


@pytest.mark.parametrize("kill_pass, kill_batch", [(1, 7), (0, 2), (2, 12)])
def test_sigkill_mid_pass_then_resume_is_exactly_once_with_same_weights(tmp_path, kill_pass, kill_batch):
    reference = RecordingModel()
    train(dataset(), MAPPING, 16, 3, model=reference)

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = KILLED_RUN.format(kill_pass=kill_pass, kill_batch=kill_batch)
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    found = load_checkpoint(str(tmp_path))
    if kill_batch >= 4 or kill_pass > 0:
        assert found is not None and (found[1]["pass"], found[1]["cursor"]) < (kill_pass, kill_batch * 16 + 1)

    resumed = RecordingModel()  # killed before its first checkpoint, the run starts afresh, as a new run
    train(dataset(), MAPPING, 16, 3, model=resumed, checkpoints=Checkpoints(str(tmp_path), resume=found is not None))
    for k in range(3):  # every pass: each sample exactly once, in the same order as the uninterrupted run
        assert sorted(resumed.seen[k * N:(k + 1) * N].tolist()) == list(range(N))
    assert np.array_equal(resumed.seen, reference.seen)
    ref_state, got_state = reference.state_dict(), resumed.state_dict()
    assert all(np.array_equal(ref_state[k], got_state[k]) for k in ref_state)

# -- as one of several processes ------------------------------------------------------------
# train() as one rank of a job: sharding by rank, equal steps, elastic resume from checkpoints.
# The ranks run one after another in this process, each under the environment torchrun would
# give it; the numpy models need no collectives, so this checks the data each rank trains on,
# not communication (tests/readers/ops/test_sharding_torchrun.py runs real processes).


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
            run_rank(rank, before, checkpoints=Checkpoints(folder, every=4), then=crash_after(5), batch_size=8)
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
        model, _ = run_rank(rank, after, checkpoints=Checkpoints(folder, resume=True), batch_size=8)
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
            run_rank(rank, 3, checkpoints=Checkpoints(folder, every=2), then=crash_after(2 + 2 * (rank == 2)),
                     batch_size=8)
    as_rank(0, 3)
    with pytest.warns(RuntimeWarning, match=r"checkpoints are at different positions \(rank0: pass 0, entry 48"):
        load_for_rank(folder, 0, 3)


def test_resume_knows_the_data_by_content_not_by_path(tmp_path):
    """New-user trial (issue 12): the same MNIST files by another path were refused; Fashion-MNIST was accepted."""
    from readers.sources import mnist
    from tests.helpers.recording import write_mnist

    first, copy, fashion, ck = (tmp_path / name for name in ("first", "copy", "fashion", "ck"))
    for folder, seed in ((first, 0), (copy, 0), (fashion, 1)):
        folder.mkdir()
        write_mnist(folder, seed=seed, sizes=(("train", 100),))

    def run(folder, passes, resume=False):
        data = readers.shuffle(mnist.train(folder, download=False), seed=0)
        return train(data, ["image", "label"], 16, passes, model="softmax", checkpoints=Checkpoints(ck, resume=resume))

    run(first, 1)
    with pytest.raises(CheckpointError, match=r"other settings or data \(content: the data itself differs"):
        run(fashion, 2, resume=True)
    assert [r["pass"] for r in run(copy, 2, resume=True)] == [0, 1]
