"""readers.tokenized.run_limits: a run's steps bounded by the memory this process may use.

Issue 27 item 17: a global batch of 10**9 over 1,220 windows spun for 39 s while RSS grew to 2.9 GB, a ramp to 2**62
ended in a MemoryError after 29 s, and seq_len = 150000 in a 1.14 GiB MemoryError traceback.
"""
import subprocess
from types import SimpleNamespace

import pytest

from readers.tokenized import run_limits
from readers.tokenized.run_limits import available_memory, check_run
from readers.tokenized.runfile_fields import RunFileError
from tests.conftest import HANG
from tests.helpers.child_processes import python_child, read_to_end

GIB = 1 << 30


def _run(start, end, seq_len=2048):
    return SimpleNamespace(batch_start=start, batch_end=end, seq_len=seq_len)


@pytest.mark.parametrize("start, end, key, size, most", [
    (8, 10**9, "config.global_batch_size_end", "1,000,000,000", "524,032"),
    (8, 2**62, "config.global_batch_size_end", "4,611,686,018,427,387,904", "524,032"),
    (10**9, 8, "config.global_batch_size_start", "1,000,000,000", "524,032"),
], ids=["a batch of 10**9", "a ramp to 2**62", "a ramp down from 10**9"])
def test_a_batch_of_billions_is_refused_by_the_memory_it_takes(start, end, key, size, most):
    """Issue 27 item 17, kept when the windows bound went (review 27 finding 1): the memory bound refuses these."""
    with pytest.raises(RunFileError) as caught:
        check_run(_run(start, end), "state.toml", window_bytes=2049, memory=GIB)
    assert str(caught.value).startswith(f"state.toml: {key}: is {size} windows a step: {size} windows of 2,049 tokens "
                                        "take about ")
    assert str(caught.value).endswith(f"GiB in a training step, more than the 1.00 GiB of memory this process may "
                                      f"use; make it at most {most}, or lower model.LLM.max_seq_len")
    assert caught.value.key == key


def test_a_batch_larger_than_the_data_is_not_refused():
    """Review 27 finding 1: a step wraps around the data (sample p is entry p % N), so 32 windows a step over 12
    windows is a valid run; check_run refused it as more windows than the data holds."""
    check_run(_run(32, 32, seq_len=16), "state.toml", window_bytes=17, memory=GIB)


def test_a_window_too_large_for_memory_names_the_sequence_length():
    with pytest.raises(RunFileError) as caught:
        check_run(_run(4, 4, seq_len=150_000), "state.toml", window_bytes=150_000 * 7520, memory=GIB)
    assert str(caught.value) == ("state.toml: model.LLM.max_seq_len: is 150,000: one window of 150,001 tokens takes "
                                 "about 1.05 GiB in a training step, more than the 1.00 GiB of memory this process may "
                                 "use; lower it to at most 142,784")


