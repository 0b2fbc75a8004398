"""train.commands.continual_table: the rows `pipeline run` prints and the lines `pipeline status` prints."""
import re

import numpy as np

from readers import PipelineStore
from train.commands.continual_table import HEADER, row_of, status_lines


def record(**changes):
    return {"trigger_id": 4, "set_size": 60000, "seconds": 12.345, "average_accuracy": 0.96789,
            "accuracies": [0.99, 0.97, 0.965, 0.96, 0.95], "classes": {str(c): 6000 for c in (10, 2, 1)}, **changes}


def test_a_row_lines_up_under_the_header_and_lists_classes_in_label_order():
    row = row_of(record())
    assert row.index("60000") + 5 == HEADER.index("set") + 3  # right-aligned under "set"
    assert row.endswith("1:6000 2:6000 10:6000")
    assert re.search(r" 12\.3 +96\.8  99\.0 97\.0 96\.5 96\.0 95\.0 ", row)


def test_a_row_without_a_test_split_says_so():
    row = row_of(record(accuracies=[], average_accuracy=None, classes={}))
    assert "n/a  n/a (no test split)" in row


def test_status_lists_pipelines_and_trainings_and_one_training_in_full(tmp_path):
    with PipelineStore(tmp_path / "r.db") as store:
        p = store.register_pipeline({"stream": "split_mnist(tasks=5, seed=0)", "trigger": "every:10",
                                     "strategy": "new"})
        store.add_trigger(p, 0, np.arange(10), position=10)
        store.add_trigger(p, 1, np.arange(10, 20), position=20)
        done = store.start_training(p, 0)
        store.finish_training(done, {"average_accuracy": 0.5})
        failed = store.start_training(p, 1)
        store.update_training(failed, progress=0.25)
        store.fail_training(failed, "interrupted")
        lines = status_lines(store)
        assert lines[0].endswith("r.db: 1 pipeline")
        assert lines[1] == "pipeline 1: split_mnist(tasks=5, seed=0), trigger every:10, strategy new; 2 triggers"
        assert re.match(r"\s+1\s+1\s+0\s+finished\s+0%\s+50\.0%\s+\d+\.\d$", lines[3])
        assert re.match(r"\s+2\s+1\s+1\s+failed\s+25%\s+n/a\s+\d+\.\d\s+interrupted$", lines[4])
        full = status_lines(store, training_id=failed)
        assert full[0] == "training 2 of pipeline 1, trigger 1: failed"
        assert "  error: interrupted" in full and "  progress: 25%" in full
        assert status_lines(store, pipeline_id=p)[0].endswith("1 pipeline")


def test_a_running_training_whose_process_is_gone_says_so(tmp_path):
    import multiprocessing

    with PipelineStore(tmp_path / "r.db") as store:
        p = store.register_pipeline({})
        store.add_trigger(p, 0, np.arange(3), position=3)
    child = multiprocessing.get_context("spawn").Process(target=_claim_and_start, args=(str(tmp_path / "r.db"),))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    with PipelineStore(tmp_path / "r.db", create=False) as store:
        line = status_lines(store)[-1]
        assert "running" in line and line.endswith("its process is gone; resume pipeline 1 to go on")


def _claim_and_start(path):
    """In a child: claim pipeline 1 and start a training, then exit without a word (as a kill would)."""
    import os

    store = PipelineStore(path, create=False)
    store.claim_pipeline(1)
    store.start_training(1, 0)
    os._exit(0)


def test_one_training_shows_its_last_step_loss_to_four_significant_digits_as_its_metrics(tmp_path):
    # issue 27, item 9: "progress: 600/600 steps, loss 0.0000" beside "train_loss: 0.002831"
    with PipelineStore(tmp_path / "r.db") as store:
        p = store.register_pipeline({})
        store.add_trigger(p, 0, np.arange(3), position=3)
        t = store.start_training(p, 0)
        store.update_training(t, progress={"step": 600, "steps": 600, "loss": 4.12345e-05})
        store.finish_training(t, {"train_loss": 0.0028314})
        full = status_lines(store, training_id=t)
        assert full[1] == "  progress: 600/600 steps, last step's loss 4.123e-05"
        assert "  train_loss: 0.002831" in full
        other = store.start_training(p, 0)
        store.update_training(other, progress={"step": 6, "steps": 600, "loss": float("nan")})  # a model with no loss
        assert status_lines(store, training_id=other)[1] == "  progress: 6/600 steps"
