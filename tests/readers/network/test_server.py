"""The data-provider server as a whole: a fuzz of hostile connections and slow clients, many clients at once,
a stalled client, stopping, reachable hosts, TLS and its limits.

Every server here listens on 127.0.0.1, port 0, and is stopped by its test; every wait is bounded (``WAIT``).
"""
from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import errno
import gc
import json
import socket
import threading
from typing import Any

import numpy as np
import pytest

import readers
import readers.network.server
from readers.network.wire import (
    HELLO_FRAME,
    KINDS,
    MAX_FRAME,
    VERSION,
    decode,
    encode,
    frame_length,
    unpack_columns,
)
from tests.conftest import wait_until
from tests.helpers.addresses import bind_fails, not_this_machines
from tests.helpers.processes import open_descriptors
from tests.helpers.serve_helpers import (
    WAIT,
    Client,
    N,
    big_reader,
    expect_rows,
    serving,
    small_reader,
)


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024


BAD_IDS = [None, -1, -(2 ** 70), "1", 1.5, True, False, [], {}]
BAD_INTERVALS = [[5, 2], [-1, 3], [0, N], [N, N], [0, 2 ** 64], [-(2 ** 64), 0], [1], [1, 2, 3], [1.0, 2],
                 "0:1", [True, 1], [None, 1], {}, 7]
BAD_INDICES = [[-1], [N], [2 ** 63], [-(2 ** 63) - 1], [1.5], "1,2", [[1]], [None], [True], 3, {"0": 1}]
TYPES = ["hello", "auth", "entries", "error", "welcome", "challenge", "", "GET", "get " * 30]


def valid_get(rng, ident: int) -> tuple[dict, list]:
    if rng.random() < 0.5:
        lo = int(rng.integers(0, N))
        hi = int(rng.integers(lo, min(N, lo + 30)))
        return {"type": "get", "id": ident, "interval": [lo, hi]}, list(range(lo, hi + 1))
    picked = rng.integers(0, N, size=int(rng.integers(0, 12))).tolist()
    return {"type": "get", "id": ident, "indices": picked}, picked


def bad_message(rng, ident: int) -> dict:
    """A well-formed frame whose request the server must reject (and answer), keeping the connection."""
    def use(options: list) -> Any:
        return options[int(rng.integers(len(options)))]

    roll = rng.random()
    if roll < 0.25:
        return {"type": use(TYPES), "id": ident, "interval": [0, 1]}
    if roll < 0.45:
        return {"type": "get", "id": use(BAD_IDS), "interval": [0, 1]}
    if roll < 0.65:
        return {"type": "get", "id": ident, "interval": use(BAD_INTERVALS)}
    if roll < 0.85:
        return {"type": "get", "id": ident, "indices": use(BAD_INDICES)}
    if roll < 0.92:
        return {"type": "get", "id": ident, "interval": [0, 1], "indices": [0]}
    return {"type": "get", "id": ident, "extra": "x" * int(rng.integers(0, 100))}


def broken_frame(rng, limit: int) -> bytes:
    """Bytes that break the framing: the server may answer once, then closes the connection."""
    roll = rng.random()
    if roll < 0.25:
        return rng.bytes(int(rng.integers(1, 200)))
    if roll < 0.4:
        frame = encode(bad_message(rng, 1))
        return frame[:int(rng.integers(1, len(frame)))]  # truncated: the client stops mid-frame
    if roll < 0.55:
        return int(rng.integers(limit + 1, 2 ** 32)).to_bytes(4, "big")
    if roll < 0.7:
        payload = rng.bytes(int(rng.integers(0, 4)))  # too short for a header length
    elif roll < 0.8:
        payload = int(rng.integers(10, 2 ** 32)).to_bytes(4, "big") + rng.bytes(8)  # header length past the end
    elif roll < 0.9:
        body = rng.bytes(int(rng.integers(1, 60)))
        payload = len(body).to_bytes(4, "big") + body  # not JSON (or, rarely, JSON that is not an object)
    else:
        body = json.dumps([[], 1, "x", None, {"type": 5}, {"typ": "get"}][int(rng.integers(6))]).encode()
        payload = len(body).to_bytes(4, "big") + body
    return len(payload).to_bytes(4, "big") + payload


