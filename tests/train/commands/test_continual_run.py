"""`cli.py pipeline run`: the table, the JSON log, the model options, refusals, Ctrl-C/SIGTERM and --resume."""
import json
import re
import signal

import pytest
from click.testing import CliRunner

import cli
from readers import PipelineStore
from tests.conftest import wait_until
from tests.helpers.child_processes import python_child
from tests.helpers.continual_data import fake_mnist
from train.checkpoints.resume import Difference
from train.commands.continual_run import in_flags
from train.continual.config import PipelineConfigError, changed_lines

ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+(\d+\.\d)\s+(\d+\.\d)  ((?:\d+\.\d ?)+)\s+((?:\d:\d+ ?)+)$", re.M)


def invoke(*args):
    return CliRunner().invoke(cli.main, ["pipeline", "run", *map(str, args)], catch_exceptions=False)


@pytest.fixture
def data(tmp_path):
    return fake_mnist(tmp_path / "mnist")


def test_a_row_per_trigger_with_set_classes_seconds_and_per_task_accuracy(tmp_path, data):
    log = tmp_path / "log.jsonl"
    result = invoke("--data-dir", data, "--no-download", "--db", tmp_path / "runs.db", "--min-steps", 20,
                    "--log-json", log)
    assert result.exit_code == 0, result.output
    assert "trigger    set seconds average  accuracy per task (%)" in result.output
    rows = ROW.findall(result.output)
    assert [int(r[0]) for r in rows] == [0, 1, 2, 3, 4], result.output
    assert [len(r[4].split()) for r in rows] == [1, 2, 3, 4, 5]  # every task so far
    assert [int(r[1]) for r in rows] == [60, 120, 180, 240, 300]  # gdumb:500 keeps all of this small stream
    assert rows[1][5].split() == ["0:30", "1:30", "2:30", "3:30"]
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [line["trigger_id"] for line in lines] == [0, 1, 2, 3, 4]
    assert set(lines[0]) >= {"trigger_id", "training_id", "set_size", "accuracies", "average_accuracy"}
    assert lines[-1]["average_accuracy"] == pytest.approx(sum(lines[-1]["accuracies"]) / 5)
    assert f"{100 * lines[-1]['average_accuracy']:.2f}%" in result.output.splitlines()[-1]


def test_every_trigger_and_strategy_form_runs(tmp_path, data):
    for trigger, strategy, triggers in (("every:100", "new", 3), ("drift:window=30,threshold=0.5", "all", 5),
                                        ("time:86400", "new:0.5", 5)):
        result = invoke("--data-dir", data, "--no-download", "--db", tmp_path / "runs.db", "--min-steps", 5,
                        "--trigger", trigger, "--strategy", strategy, "--model", "softmax", "--batch-size", 16)
        assert result.exit_code == 0, result.output
        assert len(ROW.findall(result.output)) == triggers, (trigger, result.output)


def test_bad_options_are_all_refused_before_anything_runs(tmp_path, data):
    result = invoke("--data-dir", data, "--no-download", "--db", tmp_path / "runs.db", "--trigger", "every:2.5",
                    "--strategy", "gdumb")
    assert result.exit_code == 1
    assert "has 2 problems" in result.output and "every:2.5" in result.output and "'gdumb'" in result.output
    assert not (tmp_path / "runs.db").exists()
    plain = invoke("--reader", "mnist", "--data-dir", data, "--no-download", "--db", tmp_path / "runs.db")
    assert plain.exit_code == 1 and "reader 'mnist' is not a timestamped stream" in plain.output
    assert "split-mnist is one" in plain.output
    for flag, path, why in (("--db", tmp_path / "typo" / "runs.db", "which does not exist"),
                            ("--log-json", tmp_path / "none" / "log.jsonl", "which does not exist")):
        args = ["--data-dir", data, "--no-download", "--db", tmp_path / "runs.db", flag, path]
        refused = invoke(*args)
        assert refused.exit_code == 1 and f"{flag} {path} " in refused.output and why in refused.output
    assert not (tmp_path / "runs.db").exists() and not (tmp_path / "typo").exists()


def test_a_misspelt_model_and_reader_are_listed_with_the_other_problems(tmp_path, data):
    # issue 27, item 8: the model's typo appeared only on the next run, after the two spec problems were fixed
    result = invoke("--data-dir", data, "--no-download", "--db", tmp_path / "runs.db", "--trigger",
                    "drift:window=10", "--strategy", "gdump:500", "--model", "mpl", "--reader", "split-mnsit")
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0] == "Error: the pipeline's configuration has 4 problems:", result.output
    assert [line.split(":")[0] for line in lines[1:]] == ["  - --trigger", "  - --strategy", "  - --reader",
                                                          "  - --model"], result.output
    assert lines[3].startswith("  - --reader: unknown reader 'split-mnsit' (did you mean 'split-mnist'?)")
    assert lines[4].startswith("  - --model: unknown model 'mpl' (did you mean 'mlp'?); known models: ")
    assert not (tmp_path / "runs.db").exists()


def test_status_shows_the_trainings_of_a_run(tmp_path, data):
    invoke("--data-dir", data, "--no-download", "--db", tmp_path / "runs.db", "--min-steps", 5)
    status = CliRunner().invoke(cli.main, ["pipeline", "status", "--db", str(tmp_path / "runs.db")])
    assert status.exit_code == 0, status.output
    assert len(re.findall(r"^\s+\d+\s+1\s+\d\s+finished\s+\d+/\d+ steps", status.output, re.M)) == 5
    one = CliRunner().invoke(cli.main, ["pipeline", "status", "--db", str(tmp_path / "runs.db"), "--training-id", "5"])
    assert one.output.startswith("training 5 of pipeline 1, trigger 4: finished") and '\n  average_accuracy: ' in one.output