def test_a_batch_too_large_for_memory_names_the_larger_batch_key_and_how_many_fit():
    with pytest.raises(RunFileError) as caught:
        check_run(_run(8, 300), "state.toml", window_bytes=GIB // 100, memory=GIB)
    assert str(caught.value) == ("state.toml: config.global_batch_size_end: is 300 windows a step: 300 windows of 2,049 "
                                 "tokens take about 3.00 GiB in a training step, more than the 1.00 GiB of memory this "
                                 "process may use; make it at most 100, or lower model.LLM.max_seq_len")
    check_run(_run(8, 300), "state.toml", window_bytes=GIB // 100, memory=GIB, world_size=3)
    with pytest.raises(RunFileError, match=r"is 301 windows a step: 101 windows .* on each of 3 processes, .*; make "
                                           r"it at most 300, or lower"):
        check_run(_run(8, 301), "state.toml", window_bytes=GIB // 100, memory=GIB, world_size=3)


def test_a_run_within_its_bounds_passes_and_no_known_memory_sets_no_bound(monkeypatch):
    check_run(_run(8, 16), "state.toml", window_bytes=GIB // 16, memory=GIB)
    monkeypatch.setattr("readers.tokenized.run_limits.available_memory", lambda: None)
    check_run(_run(8, 16), "state.toml", window_bytes=10 * GIB)


def skip_without_memory(needed: int) -> None:
    """Skip a test that needs ``needed`` bytes free in this machine and cgroup (review of issue 27, finding 8)."""
    room = available_memory()
    if room is None or room < needed:
        pytest.skip(f"needs {needed >> 20} MiB free, and this process may use {room and room >> 20} MiB now")


def test_available_memory_counts_the_address_space_limit():
    """ulimit -v bounds what a process may allocate, whatever the machine holds."""
    skip_without_memory(400 << 20)  # the child's 200 MiB above what it maps, with room to spare
    code = ("import resource\n"
            "from readers.tokenized import run_limits\n"
            "from readers.tokenized.run_limits import available_memory, _proc_kib\n"
            "run_limits._cgroup_room = lambda: None\n"  # the limit alone, whatever this machine has free
            "run_limits._proc_kib = lambda p, f: 1 << 40 if f == 'MemAvailable' else _proc_kib(p, f)\n"
            "mapped = _proc_kib('/proc/self/status', 'VmSize')\n"
            "resource.setrlimit(resource.RLIMIT_AS, (mapped + (200 << 20), resource.RLIM_INFINITY))\n"
            "print(available_memory() <= 200 << 20, available_memory() > 100 << 20)\n")
    with python_child("-c", code, stderr=subprocess.STDOUT) as child:
        out = read_to_end(child.stdout, HANG * 3, "the child's answer")
    assert out == "True True\n"


def _cgroup_files(root, proc, group, files):
    """Fixture files standing for /sys/fs/cgroup (``root``) and /proc/self/cgroup (``proc``)."""
    (root / group.strip("/")).mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / group.strip("/") / name).write_text(text + "\n")
    return str(root), str(proc)


@pytest.mark.parametrize("cgroup, group, files", [
    ("0::/job\n", "job", {"memory.max": str(4 * GIB), "memory.current": str(3 * GIB),
                           "memory.stat": f"anon {GIB}\nfile {2 * GIB}\ninactive_file {2 * GIB}\nactive_file 0"}),
    ("12:pids:/\n4:cpu,memory:/job\n", "memory/job",
     {"memory.limit_in_bytes": str(4 * GIB), "memory.usage_in_bytes": str(3 * GIB),
      "memory.stat": f"cache {2 * GIB}\ninactive_file 1\ntotal_cache {2 * GIB}\ntotal_inactive_file {2 * GIB}"}),
], ids=["cgroup v2", "cgroup v1"])
def test_the_cgroup_room_does_not_count_inactive_page_cache_as_used(tmp_path, cgroup, group, files):
    """Review 27 finding 4: limit - usage counted the page cache of a corpus just read as used (4.47 GB of usage,
    2.5 GB of it cache), and check_run refused valid runs in a container; the working set is usage - inactive_file."""
    (tmp_path / "cgroup").write_text(cgroup)
    root, proc = _cgroup_files(tmp_path / "fs", tmp_path / "cgroup", group, files)
    assert run_limits._cgroup_room(root, proc) == 3 * GIB  # 4 GiB - (3 GiB used - 2 GiB inactive cache)


def test_the_cgroup_room_reads_the_root_inside_a_container_and_no_limit_is_none(tmp_path):
    (tmp_path / "cgroup").write_text("0::/kubepods/pod1\n")  # the group's own folder is the mount's root
    root, proc = _cgroup_files(tmp_path / "fs", tmp_path / "cgroup", "/", {
        "memory.max": str(GIB), "memory.current": str(GIB // 2), "memory.stat": "inactive_file 0"})
    assert run_limits._cgroup_room(root, proc) == GIB // 2
    (tmp_path / "fs" / "memory.max").write_text("max\n")
    assert run_limits._cgroup_room(root, proc) is None


def test_available_memory_is_the_cgroup_room_shared_by_the_local_processes(monkeypatch):
    """Review 27 finding 4: n ranks on one machine share its memory; each may use 1/n of it."""
    monkeypatch.setattr(run_limits, "_proc_kib", lambda path, field: 64 * GIB if field == "MemAvailable" else None)
    monkeypatch.setattr(run_limits, "_cgroup_room", lambda: 8 * GIB)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"):
        monkeypatch.delenv(name, raising=False)
    if available_memory() != 8 * GIB:
        pytest.skip("this process has an address-space limit (ulimit -v) below 8 GiB")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert available_memory() == 2 * GIB
