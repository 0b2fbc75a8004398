"""The command line: exit codes and exact output lines, on small generated data and on real MNIST."""
import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

import readers
from cli import main
from tests.conftest import wait_until
from tests.helpers.child_processes import python_child
from tests.helpers.paths import ROOT, SHARED_DATA
from tests.helpers.recording import write_mnist


@pytest.fixture
def tiny_mnist(tmp_path):
    """A folder of MNIST-format files: 300 train and 60 test images whose label is their brightest row band."""
    return write_mnist(tmp_path)


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


def rows():
    """A reader, not a reader creator: calling it gives the entries (the README's generator reader)."""
    rng = np.random.default_rng(2)
    for i in range(64):
        yield rng.normal(size=3).astype(np.float32) + i % 3, i % 3


def not_a_reader():
    return 42


def buggy_rows():
    """A user's reader with a bug after its first entry: a TypeError the command line must not hide."""
    yield np.zeros(4, np.float32), 0
    yield np.zeros(4, np.float32), 1 + "1"


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
    (["train", "--reader", "nosuch"], "Error: unknown reader 'nosuch'; known readers: arrow, image-folder, jsonl, mnist, parquet, split-mnist, tar-shards."),
    (["train", "--reader", "nosuch_module:make"], "Error: cannot import module 'nosuch_module'"),
    (["train", "--model", "nosuch"], "Error: unknown model 'nosuch'"),
    (["train", "--reader", "tests.test_cli:three_columns"], "Error: reader 'tests.test_cli:three_columns' gives entries that are a tuple of 3 columns"),
    (["train", "--reader", "tests.test_cli:not_a_reader"], "Error: reader 'tests.test_cli:not_a_reader': calling 'not_a_reader' returned int, neither entries nor a reader"),
    (["train", "--data-dir", "/nonexistent-readerkit", "--no-download"],
     "Error: mnist: the data folder /nonexistent-readerkit does not exist; check its name (--data-dir"),
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


@pytest.mark.skipif(not (SHARED_DATA / "mnist").is_dir(), reason="the real MNIST files (../shared/data/mnist) are absent")
@pytest.mark.limit(120)  # 5 s alone; 16-29 s on a loaded machine (issue 27)
def test_main_job_reaches_the_target_accuracy_on_real_mnist(tmp_path):
    """The README's main command, as a user runs it, on the real files."""
    log = tmp_path / "log.jsonl"
    env = {**os.environ, "READERKIT_DATA": str(SHARED_DATA)}
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
    assert other.exit_code == 1 and "other settings or data (--lr: 0.003 then, 0.01 now)" in other.output


def test_cli_resume_of_a_mistyped_folder_fails_at_start_and_creates_nothing(tiny_mnist, tmp_path):
    """New-user trial (issue 12): a mistyped --resume folder quietly started over."""
    typo = tmp_path / "chekpoint"
    result = run("train", "--data-dir", str(tiny_mnist), "--no-download", "--passes", "1",
                 "--checkpoint-dir", str(typo), "--resume")
    assert result.exit_code == 1 and not typo.exists()
    assert result.output == (f"Error: --resume: {typo} does not exist; check the folder's name, or drop --resume "
                             "to start a new run\n")


def test_cli_resume_from_a_folder_named_checkpoint_npz_fails_at_start(tiny_mnist, tmp_path):
    """New-user trial (issue 12): --resume said "no checkpoint" and then died at the first save."""
    (tmp_path / "ck" / "checkpoint.npz").mkdir(parents=True)
    result = run("train", "--data-dir", str(tiny_mnist), "--no-download", "--checkpoint-dir", str(tmp_path / "ck"),
                 "--resume")
    assert result.exit_code == 1 and "checkpoint.npz is not a file (a folder?)" in result.output
    assert "pass 0" not in result.output


def _train_args(tiny_mnist, ckpt, *more):
    return ["train", "--data-dir", str(tiny_mnist), "--no-download", "--batch-size", "64", "--checkpoint-dir",
            str(ckpt), *more]


