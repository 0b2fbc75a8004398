"""train.continual.config: everything wrong with a pipeline is found before it starts, in one error."""
import numpy as np
import pytest

import readers
import train
from tests.helpers.continual_data import blobs, softmax
from train.checkpoints.resume import Difference
from train.continual.config import PipelineConfigError, check_pipeline

DEFAULTS = {"db": "runs.db", "keep_models": 1, "test": None, "source": None, "mapping": ["image", "label"], "batch_size": 32, "passes": 1,
            "min_steps": 10, "seed": 0, "task_seconds": 86400.0, "chunk": 64, "resume": None, "config": None}


def check(stream=None, trigger="time:86400", strategy="all", model=None, **options):
    if stream is None:
        stream, test, source = blobs(tasks=1, per_task=20, test_per_task=5)
        options = {"source": source, "test": test, **options}
    return check_pipeline(stream, trigger, strategy, model or softmax(), **{**DEFAULTS, **options})


def problems(**options):
    with pytest.raises(PipelineConfigError) as caught:
        check(**options)
    return caught.value.problems


def test_a_good_configuration_gives_its_checked_pipeline_and_config():
    pipeline = check(strategy="gdumb:10", seed=3, config={"run": "a"})
    assert isinstance(pipeline.trigger, train.EveryT) and isinstance(pipeline.strategy, train.GDumb)
    assert pipeline.strategy.seed == 3 and pipeline.label_column == 1 and pipeline.feature_column is None
    assert list(pipeline.test_tasks) == [0] and len(pipeline.first_entry) == 2
    assert pipeline.config["trigger"] == "time:86400" and pipeline.config["strategy"] == "gdumb:10"
    assert pipeline.config["model"]["n_inputs"] == 6 and pipeline.config["user"] == {"run": "a"}
    assert pipeline.config["mapping"] == {"image": 0, "label": 1} and pipeline.config["data"]["length"] == 20


def test_a_feature_drift_trigger_reads_the_image_column():
    assert check(trigger="drift:window=5,threshold=0.5,on=feature").feature_column == 0


@pytest.mark.parametrize("options, found", [
    ({"batch_size": 0}, "batch_size must be an int >= 1"),
    ({"passes": 1.5}, "passes"),
    ({"min_steps": -1}, "min_steps"),
    ({"seed": "x"}, "seed"),
    ({"chunk": 0}, "chunk"),
    ({"resume": 0}, "resume"),
    ({"task_seconds": float("inf")}, "task_seconds must be a number > 0"),
    ({"config": [1]}, "config must be a dict"),
    ({"config": {"f": object()}}, "config must be JSON data"),
    ({"trigger": "hourly"}, "trigger: unknown trigger spec 'hourly'"),
    ({"trigger": 5}, "trigger must be a train.Trigger (subclass it to make your own) or its spec, got int 5"),
    ({"strategy": train.GDumb}, "strategy must be an instance of GDumb, e.g. GDumb(...), not the class"),
    ({"strategy": "gdumb:0"}, "strategy: bad strategy spec 'gdumb:0'"),
    ({"mapping": ["image"]}, "mapping must name the label column 'label'"),
    ({"mapping": {"image": "x", "label": 1}}, "name entry columns by number"),
    ({"model": "mlp"}, "model must be called as model(seed)"),
    ({"model": lambda seed: object()}, "which has no step, evaluate, state_dict, load_state_dict"),
    ({"model": lambda seed: 1 / 0}, "model: ZeroDivisionError"),
    ({"trigger": "drift:window=5,threshold=0.5,on=feature", "mapping": {"x": 0, "label": 1}},
     "watches the features: the mapping must name them 'image'"),
    ({"test": readers.from_sequence([(np.zeros(6), 0)])}, "test from_sequence(list of 1): its entries must end in"),
    ({"test": readers.from_sequence([])}, "test from_sequence(list of 0) gave no entries"),
    ({"source": lambda: iter([])}, "source must be an indexed reader"),
    ({"source": readers.from_arrays(np.zeros((3, 6), np.float32), np.zeros(3, np.int64))}, "has 3 entries, but"),
])
def test_each_problem_is_named(options, found):
    listed = problems(**options)
    assert found in listed[0], listed


def test_a_stream_that_is_no_timestamped_stream_is_refused():
    plain = readers.from_sequence([(np.zeros(6, np.float32), 1)])
    found = problems(stream=plain, source=plain)
    assert found == ["stream from_sequence(list of 1): its entries must end in the columns (key, time), after the "
                     "mapped ones: got 2 columns, so columns 0-1 would be the key and time"]
    assert "the stream from_sequence(list of 1) has no by_key()" in problems(stream=plain)[-1]


def test_a_stream_that_fails_is_reported_with_its_error():
    def broken():
        raise OSError("disk gone")
        yield

    found, = problems(stream=broken, source=readers.from_sequence([1]))
    assert found.startswith("stream ") and found.endswith("broken failed to give its first entry: OSError: disk gone")


def test_all_problems_come_at_once():
    found = problems(batch_size=0, trigger="every:0", strategy="x", model=5)
    assert len(found) == 4


def test_split_mnist_gives_its_source_by_key(tmp_path):
    from readers.sources.split_mnist import train as split_train
    from tests.helpers.continual_data import fake_mnist

    stream = split_train(fake_mnist(tmp_path), download=False)
    pipeline = check(stream=stream, model=lambda seed: train.MLP(784, (8,), 10, seed=seed))
    assert pipeline.source is stream.by_key() and pipeline.config["model"]["hidden"] == [8]


def test_resume_compares_the_stored_settings(tmp_path):
    pipeline = check(strategy="all")
    with readers.PipelineStore(tmp_path / "r.db") as store:
        p = store.register_pipeline(pipeline.config)
        assert pipeline.check_resumable(store, p) == p
        other = check(strategy="new", batch_size=8)
        with pytest.raises(PipelineConfigError) as caught:
            other.check_resumable(store, p)
        assert caught.value.problems == ["strategy was 'all', now 'new'", "batch_size was 32, now 8"]
        assert caught.value.changes == [Difference("strategy", "all", "new"), Difference("batch_size", 32, 8)]
        with pytest.raises(PipelineConfigError, match=r"resume=7: .*no pipeline 7 in .*\(its pipelines: 1\)"):
            pipeline.check_resumable(store, 7)
