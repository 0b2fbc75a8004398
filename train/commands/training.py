"""The command line's train command, once click has parsed it: what it reads and checks before training,
what it prints and logs while training, and what it says when it is stopped.

``cli.py`` stays a thin adapter: its ``train`` calls ``train_command`` with
the parsed options. Ctrl-C (SIGINT) and SIGTERM, a scheduler's stop, both
end the run with the command that resumes it: exit codes 130 and 143.
"""
from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import click
import numpy as np

import readers
from readers.checks import check_reader
from readers.plugins.pairs import describe_roles, scale_pixels
from readers.plugins.registry import find_model, reader_splits
from readers.sources.locations import redact
from train.checkpoints.files import load_for_rank, rank_folder
from train.checkpoints.folders import FILE
from train.checkpoints.resume import ResumeRefused, claim
from train.checkpoints.settings import Checkpoints
from train.commands.console import Progress, in_flag_words
from train.commands.options import TrainSettings, given_flags
from train.commands.progress import Meter
from train.driver import train
from train.feeds import infer_sizes
from train.models.classifiers import LabelRangeError

__all__ = ["check_entry", "first_entry", "resume_command", "scan_sizes", "sigterm_stops", "splits",
           "train_command"]


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the run is, so that it stops as Ctrl-C does (exit code 143)."""


def _download_bar(file: Any, url: str) -> Callable[[int, int | None], None]:
    """A download's progress through the CLI's ``Meter``: a bar on a terminal, log lines elsewhere (every
    --progress-every seconds, and one when the file is whole)."""
    click.echo(f"downloading {file.name} from {url}", err=True)
    meters: list[Meter] = []

    def progress(done: int, total: int | None) -> None:
        if not meters:
            meters.append(Meter(file.name, total, unit="bytes"))
        meter = meters[0]
        meter.update(done - meter.done)
        if total is not None and done >= total:
            if not meter.tty:  # (a log shows that the file came whole, however short the download)
                meter.logger.info(meter.line())
            meter.close()

    return progress


def splits(reader_name: str, data_dir: str | None, download: bool, **formats: Any) -> tuple[Any, Any]:
    """The (train, test or None) readers of a registered or module:attribute reader, downloads shown by a
    ``Meter`` (a bar on a terminal, log lines elsewhere); ``formats`` (``data``, ``columns``, ``size``: those
    given, not None) go to the creators whose signature names them.

    >>> from readers.plugins.registry import register_reader, unregister
    >>> def letters():
    ...     yield from "ab"
    >>> register_reader("letters", letters)
    >>> train_reader, test_reader = splits("letters", None, False)
    >>> list(train_reader()), test_reader
    (['a', 'b'], None)
    >>> unregister("readers", "letters")
    """
    given = {key: value for key, value in formats.items() if value is not None}
    return reader_splits(reader_name, data_dir=data_dir, download=download, progress=_download_bar, **given)


def first_entry(reader: Any) -> Any:
    """The first entry of a pass of ``reader``; a click error when it has none.

    >>> first_entry(readers.from_sequence("ab"))
    'a'
    """
    for entry in reader():
        return entry
    raise click.ClickException("the reader gave no entries; check its data")


def check_entry(name: str, reader: Any) -> Any:
    """The image of ``reader``'s first entry, after checking entries are (image, label).

    >>> check_entry("mine", readers.from_sequence([(1.0, 0)]))
    1.0
    """
    check_reader(reader, f"reader creator {name!r} returned something that")
    entry = first_entry(reader)
    if not (isinstance(entry, tuple) and len(entry) == 2):
        shown = f"a tuple of {len(entry)} columns" if isinstance(entry, tuple) else f"a single {type(entry).__name__}"
        names = getattr(reader, "entry_names", None)
        if names:
            shown += f" ({', '.join(map(repr, names))})"
            raise click.ClickException(f"reader {name!r} gives entries of {shown}; train needs an image and a label: "
                                       f"choose them with --columns IMAGE,LABEL, e.g. --columns {','.join(names[:2])}")
        raise click.ClickException(f"reader {name!r} gives entries that are {shown}; train needs (image, label) entries")
    return entry[0]


@contextlib.contextmanager
def sigterm_stops() -> Iterator[None]:
    """SIGTERM raises ``Terminated`` in the main thread while the run lasts, so it stops as Ctrl-C does.

    >>> with sigterm_stops():
    ...     signal.getsignal(signal.SIGTERM).__name__
    'terminated'
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(signum: int, frame: Any) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _warnings_as_lines() -> Iterator[None]:
    """Warnings as one "warning: ..." line each: a CLI user has no use for the source line that warned."""
    with warnings.catch_warnings():
        warnings.showwarning = lambda message, *args, **kwargs: click.echo(f"warning: {message}", err=True)
        yield


