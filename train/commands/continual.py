"""``python cli.py pipeline run|status|migrate``: a continual-learning pipeline from the command line, its trainings,
and its store copied to another backend.

``pipeline run`` reads a timestamped reader (``split-mnist``), builds the
model of ``train`` for it and runs ``train.run_pipeline``, printing one row
per trigger: its set's size and class counts, the training's seconds, the
accuracy on each task seen so far and their average. ``pipeline status``
reads the same database from any process (any host, for a PostgreSQL
store), while a pipeline runs or after. ``pipeline migrate`` copies a store
into an empty one (sqlite3 to PostgreSQL, or back).

>>> from click.testing import CliRunner
>>> CliRunner().invoke(pipeline_group, ["run", "--help"]).exit_code
0
"""
from __future__ import annotations

import json
import os

import click

from train.commands.console import fail_cleanly
from train.commands.continual_run import run_command
from train.commands.options import (
    PipelineRunSettings,
    as_settings,
    batch_size_option,
    classes_option,
    log_json_option,
    lr_option,
    model_option,
    passes_option,
    reader_options,
    seed_option,
)

__all__ = ["pipeline_group"]


@click.group("pipeline")
def pipeline_group() -> None:
    """Continual-learning pipelines: run one over a timestamped reader, or show its trainings."""


@pipeline_group.command("run")
@reader_options("split-mnist", "A timestamped reader: entries end in (key, time), e.g. split-mnist (see `readers`).",
                "Download missing data files.")
@click.option("--trigger", "trigger_spec", default="time:86400", show_default=True,
              help="When to train: every:N (samples), time:SECONDS (of data time) or "
                   "drift:window=W,threshold=X[,on=label|feature].")
@click.option("--strategy", "strategy_spec", default="gdumb:500", show_default=True,
              help="What to train on: new (the samples since the last trigger), new:KEEP, all, or gdumb:K.")
@click.option("--db", required=True, metavar="PATH|URL",
              help="The pipeline store: a sqlite3 file, or a PostgreSQL database that hosts share "
                   "(postgresql://user@host:port/dbname; the password from PGPASSWORD or ~/.pgpass); sets and "
                   "trainings go here; `pipeline status` reads it.")
@model_option
@classes_option("Number of label classes.  [default: one more than the largest label of both splits]")
@batch_size_option(32)
@passes_option(1, "Passes over each trigger's set (more when needed to reach --min-steps).")
@click.option("--min-steps", default=600, show_default=True, type=click.IntRange(min=0),
              help="Steps each training runs at least: a small set (GDumb's memory) is passed over until then.")
@lr_option("Adam learning rate.")
@seed_option("Seeds the strategy, each training's shuffle and each new model.")
@log_json_option("Write one JSON object per trigger to this file (appended to with --resume).")
@click.option("--resume", type=click.IntRange(min=1), default=None, metavar="PIPELINE_ID",
              help="Go on with this pipeline of --db after its last finished training (same options).")
@click.option("--nproc", default=1, show_default=True, type=click.IntRange(min=1),
              help="Run each trigger's training as a torchrun job of this many processes on this host "
                   "(DistributedDataParallel on gloo; needs --model torch-mlp or torch-cnn, and a --batch-size "
                   "that is a multiple of it).")
@click.option("--max-restarts", default=2, show_default=True, type=click.IntRange(min=0),
              help="With --nproc: times a training's job is launched again when a rank died (the ranks resume "
                   "from their checkpoints); past them the training fails and --resume trains it again.")
@click.option("--launcher", default=None, metavar="COMMAND",
              help="With --nproc: run each training with this command instead of torchrun on this host, e.g. srun "
                   "starting torchrun on several hosts; {spec}, {nproc} (all ranks) and {training_id} are "
                   "filled in (see the README's continual section).")
@click.option("--work-dir", type=click.Path(file_okay=False), default=None,
              help="With --nproc: the trainings' specs, checkpoints and final states go here (a folder every host "
                   "shares, with --launcher).  [default: a temporary folder]")
@fail_cleanly
@as_settings(PipelineRunSettings)
def pipeline_run_command(settings: PipelineRunSettings) -> None:
    """Run a continual-learning pipeline: one training per trigger, a table row each.

    Ctrl-C (or SIGTERM) stops it with exit code 130 (143): the running
    training is marked failed ("interrupted"), and the command that resumes
    the pipeline after its last finished training is printed.
    """
    run_command(settings)


@pipeline_group.command("status")
@click.option("--db", required=True, metavar="PATH|URL",
              help="The pipeline store to read: a sqlite3 file or a postgresql:// URL.")
@click.option("--pipeline-id", type=click.IntRange(min=1), default=None, help="Only this pipeline's trainings.")
@click.option("--training-id", type=click.IntRange(min=1), default=None, help="This training in full.")
@click.option("--json", "as_json", is_flag=True, help="Print the trainings as JSON.")
@fail_cleanly
def pipeline_status_command(db: str, pipeline_id: int | None, training_id: int | None, as_json: bool) -> None:
    """Show the pipelines in --db with the process that holds each (its host and pid, how old its heartbeat is), and
    their trainings (running, finished or failed), their progress and metrics."""
    from readers.continual.store import PipelineStore
    from readers.storage.postgres import is_postgres
    from train.commands.continual_table import status_lines

    if not is_postgres(db) and not os.path.exists(db):
        raise click.ClickException(f"no pipeline store at {db!r}: give the --db a `pipeline run` wrote")
    with PipelineStore(db, create=False) as store:
        if as_json:
            found = [store.training(training_id)] if training_id is not None else store.trainings(pipeline_id)
            click.echo(json.dumps(found, indent=2))
        else:
            click.echo("\n".join(status_lines(store, pipeline_id, training_id)))


@pipeline_group.command("migrate")
@click.option("--from", "source", required=True, metavar="PATH|URL", help="The pipeline store to copy.")
@click.option("--to", "destination", required=True, metavar="PATH|URL",
              help="An empty pipeline store to copy it into: a new sqlite3 file, or an empty PostgreSQL database.")
@fail_cleanly
def pipeline_migrate_command(source: str, destination: str) -> None:
    """Copy a pipeline store into an empty one, sqlite3 or PostgreSQL either way: every pipeline, trigger set,
    training and model, with their ids (e.g. --from runs.db --to postgresql://me@db-host:5432/runs)."""
    from readers.continual.migrate import migrate_store
    from readers.storage.postgres import is_postgres, redact

    if not is_postgres(source) and not os.path.exists(source):
        raise click.ClickException(f"no pipeline store at --from {source!r}: give the --db a `pipeline run` wrote")
    counts = migrate_store(source, destination)
    shown = redact(destination) if is_postgres(destination) else destination
    click.echo(f"copied {', '.join(f'{n} {table}' for table, n in counts.items())} into {shown}")
