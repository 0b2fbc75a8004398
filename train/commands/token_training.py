"""The train command with ``--config state.toml``: a next-token model on token files, step by step.

The run file (``readers.tokenized.runfiles.load_run``) gives the batch-size schedule,
the steps and the data location; the data folder's tokens are read in
windows of ``max_seq_len + 1`` (``readers.tokens``), shuffled by the data's
seed, and each step's global batch is split among the job's processes by the
round coordinator (``train.steps.train_steps``). One line every
``--log-every`` steps gives the loss, the perplexity and tokens/s.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any

import click
import numpy as np

import readers
from readers.errors import BadValue
from readers.sources.locations import redact
from readers.tokenized.run_limits import check_run
from readers.tokenized.runfiles import LocalData, data_toml_of, load_run
from readers.tokenized.schedule import BatchSchedule
from readers.tokenized.windows import Tokens
from train.checkpoints.resume import ResumeRefused
from train.checkpoints.settings import Checkpoints
from train.commands.console import in_flag_words, keep_passes_before
from train.commands.options import TrainSettings, given_flags
from train.commands.token_vocabulary import check_vocabulary, likely_cause
from train.models.language import NextTokenMLP, TokenRangeError
from train.steps import train_steps

__all__ = ["config_run", "infer_vocabulary"]

#: Windows read to find the vocabulary: spread evenly over the data.
SCAN = 1000
#: Options of the image-and-label runs that a run file decides instead.
NOT_WITH_CONFIG = ("reader_name", "model_name", "classes", "batch_size", "passes", "lr_decay", "data_dir")


def infer_vocabulary(reader: Any) -> tuple[int, str]:
    """(vocabulary size, the words that say where it came from): one more than the largest token id, and
    at least 256 (byte-level text). Token files are read whole, in blocks (``Tokens.max_token``); another
    indexed reader, in up to 1,000 windows spread over it.

    >>> r = readers.np_array(np.array([[1, 2, 300], [4, 5, 6]], np.int32))
    >>> infer_vocabulary(r)
    (301, 'largest token id 300 in all 2 windows')
    """
    if isinstance(reader, Tokens):
        top = reader.max_token()
        return max(top + 1, 256), f"largest token id {top} in the {sum(reader.sizes):,} tokens"
    n = len(reader)
    picks = np.arange(n) if n <= SCAN else np.linspace(0, n - 1, SCAN).round().astype(np.int64)
    top = int(np.asarray(reader.gather_columns(picks)).max())
    where = f"in all {n:,} windows" if n <= SCAN else f"in {SCAN:,} windows spread over all {n:,}"
    return max(top + 1, 256), f"largest token id {top} {where}"


def _token_data(run: Any, settings: TrainSettings) -> tuple[Any, int | None, Any]:
    """(windows, shuffle seed, a function giving the vocabulary, the words saying how it was found and where
    from) of a run file's data location: token files in a local folder, or the token windows a data-provider
    server holds (reached with the settings' ``connect_timeout`` and ``ca_file``). A vocabulary size the folder's
    data.toml records is taken as it is; else the files are read."""
    config = settings.config
    if isinstance(run.data, LocalData):
        if run.data.shuffle_seed is None and data_toml_of(run.data.path) is None:
            click.echo(f"warning: {redact(run.data.path)} has no data.toml, so its tokens are read as {run.data.token_size}-"
                       "byte ids, in order (the reference's defaults); write one there to say token_size and "
                       "shuffle_seed", err=True)
        tokens = readers.tokens(run.data.path, seq_len=run.seq_len, token_size=run.data.token_size,
                                vocab_size=run.data.vocab_size)
        tokens.check_samples()  # a wrong token size is refused before the model is built
        if run.data.vocab_size is not None:
            return tokens, run.data.shuffle_seed, lambda: (run.data.vocab_size,
                                                           f"vocab_size in {run.data.data_file}", run.data.data_file)

        def scanned() -> tuple[int, str, str]:
            top, path = tokens.largest_token()
            return max(top + 1, 256), f"largest token id {top} in the {sum(tokens.sizes):,} tokens", path

        return tokens, run.data.shuffle_seed, scanned
    try:
        remote = readers.remote(run.data.addresses, connect_timeout=settings.connect_timeout, ca_file=settings.ca_file)
    except (readers.RemoteError, readers.RemoteUnavailable, readers.TLSMismatch, BadValue) as exc:
        raise click.ClickException(f"{config}: data_location Server: {exc}") from None
    info = remote.info
    if "seq_len" not in info:
        raise click.ClickException(f"{config}: the server at {remote.address} serves {remote.welcome.get('reader')}, "
                                   "not token windows; start it with `python cli.py serve --config data.toml`")
    if info["seq_len"] != run.seq_len:
        raise click.ClickException(f"{config}: the run's sequence length is {run.seq_len}, and the server at "
                                   f"{remote.address} serves windows of {info['seq_len']} tokens (its data.toml's "
                                   "seq_len); make them equal")
    top, where = info.get("max_token"), f"the server at {remote.address}"
    if info.get("vocab_size"):
        return remote, info.get("shuffle_seed"), lambda: (info["vocab_size"], "vocab_size in the server's data.toml",
                                                          where)
    if top is None:
        return remote, info.get("shuffle_seed"), lambda: (*infer_vocabulary(remote), where)
    return remote, info.get("shuffle_seed"), lambda: (max(top + 1, 256), f"largest token id {top} in the "
                                                      f"{info.get('tokens', 0):,} tokens the server holds", where)


def _vocabulary(settings: TrainSettings, run: Any, found_vocab: Any) -> tuple[int, str]:
    """The model's vocabulary size and how it was found (--vocab-size, else the data), refused by
    ``check_vocabulary`` before any model is built when it is implausible or would not fit in memory."""
    if settings.vocab_size:
        vocab, whence, where = settings.vocab_size, "--vocab-size", "--vocab-size"
    else:
        vocab, whence, where = found_vocab()
    if isinstance(run.data, LocalData):
        token_size = run.data.token_size
        said = run.data.data_file or f"{settings.config} (token_size_in_bytes)"
    else:
        servers = ", ".join(run.data.addresses)
        token_size, said = None, f"the data.toml the server at {servers} was started with"
    check_vocabulary(vocab, whence=whence, where=where, token_size=None if settings.vocab_size else token_size,
                     cause=likely_cause(where, token_size, said, vocab), given=bool(settings.vocab_size))
    return vocab, whence


def _refuse_image_options() -> None:
    given = given_flags(*NOT_WITH_CONFIG)
    if given:
        raise click.UsageError(f"{', '.join(given)} do{'es' if len(given) == 1 else ''} not apply with --config, which "
                               "trains a next-token model on the run file's data, with its schedule of batch sizes "
                               "and steps (--lr, --seed, --vocab-size, --steps, --log-every and the checkpoint options "
                               "do apply)")


def config_run(info: Any, found: Any, settings: TrainSettings) -> None:
    """Train a next-token model as the run file ``settings.config`` describes (``cli.py train --config``).

    >>> from click.testing import CliRunner
    >>> import cli
    >>> CliRunner().invoke(cli.main, ["train", "--config", "/nonexistent/state.toml"]).output.splitlines()[-1]
    "Error: Invalid value for '--config': File '/nonexistent/state.toml' does not exist."
    """
    _refuse_image_options()
    run = load_run(settings.config, caller="train --config")
    tokens, shuffle_seed, found_vocab = _token_data(run, settings)
    data = tokens if shuffle_seed is None else readers.shuffle(tokens, seed=shuffle_seed)
    vocab, whence = _vocabulary(settings, run, found_vocab)
    model = NextTokenMLP(vocab, lr=settings.lr, seed=settings.seed)
    check_run(run, settings.config, window_bytes=model.window_bytes(run.seq_len),
              world_size=info.world_size)  # before the schedule: a ramp to 2**62 would take it minutes to build
    schedule = BatchSchedule.of_run(run)
    steps = settings.steps or run.total_steps
    who = f"rank {info.rank}/{info.world_size}: " if info.world_size > 1 else ""
    ramp = (f"{run.batch_start} to {run.batch_end} windows over {run.warmup_tokens:,} tokens"
            if run.batch_start != run.batch_end else f"{run.batch_end} windows")
    click.echo(f"{who}model nexttoken: vocabulary {vocab} ({whence}); {len(tokens):,} windows of {run.seq_len} "
               f"tokens; {steps} steps, global batch {ramp}")
    if run.ignored:
        click.echo(f"{who}ignored in {settings.config}: {', '.join(run.ignored)}", err=True)
    log = _JsonLog(settings.log_json, info, found)

    def on_log(record: dict[str, Any]) -> None:
        click.echo(f"{who}step {record['step']}: loss {record['loss']:.4f}  perplexity {record['perplexity']:.2f}  "
                   f"{record['tokens_per_s']:,.0f} tokens/s")
        log.write(record)

    # steps are long: a checkpoint every --log-every steps, unless --checkpoint-every says otherwise
    every = settings.checkpoint_every if given_flags("checkpoint_every") else settings.log_every
    try:
        checkpoints = None if settings.checkpoint_dir is None else Checkpoints(
            settings.checkpoint_dir, every=every, resume=settings.resume, overwrite=settings.overwrite)
        train_steps(data, model=model, schedule=schedule, steps=steps, seed=settings.seed, on_log=on_log,
                    log_every=settings.log_every, checkpoints=checkpoints, blas_threads=settings.blas_threads)
    except ResumeRefused as exc:
        raise click.ClickException(in_flag_words(exc)) from None
    except TokenRangeError as exc:
        raise click.ClickException(f"{exc}; pass --vocab-size {exc.token + 1} or more") from None
    except (readers.RemoteUnavailable, readers.RemoteError) as exc:
        again = (f"; the checkpoint in {settings.checkpoint_dir} holds the steps saved so far: once the server is "
                 "back, run the same command with --resume") if settings.checkpoint_dir else ""
        raise click.ClickException(f"{exc}{again}") from None
    finally:
        log.close()
    if found is not None and found[1].get("step", 0) >= steps:
        click.echo(f"{who}the checkpoint in {settings.checkpoint_dir} already holds {found[1]['step']} steps; "
                   f"nothing to train for --steps {steps}", err=True)


class _JsonLog:
    """``--log-json`` of a step run: one object per record; a resume keeps the records its checkpoint holds."""

    def __init__(self, path: str | None, info: Any, found: Any):
        if path and info.world_size > 1:
            stem, ext = os.path.splitext(path)
            path = f"{stem}.rank{info.rank}{ext}"
        self.path, self.file = path, None
        self.kept = None if found is None else found[1].get("step")

    def write(self, record: dict[str, Any]) -> None:
        if self.path is None:
            return
        if self.file is None:
            if self.kept is not None:
                keep_passes_before(self.path, self.kept + 1, key="step")
            self.file = open(self.path, "a" if self.kept is not None else "w", encoding="utf-8")
        clean = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in record.items()}
        self.file.write(json.dumps(clean) + "\n")
        self.file.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
