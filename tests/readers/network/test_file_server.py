"""readers.network.file_server, the HTTP file server that the URL readers of issue 29 are tested against: ranges,
HEAD, ETag, injected faults and basic auth, as a plain client and fsspec's http filesystem see them."""
import http.client
import os
import threading

import pytest

from readers.network.file_server import Request, serve_folder
from tests.helpers.fsspec_io import io_threads, stop_io

DATA = bytes(range(256)) * 4  # 1024 bytes, each offset's byte known


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "data.bin").write_bytes(DATA)
    (tmp_path / "a.tar").write_bytes(b"a")
    (tmp_path / "b.tar").write_bytes(b"bb")
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.tar").write_bytes(b"ccc")
    return tmp_path


def ask(server, method, path, headers=None):
    """(status, headers, body) of one request on a fresh connection."""
    connection = http.client.HTTPConnection("127.0.0.1", int(server.url.rsplit(":", 1)[1]), timeout=10)
    try:
        connection.request(method, path, headers=headers or {})
        answer = connection.getresponse()
        return answer.status, answer.headers, answer.read()
    finally:
        connection.close()


@pytest.mark.parametrize("header, status, content_range, body", [
    ("bytes=10-19", 206, "bytes 10-19/1024", DATA[10:20]),
    ("bytes=1000-", 206, "bytes 1000-1023/1024", DATA[1000:]),
    ("bytes=-5", 206, "bytes 1019-1023/1024", DATA[-5:]),
    ("bytes=1020-5000", 206, "bytes 1020-1023/1024", DATA[1020:]),
    ("bytes=1024-", 416, "bytes */1024", b"range not satisfiable\n"),
    (None, 200, None, DATA),
])
def test_http_server_answers_byte_ranges(folder, header, status, content_range, body):
    with serve_folder(folder) as server:
        got_status, headers, got = ask(server, "GET", "/data.bin", {"Range": header} if header else {})
    assert (got_status, headers["Content-Range"], got) == (status, content_range, body)
    assert int(headers["Content-Length"]) == len(body) and headers["Accept-Ranges"] == "bytes"


def test_http_server_head_gives_size_etag_and_no_body(folder):
    with serve_folder(folder) as server:
        status, headers, body = ask(server, "HEAD", "/data.bin")
        assert (status, headers["Content-Length"], body) == (200, "1024", b"")
        assert headers["ETag"] and headers["Last-Modified"].endswith("GMT")
        assert ask(server, "HEAD", "/missing.bin")[0] == 404
        assert server.requests == [Request("HEAD", "/data.bin", None), Request("HEAD", "/missing.bin", None)]


def test_http_server_etag_changes_when_a_file_is_rewritten(folder):
    with serve_folder(folder) as server:
        before = ask(server, "HEAD", "/data.bin")[1]["ETag"]
        (folder / "data.bin").write_bytes(DATA[::-1])  # same size: only the modification time tells them apart
        stat = os.stat(folder / "data.bin")
        os.utime(folder / "data.bin", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        assert ask(server, "HEAD", "/data.bin")[1]["ETag"] != before


def test_http_server_fails_the_next_n_requests_then_serves(folder):
    with serve_folder(folder) as server:
        server.fail_next(2, status=503)
        assert [ask(server, "GET", "/data.bin")[0] for _ in range(3)] == [503, 503, 200]


def test_http_server_drop_next_cuts_the_body_short(folder):
    with serve_folder(folder) as server:
        server.drop_next(1, after_bytes=100)
        connection = http.client.HTTPConnection("127.0.0.1", int(server.url.rsplit(":", 1)[1]), timeout=10)
        try:
            connection.request("GET", "/data.bin", headers={"Range": "bytes=0-499"})
            answer = connection.getresponse()
            assert answer.status == 206
            with pytest.raises(http.client.IncompleteRead) as cut:
                answer.read()
        finally:
            connection.close()
        assert cut.value.partial == DATA[:100]
        assert ask(server, "GET", "/data.bin", {"Range": "bytes=0-499"})[2] == DATA[:500]  # one drop only


def test_http_server_asks_for_basic_auth(folder):
    with serve_folder(folder, auth=("user", "secret")) as server:
        assert ask(server, "GET", "/data.bin")[0] == 401
        assert ask(server, "GET", "/data.bin", {"Authorization": "Basic dXNlcjp3cm9uZw=="})[0] == 401  # user:wrong
        assert ask(server, "GET", "/data.bin", {"Authorization": "Basic dXNlcjpzZWNyZXQ="})[2] == DATA  # user:secret


def test_http_server_keeps_connections_alive_and_joins_their_threads_on_exit(folder):
    with serve_folder(folder) as server:
        connection = http.client.HTTPConnection("127.0.0.1", int(server.url.rsplit(":", 1)[1]), timeout=10)
        for _ in range(3):
            connection.request("GET", "/a.tar")
            assert connection.getresponse().read() == b"a"
        assert len([t for t in threading.enumerate() if t.name == f"test-http-{server.url.rsplit(':', 1)[1]}"]) == 1
        assert (len(server.requests), server.accepted) == (3, 1)
    # the connection is still open on the client's side: its thread was ended all the same
    assert [t.name for t in threading.enumerate() if t.name.startswith("test-http-")] == []
    connection.close()


def test_http_server_is_read_listed_and_globbed_by_fsspec(folder):
    fsspec = pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    with serve_folder(folder) as server:
        fs = fsspec.filesystem("http", skip_instance_cache=True)
        try:
            assert fs.cat_file(f"{server.url}/data.bin", start=100, end=200) == DATA[100:200]
            assert fs.size(f"{server.url}/data.bin") == 1024
            assert sorted(fs.ls(server.url, detail=False)) == [
                f"{server.url}/{name}" for name in ("a.tar", "b.tar", "data.bin", "notes.txt", "sub/")]
            assert sorted(fs.glob(server.url + "/*.tar")) == [f"{server.url}/a.tar", f"{server.url}/b.tar"]
            assert f"{server.url}/sub/c.tar" in fs.find(server.url)
            with fs.open(f"{server.url}/data.bin", block_size=64) as file:
                file.seek(500)
                assert file.read(10) == DATA[500:510]
            server.drop_next(1, after_bytes=10)
            with pytest.raises(Exception, match="received 10 of 100 bytes"):  # aiohttp's ClientPayloadError
                fs.cat_file(f"{server.url}/data.bin", start=0, end=100)
        finally:
            del fs
            stop_io()  # fsspec's IO thread and its sessions: later tests of this process fork their workers
        assert io_threads() == []
        assert any(r.range == "bytes=100-199" for r in server.requests)
        assert server.accepted < len(server.requests)  # aiohttp kept its connections alive
