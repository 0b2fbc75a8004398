"""The command line's ``pipeline run``, once click has parsed it: the reader and model it builds, the table it
prints, the JSON log it writes, and what it says when it is stopped (exit 130 on Ctrl-C, 143 on SIGTERM).
"""
from __future__ import annotations

import json
import os
from typing import Any

import click

from readers.registry import find_model
from train.command import Terminated, resume_command, scan_sizes, sigterm_stops, splits
from train.pipeline_table import HEADER, row_of
from train.supervisor import run_pipeline

__all__ = ["LOGGED", "run_command"]

#: The keys of each --log-json object, in order.
LOGGED = ("pipeline_id", "trigger_id", "training_id", "set_size", "classes", "steps", "seconds", "tasks",
          "accuracies", "average_accuracy")


class _Table:
    """Prints the table's rows (its header first) and writes the JSON log, one object per trigger."""

    def __init__(self, log: str | None, append: bool):
        self.log, self.append, self.file = log, append, None
        self.pipeline_id: int | None = None
        self.last: dict[str, Any] | None = None

    def started(self, pipeline_id: int) -> None:
        self.pipeline_id = pipeline_id
        if self.log is not None:  # opened once the pipeline is accepted: a refused run leaves the file as it was
            self.file = open(self.log, "a" if self.append else "w", encoding="utf-8")
        click.echo(HEADER)

    def __call__(self, record: dict[str, Any]) -> None:
        self.last = record
        click.echo(row_of(record))
        if self.file is not None:
            self.file.write(json.dumps({k: record[k] for k in LOGGED}) + "\n")
            self.file.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def run_command(params: dict[str, Any]) -> None:
    """Run ``pipeline run`` on its parsed options (``cli.py pipeline run --help`` lists them).

    >>> from click.testing import CliRunner
    >>> import cli
    >>> result = CliRunner().invoke(cli.main, ["pipeline", "run", "--db", "x.db", "--data-dir", "/nonexistent",
    ...                                        "--no-download"])
    >>> result.exit_code, result.output.startswith("Error: mnist: the data folder /nonexistent does not exist")
    (1, True)
    """
    table = _Table(params["log_json"], append=params["resume"] is not None)
    try:
        with sigterm_stops():
            stream, test = splits(params["reader_name"], params["data_dir"], params["download"])
            n_inputs, classes, shown = _sizes(stream, test, params)
            factory, lr = find_model(params["model_name"]), params["lr"]
            click.echo(f"model {params['model_name']}: {shown}")
            run_pipeline(stream, params["trigger_spec"], params["strategy_spec"],
                         lambda seed: factory(n_inputs, n_classes=classes, lr=lr, seed=seed), db=params["db"],
                         test=test, batch_size=params["batch_size"], passes=params["passes"],
                         min_steps=params["min_steps"], seed=params["seed"], resume=params["resume"],
                         on_start=table.started, on_trigger=table,
                         config={"reader": params["reader_name"], "classes": classes, "lr": lr})
    except KeyboardInterrupt as stop:
        table.close()
        _interrupted(table, params, stop)
    finally:
        table.close()
    if table.pipeline_id is None:
        return
    if table.last is None:
        click.echo(f"pipeline {table.pipeline_id}: every trigger's training had finished already; nothing to train")
    elif table.last["average_accuracy"] is not None:
        click.echo(f"pipeline {table.pipeline_id} in {params['db']}: average accuracy over the "
                   f"{len(table.last['tasks'])} tasks after the last trigger: {100 * table.last['average_accuracy']:.2f}%")


def _sizes(stream: Any, test: Any, params: dict[str, Any]) -> tuple[int, int, str]:
    try:
        return scan_sizes(stream, test, params["classes"])
    except (TypeError, ValueError) as exc:
        raise click.ClickException(f"reader {params['reader_name']!r}: {exc}") from None


def _interrupted(table: _Table, params: dict[str, Any], stop: KeyboardInterrupt) -> None:
    what = "terminated (SIGTERM)" if isinstance(stop, Terminated) else "interrupted"
    if table.pipeline_id is None:
        click.echo(f"\n{what} before the pipeline started; nothing to resume", err=True)
    else:
        click.echo(f"\n{what}: pipeline {table.pipeline_id} in {params['db']} goes on after its last finished "
                   f"training. Resume with, from {os.getcwd()}:\n  "
                   f"{resume_command(params, ('--resume', str(table.pipeline_id)))}", err=True)
    click.get_current_context().exit(143 if isinstance(stop, Terminated) else 130)
