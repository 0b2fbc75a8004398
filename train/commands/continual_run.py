"""The command line's ``pipeline run``, once click has parsed it: the reader and model it builds, the table it
prints, the JSON log it writes, and what it says when it is stopped (exit 130 on Ctrl-C, 143 on SIGTERM).
"""
from __future__ import annotations

import json
import os
from typing import Any

import click

from readers.continual.store import PipelineStore
from readers.errors import BadValue, ReaderkitError
from readers.graph import Node
from readers.plugins.registry import find_model, find_reader
from readers.storage.postgres import is_postgres, redact
from train.commands.continual_table import HEADER, finished_records, row_of
from train.commands.options import PipelineRunSettings
from train.commands.progress import Meter
from train.commands.training import (
    Terminated,
    first_entry,
    resume_command,
    scan_sizes,
    sigterm_stops,
    splits,
)
from train.continual.config import PipelineConfigError, changed_lines
from train.continual.strategies import parse_strategy
from train.continual.stream_columns import entry_problem
from train.continual.supervisor import run_pipeline
from train.continual.triggers import parse_trigger
from train.events import BeginPass, EndIteration

__all__ = ["LOGGED", "in_flags", "rank_source", "run_command"]

#: The keys of each --log-json object, in order.
LOGGED = ("pipeline_id", "trigger_id", "training_id", "set_size", "classes", "steps", "passes", "train_loss",
          "seconds", "tasks", "accuracies", "average_accuracy")


class _Table:
    """Prints the table's rows (its header first) and writes the JSON log, one object per trigger.

    The log is written once the pipeline is accepted (a refused run leaves the file as it was). A resumed
    pipeline's log starts with its finished trainings as the store holds them, so a line lost to a kill between
    a training's end and its line is written again, and no trigger is logged twice."""

    def __init__(self, log: str | None, db: str, resumed: bool):
        self.log, self.db, self.file, self.resumed = log, db, None, resumed
        self.pipeline_id: int | None = None
        self.last: dict[str, Any] | None = None

    def started(self, pipeline_id: int) -> None:
        self.pipeline_id = pipeline_id
        if self.log is not None:
            with PipelineStore(self.db, create=False) as store:
                done = finished_records(store, pipeline_id)
            self.file = open(self.log, "w", encoding="utf-8")
            for record in done:
                self._write(record)
        if self.resumed:
            with PipelineStore(self.db, create=False) as store:
                last = store.last_finished(pipeline_id)
            click.echo(f"resuming pipeline {pipeline_id} " + ("from its first trigger" if last is None else
                       f"after trigger {last['trigger_id']} (training {last['training_id']}, its last finished)"))
        click.echo(HEADER)

    def _write(self, record: dict[str, Any]) -> None:
        self.file.write(json.dumps({k: record[k] for k in LOGGED}) + "\n")
        self.file.flush()

    def __call__(self, record: dict[str, Any]) -> None:
        self.last = record
        click.echo(row_of(record))
        if self.file is not None:
            self._write(record)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


