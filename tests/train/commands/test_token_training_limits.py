"""`cli.py train --config state.toml` refuses, in one line and at once, a run its memory cannot hold.

Issue 27 item 17: hostile run files ran for 30-40 s and ended in tracebacks: a global batch of 10**9 over 1,220
windows, a ramp to 2**62, seq_len = 150000 (a MemoryError), 500 nested inline tables (a RecursionError).
"""
import re
import subprocess

import numpy as np
import pytest
from click.testing import CliRunner

from cli import main
from tests.conftest import HANG
from tests.helpers.child_processes import python_child, read_to_end

STATE = """run_id = "test"
[config]
global_batch_size_start = {start}
global_batch_size_end = {end}
global_batch_size_warmup_tokens = {warmup}
total_steps = 12
warmup_time = {timing}
[model.LLM]
max_seq_len = {seq_len}
[model.LLM.data_location]
Local = "tokens"
"""


def _run_files(tmp_path, *, start=4, end=8, warmup=400, seq_len=16, tokens=1120, timing="30"):
    (tmp_path / "tokens").mkdir(exist_ok=True)
    (np.arange(tokens) % 251).astype("<u2").tofile(tmp_path / "tokens" / "t.bin")
    (tmp_path / "tokens" / "data.toml").write_text(f'dir = "."\ntoken_size = "TwoBytes"\nseq_len = {seq_len}\n')
    (tmp_path / "state.toml").write_text(STATE.format(start=start, end=end, warmup=warmup, seq_len=seq_len,
                                                      timing=timing))
    return str(tmp_path / "state.toml")


def _refused(state, *more):
    result = CliRunner().invoke(main, ["train", "--config", state, "--steps", "1", *more])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    return result.output.splitlines()[-1]


@pytest.mark.parametrize("start, end, key, size", [
    (10**9, 10**9, "config.global_batch_size_end", "1,000,000,000"),
    (4, 2**62, "config.global_batch_size_end", "4,611,686,018,427,387,904"),
], ids=["a batch of 10**9", "a ramp to 2**62"])
def test_a_run_file_asking_billions_of_windows_a_step_is_one_line_naming_the_key(tmp_path, monkeypatch, start, end,
                                                                               key, size):
    """Issue 27 item 17: refused at once by the memory a step would take (review 27 finding 1 removed the bound by the
    data's windows, which refused valid runs)."""
    state = _run_files(tmp_path, start=start, end=end, warmup=10**18)
    line = _refused(state)  # this machine's own free memory
    assert line.startswith(f"Error: {state}: {key}: is {size} windows a step: "), line
    assert "of memory this process may use; make it at most " in line, line
    assert line.endswith(", or lower model.LLM.max_seq_len"), line
    monkeypatch.setattr("readers.tokenized.run_limits.available_memory", lambda: 1 << 30)
    assert _refused(state) == (f"Error: {state}: {key}: is {size} windows a step: {size} windows of 17 tokens take "
                               f"about {int(size.replace(',', '')) * 120_320 / (1 << 30):,.2f} GiB in a training step, "
                               "more than the 1.00 GiB of memory this process may use; make it at most 8,924, or "
                               "lower model.LLM.max_seq_len")


def test_a_run_file_whose_global_batch_is_larger_than_the_data_trains(tmp_path):
    """Review 27 finding 1: 200 tokens, seq_len 16 (12 windows), a batch of 32 trained at the base commit (a step
    wraps around the data) and was then refused: "is 32 windows a step, more than the 12 windows the data holds"."""
    state = _run_files(tmp_path, start=32, end=32, tokens=200)
    result = CliRunner().invoke(main, ["train", "--config", state, "--steps", "2"])
    assert result.exit_code == 0, result.output
    assert "12 windows of 16 tokens; 2 steps, global batch 32 windows" in result.output
    assert "step 2: loss " in result.output


