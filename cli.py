"""readerkit's command line: a thin click adapter over readers, batching and train.

    python cli.py train --reader mnist          train a model, one line per pass
    python cli.py readers                       the readers and models it can find
    python cli.py inspect --reader mnist        columns, dtypes, shapes, first entries
    python cli.py bench --reader mnist          per prefetch stage: throughput, waits; the bottleneck
    python cli.py serve --reader mnist          serve its entries to readers.remote clients over TCP
    python cli.py cache info DIR                what a readers.cached folder holds (cache clear DIR empties it)
    python cli.py pipeline run --db runs.db     a continual-learning pipeline on split-mnist, a row per trigger
    python cli.py plot log.jsonl                the curves of a --log-json log, as log.png

>>> from click.testing import CliRunner
>>> CliRunner().invoke(main, ["--help"]).exit_code
0
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from train.commands.cache_folders import cache_group
from train.commands.console import fail_cleanly
from train.commands.continual import pipeline_group
from train.commands.options import (
    FileOrURL,
    TrainSettings,
    as_settings,
    batch_size_option,
    blas_threads_option,
    classes_option,
    given_flags,
    log_json_option,
    lr_option,
    model_option,
    passes_option,
    reader_options,
    seed_option,
)
from train.commands.progress import PROGRESS_EVERY, log_to_stderr
from train.commands.tokenizing import tokenize_command
from train.commands.training import first_entry, splits, train_command

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--progress-every", default=PROGRESS_EVERY, show_default=True, envvar="READERKIT_PROGRESS_EVERY",
              type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Where stderr is no terminal (a job under a scheduler), log the progress of train, tokenize, "
                   "pipeline run and cache clear every SECONDS, with the rate and the ETA (also from "
                   "$READERKIT_PROGRESS_EVERY); on a terminal they draw a bar.")
def main(progress_every: float) -> None:
    """readerkit: composable data readers and minibatching for training.

    A --reader or --model given as module:attribute (or a bare module) is
    imported with the current folder first on the import path, as python -m does.
    """
    log_to_stderr()  # the progress lines go through logging's "readerkit" logger
    # readerkit's own packages first: a user's train.py, readers.py or batching.py in the current
    # folder must not shadow them once that folder leads the import path
    try:
        import batching  # noqa: F401
        import readers  # noqa: F401
        import train  # noqa: F401
    except KeyboardInterrupt:  # Ctrl-C this early: nothing started, nothing to resume
        click.echo("\ninterrupted before anything started; nothing to resume", err=True)
        click.get_current_context().exit(130)

    if os.getcwd() not in sys.path:  # neither `readerkit` nor `python path/to/cli.py` puts it there
        sys.path.insert(0, os.getcwd())


@main.command()
@reader_options(formats=True)
@model_option
@classes_option("Number of label classes (labels 0..classes-1).  [default: one more than the largest label of the "
                "training and test splits: of 10,000 entries spread over an indexed reader, or a stream's first 10,000]")
@batch_size_option(128)
@passes_option(5, "Passes over the training data.")
@lr_option("Adam learning rate of the first pass.")
@click.option("--lr-decay", default=0.6, show_default=True, type=click.FloatRange(min=0, min_open=True, max=1),
              help="The learning rate of pass k is lr * lr_decay**k.")
@seed_option("Seeds the shuffle and the model's initialisation.")
@click.option("--checkpoint-dir", type=click.Path(file_okay=False), default=None, help="Save the model and data position here after every pass and every --checkpoint-every steps "
                   "(in a rank<r> subfolder per process under a launcher with several). One run at a time.")
@click.option("--checkpoint-every", default=200, show_default=True, type=click.IntRange(min=1), help="Steps between checkpoints within a pass (with --config: every --log-every steps unless given).")
@click.option("--resume", is_flag=True, help="Continue from the checkpoint in --checkpoint-dir (same settings and data required).")
@click.option("--overwrite", is_flag=True, help="Start over in a --checkpoint-dir that holds a checkpoint, replacing it.")
@log_json_option("Write one JSON object per pass to this file (with --resume, the passes the checkpoint holds are "
                 "kept and later ones rewritten); under a launcher with several processes, rank r writes FILE with "
                 ".rank<r> before its extension.")
@click.option("--config", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A state.toml run file: train a next-token model on its token data, step by step, with the "
                   "global batch of each step from its schedule (the image options do not apply).")
@click.option("--steps", type=click.IntRange(min=1), default=None,
              help="With --config: steps to train.  [default: the run file's total_steps]")
@click.option("--log-every", default=10, show_default=True, type=click.IntRange(min=1),
              help="With --config: one line (and --log-json object) every N steps.")
@click.option("--vocab-size", type=click.IntRange(min=2), default=None,
              help="With --config: token ids 0..N-1.  [default: one more than the largest id in 1,000 windows "
                   "spread over the data, at least 256]")
@click.option("--connect-timeout", default=5.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="With --config whose data_location is a Server: seconds to wait for it at the start (a server "
                   "lost later is waited for 120 s).")
@click.option("--ca-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="With --config whose data_location is a Server: speak TLS to it, checking its certificate "
                   "against this file (PEM).")
@blas_threads_option
@fail_cleanly
@as_settings(TrainSettings)
def train(settings: TrainSettings) -> None:
    """Train a model on a reader, with a progress bar and test accuracy per pass.

    Ctrl-C (or SIGTERM) stops it with exit code 130 (143), printing where the
    checkpoint is and the command that resumes from it.
    """
    train_command(settings)


@main.command("readers")
def list_readers() -> None:
    """List the readers and models that can be named, one line each."""
    from readers.plugins.registry import list_plugins

    for kind in ("readers", "models"):
        click.echo(f"{kind}:")
        for name, source, summary in list_plugins(kind):
            click.echo(f"  {name:<12} {summary}  [{source}]")


def _describe_value(value: Any) -> str:
    import numpy as np

    if isinstance(value, (bytes, bytearray)):
        return f"bytes ({len(value):,})"
    if isinstance(value, (dict, list, str)):
        return type(value).__name__
    a = np.asarray(value)
    if a.dtype == object:
        return type(value).__name__
    return f"{a.dtype}{list(a.shape)}" if a.shape else f"{type(value).__name__} ({a.dtype})"


def _show_value(value: Any) -> str:
    """One value of an entry, short: arrays of more than 8 values and long bytes by what they are, not whole."""
    import numpy as np

    if isinstance(value, np.generic):
        return repr(value.item())
    if isinstance(value, (bytes, bytearray)) and len(value) > 16:
        return f"<{_describe_value(value)}>"
    if isinstance(value, np.ndarray) and value.size > 8:
        return f"<{_describe_value(value)} array>"
    if isinstance(value, np.ndarray):
        return np.array2string(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_show_value(v)}" for k, v in value.items()) + "}"
    return repr(value) if np.ndim(value) == 0 or isinstance(value, (str, list, tuple)) else np.array2string(
        np.asarray(value))


@main.command("inspect")
@reader_options(formats=True)
@click.option("--count", default=3, show_default=True, type=click.IntRange(min=0), help="How many entries to show.")
@fail_cleanly
def inspect_reader(reader_name: str, data_dir: str | None, download: bool, data: str | None, columns: str | None,
                   size: int | None, count: int) -> None:
    """Show a reader's columns, dtypes, shapes, length and first entries (arrays summarised by dtype and shape)."""
    import numpy as np

    import readers
    from readers.checks import check_reader
    from readers.graph import Node, describe

    train_reader, test_reader = splits(reader_name, data_dir, download, data=data, columns=columns, size=size)
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
    entry = first_entry(train_reader)
    names = getattr(train_reader, "entry_names", None) or ()
    if isinstance(entry, dict):  # a sample of fields (tar shards): one line a field
        values = [(f"field {k!r}", v) for k, v in entry.items()]
    else:
        values = [(f"column {i}" + (f" ({names[i]!r})" if i < len(names) else ""), v)
                  for i, v in enumerate(entry if isinstance(entry, tuple) else (entry,))]
    for label, value in values:
        click.echo(f"{label}: {_describe_value(value)}")
    np.set_printoptions(threshold=8, edgeitems=3, precision=3)
    for i, entry in enumerate(readers.firstn(train_reader, count)()):
        shown = entry if isinstance(entry, tuple) else (entry,)
        click.echo(f"entry {i}: " + ", ".join(_show_value(v) for v in shown))


