"""Is a token file read as it was written? Checks on a small sample of its tokens.

A ``.bin`` file is raw bytes: it does not say how wide its tokens are, and
read with the wrong width it still gives numbers. 4-byte tokens read as
2-byte ones come out in pairs, the id's low half then its high half: of a
vocabulary under 65,536, ``[35 0 32 0 114 0 ...]`` (every second token is
0); of a larger one (Llama 3's 128,256), every second token is 0 or 1 while
the others take any value up to 65,535. 2-byte tokens read as 4-byte ones
come out as ids in the millions, which the vocabulary check of the training
command refuses (``train.commands.token_vocabulary``). A vocabulary size
recorded in the folder's data.toml bounds the ids too.

Only a file of a whole number of 4-byte tokens (a size a multiple of 4) is
ever called probably 4-byte, and not when its vocabulary size is known: a
data.toml that records ``vocab_size`` (``cli.py tokenize`` writes one) says
how its tokens were written, so 2-byte tokens of that shape (byte-level
UTF-16 text) are read as they are.

Each check reads ``BLOCKS`` blocks of ``BLOCK`` tokens spread over the
file (a few KiB), and returns the problem in words, or None.
"""
from __future__ import annotations

import numpy as np

from readers.tokenized.runfile_fields import TOKEN_SIZE_NAMES

__all__ = ["four_byte_problem", "four_byte_shape", "looks_four_byte", "sample", "sample_spans", "too_large", "vocabulary_problem"]

#: Blocks sampled per file, and tokens per block: even, so the two halves of a 4-byte token stay in one block.
BLOCKS, BLOCK = 32, 64
#: A sample with fewer odd positions than this proves nothing (a file of a few tokens).
LEAST_ODD = 16
#: 4-byte ids under 2**20 (every tokenizer's) have a high half under HIGH; natural 2-byte ids at odd positions all
#: below it while those at even positions reach REACH, in at least DISTINCT values, do not occur: both positions
#: hold the same kind of ids.
HIGH, REACH, DISTINCT = 16, 1024, 64


def sample(tokens: np.ndarray) -> np.ndarray:
    """Up to ``BLOCKS`` blocks of ``BLOCK`` tokens spread evenly over ``tokens``, each starting at an even
    position, concatenated (a whole short array, cut to an even length).

    >>> sample(np.arange(5)).tolist()
    [0, 1, 2, 3]
    >>> s = sample(np.arange(100_000))
    >>> len(s), s[:2].tolist(), s[-1].item()
    (2048, [0, 1], 99999)
    """
    spans = sample_spans(len(tokens))
    if len(spans) == 1:
        return np.asarray(tokens[:spans[0][1]])
    return np.concatenate([tokens[s:s + k] for s, k in spans])


def sample_spans(n: int) -> list[tuple[int, int]]:
    """The ``(start, count)`` runs of tokens that ``sample`` takes of ``n`` tokens (a remote file reads these).

    >>> sample_spans(5), len(sample_spans(100_000)), sample_spans(100_000)[-1]
    ([(0, 4)], 32, (99936, 64))
    """
    if n <= BLOCKS * BLOCK:
        return [(0, n - n % 2)]
    starts = np.linspace(0, n - BLOCK, BLOCKS).astype(np.int64) & ~1
    return [(s, BLOCK) for s in starts.tolist()]


def four_byte_shape(tokens: np.ndarray) -> str | None:
    """How 2-byte ``tokens`` look like 4-byte ones read 2 bytes at a time, in words; None when they do not. In
    a sample, every token at an odd position is 0 and some at an even position is not (a vocabulary under
    65,536), or every one at an odd position is under ``HIGH`` while those at even positions reach ``REACH``
    in ``DISTINCT`` values or more (a larger vocabulary). An odd count of tokens (a file whose size is not a
    multiple of 4 bytes) never looks so.

    >>> text = np.frombuffer(b"a rose is a rose is a rose. " * 4, np.uint8)
    >>> four_byte_shape(text.astype("<u4").view("<u2"))
    'every second token is 0 in a sample of 224'
    >>> four_byte_shape(text.astype("<u4").view("<u2")[:-1]) is None  # 222 bytes: not 4-byte tokens
    True
    >>> ids = np.random.default_rng(0).integers(0, 128_256, 4096).astype("<u4")  # Llama 3's vocabulary
    >>> four_byte_shape(ids.view("<u2"))
    'every second token is under 16 while the others reach 65,533, in a sample of 2,048'
    """
    if len(tokens) % 2:
        return None
    s = sample(tokens)
    odd, even = s[1::2], s[0::2]
    if len(odd) < LEAST_ODD or not even.any():  # all zero: another problem, not this one
        return None
    if not odd.any():
        return f"every second token is 0 in a sample of {len(s):,}"
    top = int(even.max())
    if int(odd.max()) < HIGH and top >= REACH and len(np.unique(even)) >= DISTINCT:
        return f"every second token is under {HIGH} while the others reach {top:,}, in a sample of {len(s):,}"
    return None


def looks_four_byte(tokens: np.ndarray) -> bool:
    """True when 2-byte ``tokens`` look like 4-byte ones read 2 bytes at a time (``four_byte_shape``).

    >>> text = np.frombuffer(b"a rose is a rose is a rose. " * 4, np.uint8)
    >>> looks_four_byte(text.astype("<u4").view("<u2")), looks_four_byte(text.astype("<u2"))
    (True, False)
    >>> looks_four_byte(np.zeros(1000, "<u2"))  # all zero: another problem, not this one
    False
    >>> looks_four_byte(np.random.default_rng(0).integers(0, 16, 4096).astype("<u2"))  # a small vocabulary
    False
    """
    return four_byte_shape(tokens) is not None


def four_byte_problem(path: str, tokens: np.ndarray, token_size: int, vocab_size: int | None = None) -> str | None:
    """Why ``tokens``, read from the ``.bin`` file ``path`` with ``token_size`` bytes each, are probably
    4-byte tokens; None when they are not, were not read 2 bytes at a time, or ``vocab_size`` is known (a
    data.toml that records it says how the tokens were written).

    >>> text = np.frombuffer(b"a rose is a rose is a rose. " * 4, np.uint8)
    >>> four_byte_problem("t.bin", text.astype("<u2"), 2) is None
    True
    >>> print(four_byte_problem("t.bin", text.astype("<u4").view("<u2"), 2))
    t.bin: read as 2-byte tokens (token_size = "TwoBytes"), every second token is 0 in a sample of 224: probably 4-byte tokens; read them with token_size = "FourBytes" (in the folder's data.toml, or token_size=4); if they are 2-byte tokens, record their vocab_size in the data.toml (or pass vocab_size=), which says so
    >>> four_byte_problem("t.bin", text.astype("<u4").view("<u2"), 2, vocab_size=256) is None
    True
    """
    if token_size != 2 or vocab_size is not None or not path.endswith(".bin"):
        return None
    shape = four_byte_shape(tokens)
    if shape is None:
        return None
    return (f'{path}: read as 2-byte tokens (token_size = "{TOKEN_SIZE_NAMES[2]}"), {shape}: probably 4-byte tokens; '
            f'read them with token_size = "{TOKEN_SIZE_NAMES[4]}" (in the folder\'s data.toml, or token_size=4); if '
            "they are 2-byte tokens, record their vocab_size in the data.toml (or pass vocab_size=), which says so")


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
