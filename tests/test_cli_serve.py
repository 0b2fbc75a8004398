"""`python cli.py serve` as its own process: the announcement, signals, restarts, refusals and secrets."""
from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import readers
from readers.sources import mnist
from readers.tokenized.windows import Tokens
from tests.conftest import HANG
from tests.helpers.addresses import bind_fails, not_this_machines
from tests.helpers.child_processes import read_line, start_python, stop
from tests.helpers.paths import SHARED_DATA
from tests.readers.network.test_server import CANNOT_LISTEN

MNIST = SHARED_DATA / "mnist"
# a server of a part (issue 30) goes on: ": part K/N, entries [START, STOP) of TOTAL, part_digest HEX" (no "part K/N, "
# for --range), and its N is the entries it holds
ANNOUNCED = re.compile(r"serving (\d+) entries on 127\.0\.0\.1:(\d+)"
                       r"(?:: (?:part (\d+)/(\d+), )?entries \[(\d+), (\d+)\) of (\d+), part_digest ([0-9a-f]{32}))?")
START = 30.0  # seconds: the most a server process may take to import, load its data and listen


class Process:
    """A server process, its announced port and entries, and its standard error (a file, so it never fills)."""

    def __init__(self, args: list[str], folder: Path):
        self.err = folder / f"stderr-{time.monotonic_ns()}.txt"
        env = {k: v for k, v in os.environ.items() if k != "READERKIT_SECRET"}
        with open(self.err, "wb") as err:
            self.proc = start_python("cli.py", "serve", *args, env=env, stderr=err, text=True)
        self.entries = self.port = None
        self.part = self.total = self.part_digest = None  # (start, stop), the whole length and the digest of a part

    def first_line(self, timeout: float = START) -> str:
        try:
            return read_line(self.proc.stdout, timeout, "the server's first line").rstrip("\n")
        except AssertionError as exc:
            pytest.fail(f"{exc}; stderr: {self.stderr()}")

    def announced(self) -> Process:
        line = self.first_line()
        found = ANNOUNCED.fullmatch(line)
        assert found, f"first line {line!r}; stderr: {self.stderr()}"
        self.entries, self.port = int(found[1]), int(found[2])
        assert self.port > 0
        if found[5] is not None:
            self.part, self.total, self.part_digest = (int(found[5]), int(found[6])), int(found[7]), found[8]
            assert self.entries == self.part[1] - self.part[0]
        return self

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self, signum: int = signal.SIGTERM) -> int:
        self.proc.send_signal(signum)
        return self.proc.wait(HANG)

    def stderr(self) -> str:
        return self.err.read_text() if self.err.exists() else ""

    def kill(self) -> None:
        stop(self.proc)


@contextlib.contextmanager
def cli_serve(folder: Path, *args: str) -> Iterator[Process]:
    process = Process(["--port", "0", *args], folder)
    try:
        yield process
    finally:
        process.kill()


@pytest.fixture
def token_config(tmp_path) -> tuple[str, Tokens]:
    """A data.toml of one token file (windows of 5 tokens), and the reader of the same windows."""
    (tmp_path / "tokens").mkdir()
    (np.arange(1000, 1201, dtype="<u2")).tofile(tmp_path / "tokens" / "a.bin")
    config = tmp_path / "data.toml"
    config.write_text('dir = "tokens"\ntoken_size = "TwoBytes"\nseq_len = 4\n')
    return str(config), readers.tokens(tmp_path / "tokens", seq_len=4)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_cli_serve_announces_serves_and_stops_on_a_signal(tmp_path, token_config, signum):
    config, local = token_config
    with cli_serve(tmp_path, "--config", config) as server:
        server.announced()
        assert server.entries == len(local) == 50
        remote = readers.remote(server.address)
        assert remote.info["seq_len"] == 4 and remote.info["token_size"] == 2
        got = remote.gather_columns(np.arange(len(local)))
        np.testing.assert_array_equal(got, np.stack([local[i] for i in range(len(local))]))
        assert server.stop(signum) == 0, server.stderr()
        out = server.proc.stdout.read()
    assert out == "", "nothing more on standard output after the announcement"
    stopped = [line for line in server.stderr().splitlines() if line.startswith("stopped:")]
    assert len(stopped) == 1 and re.fullmatch(r"stopped: 1 connections, 1 requests, [\d,]+ bytes of entries sent",
                                              stopped[0]), server.stderr()


