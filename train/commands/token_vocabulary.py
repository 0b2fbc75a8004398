"""Is a vocabulary one the next-token model can have, on this machine? Checked before the model is built.

Token files read with the wrong token size still give numbers. 2-byte tokens
read 4 bytes at a time pair two tokens into one id (``low + high * 65536``),
so byte-level text gives ids in the millions. A model over such a
vocabulary asks for gigabytes (its embedding and output layer grow with
it): the operating system kills the process without a word, or, on a large
machine, it trains on garbage. ``check_vocabulary`` refuses both before
anything is allocated, naming where the ids came from, the token size and
the likely cause (``likely_cause``).
"""
from __future__ import annotations

from readers.errors import BadValue
from readers.tokenized import run_limits
from readers.tokenized.runfile_fields import TOKEN_SIZE_NAMES
from train.models.language import NextTokenMLP

__all__ = ["PLAUSIBLE", "VocabularyError", "check_vocabulary", "likely_cause"]

#: The most ids a next-token model plausibly has: four times the largest tokenizers' (about 256,000).
PLAUSIBLE = 1 << 20


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


class VocabularyError(BadValue):
    """A vocabulary the model cannot have: too large to be a tokenizer's, or to fit in memory."""


def likely_cause(where: str, token_size: int | None, token_size_from: str | None, vocab_size: int | None = None) -> str:
    """What probably made a vocabulary too large, and what to do, for ids read from ``where`` (a token file, a
    data.toml's vocab_size, a server's address) with ``token_size`` bytes each, a size given in
    ``token_size_from``. A ``vocab_size`` a tokenizer may have (up to ``PLAUSIBLE``) read from a token file is
    probably right: the memory is short.

    >>> likely_cause("tokens/t.bin", 4, "tokens/data.toml")
    'the file probably holds 2-byte tokens: write token_size = "TwoBytes" in tokens/data.toml'
    >>> likely_cause("tokens/t.bin", 4, "tokens/data.toml", vocab_size=1_000_000)
    'train on a machine with more memory (or, if the file holds 2-byte tokens, write token_size = "TwoBytes" in tokens/data.toml)'
    >>> likely_cause("tokens/t.npy", 4, "tokens/data.toml")
    'its token ids are not numbered from 0 by a tokenizer: renumber them 0..n-1 (np.unique(tokens, return_inverse=True))'
    """
    plausible = vocab_size is not None and vocab_size <= PLAUSIBLE and where.endswith((".bin", ".npy"))
    if where.endswith(".bin") and token_size == 4:
        two = f'write token_size = "{TOKEN_SIZE_NAMES[2]}" in {token_size_from}'
        return f"train on a machine with more memory (or, if the file holds 2-byte tokens, {two})" if plausible \
            else f"the file probably holds 2-byte tokens: {two}"
    if plausible:
        return "train on a machine with more memory"
    if where.endswith(".npy"):
        return ("its token ids are not numbered from 0 by a tokenizer: renumber them 0..n-1 "
                "(np.unique(tokens, return_inverse=True))")
    if where.endswith("data.toml"):
        return "its vocab_size is probably wrong: correct it"
    if where.startswith("the server at "):
        return ("the token_size of the data.toml it serves is probably wrong (2-byte tokens read as 4-byte ones make "
                "ids in the millions): check it")
    if where == "--vocab-size":
        return "give a smaller --vocab-size (one more than the largest token id)"
    if token_size == 4:
        return f"its token_size is probably wrong (2-byte tokens read as 4-byte ones): check {token_size_from}"
    return "train on a machine with more memory"


def check_vocabulary(vocab_size: int, *, whence: str, where: str, token_size: int | None, cause: str,
                     given: bool = False, memory: int | None = None) -> None:
    """Raise ``VocabularyError`` when a ``NextTokenMLP`` over ``vocab_size`` ids has more ids than ``PLAUSIBLE``
    (unless ``given`` on purpose, by --vocab-size) or would not fit in ``memory`` bytes (by default
    ``run_limits.available_memory()``, the bound ``check_run`` uses too). The message names ``where`` the ids
    came from, ``whence`` (how the size was found), the token size and the ``cause``.

    >>> check_vocabulary(256, whence="largest token id 115", where="t.bin", token_size=2, cause="")
    >>> check_vocabulary(7_536_738, whence="largest token id 7,536,737", where="t.bin", token_size=4,
    ...                  cause=likely_cause("t.bin", 4, "data.toml"), memory=8 << 30)
    Traceback (most recent call last):
    ...
    train.commands.token_vocabulary.VocabularyError: t.bin: read as 4-byte tokens (token_size = "FourBytes"), largest token id 7,536,737: a vocabulary of 7,536,738 ids, more than the 1,048,576 a next-token model plausibly has, and the model would take 42.4 GiB (its parameters, Adam's moments and a step's gradients), more than the 8.0 GiB of memory available; the file probably holds 2-byte tokens: write token_size = "TwoBytes" in data.toml
    """
    faults = []
    if vocab_size > PLAUSIBLE and not given:
        faults.append(f"more than the {PLAUSIBLE:,} a next-token model plausibly has")
    memory = run_limits.available_memory() if memory is None else memory
    needed = NextTokenMLP.memory_needed(vocab_size)
    if memory is not None and needed > memory:
        faults.append(f"the model would take {_size(needed)} (its parameters, Adam's moments and a step's "
                      f"gradients), more than the {_size(memory)} of memory available")
    if not faults:
        return
    read = f' (token_size = "{TOKEN_SIZE_NAMES[token_size]}")' if token_size in TOKEN_SIZE_NAMES else ""
    read = f"read as {token_size}-byte tokens{read}, " if token_size else ""
    found = where if whence == where else f"{where}: {read}{whence}"  # --vocab-size says both
    raise VocabularyError(f"{found}: a vocabulary of {vocab_size:,} ids, {', and '.join(faults)}; {cause}")