def fuzz_connection(address: str, rng) -> str:
    """One short connection: some well-formed requests, rejected ones and perhaps broken bytes at the end;
    checks every answer it gets. Returns how it ended."""
    with Client(address) as client:
        logged_in = rng.random() < 0.7
        if logged_in:
            client.login()
        expected, rejected, data = {}, set(), []
        for k in range(int(rng.integers(0, 6)) if logged_in else 0):
            if rng.random() < 0.5:
                message, rows = valid_get(rng, k)
                expected[k] = rows
            else:
                message = bad_message(rng, k)
                rejected.add(k)
            data.append(encode(message))
        broken = rng.random() < (0.4 if logged_in else 1.0)
        if broken:
            data.append(broken_frame(rng, MAX_FRAME if logged_in else HELLO_FRAME))
        client.raw(b"".join(data))
        client.sock.shutdown(socket.SHUT_WR)  # the server answers what it read, then closes
        got: dict[int, list] = {}
        errors = 0
        try:
            while True:
                prefix = client.sock.recv(4, socket.MSG_WAITALL)
                if not prefix:
                    break
                header, body = decode(client.exactly(frame_length(prefix, MAX_FRAME)))
                assert header["type"] in ("entries", "error"), header
                if header["type"] == "error":
                    assert header["kind"] in KINDS and isinstance(header["message"], str)
                    errors += 1
                    assert header.get("id") not in expected, header
                    continue
                assert header["id"] in expected and header["first"] == 0
                got[header["id"]] = unpack_columns(header["columns"], body)
        except ConnectionResetError:
            assert broken, "a connection reset with no broken frame sent"
            return "reset"
        for ident, rows in expected.items():
            expect_rows(got[ident], rows)
        assert len(rejected) <= errors <= len(rejected) + broken  # one per rejected request, one for bad bytes
        return "broken" if broken else "clean"


SHORT = {"handshake_timeout": 1.5, "frame_timeout": 1.5, "idle_timeout": 2.0}
CLOSED_BY = {"handshake_timeout": "no login within 1.5 s", "frame_timeout": "unfinished after 1.5 s",
             "idle_timeout": "idle for 2 s"}  # what the server's log line of a connection says it was closed for


def slow_client(address: str, login: bool, data: bytes, step: float) -> str:
    """Send ``data`` a byte every ``step`` seconds (after a login, perhaps) until the server closes the
    connection; the client's address, which the server's log line of the connection names."""
    with Client(address) as client:
        if login:
            client.login()
        client.sock.settimeout(step)
        for k in range(int(WAIT / step) + len(data)):
            try:
                if k < len(data):
                    client.raw(data[k:k + 1])
                if not client.sock.recv(1 << 16):
                    return client.peer
            except socket.timeout:
                continue
            except (BrokenPipeError, ConnectionResetError):
                return client.peer
        raise AssertionError(f"the server kept a slow client ({len(data)} bytes, login={login}) for {WAIT} s")


GET = encode({"type": "get", "id": 1, "interval": [0, 3]})
HELLO = encode({"type": "hello", "version": VERSION})
SLOW = [  # (login, bytes sent slowly, the limit that must close the connection)
    (False, HELLO, "handshake_timeout"),  # slow loris before login
    (True, GET, "frame_timeout"),  # slow loris after: the prefix is within the idle limit, the payload is not
    (False, b"", "handshake_timeout"),  # connects and sends nothing
    (True, b"", "idle_timeout"),  # logs in and sends nothing
    (False, HELLO[:7], "handshake_timeout"),  # half a frame, then nothing
    (True, GET[:9], "frame_timeout"),
    (True, GET[:2], "idle_timeout"),  # half a length prefix
]


