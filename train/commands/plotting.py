"""``python cli.py plot LOG.jsonl``: the curves of a run's ``--log-json`` log, drawn into an image file.

Three kinds of log, told apart by their keys: ``train``'s, a line per pass
(loss; train and test accuracy), ``train --config``'s, a line every
``--log-every`` steps (loss; perplexity), and ``pipeline run``'s, a line per
trigger (the training's loss; each task's accuracy after the trigger, and
their average). Drawing needs matplotlib, an optional extra
(``pip install matplotlib``, or ``readerkit[plot]``); reading the log does not.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any

from readers.errors import BadValue, MissingFile, ReaderkitError

__all__ = ["PlotUnavailable", "log_kind", "plot_log", "read_log"]

#: Each kind of log and the keys that tell it.
KINDS = {"passes": ("pass", "train_loss", "train_accuracy"), "steps": ("step", "loss", "perplexity"),
         "pipeline": ("trigger_id", "tasks", "accuracies")}
SIZE = (10.0, 4.0)  # inches, at DPI: a 1000 x 400 image
DPI = 100


class PlotUnavailable(ReaderkitError, ModuleNotFoundError):
    """matplotlib, which drawing needs, is not installed."""


def read_log(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of a JSON-lines log, in order; a line that is not a JSON object is an error naming it, except
    a last line without its newline that does not parse: one the run is still writing, left out
    (``_read_records`` says so).

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "log.jsonl")
    >>> _ = open(path, "w").write('{"pass": 0, "train_loss": 0.5}\\n\\n{"pass": 1, "train_loss": 0.25}\\n{"pass": 2, "tr')
    >>> [r["train_loss"] for r in read_log(path)]
    [0.5, 0.25]
    """
    return _read_records(path)[0]


def _read_records(path: str | os.PathLike) -> tuple[list[dict[str, Any]], int | None]:
    """(the records of the JSON-lines log at ``path``, the number of its last line when it was left out: still
    being written, without its newline and not yet a JSON object; else None). Any other line that is not a
    JSON object is an error naming it.

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "log.jsonl")
    >>> _ = open(path, "w").write('{"step": 10, "loss": 2.5}\\n{"step": 20, "lo')
    >>> _read_records(path)
    ([{'step': 10, 'loss': 2.5}], 2)
    """
    if not os.path.isfile(path):
        raise MissingFile(f"{path}: no such log file; give a file that --log-json wrote")
    records, partial = [], None
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if not isinstance(record, dict):
                if not line.endswith("\n") and record is None:  # the last line, half written: the run is at it
                    partial = number
                    break
                raise BadValue(f"{path}: line {number} is not a JSON object ({line.strip()[:60]!r}); give a log that "
                               "train or pipeline run wrote with --log-json") from None
            records.append(record)
    if not records:
        raise BadValue(f"{path}: the log holds no records yet; plot it once the run has logged a pass, a step or "
                       "a trigger")
    return records, partial


def log_kind(path: str | os.PathLike, records: list[dict[str, Any]]) -> str:
    """Which run wrote ``records``: ``"passes"`` (train), ``"steps"`` (train --config) or ``"pipeline"``.

    >>> log_kind("log.jsonl", [{"step": 10, "loss": 2.0, "perplexity": 7.4, "tokens_per_s": 900.0}])
    'steps'
    >>> log_kind("log.jsonl", [{"loss": 2.0}])
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: log.jsonl: its first record has keys ['loss'], not those of a log of train (pass, train_loss, train_accuracy), train --config (step, loss, perplexity) or pipeline run (trigger_id, tasks, accuracies)
    """
    for kind, keys in KINDS.items():
        if all(key in records[0] for key in keys):
            return kind
    known = ", ".join(f"{who} ({', '.join(KINDS[kind])})" for who, kind in (
        ("train", "passes"), ("train --config", "steps"), ("pipeline run", "pipeline")))
    raise BadValue(f"{path}: its first record has keys {sorted(records[0])}, not those of a log of "
                   f"{known.replace(', pipeline run', ' or pipeline run')}")


def _figure() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotUnavailable("plot needs matplotlib, which is not installed: pip install matplotlib "
                              "(or pip install readerkit[plot])") from None
    return Figure(figsize=SIZE, dpi=DPI, layout="constrained")


