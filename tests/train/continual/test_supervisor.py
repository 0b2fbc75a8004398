"""train.continual.supervisor: run_pipeline's triggers, sets, trainings, evaluation, status, Ctrl-C, crash and resume."""
import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import readers
import readers.sources.split_mnist
import train
from readers import PipelineStore
from tests.helpers import paths as _paths
from tests.helpers.continual_data import blobs, softmax
from train.continual.strategies import Strategy
from train.continual.supervisor import (
    PipelineConfigError,
    PipelineReplayError,
    run_pipeline,
)

ROOT = str(_paths.ROOT)


def run(tmp_path, strategy="all", trigger="time:86400", **options):
    stream, test, source = blobs()
    options = {"db": str(tmp_path / "runs.db"), "test": test, "source": source, "min_steps": 40, **options}
    return run_pipeline(stream, trigger, strategy, softmax(), **options)


def test_one_trigger_per_task_and_each_task_seen_so_far_is_evaluated(tmp_path):
    records = run(tmp_path, "all")
    assert [r["trigger_id"] for r in records] == [0, 1, 2]
    assert [r["training_id"] for r in records] == [1, 2, 3]
    assert [r["set_size"] for r in records] == [160, 320, 480]
    assert [r["tasks"] for r in records] == [[0], [0, 1], [0, 1, 2]]
    assert [len(r["accuracies"]) for r in records] == [1, 2, 3]
    assert records[-1]["average_accuracy"] == pytest.approx(np.mean(records[-1]["accuracies"]))
    assert min(records[-1]["accuracies"]) > 0.9  # AllData remembers every task
    assert sorted(records[0]["classes"]) == ["0", "1"] and sum(records[0]["classes"].values()) == 160
    assert sorted(records[2]["classes"]) == ["0", "1", "2", "3", "4", "5"]


def test_a_small_set_is_trained_for_min_steps_and_a_large_one_for_passes(tmp_path):
    records = run(tmp_path, "gdumb:30", min_steps=50, batch_size=8, passes=1)
    assert [r["set_size"] for r in records] == [30, 30, 30]
    assert all(r["steps"] >= 50 and r["passes"] == 13 for r in records)  # ceil(50 / ceil(30 / 8)) passes of 4 steps
    records = run(tmp_path, "new", min_steps=5, batch_size=16, passes=2)
    assert all(r["passes"] == 2 and r["steps"] == 20 for r in records)


def test_new_data_forgets_while_all_data_remembers(tmp_path):
    new = run(tmp_path, "new", min_steps=300)[-1]["accuracies"]
    remembered = run(tmp_path, "all")[-1]["accuracies"]
    assert new[-1] > 0.9 and min(new[:-1]) < 0.1 and np.mean(new[:-1]) < 0.5  # the last task is known, the first forgotten
    assert min(remembered) > 0.9


def test_sets_and_trainings_are_in_the_store_with_their_models(tmp_path):
    records = run(tmp_path, "gdumb:30")
    with PipelineStore(tmp_path / "runs.db", create=False) as store:
        p = records[0]["pipeline_id"]
        assert store.triggers(p) == [0, 1, 2]
        config = store.pipeline(p)["config"]
        assert config["trigger"] == "time:86400" and config["strategy"] == "gdumb:30" and config["min_steps"] == 40
        for record in records:
            stored = store.trigger(p, record["trigger_id"])
            assert len(stored.keys) == 30 and stored.info["classes"] == record["classes"]
            training = store.training(record["training_id"])
            assert training["status"] == "finished" and training["trigger_id"] == record["trigger_id"]
            assert training["metrics"]["accuracies"] == record["accuracies"]
            assert training["progress"]["step"] == training["progress"]["steps"] == record["steps"]
        model = train.SoftmaxRegression(6, 6)
        model.load_state_dict(store.model_state(records[-1]["training_id"]))
        # the last model, as stored, gives the last record's accuracies
        _, test, _ = blobs()
        x = np.stack([e[0] for e in test()])
        y = np.array([e[1] for e in test()])
        assert (model.predict(x) == y).mean() == pytest.approx(np.mean(records[-1]["accuracies"]), abs=0.02)


