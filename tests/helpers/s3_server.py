"""An S3-compatible server for the tests of reading ``s3://`` URLs (issue 29): moto's server on 127.0.0.1.

``with serve_s3() as server:`` starts moto's ``ThreadedMotoServer`` on a free port with its request log silenced
and signature checking on: moto accepts any key unless IAM authentication is enabled
(``INITIAL_NO_AUTH_ACTION_COUNT``, set through its ``/moto-api/reset-auth`` endpoint), so the server makes an IAM
user allowed ``s3:*`` and from then on answers only requests signed with that user's key and secret.
``server.environment()`` is a block with the environment a user would set (key, secret, region and
``AWS_ENDPOINT_URL_S3``, which botocore, hence s3fs, reads whenever a filesystem is made), so plain
``fsspec.open("s3://bucket/key")`` reaches the server with no storage options in code;
``server.wrong_credentials()`` is the same with a wrong secret (moto answers 403 SignatureDoesNotMatch, which s3fs
raises as ``PermissionError``). Each block clears s3fs's cached filesystems on entry and exit.

moto keeps its buckets and users in module globals: every server of a process shares them, so buckets are named
once a process (``make_bucket``). tests/conftest.py starts one server a test process (fixture ``s3_server``).
"""
from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import boto3
import s3fs
from moto.server import ThreadedMotoServer

REGION = "us-east-1"
USER = "readerkit-tests"
WRONG_SECRET = "not-the-secret-of-this-key"
#: moto's state is the process's, not a server's: the IAM user is made once and every later server uses its key.
_credentials: dict[str, str] = {}
_buckets = itertools.count()


class S3Server:
    """A running moto server (``serve_s3`` makes it): its ``url``, the ``key`` and ``secret`` it accepts."""

    def __init__(self, url: str, key: str, secret: str):
        self.url, self.key, self.secret = url, key, secret

    def __repr__(self) -> str:
        return f"S3Server({self.url!r})"

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
        """Create a bucket (a fresh name if none is given: unique in this process) and return its name."""
        name = name or f"test-bucket-{os.getpid()}-{next(_buckets)}"
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


def set_auth(url: str, count: float) -> float:
    """Make moto check signatures after ``count`` more requests (0: from now; inf: never); the count before."""
    request = urllib.request.Request(f"{url}/moto-api/reset-auth", data=str(count).encode(), method="POST",
                                     headers={"Content-Type": "text/plain"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return float(json.load(answer)["PREVIOUS_INITIAL_NO_AUTH_ACTION_COUNT"])


def iam_user(url: str) -> tuple[str, str]:
    """The key and secret of an IAM user allowed every S3 action, made while moto checks no signature."""
    if not _credentials:
        iam = boto3.client("iam", endpoint_url=url, region_name=REGION, aws_access_key_id="setup",
                           aws_secret_access_key="setup")
        iam.create_user(UserName=USER)
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
        iam.put_user_policy(UserName=USER, PolicyName="s3", PolicyDocument=json.dumps(policy))
        made = iam.create_access_key(UserName=USER)["AccessKey"]
        _credentials.update(key=made["AccessKeyId"], secret=made["SecretAccessKey"])
    return _credentials["key"], _credentials["secret"]


@contextlib.contextmanager
def serve_s3() -> Iterator[S3Server]:
    """Run moto's S3 server on 127.0.0.1 (a free port), checking signatures, for the block.

    >>> with serve_s3() as server, server.environment():
    ...     bucket = server.make_bucket()
    ...     import fsspec
    ...     with fsspec.open(f"s3://{bucket}/hello.txt", "wb") as file:
    ...         _ = file.write(b"hello")
    ...     with fsspec.open(f"s3://{bucket}/hello.txt") as file:
    ...         print(file.read())
    b'hello'
    """
    log = logging.getLogger("werkzeug")  # moto's server logs every request through werkzeug's logger
    level = log.level
    log.setLevel(logging.ERROR)
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    try:
        host, port = moto.get_host_and_port()
        url = f"http://{host}:{port}"
        previous = set_auth(url, float("inf"))  # another server's check may be on: the state is the process's
        try:
            key, secret = iam_user(url)
        finally:
            set_auth(url, 0)
        try:
            yield S3Server(url, key, secret)
        finally:
            set_auth(url, previous)
    finally:
        moto.stop()
        log.setLevel(level)
