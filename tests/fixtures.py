"""Fixtures for every test and doctest (loaded with ``-p tests.fixtures`` from setup.cfg).

Each test gets its os.environ restored afterwards, and a private per-user
cache, so tests never read or write the real ~/.cache or a user's
READERKIT_DATA. A launcher's variables (torchrun, SLURM, MPI) are removed, so
a suite run inside a cluster job still sees a single process.
"""
import os

import pytest

LAUNCHER = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"}


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
