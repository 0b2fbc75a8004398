"""A real PostgreSQL server for the tests: ``initdb`` and ``pg_ctl`` of the system's PostgreSQL, in a temporary
folder, listening on 127.0.0.1 at a free port (and a Unix socket in that folder), stopped at the end.

``PostgresServer.start()`` makes the cluster (fsync off: the tests need no
durability against power cuts), with two roles: ``readerkit``, trusted from
127.0.0.1, and ``secretive``, whose password (``PASSWORD``) the server asks
for (scram-sha-256), for the tests of passwords and their redaction. Run as
root, the server runs as the ``postgres`` user (initdb refuses root), the
folder handed to it. ``database()`` makes a fresh database and gives its URL;
``restart()`` restarts the server as an operator would (``pg_ctl restart -m
fast``: every connection is cut); ``stop()`` stops it and deletes the folder.
``missing()`` says why no server can be started here (no binaries, no
psycopg), for a skip's reason. The binaries are found on the PATH, then under
``/usr/lib/postgresql/*/bin`` (Debian's layout), the newest first.

Importing this module starts nothing.
"""
from __future__ import annotations

import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile

__all__ = ["PASSWORD", "PostgresServer", "find_binary", "missing"]

PASSWORD = "s3cret-Pw"
SUPERUSER, SECRETIVE = "readerkit", "secretive"
_HBA = f"""
local all all trust
host all {SECRETIVE} 127.0.0.1/32 scram-sha-256
host all all 127.0.0.1/32 trust
"""


def find_binary(name: str) -> str | None:
    """The path of PostgreSQL's ``name`` (initdb, pg_ctl), or None."""
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
                      key=lambda p: [int(part) if part.isdigit() else 0 for part in p.split("/")[4].split(".")])
    return versions[-1] if versions else None


def missing() -> str | None:
    """Why no server can be started here, or None."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'readerkit[postgres]')"
    for name in ("initdb", "pg_ctl"):
        if find_binary(name) is None:
            return f"no PostgreSQL {name} on the PATH or in /usr/lib/postgresql/*/bin (apt-get install postgresql)"
    if os.geteuid() == 0 and not _as_postgres_possible():
        return "running as root, and there is no 'postgres' user to run the server as (initdb refuses root)"
    return None


def _as_postgres_possible() -> bool:
    import pwd
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return False
    return shutil.which("runuser") is not None or shutil.which("setpriv") is not None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """One server for a test session (see the module)."""

    def __init__(self):
        self.folder = tempfile.mkdtemp(prefix="readerkit-pg-")
        self.data = os.path.join(self.folder, "data")
        self.port = 0
        self._names = itertools.count()
        self._root = os.geteuid() == 0

    def _run(self, *command: str, timeout: float = 120) -> None:
        if self._root:  # (the server and its files belong to the postgres user)
            command = ("runuser", "-u", "postgres", "--", *command) if shutil.which("runuser") else \
                ("setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", *command)
        subprocess.run(command, check=True, timeout=timeout, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       cwd=self.folder)

    def _options(self) -> str:
        return f"-h 127.0.0.1 -p {self.port} -k {self.folder} -F"

    def start(self) -> PostgresServer:
        if self._root:
            shutil.chown(self.folder, "postgres", "postgres")
        password_file = os.path.join(self.folder, "password")
        with open(password_file, "w") as file:
            file.write(PASSWORD + "\n")
        if self._root:
            shutil.chown(password_file, "postgres", "postgres")
        self._run(find_binary("initdb"), "-D", self.data, "-U", SUPERUSER, "--auth=trust", "-E", "UTF8",
                  "--no-locale")
        with open(os.path.join(self.data, "pg_hba.conf"), "w") as file:
            file.write(_HBA)
        for attempt in range(3):  # (a free port may be taken before the server binds it)
            self.port = _free_port()
            try:
                self._run(find_binary("pg_ctl"), "-D", self.data, "-l", os.path.join(self.folder, "log"), "-o",
                          self._options(), "-w", "-t", "60", "start")
                break
            except subprocess.CalledProcessError:
                if attempt == 2:
                    raise
        with self.connect("postgres") as db:
            db.execute(f"CREATE ROLE {SECRETIVE} LOGIN PASSWORD '{PASSWORD}'")
        return self

    def url(self, dbname: str, user: str = SUPERUSER) -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{dbname}"

    def connect(self, dbname: str):
        import psycopg
        return psycopg.connect(self.url(dbname), autocommit=True)

    def database(self, owner: str = SUPERUSER) -> str:
        """A fresh empty database (owned by ``owner``), as the URL of its superuser."""
        name = f"t{os.getpid()}_{next(self._names)}"
        with self.connect("postgres") as db:
            db.execute(f"CREATE DATABASE {name} OWNER {owner}")
        return self.url(name)

    def restart(self) -> None:
        self._run(find_binary("pg_ctl"), "-D", self.data, "-l", os.path.join(self.folder, "log"), "-o",
                  self._options(), "-m", "fast", "-w", "-t", "60", "restart")

    def stop(self) -> None:
        try:
            if os.path.exists(os.path.join(self.data, "postmaster.pid")):
                self._run(find_binary("pg_ctl"), "-D", self.data, "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
