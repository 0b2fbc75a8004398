"""readers.network.connection: one client connection (login, frames), and the remote reader's auth, versions and TLS.

A refused login raises its typed error at once, never after the retry
deadline: each test gives the reader a deadline far longer than ``HANG`` and
checks that the server saw one connection and that no retry warning was raised.
"""
import os
import socket
import ssl
import struct
import threading
import warnings

import numpy as np
import pytest

import readers
from readers.network import client as client_module
from readers.network.connection import (
    PROBE_FRAME,
    Connection,
    client_tls,
    received,
    speaks_plain,
)
from readers.network.wire import (
    MAX_FRAME,
    VERSION,
    ProtocolError,
    decode,
    encode,
    rejection,
)
from tests.conftest import HANG, finishes

SECRET = "s3cret-of-the-test"
LONG = 120.0  # the readers' deadline: far over HANG, so a login that was tried again would fail the test


def quiet(line: str) -> None:
    """The servers' log, of no interest here."""


@pytest.fixture
def served():
    """``served(**options)``: a server of 40 entries (its handle), stopped when the test ends."""
    handles = []

    def start(**options):
        handles.append(readers.serve(readers.from_arrays(np.arange(80).reshape(40, 2), np.arange(40)), log=quiet,
                                     **options))
        return handles[-1]

    yield start
    for handle in handles:
        handle.stop()


class FakeServer:
    """A server on 127.0.0.1:0, in a thread: it reads each connection's hello (kept in ``hellos``), sends the
    frames ``answer`` gives (as far as the client reads them), and closes the connection."""

    def __init__(self, answer: bytes):
        self.answer, self.hellos = answer, []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, name="test-fake-server", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except socket.timeout:
                continue
            with conn:
                conn.settimeout(HANG)
                (size,) = struct.unpack(">I", received(conn, 4, "the client"))
                self.hellos.append(decode(received(conn, size, "the client"))[0])
                try:
                    conn.sendall(self.answer)
                except ConnectionError:  # a client that has read enough may close before the answer's end
                    pass

    def __enter__(self) -> "FakeServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.thread.join(HANG)
        self.listener.close()