def train_command(settings: TrainSettings) -> None:
    """Run the CLI's train command on its parsed options (``cli.py train --help`` lists them).

    >>> from click.testing import CliRunner
    >>> import cli
    >>> CliRunner().invoke(cli.main, ["train", "--resume"]).output.splitlines()[-1]
    'Error: --resume needs --checkpoint-dir, the folder to resume'
    """
    info = readers.worker_info()
    directory, started = settings.checkpoint_dir, time.time()
    try:
        with sigterm_stops():
            for flag, given in (("resume", settings.resume), ("overwrite", settings.overwrite)):
                if given and directory is None:
                    raise click.UsageError(f"--{flag} needs --checkpoint-dir, the folder to {flag}")
            alone = [] if settings.config else given_flags("steps", "log_every", "vocab_size", "connect_timeout",
                                                                "ca_file")
            if alone:
                raise click.UsageError(f"{alone[0]} applies only with --config (a run file's next-token model); "
                                       "image runs count passes (--passes)")
            log = settings.log_json
            if log and not os.path.isdir(os.path.dirname(os.path.abspath(log))):
                raise click.UsageError(f"--log-json {log}: the folder {os.path.dirname(log)} does not exist; "
                                       "create it or give another file")
            factory = find_model(settings.model_name)  # a typo is reported before any data is read or fetched
            held = contextlib.nullcontext() if directory is None else claim(
                directory, resume=settings.resume, overwrite=settings.overwrite, rank=info.rank,
                world_size=info.world_size, flags=("--resume", "--overwrite"))
            with held as found, _warnings_as_lines():  # the folder is this run's before anything is read
                if settings.config:
                    from train.commands.token_training import config_run

                    config_run(info, found, settings)
                else:
                    _train(factory, info, found, settings)
    except KeyboardInterrupt as stop:
        _interrupted(directory, info, settings, started, stop)


def scan_sizes(train_reader: Any, test_reader: Any, given: int | None) -> tuple[int, int, str]:
    """(inputs, classes, the line that says so) from both splits: a test split that cannot fit the model
    built for the training split, or a --classes (``given``) below the labels read, is an error now, not after
    a pass.

    >>> x = readers.from_sequence([([0.0, 1.0], 3), ([1.0, 0.0], 0)])
    >>> scan_sizes(x, None, None)[:2], scan_sizes(x, None, 6)[:2]
    ((2, 4), (2, 6))
    """
    n_inputs, classes, shown = infer_sizes(train_reader, {"image": 0, "label": 1})
    which = "the training split"
    if test_reader is not None:
        n_test, test_classes, test_shown = infer_sizes(test_reader, {"image": 0, "label": 1})
        if n_test != n_inputs:
            raise click.ClickException(f"the test split's images ({test_shown.split(':')[0]}) do not match the "
                                       f"training split's ({shown.split(':')[0]}); give both splits one shape")
        if test_classes > classes:
            shown = f"{shown.rsplit(':', 1)[0]}, up to {test_classes - 1} in the test split: {test_classes} classes"
            classes, which = test_classes, "the test split"
    if given is None:
        return n_inputs, classes, shown
    if given < classes:
        raise click.ClickException(f"--classes {given}: {which} has labels up to {classes - 1}; pass --classes "
                                   f"{classes} or more, or leave it out to count them")
    return n_inputs, given, shown.rsplit(";", 1)[0] + f"; {given} classes (--classes)"