def test_a_run_file_whose_steps_do_not_fit_in_memory_names_the_key_and_the_bound(tmp_path, monkeypatch):
    state = _run_files(tmp_path, start=4, end=4, seq_len=4096, tokens=20_000)  # 4 windows of 4,097 tokens
    monkeypatch.setattr("readers.tokenized.run_limits.available_memory", lambda: 64 << 20)
    assert _refused(state) == (f"Error: {state}: config.global_batch_size_end: is 4 windows a step: 4 windows of 4,097 "
                               "tokens take about 0.11 GiB in a training step, more than the 0.06 GiB of memory this "
                               "process may use; make it at most 2, or lower model.LLM.max_seq_len")
    monkeypatch.setattr("readers.tokenized.run_limits.available_memory", lambda: 16 << 20)
    assert _refused(state).startswith(f"Error: {state}: model.LLM.max_seq_len: is 4,096: one window of 4,097 tokens "
                                      "takes about 0.03 GiB in a training step, more than the 0.02 GiB")


def test_a_run_file_nested_past_the_parser_is_one_line(tmp_path):
    state = _run_files(tmp_path, timing="{a = " * 500 + "1" + "}" * 500)
    assert _refused(state) == (f"Error: {state}: config.warmup_time: line 7: nested more than 32 deep; a state.toml's "
                               "tables and arrays nest a few levels: write them flat")


#: The CLI in a child whose address space is limited to ``sys.argv[1]`` bytes (``ulimit -v``; less where the hard
#: limit is lower), given the rest as arguments.
LIMITED = ("import resource, runpy, sys\n"
           "hard = resource.getrlimit(resource.RLIMIT_AS)[1]\n"
           "soft = int(sys.argv[1]) if hard == resource.RLIM_INFINITY else min(int(sys.argv[1]), hard)\n"
           "resource.setrlimit(resource.RLIMIT_AS, (soft, hard))\n"
           "sys.argv = ['cli.py', *sys.argv[2:]]\n"
           "runpy.run_path('cli.py', run_name='__main__')\n")


@pytest.mark.parametrize("four_byte, more", [(True, ()), (False, ("--vocab-size", "3000000"))],
                         ids=["4-byte ids below 1,000,000", "--vocab-size 3000000"])
def test_a_vocabulary_past_the_address_space_limit_is_refused_in_one_line(tmp_path, four_byte, more):
    """Trial of issue 27, problem 2 (mended on main before this test: available_memory counts ulimit -v, and
    --vocab-size is checked too): under `ulimit -v 4000000`, 4-byte ids below 1,000,000 ended in a raw
    _ArrayMemoryError traceback after 10 s (the check weighed the machine's 22.0 GiB, not the process's limit), and
    `--vocab-size 3000000` went unchecked into a traceback."""
    state = _run_files(tmp_path)
    if four_byte:
        ids = np.random.default_rng(0).integers(0, 1_000_000, 20_000).astype("<u4")
        ids[7] = 999_999
        ids.tofile(tmp_path / "tokens" / "t.bin")
        data = tmp_path / "tokens" / "data.toml"
        data.write_text(data.read_text().replace('"TwoBytes"', '"FourBytes"'))
    with python_child("-c", LIMITED, 4_000_000 * 1024, "train", "--config", state, "--steps", "1", *more,
                      stderr=subprocess.STDOUT, text=True) as child:
        out = read_to_end(child.stdout, HANG * 6, "the refusal")
        child.wait(HANG)
    assert child.returncode == 1 and "Traceback" not in out and len(out.splitlines()) == 1, out
    vocab = "1,000,000" if four_byte else "3,000,000"
    said = (f'{tmp_path / "tokens" / "t.bin"}: read as 4-byte tokens (token_size = "FourBytes"), largest token id '
            f"999999 in the 20,000 tokens" if four_byte else "--vocab-size")
    assert re.fullmatch(rf"Error: {re.escape(said)}: a vocabulary of {vocab} ids, the model would take [\d.]+ GiB "
                        r"\(its parameters, Adam's moments and a step's gradients\), more than the [\d.]+ [GM]iB of "
                        r"memory available; .*\n", out), out