def refused(make, error):
    """The error ``make()`` raises, at once: no retry warning, and within HANG (the deadline is far longer)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a retry would warn
        with pytest.raises(error) as caught:
            finishes(make, "a refused login")
    return caught.value


def test_connection_logs_in_and_reads_frames(served):
    server = served()
    host, port = server.address.rsplit(":", 1)
    conn = Connection(host, int(port), secret=None, tls=None, timeout=HANG)
    assert conn.welcome["entries"] == 40 and conn.welcome["version"] == VERSION
    conn.send({"type": "get", "id": 4, "interval": [3, 5]})
    header, body = conn.receive()
    assert (header["type"], header["id"], header["first"], header["count"]) == ("entries", 4, 0, 3)
    assert len(body) == 2 * 3 * 8 + 3 * 8
    conn.close()
    conn.close()  # twice: no harm


def test_connection_says_when_the_server_leaves():
    welcome = encode({"type": "welcome", "version": VERSION, "entries": 3})
    with FakeServer(welcome) as fake:
        host, port = fake.address.rsplit(":", 1)
        conn = Connection(host, int(port), secret=None, tls=None, timeout=HANG)
        with pytest.raises(ConnectionResetError, match=f"{fake.address} closed the connection"):
            conn.receive()
        conn.close()


def test_connection_refuses_a_frame_over_the_limit_before_reading_it():
    with FakeServer(struct.pack(">I", MAX_FRAME + 1) + bytes(64)) as fake:
        host, port = fake.address.rsplit(":", 1)
        with pytest.raises(ProtocolError, match="over the limit"):
            Connection(host, int(port), secret=None, tls=None, timeout=HANG)


def test_remote_reads_with_the_right_secret(served):
    server = served(secret=SECRET)
    for secret in (SECRET, SECRET.encode()):
        remote = readers.remote(server.address, secret=secret)
        assert [int(label) for _, label in remote()] == list(range(40))


def test_remote_reads_with_the_secret_of_the_environment(served, monkeypatch):
    server = served(secret=SECRET)
    monkeypatch.setenv("READERKIT_SECRET", SECRET)
    assert int(readers.remote(server.address)[7][1]) == 7


@pytest.mark.parametrize("secret", ["wrong", "s3cret-of-the-tes", SECRET + "\n"])
def test_remote_with_a_wrong_secret_is_not_authorised_at_once(served, secret):
    server = served(secret=SECRET)
    error = refused(lambda: readers.remote(server.address, secret=secret, deadline=LONG), readers.NotAuthorised)
    assert error.kind == "not_authorised" and error.address == server.address
    assert str(error).startswith(f"not_authorised from {server.address}: ")
    assert server.stats["connections"] == 1


def test_remote_without_a_secret_is_not_authorised_at_once(served, monkeypatch):
    server = served(secret=SECRET)
    monkeypatch.delenv("READERKIT_SECRET", raising=False)
    error = refused(lambda: readers.remote(server.address, deadline=LONG), readers.NotAuthorised)
    assert server.address in str(error) and "READERKIT_SECRET" in str(error)
    assert server.stats["connections"] == 1


@pytest.mark.parametrize("where", ["argument", "environment"])
def test_remote_and_serve_refuse_a_secret_utf8_cannot_encode_at_once(served, monkeypatch, where):
    """Regression (trial of issue 27, problem 6): READERKIT_SECRET=$'s3cret\\xff' (bytes that are not UTF-8), or
    secret="\\ud800", gave a raw "UnicodeEncodeError: 'utf-8' codec can't encode character '\\udcff'" on the client
    (and on the server, from serve). Now a BadValue at once, on both ends, that shows nothing of the secret."""
    server = served(secret=SECRET)
    secret = "s3cret\ud800" if where == "argument" else None
    if where == "environment":
        monkeypatch.setenv("READERKIT_SECRET", os.fsdecode(b"s3cret\xff"))
        said = ("$READERKIT_SECRET is not text that UTF-8 can encode (it holds bytes that are not UTF-8): the secret "
                "must be UTF-8 text; set READERKIT_SECRET to UTF-8 text on the server and the clients")
    else:
        said = ('the secret is not text that UTF-8 can encode (it holds a lone surrogate); give text of UTF-8 '
                'characters, or bytes (secret=b"...")')
    error = refused(lambda: readers.remote(server.address, secret=secret, deadline=LONG), readers.BadValue)
    assert said in str(error) and "s3cret" not in str(error) and "\n" not in str(error)
    assert server.stats["connections"] == 0  # refused before connecting
    if where == "argument":
        before = threading.active_count()
        with pytest.raises(readers.BadValue) as caught:
            readers.serve(readers.np_array(np.arange(3)), secret=secret, log=quiet)
        assert str(caught.value) == said and threading.active_count() == before  # (refused before listening)


def test_remote_secret_refused_after_a_restart_raises_mid_pass(served):
    """A server started again with another secret: the pass stops with NotAuthorised, not a retry loop."""
    server = served(secret=SECRET)
    remote = readers.remote(server.address, secret=SECRET, deadline=LONG)
    port = int(server.address.rsplit(":", 1)[1])
    server.stop()
    served(secret="another", port=port)
    refused(lambda: remote.gather(np.arange(3)), readers.NotAuthorised)


def test_remote_to_a_server_of_another_version_raises_at_once():
    answer = rejection("unsupported_version", f"this server speaks protocol version {VERSION + 1}, the client "
                                              f"{VERSION}; upgrade the older end")
    with FakeServer(answer) as fake:
        error = refused(lambda: readers.remote(fake.address, deadline=LONG), readers.UnsupportedVersion)
        assert error.kind == "unsupported_version" and error.address == fake.address
        assert fake.hellos == [{"type": "hello", "version": VERSION, "narrow": True}]


@pytest.mark.parametrize("padding, speaks", [(100, True), (PROBE_FRAME, False), (MAX_FRAME - 1024, False)])
def test_speaks_plain_reads_no_more_than_a_probe_frame_of_an_answer(padding, speaks):
    """Regression (review of issue 27, finding 9): the probe read up to MAX_FRAME (16 MiB) from whatever listens at
    the address, growing a bytes object chunk by chunk; an answer over PROBE_FRAME (64 KiB) is no readerkit
    server's welcome and is not read."""
    with FakeServer(encode({"type": "welcome", "padding": "x" * padding})) as fake:
        host, port = fake.address.rsplit(":", 1)
        assert speaks_plain(host, int(port), HANG) is speaks
        assert len(fake.hellos) == 1


