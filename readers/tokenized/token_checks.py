"""Is a token file read as it was written? Checks on a small sample of its tokens.

A ``.bin`` file is raw bytes: it does not say how wide its tokens are, and
read with the wrong width it still gives numbers. 4-byte tokens of a
vocabulary under 65,536 read as 2-byte ones come out as ``[35 0 32 0 114 0
...]``: every second token is 0. 2-byte tokens read as 4-byte ones come out
as ids in the millions, which the vocabulary check of the training command
refuses (``train.commands.token_vocabulary``). A vocabulary size recorded in
the folder's data.toml bounds the ids too.

Each check reads ``BLOCKS`` blocks of ``BLOCK`` tokens spread over the
file (a few KiB), and returns the problem in words, or None.
"""
from __future__ import annotations

import numpy as np

__all__ = ["four_byte_problem", "looks_four_byte", "sample", "too_large", "vocabulary_problem"]

#: Blocks sampled per file, and tokens per block: even, so the two halves of a 4-byte token stay in one block.
BLOCKS, BLOCK = 32, 64
#: A sample with fewer odd positions than this proves nothing (a file of a few tokens).
LEAST_ODD = 16


def sample(tokens: np.ndarray) -> np.ndarray:
    """Up to ``BLOCKS`` blocks of ``BLOCK`` tokens spread evenly over ``tokens``, each starting at an even
    position, concatenated (a whole short array, cut to an even length).

    >>> sample(np.arange(5)).tolist()
    [0, 1, 2, 3]
    >>> s = sample(np.arange(100_000))
    >>> len(s), s[:2].tolist(), s[-1].item()
    (2048, [0, 1], 99999)
    """
    n = len(tokens)
    if n <= BLOCKS * BLOCK:
        return np.asarray(tokens[:n - n % 2])
    starts = np.linspace(0, n - BLOCK, BLOCKS).astype(np.int64) & ~1
    return np.concatenate([tokens[s:s + BLOCK] for s in starts.tolist()])


def looks_four_byte(tokens: np.ndarray) -> bool:
    """True when 2-byte ``tokens`` look like 4-byte ones read 2 bytes at a time: in a sample, every token at an
    odd position is 0 and some token at an even position is not.

    >>> text = np.frombuffer(b"a rose is a rose is a rose. " * 4, np.uint8)
    >>> looks_four_byte(text.astype("<u4").view("<u2")), looks_four_byte(text.astype("<u2"))
    (True, False)
    >>> looks_four_byte(np.zeros(1000, "<u2"))  # all zero: another problem, not this one
    False
    """
    s = sample(tokens)
    odd = s[1::2]
    return len(odd) >= LEAST_ODD and not odd.any() and bool(s[0::2].any())


def four_byte_problem(path: str, tokens: np.ndarray, token_size: int) -> str | None:
    """Why ``tokens``, read from the ``.bin`` file ``path`` with ``token_size`` bytes each, are probably
    4-byte tokens; None when they are not, or were not read 2 bytes at a time.

    >>> text = np.frombuffer(b"a rose is a rose is a rose. " * 4, np.uint8)
    >>> four_byte_problem("t.bin", text.astype("<u2"), 2) is None
    True
    >>> print(four_byte_problem("t.bin", text.astype("<u4").view("<u2"), 2))
    t.bin: read as 2-byte tokens (token_size = "TwoBytes"), every second token is 0 in a sample of 224: probably 4-byte tokens; read them with token_size = "FourBytes" (in the folder's data.toml, or token_size=4)
    """
    if token_size != 2 or not path.endswith(".bin") or not looks_four_byte(tokens):
        return None
    return (f'{path}: read as 2-byte tokens (token_size = "TwoBytes"), every second token is 0 in a sample of '
            f'{len(sample(tokens)):,}: probably 4-byte tokens; read them with token_size = "FourBytes" (in the '
            "folder's data.toml, or token_size=4)")


def vocabulary_problem(path: str, tokens: np.ndarray, vocab_size: int | None) -> str | None:
    """Why a sample of ``tokens`` from ``path`` does not fit the recorded ``vocab_size``; None when it does
    (or none is recorded).

    >>> print(vocabulary_problem("t.bin", np.array([3, 300, 7], "<u2"), 256))
    t.bin holds the token id 300, beyond vocab_size = 256 (ids 0..255), which its data.toml records: is token_size right? If it is, the data.toml is stale: correct its vocab_size
    >>> vocabulary_problem("t.bin", np.array([3, 200, 7], "<u2"), 256) is None
    True
    """
    if vocab_size is None or not len(tokens):
        return None
    top = int(sample(tokens).max()) if len(tokens) > 1 else int(tokens[0])
    if top < vocab_size:
        return None
    return too_large(path, top, vocab_size)


def too_large(path: str, token: int, vocab_size: int) -> str:
    """The words for a token id at or beyond the recorded vocabulary.

    >>> print(too_large("t.bin", 9, 8))
    t.bin holds the token id 9, beyond vocab_size = 8 (ids 0..7), which its data.toml records: is token_size right? If it is, the data.toml is stale: correct its vocab_size
    """
    return (f"{path} holds the token id {token}, beyond vocab_size = {vocab_size} (ids 0..{vocab_size - 1}), which its "
            "data.toml records: is token_size right? If it is, the data.toml is stale: correct its vocab_size")
