"""A server connection spoken to over raw sockets: login, limits, requests in flight, parts, rejections,
slow readers. Every server listens on 127.0.0.1, port 0, and is stopped by its test; every wait is bounded."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import readers
import readers.network.server
from readers.network.served_reader import BODY
from readers.network.wire import (
    HELLO_FRAME,
    KINDS,
    MAX_FRAME,
    VERSION,
    decode,
    encode,
    frame_length,
    proof,
    unpack_columns,
)
from tests.conftest import wait_until
from tests.helpers.serve_helpers import (
    WAIT,
    Client,
    N,
    big_reader,
    expect_rows,
    serving,
    small_reader,
)


def test_server_hello_gets_the_welcome():
    with serving(info={"seq_len": 7}) as server, Client(server.address) as client:
        welcome = client.login()
    assert (welcome["version"], welcome["entries"], welcome["info"], welcome["max_frame"]) == \
        (VERSION, N, {"seq_len": 7}, MAX_FRAME)
    fingerprint = {**readers.fingerprint(small_reader()), "digests": [small_reader().digest()]}
    assert welcome["row_bytes"] == 12 and welcome["fingerprint"] == fingerprint


@pytest.mark.parametrize("version", [0, VERSION + 1, str(VERSION), True, float(VERSION), None, [VERSION]])
def test_server_refuses_another_version_and_closes(version):
    with serving() as server, Client(server.address) as client:
        client.send({"type": "hello", "version": version})
        assert f"protocol version {VERSION}" in client.rejected("unsupported_version")
        assert client.closed()


def test_server_refuses_a_hello_without_a_version():
    with serving() as server, Client(server.address) as client:
        client.send({"type": "hello"})
        client.rejected("unsupported_version")
        assert client.closed()


@pytest.mark.parametrize("first", [{"type": "get", "id": 0, "interval": [0, 1]}, {"type": "auth", "proof": "00"},
                                   {"type": "welcome"}, {"type": "HELLO", "version": VERSION}])
def test_server_wants_a_hello_first(first):
    with serving() as server, Client(server.address) as client:
        client.send(first)
        assert "the first message must be a hello" in client.rejected("malformed")
        assert client.closed()


def test_server_with_a_secret_challenges_and_welcomes_the_right_proof():
    with serving(secret="s3cret") as server, Client(server.address) as client:
        client.send({"type": "hello", "version": VERSION})
        challenge, _ = client.receive()
        assert challenge["type"] == "challenge" and len(bytes.fromhex(challenge["nonce"])) == 32
        client.send({"type": "auth", "proof": proof(b"s3cret", bytes.fromhex(challenge["nonce"]))})
        assert client.receive()[0]["type"] == "welcome"
        client.send({"type": "get", "id": 4, "indices": [5]})
        expect_rows(client.rows(4, 1), [5])


@pytest.mark.parametrize("answer", [
    lambda nonce: {"type": "auth", "proof": proof(b"wrong", nonce)},
    lambda nonce: {"type": "auth", "proof": proof(b"s3cret", nonce)[:-1]},
    lambda nonce: {"type": "auth", "proof": proof(b"s3cret", nonce).upper()},
    lambda nonce: {"type": "auth", "proof": proof(b"s3cret", bytes(32))},
    lambda nonce: {"type": "auth"},
    lambda nonce: {"type": "auth", "proof": 12},
    lambda nonce: {"type": "auth", "proof": None},
    lambda nonce: {"type": "get", "id": 0, "interval": [0, 0], "proof": proof(b"s3cret", nonce)},
    lambda nonce: {"type": "hello", "version": VERSION},
    # regression (issue 27, item 18b): a lone surrogate could not be encoded, and reset the connection unanswered
    lambda nonce: {"type": "auth", "proof": "\ud800"},
    lambda nonce: {"type": "auth", "proof": proof(b"s3cret", nonce)[:-1] + "\udfff"},
], ids=["other-secret", "cut", "upper-case", "other-nonce", "missing", "int", "null", "not-auth", "hello-again",
        "lone-surrogate", "surrogate-tail"])
def test_server_refuses_a_wrong_proof_and_closes(answer):
    with serving(secret="s3cret") as server, Client(server.address) as client:
        client.send({"type": "hello", "version": VERSION})
        challenge, _ = client.receive()
        client.send(answer(bytes.fromhex(challenge["nonce"])))
        assert "does not match this server's secret" in client.rejected("not_authorised")
        assert client.closed()


def test_server_refuses_a_replayed_proof():
    with serving(secret="s3cret") as server:
        with Client(server.address) as first:
            first.send({"type": "hello", "version": VERSION})
            nonce = bytes.fromhex(first.receive()[0]["nonce"])
            recorded = {"type": "auth", "proof": proof(b"s3cret", nonce)}
            first.send(recorded)
            assert first.receive()[0]["type"] == "welcome"
        with Client(server.address) as replay:  # an eavesdropper sends the recorded answer on a new connection
            replay.send({"type": "hello", "version": VERSION})
            assert bytes.fromhex(replay.receive()[0]["nonce"]) != nonce
            replay.send(recorded)
            replay.rejected("not_authorised")
            assert replay.closed()


def test_server_without_a_secret_welcomes_an_auth_free_client_only_once():
    with serving() as server, Client(server.address) as client:
        client.login()
        client.send({"type": "auth", "proof": "00"})  # after login it is just an unknown request
        assert "unknown message type 'auth'" in client.rejected("malformed")


# -- frames over the limit and broken frames ----------------------------------------------------


@pytest.mark.parametrize("login, announced", [(False, HELLO_FRAME + 1), (False, 2 ** 32 - 1),
                                              (True, MAX_FRAME + 1), (True, 2 ** 32 - 1)])
def test_server_refuses_a_frame_over_the_limit_and_serves_on(login, announced):
    with serving() as server:
        with Client(server.address) as client:
            if login:
                client.login()
            client.raw(announced.to_bytes(4, "big"))
            assert f"a frame announces {announced:,} bytes" in client.rejected("too_large")
            assert client.closed()
        with Client(server.address) as other:
            other.login()
            other.send({"type": "get", "id": 1, "interval": [10, 19]})
            expect_rows(other.rows(1, 10), range(10, 20))
        assert server.stats["rejections"] == 1


def test_server_takes_a_hello_of_exactly_the_login_limit():
    head = encode({"type": "hello", "version": VERSION, "pad": ""})
    hello = encode({"type": "hello", "version": VERSION, "pad": "x" * (HELLO_FRAME + 4 - len(head))})
    assert len(hello) == 4 + HELLO_FRAME
    with serving() as server, Client(server.address) as client:
        client.raw(hello)
        assert client.receive()[0]["type"] == "welcome"


@pytest.mark.parametrize("payload, words", [
    (b"\x00\x00", "too short for its header length"),
    (b"\x00\x00\x00\x09{}", "runs past the payload"),
    (b"\x00\x00\x00\x03{x}", "not JSON"),
    (b"\x00\x00\x00\x02\xff\xfe", "not JSON"),
    (b"\x00\x00\x00\x02[]", 'not a JSON object with a "type"'),
    (b"\x00\x00\x00\x0b{\"type\": 1}", 'not a JSON object with a "type"'),
])
def test_server_closes_a_connection_sending_a_broken_frame(payload, words):
    with serving() as server, Client(server.address) as client:
        client.login()
        client.raw(len(payload).to_bytes(4, "big") + payload)
        assert words in client.rejected("malformed")
        assert client.closed()


# -- requests --------------------------------------------------------------------------------


@pytest.mark.parametrize("request_, kind", [
    ({"type": "get", "id": 3, "interval": [0, N]}, "out_of_range"),
    ({"type": "get", "id": 3, "indices": [-1]}, "out_of_range"),
    ({"type": "get", "id": 3, "interval": [5, 1]}, "malformed"),
    ({"type": "get", "id": 3}, "malformed"),
    ({"type": "put", "id": 3, "interval": [0, 1]}, "malformed"),
])
def test_server_rejects_a_bad_request_and_keeps_the_connection(request_, kind):
    with serving() as server, Client(server.address) as client:
        client.login()
        client.send(request_)
        client.rejected(kind, 3)
        client.send({"type": "get", "id": 4, "interval": [N - 2, N - 1]})
        expect_rows(client.rows(4, 2), [N - 2, N - 1])


@pytest.mark.parametrize("ident", [None, -1, "7", 1.5, True, [1]])
def test_server_rejects_a_get_without_a_usable_id(ident):
    with serving() as server, Client(server.address) as client:
        client.login()
        client.send({"type": "get", "id": ident, "interval": [0, 0]})
        header, _ = client.receive()
        assert (header["type"], header["kind"]) == ("error", "malformed") and 'needs an "id"' in header["message"]
        assert header.get("id") in (None, -1)


def test_server_answers_many_requests_in_flight_by_their_ids():
    rng = np.random.default_rng(5)
    asks = {}
    for ident in rng.permutation(40).tolist():
        if ident % 3:
            lo = int(rng.integers(0, N - 20))
            asks[ident] = ({"interval": [lo, lo + ident % 20]}, range(lo, lo + ident % 20 + 1))
        else:
            picked = rng.integers(0, N, size=ident % 7 + 1).tolist()
            asks[ident] = ({"indices": picked}, picked)
    with serving() as server, Client(server.address) as client:
        client.login()
        client.raw(b"".join(encode({"type": "get", "id": i, **ask}) for i, (ask, _) in asks.items()))
        answered = {}
        for _ in asks:  # each of these fits one part, so one frame answers each
            header, body = client.receive()
            assert header["type"] == "entries" and header["id"] not in answered
            assert header["first"] == 0 and header["count"] == len(asks[header["id"]][1])
            answered[header["id"]] = unpack_columns(header["columns"], body)
        for ident, (_, want) in asks.items():
            expect_rows(answered[ident], want)




def test_server_sends_a_response_over_a_frame_in_parts_of_whole_rows():
    images, labels = big_reader()
    with serving(readers.from_arrays(images, labels)) as server, Client(server.address) as client:
        client.login()
        client.send({"type": "get", "id": 9, "interval": [0, len(labels) - 1]})
        client.send({"type": "get", "id": 10, "indices": [149, 3, 3]})
        seen: dict[int, list] = {9: [], 10: []}
        while sum(h["count"] for h in seen[9]) < len(labels) or not seen[10]:
            header, body = client.receive()
            assert header["type"] == "entries"
            assert header["first"] == sum(h["count"] for h in seen[header["id"]])  # in order, none missing
            got = unpack_columns(header["columns"], body)
            assert len(body) <= BODY and header["count"] == len(got[0]) == len(got[1])
            seen[header["id"]].append(dict(header, data=got))
        assert [h["count"] for h in seen[9]] == [63, 63, 24]
        whole = [np.concatenate([h["data"][k] for h in seen[9]]) for k in (0, 1)]
        np.testing.assert_array_equal(whole[0], images)
        np.testing.assert_array_equal(whole[1], labels)
        (small,) = seen[10]
        np.testing.assert_array_equal(small["data"][0], images[[149, 3, 3]])


def test_server_answers_a_reader_failure_with_server_error_and_serves_on():
    reader = readers.map_readers(lambda x: 10 // x, readers.from_sequence([1, 2, 0, 5] + [1] * 96))  # (2 unchecked)
    with serving(reader) as server, Client(server.address) as client:
        client.login()
        client.send({"type": "get", "id": 1, "interval": [1, 2]})
        assert "ZeroDivisionError" in client.rejected("server_error", 1)
        client.send({"type": "get", "id": 2, "indices": [3, 0]})
        header, body = client.receive()
        assert header["id"] == 2 and unpack_columns(header["columns"], body).tolist() == [2, 10]


def test_server_answers_an_empty_request_with_one_empty_part():
    with serving() as server, Client(server.address) as client:
        client.login()
        client.send({"type": "get", "id": 0, "indices": []})
        header, body = client.receive()
        assert (header["type"], header["first"], header["count"]) == ("entries", 0, 0)
        assert [c.shape for c in unpack_columns(header["columns"], body)] == [(0,), (0,)]


def test_server_rejection_kinds_are_the_protocols():
    assert set(KINDS) >= {"out_of_range", "malformed", "too_large", "not_authorised", "unsupported_version",
                          "server_error"}


# -- fuzz: thousands of broken and hostile connections, then a normal client -------------------------


def test_server_a_connection_awaiting_its_answers_is_not_idle():
    # regression: the idle limit ran while a request was being answered, and cut the answer off
    release = threading.Event()
    release.set()

    def waiting(x):
        release.wait(WAIT)
        return x

    with serving(readers.map_readers(waiting, readers.np_array(np.arange(N))), idle_timeout=0.5,
                 drain_timeout=0.5) as server:
        release.clear()
        with Client(server.address) as client:
            client.login()
            client.send({"type": "get", "id": 1, "interval": [0, 2]})
            with Client(server.address) as idle:  # logged in after the request was sent, then idle
                idle.login()
                assert idle.closed()  # by its idle limit: the request has been waiting longer than that
            release.set()
            header, body = client.receive()
            assert header["id"] == 1 and unpack_columns(header["columns"], body).tolist() == [0, 1, 2]
            assert client.closed()  # with nothing under way, idle again: closed
        wait_until(lambda: sum(line.endswith("; idle for 0.5 s") for line in server.lines) == 2, WAIT,
                   lambda: f"both sessions' log lines, each closed as idle: {server.lines}")


def test_server_keeps_a_client_that_reads_slowly_but_steadily():
    # regression: a part not drained within frame_timeout dropped the client, though it was reading
    images, labels = big_reader(63)  # one part of 16 MiB
    with serving(readers.from_arrays(images, labels), frame_timeout=1.0) as server, \
            Client(server.address, receive_buffer=1 << 16) as client:
        client.login()
        client.send({"type": "get", "id": 1, "interval": [0, 62]})
        size, data = frame_length(client.exactly(4)), bytearray()
        for _ in range(size // (1 << 16) * 4):  # a few MiB a second: the part takes over a frame_timeout
            chunk = client.sock.recv(min(1 << 18, size - len(data)))
            assert chunk, f"the server dropped a client that was reading: {server.lines}"
            data += chunk
            if len(data) == size:
                break
            time.sleep(0.01)
        header, body = decode(bytes(data))
        np.testing.assert_array_equal(unpack_columns(header["columns"], body)[0], images)


def test_server_drops_a_client_that_stops_reading():
    images, labels = big_reader()
    with serving(readers.from_arrays(images, labels), frame_timeout=0.5) as server, \
            Client(server.address) as client:
        client.login()
        client.send({"type": "get", "id": 1, "interval": [0, len(labels) - 1]})
        wait_until(lambda: any("not reading its responses for 0.5 s" in line for line in server.lines), WAIT,
                   lambda: f"the server to drop a client that reads nothing: {server.lines}")
        assert client.closed()


@pytest.mark.parametrize("login", [False, True], ids=["before-login", "after-login"])
def test_server_answers_deeply_nested_json_as_malformed(login, caplog):
    # regression: json.loads raised RecursionError, which escaped the session as an unhandled exception
    header = b'{"type": "get", "id": 1, "indices": ' + b"[" * 2000 + b"]" * 2000 + b"}"
    payload = len(header).to_bytes(4, "big") + header
    with serving() as server:
        with Client(server.address) as client:
            if login:
                client.login()
            client.raw(len(payload).to_bytes(4, "big") + payload)
            client.rejected("malformed")
            assert client.closed()
        with Client(server.address) as other:
            other.login()
            other.send({"type": "get", "id": 2, "indices": [4]})
            expect_rows(other.rows(2, 1), [4])
    assert not [r for r in caplog.records if r.name == "asyncio"], "an exception escaped a session"




def test_session_reads_no_more_requests_once_the_server_stops():
    """Regression: a client that kept requests queued was answered for the whole drain time after a stop."""
    images, labels = big_reader()
    handle = readers.serve(readers.from_arrays(images, labels), log=[].append)
    try:
        with Client(handle.address) as client:
            client.login()
            client.raw(b"".join(encode({"type": "get", "id": i, "interval": [0, len(labels) - 1]})
                                for i in range(20)))
            header, _ = client.receive()  # the first answer is under way
            stopping = threading.Thread(target=handle.stop, name="test-stop")
            stopping.start()
            answered = {header["id"]}
            try:
                while True:
                    header, _ = client.receive()
                    answered.add(header["id"])
            except (EOFError, OSError):
                pass
            stopping.join(WAIT)
            assert not stopping.is_alive()
        assert len(answered) <= 2, f"answered {sorted(answered)} after the stop"
    finally:
        handle.stop()


def test_session_drops_a_client_taking_its_answer_slower_than_the_least_rate(monkeypatch):
    """A part holds budget the other clients need: a trickle of reads (under MIN_RATE) does not keep it."""
    import readers.network.session as session_module

    monkeypatch.setattr(session_module, "MIN_RATE", 1 << 30)
    images, labels = big_reader()
    with serving(readers.from_arrays(images, labels), frame_timeout=2.0) as server, Client(server.address) as client:
        client.login()
        client.send({"type": "get", "id": 1, "interval": [0, len(labels) - 1]})
        client.sock.settimeout(WAIT)
        for _ in range(150):  # about 3 MB/s, never nothing for frame_timeout
            if not client.sock.recv(1 << 16):
                break
            time.sleep(0.02)
        wait_until(lambda: any("reading its responses too slowly" in line for line in server.lines), WAIT,
                   lambda: f"the server to drop a trickling client: {server.lines}")


def test_server_refuses_an_empty_secret():
    with pytest.raises(ValueError, match="the secret is empty, which anyone can prove"):
        readers.serve(small_reader(), secret="")


def test_session_refuses_a_request_over_the_request_limit_and_serves_on():
    """After login a request is at most REQUEST_FRAME (2 MiB): parsing a 16 MiB list of indices cost ~90 MiB."""
    from readers.network.wire import REQUEST_FRAME

    with serving() as server:
        with Client(server.address) as client:
            client.login()
            client.raw((REQUEST_FRAME + 1).to_bytes(4, "big"))
            message = client.rejected("too_large")
            assert "REQUEST_FRAME, for a request: list the indices over several requests" in message
            assert client.closed()
        with Client(server.address) as other:
            other.login()
            other.send({"type": "get", "id": 1, "indices": list(range(N)) * 100})  # 20,000 indices: under the limit
            assert len(other.rows(1, N * 100)[0]) == N * 100


def test_server_takes_a_gets_indices_in_the_body_and_still_lists_in_the_header():
    with serving() as server, Client(server.address) as client:
        assert client.login()["binary_indices"] is True
        client.send({"type": "get", "id": 1, "indices": {"dtype": "<i8", "shape": [3]}},
                    np.array([9, 0, 4], "<i8").tobytes())
        client.send({"type": "get", "id": 2, "indices": [3, 1]})  # (a client of before: its list in the header)
        client.send({"type": "get", "id": 3, "indices": {"dtype": "<i8", "shape": [2]}}, bytes(8))
        expect_rows(client.rows(1, 3), [9, 0, 4])
        expect_rows(client.rows(2, 2), [3, 1])
        assert "needs 16 bytes, and the body has 8" in client.rejected("malformed", 3)
