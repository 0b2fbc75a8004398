"""The command line's options: those that several commands share, each declared once as a small decorator, and
the settings objects of the commands with many.

A command with many options (``train``, ``pipeline run``) takes one frozen
dataclass whose fields are its options, built once from click's values
(``as_settings``); one with a few takes them as typed parameters, as click
intends.

>>> from click.testing import CliRunner
>>> @click.command()
... @reader_options()
... @batch_size_option(64)
... def show(reader_name: str, data_dir: str | None, download: bool, batch_size: int) -> None:
...     click.echo(f"{reader_name} {data_dir} {download} {batch_size}")
>>> CliRunner().invoke(show, ["--no-download", "--batch-size", "8"]).output
'mnist None False 8\\n'
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click
from click.core import ParameterSource

__all__ = ["BlasThreads", "FileOrURL", "PipelineRunSettings", "TrainSettings", "as_settings", "batch_size_option",
           "blas_threads_option", "classes_option", "given_flags", "log_json_option", "lr_option", "model_option", "passes_option",
           "reader_options", "seed_option"]

READER_HELP = ("A registered reader (see `readers`); your own module (mydata, a mydata.py with train and optional test "
               "readers); or module:attribute of a reader (a generator function) or a reader creator.")
DOWNLOAD_HELP = "Download missing data files from the public mirrors (into the per-user cache)."


@dataclass(frozen=True)
class TrainSettings:
    """The train command's options, as click parsed them (``cli.py train --help`` says what each does)."""

    reader_name: str
    data_dir: str | None
    download: bool
    data: str | None
    columns: str | None
    size: int | None
    model_name: str
    classes: int | None
    batch_size: int
    passes: int
    lr: float
    lr_decay: float
    seed: int
    checkpoint_dir: str | None
    checkpoint_every: int
    resume: bool
    overwrite: bool
    log_json: str | None
    config: str | None
    steps: int | None
    log_every: int
    vocab_size: int | None
    connect_timeout: float
    ca_file: str | None
    blas_threads: int | str | None


@dataclass(frozen=True)
class PipelineRunSettings:
    """The options of ``pipeline run``, as click parsed them (``cli.py pipeline run --help`` says what each does)."""

    reader_name: str
    data_dir: str | None
    download: bool
    trigger_spec: str
    strategy_spec: str
    db: str
    model_name: str
    classes: int | None
    batch_size: int
    passes: int
    min_steps: int
    lr: float
    seed: int
    log_json: str | None
    resume: int | None
    nproc: int = 1
    max_restarts: int = 2
    launcher: str | None = None
    work_dir: str | None = None


def reader_options(default: str = "mnist", reader_help: str = READER_HELP, download_help: str = DOWNLOAD_HELP,
                   formats: bool = False) -> Callable:
    """``--reader`` (as ``reader_name``), ``--data-dir`` and ``--download``: where a command's reader comes from;
    with ``formats``, also the format readers' ``--data``, ``--columns`` and ``--size`` (None when not given),
    which ``splits`` passes to the plugin's creator (each takes those its signature names).

    >>> @click.command()
    ... @reader_options(formats=True)
    ... def show(reader_name, data_dir, download, data, columns, size) -> None:
    ...     click.echo(f"{reader_name} {data} {columns} {size}")
    >>> from click.testing import CliRunner
    >>> CliRunner().invoke(show, ["--reader", "parquet", "--data", "a.parquet", "--columns", "image,label"]).output
    'parquet a.parquet image,label None\\n'

    >>> @click.command()
    ... @reader_options("split-mnist", "A timestamped reader.")
    ... def where(reader_name: str, data_dir: str | None, download: bool) -> None:
    ...     pass
    >>> [param.opts[0] for param in where.params]
    ['--reader', '--data-dir', '--download']
    """

    def decorate(command: Callable) -> Callable:
        if formats:
            command = click.option(
                "--size", type=click.IntRange(min=1), default=None, metavar="N",
                help="Format readers (image-folder, parquet, arrow, tar-shards): resize images to N x N.")(command)
            command = click.option(
                "--columns", default=None, metavar="IMAGE,LABEL",
                help="Format readers: the columns (Parquet, Arrow) or fields (tar-shards, jsonl) to read, in order; train "
                     "takes the first as the image and the second as the label.  [default: every column of a "
                     "table (train refuses more than two); tar-shards: the first image field and cls]")(command)
            command = click.option(
                "--data", default=None, metavar="PATH",
                help="Format readers: their files (a file, a folder, a glob or a brace pattern such as "
                     "'shard-{000..009}.tar'); the image-folder root.")(command)
        command = click.option("--download/--no-download", default=True, show_default=True, help=download_help)(command)
        command = click.option("--data-dir", type=click.Path(file_okay=False), default=None,
                               help="Folder holding the data files (searched before $READERKIT_DATA and the cache)."
                               )(command)
        return click.option("--reader", "reader_name", default=default, show_default=True, help=reader_help)(command)

    return decorate


model_option = click.option("--model", "model_name", default="mlp", show_default=True,
                            help="A registered model (mlp, softmax) or module:attribute of a factory called as "
                                 "factory(n_inputs, n_classes=..., lr=..., seed=...).")


def batch_size_option(default: int) -> Callable:
    """``--batch-size``: entries per minibatch, ``default`` when not given."""
    return click.option("--batch-size", default=default, show_default=True, type=click.IntRange(min=1),
                        help="Entries per minibatch.")