def test_server_survives_a_fuzz_of_hostile_connections_and_slow_clients(no_leaks):
    rng = np.random.default_rng(20240514)
    with serving(**SHORT) as server:
        def partial_frames(count: int) -> None:  # a big frame begun and given up: its buffer must be freed
            for _ in range(count):
                with Client(server.address) as client:
                    client.login()
                    client.raw((4 << 20).to_bytes(4, "big") + bytes(1 << 20))

        for _ in range(150):  # warm up the allocator, so what stays after is what leaked
            fuzz_connection(server.address, rng)
        partial_frames(20)
        gc.collect()
        rss, files = rss_mib(), len(open_descriptors())
        with concurrent.futures.ThreadPoolExecutor(len(SLOW), thread_name_prefix="test-slow") as pool:
            slow = [pool.submit(slow_client, server.address, login, data, 0.4) for login, data, _ in SLOW]
            endings = collections.Counter(fuzz_connection(server.address, rng) for _ in range(3000))
            partial_frames(80)
            peers = [future.result(timeout=WAIT + 5) for future in slow]
        for (login, data, limit), peer in zip(SLOW, peers):  # each closed by its own limit, not by another cause
            wait_until(lambda: any(line.startswith(f"{peer}: ") and line.endswith(CLOSED_BY[limit])
                                   for line in server.lines), WAIT,
                       lambda: f"the server to log that its {limit} closed the slow client {peer} ({len(data)} bytes, "
                               f"login={login}); its lines of {peer}: "
                               f"{[line for line in server.lines if line.startswith(f'{peer}: ')]}")
        assert endings["clean"] > 1000 and endings["broken"] > 500, endings
        with Client(server.address) as client:  # a normal client gets exactly the right data
            client.login()
            client.send({"type": "get", "id": 0, "interval": [0, N - 1]})
            expect_rows(client.rows(0, N), range(N))
        remote = readers.remote(server.address)
        expect_rows(remote.gather_columns(np.arange(N)[::-1].copy()), range(N - 1, -1, -1))
        wait_until(lambda: len(server.server.sessions) <= 1, WAIT, "the fuzz's connections to close")
        gc.collect()
        assert rss_mib() - rss < 40, f"memory grew by {rss_mib() - rss:.0f} MiB over 3,000 connections"
        assert len(open_descriptors()) <= files + 2, "sockets left open"
        reasons = "\n".join(server.lines)
        for words in ("no login within 1.5 s", "idle for 2 s", "unfinished after 1.5 s", "closed mid-frame",
                      "a frame over the limit", "a malformed frame"):
            assert words in reasons


# -- many clients, a stalled client, stopping, reachable hosts, TLS -----------------------------------


def test_server_serves_64_clients_at_once_each_its_own_interval(no_leaks):
    span, clients = 37, 64
    values = np.arange(span * clients, dtype=np.int64) * 5 + 1
    ready = threading.Barrier(clients, timeout=WAIT)
    with serving(readers.from_arrays(values, -values)) as server:
        def read(k: int) -> tuple[int, tuple]:
            remote = readers.remote(server.address)  # each logs in, then all read at once
            ready.wait()
            return k, remote.gather_columns(np.arange(k * span, (k + 1) * span))

        with concurrent.futures.ThreadPoolExecutor(clients, thread_name_prefix="test-client") as pool:
            answers = sorted(pool.map(read, range(clients), timeout=WAIT * 3))
        assert server.stats["connections"] >= clients
    got = np.concatenate([columns[0] for _, columns in answers])
    np.testing.assert_array_equal(got, values)  # every entry exactly once, in order
    np.testing.assert_array_equal(np.concatenate([columns[1] for _, columns in answers]), -values)


