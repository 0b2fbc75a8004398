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
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

import numpy as np

from readers.errors import BadValue
from readers.identity import differences
from readers.launch import job_id
from train.checkpoints.files import (
    FILE,
    CheckpointError,
    check_file,
    checkpoints_in,
    folder_in_use,
    hold_run,
    load_for_rank,
    rank_folder,
    read_meta,
)
from train.checkpoints.folders import START_OVER
from train.feeds import user_stacklevel

__all__ = ["Difference", "ResumeRefused", "check_folder", "check_meta", "claim", "open_run", "setting_differences",
           "this_job"]

Found = tuple[dict[str, np.ndarray], dict[str, Any]] | None
_claims: dict[tuple[str, int], dict[str, Any]] = {}  # (folder, thread) -> its claim's flags and checkpoint

_TOTALS = ("loss", "accuracy", "weight", "samples", "batches", "seconds")


class Difference(NamedTuple):
    """A setting whose value differs between the run that made a checkpoint and this one: its dotted name, as
    the checkpoint records it (``config.lr``), and its value then and now.

    >>> str(Difference("config.lr", 0.1, 0.2))
    'config.lr: 0.1 then, 0.2 now'
    """

    setting: str
    then: Any
    now: Any

    def __str__(self) -> str:
        return f"{self.setting}: {self.then!r} then, {self.now!r} now"


class ResumeRefused(CheckpointError):
    """A resume refused because the checkpoint was made with other settings or data: ``settings``, a
    ``Difference`` each, and ``data``, what differs in the data (a line each, ``readers.identity.differences``).
    The message lists both and says what to do; the command line names the settings by its options.

    >>> refused = ResumeRefused("ck", [Difference("seed", 0, 1)], ["length: 2 entries per pass, now 3"])
    >>> refused.settings[0].then, refused.settings[0].now
    (0, 1)
    >>> print(refused)
    ck: the checkpoint was made with other settings or data (seed: 0 then, 1 now; length: 2 entries per pass, now 3); resume with the same settings and data, or train into another checkpoint folder
    """

    def __init__(self, directory: str, settings: Sequence[Difference], data: Sequence[str] = ()):
        self.directory, self.settings, self.data = directory, [Difference(*d) for d in settings], list(data)
        differ = [*map(str, self.settings), *self.data]
        super().__init__(f"{directory}: the checkpoint was made with other settings or data ({'; '.join(differ)}); "
                         "resume with the same settings and data, or train into another checkpoint folder")

    def __reduce__(self) -> tuple:  # the default passes only the message back to __init__
        return type(self), (self.directory, self.settings, self.data)


def this_job(world_size: int) -> dict[str, Any]:
    """What a checkpoint records of the job that saved it: its size and launch (``readers.launch.job_id``).

    >>> this_job(4)
    {'world_size': 4, 'id': None}
    """
    return {"world_size": world_size, "id": job_id()}


def _of_this_job(path: str, job: dict[str, Any]) -> bool:
    """Whether the checkpoint at ``path`` was saved by a rank of this job: its folder is held by a live
    process now, or it records this job (the same launch, or without launch names, the same size)."""
    if folder_in_use(os.path.dirname(path)):
        return True
    saved = (read_meta(path) or {}).get("job")
    if not isinstance(saved, dict) or saved.get("world_size") != job["world_size"]:
        return False
    return None in (saved.get("id"), job["id"]) or saved.get("id") == job["id"]


