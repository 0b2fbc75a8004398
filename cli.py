"""readerkit's command line: a thin click adapter over readers, batching and train.

    python cli.py train --reader mnist          train a model, one line per pass
    python cli.py readers                       the readers and models it can find
    python cli.py inspect --reader mnist        columns, dtypes, shapes, first entries
    python cli.py bench --reader mnist          per prefetch stage: throughput, waits; the bottleneck

>>> from click.testing import CliRunner
>>> CliRunner().invoke(main, ["--help"]).exit_code
0
"""
from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import click
import numpy as np

__all__ = ["main"]


def _fail_cleanly(command: Callable) -> Callable:
    """Known errors become one line and a non-zero exit, not a traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from readers.datafiles import MissingDataError
        from readers.registry import PluginError

        try:
            return command(*args, **kwargs)
        except (MissingDataError, PluginError, ValueError, TypeError, OSError) as exc:
            raise click.ClickException(str(exc)) from None

    return wrapper


def _reader_options(command: Callable) -> Callable:
    command = click.option("--download/--no-download", default=True, show_default=True,
                           help="Download missing data files from the public mirrors (into the per-user cache).")(command)
    command = click.option("--data-dir", type=click.Path(file_okay=False), default=None,
                           help="Folder holding the data files (searched before $READERKIT_DATA and the cache).")(command)
    return click.option("--reader", "reader_name", default="mnist", show_default=True,
                        help="A registered reader (see `readers`); your own module (mydata, a mydata.py with train "
                             "and optional test readers); or module:attribute of a reader (a generator function) "
                             "or a reader creator.")(command)


def _download_bar(file: Any, url: str) -> Callable[[int, int | None], None]:
    click.echo(f"downloading {file.name} from {url}", err=True)
    state: dict[str, Any] = {}

    def progress(done: int, total: int | None) -> None:
        if "bar" not in state:
            state["bar"] = click.progressbar(length=total or 0, label=file.name, file=sys.stderr)
            state["bar"].__enter__()
            state["seen"] = 0
        state["bar"].update(done - state["seen"])
        state["seen"] = done
        if total is not None and done >= total:
            state["bar"].__exit__(None, None, None)

    return progress


def _splits(reader_name: str, data_dir: str | None, download: bool) -> tuple[Any, Any]:
    """The (train, test or None) readers of a registered or module:attribute reader creator."""
    from readers.registry import reader_splits

    return reader_splits(reader_name, data_dir=data_dir, download=download, progress=_download_bar)


def _first_entry(reader: Any) -> Any:
    for entry in reader():
        return entry
    raise click.ClickException("the reader gave no entries; check its data")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """readerkit: composable data readers and minibatching for training.

    A --reader or --model given as module:attribute (or a bare module) is
    imported with the current folder first on the import path, as python -m does.
    """
    # readerkit's own packages first: a user's train.py, readers.py or batching.py in the current
    # folder must not shadow them once that folder leads the import path
    import batching  # noqa: F401
    import readers  # noqa: F401
    import train  # noqa: F401

    if os.getcwd() not in sys.path:  # neither `readerkit` nor `python path/to/cli.py` puts it there
        sys.path.insert(0, os.getcwd())


@main.command()
@_reader_options
@click.option("--model", "model_name", default="mlp", show_default=True,
              help="A registered model (mlp, softmax) or module:attribute of a factory called as "
                   "factory(n_inputs, n_classes=..., lr=..., seed=...).")
@click.option("--classes", default=None, type=click.IntRange(min=2),
              help="Number of label classes (labels 0..classes-1).  [default: one more than the largest label "
                   "in up to 10,000 entries spread over the data]")
@click.option("--batch-size", default=128, show_default=True, type=click.IntRange(min=1), help="Entries per minibatch.")
@click.option("--passes", default=5, show_default=True, type=click.IntRange(min=1), help="Passes over the training data.")
@click.option("--lr", default=3e-3, show_default=True, type=click.FloatRange(min=0, min_open=True), help="Adam learning rate of the first pass.")
@click.option("--lr-decay", default=0.6, show_default=True, type=click.FloatRange(min=0, min_open=True, max=1),
              help="The learning rate of pass k is lr * lr_decay**k.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0), help="Seeds the shuffle and the model's initialisation.")
@click.option("--checkpoint-dir", type=click.Path(file_okay=False), default=None, help="Save the model and data position here after every pass and every --checkpoint-every steps "
                   "(in a rank<r> subfolder per process under a launcher with several). One run at a time.")
@click.option("--checkpoint-every", default=200, show_default=True, type=click.IntRange(min=1), help="Steps between checkpoints within a pass.")
@click.option("--resume", is_flag=True, help="Continue from the checkpoint in --checkpoint-dir (same settings and data required).")
@click.option("--overwrite", is_flag=True, help="Start over in a --checkpoint-dir that holds a checkpoint, replacing it.")
@click.option("--log-json", type=click.Path(dir_okay=False), default=None,
              help="Write one JSON object per pass to this file (with --resume, the passes the checkpoint holds "
                   "are kept and later ones rewritten); under a launcher with several processes, rank r writes "
                   "FILE with .rank<r> before its extension.")
@_fail_cleanly
def train(reader_name: str, data_dir: str | None, download: bool, model_name: str, classes: int | None,
          batch_size: int, passes: int, lr: float, lr_decay: float, seed: int, checkpoint_dir: str | None,
          checkpoint_every: int, resume: bool, overwrite: bool, log_json: str | None) -> None:
    """Train a model on a reader, with a progress bar and test accuracy per pass.

    Ctrl-C stops it with exit code 130, printing where the checkpoint is and
    the command that resumes from it.
    """
    import contextlib

    import readers
    from readers.registry import find_model
    from train.resume import claim

    info = readers.worker_info()
    try:
        for flag, value in (("--resume", resume), ("--overwrite", overwrite)):
            if value and checkpoint_dir is None:
                raise click.UsageError(f"{flag} needs --checkpoint-dir, the folder to {flag[2:]}")
        factory = find_model(model_name)  # a typo is reported before any data is read or fetched
        held = contextlib.nullcontext() if checkpoint_dir is None else claim(
            checkpoint_dir, resume=resume, overwrite=overwrite, rank=info.rank, world_size=info.world_size,
            flags=("--resume", "--overwrite"))
        with held as found:  # the folder is this run's before any data is read or the log is touched
            _train(factory, info, found, **click.get_current_context().params)
    except KeyboardInterrupt:
        _interrupted(checkpoint_dir, info)


def _train(factory: Callable, info: Any, found: Any, *, reader_name: str, data_dir: str | None, download: bool,
           model_name: str, classes: int | None, batch_size: int, passes: int, lr: float, lr_decay: float,
           seed: int, checkpoint_dir: str | None, checkpoint_every: int, resume: bool, overwrite: bool,
           log_json: str | None) -> None:
    """The train command once its options are checked and its checkpoint folder is held."""
    import readers
    from train.console import Progress, keep_passes_before
    from train.driver import train as run
    from train.feeds import infer_sizes
    from train.models import LabelRangeError

    train_reader, test_reader = _splits(reader_name, data_dir, download)
    _check_entry(reader_name, train_reader)
    if test_reader is not None:
        _check_entry(f"{reader_name} (test split)", test_reader)  # a missing test file fails now, not after a pass
    n_inputs, inferred, shown = infer_sizes(train_reader, {"image": 0, "label": 1})
    if classes is None:
        classes = inferred
    else:
        shown = shown.rsplit(";", 1)[0] + f"; {classes} classes (--classes)"
    model = factory(n_inputs, n_classes=classes, lr=lr, seed=seed)
    try:
        provider = readers.shuffle(train_reader, seed=seed)
    except ValueError:  # a stream: shuffle in a buffer
        provider = readers.shuffle(train_reader, 10000, seed=seed)
    who = ""
    if info.world_size > 1:  # each process trains its own model on its shard: say whose figures these are
        who = f"rank {info.rank}/{info.world_size}: "
        if log_json:
            stem, ext = os.path.splitext(log_json)
            log_json = f"{stem}.rank{info.rank}{ext}"
    click.echo(f"{who}model {model_name}: {shown}")
    if log_json and found is not None:
        keep_passes_before(log_json, found[1]["pass"])  # lines of passes the checkpoint does not hold go
    log = open(log_json, "a" if resume else "w", encoding="utf-8") if log_json else None
    handler = Progress(log, who)

    def on_event(event: Any) -> None:
        if type(event).__name__ == "BeginPass" and hasattr(model, "lr"):
            model.lr = lr * lr_decay ** event.pass_id  # from the pass number alone, so a resume agrees
        handler(event)
        if type(event).__name__ == "TestResult" or (test_reader is None and type(event).__name__ == "EndPass"):
            handler.flush()

    try:
        run(provider, ["image", "label"], batch_size, passes, model=model, event_handler=on_event,
            test_provider=test_reader, seed=seed, checkpoint_dir=checkpoint_dir, resume=resume,
            overwrite=overwrite, checkpoint_every=checkpoint_every if checkpoint_dir else None,
            config={"reader": reader_name, "model": model_name, "classes": classes, "lr": lr, "lr_decay": lr_decay})
    except LabelRangeError as exc:
        if exc.label < 0:
            raise
        raise click.ClickException(f"{exc}; pass --classes {exc.label + 1} or more (this run has {classes}"
                                   f"{' from --classes' if _given('classes') else ', inferred from the labels it scanned'})") from None
    finally:
        if log is not None:
            log.close()
    if found is not None and not handler.passes:
        click.echo(f"{who}the checkpoint in {checkpoint_dir} already holds {found[1]['pass']} passes; nothing to "
                   f"train for --passes {passes}", err=True)


def _given(name: str) -> bool:
    """Whether the user gave option ``name`` on the command line (not its default)."""
    from click.core import ParameterSource

    return click.get_current_context().get_parameter_source(name) is ParameterSource.COMMANDLINE


def _resume_command() -> str:
    """The command line of this run with --resume (and without --overwrite), to print on Ctrl-C.

    The data folder it found through ``READERKIT_DATA`` is set on the line,
    so the command finds the same data from any shell.
    """
    import shlex

    ctx = click.get_current_context()
    root = ctx.find_root().info_name or "readerkit"
    prog = ["python", sys.argv[0]] if root.endswith(".py") and os.path.basename(sys.argv[0]) == root else [root]
    args = [ctx.info_name or "train"]
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        if not isinstance(param, click.Option) or param.name in ("resume", "overwrite") or value == param.default:
            continue
        if param.is_flag:
            args.append(param.opts[0] if value else param.secondary_opts[0])
        else:
            args += [param.opts[0], str(value)]
    env = []
    if ctx.params.get("data_dir") is None and os.environ.get("READERKIT_DATA"):
        env = [f"READERKIT_DATA={shlex.quote(os.environ['READERKIT_DATA'])}"]
    return " ".join([*env, shlex.join([*prog, *args, "--resume"])])


def _interrupted(directory: str | None, info: Any) -> None:
    from train.checkpoint import load_for_rank

    found = load_for_rank(directory, info.rank, info.world_size) if directory else None
    if found is None:
        where = "no --checkpoint-dir" if directory is None else f"no checkpoint was saved in {directory} yet"
        click.echo(f"\ninterrupted: {where}; nothing to resume", err=True)
    else:
        meta = found[1]
        launcher = ("\n(run it under your launcher, as this run was: torchrun, srun or mpirun, with this or "
                    "another number of processes)") if info.world_size > 1 else ""
        click.echo(f"\ninterrupted: the checkpoint in {directory} holds pass {meta['pass']}, entry "
                   f"{meta['cursor']}. Resume with:\n  {_resume_command()}{launcher}", err=True)
    click.get_current_context().exit(130)


def _check_entry(name: str, reader: Any) -> Any:
    """The image of ``reader``'s first entry, after checking entries are (image, label)."""
    from readers.checks import check_reader

    check_reader(reader, f"reader creator {name!r} returned something that")
    entry = _first_entry(reader)
    if not (isinstance(entry, tuple) and len(entry) == 2):
        shown = f"a tuple of {len(entry)} columns" if isinstance(entry, tuple) else f"a single {type(entry).__name__}"
        raise click.ClickException(f"reader {name!r} gives entries that are {shown}; train needs (image, label) entries")
    return entry[0]