def test_server_a_stalled_client_does_not_stall_the_others():
    images, labels = big_reader()
    with serving(readers.from_arrays(images, labels), budget=40 << 20) as server, Client(server.address) as stalled:
        stalled.login()
        stalled.send({"type": "get", "id": 1, "interval": [0, len(labels) - 1]})  # ~37 MiB, left unread
        stalled.send({"type": "get", "id": 2, "interval": [0, len(labels) - 1]})
        stalled.sock.settimeout(WAIT)
        assert stalled.sock.recv(1, socket.MSG_PEEK)  # its answer is under way
        remote = readers.remote(server.address)
        for lo in range(0, len(labels), 50):  # another client reads everything while the first stalls
            columns = remote.gather_columns(np.arange(lo, min(lo + 50, len(labels))))
            np.testing.assert_array_equal(columns[0], images[lo:lo + 50])
        for got in stalled.answers({1: len(labels), 2: len(labels)}).values():  # it was kept, and gets it all
            np.testing.assert_array_equal(got[0], images)
            np.testing.assert_array_equal(got[1], labels)


def test_server_stop_finishes_answers_in_flight_and_closes_every_connection():
    images, labels = big_reader()
    files = len(open_descriptors())
    handle = readers.serve(readers.from_arrays(images, labels), log=[].append)
    try:
        with Client(handle.address) as busy, Client(handle.address) as idle, Client(handle.address) as silent:
            busy.login()
            idle.login()
            busy.send({"type": "get", "id": 5, "interval": [0, len(labels) - 1]})
            header, first = busy.receive()  # the answer is under way when the server is told to stop
            assert header["count"] == 63
            stopping = threading.Thread(target=handle.stop, name="test-stop")
            stopping.start()
            parts = [unpack_columns(header["columns"], first)]
            while sum(len(p[1]) for p in parts) < len(labels):
                header, body = busy.receive()
                assert header["first"] == sum(len(p[1]) for p in parts)
                parts.append(unpack_columns(header["columns"], body))
            np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), images)
            assert busy.closed() and idle.closed() and silent.closed()
            stopping.join(WAIT)
            assert not stopping.is_alive()
        assert [t.name for t in threading.enumerate() if t.name.startswith("readerkit-")] == []
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", handle.port), timeout=WAIT).close()
        assert len(open_descriptors()) == files and repr(handle).endswith(", stopped>")
    finally:
        handle.stop()


@pytest.mark.parametrize("host", ["0.0.0.0", "", "::", "192.0.2.1", "example.org", "127.1"])
def test_server_refuses_a_reachable_host_without_a_secret(host):
    with pytest.raises(ValueError, match=f"refusing to serve on {host}, which other machines can reach, without "
                                         "a secret: anyone there could read the data; give --secret-file"):
        readers.serve(small_reader(), host=host)
    assert [t.name for t in threading.enumerate() if t.name.startswith("readerkit-")] == []


def test_server_names_a_host_that_is_not_this_machines(monkeypatch):
    """Regression (issue 27, item 9c): --host 10.255.255.1 gave a raw "[Errno 99] Cannot assign requested address".
    The bind is made to fail: with net.ipv4.ip_nonlocal_bind=1 a machine binds 192.0.2.1 (review, finding 8)."""
    not_this_machines(monkeypatch, "192.0.2.1")
    with pytest.raises(readers.BadValue, match=r"^cannot listen on 192\.0\.2\.1:20001: no network interface of this "
                                               r"machine has the address 192\.0\.2\.1; give one it has"):
        readers.serve(small_reader(), host="192.0.2.1", port=20001, secret="s3cret")  # (TEST-NET-1: no one's)
    assert [t.name for t in threading.enumerate() if t.name.startswith("readerkit-")] == []


