"""readers.remote across failures: no server, a server gone for good, restarted, killed, or cut mid-frame.

A pass that rides out a failure must equal the local pass exactly: every
request not fully answered is sent again from its first missing row, so no
entry is lost or doubled. The last test is the real thing: ``python cli.py
serve`` in a subprocess, killed with SIGKILL mid-pass and started again on
the same port.
"""
import random
import signal
import socket
import subprocess
import threading
import time
import warnings

import numpy as np
import pytest

import batching
import readers
from readers.network import client as client_module
from readers.network.in_flight import Request
from readers.network.served_reader import BODY
from readers.testing import assert_same
from tests.conftest import HANG, finishes
from tests.helpers.child_processes import read_line, start_python, stop

N = 300


def quiet(line: str) -> None:
    """The servers' log, of no interest here."""


def port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def closed_port() -> int:
    """A port that was bound on 127.0.0.1 and closed again: nothing listens there."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def source() -> readers.IndexedReader:
    return readers.from_arrays(np.arange(N * 4, dtype=np.int32).reshape(N, 4), np.arange(N))


def batched(r, size=8):
    return batching.collated(batching.batch(readers.shuffle(r, seed=5), size))


@pytest.fixture
def serving():
    """``serving(reader, **options)``: a server of ``reader``, stopped when the test ends.

    drain_timeout is short: stopping can take that long (and one second more) on Python 3.11 when requests are
    arriving (asyncio.wait_for there may swallow the cancel that stops a connection's reading).
    """
    handles = []

    def start(reader, **options):
        handles.append(readers.serve(reader, log=quiet, drain_timeout=0.5, **options))
        return handles[-1]

    yield start
    for handle in handles:
        handle.stop()


class Clock:
    """The client's ``time`` in a test: ``sleep`` moves ``monotonic`` on at once, so the client's waits between
    attempts take no time, and when it tried is read off this clock instead of measured."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_remote_without_a_server_gives_up_after_its_connect_timeout(monkeypatch):
    """Regression (issue 27): a first connection refused was tried again for the whole deadline (120 s), the wait
    meant for a server that was reached and then lost. Now the first connection waits connect_timeout (5 s)."""
    address, clock, attempts = f"127.0.0.1:{closed_port()}", Clock(), []
    connect = client_module.Connection

    def attempt(*args, **kwargs):
        attempts.append(clock.now)
        return connect(*args, **kwargs)

    monkeypatch.setattr(client_module, "time", clock)
    monkeypatch.setattr(client_module, "random", random.Random(0))  # the jitter between attempts
    monkeypatch.setattr(client_module, "Connection", attempt)
    with pytest.warns(RuntimeWarning, match=f"cannot reach {address}"):
        with pytest.raises(readers.RemoteUnavailable) as caught:
            finishes(lambda: readers.remote(address, deadline=120.0), "connecting to no server")
    # it tried again and again until connect_timeout, then gave up (and did not sleep far past it)
    assert len(attempts) > 2 and attempts[-2] <= 5.0 < clock.now == attempts[-1] < 5.05, attempts
    message = str(caught.value)
    assert message.startswith(f"{address}: no data-provider server answered within 5 s, over {len(attempts)} "
                              "attempts to connect (the last: ConnectionRefusedError")
    assert "check that `python cli.py serve` runs there" in message
    assert "a longer connect_timeout (now 5 s; deadline, now 120 s, is the wait for a server lost" in message


def test_remote_refused_at_the_start_fails_within_its_connect_timeout_naming_the_address():
    address = f"127.0.0.1:{closed_port()}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "cannot reach ...; trying again for up to 0.5 s"
        with pytest.raises(readers.RemoteUnavailable, match=f"^{address}: no data-provider server answered within "
                                                            r"0\.5 s, over \d+ attempts to connect"):
            finishes(lambda: readers.remote(address, deadline=120.0, connect_timeout=0.5), "a refused first connection")


@pytest.mark.parametrize("value", [0, -1.0, True, "5", None])
def test_remote_checks_its_connect_timeout(value):
    with pytest.raises(ValueError, match=rf"connect_timeout must be a number of seconds > 0 .*got {value!r}"):
        readers.remote(f"127.0.0.1:{closed_port()}", connect_timeout=value)


def test_remote_lost_after_its_start_is_waited_for_until_its_deadline_not_its_connect_timeout(monkeypatch, serving):
    """connect_timeout is the first connection's wait only: a reader made while the server ran waits the deadline
    for it in a pass, and in a worker that opens its own connection."""
    server = serving(source())
    remote = readers.remote(server.address, deadline=1.0, connect_timeout=0.05)
    server.stop()
    clock = Clock()
    monkeypatch.setattr(client_module, "time", clock)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(readers.RemoteUnavailable, match="longer deadline \\(now 1 s\\)"):
            finishes(lambda: remote[0], "a read with no server")
    assert clock.now > 1.0


def test_remote_pass_gives_up_when_the_server_is_gone_for_good(serving):
    server = serving(source())
    remote = readers.remote(server.address, deadline=1.0)
    it = batched(remote)()
    next(it)
    server.stop()
    with pytest.warns(RuntimeWarning, match="trying again for up to 1 s"):
        with pytest.raises(readers.RemoteUnavailable, match=f"{server.address}: no data-provider server answered"):
            finishes(lambda: list(it), "a pass with no server")


def test_remote_waits_for_a_server_that_does_not_answer_until_its_deadline_only(serving):
    """Regression: every attempt to connect again could wait the whole socket timeout, so a host that drops
    connections (a machine gone down) held a pass for that timeout after its deadline."""
    server = serving(source())
    remote = readers.remote(server.address, deadline=1.0, timeout=3 * HANG)
    server.stop()
    with socket.create_server(("127.0.0.1", port_of(server.address)), backlog=0) as mute:
        filler = socket.create_connection(mute.getsockname(), timeout=HANG)  # never accepted: the queue is full,
        try:                                                                  # and later connections wait
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # "cannot reach ...; trying again"
                with pytest.raises(readers.RemoteUnavailable, match=r"the last: TimeoutError"):
                    # its connection broke, and it connects again; the deadline ends that, not the socket's timeout
                    finishes(lambda: remote.gather(np.arange(3)), "connecting again to a host that does not answer",
                             timeout=HANG)
        finally:
            filler.close()


@pytest.mark.parametrize("in_flight", [1, 8])
def test_remote_pass_rides_out_a_server_restart_on_the_same_port(serving, monkeypatch, in_flight):
    monkeypatch.setattr(client_module, "REQUEST_BYTES", 100)  # several requests a batch
    local = source()
    server = serving(local)
    remote = readers.remote(server.address, in_flight=in_flight, deadline=HANG)
    want, got, again = list(batched(local)()), [], []
    refused, connect = threading.Event(), client_module.Connection

    def attempt(*args, **kwargs):
        try:
            return connect(*args, **kwargs)
        except OSError:
            refused.set()
            raise

    def start_again() -> None:  # once the client has found the server gone
        if refused.wait(HANG):
            again.append(serving(local, port=port_of(server.address)))

    monkeypatch.setattr(client_module, "Connection", attempt)
    restart = threading.Thread(target=start_again, name="test-restart")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "cannot reach ...; trying again"
        for k, b in enumerate(batched(remote)()):
            got.append(b)
            if k == 5:
                server.stop()  # its answers in flight still go out; then the connection closes
                restart.start()
    restart.join()
    assert refused.is_set(), "the client never tried the server while it was stopped"
    assert_same(got, want)
    assert again[0].stats["connections"] == 1  # the rest of the pass came from the server started again


def test_remote_pass_stops_when_the_server_comes_back_with_other_data(serving):
    server = serving(source())
    remote = readers.remote(server.address, deadline=HANG)
    it = batched(remote)()
    next(it)
    server.stop()
    serving(readers.from_arrays(np.arange(N + 1)), port=port_of(server.address))
    with pytest.raises(readers.RemoteError, match=r"the server now serves other data \(301 entries of from_arrays"):
        list(it)


class CuttingProxy:
    """Forwards connections on 127.0.0.1 to ``target``; the first one's answers are cut after ``cut`` bytes,
    mid-frame, and both its sockets closed."""

    def __init__(self, target: str, cut: int):
        self.target, self.cut, self.connections = target, cut, 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._accept, name="test-proxy", daemon=True)]
        self.sockets = []
        self.threads[0].start()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                client, _ = self.listener.accept()
            except socket.timeout:
                continue
            host, port = self.target.rsplit(":", 1)
            upstream = socket.create_connection((host, int(port)))
            limit = self.cut if self.connections == 0 else None
            self.connections += 1
            self.sockets += [client, upstream]
            for a, b, n in ((client, upstream, None), (upstream, client, limit)):
                thread = threading.Thread(target=self._pump, args=(a, b, n, (client, upstream)), daemon=True)
                self.threads.append(thread)
                thread.start()

    @staticmethod
    def _pump(source_: socket.socket, sink: socket.socket, limit: int | None, pair: tuple) -> None:
        try:
            while limit is None or limit > 0:
                data = source_.recv(1 << 16 if limit is None else min(1 << 16, limit))
                if not data:
                    break
                sink.sendall(data)
                limit = None if limit is None else limit - len(data)
        except OSError:
            pass
        for sock in pair:  # one side ended (or the cut came): end the other too
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> "CuttingProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        for sock in self.sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in self.threads:
            thread.join(HANG)
        for sock in [self.listener, *self.sockets]:
            sock.close()


