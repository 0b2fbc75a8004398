"""`cli.py plot LOG`: the curves of a --log-json log as an image (issue 27, item 11)."""
import json
import struct
import sys

import numpy as np
import pytest
from click.testing import CliRunner

import cli
from train.commands.plotting import PlotUnavailable, plot_log

PASSES = [{"pass": p, "train_loss": 0.5 / (p + 1), "train_accuracy": 0.9 + p / 100,
           "test_accuracy": None if p == 1 else 0.89 + p / 100, "samples_per_s": 1000.0, "seconds": 1.0}
          for p in range(5)]
STEPS = [{"step": s, "loss": 5.0 / s, "perplexity": float(np.exp(5.0 / s)), "tokens_per_s": 1e4}
         for s in range(10, 110, 10)]
TRIGGERS = [{"pipeline_id": 1, "trigger_id": t, "training_id": t + 1, "set_size": 500, "classes": {}, "steps": 600,
             "passes": 38, "train_loss": 0.001 * t, "seconds": 1.0, "tasks": list(range(t + 1)),
             "accuracies": [0.99 - 0.05 * (t - task) for task in range(t + 1)],
             "average_accuracy": float(np.mean([0.99 - 0.05 * (t - task) for task in range(t + 1)]))}
            for t in range(5)]


def write_log(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def png_size(path):
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", head
    return struct.unpack(">II", head[16:24])


@pytest.mark.parametrize("records, what", [
    (PASSES, "loss and accuracy of 5 passes"),
    (STEPS, "loss and perplexity of 10 records, to step 100"),
    (TRIGGERS, "loss and per-task accuracies of 5 triggers, 5 tasks"),
])
def test_cli_plot_renders_a_png_of_the_logs_curves(tmp_path, records, what):
    pytest.importorskip("matplotlib")  # in the test extra; absent, test_plot_without_matplotlib_names_the_install
    from matplotlib.image import imread

    log = write_log(tmp_path / "log.jsonl", records)
    result = CliRunner().invoke(cli.main, ["plot", str(log)])
    assert result.exit_code == 0, result.output
    assert result.output == f"wrote {tmp_path / 'log.png'}: {what}\n"
    assert png_size(tmp_path / "log.png") == (1000, 400)
    pixels = imread(tmp_path / "log.png")[..., :3]
    drawn = (pixels < 0.9).any(axis=-1).mean()  # not blank: axes, text and curves cover part of the white
    colours = len(np.unique((pixels * 255).astype(np.uint8).reshape(-1, 3), axis=0))
    assert 0.01 < drawn < 0.5 and colours > 20, (drawn, colours)


def test_cli_plot_writes_where_out_says(tmp_path):
    pytest.importorskip("matplotlib")
    log = write_log(tmp_path / "log.jsonl", PASSES)
    result = CliRunner().invoke(cli.main, ["plot", str(log), "--out", str(tmp_path / "curves.png")])
    assert result.exit_code == 0 and png_size(tmp_path / "curves.png") == (1000, 400)
    wrong = CliRunner().invoke(cli.main, ["plot", str(log), "--out", str(tmp_path / "curves.xyz")])
    assert wrong.exit_code == 1 and wrong.output.startswith(f"Error: --out {tmp_path / 'curves.xyz'}: Format 'xyz' is "
                                                            "not supported")
    assert wrong.output.endswith("; give a .png, .svg or .pdf file\n")


def test_plot_without_matplotlib_names_the_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # importing it fails, as when it is not installed
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    log = write_log(tmp_path / "log.jsonl", PASSES)
    with pytest.raises(PlotUnavailable):
        plot_log(log)
    result = CliRunner().invoke(cli.main, ["plot", str(log)])
    assert result.exit_code == 1
    assert result.output == ("Error: plot needs matplotlib, which is not installed: pip install matplotlib "
                             "(or pip install readerkit[plot])\n")


def test_cli_plot_refuses_what_is_not_a_log_in_one_line(tmp_path):
    (tmp_path / "broken.jsonl").write_text('{"pass": 0, "train_loss": 1.0, "train_accuracy": 0.5}\n[1, 2]\n')
    (tmp_path / "other.jsonl").write_text('{"loss": 1.0}\n')
    (tmp_path / "empty.jsonl").write_text("")
    for name, message in (
        ("broken.jsonl", "line 2 is not a JSON object ('[1, 2]'); give a log that train or pipeline run wrote "
                         "with --log-json"),
        ("other.jsonl", "its first record has keys ['loss'], not those of a log of train (pass, train_loss, "
                        "train_accuracy), train --config (step, loss, perplexity) or pipeline run (trigger_id, "
                        "tasks, accuracies)"),
        ("empty.jsonl", "the log holds no records yet; plot it once the run has logged a pass, a step or a trigger"),
        ("missing.jsonl", "no such log file; give a file that --log-json wrote"),
    ):
        result = CliRunner().invoke(cli.main, ["plot", str(tmp_path / name)])
        assert (result.exit_code, result.output) == (1, f"Error: {tmp_path / name}: {message}\n")


def test_cli_plot_leaves_out_a_last_line_still_being_written_and_says_so(tmp_path):
    """Trial of issue 27, problem 9: a log whose last line the run was still writing failed ("line 5 is not a JSON
    object"); that line, without its newline, is left out with a note. A complete line that is not a record, or a
    broken line followed by others, is still refused."""
    pytest.importorskip("matplotlib")
    log = write_log(tmp_path / "log.jsonl", STEPS[:4])
    with open(log, "a") as f:
        f.write(json.dumps(STEPS[4])[:16])  # '{"step": 50, "lo': cut where a write was
    result = CliRunner().invoke(cli.main, ["plot", str(log)])
    assert (result.exit_code, result.output) == (0, f"wrote {tmp_path / 'log.png'}: loss and perplexity of 4 records, "
                                                    "to step 40 (line 5, still being written, left out)\n")
    (tmp_path / "cut.jsonl").write_text(log.read_text() + "\n" + json.dumps(STEPS[5]) + "\n")
    refused = CliRunner().invoke(cli.main, ["plot", str(tmp_path / "cut.jsonl")])
    assert (refused.exit_code, refused.output) == (1, f"Error: {tmp_path / 'cut.jsonl'}: line 5 is not a JSON object "
                                                      "('{\"step\": 50, \"lo'); give a log that train or pipeline "
                                                      "run wrote with --log-json\n")