def test_cli_serve_restarts_on_the_same_port_at_once(tmp_path, token_config):
    config, local = token_config
    with cli_serve(tmp_path, "--config", config) as first:
        first.announced()
        held = readers.remote(first.address)  # a connection the server closes first: its end waits in TIME_WAIT
        held.gather_columns(np.arange(3))
        assert first.stop() == 0
    with cli_serve(tmp_path, "--config", config, "--port", str(first.port)) as second:
        assert second.announced().port == first.port, second.stderr()
        assert int(readers.remote(second.address)[2][0]) == int(local[2][0])
        assert int(held[2][0]) == int(local[2][0])  # the held reader reconnects to the new server
        assert second.stop() == 0


def test_cli_serve_refuses_a_reachable_host_without_a_secret(tmp_path, token_config):
    with cli_serve(tmp_path, "--config", token_config[0], "--host", "0.0.0.0") as server:
        assert server.proc.wait(START) != 0
        assert server.proc.stdout.read() == ""
        assert "refusing to serve on 0.0.0.0, which other machines can reach, without a secret" in server.stderr()


def test_cli_serve_with_a_secret_file_serves_only_clients_that_know_it(tmp_path, token_config):
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    with cli_serve(tmp_path, "--config", token_config[0], "--secret-file", str(secret)) as server:
        server.announced()
        assert int(readers.remote(server.address, secret="s3cret")[1][0]) == 1004
        with pytest.raises(readers.NotAuthorised, match="wants a secret"):
            readers.remote(server.address)
        with pytest.raises(readers.NotAuthorised, match="does not match this server's secret"):
            readers.remote(server.address, secret="guess")
        assert server.stop() == 0


@pytest.mark.skipif(not MNIST.is_dir(), reason=f"the shared MNIST files are not there ({MNIST})")
def test_cli_serve_mnist_from_a_data_dir(tmp_path):
    with cli_serve(tmp_path, "--reader", "mnist", "--data-dir", str(MNIST), "--no-download", "--split", "test") as server:
        assert server.announced().entries == 10_000
        remote = readers.remote(server.address)
        local = mnist.test(str(MNIST), download=False)
        images, labels = remote.gather_columns(np.array([0, 9_999, 17]))
        for k, i in enumerate([0, 9_999, 17]):
            np.testing.assert_array_equal(images[k], local[i][0])
            assert int(labels[k]) == local[i][1]
        assert server.stop() == 0


def test_cli_serve_refuses_reader_options_with_a_config_and_names_a_port_in_use(token_config):
    import socket

    from click.testing import CliRunner

    import cli

    config, _ = token_config
    mixed = CliRunner().invoke(cli.main, ["serve", "--config", config, "--split", "test"])
    assert mixed.exit_code == 2 and "--split does not apply with --config" in mixed.output
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        busy = CliRunner().invoke(cli.main, ["serve", "--config", config, "--port", str(port)])
    assert busy.exit_code == 1
    assert busy.output.splitlines() == [f"Error: 127.0.0.1:{port} is in use (another server?): stop it, or give another "
                                        "port (0 picks a free one)"]


def test_cli_serve_given_a_state_toml_says_it_is_a_run_file_and_names_its_data_toml(tmp_path, token_config):
    from click.testing import CliRunner

    import cli

    config, _ = token_config
    state = tmp_path / "state.toml"
    state.write_text("[config]\ntotal_steps = 10\n[model.LLM]\nmax_seq_len = 4\n"
                     '[model.LLM.data_location]\nLocal = "."\n')
    result = CliRunner().invoke(cli.main, ["serve", "--config", str(state), "--port", "0"])
    # before: "Error: .../state.toml: config: unknown key 'config'; remove it, or use one of: dir, token_size, ..."
    assert result.exit_code == 1 and result.output.splitlines() == [
        f"Error: {state}: this is a run file (state.toml, with [config] and [model.LLM]), but serve --config expects "
        f"a token folder's data.toml (dir, token_size, seq_len); this run's tokens are described by {config}: "
        "give that file"]


def test_cli_serve_refuses_four_byte_tokens_read_as_two_bytes_before_it_listens(tmp_path):
    """Issue 27: tokens read with the wrong token size are refused where they are read, a server included."""
    from click.testing import CliRunner

    import cli
    (tmp_path / "tokens").mkdir()
    np.arange(1, 200, dtype="<u4").tofile(tmp_path / "tokens" / "t.bin")
    (tmp_path / "data.toml").write_text('dir = "tokens"\ntoken_size = "TwoBytes"\nseq_len = 4\n')
    result = CliRunner().invoke(cli.main, ["serve", "--config", str(tmp_path / "data.toml"), "--port", "0"])
    assert result.exit_code == 1 and "serving" not in result.output, result.output
    assert result.output.startswith(f"Error: {tmp_path / 'tokens' / 't.bin'}: read as 2-byte tokens")
    assert "probably 4-byte tokens" in result.output


