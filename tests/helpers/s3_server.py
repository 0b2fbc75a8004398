"""An S3-compatible server for the tests of reading ``s3://`` URLs (issue 29): moto's server on 127.0.0.1.

``with serve_s3() as server:`` starts moto's ``ThreadedMotoServer`` on a free port in a child process (so that the
test process keeps no server thread, which would make prefetch spawn its workers instead of forking them, and
keeps none of moto's module-global state), with its request log silenced and every connection past 127.0.0.1
refused (and recorded: ``server.refused()``). moto accepts any key unless its IAM authentication is on
(``INITIAL_NO_AUTH_ACTION_COUNT``, set through its ``/moto-api/reset-auth`` endpoint), so the server makes an IAM
user allowed ``s3:*`` and from then on answers only requests signed with that user's key and secret.

``server.environment()`` is a block with the environment a user would set (key, secret, region and
``AWS_ENDPOINT_URL_S3``, which botocore, hence s3fs, reads whenever a filesystem is made; ``FSSPEC_S3_ENDPOINT_URL``
would be read only when fsspec is imported), so plain ``fsspec.open("s3://bucket/key")`` reaches the server with no
storage options in code; ``server.wrong_credentials()`` is the same with a wrong secret (moto answers 403
SignatureDoesNotMatch, which s3fs raises as ``PermissionError``). Each block clears s3fs's cached filesystems on
entry and exit. tests/conftest.py starts one server a test process (fixtures ``s3_server``, ``s3_bucket``).
"""
from __future__ import annotations

import contextlib
import itertools
import json
import os
import select
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import boto3
import s3fs

REGION = "us-east-1"
USER = "readerkit-tests"
WRONG_SECRET = "not-the-secret-of-this-key"
START_WAIT = 60.0  # seconds: bound on the wait for the child to say its port (moto's imports take about 0.3 s)
STOP_WAIT = 10.0
REFUSED = "readerkit-tests refused a connection to "
#: The child: moto's server, no network past this machine, until its stdin closes (the test process ends it, or dies).
CHILD = f"""
import logging, os, socket, sys
LOCAL = {{"127.0.0.1", "localhost", "::1", None}}
def refuse(where):
    print({REFUSED!r} + repr(where), file=sys.stderr, flush=True)
    raise OSError("no network past this machine in the tests: " + repr(where))
getaddrinfo, connect, connect_ex = socket.getaddrinfo, socket.socket.connect, socket.socket.connect_ex
socket.getaddrinfo = lambda host, *a, **k: getaddrinfo(host, *a, **k) if host in LOCAL else refuse(host)
socket.socket.connect = lambda self, to: (connect(self, to) if not isinstance(to, tuple) or to[0] in LOCAL
                                          else refuse(to))
socket.socket.connect_ex = lambda self, to: (connect_ex(self, to) if not isinstance(to, tuple) or to[0] in LOCAL
                                             else refuse(to))
logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every request through werkzeug's logger
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print(server.get_host_and_port()[1], flush=True)
sys.stdin.read()
os._exit(0)
"""
_buckets = itertools.count()


