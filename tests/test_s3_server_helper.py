"""The test S3 server (tests/helpers/s3_server.py, fixtures ``s3_server`` and ``s3_bucket`` in tests/conftest.py)
that the URL readers of issue 29 are tested against: plain ``fsspec`` reaches it from the environment alone, it
checks signatures (a wrong secret is refused), and nothing reaches past this machine."""
import os
import socket
import urllib.request

import pytest

for _name in ("fsspec", "s3fs", "aiohttp", "boto3", "moto.server"):
    pytest.importorskip(_name)

import fsspec  # noqa: E402

from tests.helpers.fsspec_io import io_threads, stop_io  # noqa: E402
from tests.helpers.s3_server import serve_s3  # noqa: E402

DATA = bytes(range(256)) * 4


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "shard-0.tar").write_bytes(DATA)
    (tmp_path / "shard-1.tar").write_bytes(b"one")
    (tmp_path / "index.json").write_text("{}")
    (tmp_path / "deeper").mkdir()
    (tmp_path / "deeper" / "shard-2.tar").write_bytes(b"two")
    return tmp_path


def test_s3_server_serves_an_uploaded_folder_to_plain_fsspec(s3_server, s3_bucket, folder):
    keys = s3_server.upload(folder, s3_bucket, "data/train")
    assert keys == [f"data/train/{name}" for name in ("deeper/shard-2.tar", "index.json", "shard-0.tar", "shard-1.tar")]
    fs, path = fsspec.core.url_to_fs(f"s3://{s3_bucket}/data/train")  # no storage options: the environment says all
    assert sorted(fs.ls(path, detail=False)) == [f"{path}/{n}" for n in ("deeper", "index.json", "shard-0.tar",
                                                                         "shard-1.tar")]
    assert fs.glob(f"{path}/*.tar") == [f"{path}/shard-0.tar", f"{path}/shard-1.tar"]
    assert fs.cat_file(f"{path}/shard-0.tar", start=1000, end=1010) == DATA[1000:1010]
    info = fs.info(f"{path}/shard-0.tar")
    assert info["size"] == 1024 and info["ETag"].strip('"')
    with fsspec.open(f"s3://{s3_bucket}/data/train/deeper/shard-2.tar") as file:
        assert file.read() == b"two"


def test_s3_server_refuses_a_wrong_secret(s3_server, s3_bucket, folder):
    s3_server.upload(folder, s3_bucket)
    url = f"s3://{s3_bucket}/shard-1.tar"
    with s3_server.wrong_credentials():
        with pytest.raises(PermissionError, match="signature"):
            fsspec.filesystem("s3").ls(s3_bucket)
        with pytest.raises(PermissionError):
            with fsspec.open(url) as file:
                file.read()
    with fsspec.open(url) as file:  # the right secret again, the same key: only the secret made the difference
        assert file.read() == b"one"


def test_s3_server_environment_is_set_for_its_block_only(s3_service, monkeypatch):
    monkeypatch.setenv("AWS_PROFILE", "someones-own")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "https://elsewhere.example")
    fs = fsspec.filesystem("s3")
    with s3_service.environment():
        assert "AWS_PROFILE" not in os.environ and os.environ["AWS_ENDPOINT_URL_S3"] == s3_service.url
        assert fsspec.filesystem("s3") is not fs  # the cached filesystem of before is not reused
    assert os.environ["AWS_PROFILE"] == "someones-own"
    assert os.environ["AWS_ENDPOINT_URL_S3"] == "https://elsewhere.example"
    assert "AWS_SECRET_ACCESS_KEY" not in os.environ
    stop_io()


def test_s3_server_never_reaches_past_this_machine(s3_server, s3_bucket, monkeypatch, folder):
    local = {"127.0.0.1", "localhost", "::1"}
    tried = []

    def refuse(where):
        tried.append(where)
        raise OSError(f"test: no network past this machine ({where!r})")

    getaddrinfo, connect, connect_ex = socket.getaddrinfo, socket.socket.connect, socket.socket.connect_ex
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, *a, **k: getaddrinfo(host, *a, **k)
                        if host in local or host is None else refuse(host))
    monkeypatch.setattr(socket.socket, "connect", lambda self, address: connect(self, address)
                        if not isinstance(address, tuple) or address[0] in local else refuse(address))
    monkeypatch.setattr(socket.socket, "connect_ex", lambda self, address: connect_ex(self, address)
                        if not isinstance(address, tuple) or address[0] in local else refuse(address))
    s3_server.upload(folder, s3_bucket)
    fs = fsspec.filesystem("s3")
    assert fs.cat_file(f"{s3_bucket}/shard-0.tar", start=0, end=4) == DATA[:4] and fs.glob(f"{s3_bucket}/*.tar")
    assert tried == []  # the test process's side: boto3 and s3fs went to the server only
    assert s3_server.refused() == []  # the server's side: moto's child process refuses and records any other


def test_stop_io_ends_fsspecs_threads_and_fsspec_starts_afresh(s3_server, s3_bucket):
    fsspec.filesystem("s3").pipe(f"{s3_bucket}/x", b"x")
    assert "fsspecIO" in io_threads()
    stop_io()
    assert io_threads() == []
    assert fsspec.filesystem("s3").cat(f"{s3_bucket}/x") == b"x"  # a new filesystem, on a new loop


def test_serve_s3_ends_its_child_process():
    with serve_s3() as server:
        assert server.refused() == []
    with pytest.raises(OSError):
        urllib.request.urlopen(server.url, timeout=5)