CANNOT_LISTEN = {
    "a host name that does not resolve": (
        OSError(socket.EAI_NONAME, "Name or service not known (while attempting to bind on address ('nosuch.invalid', "
                "20001))"), "nosuch.invalid", 20001,  # (as create_server raises the resolver's socket.gaierror)
        "cannot listen on nosuch.invalid:20001: the host name nosuch.invalid does not resolve (Name or service not "
        "known); give a name or address of this machine (`ip addr` lists its addresses), 0.0.0.0 for all of them, "
        "or 127.0.0.1"),
    "a port below 1024 without the right": (
        PermissionError(errno.EACCES, "Permission denied"), "127.0.0.1", 80,
        "cannot listen on 127.0.0.1:80 (Permission denied): a port below 1024 needs root or CAP_NET_BIND_SERVICE; "
        "give a port of 1024 or more (0 picks a free one)"),
}


@pytest.mark.parametrize("case", CANNOT_LISTEN)
def test_server_names_an_address_it_cannot_listen_on(monkeypatch, case):
    """Regression (trial of issue 27, problem 5): serve --host nosuch.invalid printed an 11-frame traceback ending
    "OSError: [Errno -2] Name or service not known", and a port below 1024 without permission a raw EACCES. Now a
    CannotListen (a ReaderkitError, still an OSError with the system's errno) whose one line names the address. The
    bind is made to fail: no resolver is asked, and root may bind port 80."""
    error, host, port, message = CANNOT_LISTEN[case]
    bind_fails(monkeypatch, error, host=host, port=port)
    with pytest.raises(readers.network.server.CannotListen) as caught:
        readers.serve(small_reader(), host=host, port=port, secret="s3cret")
    assert str(caught.value) == message and caught.value.errno == error.errno
    assert isinstance(caught.value, readers.ReaderkitError) and isinstance(caught.value, OSError)
    assert [t.name for t in threading.enumerate() if t.name.startswith("readerkit-")] == []