class S3Server:
    """A running moto server (``serve_s3`` makes it): its ``url``, the ``key`` and ``secret`` it accepts."""

    def __init__(self, url: str, key: str, secret: str, log):
        self.url, self.key, self.secret = url, key, secret
        self.log = log  # the child's stderr: an open file while it runs, its text once it has stopped

    def __repr__(self) -> str:
        return f"S3Server({self.url!r})"

    def refused(self) -> list[str]:
        """The addresses past 127.0.0.1 the server tried to reach (and was refused), as ``repr`` strings."""
        text = self.log if isinstance(self.log, str) else written(self.log)
        return [line[len(REFUSED):] for line in text.splitlines() if line.startswith(REFUSED)]

    def variables(self, secret: str | None = None) -> dict[str, str]:
        """The environment a user of this server sets (``secret`` in place of the right one, if given)."""
        return {"AWS_ACCESS_KEY_ID": self.key, "AWS_SECRET_ACCESS_KEY": secret or self.secret,
                "AWS_DEFAULT_REGION": REGION, "AWS_ENDPOINT_URL_S3": self.url, "AWS_ENDPOINT_URL": self.url,
                # nothing of this machine's own AWS set-up, and no instance-metadata lookups on the network
                "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
                "AWS_EC2_METADATA_DISABLED": "true"}

    @contextlib.contextmanager
    def environment(self, secret: str | None = None) -> Iterator[S3Server]:
        """Set this server's environment for the block (every other ``AWS_*`` variable removed), and restore the
        one before after it; s3fs's cached filesystems are dropped on entry and exit, so each side makes its own."""
        saved = os.environ.copy()
        for name in [n for n in os.environ if n.startswith(("AWS_", "FSSPEC_S3"))]:
            del os.environ[name]
        os.environ.update(self.variables(secret))
        s3fs.S3FileSystem.clear_instance_cache()
        try:
            yield self
        finally:
            s3fs.S3FileSystem.clear_instance_cache()
            os.environ.clear()
            os.environ.update(saved)

    def wrong_credentials(self) -> contextlib.AbstractContextManager[S3Server]:
        """``environment()`` with a wrong secret: every request to the server is refused (403)."""
        return self.environment(WRONG_SECRET)

    def client(self):
        """A boto3 S3 client of this server, whatever the environment says."""
        return boto3.client("s3", endpoint_url=self.url, region_name=REGION, aws_access_key_id=self.key,
                            aws_secret_access_key=self.secret)

    def make_bucket(self, name: str | None = None) -> str:
        """Create a bucket (a fresh name if none is given) and return its name."""
        name = name or f"test-bucket-{next(_buckets)}"
        self.client().create_bucket(Bucket=name)
        return name

    def upload(self, folder, bucket: str, prefix: str = "") -> list[str]:
        """Put every file under ``folder`` into ``bucket`` at ``prefix/relative/path``; the keys, sorted."""
        client, keys = self.client(), []
        for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
            key = "/".join(filter(None, [prefix.strip("/"), path.relative_to(folder).as_posix()]))
            client.upload_file(str(path), bucket, key)
            keys.append(key)
        return keys


def written(file) -> str:
    """What the child has written to ``file`` so far (read without moving the offset it shares with the child)."""
    return os.pread(file.fileno(), os.fstat(file.fileno()).st_size, 0).decode(errors="replace")


def set_auth(url: str, count: float) -> None:
    """Make moto check signatures after ``count`` more requests (0: from now; inf: never)."""
    request = urllib.request.Request(f"{url}/moto-api/reset-auth", data=str(count).encode(), method="POST",
                                     headers={"Content-Type": "text/plain"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        answer.read()


def iam_user(url: str) -> tuple[str, str]:
    """The key and secret of a new IAM user allowed every S3 action (made while moto checks no signature)."""
    iam = boto3.client("iam", endpoint_url=url, region_name=REGION, aws_access_key_id="setup",
                       aws_secret_access_key="setup")
    iam.create_user(UserName=USER)
    policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
    iam.put_user_policy(UserName=USER, PolicyName="s3", PolicyDocument=json.dumps(policy))
    made = iam.create_access_key(UserName=USER)["AccessKey"]
    return made["AccessKeyId"], made["SecretAccessKey"]


@contextlib.contextmanager
def serve_s3() -> Iterator[S3Server]:
    """Run moto's S3 server on 127.0.0.1 (a free port), checking signatures, in a child process for the block.

    >>> with serve_s3() as server, server.environment():
    ...     bucket = server.make_bucket()
    ...     import fsspec
    ...     with fsspec.open(f"s3://{bucket}/hello.txt", "wb") as file:
    ...         _ = file.write(b"hello")
    ...     with fsspec.open(f"s3://{bucket}/hello.txt") as file:
    ...         print(file.read())
    b'hello'
    >>> from tests.helpers.fsspec_io import stop_io
    >>> stop_io()  # fsspec's IO thread, which would make later tests spawn their process workers
    """
    environment = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    with tempfile.TemporaryFile() as log:
        child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=log, env=environment)
        server = None
        try:
            ready, _, _ = select.select([child.stdout], [], [], START_WAIT)
            port = child.stdout.readline().strip() if ready else b""
            if not port.isdigit():
                raise RuntimeError(f"moto's server did not start within {START_WAIT} s (exit code {child.poll()}): "
                                   f"{written(log)[-2000:]}")
            url = f"http://127.0.0.1:{int(port)}"
            key, secret = iam_user(url)
            set_auth(url, 0)
            server = S3Server(url, key, secret, log)
            yield server
        finally:
            child.stdin.close()  # the child ends when its stdin closes
            try:
                child.wait(STOP_WAIT)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(STOP_WAIT)
            child.stdout.close()
            if server is not None:  # what it logged stays readable after the block
                server.log = written(log)
