"""What the command line shows of a run: a progress bar and a line per pass, and a JSON log that agrees
with the checkpoint.
"""
from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Callable
from typing import Any

import click

from readers.errors import ReaderkitError
from train.checkpoints.resume import Difference, ResumeRefused
from train.commands.progress import Meter
from train.events import BeginPass, EndIteration, EndPass, TestResult

__all__ = ["Progress", "fail_cleanly", "in_flag_words", "keep_passes_before"]


class Progress:
    """The CLI's event handler: the progress of each pass (a bar on a terminal, else a log line every
    ``--progress-every`` seconds, with entries/s and the ETA: ``Meter``) and one summary line per pass.

    ``flush()`` prints the line of the pass that just ended, after its test
    if any, and appends it to the JSON log as one object. ``log`` is an open
    file, or a path opened once ``train`` has accepted the run, so a run
    refused at its start leaves the file as it was: with ``resume``, cut at
    the first pass to the passes before the one it resumes
    (``keep_passes_before``) and appended to; else written afresh at the
    first line, so a new run stopped in its first pass (whose ``overwrite``
    keeps the old checkpoint until its first save) leaves the old log too. ``close()`` ends a bar cut short
    (restoring the terminal's cursor) and closes the log.

    >>> import io
    >>> from train.events import EndPass
    >>> log = io.StringIO()
    >>> progress = Progress(log)
    >>> progress(EndPass(0, {"loss": 0.5, "accuracy": 0.9, "samples_per_s": 1000.0, "seconds": 1.0}))
    >>> progress.flush()
    pass 0: loss 0.5000  train accuracy 90.00%  test accuracy n/a  1,000 samples/s
    >>> log.getvalue()
    '{"pass": 0, "train_loss": 0.5, "train_accuracy": 0.9, "test_accuracy": null, "samples_per_s": 1000.0, "seconds": 1.0}\\n'
    """

    def __init__(self, log: Any = None, who: str = "", *, resume: bool = False, batch_size: int | None = None,
                 meter: Callable[..., Meter] = Meter):
        self.bar: Meter | None = None
        self.batch_size, self.meter = batch_size, meter
        self.path = log if isinstance(log, (str, os.PathLike)) else None
        self.log_json = None if self.path is not None else log
        self.who, self.resume = who, resume
        self.pending: dict[str, Any] = {}
        self.passes = 0

    def _open(self, first_pass: int | None) -> None:
        if self.path is None or self.log_json is not None or (first_pass is None) == self.resume:
            return
        if self.resume:
            keep_passes_before(self.path, first_pass)  # lines of passes the checkpoint does not hold go
        self.log_json = open(self.path, "a" if self.resume else "w", encoding="utf-8")

    def close(self) -> None:
        """End a progress bar cut short and close a log this handler opened."""
        if self.bar is not None:
            self.bar.close()
        if self.path is not None and self.log_json is not None:
            self.log_json.close()

    def __call__(self, event: Any) -> None:
        if isinstance(event, BeginPass):
            self._open(event.pass_id)
            label = f"{self.who}pass {event.pass_id}"
            if self.bar is None:
                self.bar = self.meter(label, event.batches, unit="batches", rate_unit="entries", done=event.first_batch)
            else:  # one meter for the run: off a terminal, its lines keep their cadence across passes
                self.bar.restart(label, event.batches, event.first_batch)
        elif isinstance(event, EndIteration):
            if self.bar is not None:
                count = event.metrics.get("count", self.batch_size) if isinstance(event.metrics, dict) else None
                self.bar.update(1, None if count is None else int(count))
        elif isinstance(event, EndPass):
            if self.bar is not None:
                self.bar.close()
            m = event.metrics
            self.pending = {"pass": event.pass_id, "train_loss": m["loss"], "train_accuracy": m["accuracy"],
                            "test_accuracy": None, "samples_per_s": m["samples_per_s"], "seconds": m["seconds"]}
        elif isinstance(event, TestResult):
            self.pending["test_accuracy"] = event.metrics["accuracy"]

    def flush(self) -> None:
        """Print the line of the pass that just ended (after its test, if any)."""
        p = self.pending
        if not p:
            return
        test = "n/a" if p["test_accuracy"] is None or math.isnan(p["test_accuracy"]) else f"{100 * p['test_accuracy']:.2f}%"
        click.echo(f"{self.who}pass {p['pass']}: loss {p['train_loss']:.4f}  train accuracy {100 * p['train_accuracy']:.2f}%  "
                   f"test accuracy {test}  {p['samples_per_s']:,.0f} samples/s")
        self._open(None)
        if self.log_json is not None:  # NaN is not JSON: an undefined figure is null
            clean = {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in p.items()}
            self.log_json.write(json.dumps(clean) + "\n")
            self.log_json.flush()
        self.pending = {}
        self.passes += 1