def _train(factory: Callable, info: Any, found: Any, settings: TrainSettings) -> None:
    """The train command once its options are checked and its checkpoint folder is held."""
    reader_name, directory, lr, lr_decay = settings.reader_name, settings.checkpoint_dir, settings.lr, settings.lr_decay
    train_reader, test_reader = splits(reader_name, settings.data_dir, settings.download, data=settings.data,
                                       columns=settings.columns, size=settings.size)
    image = check_entry(reader_name, train_reader)
    roles = describe_roles(train_reader)
    if roles and isinstance(image, np.ndarray) and image.dtype == np.uint8:  # a format's pixels: scaled, as MNIST's
        roles = describe_roles(train_reader, ", scaled to [0, 1]")
        train_reader = scale_pixels(train_reader)
        test_reader = None if test_reader is None else scale_pixels(test_reader)
    if test_reader is not None:
        check_entry(f"{reader_name} (test split)", test_reader)  # a missing test file fails now, not after a pass
    n_inputs, classes, shown = scan_sizes(train_reader, test_reader, settings.classes)
    model = factory(n_inputs, n_classes=classes, lr=lr, seed=settings.seed)
    try:
        provider = readers.shuffle(train_reader, seed=settings.seed)
    except ValueError:  # a stream: shuffle in a buffer
        provider = readers.shuffle(train_reader, 10000, seed=settings.seed)
    who, log = "", settings.log_json
    if info.world_size > 1:  # each process trains its own model on its shard: say whose figures these are
        who = f"rank {info.rank}/{info.world_size}: "
        if log:
            stem, ext = os.path.splitext(log)
            log = f"{stem}.rank{info.rank}{ext}"
    click.echo(f"{who}model {settings.model_name}: {roles + ': ' if roles else ''}{shown}")
    handler = Progress(log, who, resume=settings.resume, batch_size=settings.batch_size)  # the log is opened at the first pass, once train() has accepted the run
    at: dict[str, int] = {}

    def on_event(event: Any) -> None:
        if type(event).__name__ == "BeginPass" and hasattr(model, "lr"):
            model.lr = lr * lr_decay ** event.pass_id  # from the pass number alone, so a resume agrees
        if type(event).__name__ == "BeginIteration":
            at.update(pass_id=event.pass_id, step=event.batch_id)
        handler(event)
        if type(event).__name__ == "TestResult" or (test_reader is None and type(event).__name__ == "EndPass"):
            handler.flush()

    try:
        checkpoints = None if directory is None else Checkpoints(
            directory, every=settings.checkpoint_every, resume=settings.resume, overwrite=settings.overwrite,
            config={"reader": reader_name, "model": settings.model_name, "classes": classes, "lr": lr,
                    "lr_decay": lr_decay})
        train(provider, ["image", "label"], settings.batch_size, settings.passes, model=model,
              event_handler=on_event, test_provider=test_reader, seed=settings.seed, checkpoints=checkpoints,
              blas_threads=settings.blas_threads)
    except ResumeRefused as exc:
        raise click.ClickException(in_flag_words(exc)) from None
    except LabelRangeError as exc:
        if exc.label < 0:
            raise
        raise click.ClickException(_label_advice(exc, at, train_reader, directory, settings.classes is not None)) from None
    finally:
        handler.close()
    if found is not None and not handler.passes:
        click.echo(f"{who}the checkpoint in {directory} already holds {found[1]['pass']} passes; nothing to "
                   f"train for --passes {settings.passes}", err=True)