def classes_option(help_text: str) -> Callable:
    """``--classes``: the number of label classes (2 or more), None (inferred from the data) when not given."""
    return click.option("--classes", default=None, type=click.IntRange(min=2), help=help_text)


def passes_option(default: int, help_text: str) -> Callable:
    """``--passes``: how many passes, ``default`` when not given."""
    return click.option("--passes", default=default, show_default=True, type=click.IntRange(min=1), help=help_text)


def lr_option(help_text: str) -> Callable:
    """``--lr``: the learning rate, above 0 (3e-3 when not given)."""
    return click.option("--lr", default=3e-3, show_default=True, type=click.FloatRange(min=0, min_open=True),
                        help=help_text)


def seed_option(help_text: str) -> Callable:
    """``--seed``: an int from 0 (0 when not given)."""
    return click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0), help=help_text)


class FileOrURL(click.Path):
    """A file that must exist, as ``click.Path(exists=True, dir_okay=False)`` checks it, or a URL (``http(s)://``,
    ``s3://``...) taken as it is: the command reads it, and names it if it is not there.

    >>> FileOrURL().convert("https://host/tokens/data.toml", None, None)
    'https://host/tokens/data.toml'
    >>> FileOrURL().convert("/no/such/data.toml", None, None)
    Traceback (most recent call last):
    ...
    click.exceptions.BadParameter: File '/no/such/data.toml' does not exist.
    """

    def __init__(self) -> None:
        super().__init__(exists=True, dir_okay=False)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from readers.sources.locations import is_url

        return value if is_url(value) else super().convert(value, param, ctx)


class BlasThreads(click.ParamType):
    """``--blas-threads``' values: ``auto``, ``library`` (None: the BLAS library's own setting) or a count from 1.

    >>> [BlasThreads().convert(text, None, None) for text in ("auto", "library", "2")]
    ['auto', None, 2]
    >>> BlasThreads().convert("0", None, None)
    Traceback (most recent call last):
    ...
    click.exceptions.BadParameter: '0': give auto (one thread for the built-in models, the library's own for others), library (the BLAS library's own setting) or a number of threads from 1
    """

    name = "auto|library|N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | str | None:
        if value is None or isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value
        text = str(value).strip().lower()
        if text in ("auto", "library"):
            return "auto" if text == "auto" else None
        if text.isdigit() and int(text) >= 1:
            return int(text)
        self.fail(f"{value!r}: give auto (one thread for the built-in models, the library's own for others), "
                  "library (the BLAS library's own setting) or a number of threads from 1", param, ctx)


blas_threads_option = click.option(
    "--blas-threads", default="auto", show_default=True, type=BlasThreads(),
    help="Threads of numpy's BLAS while training: auto gives the built-in models (mlp, softmax, the next-token "
         "model) one, the fastest and steadiest for their small products, and leaves a model of your own with the "
         "library's setting; library leaves the library's own (a thread per core unless OPENBLAS_NUM_THREADS says "
         "otherwise) for any model; N sets N threads for any model. Setting a count needs threadpoolctl.")


def log_json_option(help_text: str) -> Callable:
    """``--log-json FILE``: a file for the command's figures as JSON, none when not given.

    >>> from click.testing import CliRunner
    >>> @click.command()
    ... @log_json_option("Write the figures here.")
    ... @seed_option("Seeds it.")
    ... def run(log_json: str | None, seed: int) -> None:
    ...     click.echo(f"{log_json} {seed}")
    >>> CliRunner().invoke(run, ["--log-json", "a.json", "--seed", "3"]).output
    'a.json 3\\n'
    """
    return click.option("--log-json", type=click.Path(dir_okay=False), default=None, help=help_text)


def as_settings(cls: type) -> Callable[[Callable], Callable]:
    """Give a command its parsed options as one ``cls``, a frozen dataclass whose fields are the options' names.

    >>> import dataclasses
    >>> from click.testing import CliRunner
    >>> @dataclasses.dataclass(frozen=True)
    ... class Greeting:
    ...     name: str
    ...     times: int
    >>> @click.command()
    ... @click.option("--name", default="you")
    ... @click.option("--times", default=1)
    ... @as_settings(Greeting)
    ... def greet(settings: Greeting) -> None:
    ...     click.echo(" ".join([f"hello {settings.name}"] * settings.times))
    >>> CliRunner().invoke(greet, ["--times", "2"]).output
    'hello you hello you\\n'
    """

    def decorate(command: Callable[[Any], Any]) -> Callable:
        @functools.wraps(command)
        def wrapper(**values: Any) -> Any:
            return command(cls(**values))

        return wrapper

    return decorate


def given_flags(*names: str) -> list[str]:
    """The options among ``names`` (their parameter names) that the current command line gives, as their flags:
    for refusing options that do not apply.

    >>> @click.command()
    ... @reader_options()
    ... def where(reader_name: str, data_dir: str | None, download: bool) -> None:
    ...     click.echo(given_flags("reader_name", "data_dir", "download"))
    >>> from click.testing import CliRunner
    >>> CliRunner().invoke(where, ["--no-download", "--reader", "mine"]).output
    "['--reader', '--download']\\n"
    """
    ctx = click.get_current_context()
    flags = {param.name: param.opts[0] for param in ctx.command.params}
    return [flags[name] for name in names if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE]
