"""Several `python cli.py serve` processes behind one readers.remote (issue 30, section 3).

Three servers on 127.0.0.1 (port 0) serve one small token corpus; a pass reads
through shuffle, a shard 3 ways and process workers, and must equal the same
pass over the local windows while servers are SIGKILLed, restarted, or hold
parts of the data.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import batching
import readers
from readers.errors import BadValue
from readers.network.multi_server import MAX_BACKOFF
from tests.helpers import paths as _paths
from tests.test_cli_serve import START, Process

ANNOUNCED = re.compile(r"serving (\d+) entries on 127\.0\.0\.1:(\d+)")
WINDOWS, SEED = 1500, 11
TIMEOUT = 5.0  # the readers' request timeout (seconds)
HAS_PARTS = importlib.util.find_spec("readers.network.parts") is not None  # serve --part (branch i30srv)


def _announced(process: Process) -> Process:
    line = process.first_line(START)
    found = ANNOUNCED.match(line)
    assert found, f"first line {line!r}; stderr: {process.stderr()}"
    process.entries, process.port = int(found[1]), int(found[2])
    return process


@contextlib.contextmanager
def servers(folder: Path, *argss: list[str]) -> Iterator[list[Process]]:
    """One server process for each list of options, started together, each announced before it is handed out."""
    started = []
    try:
        for args in argss:
            started.append(Process([*args] if "--port" in args else ["--port", "0", *args], folder))
        yield [_announced(p) for p in started]
    finally:
        for p in started:
            p.kill()


@pytest.fixture
def corpus(tmp_path) -> tuple[str, readers.IndexedReader]:
    """A data.toml of one token file (WINDOWS windows of 4 tokens and the next), and the same windows read locally."""
    (tmp_path / "tokens").mkdir()
    (np.arange(WINDOWS * 4 + 1) % 50_000).astype("<u2").tofile(tmp_path / "tokens" / "a.bin")
    config = tmp_path / "data.toml"
    config.write_text('dir = "tokens"\ntoken_size = "TwoBytes"\nseq_len = 4\n')
    return str(config), readers.tokens(tmp_path / "tokens", seq_len=4)


def _pass(reader, *, workers: bool = True) -> list[list[list[int]]]:
    """One pass through shuffle and a shard 3 ways (each through 2 process workers), as lists."""
    shards = []
    for k in range(3):
        pipe = readers.shard(readers.shuffle(reader, seed=SEED), k, 3)
        if workers:
            pipe = readers.prefetch(pipe, workers=2, mode="process")
        shards.append([np.asarray(w).tolist() for w in pipe()])
    return shards


def _remote(procs: list[Process], **options) -> readers.IndexedReader:
    return readers.remote([p.address for p in procs], timeout=TIMEOUT, deadline=30.0, request_bytes=256, **options)


def test_cli_serve_three_replicas_one_killed_mid_pass(tmp_path, corpus):
    """Issue 30: SIGKILL one server mid-pass: the pass equals the local pass, within the request timeout plus the
    back-off (with a generous margin for this machine)."""
    config, local = corpus
    expected = _pass(local, workers=False)
    with servers(tmp_path, *[["--config", config]] * 3) as procs:
        remote = _remote(procs)
        started, got = time.monotonic(), []
        for k in range(3):
            pipe = readers.prefetch(readers.shard(readers.shuffle(remote, seed=SEED), k, 3), workers=2, mode="process")
            shard = []
            for window in pipe():
                shard.append(np.asarray(window).tolist())
                if k == 0 and len(shard) == 100:
                    procs[1].proc.send_signal(signal.SIGKILL)
                    procs[1].proc.wait(10)
            got.append(shard)
        took = time.monotonic() - started
    assert got == expected
    assert took < TIMEOUT + MAX_BACKOFF + 60.0, took


def test_cli_serve_two_of_three_killed_then_restarted(tmp_path, corpus):
    """Issue 30: SIGKILL two of three: the third carries the pass; restarted on their ports, they rejoin."""
    config, local = corpus
    expected = _pass(local, workers=False)
    with servers(tmp_path, *[["--config", config]] * 3) as procs:
        remote = _remote(procs)
        got = []
        for k in range(3):
            shard = []
            for window in readers.shard(readers.shuffle(remote, seed=SEED), k, 3)():
                shard.append(np.asarray(window).tolist())
                if k == 1 and len(shard) == 50:
                    for p in (procs[0], procs[2]):
                        p.proc.send_signal(signal.SIGKILL)
                        p.proc.wait(10)
            got.append(shard)
        assert got == expected
        stats = remote.stats()["servers"]
        assert stats[procs[0].address]["failures"] >= 1 and stats[procs[2].address]["failures"] >= 1, stats
        before = {a: s["requests"] for a, s in stats.items()}
        again = [["--config", config, "--port", str(p.port)] for p in (procs[0], procs[2])]
        with servers(tmp_path, *again) as back:
            assert [b.port for b in back] == [procs[0].port, procs[2].port]
            rejoined, until = False, time.monotonic() + 4 * MAX_BACKOFF + 10.0
            while not rejoined and time.monotonic() < until:
                assert _pass(remote, workers=False) == expected
                now = remote.stats()["servers"]
                rejoined = all(now[p.address]["requests"] > before[p.address] for p in (procs[0], procs[2]))
            assert rejoined, remote.stats()
        assert _pass(remote) == expected  # the workers' pass, with all three back


@pytest.mark.skipif(not HAS_PARTS, reason="serve --part comes with branch i30srv")
@pytest.mark.parametrize("parts", [["1/3", "2/3", "3/3"], ["1/2", "1/2", "2/2"]], ids=["parts", "with-replicas"])
def test_cli_serve_parts(tmp_path, corpus, parts):
    """Issue 30: parts, with and without replicas: each index goes to a server that holds it."""
    config, local = corpus
    with servers(tmp_path, *[["--config", config, "--part", part] for part in parts]) as procs:
        remote = _remote(procs)
        assert _pass(remote) == _pass(local, workers=False)
        if parts[0] == parts[1]:  # the replica of 1/2 goes: the other holds the part
            procs[0].proc.send_signal(signal.SIGKILL)
            procs[0].proc.wait(10)
            assert _pass(remote, workers=False) == _pass(local, workers=False)


@pytest.mark.skipif(not HAS_PARTS, reason="serve --part comes with branch i30srv")
def test_cli_serve_parts_that_leave_a_gap_are_refused(tmp_path, corpus):
    config, _ = corpus
    with servers(tmp_path, ["--config", config, "--part", "1/3"], ["--config", config, "--part", "3/3"]) as procs:
        with pytest.raises(BadValue, match=r"no server holds entries \[500, 1000\) of 1,500"):
            _remote(procs)


def test_cli_serve_a_replica_of_other_data_is_refused(tmp_path, corpus):
    """Issue 30: a replica serving other data is refused at the start, naming both servers."""
    config, _ = corpus
    (tmp_path / "other").mkdir()
    (np.arange(WINDOWS * 4 + 1) % 50_000 + 1).astype("<u2").tofile(tmp_path / "other" / "a.bin")
    other = tmp_path / "other.toml"
    other.write_text('dir = "other"\ntoken_size = "TwoBytes"\nseq_len = 4\n')
    with servers(tmp_path, ["--config", config], ["--config", str(other)]) as procs:
        with pytest.raises(BadValue, match=f"{procs[0].address} and {procs[1].address} both hold entries "
                                           rf"\[0, {WINDOWS}\) but serve other data"):
            _remote(procs)


def test_cli_serve_torchrun_round_over_two_servers(tmp_path, corpus):
    """Issue 30: a round of the coordinator under torchrun, two ranks, two servers: each round's batch read once."""
    torch = pytest.importorskip("torch")
    if not torch.distributed.is_available():
        pytest.skip("this torch build has no torch.distributed")
    from readers.tokenized.schedule import BatchSchedule
    from tests.helpers.remote_job import SCHEDULE, ids_of
    from tests.helpers.torchrun_job import run_torchrun

    config, local = corpus
    steps, seed, out = 8, 5, tmp_path / "result"
    with servers(tmp_path, ["--config", config], ["--config", config]) as procs:
        done = run_torchrun(str(_paths.ROOT / "tests" / "helpers" / "remote_job.py"), "--address",
                            ",".join(p.address for p in procs), "--out", out, "--steps", steps, "--seed", seed,
                            timeout=120, log_dir=str(tmp_path / "torchrun-logs"))
    assert done.returncode == 0, done.stdout + done.stderr
    results = [json.loads((tmp_path / f"result.{rank}.json").read_text()) for rank in range(2)]
    schedule = BatchSchedule(**SCHEDULE)
    for step in range(steps):
        assignment = results[0]["rounds"][step]["assignment"]
        read = {rank: results[rank]["rounds"][step]["ids"] for rank in range(2)}
        together = [w for client, _ in assignment for w in read[client]]
        lo, size = schedule.data_index(step), schedule.batch_size(step)
        whole = readers.round_share(readers.shuffle(local, seed=seed), {"all": (lo, lo + size - 1)}, "all")
        assert together == ids_of(next(iter(batching.collated(batching.batch(whole, size))()))), f"step {step}"