def test_remote_to_something_else_says_it_is_no_data_server():
    with FakeServer(encode({"type": "greeting"})) as fake:
        error = refused(lambda: readers.remote(fake.address, deadline=LONG), ProtocolError)
        assert "not a welcome: is it a readerkit data-provider server" in str(error)


def test_remote_reads_over_tls_checking_the_certificate(served, certificate):
    cert, key = certificate
    server = served(tls=readers.network.server.tls_context(cert, key), secret=SECRET)
    remote = readers.remote(server.address, ca_file=cert, secret=SECRET)
    assert [int(label) for _, label in remote()] == list(range(40))
    assert client_tls(cert).verify_mode == ssl.CERT_REQUIRED


def test_remote_refuses_a_certificate_it_cannot_check_at_once(served, certificate):
    cert, key = certificate
    server = served(tls=readers.network.server.tls_context(cert, key))
    refused(lambda: readers.remote(server.address, tls=True, deadline=LONG), ssl.SSLCertVerificationError)


def test_remote_without_tls_to_a_tls_server_says_so_at_once(served, certificate):
    """Regression (issue 27): a plain client against a TLS server was tried again for the whole deadline (120 s),
    and the error named only ConnectionResetError."""
    cert, key = certificate
    server = served(tls=readers.network.server.tls_context(cert, key))
    error = refused(lambda: readers.remote(server.address, deadline=LONG, connect_timeout=LONG), readers.TLSMismatch)
    assert str(error).startswith(f"{server.address} speaks TLS, and this client does not: give readers.remote "
                                 "ca_file= (the server's certificate; --ca-file on the command line), or tls=True")
    assert isinstance(error, readers.ReaderkitError)


@pytest.mark.parametrize("option", ["ca_file", "tls"])
def test_remote_with_tls_to_a_plain_server_says_so_at_once(served, certificate, option):
    """Regression (issue 27): a TLS client against a plain server was tried again for the whole deadline, and the
    error named only WRONG_VERSION_NUMBER."""
    server = served()
    given = {"ca_file": certificate[0]} if option == "ca_file" else {"tls": True}
    error = refused(lambda: readers.remote(server.address, deadline=LONG, connect_timeout=LONG, **given),
                    readers.TLSMismatch)
    assert str(error).startswith(f"{server.address} does not speak TLS, and this client does (ca_file= or tls=True): "
                                 "leave them out, or start the server with TLS (python cli.py serve --tls-cert CERT "
                                 "--tls-key KEY) (the TLS handshake failed: SSLError")


def test_remote_told_of_a_tls_mismatch_after_a_restart_stops_at_once(served, certificate):
    """A server started again with TLS where it had none: the pass stops at once, not after the deadline."""
    cert, key = certificate
    plain = served()
    remote = readers.remote(plain.address, deadline=LONG)
    port = int(plain.address.rsplit(":", 1)[1])
    plain.stop()
    served(tls=readers.network.server.tls_context(cert, key), port=port)
    refused(lambda: remote[0], readers.TLSMismatch)


def test_a_full_server_is_tried_again_until_a_place_frees(monkeypatch):
    """Regression: "the server has N clients already; try again later" was raised at once, not tried again."""
    with readers.serve(readers.np_array(np.arange(5)), max_clients=1, log=lambda line: None) as server:
        host, port = server.address.rsplit(":", 1)
        held = socket.create_connection((host, int(port)))  # the one place, held until the server turns one away
        connect, turned_away = client_module.Connection, []

        def attempt(*args, **kwargs):
            try:
                return connect(*args, **kwargs)
            except OSError as exc:
                turned_away.append(exc)
                held.close()
                raise

        monkeypatch.setattr(client_module, "Connection", attempt)
        with pytest.warns(RuntimeWarning, match="the server has 1 clients already; try again later"):
            second = readers.remote(server.address, deadline=HANG)
        assert int(second[4]) == 4 and turned_away