def keep_passes_before(path: str, first: int, key: str = "pass") -> None:
    """Drop the JSON log's lines of passes from ``first`` on (and a line cut short by a kill), atomically;
    ``key`` names the count a line holds (``"step"`` for a run counted in steps).

    A resume from a checkpoint at pass ``first`` trains those passes again and
    logs them again; a kill between a pass's line and its checkpoint would
    otherwise leave that pass in the log twice.

    >>> import tempfile, os
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "log.jsonl")
    >>> _ = open(path, "w").write('{"pass": 0}\\n{"pass": 1}\\n{"pa')
    >>> keep_passes_before(path, 1)
    >>> open(path).read()
    '{"pass": 0}\\n'
    """
    if not os.path.isfile(path):
        return
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines(keepends=True)
    kept = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # half a line: the run was killed while writing it
        if isinstance(record, dict) and isinstance(record.get(key), int) and record[key] < first:
            kept.append(line if line.endswith("\n") else line + "\n")
    if len(kept) != len(lines):
        tmp = f"{path}.part"
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(kept)
        os.replace(tmp, path)


#: The run's settings as a checkpoint names them, and the options that set them.
_FLAGS = {"batch_size": "--batch-size", "seed": "--seed", "config.reader": "--reader", "config.model": "--model",
          "config.lr": "--lr", "config.lr_decay": "--lr-decay", "config.classes": "--classes", "model.lr": "--lr",
          "model.n_classes": "--classes", "model.seed": "--seed", "model.class": "--model",
          "model.hidden": "--model", "model.n_inputs": "the input size (--reader)",
          "model.vocab_size": "--vocab-size", "config.config": "--config"}


def in_flag_words(refused: ResumeRefused) -> str:
    """A refused resume in the command line's words: each setting that differs named by its option, an option
    that several settings name (the model's and the config's learning rate) once, in the words of the
    setting the user gave (``config``).

    >>> from train.checkpoints.resume import Difference
    >>> in_flag_words(ResumeRefused("ck", [Difference("seed", 0, 1), Difference("model.lr", 0.1, 0.2),
    ...                                    Difference("config.lr", 0.1, 0.2)]))
    'ck: the checkpoint was made with other settings or data (--seed: 0 then, 1 now; --lr: 0.1 then, 0.2 now); resume with the same settings and data, or train into another checkpoint folder'
    """
    named: dict[str, Difference] = {}
    for setting, then, now in refused.settings:
        flag = _FLAGS.get(setting, setting)
        if flag not in named or setting.startswith("config."):
            named[flag] = Difference(flag, then, now)
    return str(ResumeRefused(refused.directory, list(named.values()), refused.data))


def fail_cleanly(command: Callable) -> Callable:
    """An expected failure (``readers.ReaderkitError``) becomes one line and exit code 1, as click's own errors
    do; anything else, a bug in readerkit or in a user's reader, keeps its traceback (and exit code 1): the
    command line's commands wear it.

    >>> import click, readers
    >>> from click.testing import CliRunner
    >>> @click.command()
    ... @fail_cleanly
    ... def broken():
    ...     raise readers.MissingFile("no such folder: /nowhere")
    >>> CliRunner().invoke(broken).output
    'Error: no such folder: /nowhere\\n'
    >>> @click.command()
    ... @fail_cleanly
    ... def buggy():
    ...     return 1 + "2"
    >>> result = CliRunner().invoke(buggy)
    >>> result.exit_code, type(result.exception).__name__
    (1, 'TypeError')
    """

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except ReaderkitError as exc:
            raise click.ClickException(str(exc)) from None

    return wrapper