def _number(value: Any) -> float:
    """A figure as a float, None (an undefined figure in the log) as NaN: a gap in its curve."""
    return math.nan if value is None else float(value)


def _draw(kind: str, records: list[dict[str, Any]], left: Any, right: Any) -> str:
    """Draw the curves of ``records`` on two axes; the words for what was drawn."""
    if kind == "pipeline":
        x = [r["trigger_id"] for r in records]
        left.plot(x, [_number(r.get("train_loss")) for r in records], marker="o", label="train loss")
        left.set(xlabel="trigger", ylabel="loss", title="training loss per trigger")
        tasks = sorted({t for r in records for t in r["tasks"]})
        for task in tasks:
            y = [100 * r["accuracies"][r["tasks"].index(task)] if task in r["tasks"] else math.nan for r in records]
            right.plot(x, y, marker=".", label=f"task {task}")
        right.plot(x, [100 * _number(r.get("average_accuracy")) for r in records], color="black", linewidth=2,
                   linestyle="--", label="average")
        right.set(xlabel="trigger", ylabel="accuracy (%)", ylim=(0, 100), title="accuracy per task after each trigger")
        return f"loss and per-task accuracies of {len(records)} trigger{'s' * (len(records) != 1)}, {len(tasks)} tasks"
    if kind == "steps":
        x = [r["step"] for r in records]
        left.plot(x, [_number(r["loss"]) for r in records], label="train loss")
        left.set(xlabel="step", ylabel="loss (nats per token)", title="loss")
        right.plot(x, [_number(r["perplexity"]) for r in records], color="tab:orange", label="perplexity")
        right.set(xlabel="step", ylabel="perplexity", title="perplexity")
        return f"loss and perplexity of {len(records)} records, to step {x[-1]}"
    x = [r["pass"] for r in records]
    left.plot(x, [_number(r["train_loss"]) for r in records], marker="o", label="train loss")
    left.set(xlabel="pass", ylabel="loss", title="loss")
    right.plot(x, [100 * _number(r["train_accuracy"]) for r in records], marker="o", label="train")
    right.plot(x, [100 * _number(r.get("test_accuracy")) for r in records], marker="o", label="test")
    right.set(xlabel="pass", ylabel="accuracy (%)", title="accuracy")
    return f"loss and accuracy of {len(records)} pass{'es' * (len(records) != 1)}"


def plot_log(path: str | os.PathLike, out: str | os.PathLike | None = None) -> tuple[str, str]:
    """Draw the curves of the log at ``path`` into ``out`` (the log's name with .png when None); (``out``, the
    words for what it holds). The image's format follows ``out``'s extension (.png, .svg, .pdf).

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "log.jsonl")
    >>> lines = [{"pass": p, "train_loss": 1 / (p + 1), "train_accuracy": 0.8 + p / 50, "test_accuracy": 0.8}
    ...          for p in range(3)]
    >>> _ = open(path, "w").write("".join(json.dumps(line) + "\\n" for line in lines))
    >>> written, what = plot_log(path)
    >>> os.path.basename(written), what
    ('log.png', 'loss and accuracy of 3 passes')
    """
    records, partial = _read_records(path)
    kind = log_kind(path, records)
    figure = _figure()
    left, right = figure.subplots(1, 2)
    what = _draw(kind, records, left, right)
    from matplotlib.ticker import MaxNLocator

    for axes in (left, right):
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))  # passes, steps and triggers are counts
        axes.grid(alpha=0.3)
        axes.legend(fontsize="small")
    figure.suptitle(os.path.basename(path))
    out = os.fspath(out) if out is not None else os.path.splitext(os.fspath(path))[0] + ".png"
    folder = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(folder):
        raise MissingFile(f"--out {out}: the folder {folder} does not exist; create it or give another file")
    try:
        figure.savefig(out)
    except ValueError as exc:  # an extension matplotlib cannot write
        raise BadValue(f"--out {out}: {exc}; give a .png, .svg or .pdf file") from None
    if partial is not None:
        what += f" (line {partial}, still being written, left out)"
    return out, what
