"""train.commands.token_vocabulary: a vocabulary refused before the model is built, with the likely cause."""
import pytest

from train.commands.token_vocabulary import (
    PLAUSIBLE,
    VocabularyError,
    check_vocabulary,
    likely_cause,
)
from train.models.language import NextTokenMLP


def test_an_implausible_vocabulary_is_refused_unless_given_on_purpose():
    """Issue 27: 2-byte tokens read as 4-byte ones made a vocabulary of millions, and the process was killed."""
    cause = likely_cause("tokens/t.bin", 4, "tokens/data.toml")
    with pytest.raises(VocabularyError, match=r"^tokens/t\.bin: read as 4-byte tokens \(token_size = \"FourBytes\"\), "
                                              r"largest token id 2,097,151: a vocabulary of 2,097,152 ids, more than "
                                              r"the 1,048,576 .*; the file probably holds 2-byte tokens: write "
                                              r"token_size = \"TwoBytes\" in tokens/data.toml$"):
        check_vocabulary(PLAUSIBLE * 2, whence="largest token id 2,097,151", where="tokens/t.bin", token_size=4,
                         cause=cause, memory=1 << 50)
    check_vocabulary(PLAUSIBLE * 2, whence="--vocab-size", where="--vocab-size", token_size=None, cause="",
                     given=True, memory=1 << 50)


def test_a_vocabulary_that_does_not_fit_in_memory_is_refused():
    needed = NextTokenMLP.memory_needed(50_000)
    check_vocabulary(50_000, whence="w", where="t.bin", token_size=2, cause="c", memory=needed)
    with pytest.raises(VocabularyError, match=r"the model would take .* MiB .*, more than the .* MiB of memory "
                                              r"available; train on a machine with more memory$"):
        check_vocabulary(50_000, whence="w", where="t.bin", token_size=2, cause=likely_cause("t.bin", 2, None),
                         memory=needed - 1)


@pytest.mark.parametrize("where, token_size, words", [
    ("tokens/data.toml", 2, "its vocab_size is probably wrong"),
    ("the server at 127.0.0.1:9", None, "the token_size of the data.toml it serves is probably wrong"),
    ("--vocab-size", None, "give a smaller --vocab-size"),
    ("tokens/t.bin", 2, "train on a machine with more memory"),
])
def test_likely_cause_follows_where_the_ids_came_from(where, token_size, words):
    assert likely_cause(where, token_size, "tokens/data.toml").startswith(words)


def test_the_vocabulary_check_asks_the_one_memory_function(monkeypatch):
    """Review 27 finding 4: this check read MemAvailable alone, with no cgroup limit, so inside a container it let a
    model through that the container's limit killed (rc 137); it asks run_limits.available_memory, as check_run does."""
    needed = NextTokenMLP.memory_needed(50_000)
    monkeypatch.setattr("readers.tokenized.run_limits._cgroup_room", lambda: needed - 1)
    with pytest.raises(VocabularyError, match=r"the model would take .* more than the .* of memory available"):
        check_vocabulary(50_000, whence="w", where="t.bin", token_size=2, cause="c")


def test_a_vocabulary_a_tokenizer_may_have_read_from_a_token_file_blames_the_memory():
    """Trial of issue 27, problem 2: 4-byte ids below 1,000,000 refused for memory were told "the file probably holds
    2-byte tokens: write token_size = "TwoBytes"", which the 4-byte check then refuses in turn."""
    assert likely_cause("tokens/t.bin", 4, "tokens/data.toml", 1_000_000) == (
        'train on a machine with more memory (or, if the file holds 2-byte tokens, write token_size = "TwoBytes" in '
        "tokens/data.toml)")
    assert likely_cause("tokens/t.bin", 4, "tokens/data.toml", PLAUSIBLE + 1).startswith(
        "the file probably holds 2-byte tokens")
    assert likely_cause("tokens/t.npy", 4, "tokens/data.toml", 1000) == "train on a machine with more memory"
    assert likely_cause("--vocab-size", None, "tokens/data.toml", 1000).startswith("give a smaller --vocab-size")
