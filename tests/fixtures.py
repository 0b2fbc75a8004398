"""Fixtures for every test and doctest (loaded with ``-p tests.fixtures`` from setup.cfg).

Each test gets its os.environ restored afterwards, and a private per-user
cache, so tests never read or write the real ~/.cache or a user's
READERKIT_DATA. A launcher's variables (torchrun, SLURM, MPI) are removed, so
a suite run inside a cluster job still sees a single process. Numerical
libraries run one thread a process (see below).
"""
import os

import pytest

LAUNCHER = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"}

# One BLAS and OpenMP thread a process, set before anything imports numpy or torch (this plugin loads first), and
# inherited by every process the tests start. The suite runs in several processes at once (xdist workers, pool
# workers, children), and OpenBLAS's idle threads spin: on a machine busier than its cores, a 10 s training
# example took 161 s instead of 26 s, past the 60 s a test may run. A value the user set is kept.
for _threads in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")

# tqdm (which Hugging Face datasets imports) starts a monitor thread with its first bar; a process with other
# threads than its main one makes prefetch pick 'spawn' over 'fork', so one test that touched datasets changed the
# start method, and with it the results, of every later test in its worker. No monitor thread in the tests.
try:
    import tqdm
except ImportError:
    pass
else:
    tqdm.tqdm.monitor_interval = 0
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")


@pytest.fixture(scope="session")
def _session_cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("xdg-cache"))


@pytest.fixture(autouse=True)
def _isolated_environment(_session_cache):
    saved = os.environ.copy()
    os.environ["XDG_CACHE_HOME"] = _session_cache
    os.environ.pop("READERKIT_DATA", None)
    for name in list(os.environ):
        if name in LAUNCHER or name.startswith(("SLURM_", "OMPI_COMM_WORLD_", "PMI_", "MPI_LOCAL")):
            del os.environ[name]
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="session")
def postgres_server():
    """One real PostgreSQL server for the session (tests/helpers/postgres_server.py); skipped, saying why, where
    none can start (no PostgreSQL binaries, no psycopg), unless READERKIT_REQUIRE_POSTGRES=1 (CI) makes that fail."""
    from tests.helpers.postgres_server import PostgresServer, missing

    why = missing()
    if why is not None:
        if os.environ.get("READERKIT_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"READERKIT_REQUIRE_POSTGRES=1, but no PostgreSQL server can start: {why}")
        pytest.skip(why)
    server = PostgresServer()
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(params=["sqlite", "postgres"])
def store_db(request, tmp_path):
    """A pipeline store's ``db`` on each backend: a sqlite file's path (not made yet), or the URL of a fresh, empty
    PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "pipelines.db")
    return request.getfixturevalue("postgres_server").database()
