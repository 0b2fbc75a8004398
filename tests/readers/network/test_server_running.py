"""readers.network.server, how a server is run: in a background thread (serve, Serving), in the foreground until a
signal, and TLS."""
import os
import signal
import socket
import subprocess
import threading

import numpy as np
import pytest

import readers
from readers.network.server import Server, Serving, run_until_signal, serve, tls_context
from tests.conftest import HANG, finishes
from tests.helpers.addresses import bind_fails
from tests.helpers.child_processes import python_child
from tests.readers.network.test_server import WAIT, Client, expect_rows, small_reader


def server_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("readerkit-")]


def test_serve_as_a_context_manager_serves_then_stops():
    with serve(small_reader(), log=[].append) as handle:
        assert isinstance(handle, Serving)
        host, port = handle.address.rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) == handle.port > 0 and handle.host == "127.0.0.1"
        expect_rows(readers.remote(handle.address).gather_columns(np.arange(5)), range(5))
        assert "readerkit-serve-accept" in server_threads()
    assert server_threads() == []
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", handle.port), timeout=WAIT).close()


def test_serve_localhost_shows_the_address_bound():
    with serve(small_reader(), host="localhost", log=[].append) as handle:
        assert handle.address == f"127.0.0.1:{handle.port}"


def test_serve_an_ipv6_host_shows_it_in_brackets():
    try:
        handle = serve(small_reader(), host="::1", log=[].append)
    except OSError as exc:
        pytest.skip(f"this machine cannot listen on ::1 ({exc})")
    with handle:  # bound and stopped only: the tests connect to 127.0.0.1 alone
        assert handle.address == f"[::1]:{handle.port}"


def test_serve_counts_connections_requests_and_bytes():
    with serve(small_reader(), log=[].append) as handle:
        assert handle.stats == {"connections": 0, "requests": 0, "rejections": 0, "bytes": 0}
        with Client(handle.address) as client:
            client.login()
            client.send({"type": "get", "id": 0, "interval": [0, 9]})
            client.rows(0, 10)
            client.send({"type": "get", "id": 1, "indices": [-1]})
            client.rejected("out_of_range", 1)
        stats = handle.stats
        stats["bytes"] = -1  # a copy: changing it changes nothing
        assert handle.stats == {"connections": 1, "requests": 2, "rejections": 1, "bytes": 10 * 12}


def test_serve_repr_says_what_and_where_and_whether_stopped():
    handle = serve(readers.np_array(np.arange(7)), log=[].append)
    try:
        assert repr(handle) == f"<serving 7 entries on 127.0.0.1:{handle.port}>"
    finally:
        handle.stop()
    assert repr(handle) == f"<serving 7 entries on 127.0.0.1:{handle.port}, stopped>"


def test_serve_stop_twice_or_from_two_threads_is_fine():
    handle = serve(small_reader(), log=[].append)
    both = [threading.Thread(target=handle.stop, name=f"test-stop-{k}") for k in range(2)]
    for thread in both:
        thread.start()
    for thread in both:
        thread.join(HANG)
    assert not any(thread.is_alive() for thread in both)
    finishes(handle.stop, "a third stop")
    with handle:  # leaving the context of a stopped server is fine too
        pass
    assert server_threads() == []


def test_serve_a_port_in_use_raises_in_the_caller():
    taken = socket.socket()
    try:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError) as caught:
            serve(small_reader(), port=taken.getsockname()[1], log=[].append)
        assert caught.value.errno == 98 or "address already in use" in str(caught.value).lower()
    finally:
        taken.close()
    assert server_threads() == []


@pytest.mark.parametrize("host", ["no-such-host.invalid", "256.1.1.1"])
def test_serve_a_host_that_does_not_resolve_raises_in_the_caller(host, monkeypatch):
    # as the resolver answers, without asking one (tests reach no network, DNS included)
    bind_fails(monkeypatch, socket.gaierror(socket.EAI_NONAME, "Name or service not known"), host=host)
    with pytest.raises(OSError):
        serve(small_reader(), host=host, secret="s", log=[].append)
    assert server_threads() == []


def test_serve_refuses_what_it_cannot_serve_before_starting_a_thread():
    with pytest.raises(TypeError, match="a server serves an indexed reader"):
        serve(lambda: iter([1, 2]))
    with pytest.raises(TypeError, match="unexpected keyword argument 'idle'"):
        serve(small_reader(), idle=3)
    assert server_threads() == []


def test_serve_passes_the_limits_to_the_server():
    with serve(small_reader(), handshake_timeout=0.5, idle_timeout=0.7, log=[].append) as handle:
        assert (handle.server.handshake_timeout, handle.server.idle_timeout) == (0.5, 0.7)
        with Client(handle.address) as silent:
            assert silent.closed()  # no hello within half a second


def test_serve_with_a_secret_needs_it():
    with serve(small_reader(), secret="s3cret", log=[].append) as handle:
        expect_rows(readers.remote(handle.address, secret="s3cret").gather_columns(np.arange(3)), range(3))
        with pytest.raises(readers.NotAuthorised, match="does not match this server's secret"):
            readers.remote(handle.address, secret="wrong")


def test_tls_context_names_the_files_it_cannot_load(tmp_path):
    (tmp_path / "cert.pem").write_text("not a certificate")
    with pytest.raises(ValueError, match=f"cannot load the TLS certificate {tmp_path}/cert.pem with key "
                                         f"{tmp_path}/key.pem: .*; give PEM files"):
        tls_context(str(tmp_path / "cert.pem"), str(tmp_path / "key.pem"))


def test_run_until_signal_serves_until_sigterm_then_stops():
    lines: list[str] = []
    server = Server(small_reader(), log=lines.append)
    read: dict = {}

    def client_then_signal(host: str, port: int) -> None:
        def work() -> None:
            try:
                read["columns"] = readers.remote(f"{host}:{port}").gather_columns(np.arange(4))
            finally:
                os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=work, name="test-client").start()

    previous = signal.getsignal(signal.SIGTERM)
    run_until_signal(server, "127.0.0.1", 0, client_then_signal)
    assert signal.getsignal(signal.SIGTERM) == previous
    expect_rows(read["columns"], range(4))
    assert server.stats["requests"] >= 1 and server.stopping and server_threads() == []


@pytest.mark.parametrize("mode", ["reentrant", "draining"])
def test_run_until_signal_stops_on_a_second_sigterm_inside_its_handler_or_while_draining(mode):
    """Regression (trial of issue 27, problem 1): GNU timeout sends SIGTERM to the server and to its group. The
    handler called threading.Event.set, and a second signal arriving while the first held the Event's lock ran the
    handler again inside it, which waited on that lock for ever: the server ignored every later SIGTERM
    ("reentrant": the handler is run again at every call it makes). And the handlers were put back before the drain,
    so a second SIGTERM then killed the server mid-drain (exit -15; "draining")."""
    with python_child("-m", "tests.helpers.signalled_server", mode, text=True) as proc:  # (ended however this ends)
        try:
            out, err = proc.communicate(timeout=30.0)  # (a bound on a hang: the child takes a second or two)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{mode}: the server did not stop on SIGTERM within 30 s (deadlocked)")
    assert (proc.returncode, out) == (0, "stopped\n"), f"{mode}: exit {proc.returncode}; {out}{err}"
