"""readers.tokenized.token_checks: is a token file read with the width and vocabulary it was written with?"""
import numpy as np
import pytest

from readers.tokenized.token_checks import (
    BLOCK,
    BLOCKS,
    four_byte_problem,
    looks_four_byte,
    sample,
    vocabulary_problem,
)

TEXT = np.frombuffer(b"# rose is a rose is a rose\n" * 400, np.uint8)


def test_sample_takes_even_aligned_blocks_spread_over_the_file():
    tokens = np.arange(1_000_001)
    s = sample(tokens)
    assert len(s) == BLOCKS * BLOCK and s[0] == 0 and s[-1] > 999_000
    assert (s.reshape(BLOCKS, BLOCK)[:, 0] % 2 == 0).all()


@pytest.mark.parametrize("width, expected", [("<u4", True), ("<u2", False)])
def test_byte_level_text_looks_four_byte_only_when_it_is(width, expected):
    """Issue 27: 4-byte tokens read as 2-byte ones gave [35 0 32 0 114 0 ...]."""
    assert looks_four_byte(TEXT.astype(width).view("<u2")) is expected


def test_only_two_byte_reads_of_bin_files_are_judged():
    four = TEXT.astype("<u4").view("<u2")
    assert "probably 4-byte tokens" in four_byte_problem("t.bin", four, 2)
    assert four_byte_problem("t.npy", four, 2) is None  # a .npy file's dtype says its width
    assert four_byte_problem("t.bin", TEXT.astype("<u4"), 4) is None


def test_vocabulary_problem_sees_an_id_beyond_the_recorded_size():
    assert vocabulary_problem("t.bin", TEXT.astype("<u2"), None) is None
    assert vocabulary_problem("t.bin", TEXT.astype("<u2"), 256) is None
    assert vocabulary_problem("t.bin", TEXT.astype("<u2"), 100).startswith("t.bin holds the token id 115, beyond")
