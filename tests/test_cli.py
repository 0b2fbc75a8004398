"""The command line: exit codes and exact output lines, on small generated data and on real MNIST."""
import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from cli import main
from readers.idx import write_idx

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"


@pytest.fixture
def tiny_mnist(tmp_path):
    """A folder of MNIST-format files: 300 train and 60 test images whose label is their brightest row band."""
    rng = np.random.default_rng(0)
    for split, n in (("train", 300), ("t10k", 60)):
        labels = rng.integers(0, 10, size=n).astype(np.uint8)
        images = rng.integers(0, 40, size=(n, 28, 28)).astype(np.uint8)
        for i, label in enumerate(labels):
            images[i, label * 2:label * 2 + 3, :] = 255
        write_idx(tmp_path / f"{split}-images-idx3-ubyte.gz", images, compress=True)
        write_idx(tmp_path / f"{split}-labels-idx1-ubyte", labels)
    return tmp_path


def tiny_reader():
    """A user's reader creator, named on the command line as tests.test_cli:tiny_reader."""
    def reader():
        rng = np.random.default_rng(1)
        for _ in range(64):
            x = rng.normal(size=4).astype(np.float32)
            yield x, int(x[0] > 0)
    return reader


def three_columns():
    return lambda: iter([(np.zeros(4, np.float32), 0, "extra")])


def not_a_creator():
    """A reader, not a reader creator: calling it gives a generator."""
    yield np.zeros(4, np.float32), 0


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_cli_train_prints_one_line_per_pass_and_logs_json(tiny_mnist, tmp_path):
    log = tmp_path / "log.jsonl"
    result = run("train", "--reader", "mnist", "--data-dir", str(tiny_mnist), "--no-download",
                 "--passes", "2", "--batch-size", "32", "--log-json", str(log))
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.splitlines() if line.startswith("pass ") and "loss" in line]
    assert len(lines) == 2
    pattern = r"pass \d: loss \d+\.\d{4}  train accuracy \d+\.\d\d%  test accuracy \d+\.\d\d%  [\d,]+ samples/s"
    assert all(re.fullmatch(pattern, line) for line in lines), lines
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["pass"] for r in records] == [0, 1]
    assert set(records[0]) == {"pass", "train_loss", "train_accuracy", "test_accuracy", "samples_per_s", "seconds"}
    assert records[-1]["test_accuracy"] > 0.8