def test_remote_asks_again_from_the_first_row_missing_when_cut_mid_response(serving, monkeypatch):
    """One request of 32 MB, answered in three parts of whole rows; the connection is cut inside the second
    part: the request is sent again for its rows from the first missing one, and nothing is doubled."""
    big = np.random.default_rng(0).integers(0, 256, size=(64, 512 << 10), dtype=np.uint8)
    local = readers.from_arrays(big, np.arange(64))
    server = serving(local)
    monkeypatch.setattr(client_module, "REQUEST_BYTES", 64 << 20)
    asked, frame = [], Request.frame

    def recorded(request, ident, pass_id=None, binary=True):
        asked.append(request.indices.tolist())
        return frame(request, ident, pass_id, binary)

    monkeypatch.setattr(Request, "frame", recorded)
    with CuttingProxy(server.address, cut=20 << 20) as proxy:
        remote = readers.remote(proxy.address, deadline=HANG)
        idx = np.random.default_rng(1).permutation(64)
        assert_same(remote.gather_columns(idx), local.gather_columns(idx))
        assert proxy.connections == 2
    rows = BODY // (big.shape[1] + 8)  # the rows of a part: 31
    assert asked == [idx.tolist(), idx[rows:].tolist()]  # the rows of the first part are not asked for again


