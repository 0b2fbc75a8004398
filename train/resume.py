"""A run's checkpoint folder: start a new run, resume one, and refuse what would lose or mix runs.

``open_run`` decides, under the folder's lock, between a new run and a
resume: a new run into a folder that holds a checkpoint is refused (unless
told to overwrite it), and a resume needs a checkpoint to resume from.
``check_meta`` validates every field of a checkpoint to resume from and
compares the run's settings and data with the ones it was made with.
"""
from __future__ import annotations

import numbers
import os
from typing import Any

import numpy as np

from readers.identity import differences
from train.checkpoint import (
    FILE,
    CheckpointError,
    checkpoints_in,
    load_for_rank,
    rank_folder,
    remove_checkpoints,
)

__all__ = ["check_folder", "check_meta", "open_run"]

_TOTALS = ("loss", "accuracy", "weight", "samples", "batches", "seconds")


def check_folder(directory: str, *, resume: bool, overwrite: bool, rank: int, world_size: int,
                 flags: tuple[str, str] = ("resume=True", "overwrite=True")) -> None:
    """Refuse what would lose or mix runs, from the names of the files alone; changes and loads nothing.

    Refuses a new run into a folder that holds a checkpoint (unless
    ``overwrite``) and a resume from a folder without one. ``flags`` are the
    words for resume and overwrite in the messages (the CLI's are its options).

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> check_folder(folder.name, resume=False, overwrite=False, rank=0, world_size=1)
    >>> check_folder(folder.name + "/typo", resume=True, overwrite=False, rank=0, world_size=1, flags=("--resume", "--overwrite"))
    Traceback (most recent call last):
    ...
    train.checkpoint.CheckpointError: --resume: .../typo does not exist; check the folder's name, or drop --resume to start a new run
    """
    resume_flag, overwrite_flag = flags
    if resume and overwrite:
        raise ValueError(f"{resume_flag} continues the checkpoint and {overwrite_flag} starts over, replacing it; "
                         "give one of them")
    held = checkpoints_in(directory)  # the files load_for_rank would read
    if resume:
        if not held:
            where = "does not exist" if not os.path.exists(directory) else "holds no checkpoint"
            raise CheckpointError(f"{resume_flag}: {directory} {where}; check the folder's name, or drop "
                                  f"{resume_flag} to start a new run")
        return
    if world_size > 1:  # the other ranks of this job may have saved already: only this rank's and the folder's
        mine = {os.path.join(rank_folder(directory, rank, world_size), FILE), os.path.join(directory, FILE)}
        held = [path for path in held if path in mine]
    if held and not overwrite:
        raise CheckpointError(f"{directory} holds a checkpoint ({held[0]}); add {resume_flag} to continue that "
                              f"run, or {overwrite_flag} to start over and replace it")


def open_run(directory: str, *, resume: bool, overwrite: bool, rank: int,
             world_size: int) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
    """``check_folder``, then the checkpoint this rank resumes from, or for a new run None (after removing
    the checkpoints it replaces, when it overwrites).

    Call it holding the folder's lock (``train.checkpoint.lock_folder``).

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> from train.checkpoint import save_checkpoint
    >>> _ = save_checkpoint(folder.name, {"w": np.zeros(1)}, {"pass": 1})
    >>> open_run(folder.name, resume=False, overwrite=True, rank=0, world_size=1), checkpoints_in(folder.name)
    (None, [])
    """
    check_folder(directory, resume=resume, overwrite=overwrite, rank=rank, world_size=world_size)
    if resume:
        return load_for_rank(directory, rank, world_size)
    if overwrite:
        remove_checkpoints(directory, rank, world_size)
    return None


def _whole(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 0


def _fault(path: str, field: str, wanted: str, value: Any) -> CheckpointError:
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    return CheckpointError(f"{path}: field {field!r} must be {wanted}, got {shown} ({type(value).__name__}); the "
                           "file was damaged or edited: delete it to start afresh, or restore it")


def _check_fields(path: str, meta: dict[str, Any], run: dict[str, Any]) -> None:
    for key in ("pass", "cursor", "reader_state", "totals", "history", *run):
        if key not in meta:
            raise CheckpointError(f"{path}: the checkpoint does not record {key!r} (made by another version?); "
                                  "delete it to start afresh")
    for key in ("pass", "cursor"):
        if not _whole(meta[key]):
            raise _fault(path, key, "a whole number >= 0", meta[key])
    if not isinstance(meta["reader_state"], dict):
        raise _fault(path, "reader_state", "a JSON object (the reader's get_state())", meta["reader_state"])
    totals = meta["totals"]
    if totals is not None:
        if not isinstance(totals, dict) or set(totals) != set(_TOTALS):
            raise _fault(path, "totals", f"null or an object with the keys {list(_TOTALS)}", totals)
        for key, value in totals.items():
            if not isinstance(value, numbers.Real) or isinstance(value, bool):  # NaN is allowed: a metric never reported
                raise _fault(path, f"totals.{key}", "a number", value)
    history = meta["history"]
    if not isinstance(history, list):
        raise _fault(path, "history", "a list of pass records", history)
    for i, record in enumerate(history):
        if not isinstance(record, dict) or not _whole(record.get("pass")):
            raise _fault(path, f"history[{i}]", "an object with a 'pass' number", record)


def check_meta(directory: str, meta: dict[str, Any], run: dict[str, Any]) -> None:
    """Validate a checkpoint's fields, then refuse one made by a run whose settings or data differ.

    ``run`` holds the settings that decide the order of samples, and
    ``"data"``, the provider's ``readers.fingerprint``.

    >>> data = {"pipeline": ["from_sequence(str of 2)"], "length": 2, "content": "ab"}
    >>> meta = {"pass": 1, "cursor": 0, "reader_state": {}, "totals": None, "history": [], "seed": 0, "data": data}
    >>> check_meta("ck", meta, {"seed": 0, "data": data})
    >>> check_meta("ck", {**meta, "cursor": "3"}, {"seed": 0, "data": data})
    Traceback (most recent call last):
    ...
    train.checkpoint.CheckpointError: ck/checkpoint.npz: field 'cursor' must be a whole number >= 0, got '3' (str); ...
    >>> check_meta("ck", meta, {"seed": 0, "data": {**data, "content": "ac"}})
    Traceback (most recent call last):
    ...
    train.checkpoint.CheckpointError: ck: the checkpoint was made on other data (content: the data itself differs (same pipeline and length, other values)); resume on the data it was made on, or train into another checkpoint folder
    """
    path = os.path.join(directory, FILE)
    _check_fields(path, meta, run)
    for key, value in run.items():
        if key == "data":
            if not isinstance(meta[key], dict):
                raise _fault(path, key, "an object (the data's fingerprint)", meta[key])
            differ = differences(meta[key], value)
            if differ:
                raise CheckpointError(f"{directory}: the checkpoint was made on other data ({'; '.join(differ)}); "
                                      "resume on the data it was made on, or train into another checkpoint folder")
        elif meta[key] != value:
            raise CheckpointError(
                f"{directory}: the checkpoint was made with {key}={meta[key]!r}, not {value!r}; resume with the "
                "same setting, or train into another checkpoint folder")
    length = run.get("data", {}).get("length")
    if length is not None and meta["cursor"] > length:
        raise CheckpointError(f"{directory}: the checkpoint is at entry {meta['cursor']} of a pass, past the "
                              f"provider's {length} entries")