def test_server_says_a_port_in_use_is_in_use():
    """Regression (trial of issue 27, problem 5): readers.serve on a port in use raised a raw "OSError: [Errno 98]
    Address already in use"; only the command line said what to do."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(readers.network.server.CannotListen) as caught:
            readers.serve(small_reader(), port=port)
    assert str(caught.value) == (f"127.0.0.1:{port} is in use (another server?): stop it, or give another port "
                                 "(0 picks a free one)")
    assert caught.value.errno == errno.EADDRINUSE and isinstance(caught.value, readers.ReaderkitError)
    assert [t.name for t in threading.enumerate() if t.name.startswith("readerkit-")] == []


def test_server_serves_a_reachable_host_with_a_secret():
    with serving(host="0.0.0.0", secret="s3cret") as server:
        assert server.address == f"0.0.0.0:{server.port}"
        with Client(f"127.0.0.1:{server.port}") as client:  # reached through loopback only
            client.login(b"s3cret")
            client.send({"type": "get", "id": 0, "indices": [2]})
            expect_rows(client.rows(0, 1), [2])


def test_server_speaks_tls_to_a_client_that_trusts_its_certificate(certificate):
    cert, key = certificate
    with serving(tls=readers.network.server.tls_context(cert, key)) as server:
        remote = readers.remote(server.address, ca_file=cert)
        expect_rows(remote.gather_columns(np.arange(N)), range(N))
        with Client(server.address) as plain:  # no TLS: the handshake fails and the connection closes
            plain.raw(HELLO)
            assert plain.closed()
        with pytest.raises(OSError, match="closed the connection"):  # RemoteUnavailable, after no retries
            readers.remote(server.address, deadline=0, timeout=WAIT)
        with pytest.raises(OSError, match="CERTIFICATE_VERIFY_FAILED"):
            readers.remote(server.address, deadline=0, timeout=WAIT, tls=True)  # the system's CAs do not know it
        expect_rows(remote.gather_columns(np.arange(3)), range(3))  # and the server serves on


def test_server_without_tls_refuses_a_tls_client(certificate):
    with serving() as server, pytest.raises(OSError, match="WRONG_VERSION_NUMBER"):
        readers.remote(server.address, deadline=0, timeout=WAIT, ca_file=certificate[0])


@pytest.mark.parametrize("limit, value, words", [
    ("handshake_timeout", 0, "a number of seconds > 0"), ("idle_timeout", -1.0, "a number of seconds > 0"),
    ("frame_timeout", True, "a number of seconds > 0"), ("drain_timeout", "10", "a number of seconds > 0"),
    ("max_clients", 0, "an int >= 1"), ("budget", 1.5, "an int >= 1"),
])
def test_server_refuses_limits_that_cannot_work(limit, value, words):
    with pytest.raises(ValueError, match=f"{limit} must be {words}, got {value!r}"):
        readers.serve(small_reader(), **{limit: value})
    assert [t.name for t in threading.enumerate() if t.name.startswith("readerkit-")] == []


@pytest.mark.parametrize("max_clients", [8, 1024], ids=["even-share", "one-entry-share"])
def test_server_clients_that_read_nothing_hold_only_their_share_of_the_budget(max_clients):
    """Regression (issue 27, item 15): each client that took nothing of its answers held its parts of the budget,
    so a few of them held all of it and every other client waited ``frame_timeout`` for room (a pass took
    59.6 s instead of 2.7 s). Now the stalled clients wait for their own sends, and the others read on. With
    1024 clients an even share (4 KiB) is less than an entry: each connection's own share is one entry."""
    rows = np.random.default_rng(27).integers(0, 256, size=(150, 1 << 16), dtype=np.uint8)  # 64 KiB each
    labels = np.arange(len(rows), dtype=np.int64)
    with serving(readers.from_arrays(rows, labels), budget=8 << 20, max_clients=max_clients,
                 frame_timeout=WAIT) as server, contextlib.ExitStack() as stack:
        stalled = [stack.enter_context(Client(server.address, receive_buffer=1 << 12)) for _ in range(4)]
        for client in stalled:  # each asks for the whole reader twice over, and reads none of it
            client.login()
            client.send({"type": "get", "id": 1, "interval": [0, len(rows) - 1]})
            client.send({"type": "get", "id": 2, "interval": [0, len(rows) - 1]})
        wait_until(lambda: server.server._free < rows[0].nbytes, WAIT,
                   lambda: f"the stalled clients to hold the shared budget ({server.server._free:,} bytes free)")
        remote = readers.remote(server.address, deadline=0, timeout=WAIT)
        columns = remote.gather_columns(np.arange(len(rows)))  # a whole pass while they hold it
        np.testing.assert_array_equal(columns[0], rows)
        np.testing.assert_array_equal(columns[1], labels)
        peers = {client.peer for client in stalled}
        assert not [line for line in server.lines if line.split(": ")[0] in peers or "no room" in line], \
            f"a client waited for the budget, or a stalled one was dropped before the pass ended: {server.lines}"
        stack.close()  # the stalled clients leave: every byte they held comes back
        wait_until(lambda: server.server._free == server.server.shared
                   and all(s.held == [0, 0] and s.own == 0 for s in list(server.server.sessions)), WAIT,
                   lambda: f"the budget back ({server.server._free:,} of {server.server.shared:,} bytes free)")


def test_server_lends_a_reserve_of_one_entry_to_as_many_connections_as_half_the_budget_holds():
    server = readers.network.server.Server(readers.from_arrays(np.zeros((4, 1000), np.uint8)), budget=8000,
                                           max_clients=100, log=[].append)
    try:  # an even share (40 bytes) holds no entry of 1000: four connections have one entry each to themselves
        assert (server.reserve, server.shared) == (1000, 4000)
        assert [server.lend_reserve() for _ in range(5)] == [1000, 1000, 1000, 1000, 0]
        server.return_reserve(0)  # (a connection that had none gives none back)
        server.return_reserve(1000)
        assert [server.lend_reserve(), server.lend_reserve()] == [1000, 0]
    finally:
        server.stop()