@main.command("bench")
@reader_options(formats=True)
@click.option("--workers", default=2, show_default=True, type=click.IntRange(min=1), help="Prefetch workers.")
@click.option("--mode", type=click.Choice(["thread", "process"]), default="process", show_default=True,
              help="Prefetch in threads or processes.")
@batch_size_option(64)
@click.option("--limit", default=20000, show_default=True, type=click.IntRange(min=1),
              help="Entries to read per pass (lower it for a slow reader).")
@click.option("--step-ms", default=0.0, show_default=True, type=click.FloatRange(min=0),
              help="Simulated training step: the consumer sleeps this long per minibatch.")
@passes_option(1, "Passes of each measurement; the last counts (earlier ones warm caches).")
@log_json_option("Also write the figures to this file, as one JSON object.")
@fail_cleanly
def bench(reader_name: str, data_dir: str | None, download: bool, data: str | None, columns: str | None,
          size: int | None, workers: int, mode: str, batch_size: int, limit: int, step_ms: float, passes: int,
          log_json: str | None) -> None:
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
    from readers.checks import check_reader
    from readers.workers.bench import bottleneck, measure, report

    train_reader, _ = splits(reader_name, data_dir, download, data=data, columns=columns, size=size)
    check_reader(train_reader, f"reader creator {reader_name!r} returned something that")
    first_entry(train_reader)  # an empty reader is reported before anything is timed
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