class _Trainings:
    """The progress of each trigger's training over its steps (the passes that reach --min-steps included): a bar
    on a terminal, else a log line every --progress-every seconds (``Meter``)."""

    def __init__(self, settings: PipelineRunSettings):
        self.settings, self.meter = settings, None

    def __call__(self, event: Any) -> None:
        if isinstance(event, BeginPass) and event.pass_id == 0:  # a training starts: its steps as run_pipeline counts
            batches = max(event.batches or 1, 1)
            steps = batches * max(self.settings.passes, -(-self.settings.min_steps // batches))
            if self.meter is None:
                self.meter = Meter("training", steps, unit="steps", rate_unit="entries")
            else:
                self.meter.restart("training", steps)
        elif isinstance(event, EndIteration) and self.meter is not None:
            self.meter.update(1, int(event.metrics.get("count", self.settings.batch_size)))

    def close(self) -> None:
        if self.meter is not None:
            self.meter.close()


def run_command(settings: PipelineRunSettings) -> None:
    """Run ``pipeline run`` on its parsed options (``cli.py pipeline run --help`` lists them).

    >>> from click.testing import CliRunner
    >>> import cli
    >>> result = CliRunner().invoke(cli.main, ["pipeline", "run", "--db", "x.db", "--data-dir", "/nonexistent",
    ...                                        "--no-download"])
    >>> result.exit_code, result.output.startswith("Error: mnist: the data folder /nonexistent does not exist")
    (1, True)
    """
    table = _Table(settings.log_json, settings.db, settings.resume is not None)
    trainings = _Trainings(settings)

    def on_trigger(record: dict[str, Any]) -> None:
        trainings.close()  # the bar's line ends before the row
        table(record)

    _check_options(settings)
    try:
        with sigterm_stops():
            stream, test = splits(settings.reader_name, settings.data_dir, settings.download)
            _check_timestamped(settings.reader_name, stream)
            n_inputs, classes, shown = _sizes(stream, test, settings)
            if settings.resume is None:
                _note_unfinished(settings.db)
            factory, lr = find_model(settings.model_name), settings.lr
            click.echo(f"model {settings.model_name}: {shown}")
            run_pipeline(stream, settings.trigger_spec, settings.strategy_spec,
                         lambda seed: factory(n_inputs, n_classes=classes, lr=lr, seed=seed), db=settings.db,
                         test=test, batch_size=settings.batch_size, passes=settings.passes,
                         min_steps=settings.min_steps, seed=settings.seed, resume=settings.resume,
                         on_start=table.started, on_trigger=on_trigger, event_handler=trainings,
                         config={"reader": settings.reader_name},  # the model's settings hold --lr and --classes
                         nproc=settings.nproc, max_restarts=settings.max_restarts, launcher=settings.launcher,
                         work_dir=settings.work_dir,
                         rank_source={"call": "train.commands.continual_run:rank_source",
                                      "kwargs": {"reader": settings.reader_name, "data_dir": settings.data_dir and
                                                 os.path.abspath(settings.data_dir)}})
    except PipelineConfigError as exc:
        raise click.ClickException(in_flags(exc)) from None
    except KeyboardInterrupt as stop:
        table.close()
        _interrupted(table, settings, stop)
    finally:
        trainings.close()
        table.close()
    if table.pipeline_id is None:
        return
    if table.last is None:
        click.echo(f"pipeline {table.pipeline_id}: every trigger's training had finished already; nothing to train")
    elif table.last["average_accuracy"] is not None:
        click.echo(f"pipeline {table.pipeline_id} in {redact(settings.db)}: average accuracy over the "
                   f"{len(table.last['tasks'])} tasks after the last trigger: {100 * table.last['average_accuracy']:.2f}%")


def _file_problem(flag: str, path: str | None) -> str | None:
    """What is wrong with a file the run will write (in a folder that must exist), or None."""
    if path is None:
        return None
    folder = os.path.dirname(os.path.abspath(path))
    if not (os.path.isdir(path) or not os.path.isdir(folder) or not os.access(folder, os.W_OK)):
        return None
    why = "is a folder" if os.path.isdir(path) else f"is in {folder}, which " + (
        "does not exist" if not os.path.isdir(folder) else "is not writable")
    return f"{flag} {path} {why}: give a file in a folder you can write to"


def _check_options(settings: PipelineRunSettings) -> None:
    """The options that need no data, all checked before the data is read (and nothing written if one is wrong):
    the files, the specs, and that the reader and the model are found (a typo in either is listed with the rest)."""
    url = is_postgres(settings.db)  # (a PostgreSQL store: no file to check here; its server says what is wrong)
    problems = [p for p in (None if url else _file_problem("--db", settings.db),
                            _file_problem("--log-json", settings.log_json)) if p]
    if settings.resume is not None and not url and not os.path.isfile(settings.db):  # (never made empty, to refuse)
        problems.append(f"--resume {settings.resume}: there is no pipeline store at --db {settings.db}: give the "
                        "--db the pipeline ran with")
    for flag, spec, parse in (("--trigger", settings.trigger_spec, parse_trigger),
                              ("--strategy", settings.strategy_spec, parse_strategy),
                              ("--reader", settings.reader_name, find_reader),  # found, not yet called: no data read
                              ("--model", settings.model_name, find_model)):
        try:
            parse(spec)
        except ReaderkitError as exc:
            problems.append(f"{flag}: {exc}")
    problems += _nproc_problems(settings)
    if problems:
        raise click.ClickException(str(PipelineConfigError(problems)))


def _nproc_problems(settings: PipelineRunSettings) -> list[str]:
    """What refuses --nproc N > 1: a numpy --model, a --batch-size the ranks cannot split evenly."""
    if settings.nproc == 1:
        return []
    from train.models.torch_classifiers import is_torch_model

    problems = []
    try:
        numpy_model = not is_torch_model(find_model(settings.model_name))
    except ReaderkitError:  # (reported as --model's problem)
        numpy_model = False
    if numpy_model:
        problems.append(f"--nproc {settings.nproc} trains each trigger under torchrun with DistributedDataParallel, "
                        f"which needs a torch model: give --model torch-mlp (or torch-cnn); --model "
                        f"{settings.model_name} is a numpy model, trained in one process")
    if settings.batch_size % settings.nproc:
        problems.append(f"--batch-size {settings.batch_size} is not a multiple of --nproc {settings.nproc}: each rank "
                        f"takes --batch-size / --nproc of every global batch")
    return problems


def rank_source(reader: str, data_dir: str | None) -> Any:
    """The source a rank of ``pipeline run --nproc`` trains from: the reader the keys of --reader's stream index,
    read from --data-dir (never downloaded: the supervisor has the files already, or checked them).

    >>> rank_source("split-mnist", "/data/mnist")
    mnist('train', data_dir='/data/mnist')
    """
    stream = splits(reader, data_dir, False)[0]
    source = stream.by_key() if isinstance(stream, Node) else None  # (Node.by_key: None where it has none)
    if source is None:
        raise BadValue(f"reader {reader!r} gives no by_key(), the reader its stream's keys index: a rank of "
                       "pipeline run --nproc needs one (split-mnist has it)")
    return source


def _check_timestamped(name: str, stream: Any) -> None:
    """A reader whose entries are not (image, label, ..., key, time) is refused, naming one that is."""
    why = entry_problem(first_entry(stream), 1, None)
    if why is not None:
        raise click.ClickException(f"reader {name!r} is not a timestamped stream: {why}; split-mnist is one, with "
                                   "entries (image, label, key, time)")


def _note_unfinished(db: str) -> None:
    """Say so when the store holds a pipeline that was stopped: a new run does not go on with it, --resume does."""
    if not is_postgres(db) and not os.path.exists(db):
        return
    with PipelineStore(db, create=is_postgres(db)) as store:  # (an empty database gets the tables the run makes)
        for p in store.pipelines():
            trainings = store.trainings(p["pipeline_id"])
            if trainings and trainings[-1]["status"] != "finished":
                click.echo(f"note: pipeline {p['pipeline_id']} in {redact(db)} was stopped at trigger "
                           f"{trainings[-1]['trigger_id']}; this run starts a new pipeline (--resume "
                           f"{p['pipeline_id']} goes on with that one)", err=True)


#: Settings of run_pipeline as the command line's options, for refusals of a resume.
_FLAGS = {"batch_size": "--batch-size", "passes": "--passes", "min_steps": "--min-steps", "seed": "--seed",
          "strategy": "--strategy", "trigger": "--trigger", "model.lr": "--lr", "model.n_classes": "--classes",
          "model.class": "--model", "model": "--model", "data": "the data (--reader, --data-dir)",
          "source": "the data the keys index", "test_data": "the test split", "user.reader": "--reader",
          "user": "--reader"}


def in_flags(exc: PipelineConfigError) -> str:
    """A configuration refusal in the command line's words: the settings a resume changes named by their options.

    >>> from train.checkpoints.resume import Difference
    >>> changes = [Difference("batch_size", 32, 16), Difference("model.lr", 0.003, 0.01)]
    >>> print(in_flags(PipelineConfigError(changed_lines(changes), "so", changes)))
    the pipeline's configuration has 2 problems:
      - --batch-size was 32, now 16
      - --lr was 0.003, now 0.01
    so
    """
    if exc.unknown is not None:
        pipeline_id, why = exc.unknown
        return str(PipelineConfigError([*exc.problems, f"--resume {pipeline_id}: {why}"], exc.advice.replace(
            "leave resume out", "leave --resume out")))
    if not exc.changes:
        return str(exc)
    return str(PipelineConfigError(changed_lines(exc.changes, _FLAGS), exc.advice))


def _sizes(stream: Any, test: Any, settings: PipelineRunSettings) -> tuple[int, int, str]:
    try:
        return scan_sizes(stream, test, settings.classes)
    except ReaderkitError as exc:
        raise click.ClickException(f"reader {settings.reader_name!r}: {exc}") from None


def _interrupted(table: _Table, settings: PipelineRunSettings, stop: KeyboardInterrupt) -> None:
    what = "terminated (SIGTERM)" if isinstance(stop, Terminated) else "interrupted"
    if table.pipeline_id is None:
        click.echo(f"\n{what} before the pipeline started; nothing to resume", err=True)
    else:
        click.echo(f"\n{what}: pipeline {table.pipeline_id} in {redact(settings.db)} goes on after its last finished "
                   f"training. Resume with, from {os.getcwd()}:\n  "
                   f"{resume_command(settings.data_dir, ('--resume', str(table.pipeline_id)))}", err=True)
    click.get_current_context().exit(143 if isinstance(stop, Terminated) else 130)
