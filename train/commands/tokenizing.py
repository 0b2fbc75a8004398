"""``python cli.py tokenize SRC... --out DIR``: text files to byte-level tokens, and the folder's data.toml.

The tokens go to ``DIR/tokens.bin`` (``readers.tokenized.windows.tokenize_bytes``),
and ``DIR/data.toml`` records how they were written: ``token_size`` and
``vocab_size`` (256, byte-level), so a later read with another token size is
refused (``readers.tokenized.token_checks``) and training need not scan the
tokens for their vocabulary. A corpus already in ``DIR`` is replaced only
with ``--overwrite``, as ``train`` replaces a checkpoint. A data.toml already
there keeps its other lines (``seq_len``, ``shuffle_seed``, comments); one
that disagrees with ``--token-size`` or describes another folder is refused,
and rewritten with ``--overwrite``.

>>> from click.testing import CliRunner
>>> CliRunner().invoke(tokenize_command, ["--help"]).exit_code
0
"""
from __future__ import annotations

import os
import re

import click
import numpy as np

from readers.errors import BadValue
from readers.tokenized import token_checks
from readers.tokenized.runfile_fields import TOKEN_SIZE_NAMES
from readers.tokenized.runfiles import (
    DataConfig,
    RunFileError,
    data_text,
    load_data,
    write_data,
)
from train.commands.console import fail_cleanly
from train.commands.progress import Meter

__all__ = ["BYTE_VOCABULARY", "DEFAULT_SEQ_LEN", "recorded_text", "tokenize_command"]

#: Byte-level tokens: ids 0..255.
BYTE_VOCABULARY = 256
#: A new data.toml's seq_len unless --seq-len says otherwise (the reference's configs use 2048).
DEFAULT_SEQ_LEN = 2048
_RECORDED = re.compile(r"^[ \t]*(token_size|vocab_size|seq_len)[ \t]*=.*\n?", re.MULTILINE)


def recorded_text(text: str, values: dict[str, str]) -> str:
    """``text`` of a data.toml with the lines of the keys in ``values`` (token_size, vocab_size, seq_len)
    replaced by ``key = value``, or added at the end; every other line is kept as it was.

    >>> print(recorded_text('dir = "."  # here\\ntoken_size = "TwoBytes"\\nseq_len = 64\\n',
    ...                     {"token_size": '"TwoBytes"', "vocab_size": "256"}), end="")
    dir = "."  # here
    seq_len = 64
    token_size = "TwoBytes"
    vocab_size = 256
    """
    kept = _RECORDED.sub(lambda line: "" if line[1] in values else line[0], text)
    if kept and not kept.endswith("\n"):
        kept += "\n"
    return kept + "".join(f"{key} = {value}\n" for key, value in values.items())


def _existing(data_file: str, out: str, token_size: int, overwrite: bool) -> DataConfig | None:
    """The data.toml already in ``out`` (a ``DataConfig``), or None when there is none or ``overwrite`` writes it
    afresh; one that cannot be read, describes another folder, or says another token size is refused without
    ``overwrite``."""
    if not os.path.isfile(data_file):
        return None
    afresh = "or add --overwrite to replace the corpus and write a new data.toml"
    try:
        data = load_data(data_file)
    except RunFileError as exc:
        if overwrite:
            return None
        raise BadValue(f"{exc}; {afresh}") from None
    if data.dir != os.path.abspath(out):
        if overwrite:
            return None
        raise BadValue(f"{data_file} describes the tokens in {data.dir}, not those tokenize writes to {out}: "
                       f"move it, {afresh}")
    if data.token_size != token_size and not overwrite:
        raise BadValue(f'{data_file} says token_size = "{TOKEN_SIZE_NAMES[data.token_size]}", and --token-size is '
                       f"{token_size}: give --token-size {data.token_size}, {afresh}")
    return data


def _record(out: str, data_file: str, existing: DataConfig | None, token_size: int, seq_len: int | None) -> str:
    """Write or update ``out``'s data.toml for byte-level tokens of ``token_size`` bytes; the line that says so."""
    said = f'token_size = "{TOKEN_SIZE_NAMES[token_size]}", vocab_size = {BYTE_VOCABULARY}'
    if existing is None:
        seq_len = seq_len or DEFAULT_SEQ_LEN
        write_data(out, data_text(token_size=token_size, vocab_size=BYTE_VOCABULARY, seq_len=seq_len))
        return f"wrote {data_file}: {said}, seq_len = {seq_len}, no shuffle_seed (the files' order)"
    values = {"token_size": f'"{TOKEN_SIZE_NAMES[token_size]}"', "vocab_size": str(BYTE_VOCABULARY)}
    if seq_len is not None and seq_len != existing.seq_len:
        values["seq_len"] = str(seq_len)
    elif (existing.token_size, existing.vocab_size) == (token_size, BYTE_VOCABULARY):
        return f"{data_file} already says {said}; left as it was"
    with open(data_file, encoding="utf-8") as f:
        write_data(out, recorded_text(f.read(), values))
    return f"updated {data_file}: {', '.join(f'{k} = {v}' for k, v in values.items())}; its other lines kept"