SECONDS = click.FloatRange(min=0, min_open=True)  # a timeout of serve's


@main.command("serve")
@reader_options(formats=True)
@click.option("--config", type=FileOrURL(), default=None,
              help="A data.toml (a path, or a URL beside token objects: http(s)://, s3://): serve its token windows "
                   "(instead of --reader).")
@click.option("--split", type=click.Choice(["train", "test"]), default="train", show_default=True,
              help="Which split of --reader to serve.")
@click.option("--part", "part_text", default=None, metavar="K/N",
              help="Serve only the K-th of N equal contiguous parts of the entries, K from 1 to N (--part 1/4: the "
                   "first quarter; sizes within one entry of each other), reading nothing of the rest; clients ask "
                   "each index of a server that holds it. The first line and the welcome say the part.")
@click.option("--range", "span", default=None, metavar="START:STOP",
              help="Serve only the entries START to STOP - 1 (half-open, as a Python slice; START: runs to the "
                   "end). Not with --part.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; one other machines can reach needs a secret.")
@click.option("--port", default=20001, show_default=True, type=click.IntRange(0, 65535), help="Port; 0 picks a free one.")
@click.option("--secret-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="File holding the shared secret clients must prove (default: $READERKIT_SECRET).")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), default=None, help="TLS certificate (PEM).")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), default=None, help="Its private key (PEM).")
@click.option("--idle-timeout", default=600.0, show_default=True, type=SECONDS,
              help="Close a connection with no request for this many seconds.")
@click.option("--frame-timeout", default=60.0, show_default=True, type=SECONDS,
              help="Drop a client that takes nothing of an answer, or leaves a request half sent, for this many "
                   "seconds.")
@click.option("--handshake-timeout", default=10.0, show_default=True, type=SECONDS,
              help="Close a connection that has not logged in (TLS, hello, secret) within this many seconds.")
@click.option("--drain-timeout", default=10.0, show_default=True, type=SECONDS,
              help="On SIGTERM or Ctrl-C, let the answers under way finish for up to this many seconds.")
@click.option("--budget-mib", default=256, show_default=True, type=click.IntRange(min=1),
              help="Memory for answers gathered and not yet sent, over all clients (MiB).")
@click.option("--max-clients", default=1024, show_default=True, type=click.IntRange(min=1),
              help="Clients served at once; each has budget / (2 x max-clients), or one entry if more, to itself, "
                   "so one that reads slowly delays only itself.")
@fail_cleanly
def serve(reader_name: str, data_dir: str | None, download: bool, data: str | None, columns: str | None,
          size: int | None, config: str | None, split: str, part_text: str | None, span: str | None, host: str,
          port: int, secret_file: str | None, tls_cert: str | None, tls_key: str | None, idle_timeout: float,
          frame_timeout: float, handshake_timeout: float, drain_timeout: float, budget_mib: int,
          max_clients: int) -> None:
    """Serve an indexed reader's entries to readers.remote clients over TCP, until SIGTERM or Ctrl-C.

    The first line on standard output is `serving N entries on HOST:PORT`; a
    server of a part adds `: part K/N, entries [START, STOP) of TOTAL,
    part_digest HEX` (without `part K/N, ` for --range), N being the entries
    it holds."""
    from readers.allocator import tune_allocator
    from readers.network.parts import show_part
    from readers.network.server import Server, run_until_signal, tls_context
    from readers.network.wire import read_secret, show_address

    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("--tls-cert and --tls-key go together: the certificate and its private key")
    holds = _part_option(part_text, span)  # (a bad --part or --range is refused before the data is read)
    reader, info = _served(reader_name, data_dir, download, config, split, holds=holds, data=data, columns=columns,
                           size=size)
    tune_allocator()  # every answer gathers a fresh array of up to a few MB: keep them on the heap
    server = Server(reader, part=holds(len(reader)), info=info, secret=read_secret(file=secret_file),
                    idle_timeout=idle_timeout, frame_timeout=frame_timeout, handshake_timeout=handshake_timeout,
                    drain_timeout=drain_timeout, budget=budget_mib << 20, max_clients=max_clients,
                    tls=tls_context(tls_cert, tls_key) if tls_cert else None, log=lambda line: click.echo(line, err=True))

    def announce(bound_host: str, bound_port: int) -> None:
        served = server.served
        start, stop = served.holds or (0, served.n)
        line = f"serving {stop - start} entries on {show_address(bound_host, bound_port)}"
        if served.holds is not None:
            line += (f": {'' if part_text is None else f'part {part_text.strip()}, '}"
                     f"{show_part(served.holds, served.n)}, part_digest {served.welcome['part_digest']}")
        click.echo(line)
        sys.stdout.flush()

    run_until_signal(server, host, port, announce)  # (an address it cannot listen on: CannotListen, one line)
    stats = server.stats
    click.echo(f"stopped: {stats['connections']} connections, {stats['requests']} requests, "
               f"{stats['bytes']:,} bytes of entries sent", err=True)


def _part_option(part_text: str | None, span: str | None) -> Any:
    """What ``serve --part K/N`` or ``--range START:STOP`` holds, as a function of the served reader's length:
    ``(start, stop)``, or None for all of it. Either text is checked at once, the interval once the length is
    known; a bad one is a ``BadValue``, which the CLI prints in one line."""
    from readers.errors import BadValue
    from readers.network.parts import check_part, parse_part, parse_range, part_interval

    if part_text is not None and span is not None:
        raise BadValue(f"give --part or --range, not both (got --part {part_text!r} and --range {span!r}): each says "
                       "which entries this server holds")
    if part_text is not None:
        k, n = parse_part(part_text)
        return lambda entries: part_interval(k, n, entries)
    if span is not None:
        bounds = parse_range(span)
        return lambda entries: check_part(bounds, entries, f"--range {span!r}")
    return lambda entries: None


def _served(reader_name: str, data_dir: str | None, download: bool, config: str | None, split: str,
            holds: Any = lambda entries: None, **formats: Any) -> tuple[Any, dict]:
    """The reader ``serve`` holds and the facts it announces: a data.toml's token windows, or a reader's split
    (``formats``: the format readers' --data, --columns and --size). ``holds`` (``_part_option``) is the part
    served: a data.toml's tokens are then read only where the part lies (no scan of them all for
    ``max_token``)."""
    if config is not None:
        given = given_flags("reader_name", "split", "data_dir", "data", "columns", "size")
        if given:
            raise click.UsageError(f"{', '.join(given)} do{'es' if len(given) == 1 else ''} not apply with --config, "
                                   "which serves the token windows of a data.toml; give one or the other")
        import readers
        from readers.tokenized.runfiles import load_data

        data = load_data(config, caller="serve --config")
        tokens = readers.tokens(data.dir, seq_len=data.seq_len, token_size=data.token_size, vocab_size=data.vocab_size)
        # the largest id sizes a client's vocabulary where the data.toml records none: found by reading every token,
        # minutes for a large corpus, while clients wait seconds for a first connection; a recorded vocab_size is
        # the vocabulary, and every read checks the ids against it. A server of a part reads nothing outside it,
        # so it says none (None): a client finds the ids over the parts
        part = holds(len(tokens))
        whole = part is None or part == (0, len(tokens))
        top = tokens.max_token() if data.vocab_size is None and whole else None
        return tokens, {"seq_len": data.seq_len, "token_size": data.token_size, "shuffle_seed": data.shuffle_seed,
                        "max_token": top, "tokens": sum(tokens.sizes), "vocab_size": data.vocab_size}
    train_reader, test_reader = splits(reader_name, data_dir, download, **formats)
    if split == "test" and test_reader is None:
        raise click.UsageError(f"reader {reader_name!r} has no test split; serve --split train")
    return (train_reader if split == "train" else test_reader), {"split": split}


@main.command("plot")
@click.argument("log", type=click.Path(dir_okay=False))
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="The image to write (.png, .svg or .pdf).  [default: LOG with .png for its extension]")
@fail_cleanly
def plot(log: str, out: str | None) -> None:
    """Draw the curves of a --log-json LOG: loss and accuracy per pass (train), loss and perplexity per step
    (train --config), or each task's accuracy per trigger (pipeline run). Needs matplotlib
    (pip install matplotlib)."""
    from train.commands.plotting import plot_log

    written, what = plot_log(log, out)
    click.echo(f"wrote {written}: {what}")


main.add_command(cache_group)
main.add_command(pipeline_group)
main.add_command(tokenize_command)


if __name__ == "__main__":
    main()
