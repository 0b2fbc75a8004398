"""train.commands.console: the line per pass, a JSON log that keeps each pass once across a resume, and a refused resume in flag words."""
import io
import json
import math

from train.checkpoints.resume import Difference, ResumeRefused
from train.commands.console import Progress, in_flag_words, keep_passes_before
from train.events import EndPass, TestResult

METRICS = {"loss": 0.25, "accuracy": 0.5, "samples_per_s": 2500.0, "seconds": 0.4}


def test_progress_prints_a_pass_after_its_test_and_logs_nan_as_null(capsys):
    log = io.StringIO()
    progress = Progress(log, "rank 1/2: ")
    progress(EndPass(3, {**METRICS, "loss": math.nan}))
    progress(TestResult(3, {"accuracy": 0.75}))
    progress.flush()
    assert capsys.readouterr().out == ("rank 1/2: pass 3: loss nan  train accuracy 50.00%  test accuracy 75.00%  "
                                       "2,500 samples/s\n")
    assert json.loads(log.getvalue())["train_loss"] is None and progress.passes == 1
    progress.flush()  # nothing pending: nothing printed
    assert capsys.readouterr().out == "" and progress.passes == 1


def test_keep_passes_before_drops_later_passes_and_a_half_written_line(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"pass": 0}\n{"pass": 1}\n{"pass": 2}\n{"pass": 1, "again": true}\n{"pass": 3, "tr')
    keep_passes_before(str(path), 2)
    assert path.read_text() == '{"pass": 0}\n{"pass": 1}\n{"pass": 1, "again": true}\n'
    keep_passes_before(str(path), 5)  # nothing to drop: the file is left alone
    assert path.read_text().count("\n") == 3


def test_keep_passes_before_of_a_missing_log_does_nothing(tmp_path):
    keep_passes_before(str(tmp_path / "none.jsonl"), 1)
    assert not (tmp_path / "none.jsonl").exists()


def test_progress_opens_its_log_at_the_first_pass_only(tmp_path):
    """Review of issue 12: the CLI cut or emptied the log before train() had accepted the run."""
    from train.commands.console import Progress
    from train.events import BeginPass, EndPass

    log = tmp_path / "log.jsonl"
    log.write_text('{"pass": 0}\n{"pass": 1}\n{"pass": 2}\n')
    refused = Progress(str(log), resume=True)
    refused.close()  # a run refused before its first pass
    assert log.read_text() == '{"pass": 0}\n{"pass": 1}\n{"pass": 2}\n'
    resumed = Progress(str(log), resume=True)
    resumed(BeginPass(1, 10, 0))
    resumed.close()
    assert log.read_text() == '{"pass": 0}\n'
    log.write_text('{"pass": 0}\n')
    fresh = Progress(str(log))
    fresh(BeginPass(0, 10, 0))
    fresh.close()  # stopped in its first pass: the old log stays, as the old checkpoint does
    assert log.read_text() == '{"pass": 0}\n'
    fresh = Progress(str(log))
    fresh(BeginPass(0, 10, 0))
    fresh(EndPass(0, {"loss": 0.5, "accuracy": 0.9, "samples_per_s": 1000.0, "seconds": 1.0}))
    fresh.flush()
    fresh.close()
    assert [line[:12] for line in log.read_text().splitlines()] == ['{"pass": 0, ']


def test_in_flag_words_names_options_and_says_each_once():
    refused = ResumeRefused("ck", [Difference("batch_size", 128, 64), Difference("model.n_classes", 10, 12),
                                   Difference("config.classes", 10, 12), Difference("config.reader", "a", "b")],
                            ["pipeline: stage 0 was 'x', now 'y'"])
    assert in_flag_words(refused) == (
        "ck: the checkpoint was made with other settings or data (--batch-size: 128 then, 64 now; --classes: 10 "
        "then, 12 now; --reader: 'a' then, 'b' now; pipeline: stage 0 was 'x', now 'y'); resume with the same "
        "settings and data, or train into another checkpoint folder")


def test_in_flag_words_reads_the_refusals_data_not_its_prose():
    """Issue 26: the flags were parsed out of the message, so a value holding "; " or "): " broke them."""
    refused = ResumeRefused("ck (old)", [Difference("config.reader", "mine: a; b (x)", "c"), Difference("seed", 0, 1)])
    assert in_flag_words(refused) == (
        "ck (old): the checkpoint was made with other settings or data (--reader: 'mine: a; b (x)' then, 'c' now; "
        "--seed: 0 then, 1 now); resume with the same settings and data, or train into another checkpoint folder")