def test_a_set_is_read_back_by_another_process_as_a_reader(tmp_path):
    records = run(tmp_path, "gdumb:30")
    script = textwrap.dedent(f"""
        import readers, numpy as np
        from tests.helpers.continual_data import blobs
        _, _, source = blobs()
        r = readers.shuffle(readers.trigger_set({str(tmp_path / "runs.db")!r}, 1, 2, source=source), seed=0)
        print(sorted(int(e[1]) for e in r()).count(4), len(r))
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(records[2]["classes"]["4"]), "30"]


def test_a_running_trainings_status_is_read_by_another_process(tmp_path):
    seen = []

    def ask(event):
        if type(event).__name__ == "EndIteration" and event.batch_id == 3 and not seen:
            script = ("import json, readers; s = readers.PipelineStore(%r, create=False); "
                      "print(json.dumps(s.training(1)))" % str(tmp_path / "runs.db"))
            out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
            seen.append(json.loads(out.stdout))

    records = run(tmp_path, "all", event_handler=ask, trigger="every:200")
    status = seen[0]
    assert status["training_id"] == records[0]["training_id"] == 1 and status["status"] == "running"
    assert 1 <= status["progress"]["step"] <= 4 and status["progress"]["steps"] == records[0]["steps"]


def test_ctrl_c_marks_the_training_interrupted_and_resume_gives_the_uninterrupted_result(tmp_path):
    whole = run(tmp_path / "a", "all")

    def stop(event):
        if type(event).__name__ == "EndIteration" and stop.trainings == 1 and event.batch_id == 5:
            raise KeyboardInterrupt
        if type(event).__name__ == "EndPass":
            stop.trainings += 1
    stop.trainings = 0

    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "b", "all", event_handler=stop, passes=1, min_steps=1)
    with PipelineStore(tmp_path / "b" / "runs.db", create=False) as store:
        assert [t["status"] for t in store.trainings(1)] == ["finished", "failed"]
        assert store.training(2)["error"] == "interrupted"
        assert store.triggers(1) == [0, 1]  # trigger 1's set was stored before its training
    resumed = run(tmp_path / "b", "all", resume=1, passes=1, min_steps=1)
    assert [r["trigger_id"] for r in resumed] == [1, 2] and [r["training_id"] for r in resumed] == [3, 4]
    again = run(tmp_path / "c", "all", passes=1, min_steps=1)
    assert [r["accuracies"] for r in resumed] == [r["accuracies"] for r in again[1:]]
    assert whole[0]["pipeline_id"] == 1


def test_a_pipeline_killed_mid_training_resumes_after_its_last_finished_training(tmp_path):
    db = str(tmp_path / "runs.db")
    script = textwrap.dedent(f"""
        import os, signal
        from train.continual.supervisor import run_pipeline
        from tests.helpers.continual_data import blobs, softmax
        stream, test, source = blobs()
        def die(event):
            if type(event).__name__ == "EndIteration" and die.passes == 2 and event.batch_id == 3:
                os.kill(os.getpid(), signal.SIGKILL)
            if type(event).__name__ == "EndPass":
                die.passes += 1
        die.passes = 0
        run_pipeline(stream, "time:86400", "new:0.5", softmax(), db={db!r}, test=test, source=source,
                     min_steps=1, event_handler=die)
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == -signal.SIGKILL, out.stderr
    with PipelineStore(db, create=False) as store:
        assert [t["status"] for t in store.trainings(1)] == ["finished", "finished", "running"]
    stream, test, source = blobs()
    resumed = run_pipeline(stream, "time:86400", "new:0.5", softmax(), db=db, test=test, source=source, min_steps=1,
                           resume=1)
    assert [r["trigger_id"] for r in resumed] == [2]
    with PipelineStore(db, create=False) as store:
        assert [(t["status"], t["error"]) for t in store.trainings(1)] == [
            ("finished", None), ("finished", None), ("failed", "interrupted"), ("finished", None)]
    fresh = run(tmp_path / "fresh", "new:0.5", min_steps=1)
    assert resumed[0]["accuracies"] == fresh[2]["accuracies"]


def test_resume_with_other_settings_is_refused_naming_each(tmp_path):
    run(tmp_path, "all")
    with pytest.raises(PipelineConfigError) as caught:
        run(tmp_path, "gdumb:30", resume=1, batch_size=16)
    message = str(caught.value)
    assert "  - strategy was 'all', now 'gdumb:30'\n  - batch_size was 32, now 16\n" in message
    assert message.endswith("ran with other settings: resume it with the ones it started with, or start a new "
                            "pipeline")


def test_a_stream_that_replays_differently_is_refused(tmp_path):
    stream, test, source = blobs()
    entries = list(stream())
    resumed = []

    def changing():
        changed = list(entries)
        if resumed:  # the resumed run's replay: one entry names another sample
            x, label, key, time = changed[100]
            changed[100] = (x, label, changed[101][2], time)
        yield from changed

    def broken(event):
        if type(event).__name__ == "EndIteration" and event.pass_id == 0 and broken.n == 1:
            raise KeyboardInterrupt
        if type(event).__name__ == "EndPass":
            broken.n += 1
    broken.n = 0
    options = {"db": str(tmp_path / "runs.db"), "test": test, "source": source, "min_steps": 1}
    with pytest.raises(KeyboardInterrupt):
        run_pipeline(changing, "every:150", "all", softmax(), event_handler=broken, **options)
    resumed.append(True)
    with pytest.raises(PipelineReplayError, match="replaying the stream gave trigger 0 another set"):
        run_pipeline(changing, "every:150", "all", softmax(), resume=1, **options)


def test_everything_wrong_is_reported_at_once_and_nothing_is_written(tmp_path):
    stream, test, source = blobs()
    with pytest.raises(PipelineConfigError) as caught:
        run_pipeline(stream, "time:-1", "gdumb:x", lambda seed: train.SoftmaxRegression(5, 6), db=str(tmp_path / "r.db"),
                     test=test, source=source, batch_size=0, task_seconds=0)
    problems = caught.value.problems
    assert len(problems) == 5, problems
    assert "batch_size" in problems[0] and "task_seconds" in problems[1]
    assert problems[2].startswith("trigger: ") and problems[3].startswith("strategy: ")
    assert problems[4].startswith("model: ") and "shape (batch, 5)" in problems[4]  # tried on the first sample
    assert not (tmp_path / "r.db").exists()
    with pytest.raises(PipelineConfigError, match="model: .*"):  # the model is tried on a sample first
        run_pipeline(stream, "time:86400", "all", lambda seed: train.SoftmaxRegression(5, 6),
                     db=str(tmp_path / "r.db"), source=source)
    with pytest.raises(PipelineConfigError, match=r"source\[\d+\] gives label"):
        run_pipeline(stream, "time:86400", "all", softmax(), db=str(tmp_path / "r.db"),
                     source=readers.from_arrays(np.zeros((480, 6), np.float32), np.full(480, 5)))
    assert not (tmp_path / "r.db").exists()


def test_gdumb_trains_a_new_model_per_trigger_and_the_others_go_on(tmp_path):
    for strategy, expected in (("gdumb:30", [0, 1, 2]), ("all", [0])):
        seeds = []

        def factory(seed):
            seeds.append(seed)
            return train.SoftmaxRegression(6, 6, lr=0.05, seed=seed)

        stream, test, source = blobs()
        run_pipeline(stream, "time:86400", strategy, factory, db=str(tmp_path / "r.db"), test=test, source=source,
                     min_steps=5, seed=2)
        assert seeds[1:] == [2 * 1_000_003 + t for t in expected]  # seeds[0]: the model checked at the start


class Halves(Strategy):
    """A user's strategy: everything so far, the older half at weight 0.5."""

    name = "halves"

    def __init__(self):
        self.keys = []

    def _inform(self, keys, labels):
        self.keys.extend(keys.tolist())

    def select(self):
        keys = np.array(self.keys, np.int64)
        weights = np.where(np.arange(len(keys)) < len(keys) // 2, 0.5, 1.0).astype(np.float32)
        return keys, weights


def test_a_users_strategy_with_weights_trains_through_the_weight_column(tmp_path):
    records = run(tmp_path / "w", Halves())
    assert [r["set_size"] for r in records] == [160, 320, 480]
    with PipelineStore(tmp_path / "w" / "runs.db", create=False) as store:
        assert store.trigger_meta(1, 1)["weighted"] and store.trigger(1, 1).weights[0] == 0.5
    assert records[-1]["average_accuracy"] > 0.9
    unweighted = run(tmp_path / "u", "all")  # the same keys, all of weight 1: another training
    assert [r["train_loss"] for r in records] != [r["train_loss"] for r in unweighted]


def test_the_end_of_the_stream_is_a_last_trigger_and_a_test_split_is_optional(tmp_path):
    stream, _, source = blobs()
    records = run_pipeline(stream, "every:200", "new", softmax(), db=str(tmp_path / "r.db"), source=source,
                           min_steps=1)
    assert [r["set_size"] for r in records] == [200, 200, 80]
    assert all(r["accuracies"] == [] and r["average_accuracy"] is None for r in records)


def test_a_drift_trigger_fires_at_task_changes(tmp_path):
    records = run(tmp_path / "labels", "new", trigger="drift:window=40,threshold=0.5")
    with PipelineStore(tmp_path / "labels" / "runs.db", create=False) as store:
        positions = [store.trigger_meta(1, t)["position"] for t in store.triggers(1)]
    assert positions == [200, 360, 480], positions  # the first window after each task's start (160, 320), the end
    assert [r["set_size"] for r in records] == [200, 160, 120]
    run(tmp_path / "features", "new", trigger="drift:window=40,threshold=0.5,on=feature,bounds=-6:6")
    with PipelineStore(tmp_path / "features" / "runs.db", create=False) as store:
        positions = [store.trigger_meta(1, t)["position"] for t in store.triggers(1)]
    assert len(positions) >= 2 and positions[0] > 160 and positions[-1] == 480, positions


def test_split_mnist_runs_as_the_default_stream(tmp_path):
    mnist = os.path.join(os.path.dirname(ROOT), "shared", "data", "mnist")
    if not os.path.isdir(mnist):
        pytest.skip(f"the MNIST files are not in {mnist}")
    stream = readers.sources.split_mnist.train(mnist, download=False, tasks=2, per_task=100)
    test = readers.sources.split_mnist.test(mnist, download=False, tasks=2, per_task=50)
    records = run_pipeline(stream, "time:86400", "gdumb:60", lambda seed: train.MLP(784, (32,), 10, seed=seed),
                           db=str(tmp_path / "r.db"), test=test, min_steps=30)
    assert [r["classes"] for r in records] == [{"0": 30, "1": 30}, {"0": 15, "1": 15, "2": 15, "3": 15}]
    assert records[-1]["tasks"] == [0, 1] and records[-1]["average_accuracy"] > 0.6


def test_records_do_not_depend_on_the_chunk_size(tmp_path):
    results = []
    for chunk in (1, 7, 160, 4096):
        records = run(tmp_path / str(chunk), "new:0.25", chunk=chunk, min_steps=5)
        with PipelineStore(tmp_path / str(chunk) / "runs.db", create=False) as store:
            times = [store.trigger_meta(1, t)["time"] for t in store.triggers(1)]
        results.append(([{k: r[k] for k in ("set_size", "classes", "tasks", "accuracies")} for r in records], times))
    assert all(result == results[0] for result in results[1:])
    assert [r["tasks"] for r in results[0][0]] == [[0], [0, 1], [0, 1, 2]]
    assert results[0][1] == [86400 - 86400 / 160, 2 * 86400 - 86400 / 160, 3 * 86400 - 86400 / 160]


def test_a_strategy_object_is_copied_and_one_already_informed_is_refused(tmp_path):
    strategy = train.GDumb(30, seed=1)
    first = run(tmp_path / "a", strategy)
    assert strategy.informed == 0  # the pipeline informed its own copy
    assert [r["classes"] for r in run(tmp_path / "b", strategy)] == [r["classes"] for r in first]
    strategy.inform([0], [0])
    with pytest.raises(PipelineConfigError, match=r"was informed of 1 samples already"):
        run(tmp_path / "c", strategy)


def test_a_model_without_a_class_for_a_later_label_is_refused_before_anything_runs(tmp_path):
    stream, test, source = blobs()
    with pytest.raises(PipelineConfigError, match="model: LabelRangeError") as caught:
        run_pipeline(stream, "time:86400", "all", softmax(classes=4), db=str(tmp_path / "r.db"), test=test,
                     source=source)
    assert "5" in str(caught.value)
    assert not (tmp_path / "r.db").exists()


def test_a_stream_whose_keys_or_times_are_wrong_is_refused_with_the_position(tmp_path):
    stream, test, source = blobs()
    entries = list(stream())
    x, label, key, time = entries[200]
    late = entries[:200] + [(x, label, 10_000, time)] + entries[201:]
    with pytest.raises(PipelineConfigError, match="position 200 has key 10000, but the source"):
        run_pipeline(readers.from_sequence(late), "time:86400", "all", softmax(), db=str(tmp_path / "r.db"),
                     source=source)
    back = entries[:300] + [(x, label, key, 5.0)] + entries[301:]
    with pytest.raises(PipelineConfigError, match=r"position 300 has time 5\.0 after"):
        run_pipeline(readers.from_sequence(back), "time:86400", "all", softmax(), db=str(tmp_path / "r.db"),
                     source=source)


def test_the_store_keeps_the_last_model_unless_told_otherwise(tmp_path):
    last = run(tmp_path / "a", "all")
    every = run(tmp_path / "b", "all", keep_models=None)
    with PipelineStore(tmp_path / "a" / "runs.db", create=False) as a, \
            PipelineStore(tmp_path / "b" / "runs.db", create=False) as b:
        assert [a.model_state(r["training_id"]) is None for r in last] == [True, True, False]
        assert all(b.model_state(r["training_id"]) is not None for r in every)


def test_an_interrupt_carries_the_pipeline_id_and_the_last_progress(tmp_path):
    def stop(event):
        if type(event).__name__ == "EndIteration" and event.pass_id == 1 and event.batch_id == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as caught:
        run(tmp_path, "all", event_handler=stop)
    assert caught.value.pipeline_id == 1
    with PipelineStore(tmp_path / "runs.db", create=False) as store:
        assert store.training(1)["progress"]["step"] == 8 and store.training(1)["status"] == "failed"


def test_a_resume_from_a_store_that_is_not_there_makes_none(tmp_path):
    # Regression (issue 27, 14): an empty store was made at db, and then the resume refused
    stream, _, source = blobs()
    with pytest.raises(FileNotFoundError, match="no pipeline store at"):
        run_pipeline(stream, "every:100", "new", softmax(), db=tmp_path / "none.db", source=source, resume=1)
    assert not (tmp_path / "none.db").exists()
