"""train.pipeline_table: the rows `pipeline run` prints and the lines `pipeline status` prints."""
import re

import numpy as np

from readers import PipelineStore
from train.pipeline_table import HEADER, row_of, status_lines


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
        assert "  error: interrupted" in full and "  progress: 0.25" in full
        assert status_lines(store, pipeline_id=p)[0].endswith("1 pipeline")