def test_cli_new_run_into_a_folder_with_a_checkpoint_is_refused_byte_for_byte(tiny_mnist, tmp_path):
    """New-user trial (issue 12): --passes 1 into a folder of a 5-pass run replaced its checkpoint silently."""
    ckpt = tmp_path / "ck"
    assert run(*_train_args(tiny_mnist, ckpt, "--passes", "2")).exit_code == 0
    before = (ckpt / "checkpoint.npz").read_bytes()
    refused = run(*_train_args(tiny_mnist, ckpt, "--passes", "1"))
    assert refused.exit_code == 1 and (ckpt / "checkpoint.npz").read_bytes() == before
    assert refused.output == (f"Error: {ckpt} holds a checkpoint ({ckpt / 'checkpoint.npz'}); add --resume to "
                              "continue that run, or --overwrite to start over and replace it\n")
    again = run(*_train_args(tiny_mnist, ckpt, "--passes", "1", "--overwrite"))
    assert again.exit_code == 0 and [line[:6] for line in again.stdout.splitlines() if "loss" in line] == ["pass 0"]
    assert (ckpt / "checkpoint.npz").read_bytes() != before


def test_cli_resume_of_the_same_files_by_another_path_and_refusal_of_other_data(tiny_mnist, tmp_path, monkeypatch):
    """New-user trial (issue 12): --data-dir vs READERKIT_DATA was refused; Fashion-MNIST was accepted."""
    ckpt = tmp_path / "ck"
    monkeypatch.setenv("READERKIT_DATA", str(tiny_mnist))
    base = ["train", "--no-download", "--batch-size", "64", "--checkpoint-dir", str(ckpt)]
    assert run(*base, "--passes", "1").exit_code == 0
    other = write_mnist(tmp_path / "fashion", seed=5) if (tmp_path / "fashion").mkdir() is None else None
    refused = run(*base, "--data-dir", str(other), "--passes", "2", "--resume")
    assert refused.exit_code == 1 and "other settings or data (content: the data itself differs" in refused.output
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in tiny_mnist.glob("*-ubyte*"):
        (copy / f.name).write_bytes(f.read_bytes())
    resumed = run(*base, "--data-dir", str(copy), "--passes", "2", "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert [line[:6] for line in resumed.stdout.splitlines() if "loss" in line] == ["pass 1"]


def test_cli_resume_keeps_each_pass_once_in_the_json_log(tiny_mnist, tmp_path):
    """New-user trial (issue 12): a kill between a pass's log line and its checkpoint logged the pass twice."""
    ckpt, log = tmp_path / "ck", tmp_path / "log.jsonl"
    assert run(*_train_args(tiny_mnist, ckpt, "--passes", "2", "--log-json", str(log))).exit_code == 0
    # as if killed after pass 2's line was written but before its checkpoint, and in the middle of pass 3's line
    log.write_text(log.read_text() + '{"pass": 2, "train_loss": 1.0}\n{"pass": 3, "tra')
    assert run(*_train_args(tiny_mnist, ckpt, "--passes", "3", "--log-json", str(log), "--resume")).exit_code == 0
    assert [json.loads(line)["pass"] for line in log.read_text().splitlines()] == [0, 1, 2]


def test_cli_second_run_into_a_locked_folder_names_the_first(tiny_mnist, tmp_path):
    from train.checkpoints.files import lock_folder

    ckpt = tmp_path / "ck"
    with lock_folder(str(ckpt)):
        result = run(*_train_args(tiny_mnist, ckpt, "--passes", "1"))
    assert result.exit_code == 1 and f"another run is using {ckpt} (pid {os.getpid()})" in result.output


def test_cli_a_refused_run_leaves_the_live_runs_log_untouched(tiny_mnist, tmp_path):
    """Review of issue 12: the log was trimmed or emptied before the folder's lock refused the run."""
    from train.checkpoints.files import lock_folder

    ckpt, log = tmp_path / "ck", tmp_path / "log.jsonl"
    log.write_text('{"pass": 0}\n{"pass": 1}\n')
    with lock_folder(str(ckpt)):
        for more in ([], ["--resume"], ["--overwrite"]):
            result = run(*_train_args(tiny_mnist, ckpt, "--passes", "1", "--log-json", str(log), *more))
            assert result.exit_code == 1 and "another run is using" in result.output
    assert log.read_text() == '{"pass": 0}\n{"pass": 1}\n'


def test_cli_a_refused_resume_or_failed_overwrite_touches_neither_log_nor_checkpoint(tiny_mnist, tmp_path):
    """Review of issue 12: a resume refused for other settings still cut the log; an --overwrite whose reader
    failed to load had already removed the checkpoint."""
    ck, log = tmp_path / "ck", tmp_path / "log.jsonl"
    assert run(*_train_args(tiny_mnist, ck, "--passes", "2", "--log-json", str(log))).exit_code == 0
    lines, before = log.read_text(), (ck / "checkpoint.npz").read_bytes()
    refused = run(*_train_args(tiny_mnist, ck, "--passes", "3", "--seed", "7", "--resume", "--log-json", str(log)))
    assert refused.exit_code == 1 and "(--seed: 0 then, 7 now; pipeline: stage 0 was" in refused.output
    failed = run(*_train_args(tiny_mnist, ck, "--passes", "1", "--overwrite", "--reader", "nosuchmodule:rows",
                              "--log-json", str(log)))
    assert failed.exit_code == 1 and "nosuchmodule" in failed.output
    assert log.read_text() == lines and (ck / "checkpoint.npz").read_bytes() == before


def test_cli_resume_with_another_reader_names_it(tiny_mnist, tmp_path, monkeypatch):
    """Review of issue 12: a resume with another --reader did not say the reader had changed."""
    (tmp_path / "mymnist.py").write_text("from readers.sources.mnist import test, train\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ckpt = tmp_path / "ck"
    assert run(*_train_args(tiny_mnist, ckpt, "--passes", "1")).exit_code == 0
    other = run(*_train_args(tiny_mnist, ckpt, "--passes", "2", "--resume", "--reader", "mymnist"))
    assert other.exit_code == 1 and "(--reader: 'mnist' then, 'mymnist' now)" in other.output


def test_cli_classes_below_the_labels_read_are_refused_before_training(tiny_mnist):
    result = run("train", "--data-dir", str(tiny_mnist), "--no-download", "--passes", "1", "--classes", "3")
    assert result.exit_code == 1 and "pass 0" not in result.output
    assert "Error: --classes 3: the training split has labels up to 9; pass --classes 10 or more" in result.output


LATE_CLASS = """
import numpy as np

def rows():  # a stream sorted by class: label 2 first appears after the 10,000 entries the classes are counted in
    for i in range(10_200):
        yield np.full(3, i % 7, np.float32), 0 if i < 5_000 else 1 if i < 10_100 else 2
"""


def test_cli_a_label_beyond_the_counted_classes_says_which_option_and_why(tmp_path, monkeypatch):
    """New-user trial of issue 12: a stream sorted by class failed mid-run with the API's advice."""
    (tmp_path / "late.py").write_text(LATE_CLASS)
    monkeypatch.syspath_prepend(str(tmp_path))
    result = run("train", "--reader", "late:rows", "--passes", "1", "--batch-size", "512",
                 "--checkpoint-dir", str(tmp_path / "ck"))
    assert result.exit_code == 1
    error = result.output.splitlines()[-1]
    assert re.search(r"label 2 at pass 0, step \d+ is out of range for 2 classes \(counted in the labels read "
                     r"before training\); pass --classes 3 or more; the reader is a stream", error), error
    assert "n_classes" not in error and "with --checkpoint-dir, add --overwrite" in error


def test_cli_a_test_split_that_cannot_fit_the_model_fails_before_training(tmp_path, monkeypatch):
    """New-user trial of issue 12: a test split's wider images or larger labels failed after a whole pass."""
    (tmp_path / "splits.py").write_text(
        "import numpy as np\n"
        "def train():\n    yield from ((np.zeros(8, np.float32), i % 2) for i in range(40))\n"
        "def test():\n    yield from ((np.zeros(WIDTH, np.float32), LABEL) for i in range(10))\n"
        "WIDTH, LABEL = 9, 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    wide = run("train", "--reader", "splits", "--passes", "1")
    assert wide.exit_code == 1 and "pass 0" not in wide.output
    assert "the test split's images (image float32[9]) do not match the training split's (image float32[8])" in wide.output
    import splits
    monkeypatch.setattr(splits, "WIDTH", 8)
    monkeypatch.setattr(splits, "LABEL", 4)
    counted = run("train", "--reader", "splits", "--passes", "1")
    assert counted.exit_code == 0, counted.output
    assert counted.output.splitlines()[0].endswith("labels 0..1 in all 40 entries, up to 4 in the test split: 5 classes")


INTERRUPTING = """
import os
import numpy as np

def rows():
    for i in range(64):
        if os.path.exists(os.environ["STOP_AFTER"]):  # the key press comes once pass 0 is saved
            raise KeyboardInterrupt
        yield np.full(3, i % 2, np.float32), i % 2
"""


def test_cli_resume_command_sets_the_data_folder_it_found_in_the_environment(tmp_path, monkeypatch):
    """Review of issue 12: `READERKIT_DATA=... cli.py train` printed a resume command without it."""
    (tmp_path / "stopping.py").write_text(INTERRUPTING)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("READERKIT_DATA", str(tmp_path / "my data"))
    monkeypatch.setenv("STOP_AFTER", str(tmp_path / "ck" / "checkpoint.npz"))
    result = run("train", "--reader", "stopping:rows", "--batch-size", "8", "--passes", "2",
                 "--checkpoint-dir", str(tmp_path / "ck"))
    assert result.exit_code == 130, result.output
    command = result.stderr.strip().splitlines()[-1].strip()
    assert command.startswith(f"READERKIT_DATA='{tmp_path / 'my data'}' ") and command.endswith(" --resume")


def test_cli_ctrl_c_before_any_data_is_read_exits_130_not_aborted(tmp_path, monkeypatch):
    """Review of issue 12: a very early Ctrl-C printed click's "Aborted!" with exit code 1."""
    import train.commands.training

    def interrupted(name):
        raise KeyboardInterrupt
    monkeypatch.setattr(train.commands.training, "find_model", interrupted)
    result = run("train", "--checkpoint-dir", str(tmp_path / "ck"))
    assert result.exit_code == 130 and "Aborted" not in result.output
    assert "interrupted: no checkpoint was saved in" in result.stderr


def test_cli_resume_of_a_finished_run_with_other_settings_says_only_what_differs(tiny_mnist, tmp_path):
    """Trial of issue 11: "already covers" and "made with lr=" were both printed."""
    ckpt = tmp_path / "ck"
    assert run(*_train_args(tiny_mnist, ckpt, "--passes", "1")).exit_code == 0
    other = run(*_train_args(tiny_mnist, ckpt, "--passes", "1", "--resume", "--lr", "0.01"))
    assert other.exit_code == 1 and "already holds" not in other.output and "(--lr: 0.003 then, 0.01 now)" in other.output
    same = run(*_train_args(tiny_mnist, ckpt, "--passes", "1", "--resume"))
    assert same.exit_code == 0 and "already holds 1 passes; nothing to train for --passes 1" in same.stderr


SLOW_READER = """
import time
import numpy as np

def rows():
    for i in range(64):
        time.sleep(0.004)
        yield np.full(3, i % 2, np.float32), i % 2
"""


STOPPED_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def _stop_after_first_checkpoint(tmp_path, signum):
    """Train slowdata:rows from cli.py in ``tmp_path``, send ``signum`` once a checkpoint is saved: (rc, stderr)."""
    (tmp_path / "slowdata.py").write_text(SLOW_READER)
    args = ["train", "--reader", "slowdata:rows", "--batch-size", "8", "--passes", "4", "--checkpoint-every", "1",
            "--checkpoint-dir", "ck"]
    with python_child(ROOT / "cli.py", *args, cwd=tmp_path, env=STOPPED_ENV, text=True) as proc:
        wait_until(lambda: (tmp_path / "ck" / "checkpoint.npz").exists() or proc.poll() is not None, 60,
                   "the first checkpoint")
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    return proc.returncode, err


def test_cli_ctrl_c_prints_the_resume_command_and_exits_130(tmp_path):
    """New-user trial (issue 12): Ctrl-C left a traceback and no word on how to go on."""
    returncode, err = _stop_after_first_checkpoint(tmp_path, signal.SIGINT)
    assert returncode == 130, err
    command = err.strip().splitlines()[-1].strip()
    assert command == f"python {ROOT / 'cli.py'} train --reader slowdata:rows --batch-size 8 --passes 4 " \
                      "--checkpoint-dir ck --checkpoint-every 1 --resume"
    assert "interrupted: the checkpoint in ck holds pass " in err and "Traceback" not in err
    assert f"Resume with, from {tmp_path}:" in err
    resumed = subprocess.run([sys.executable, *command.split()[1:]], cwd=tmp_path, env=STOPPED_ENV,
                             capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert [line[:6] for line in resumed.stdout.splitlines() if "loss" in line][-1] == "pass 3"


def test_cli_sigterm_stops_like_ctrl_c_with_exit_143(tmp_path):
    """New-user trial of issue 12: a scheduler's SIGTERM left no message, no resume command and a part file."""
    returncode, err = _stop_after_first_checkpoint(tmp_path, signal.SIGTERM)
    assert returncode == 143, err
    assert "terminated (SIGTERM): the checkpoint in ck holds pass " in err and "Traceback" not in err
    assert err.strip().splitlines()[-1].strip().endswith("--checkpoint-every 1 --resume")


def test_cli_reader_may_be_a_generator_function_in_the_current_folder(tmp_path):
    """New-user trial (issue 12): module:rows, a plain generator function, failed with advice that did not apply,
    and a module in the current folder could not be imported by `python path/to/cli.py`."""
    (tmp_path / "mydata.py").write_text(SLOW_READER)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, str(ROOT / "cli.py"), "train", "--reader", "mydata:rows", "--passes", "1",
                           "--batch-size", "16"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "model mlp: image float32[3]: 3 inputs; labels 0..1 in all 64 entries: 2 classes"
    assert lines[1].startswith("pass 0: loss")


TWO_SPLITS = """
import numpy as np

def _rows(n, seed):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        x = rng.normal(size=4).astype(np.float32)
        yield x, int(x[0] > 0)

def train():
    return _rows(200, 0)

def test():
    return _rows(50, 1)
"""


def test_cli_reader_may_be_a_bare_module_with_train_and_test(tmp_path):
    (tmp_path / "splits.py").write_text(TWO_SPLITS)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, str(ROOT / "cli.py"), "train", "--reader", "splits", "--passes", "2",
                           "--batch-size", "16"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    passes = [line for line in proc.stdout.splitlines() if line.startswith("pass ")]
    assert len(passes) == 2 and "test accuracy n/a" not in passes[-1]


def test_cli_classes_given_are_used_and_shown(tmp_path):
    result = run("train", "--reader", "tests.test_cli:rows", "--passes", "1", "--classes", "5")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == "model mlp: image float32[3]: 3 inputs; 5 classes (--classes)"


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
    assert lines[0] == "bench: tests.test_cli:tiny_reader, up to 20,000 entries, 2 thread workers, batches of 16, step 0 ms"
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
    assert lines[0] == "bench: tests.test_cli:tiny_reader, up to 32 entries, 1 process worker, batches of 64, step 0 ms"
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
    ("tests.test_cli:not_a_reader", "Error: reader 'tests.test_cli:not_a_reader': calling 'not_a_reader' returned int"),
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


@pytest.mark.skipif(not (SHARED_DATA / "mnist").is_dir(), reason="the real MNIST files (../shared/data/mnist) are absent")
def test_cli_bench_on_real_mnist():
    result = run("bench", "--reader", "mnist", "--data-dir", str(SHARED_DATA / "mnist"), "--no-download", "--limit", "5000")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "bench: mnist, first 5,000 entries, 2 process workers, batches of 64, step 0 ms"
    assert re.fullmatch(r"reader alone: 5,000 entries, [\d,]+ entries/s \(serial, no prefetch\)", lines[1])
    assert re.fullmatch(STAGE.format(re.escape("prefetch(2 processes)")), lines[3])
    assert lines[4].startswith("bottleneck: ") and len(lines) == 5


def two_thousand():
    """An indexed reader of 2,000 entries."""
    return readers.from_arrays(np.zeros((2000, 3), np.float32), np.arange(2000) % 2)


def test_cli_inspect_shows_a_functions_clean_name_and_checks_the_reader():
    """New-user trial (issue 12): inspect showed <function rows at 0x...> where print(pipeline) shows rows."""
    result = run("inspect", "--reader", "tests.test_cli:rows", "--count", "1")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[1:3] == ["pipeline:", "  rows"] and "0x" not in result.output
    bad = run("inspect", "--reader", "tests.test_cli:not_a_reader")
    assert bad.exit_code == 1 and "returned int, neither entries nor a reader" in bad.output


def test_cli_bench_says_how_many_entries_an_indexed_reader_has():
    """New-user trial (issue 12): bench said "first 20,000 entries" for a 2,000-entry reader."""
    result = run("bench", "--reader", "tests.test_cli:two_thousand", "--mode", "thread", "--workers", "1")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].startswith("bench: tests.test_cli:two_thousand, first 2,000 entries, ")


def test_cli_inspect_of_a_module_whose_test_split_is_a_stream(tmp_path, monkeypatch):
    """New-user trial (issue 12): `inspect --reader mydata` failed on len() of the test split's function."""
    (tmp_path / "streamsplits.py").write_text(TWO_SPLITS)
    monkeypatch.syspath_prepend(str(tmp_path))
    result = run("inspect", "--reader", "streamsplits", "--count", "1")
    assert result.exit_code == 0, result.output
    assert "length: unknown (a stream) (test split: a stream)" in result.stdout.splitlines()


def test_cli_tokenize_writes_a_token_file_that_trains(tmp_path):
    (tmp_path / "a.txt").write_text("the cat sat on the mat\n" * 20)
    result = run("tokenize", str(tmp_path / "a.txt"), "--out", str(tmp_path / "tok"))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"wrote {tmp_path / 'tok' / 'tokens.bin'}: 460 byte-level tokens (vocabulary 256) from 1 file, 2 bytes each",
        f'wrote {tmp_path / "tok" / "data.toml"}: token_size = "TwoBytes", vocab_size = 256, seq_len = 2048, no '
        "shuffle_seed (the files' order)"]
    assert f'next: a state.toml whose data location is Local = "{tmp_path / "tok"}"' in result.stderr
    assert len(readers.tokens(tmp_path / "tok", seq_len=45)) == 10
    bad = run("tokenize", str(tmp_path / "a.txt"), "--out", str(tmp_path / "tok"), "--token-size", "3")
    assert bad.exit_code == 2 and "'3' is not one of '2', '4'" in bad.output
    (tmp_path / "tok" / "old.bin").write_bytes(b"\0\0" * 100)
    again = run("tokenize", str(tmp_path / "a.txt"), "--out", str(tmp_path / "tok"), "--overwrite")
    assert again.exit_code == 0 and "holds other token files too (old.bin)" in again.stderr


# -- expected failures are one line; anything else keeps its traceback (issue 26) --------------------------------

@pytest.mark.parametrize("command", [["train", "--passes", "1"], ["inspect"],
                                     ["bench", "--workers", "1", "--mode", "process", "--limit", "10"]],
                         ids=lambda c: c[0])
def test_cli_a_bug_in_a_users_reader_is_not_turned_into_one_line(command):
    """Issue 26: any TypeError became one line, from None, hiding the bug in a user's own reader (bench's
    comes from a worker process, as itself)."""
    result = run(*command, "--reader", "tests.test_cli:buggy_rows")
    assert result.exit_code == 1 and type(result.exception) is TypeError, result.output
    assert str(result.exception) == "unsupported operand type(s) for +: 'int' and 'str'"
    assert not any(line.startswith("Error:") for line in result.output.splitlines())


def test_cli_a_bug_in_a_users_reader_prints_its_traceback(tmp_path):
    (tmp_path / "buggy.py").write_text("def rows():\n    yield 1, 0\n    yield 2, 1 + '1'\n")
    proc = subprocess.run([sys.executable, str(ROOT / "cli.py"), "inspect", "--reader", "buggy:rows"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and not any(line.startswith("Error:") for line in (proc.stdout + proc.stderr).splitlines())
    lines = proc.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert f'  File "{tmp_path / "buggy.py"}", line 3, in rows' in lines
    assert lines[-1] == "TypeError: unsupported operand type(s) for +: 'int' and 'str'"


def test_cli_expected_failures_are_one_exact_line_with_exit_code_1(tmp_path):
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text("x = [\n")
    for args, line in [
        (["train", "--reader", "nosuch"],
         "Error: unknown reader 'nosuch'; known readers: arrow, image-folder, jsonl, mnist, parquet, split-mnist, tar-shards. To add one, declare an entry point in group "
         "'readerkit.readers' in a package's metadata, or name an importable module ('mydata', with train and test) or "
         "'module:attribute'; modules are found on the import path (the CLI puts the current folder first)"),
        (["train", "--data-dir", "/nonexistent-readerkit", "--no-download"],
         "Error: mnist: the data folder /nonexistent-readerkit does not exist; check its name (--data-dir / data_dir), "
         "or leave it out to use READERKIT_DATA and the cache"),
        (["train", "--config", str(bad_toml)],
         f"Error: {bad_toml}: line 1, column 6: not valid TOML (Invalid value); correct the TOML syntax of that line: "
         "'x = ['"),
    ]:
        result = run(*args)
        assert (result.exit_code, result.output) == (1, line + "\n"), args


def test_cli_a_busy_checkpoint_folder_and_a_refused_resume_end_in_one_exact_line(tiny_mnist, tmp_path):
    from train.checkpoints.files import lock_folder

    ck = tmp_path / "ck"
    with lock_folder(str(ck)):
        busy = run(*_train_args(tiny_mnist, ck, "--passes", "1"))
    assert (busy.exit_code, busy.output) == (1, f"Error: another run is using {ck} (pid {os.getpid()}); wait for it "
                                                "to end, or give this run another checkpoint folder\n")
    assert run(*_train_args(tiny_mnist, ck, "--passes", "1")).exit_code == 0
    refused = run(*_train_args(tiny_mnist, ck, "--passes", "2", "--resume", "--lr", "0.01", "--seed", "3"))
    assert refused.exit_code == 1 and refused.output.splitlines() == [
        "model mlp: image float32[784]: 784 inputs; labels 0..9 in all 300 entries: 10 classes",
        f"Error: {ck}: the checkpoint was made with other settings or data (--seed: 0 then, 3 now; --lr: 0.003 then, "
        "0.01 now; pipeline: stage 0 was 'shuffle(buf_size=None (global), seed=0)', now 'shuffle(buf_size=None "
        "(global), seed=3)'); resume with the same settings and data, or train into another checkpoint folder"]


def test_cli_an_unreachable_server_is_one_line(tmp_path):
    """Issue 27: a server refusing at the start was waited for 120 s; --connect-timeout says how long (5 s)."""
    from tests.train.commands.test_token_training import STATE

    state = tmp_path / "state.toml"
    state.write_text(STATE.format(location='Server = "127.0.0.1:9"'))  # the discard port: nobody listens
    result = run("train", "--config", str(state), "--connect-timeout", "0.2")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert re.fullmatch(rf"Error: {re.escape(str(state))}: data_location Server: 127\.0\.0\.1:9: no data-provider "
                        r"server answered within 0\.2 s, over \d+ attempts to connect \(the last: .*\); check that "
                        r"`python cli.py serve` runs there .* longer connect_timeout \(now 0\.2 s; .*",
                        result.output.splitlines()[-1])



@pytest.mark.parametrize("command", [
    ["train", "--reader", "tests.test_cli:rows", "--checkpoint-dir", "{file}/runs"],
    ["tokenize", "{file}", "--out", "{file}/tokens"],
    ["cache", "info", "{file}/cache"],
    ["cache", "clear", "--yes", "{file}/cache"],
])
def test_cli_a_folder_the_system_refuses_is_one_line(command, tmp_path):
    """Review of issue 26: a folder under a file gave NotADirectoryError's traceback, not the one line it gave before."""
    file = tmp_path / "a-file.txt"
    file.write_text("text\n")
    result = run(*[part.format(file=file) for part in command])
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1, result.output
    assert result.output.startswith("Error: ") and str(file) in result.output and "Traceback" not in result.output