def check_folder(directory: str, *, resume: bool, overwrite: bool, rank: int, world_size: int,
                 flags: tuple[str, str] = ("resume=True", "overwrite=True")) -> None:
    """Refuse what would lose or mix runs, from the files, their locks and the jobs they record; changes
    and loads nothing.

    Refuses a new run into a folder that holds a checkpoint (unless
    ``overwrite``), a resume from a folder without one, and a checkpoint path
    that is no file. For rank ``rank`` of a job of several, another rank's
    checkpoint counts unless a rank of this job saved it (see ``this_job``):
    one left by an earlier job, of fewer processes say, must not be trained
    beside. ``flags`` are the words for resume and overwrite in the messages
    (the CLI's are its options).

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> check_folder(folder.name, resume=False, overwrite=False, rank=0, world_size=1)
    >>> check_folder(folder.name + "/typo", resume=True, overwrite=False, rank=0, world_size=1, flags=("--resume", "--overwrite"))
    Traceback (most recent call last):
    ...
    train.checkpoints.folders.CheckpointError: --resume: .../typo does not exist; check the folder's name, or drop --resume to start a new run
    """
    resume_flag, overwrite_flag = flags
    if resume and overwrite:
        raise BadValue(f"{resume_flag} continues the checkpoint and {overwrite_flag} starts over, replacing it; "
                       "give one of them")
    held = checkpoints_in(directory)  # the files load_for_rank would read
    for path in held:
        check_file(path)
    if resume:
        if not held:
            where = "does not exist" if not os.path.exists(directory) else "holds no checkpoint"
            raise CheckpointError(f"{resume_flag}: {directory} {where}; check the folder's name, or drop "
                                  f"{resume_flag} to start a new run")
        return
    if world_size > 1:  # the other ranks of this job may have saved already
        mine = {os.path.join(rank_folder(directory, rank, world_size), FILE), os.path.join(directory, FILE)}
        job = this_job(world_size)
        held = [path for path in held if path in mine or not _of_this_job(path, job)]
    if held and not overwrite:
        raise CheckpointError(f"{directory} holds a checkpoint ({held[0]}); add {resume_flag} to continue that "
                              f"run, or {overwrite_flag} to start over and replace it")


def open_run(directory: str, *, resume: bool, overwrite: bool, rank: int, world_size: int,
             flags: tuple[str, str] = ("resume=True", "overwrite=True")) -> Found:
    """``check_folder``, then the checkpoint this rank resumes from, or None for a new run.

    A run that overwrites removes nothing here: the checkpoints it replaces
    go at its first save (``train.checkpoints.files.remove_checkpoints``), so a run
    that fails before it has anything to save leaves them as they were. Call
    it holding the run's locks (``train.checkpoints.files.hold_run``), or use ``claim``.

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> from train.checkpoints.files import save_checkpoint
    >>> _ = save_checkpoint(folder.name, {"w": np.zeros(1)}, {"pass": 1})
    >>> open_run(folder.name, resume=False, overwrite=True, rank=0, world_size=1), len(checkpoints_in(folder.name))
    (None, 1)
    """
    check_folder(directory, resume=resume, overwrite=overwrite, rank=rank, world_size=world_size, flags=flags)
    return load_for_rank(directory, rank, world_size) if resume else None


@contextmanager
def claim(directory: str, *, resume: bool, overwrite: bool, rank: int, world_size: int,
          flags: tuple[str, str] = ("resume=True", "overwrite=True")) -> Iterator[Found]:
    """Hold a run's checkpoint folder (``hold_run``) and give what ``open_run`` finds there, under the lock.

    Re-entrant in one thread, for the same ``resume`` and ``overwrite``: a
    caller that claims the folder first (the CLI, so that nothing it reads or
    writes can race another run) can then call ``train``, whose own claim
    gets the checkpoint the outer one loaded. Later claims inside it look at
    the folder afresh (a run inside may have saved). A ``resume`` from a
    folder that does not exist is refused before the lock would create it.

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> with claim(folder.name, resume=False, overwrite=False, rank=0, world_size=1) as found:
    ...     with claim(folder.name, resume=False, overwrite=False, rank=0, world_size=1) as again:
    ...         found, again
    (None, None)
    """
    key = (os.path.realpath(rank_folder(directory, rank, world_size)), threading.get_ident())
    where = {"resume": resume, "overwrite": overwrite, "rank": rank, "world_size": world_size, "flags": flags}
    outer = _claims.get(key)
    if outer is not None:
        if (outer["resume"], outer["overwrite"]) != (resume, overwrite):
            raise BadValue(f"{directory} is claimed already in this thread with resume={outer['resume']}, "
                           f"overwrite={outer['overwrite']}; a run inside the claim must use the same")
        found, outer["found"] = outer["found"], None
        yield found if found is not None else open_run(directory, **where)
        return
    if resume and not os.path.isdir(directory):
        check_folder(directory, **where)
    with hold_run(directory, rank, world_size):
        _claims[key] = {"resume": resume, "overwrite": overwrite, "found": open_run(directory, **where)}
        try:
            yield _claims[key]["found"]
        finally:
            del _claims[key]