@main.command("readers")
def list_readers() -> None:
    """List the readers and models that can be named, one line each."""
    from readers.registry import list_plugins

    for kind in ("readers", "models"):
        click.echo(f"{kind}:")
        for name, source, summary in list_plugins(kind):
            click.echo(f"  {name:<12} {summary}  [{source}]")


def _describe_value(value: Any) -> str:
    a = np.asarray(value)
    if a.dtype == object:
        return type(value).__name__
    return f"{a.dtype}{list(a.shape)}" if a.shape else f"{type(value).__name__} ({a.dtype})"


@main.command("inspect")
@_reader_options
@click.option("--count", default=3, show_default=True, type=click.IntRange(min=0), help="How many entries to show.")
@_fail_cleanly
def inspect_reader(reader_name: str, data_dir: str | None, download: bool, count: int) -> None:
    """Show a reader's columns, dtypes, shapes, length and first entries."""
    import readers
    from readers.checks import check_reader
    from readers.pipeline import Node, describe

    train_reader, test_reader = _splits(reader_name, data_dir, download)
    check_reader(train_reader, f"reader {reader_name!r}")
    click.echo(f"reader: {reader_name}")
    shown = repr(train_reader) if isinstance(train_reader, Node) else describe(train_reader)
    click.echo("pipeline:\n  " + shown.replace("\n", "\n  "))
    try:
        length = str(len(train_reader))
    except TypeError:
        length = "unknown (a stream)"
    if test_reader is not None:
        try:
            length += f" (test split: {len(test_reader)})"
        except TypeError:
            length += " (test split: a stream)"
    click.echo(f"length: {length}")
    entry = _first_entry(train_reader)
    columns = entry if isinstance(entry, tuple) else (entry,)
    for i, value in enumerate(columns):
        click.echo(f"column {i}: {_describe_value(value)}")
    np.set_printoptions(threshold=8, edgeitems=3, precision=3)
    for i, entry in enumerate(readers.firstn(train_reader, count)()):
        shown = entry if isinstance(entry, tuple) else (entry,)
        click.echo(f"entry {i}: " + ", ".join(repr(v) if np.ndim(v) == 0 else np.array2string(np.asarray(v)) for v in shown))


