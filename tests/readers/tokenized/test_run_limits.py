"""readers.tokenized.run_limits: a run's steps bounded by its data's windows and the memory this process may use.

Issue 27 item 17: a global batch of 10**9 over 1,220 windows spun for 39 s while RSS grew to 2.9 GB, a ramp to 2**62
ended in a MemoryError after 29 s, and seq_len = 150000 in a 1.14 GiB MemoryError traceback.
"""
import subprocess
from types import SimpleNamespace

import pytest

from readers.tokenized.run_limits import available_memory, check_run
from readers.tokenized.runfile_fields import RunFileError
from tests.conftest import HANG
from tests.helpers.child_processes import python_child, read_to_end

GIB = 1 << 30


def _run(start, end, seq_len=2048):
    return SimpleNamespace(batch_start=start, batch_end=end, seq_len=seq_len)


@pytest.mark.parametrize("start, end, key, size", [
    (8, 10**9, "config.global_batch_size_end", "1,000,000,000"),
    (8, 2**62, "config.global_batch_size_end", "4,611,686,018,427,387,904"),
    (2000, 8, "config.global_batch_size_start", "2,000"),
    (2000, 2000, "config.global_batch_size_end", "2,000"),
], ids=["a batch of 10**9", "a ramp to 2**62", "a ramp down from too many", "a tie names the end"])
def test_a_step_reads_no_more_windows_than_the_data_holds(start, end, key, size):
    with pytest.raises(RunFileError) as caught:
        check_run(_run(start, end), "state.toml", windows=1220, window_bytes=1, memory=GIB)
    assert str(caught.value) == (f"state.toml: {key}: is {size} windows a step, more than the 1,220 windows the data "
                                 "holds (a step reads each window once at most); make it at most 1,220, or give the "
                                 "run more data")
    assert caught.value.key == key


def test_a_window_too_large_for_memory_names_the_sequence_length():
    with pytest.raises(RunFileError) as caught:
        check_run(_run(4, 4, seq_len=150_000), "state.toml", windows=100, window_bytes=150_000 * 7520, memory=GIB)
    assert str(caught.value) == ("state.toml: model.LLM.max_seq_len: is 150,000: one window of 150,001 tokens takes "
                                 "about 1.05 GiB in a training step, more than the 1.00 GiB of memory this process may "
                                 "use; lower it to at most 142,784")


def test_a_batch_too_large_for_memory_names_the_larger_batch_key_and_how_many_fit():
    with pytest.raises(RunFileError) as caught:
        check_run(_run(8, 300), "state.toml", windows=10**6, window_bytes=GIB // 100, memory=GIB)
    assert str(caught.value) == ("state.toml: config.global_batch_size_end: is 300 windows a step: 300 windows of 2,049 "
                                 "tokens take about 3.00 GiB in a training step, more than the 1.00 GiB of memory this "
                                 "process may use; make it at most 100, or lower model.LLM.max_seq_len")
    check_run(_run(8, 300), "state.toml", windows=10**6, window_bytes=GIB // 100, memory=GIB, world_size=3)
    with pytest.raises(RunFileError, match=r"is 301 windows a step: 101 windows .* on each of 3 processes, .*; make "
                                           r"it at most 300, or lower"):
        check_run(_run(8, 301), "state.toml", windows=10**6, window_bytes=GIB // 100, memory=GIB, world_size=3)


def test_a_run_within_its_bounds_passes_and_no_known_memory_bounds_by_data_alone(monkeypatch):
    check_run(_run(8, 16), "state.toml", windows=16, window_bytes=GIB // 16, memory=GIB)
    monkeypatch.setattr("readers.tokenized.run_limits.available_memory", lambda: None)
    check_run(_run(8, 16), "state.toml", windows=16, window_bytes=10 * GIB)


def skip_without_memory(needed: int) -> None:
    """Skip a test that needs ``needed`` bytes free in this machine and cgroup (review of issue 27, finding 8)."""
    room = available_memory()
    if room is None or room < needed:
        pytest.skip(f"needs {needed >> 20} MiB free, and this process may use {room and room >> 20} MiB now")


def test_available_memory_counts_the_address_space_limit():
    """ulimit -v bounds what a process may allocate, whatever the machine holds."""
    skip_without_memory(400 << 20)  # the child's 200 MiB above what it maps, with room to spare
    code = ("import resource\n"
            "from readers.tokenized.run_limits import available_memory, _proc_kib\n"
            "mapped = _proc_kib('/proc/self/status', 'VmSize')\n"
            "resource.setrlimit(resource.RLIMIT_AS, (mapped + (200 << 20), resource.RLIM_INFINITY))\n"
            "print(available_memory() <= 200 << 20, available_memory() > 100 << 20)\n")
    with python_child("-c", code, stderr=subprocess.STDOUT) as child:
        out = read_to_end(child.stdout, HANG * 3, "the child's answer")
    assert out == "True True\n"
    assert available_memory() > 0