def progressed(db, at_all: bool = True) -> bool:
    """Whether the store ``db`` has a training that has begun, and (``at_all``) reported progress."""
    if not db.exists():
        return False
    with PipelineStore(db, create=False) as store:
        trainings = store.trainings()
    return bool(trainings) and (not at_all or trainings[-1]["progress"] != 0.0)


def test_ctrl_c_stops_with_130_and_the_printed_command_resumes(tmp_path, data):
    db, log = tmp_path / "runs.db", tmp_path / "log.jsonl"
    args = ["cli.py", "pipeline", "run", "--data-dir", data, "--no-download", "--db", str(db),
            "--min-steps", "3000", "--log-json", str(log), "--model", "softmax"]
    with python_child(*args, text=True) as child:
        wait_until(lambda: progressed(db), 60, "the first training's first progress report")
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    assert child.returncode == 130, out + err
    command = re.search(r"Resume with, from .*:\n  (.*)$", err, re.M)[1]
    assert command.endswith("--resume 1") and "--min-steps 3000" in command and "--db" in command
    with PipelineStore(db, create=False) as store:
        assert store.trainings(1)[-1]["status"] == "failed" and store.trainings(1)[-1]["error"] == "interrupted"
    # resumed with fewer steps the settings differ: refused, naming min_steps
    refused = invoke("--data-dir", data, "--no-download", "--db", db, "--min-steps", 10, "--model", "softmax",
                     "--resume", 1)
    assert refused.exit_code == 1 and "--min-steps was 3000, now 10" in refused.output


def test_sigterm_stops_with_143(tmp_path, data):
    db = tmp_path / "runs.db"
    args = ["cli.py", "pipeline", "run", "--data-dir", data, "--no-download", "--db", str(db),
            "--min-steps", "3000", "--model", "softmax"]
    with python_child(*args, text=True) as child:
        wait_until(lambda: progressed(db, at_all=False), 60, "the first training to start")
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=60)
    assert child.returncode == 143 and "terminated (SIGTERM)" in err, out + err


def test_resume_finishes_the_pipeline_and_appends_to_the_log(tmp_path, data, monkeypatch):
    import train.continual.supervisor as supervisor

    db, log = tmp_path / "runs.db", tmp_path / "log.jsonl"
    original = supervisor.evaluate
    calls = []

    def stop_at_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:  # triggers 0 and 1 evaluated (1 + 2 tasks): the third trigger's training stops
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(supervisor, "evaluate", stop_at_third)
    options = ["--data-dir", data, "--no-download", "--db", db, "--min-steps", 5, "--log-json", log]
    stopped = invoke(*options)
    assert stopped.exit_code == 130 and "--resume 1" in stopped.output
    monkeypatch.setattr(supervisor, "evaluate", original)
    fresh = invoke("--data-dir", data, "--no-download", "--db", db, "--min-steps", 5, "--strategy", "all")
    assert "note: pipeline 1 in" in fresh.output and "--resume 1 goes on with that one" in fresh.output
    resumed = invoke(*options, "--resume", 1)
    assert resumed.exit_code == 0, resumed.output
    assert "resuming pipeline 1 after trigger 1 (training 2, its last finished)" in resumed.output
    assert [int(r[0]) for r in ROW.findall(resumed.output)] == [2, 3, 4]
    assert [json.loads(line)["trigger_id"] for line in log.read_text().splitlines()] == [0, 1, 2, 3, 4]
    again = invoke(*options, "--resume", 1)
    assert again.exit_code == 0 and "nothing to train" in again.output


def test_resuming_a_pipeline_the_store_does_not_hold_is_refused(tmp_path, data):
    invoke("--data-dir", data, "--no-download", "--db", tmp_path / "runs.db", "--min-steps", 5)
    result = invoke("--data-dir", data, "--no-download", "--db", tmp_path / "runs.db", "--min-steps", 5,
                    "--resume", 9)
    assert result.exit_code == 1 and "no pipeline 9 in" in result.output and "(its pipelines: 1)" in result.output
    assert "  - --resume 9: pipeline: no pipeline 9 in" in result.output  # the option, as the user gave it
    assert result.output.rstrip().endswith("leave --resume out to start a new pipeline")


def test_a_refused_resume_names_each_changed_setting_by_its_option():
    """Issue 26: the options were parsed out of the refusal's prose, so only a model's first setting got its flag."""
    changes = [Difference("model.lr", 0.003, 0.01), Difference("model.n_classes", 10, 4),
               Difference("model.hidden", [8], [16]), Difference("user.reader", "split-mnist", "mine:rows"),
               Difference("data.length", 600, 300)]
    refused = PipelineConfigError(changed_lines(changes), "resume it with the ones it started with", changes)
    assert in_flags(refused).splitlines() == [
        "the pipeline's configuration has 5 problems:",
        "  - --lr was 0.003, now 0.01",
        "  - --classes was 10, now 4",
        "  - --model: its hidden was [8], now [16]",
        "  - --reader was 'split-mnist', now 'mine:rows'",
        "  - the data (--reader, --data-dir): its length was 600, now 300",
        "resume it with the ones it started with"]