def test_cli_train_checkpoints_and_resumes(tiny_mnist, tmp_path):
    args = ["train", "--data-dir", str(tiny_mnist), "--no-download", "--batch-size", "32",
            "--checkpoint-dir", str(tmp_path / "ckpt"), "--checkpoint-every", "3"]
    assert run(*args, "--passes", "1").exit_code == 0
    assert (tmp_path / "ckpt" / "checkpoint.npz").is_file()
    resumed = run(*args, "--passes", "2", "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert [line[:6] for line in resumed.stdout.splitlines() if "loss" in line] == ["pass 1"]


def test_cli_train_with_a_users_reader_creator():
    result = run("train", "--reader", "tests.test_cli:tiny_reader", "--passes", "1", "--batch-size", "16")
    assert result.exit_code == 0, result.output
    assert re.search(r"pass 0: loss .* test accuracy n/a", result.stdout)


@pytest.mark.parametrize("args, message", [
    (["train", "--reader", "nosuch"], "Error: unknown reader 'nosuch'; known readers: mnist."),
    (["train", "--reader", "nosuch_module:make"], "Error: cannot import module 'nosuch_module'"),
    (["train", "--model", "nosuch"], "Error: unknown model 'nosuch'"),
    (["train", "--reader", "tests.test_cli:three_columns"], "Error: reader 'tests.test_cli:three_columns' gives entries that are a tuple of 3 columns"),
    (["train", "--reader", "tests.test_cli:not_a_creator"], "Error: reader creator 'tests.test_cli:not_a_creator' returned something that must be a zero-argument callable, got a generator object"),
    (["train", "--data-dir", "/nonexistent-readerkit", "--no-download"],
     "Error: mnist files train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz not found; looked in: /nonexistent-readerkit"),
])
def test_cli_errors_are_one_line_without_traceback(args, message):
    result = run(*args)  # no data folder: a bad model must be named before any data is looked for
    assert result.exit_code == 1
    assert result.output.startswith(message)
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


@pytest.mark.parametrize("args, message", [
    (["train", "--batch-size", "0"], "Invalid value for '--batch-size': 0 is not in the range x>=1."),
    (["train", "--resume"], "--resume needs --checkpoint-dir"),
    (["train", "--lr-decay", "2"], "Invalid value for '--lr-decay'"),
])
def test_cli_bad_options_are_usage_errors(args, message):
    result = run(*args)
    assert result.exit_code == 2 and message in result.output


def test_cli_readers_lists_readers_and_models():
    lines = run("readers").stdout.splitlines()
    assert lines[0] == "readers:" and lines[0] in lines and "models:" in lines
    names = [line.split()[0] for line in lines if line.startswith("  ")]
    assert {"mnist", "mlp", "softmax"} <= set(names)


def test_cli_inspect_shows_columns_length_and_entries(tiny_mnist):
    result = run("inspect", "--reader", "mnist", "--data-dir", str(tiny_mnist), "--no-download", "--count", "2")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "length: 300 (test split: 60)" in lines
    assert "column 0: float32[784]" in lines and "column 1: int (int64)" in lines
    assert [line.split(":")[0] for line in lines if line.startswith("entry")] == ["entry 0", "entry 1"]


def test_cli_help_explains_every_train_option():
    text = run("train", "--help").output
    for option in ("--reader", "--model", "--batch-size", "--passes", "--lr", "--seed", "--data-dir",
                   "--checkpoint-dir", "--resume", "--log-json"):
        assert option in text


@pytest.mark.skipif(not (SHARED / "mnist").is_dir(), reason="the real MNIST files (../shared/data/mnist) are absent")
def test_main_job_reaches_the_target_accuracy_on_real_mnist(tmp_path):
    """The README's main command, as a user runs it, on the real files."""
    log = tmp_path / "log.jsonl"
    env = {**os.environ, "READERKIT_DATA": str(SHARED)}
    proc = subprocess.run([sys.executable, "cli.py", "train", "--reader", "mnist", "--no-download", "--log-json", str(log)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == 5 and records[-1]["test_accuracy"] >= 0.978, records


def test_cli_resume_appends_to_the_json_log_and_refuses_other_settings(tiny_mnist, tmp_path):
    log, ckpt = tmp_path / "log.jsonl", str(tmp_path / "ckpt")
    base = ["train", "--data-dir", str(tiny_mnist), "--no-download", "--batch-size", "32", "--checkpoint-dir", ckpt,
            "--log-json", str(log)]
    assert run(*base, "--passes", "1").exit_code == 0
    assert run(*base, "--passes", "2", "--resume").exit_code == 0
    assert [json.loads(line)["pass"] for line in log.read_text().splitlines()] == [0, 1]
    other = run(*base, "--passes", "3", "--resume", "--lr", "0.01")
    assert other.exit_code == 1 and "the checkpoint was made with config=" in other.output


def test_cli_resume_says_when_there_is_no_checkpoint(tiny_mnist, tmp_path):
    result = run("train", "--data-dir", str(tiny_mnist), "--no-download", "--passes", "1", "--batch-size", "64",
                 "--checkpoint-dir", str(tmp_path / "empty"), "--resume")
    assert result.exit_code == 0 and "no checkpoint in" in result.stderr


def test_cli_data_dir_missing_files_never_mixes_in_other_folders(tiny_mnist, tmp_path, monkeypatch):
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "train-images-idx3-ubyte.gz").write_bytes((tiny_mnist / "train-images-idx3-ubyte.gz").read_bytes())
    monkeypatch.setenv("READERKIT_DATA", str(tiny_mnist))
    result = run("train", "--data-dir", str(partial), "--no-download", "--passes", "1")
    assert result.exit_code == 1 and "train-labels-idx1-ubyte.gz not found" in result.output


def test_cli_missing_test_split_fails_before_training(tiny_mnist, tmp_path):
    train_only = tmp_path / "train-only"
    train_only.mkdir()
    for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte"):
        (train_only / name).write_bytes((tiny_mnist / name).read_bytes())
    result = run("train", "--data-dir", str(train_only), "--no-download", "--passes", "1")
    assert result.exit_code == 1 and "t10k-images-idx3-ubyte.gz" in result.output and "pass 0" not in result.output


# -- bench ---------------------------------------------------------------------------


def buffered_reader():
    """A reader with a prefetch stage of its own."""
    import readers

    return readers.buffered(readers.from_sequence(range(64)), 8)


def empty_reader():
    return lambda: iter(())


STAGE = r"stage {}: [\d,]+ entries/s  input wait \d+%  output wait \d+%  consumer wait \d+%  queue fill \d+%"


def test_cli_bench_prints_a_line_per_stage_and_the_bottleneck(tmp_path):
    log = tmp_path / "bench.json"
    result = run("bench", "--reader", "tests.test_cli:tiny_reader", "--mode", "thread", "--batch-size", "16",
                 "--log-json", str(log))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "bench: tests.test_cli:tiny_reader, first 20,000 entries, 2 thread workers, batches of 16, step 0 ms"
    assert re.fullmatch(r"reader alone: 64 entries, [\d,]+ entries/s \(serial, no prefetch\)", lines[1])
    assert re.fullmatch(r"pipeline: 64 entries in 4 batches, [\d,]+ entries/s \(\d+\.\d\dx the reader alone\)", lines[2])
    assert re.fullmatch(STAGE.format(re.escape("prefetch(2 threads)")), lines[3])
    assert len(lines) == 5 and lines[4].startswith("bottleneck: ")
    figures = json.loads(log.read_text())
    assert figures["verdict"] == lines[4]
    assert figures["bottleneck"] in {"consumer", "prefetch overhead", "reader", "hand-off"}
    assert [s["stage"] for s in figures["stages"]] == ["prefetch(2 threads)"]
    assert figures["pipeline"]["entries"] == figures["alone"]["entries"] == figures["stages"][0]["entries"] == 64


def test_cli_bench_runs_process_workers_by_default():
    result = run("bench", "--reader", "tests.test_cli:tiny_reader", "--workers", "1", "--limit", "32")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "bench: tests.test_cli:tiny_reader, first 32 entries, 1 process worker, batches of 64, step 0 ms"
    assert re.fullmatch(STAGE.format(r"prefetch\(1 process(es)?\)"), lines[3])
    assert lines[-1].startswith("bottleneck: ")


def test_cli_bench_reports_the_readers_own_prefetch_stages():
    result = run("bench", "--reader", "tests.test_cli:buffered_reader", "--mode", "thread")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert re.fullmatch(STAGE.format(re.escape("prefetch(2 threads)")), lines[3])
    assert re.fullmatch(STAGE.format(re.escape("buffered(size=8) (the reader's own, measured alone)")), lines[4])
    assert lines[5].startswith("bottleneck: ") and len(lines) == 6


@pytest.mark.parametrize("args, message", [
    (["--workers", "0"], "Invalid value for '--workers': 0 is not in the range x>=1."),
    (["--mode", "fibre"], "Invalid value for '--mode': 'fibre' is not one of 'thread', 'process'."),
    (["--step-ms", "-1"], "Invalid value for '--step-ms'"),
    (["--limit", "0"], "Invalid value for '--limit'"),
    (["--passes", "0"], "Invalid value for '--passes'"),
])
def test_cli_bench_bad_options_are_usage_errors(args, message):
    result = run("bench", "--reader", "tests.test_cli:tiny_reader", *args)
    assert result.exit_code == 2 and message in result.output, result.output


@pytest.mark.parametrize("reader, message", [
    ("nosuch", "Error: unknown reader 'nosuch'"),
    ("tests.test_cli:empty_reader", "Error: the reader gave no entries; check its data"),
    ("tests.test_cli:not_a_creator", "Error: reader creator 'tests.test_cli:not_a_creator' returned something that"),
])
def test_cli_bench_bad_readers_are_one_line_errors(reader, message):
    result = run("bench", "--reader", reader)
    assert result.exit_code == 1 and result.output.startswith(message), result.output
    assert len(result.output.strip().splitlines()) == 1


def test_cli_help_explains_every_bench_option_and_the_rule():
    text = " ".join(run("bench", "--help").output.split())
    for option in ("--reader", "--data-dir", "--workers", "--mode", "--batch-size", "--limit", "--step-ms",
                   "--passes", "--log-json"):
        assert option in text
    assert "names the bottleneck, by the first rule that holds" in text and ">>>" not in text


@pytest.mark.skipif(not (SHARED / "mnist").is_dir(), reason="the real MNIST files (../shared/data/mnist) are absent")
def test_cli_bench_on_real_mnist():
    result = run("bench", "--reader", "mnist", "--data-dir", str(SHARED / "mnist"), "--no-download", "--limit", "5000")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "bench: mnist, first 5,000 entries, 2 process workers, batches of 64, step 0 ms"
    assert re.fullmatch(r"reader alone: 5,000 entries, [\d,]+ entries/s \(serial, no prefetch\)", lines[1])
    assert re.fullmatch(STAGE.format(re.escape("prefetch(2 processes)")), lines[3])
    assert lines[4].startswith("bottleneck: ") and len(lines) == 5