def _whole(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 0


def _fault(path: str, field: str, wanted: str, value: Any) -> CheckpointError:
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    return CheckpointError(f"{path}: field {field!r} must be {wanted}, got {shown} ({type(value).__name__}); the "
                           f"file was damaged or edited: {START_OVER}, or restore it")


def _check_fields(path: str, meta: dict[str, Any], run: dict[str, Any]) -> None:
    for key in ("pass", "cursor", "reader_state", "totals", "history", *run):
        if key not in meta:
            raise CheckpointError(f"{path}: the checkpoint does not record {key!r} (made by another version?); "
                                  f"{START_OVER}")
    for key in ("pass", "cursor"):
        if not _whole(meta[key]):
            raise _fault(path, key, "a whole number >= 0", meta[key])
    state = meta["reader_state"]
    if not isinstance(state, dict) or state.get("pass") != meta["pass"] or state.get("cursor") != meta["cursor"]:
        raise _fault(path, "reader_state", f"the reader's get_state() at pass {meta['pass']}, entry "
                     f"{meta['cursor']} (the fields 'pass' and 'cursor')", state)
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


def setting_differences(key: str, then: Any, now: Any) -> list[Difference]:
    """The settings that differ under ``key``; a dict of settings (``config``) key by key.

    >>> setting_differences("config", {"lr": 0.1, "seed": 1}, {"lr": 0.2, "seed": 1})
    [Difference(setting='config.lr', then=0.1, now=0.2)]
    """
    if isinstance(then, dict) and isinstance(now, dict):
        return [d for name in sorted(set(then) | set(now), key=str)
                for d in setting_differences(f"{key}.{name}", then.get(name), now.get(name))]
    return [] if then == now else [Difference(key, then, now)]


def _migrate(path: str, meta: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint of an earlier version, which did not record some of what is compared now (the data's
    fingerprint, named by repr and length before; the model's settings): those parts as far as they can
    be told, with a warning that the rest goes unchecked this once."""
    unrecorded, meta = [], dict(meta)
    if "data" in run and "data" not in meta and "provider" in meta:
        unrecorded.append(f"what its data is (only the length, {meta.get('length')} entries, is checked)")
        meta["data"] = {"pipeline": run["data"]["pipeline"], "length": meta.get("length"), "content": None}
    if "model" in run and "model" not in meta and "pass" in meta:
        unrecorded.append("the model's settings (not checked)")
        meta["model"] = run["model"]
    if unrecorded:
        warnings.warn(f"{path} was made by an earlier readerkit, which did not record {' or '.join(unrecorded)}; "
                      "the next checkpoint records them", RuntimeWarning, stacklevel=user_stacklevel())
    return meta


def check_meta(directory: str, meta: dict[str, Any], run: dict[str, Any]) -> None:
    """Validate a checkpoint's fields, then refuse one made by a run whose settings or data differ.

    ``run`` holds the settings that decide the order of samples, and
    ``"data"``, the provider's ``readers.fingerprint``. A refusal
    (``ResumeRefused``) names every setting that differs (each key of a dict
    such as ``config``) and what differs in the data.

    >>> data = {"pipeline": ["from_sequence(str of 2)"], "length": 2, "content": "ab"}
    >>> state = {"pass": 1, "cursor": 0}
    >>> meta = {"pass": 1, "cursor": 0, "reader_state": state, "totals": None, "history": [], "seed": 0, "data": data}
    >>> check_meta("ck", meta, {"seed": 0, "data": data})
    >>> check_meta("ck", {**meta, "cursor": "3"}, {"seed": 0, "data": data})
    Traceback (most recent call last):
    ...
    train.checkpoints.folders.CheckpointError: ck/checkpoint.npz: field 'cursor' must be a whole number >= 0, got '3' (str); ...
    >>> check_meta("ck", meta, {"seed": 1, "data": {**data, "content": "ac"}})
    Traceback (most recent call last):
    ...
    train.checkpoints.resume.ResumeRefused: ck: the checkpoint was made with other settings or data (seed: 0 then, 1 now; content: the data itself differs (same pipeline and length, other values)); resume with the same settings and data, or train into another checkpoint folder
    """
    path = os.path.join(directory, FILE)
    meta = _migrate(path, meta, run)
    _check_fields(path, meta, run)
    settings: list[Difference] = []
    data: list[str] = []
    for key, value in run.items():
        if key == "data":
            if not isinstance(meta[key], dict):
                raise _fault(path, key, "an object (the data's fingerprint)", meta[key])
            data = differences(meta[key], value)
        else:
            settings += setting_differences(key, meta[key], value)
    if settings or data:
        raise ResumeRefused(directory, settings, data)
    length = run.get("data", {}).get("length")
    if length is not None and meta["cursor"] > length:
        raise CheckpointError(f"{directory}: the checkpoint is at entry {meta['cursor']} of a pass, past the "
                              f"provider's {length} entries")
