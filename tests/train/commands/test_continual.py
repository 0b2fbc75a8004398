"""train.commands.continual: the `pipeline` group's options and `pipeline status` from the command line."""
import json
import sqlite3

import numpy as np
from click.testing import CliRunner

import cli
from readers import PipelineStore


def status(*args):
    return CliRunner().invoke(cli.main, ["pipeline", "status", *map(str, args)])


def test_the_group_lists_run_and_status_and_run_has_trains_options():
    assert {"run", "status"} <= set(cli.main.commands["pipeline"].commands)
    help_text = CliRunner().invoke(cli.main, ["pipeline", "run", "--help"]).output
    for option in ("--reader", "--trigger", "--strategy", "--db", "--model", "--passes", "--batch-size", "--lr",
                   "--seed", "--data-dir", "--log-json", "--min-steps", "--resume"):
        assert option in help_text, option


def test_status_of_a_missing_store_is_refused_without_making_one(tmp_path):
    result = status("--db", tmp_path / "none.db")
    assert result.exit_code == 1 and "no pipeline store at" in result.output
    assert not (tmp_path / "none.db").exists()


def test_status_as_json_and_of_one_training(tmp_path):
    with PipelineStore(tmp_path / "r.db") as store:
        p = store.register_pipeline({"trigger": "every:2"})
        store.add_trigger(p, 0, np.arange(2), position=2)
        t = store.start_training(p, 0)
        store.update_training(t, progress={"step": 3, "steps": 9})
    found = json.loads(status("--db", tmp_path / "r.db", "--json").output)
    assert [(f["training_id"], f["status"], f["progress"]) for f in found] == [(1, "running", {"step": 3, "steps": 9})]
    one = status("--db", tmp_path / "r.db", "--training-id", 1)
    assert one.exit_code == 0 and one.output.startswith("training 1 of pipeline 1, trigger 0: running")
    missing = status("--db", tmp_path / "r.db", "--training-id", 5)
    assert missing.exit_code == 1 and "no training 5" in missing.output


def test_status_of_a_file_that_is_not_a_store_is_refused(tmp_path):
    (tmp_path / "notes.db").write_text("hello")
    result = status("--db", tmp_path / "notes.db")
    assert result.exit_code == 1 and "is not a readerkit pipeline store" in result.output


def test_status_of_a_store_whose_trainings_table_was_dropped_is_one_line(tmp_path):
    # Regression (issue 27, 14): a traceback ending in sqlite3.OperationalError: no such table: trainings
    with PipelineStore(tmp_path / "r.db") as store:
        store.register_pipeline({"trigger": "every:2"})
    with sqlite3.connect(tmp_path / "r.db") as db:
        db.execute("DROP TABLE trainings")
    result = status("--db", tmp_path / "r.db")
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert result.output == (f"Error: {tmp_path / 'r.db'} is damaged (its table trainings is missing): the file was "
                             "changed outside readerkit; restore it from a copy, or give another file\n")