def _advice(out: str, data_file: str, existing: DataConfig | None, seq_len: int | None) -> str:
    """What to do next: a state.toml for the folder; a data.toml is never asked for, as one is there now."""
    length = seq_len or (existing.seq_len if existing is not None else DEFAULT_SEQ_LEN)
    shuffle = "" if existing is not None and existing.shuffle_seed is not None else \
        f", and a shuffle_seed in {data_file} to shuffle the windows"
    return (f'next: a state.toml whose data location is Local = "{out}" (relative to the state.toml) and whose '
            f"max_seq_len is {length}, the data.toml's seq_len{shuffle} (see the README)")


def _warn_four_byte_shape(path: str, token_size: int) -> None:
    """Warn when the 2-byte tokens written to ``path`` look like 4-byte ones (``token_checks.four_byte_shape``):
    byte-level tokens of UTF-16 text, every second one a 0 byte. The data.toml's vocab_size says they are 2-byte
    tokens, so they are read as written; the warning is about the text."""
    if token_size != 2 or os.path.getsize(path) < 4:
        return
    written = np.memmap(path, dtype="<u2", mode="r")
    shape = token_checks.four_byte_shape(written[:len(written) - len(written) % 2])
    del written
    if shape:
        click.echo(f"warning: {path}: {shape}, as if 4-byte tokens were read 2 bytes at a time: is the text UTF-16? "
                   f"Its data.toml records vocab_size = {BYTE_VOCABULARY}, so these are read as the 2-byte tokens "
                   "they are, but half of them are 0 bytes: to train on the text, convert it to UTF-8 first (iconv "
                   "-f UTF-16 -t UTF-8) and tokenize it again with --overwrite", err=True)


@click.command("tokenize")
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Folder to write tokens.bin and data.toml into.")
@click.option("--token-size", default="2", show_default=True, type=click.Choice(["2", "4"]),
              help="Bytes per token in the file.")
@click.option("--seq-len", type=click.IntRange(min=1), default=None,
              help=f"The data.toml's seq_len (the run's max_seq_len)  [default: a data.toml's own, else "
                   f"{DEFAULT_SEQ_LEN}]")
@click.option("--overwrite", is_flag=True, help="Replace the corpus already in --out (and a data.toml that disagrees).")
@fail_cleanly
def tokenize_command(sources: tuple[str, ...], out: str, token_size: int | str, seq_len: int | None,
                     overwrite: bool) -> None:
    """Turn text files into one .bin file of byte-level tokens (0..255), for readers.tokens and data.toml.
    \f
    >>> import tempfile
    >>> from click.testing import CliRunner
    >>> folder = tempfile.TemporaryDirectory()
    >>> _ = open(f"{folder.name}/a.txt", "w").write("hi")
    >>> result = CliRunner().invoke(tokenize_command, [f"{folder.name}/a.txt", "--out", f"{folder.name}/tok"])
    >>> print(result.stdout, end="")
    wrote .../tok/tokens.bin: 3 byte-level tokens (vocabulary 256) from 1 file, 2 bytes each
    wrote .../tok/data.toml: token_size = "TwoBytes", vocab_size = 256, seq_len = 2048, no shuffle_seed (the files' order)
    >>> np.fromfile(f"{folder.name}/tok/tokens.bin", "<u2").tolist()
    [104, 105, 10]
    """
    from readers.tokenized.windows import check_new_corpus, tokenize_bytes

    token_size = int(token_size)
    data_file = os.path.join(out, "data.toml")
    check_new_corpus(os.path.join(out, "tokens.bin"), overwrite=overwrite)  # before anything is read or checked
    existing = _existing(data_file, out, token_size, overwrite)
    total = sum(os.path.getsize(source) for source in sources)  # a byte a token
    with Meter("tokenizing", total, unit="tokens") as meter:  # a bar, or a log line every --progress-every s
        def progress(done: int) -> None:
            meter.update(done - meter.done)

        path = tokenize_bytes(sources, out, token_size=token_size, overwrite=overwrite, progress=progress)
    count = os.path.getsize(path) // token_size
    click.echo(f"wrote {path}: {count:,} byte-level tokens (vocabulary {BYTE_VOCABULARY}) from {len(sources)} file"
               f"{'s' if len(sources) > 1 else ''}, {token_size} bytes each")
    click.echo(_record(out, data_file, existing, token_size, seq_len))
    _warn_four_byte_shape(path, token_size)
    others = sorted(n for n in os.listdir(out) if n.endswith((".bin", ".npy")) and n != os.path.basename(path))
    if others:
        click.echo(f"warning: {out} holds other token files too ({', '.join(others[:3])}{', ...' if len(others) > 3 else ''}), "
                   "which readers.tokens and --config runs read with it; remove them, or give another --out", err=True)
    click.echo(_advice(out, data_file, existing, seq_len), err=True)


# click keeps the command's docstring (its help, cut at \f) on the command object, where doctest does not look
__test__ = {"tokenize_command": tokenize_command.__doc__}