@pytest.mark.parametrize("cut", [2000, 5000, 9000])
def test_remote_pass_cut_with_requests_in_flight_equals_the_local_pass(serving, monkeypatch, cut):
    monkeypatch.setattr(client_module, "REQUEST_BYTES", 100)
    local = source()
    server = serving(local)
    with CuttingProxy(server.address, cut=cut) as proxy:
        remote = readers.remote(proxy.address, in_flight=8, deadline=HANG)
        assert_same(list(batched(remote)()), list(batched(local)()))
        assert proxy.connections == 2


# -- the real thing: python cli.py serve, killed and started again -------------------------------------------


def write_tokens(folder) -> str:
    """A token folder and its data.toml (seq_len 16, shuffled by the seed 7); the data.toml's path."""
    (folder / "tokens").mkdir()
    np.random.default_rng(0).integers(0, 50000, 20000, dtype=np.uint16).astype("<u2").tofile(
        folder / "tokens" / "a.bin")
    (folder / "data.toml").write_text('dir = "tokens"\ntoken_size = "TwoBytes"\nseq_len = 16\nshuffle_seed = 7\n')
    return str(folder / "data.toml")


def start_cli_server(config: str, port: int, log) -> tuple[subprocess.Popen, str]:
    """``python cli.py serve --config config --port port``, and the address it announced."""
    proc = start_python("cli.py", "serve", "--config", config, "--port", port, stderr=log, text=True)
    try:
        line = read_line(proc.stdout, 30, "the server's first line")
        assert line.startswith("serving 1249 entries on 127.0.0.1:"), line
    except BaseException:
        stop(proc)
        raise
    return proc, line.split()[-1]


def test_remote_pass_rides_out_a_killed_cli_server(tmp_path):
    config = write_tokens(tmp_path)
    local = readers.tokens(str(tmp_path / "tokens"), seq_len=16)
    procs = []
    log = open(tmp_path / "server.log", "w")
    try:
        proc, address = start_cli_server(config, 0, log)
        procs.append(proc)
        remote = readers.remote(address, deadline=30.0)
        assert remote.info["shuffle_seed"] == 7 and remote.info["seq_len"] == 16

        def pipeline(r):
            return batching.collated(batching.batch(readers.shuffle(r, seed=remote.info["shuffle_seed"]), 16))

        def restart() -> None:
            procs.append(start_cli_server(config, port_of(address), log)[0])

        want, got, again = list(pipeline(local)()), [], threading.Thread(target=restart, daemon=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # "cannot reach ...; trying again"
            for k, b in enumerate(pipeline(remote)()):
                got.append(b)
                time.sleep(0.002)  # slowly, as a training step would
                if k == 20:
                    proc.send_signal(signal.SIGKILL)  # requests in flight: their answers are lost with it
                    proc.wait(HANG)
                    again.start()  # the pass goes on meanwhile: refused until the server is up again
        again.join(HANG)
        assert len(procs) == 2 and procs[1].poll() is None
        assert_same(got, want)
        assert len(got) == 79
    finally:
        for proc in procs:
            stop(proc)
        log.close()