def test_cli_serve_names_a_host_that_is_not_this_machines(token_config, monkeypatch):
    """Regression (issue 27, item 9c): --host 10.255.255.1 gave a raw "[Errno 99] Cannot assign requested address".
    The bind is made to fail: with net.ipv4.ip_nonlocal_bind=1 a machine binds 192.0.2.1 (review, finding 8)."""
    from click.testing import CliRunner

    import cli

    not_this_machines(monkeypatch, "192.0.2.1")
    result = CliRunner().invoke(cli.main, ["serve", "--config", token_config[0], "--host", "192.0.2.1", "--port",
                                           "20001"], env={"READERKIT_SECRET": "s3cret"})
    assert result.exit_code == 1 and result.output.splitlines() == [
        "Error: cannot listen on 192.0.2.1:20001: no network interface of this machine has the address 192.0.2.1; "
        "give one it has (`ip addr` lists them), 0.0.0.0 for all of them, or 127.0.0.1"]


@pytest.mark.parametrize("case", CANNOT_LISTEN)
def test_cli_serve_names_an_address_it_cannot_listen_on_in_one_line(token_config, monkeypatch, case):
    """Regression (trial of issue 27, problem 5): `serve --host nosuch.invalid --secret-file sec` printed an 11-frame
    traceback ending "OSError: [Errno -2] Name or service not known", and a port below 1024 a raw EACCES."""
    from click.testing import CliRunner

    import cli

    error, host, port, message = CANNOT_LISTEN[case]
    bind_fails(monkeypatch, error, host=host, port=port)
    result = CliRunner().invoke(cli.main, ["serve", "--config", token_config[0], "--host", host, "--port", str(port)],
                                env={"READERKIT_SECRET": "s3cret"})
    assert result.exit_code == 1 and result.output.splitlines() == [f"Error: {message}"]


def test_cli_serve_gives_the_server_its_timeouts(token_config, monkeypatch):
    """Regression (issue 27, item 15): frame_timeout (60 s), the other timeouts and the budget could not be set from the
    command line."""
    from click.testing import CliRunner

    import cli
    import readers.network.server

    started = []
    monkeypatch.setattr(readers.network.server, "run_until_signal",
                        lambda server, host, port, announce: started.append(server))
    result = CliRunner().invoke(cli.main, ["serve", "--config", token_config[0], "--frame-timeout", "2.5",
                                           "--idle-timeout", "30", "--handshake-timeout", "1", "--drain-timeout", "4",
                                           "--budget-mib", "64", "--max-clients", "32"])
    assert result.exit_code == 0, result.output
    server, = started
    assert (server.frame_timeout, server.idle_timeout, server.handshake_timeout, server.drain_timeout) == (2.5, 30, 1, 4)
    assert (server.budget, server.max_clients, server.reserve) == (64 << 20, 32, 1 << 20)
    shown = CliRunner().invoke(cli.main, ["serve", "--help"]).output
    for option in ("--idle-timeout", "--frame-timeout", "--handshake-timeout", "--drain-timeout", "--budget-mib",
                   "--max-clients"):
        assert f"  {option} " in shown, option
    bad = CliRunner().invoke(cli.main, ["serve", "--config", token_config[0], "--frame-timeout", "0"])
    assert bad.exit_code == 2 and "Invalid value for '--frame-timeout': 0.0 is not in the range x>0." in bad.output


@pytest.mark.parametrize("recorded", [True, False], ids=["vocab_size recorded", "no vocab_size"])
def test_cli_serve_config_reads_the_whole_corpus_only_without_a_recorded_vocab_size(token_config, monkeypatch,
                                                                                       recorded):
    """Review 27 finding 10: serve --config read every token for max_token() at startup even when the data.toml
    records vocab_size, while clients wait 5 s for a first connection: a launcher starting both failed."""
    import cli
    config, _ = token_config
    if recorded:
        with open(config, "a") as f:
            f.write("vocab_size = 1300\n")
    scans = []
    real = Tokens.largest_token
    monkeypatch.setattr(Tokens, "largest_token", lambda self: scans.append(self) or real(self))
    with cli.serve.make_context("serve", ["--config", config]):
        served, info = cli._served(None, None, False, config, "train")
    assert len(scans) == (0 if recorded else 1)
    assert (info["vocab_size"], info["max_token"]) == ((1300, None) if recorded else (None, 1200))
    assert len(served) == 50 and served[49].tolist() == list(range(1196, 1201))