@main.command("bench")
@_reader_options
@click.option("--workers", default=2, show_default=True, type=click.IntRange(min=1), help="Prefetch workers.")
@click.option("--mode", type=click.Choice(["thread", "process"]), default="process", show_default=True,
              help="Prefetch in threads or processes.")
@click.option("--batch-size", default=64, show_default=True, type=click.IntRange(min=1), help="Entries per minibatch.")
@click.option("--limit", default=20000, show_default=True, type=click.IntRange(min=1),
              help="Entries to read per pass (lower it for a slow reader).")
@click.option("--step-ms", default=0.0, show_default=True, type=click.FloatRange(min=0),
              help="Simulated training step: the consumer sleeps this long per minibatch.")
@click.option("--passes", default=1, show_default=True, type=click.IntRange(min=1),
              help="Passes of each measurement; the last counts (earlier ones warm caches).")
@click.option("--log-json", type=click.Path(dir_okay=False), default=None, help="Also write the figures to this file, as one JSON object.")
@_fail_cleanly
def bench(reader_name: str, data_dir: str | None, download: bool, workers: int, mode: str, batch_size: int,
          limit: int, step_ms: float, passes: int, log_json: str | None) -> None:
    """Measure a reader behind prefetch workers, stage by stage, and name the bottleneck.

    Runs batch(prefetch(firstn(READER, limit), workers, mode=mode), batch_size),
    sleeping --step-ms per minibatch as a training step would, then the reader
    alone, serially in this process. Prints one line per prefetch stage (the
    one bench adds, then the reader's own, measured in the reader-alone pass):
    entries/s; input wait, the share of the workers' time spent waiting on the
    reader they run; output wait, the share blocked on a full queue (or
    sending); consumer wait, the share of the pass its consumer waited for
    entries; queue fill, how full the queue was on average.

    The last line names the bottleneck, by the first rule that holds: the
    pipeline took over 10% longer than the reader alone plus the same steps:
    prefetch overhead; the consumer waited less than half the pass: the
    consumer (batching and the step); the workers spent half their time or
    more waiting on their reader: that reader (or, following the wait down,
    the work under the reader's own prefetch stage whose consumer also
    waited); otherwise the hand-off between workers and consumer.
    """
    from readers.allocator import tune_allocator
    from readers.bench import bottleneck, measure, report
    from readers.checks import check_reader

    train_reader, _ = _splits(reader_name, data_dir, download)
    check_reader(train_reader, f"reader creator {reader_name!r} returned something that")
    _first_entry(train_reader)  # an empty reader is reported before anything is timed
    try:  # a shorter reader is read whole: say how much that is
        span = f"first {min(limit, len(train_reader)):,} entries"
    except TypeError:  # a stream ends where it ends; the next line counts what was read
        span = f"up to {limit:,} entries"
    click.echo(f"bench: {reader_name}, {span}, {workers} {mode} worker{'s' if workers > 1 else ''}, "
               f"batches of {batch_size}, step {step_ms:g} ms")
    tune_allocator()  # as train does: the figures then match a training run's
    f = measure(reader_name, train_reader, workers=workers, mode=mode, batch_size=batch_size, limit=limit,
                step_ms=step_ms, passes=passes)
    f["bottleneck"], f["verdict"] = bottleneck(f)
    for line in [*report(f), f["verdict"]]:
        click.echo(line)
    if log_json:
        with open(log_json, "w", encoding="utf-8") as out:
            out.write(json.dumps(f) + "\n")


if __name__ == "__main__":
    main()
