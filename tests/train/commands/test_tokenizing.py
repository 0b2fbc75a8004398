"""train.commands.tokenizing: `cli.py tokenize`, its tokens.bin and the data.toml that records them."""
import numpy as np
import pytest
from click.testing import CliRunner

from cli import main
from readers.tokenized.runfiles import load_data
from train.commands.tokenizing import recorded_text


def run(*args):
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def texts(tmp_path):
    (tmp_path / "big.txt").write_text("a rose is a rose is a rose\n" * 100)
    (tmp_path / "small.txt").write_text("hi\n")
    return tmp_path


def test_tokenize_refuses_to_replace_a_corpus_without_overwrite(texts):
    """Issue 27: tokenize over an existing corpus replaced it in silence (4.7M tokens became 6)."""
    out = texts / "tok"
    assert run("tokenize", str(texts / "big.txt"), "--out", str(out)).exit_code == 0
    before, data = (out / "tokens.bin").read_bytes(), [p.read_text() for p in out.glob("data.toml")]
    refused = run("tokenize", str(texts / "small.txt"), "--out", str(out))
    assert refused.exit_code == 1, refused.output
    assert (out / "tokens.bin").read_bytes() == before and [p.read_text() for p in out.glob("data.toml")] == data
    assert refused.output.strip() == (f"Error: {out / 'tokens.bin'} already holds a corpus (5,400 bytes); replace it "
                                      "with overwrite=True (tokenize --overwrite), or write to another folder")
    replaced = run("tokenize", str(texts / "small.txt"), "--out", str(out), "--overwrite")
    assert replaced.exit_code == 0, replaced.output
    assert np.fromfile(out / "tokens.bin", "<u2").tolist() == [104, 105, 10]
    assert f"{out / 'data.toml'} already says" in replaced.stdout


def test_tokenize_records_token_size_and_vocabulary_in_data_toml(texts):
    out = texts / "tok"
    result = run("tokenize", str(texts / "big.txt"), "--out", str(out), "--token-size", "4", "--seq-len", "16")
    assert result.exit_code == 0, result.output
    assert (out / "data.toml").read_text() == 'dir = "."\ntoken_size = "FourBytes"\nvocab_size = 256\nseq_len = 16\n'
    data = load_data(out / "data.toml")
    assert (data.token_size, data.vocab_size, data.seq_len, data.shuffle_seed) == (4, 256, 16, None)


def test_tokenize_keeps_an_existing_data_toml_and_does_not_advise_writing_one(texts):
    """Issue 27: tokenize advised writing a data.toml that was already there."""
    out = texts / "tok"
    out.mkdir()
    (out / "data.toml").write_text('# my corpus\ndir = "."\ntoken_size = "TwoBytes"\nseq_len = 64\nshuffle_seed = 7\n')
    result = run("tokenize", str(texts / "big.txt"), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "data.toml in" not in result.stderr and "next: a data.toml" not in result.stderr
    assert "max_seq_len is 64, the data.toml's seq_len (see the README)" in result.stderr
    assert result.stdout.splitlines()[1] == (f'updated {out / "data.toml"}: token_size = "TwoBytes", vocab_size = 256; '
                                             "its other lines kept")
    assert (out / "data.toml").read_text() == ('# my corpus\ndir = "."\nseq_len = 64\nshuffle_seed = 7\n'
                                               'token_size = "TwoBytes"\nvocab_size = 256\n')


def test_tokenize_refuses_a_data_toml_of_another_token_size(texts):
    out = texts / "tok"
    out.mkdir()
    (out / "data.toml").write_text('dir = "."\ntoken_size = "FourBytes"\nseq_len = 64\n')
    refused = run("tokenize", str(texts / "big.txt"), "--out", str(out))
    assert refused.exit_code == 1 and not (out / "tokens.bin").exists(), refused.output
    assert refused.output.strip() == (f'Error: {out / "data.toml"} says token_size = "FourBytes", and --token-size is '
                                      "2: give --token-size 4, or add --overwrite to replace the corpus and write a "
                                      "new data.toml")
    assert run("tokenize", str(texts / "big.txt"), "--out", str(out), "--token-size", "4").exit_code == 0
    assert load_data(out / "data.toml").vocab_size == 256


def test_tokenize_output_trains_without_scanning_for_the_vocabulary(texts):
    out = texts / "tok"
    assert run("tokenize", str(texts / "big.txt"), "--out", str(out), "--seq-len", "16").exit_code == 0
    (texts / "state.toml").write_text(
        "[config]\nglobal_batch_size_start = 4\nglobal_batch_size_end = 4\nglobal_batch_size_warmup_tokens = 0\n"
        'total_steps = 2\n[model.LLM]\nmax_seq_len = 16\n[model.LLM.data_location]\nLocal = "tok"\n')
    result = run("train", "--config", str(texts / "state.toml"))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"model nexttoken: vocabulary 256 (vocab_size in {out / 'data.toml'}); ")