def _label_advice(exc: LabelRangeError, at: dict[str, int], reader: Any, directory: str | None, given: bool) -> str:
    """The CLI's words for a label the model has no class for: which option to change, and why it happened."""
    where = f" at pass {at['pass_id']}, step {at['step']}" if at else ""
    whence = "from --classes" if given else "counted in the labels read before training"
    advice = [f"label {exc.label}{where} is out of range for {exc.n_classes} classes ({whence}); pass --classes "
              f"{exc.label + 1} or more"]
    try:
        len(reader)
    except TypeError:
        advice.append("the reader is a stream, so its classes were counted in its first 10,000 entries, and a "
                      "stream sorted by class is shuffled poorly (in a 10,000-entry buffer): give an indexed "
                      "reader (len and [i], e.g. readers.from_arrays) for a full shuffle")
    if directory is not None:
        advice.append("with --checkpoint-dir, add --overwrite: a resume keeps the classes it was made with")
    return "; ".join(advice)


def resume_command(data_dir: str | None, resume: tuple[str, ...] = ("--resume",)) -> str:
    """The command line of this run with ``resume`` (--resume) and without --resume or --overwrite, to print when
    it is stopped.

    The options are those of the current click command, as given (a URL
    without its ``user:password@`` and query string: credentials come from
    the environment or fsspec's configuration, never a printed line); when it
    has no ``data_dir``, the data folder it found through ``READERKIT_DATA``
    is set on the line, so the command finds the same data from any shell.

    >>> import cli
    >>> with cli.main.make_context("readerkit", ["train"]) as root:
    ...     with cli.train.make_context("train", ["--passes", "3", "--overwrite"], parent=root) as ctx:
    ...         resume_command(None)
    'readerkit train --passes 3 --resume'
    """
    ctx = click.get_current_context()
    root = ctx.find_root().info_name or "readerkit"
    prog = ["python", sys.argv[0]] if root.endswith(".py") and os.path.basename(sys.argv[0]) == root else [root]
    args = ctx.command_path.split()[1:] or ["train"]  # "train", or a group's "pipeline run"
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        if not isinstance(param, click.Option) or param.name in ("resume", "overwrite") or value == param.default:
            continue
        if param.is_flag:
            args.append(param.opts[0] if value else param.secondary_opts[0])
        else:  # a URL without its user:password@ and query string, which a printed line must not hold
            args += [param.opts[0], redact(str(value))]
    env = []
    if data_dir is None and os.environ.get("READERKIT_DATA"):
        env = [f"READERKIT_DATA={shlex.quote(os.environ['READERKIT_DATA'])}"]
    return " ".join([*env, shlex.join([*prog, *args, *resume])])


def _interrupted(directory: str | None, info: Any, settings: TrainSettings, started: float,
                 stop: KeyboardInterrupt) -> None:
    """Say where the run stopped and how to resume it; exit 130 (Ctrl-C) or 143 (SIGTERM)."""
    what = "terminated (SIGTERM)" if isinstance(stop, Terminated) else "interrupted"
    found = load_for_rank(directory, info.rank, info.world_size) if directory else None
    own = os.path.join(rank_folder(directory, info.rank, info.world_size), FILE) if directory else ""
    if found is not None and settings.overwrite and (not os.path.exists(own) or os.path.getmtime(own) < started):
        click.echo(f"\n{what}: no checkpoint of this run was saved yet; the earlier run's checkpoint in "
                   f"{directory} is left as it was", err=True)
    elif found is None:
        where = "no --checkpoint-dir" if directory is None else f"no checkpoint was saved in {directory} yet"
        click.echo(f"\n{what}: {where}; nothing to resume", err=True)
    else:
        meta = found[1]
        where = f"step {meta['step']}" if "step" in meta else f"pass {meta['pass']}, entry {meta['cursor']}"
        launcher = ("\n(run it under your launcher, as this run was: torchrun, srun or mpirun, with this or "
                    "another number of processes)") if info.world_size > 1 else ""
        click.echo(f"\n{what}: the checkpoint in {directory} holds {where}. "
                   f"Resume with, from {os.getcwd()}:\n  {resume_command(settings.data_dir)}{launcher}", err=True)
    click.get_current_context().exit(143 if isinstance(stop, Terminated) else 130)
