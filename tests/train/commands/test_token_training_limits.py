"""`cli.py train --config state.toml` refuses, in one line and at once, a run its data or memory cannot hold.

Issue 27 item 17: hostile run files ran for 30-40 s and ended in tracebacks: a global batch of 10**9 over 1,220
windows, a ramp to 2**62, seq_len = 150000 (a MemoryError), 500 nested inline tables (a RecursionError).
"""
import numpy as np
import pytest
from click.testing import CliRunner

from cli import main

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
    (2000, 2000, "config.global_batch_size_end", "2,000"),
    (4, 2**62, "config.global_batch_size_end", "4,611,686,018,427,387,904"),
], ids=["a batch over more windows than the data holds", "a ramp to 2**62"])
def test_a_run_file_asking_more_windows_a_step_than_the_data_holds_is_one_line(tmp_path, start, end, key, size):
    state = _run_files(tmp_path, start=start, end=end, warmup=10**18)
    assert _refused(state) == (f"Error: {state}: {key}: is {size} windows a step, more than the 69 windows the data "
                               "holds (a step reads each window once at most); make it at most 69, or give the run "
                               "more data")


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
    assert _refused(state) == (f"Error: {state}: config.warmup_time: line 7: nested more than 32 deep; a run file's "
                               "tables and arrays nest a few levels: write them flat")
