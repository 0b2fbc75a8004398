"""Helpers for tests that play the ranks of a job: the launcher's variables, and sharded entries.

tests/fixtures.py gives every test an os.environ without launcher variables,
and restores it afterwards.
"""
from __future__ import annotations

import os


def set_env(monkeypatch, **variables) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, str(value))


def as_rank(rank: int, world: int, local_world: int | None = None, node: int | None = None) -> None:
    """os.environ of a torchrun rank (no monkeypatch: hypothesis reuses the test's fixtures)."""
    local_world = world if local_world is None else local_world
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank % local_world),
                      LOCAL_WORLD_SIZE=str(local_world), GROUP_RANK=str(rank // local_world if node is None else node))


def numbers_to(n: int):
    def numbers():
        yield from range(n)
    return numbers


def real(entries, equalize):
    """The sample values of a shard's entries, without pads (weight 0.0) when padded."""
    if equalize != "pad":
        return list(entries)
    return [value for value, weight in entries if weight == 1.0]


def flatten(batches):
    return [entry for b in batches for entry in b]