NOT_UTF8 = os.fsdecode(b"s3cret\xff")  # a READERKIT_SECRET of bytes that are not UTF-8, as Python reads it


def test_cli_serve_and_train_refuse_a_secret_that_is_not_utf8_in_one_line(tmp_path, token_config):
    """Regression (trial of issue 27, problem 6): READERKIT_SECRET=$'s3cret\\xff' gave a raw "UnicodeEncodeError:
    'utf-8' codec can't encode character '\\udcff'" on the client. Now both ends refuse it at once, in one line that
    shows nothing of the secret."""
    from click.testing import CliRunner

    import cli
    from tests.train.commands.test_token_training import STATE

    state = tmp_path / "state.toml"
    state.write_text(STATE.format(location='Server = "127.0.0.1:9"'))  # (refused before any connection)
    for args in (["serve", "--config", token_config[0], "--port", "0"], ["train", "--config", str(state)]):
        result = CliRunner().invoke(cli.main, args, env={"READERKIT_SECRET": NOT_UTF8})
        assert result.exit_code == 1 and len(result.output.splitlines()) == 1, (args, result.output)
        assert ("$READERKIT_SECRET is not text that UTF-8 can encode (it holds bytes that are not UTF-8): the secret "
                "must be UTF-8 text; set READERKIT_SECRET to UTF-8 text on the server and the clients") in result.output
        assert result.output.startswith("Error: ") and "s3cret" not in result.output, (args, result.output)