def test_recorded_text_replaces_only_its_keys():
    text = 'dir = "."\nseq_len = 8 # the run\'s\nvocab_size = 9\nshuffle_seed = [\n  1, 2,\n]'
    assert recorded_text(text, {"vocab_size": "256"}) == ('dir = "."\nseq_len = 8 # the run\'s\nshuffle_seed = [\n'
                                                          "  1, 2,\n]\nvocab_size = 256\n")


STATE = """[config]
global_batch_size_start = 4
global_batch_size_end = 4
global_batch_size_warmup_tokens = 0
total_steps = 2
[model.LLM]
max_seq_len = 16
[model.LLM.data_location]
Local = "tok"
"""


@pytest.mark.parametrize("cut", [False, True], ids=["as written: not a multiple of 4 bytes",
                                                   "cut to a multiple of 4 bytes: vocab_size says 2-byte tokens"])
def test_utf16_text_tokenized_by_tokenize_trains_and_tokenize_warns(tmp_path, cut):
    """Review 27 finding 2: UTF-16LE text through tokenize gives [97, 0, 98, 0, ...], which readers.tokens and train
    --config refused as "probably 4-byte tokens" although tokenize recorded token_size = "TwoBytes" and vocab_size =
    256; the advice then led to "not a multiple of token_size=4 (try token_size=2)". Now a file whose size is not a
    multiple of 4 is never taken for 4-byte tokens, a recorded vocab_size says how the tokens were written, and
    tokenize warns about the text instead."""
    (tmp_path / "a.txt").write_bytes(("a rose is a rose is a rose\n" * 100).encode("utf-16-le"))
    out = tmp_path / "tok"
    result = run("tokenize", str(tmp_path / "a.txt"), "--out", str(out), "--seq-len", "16")
    assert result.exit_code == 0, result.output
    assert (f"warning: {out / 'tokens.bin'}: every second token is 0 in a sample of 2,048, as if 4-byte tokens were "
            "read 2 bytes at a time: is the text UTF-16?") in result.stderr
    assert (out / "tokens.bin").stat().st_size == 5401 * 2  # the newline tokenize adds
    if cut:
        (out / "tokens.bin").write_bytes((out / "tokens.bin").read_bytes()[:-2])
    (tmp_path / "state.toml").write_text(STATE)
    trained = run("train", "--config", str(tmp_path / "state.toml"))
    assert trained.exit_code == 0, trained.output
    assert trained.stdout.startswith("model nexttoken: vocabulary 256 (vocab_size in ")
    assert "step 2: loss" in trained.stdout


def test_tokenize_does_not_warn_about_utf8_text(texts):
    result = run("tokenize", str(texts / "big.txt"), "--out", str(texts / "tok"))
    assert result.exit_code == 0, result.output
    assert "UTF-16" not in result.stderr