def test_cli_serve_a_format_reader_from_data(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "rows.parquet"
    rows = np.arange(50 * 3, dtype=np.float32).reshape(50, 3)
    pq.write_table(pa.table({"x": list(rows), "label": np.arange(50) % 3}), path, row_group_size=16)
    with cli_serve(tmp_path, "--reader", "parquet", "--data", str(path), "--columns", "x,label") as server:
        assert server.announced().entries == 50
        x, labels = readers.remote(server.address).gather_columns(np.array([0, 49, 17]))
        np.testing.assert_array_equal(x, rows[[0, 49, 17]])
        assert labels.tolist() == [0, 1, 2]
        assert server.stop() == 0


@pytest.mark.parametrize("args, part", [(["--part", "2/3"], (16, 33)), (["--range", "10:20"], (10, 20))],
                         ids=["part", "range"])
def test_cli_serve_a_part_serves_it_refuses_the_rest_and_announces_it(tmp_path, token_config, args, part):
    """Issue 30, parts: `serve --part K/N` or `--range START:STOP` serves those entries alone, as the local reader
    has them, refuses the others naming the interval (the connection stays open), and announces the part and the
    digest of its rows, in its first line and its welcome."""
    from readers.network.parts import part_digest

    config, local = token_config
    with cli_serve(tmp_path, "--config", config, *args) as server:
        server.announced()
        assert (server.part, server.total, server.entries) == (part, 50, part[1] - part[0])
        assert server.part_digest == part_digest(local, part)
        remote = readers.remote(server.address)
        assert (len(remote), remote.welcome["part"], remote.welcome["part_digest"]) == (50, list(part),
                                                                                        server.part_digest)
        inside = np.arange(*part)
        np.testing.assert_array_equal(remote.gather_columns(inside), np.stack([local[i] for i in inside]))
        for index in (part[0] - 1, part[1], 0, 49):
            with pytest.raises(readers.RemoteError) as caught:
                remote.gather_columns(np.array([part[0], index]))
            assert caught.value.kind == "out_of_range" and caught.value.message == (
                f"index {index} is outside the part this server holds: entries [{part[0]}, {part[1]}) of 50 "
                f"({part[0]}..{part[1] - 1}); ask a server that holds it")
        assert int(remote[part[0]][0]) == int(local[part[0]][0])  # served on after the refusals
        assert server.stop() == 0, server.stderr()


def started_servers(monkeypatch) -> list:
    """The servers ``serve`` makes from now on, not started (``run_until_signal`` only records them)."""
    import readers.network.server

    started: list = []
    monkeypatch.setattr(readers.network.server, "run_until_signal",
                        lambda server, host, port, announce: started.append(server))
    return started


@pytest.mark.parametrize("n", [1, 3, 4, 7, 50])
def test_cli_serve_parts_k_of_n_cover_every_entry_once(token_config, monkeypatch, n):
    """--part K/N for K = 1..N over 50 entries (N not dividing 50 included): no gap, no overlap, sizes within one."""
    from click.testing import CliRunner

    import cli

    started = started_servers(monkeypatch)
    for k in range(1, n + 1):
        result = CliRunner().invoke(cli.main, ["serve", "--config", token_config[0], "--part", f"{k}/{n}"])
        assert result.exit_code == 0, result.output
    parts = [server.served.holds for server in started]
    assert [i for start, stop in parts for i in range(start, stop)] == list(range(50))
    assert max(b - a for a, b in parts) - min(b - a for a, b in parts) <= 1
    assert all(server.served.welcome["entries"] == 50 for server in started)


def test_cli_serve_parts_of_the_same_data_have_equal_digests_and_of_other_data_other_ones(tmp_path, token_config,
                                                                                          monkeypatch):
    from click.testing import CliRunner

    import cli

    other = tmp_path / "other"
    (other / "tokens").mkdir(parents=True)
    tokens = np.arange(1000, 1201, dtype="<u2")
    tokens[120] += 1  # in windows 29 and 30: of part 3/4, [25, 37), not of part 1/4, [0, 12)
    tokens.tofile(other / "tokens" / "a.bin")
    (other / "data.toml").write_text('dir = "tokens"\ntoken_size = "TwoBytes"\nseq_len = 4\n')
    started = started_servers(monkeypatch)
    for config, part in [(token_config[0], "3/4"), (token_config[0], "3/4"), (str(other / "data.toml"), "3/4"),
                         (token_config[0], "1/4"), (str(other / "data.toml"), "1/4")]:
        result = CliRunner().invoke(cli.main, ["serve", "--config", config, "--part", part])
        assert result.exit_code == 0, result.output
    digests = [server.served.welcome["part_digest"] for server in started]
    assert digests[0] == digests[1], "two servers of the same part of the same data"
    assert digests[2] != digests[0], "the same part of other data"
    assert digests[3] == digests[4], "a part where the data agree"
    assert digests[3] != digests[0], "another part"


@pytest.mark.parametrize("args, message", [
    (["--part", "0/4"], "--part '0/4': parts count from 1 to 4 (1/4 is the first, 4/4 the last); give K/N with "
                        "1 <= K <= N"),
    (["--part", "5/4"], "--part '5/4': parts count from 1 to 4 (1/4 is the first, 4/4 the last); give K/N with "
                        "1 <= K <= N"),
    (["--part", "1/0"], "--part '1/0': N, the number of parts, must be 1 or more"),
    (["--part", "half"], "--part 'half' is not K/N; give the part and the number of parts, such as --part 1/4 (the "
                         "first quarter of the entries)"),
    (["--part", "1/51"], "part 1/51 of 50 entries is empty: 51 parts of 50 entries leave some empty; give at most 50 "
                         "parts"),
    (["--range", "20:10"], "--range '20:10' holds no entries: it is START:STOP, half-open, so it needs START < STOP "
                           "(one entry i is i:i+1)"),
    (["--range", "40:60"], "--range '40:60' runs past the data: it has 50 entries, so a part ends at 50 at most"),
    (["--range", "50:"], "--range '50:' holds no entries: it is half-open, so it needs start < stop (one entry i is "
                         "[i, i + 1))"),
    (["--range", "10-20"], "--range '10-20' is not START:STOP; give the first sample index and the one after the "
                           "last, such as --range 0:1000 (STOP left out: to the end)"),
    (["--part", "1/2", "--range", "0:10"], "give --part or --range, not both (got --part '1/2' and --range '0:10'): "
                                           "each says which entries this server holds"),
], ids=["K=0", "K>N", "N=0", "not K/N", "empty part", "STOP<START", "past the end", "START at the end",
        "not START:STOP", "both"])
def test_cli_serve_refuses_a_bad_part_or_range_in_one_line(token_config, monkeypatch, args, message):
    from click.testing import CliRunner

    import cli

    started = started_servers(monkeypatch)
    result = CliRunner().invoke(cli.main, ["serve", "--config", token_config[0], *args])
    assert result.exit_code == 1 and result.output.splitlines() == [f"Error: {message}"]
    assert not started


def test_cli_serve_help_says_how_parts_are_counted():
    from click.testing import CliRunner

    import cli

    shown = " ".join(CliRunner().invoke(cli.main, ["serve", "--help"]).output.split())
    assert "--part K/N Serve only the K-th of N equal contiguous parts of the entries, K from 1 to N" in shown
    assert "--range START:STOP Serve only the entries START to STOP - 1 (half-open" in shown
