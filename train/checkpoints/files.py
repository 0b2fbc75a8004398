"""Checkpoints: the model's state and the data position in one file, written atomically.

A checkpoint is a ``.npz`` archive (no pickle): the model's arrays under
``model/<name>``, and a JSON document under ``meta`` with the position in
the data, the seed and whatever else the driver needs to resume.
"""
from __future__ import annotations

import glob
import json
import os
import re
import signal
import tempfile
import threading
import warnings
import zipfile
from typing import Any

import numpy as np

from readers.errors import BadType, make_folder
from train.checkpoints.folders import (
    FILE,
    START_OVER,
    CheckpointError,
    FolderInUse,
    folder_in_use,
    held_by_this_process,
    hold_run,
    lock_folder,
    rank_folder,
    rank_folders,
)
from train.feeds import user_stacklevel

__all__ = ["CheckpointError", "FolderInUse", "check_file", "checkpoints_in", "folder_in_use", "hold_run",
           "load_checkpoint", "load_for_rank", "lock_folder", "rank_folder", "read_meta", "remove_checkpoints",
           "save_checkpoint"]
_PART = re.compile(r"^\.checkpoint\.(\d+)\.[^.]+\.npz\.part$")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def _sweep_parts(directory: str) -> None:
    """Remove part files that saves killed before their rename left behind, never a live writer's.

    In a folder this process holds exclusively (``lock_folder``) every part
    file is stale, even one whose pid a new process has taken since.
    """
    mine = held_by_this_process(directory)
    for path in glob.glob(os.path.join(directory, ".checkpoint.*.npz.part")):
        match = _PART.match(os.path.basename(path))
        if mine or match is None or not _alive(int(match.group(1))) or int(match.group(1)) == os.getpid():
            try:
                os.unlink(path)
            except FileNotFoundError:  # another process swept it first
                pass


def save_checkpoint(directory: str, model_state: dict[str, Any], meta: dict[str, Any]) -> str:
    """Write ``model_state`` and ``meta`` to ``directory/checkpoint.npz`` atomically.

    A crash at any moment leaves either the previous checkpoint or the new one.
    A Ctrl-C or SIGTERM during the save is held until the save is done, so it
    stops the run after this checkpoint rather than inside it.

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> d = folder.name
    >>> path = save_checkpoint(d, {"w": np.ones(2, np.float32), "step": 3}, {"pass": 1})
    >>> state, meta = load_checkpoint(d)
    >>> state["w"].tolist(), int(state["step"]), meta
    ([1.0, 1.0], 3, {'pass': 1})
    """
    if threading.current_thread() is not threading.main_thread():
        return _write(directory, model_state, meta)  # only the main thread may hold signals
    held = [signum for signum in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(signum) is not None]
    previous = {signum: signal.getsignal(signum) for signum in held}
    caught: list[int] = []
    for signum in held:
        signal.signal(signum, lambda signum, frame: caught.append(signum))
    try:
        return _write(directory, model_state, meta)
    finally:
        for signum in held:
            signal.signal(signum, previous[signum])
        for signum in dict.fromkeys(caught):  # what came meanwhile, delivered now that the checkpoint is whole
            signal.raise_signal(signum)


def _write(directory: str, model_state: dict[str, Any], meta: dict[str, Any]) -> str:
    """The body of ``save_checkpoint``, with Ctrl-C held by the caller."""
    make_folder(directory, "the checkpoint folder")
    arrays = {f"model/{k}": np.asarray(v) for k, v in model_state.items()}
    for key, value in arrays.items():
        if value.dtype == object:
            raise BadType(f"save_checkpoint: model state {key[6:]!r} is not numeric ({type(model_state[key[6:]]).__name__}); state_dict() must hold arrays and numbers")
    arrays["meta"] = np.array(json.dumps(meta))
    _sweep_parts(directory)  # a save killed before its rename leaves a part file that nothing else would remove
    fd, tmp = tempfile.mkstemp(prefix=f".checkpoint.{os.getpid()}.", suffix=".npz.part", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        final = os.path.join(directory, FILE)
        os.replace(tmp, final)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:  # make the rename itself durable
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return final


def load_for_rank(directory: str, rank: int, world_size: int) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
    """The checkpoint rank ``rank`` of ``world_size`` resumes from, or None.

    Its own (see ``rank_folder``) when there is one. A process new to the job
    (the job grew, or ran as one process before) takes the earliest in the
    data of the other ranks' checkpoints: ranks save the same position at the
    same steps, and the earliest is the one the job resumes from even if
    another rank has already saved again since the restart. The processes
    have no channel to agree on a position, so checkpoints of different
    positions (a rank that saved once more before a crash, or the folder of a
    rank no longer in the job) draw a RuntimeWarning naming them.

    >>> load_for_rank("/nonexistent", 0, 2) is None
    True
    """
    own = load_checkpoint(rank_folder(directory, rank, world_size))
    found = {d: c for d in [directory, *rank_folders(directory)]
             if (c := own if d == rank_folder(directory, rank, world_size) else load_checkpoint(d)) is not None}
    positions = {d: (c[1].get("pass", 0), c[1].get("cursor", 0)) for d, c in found.items()}
    if len(set(positions.values())) > 1:
        # the processes share no channel to agree on one position: say so rather than resume unevenly
        shown = ", ".join(f"{os.path.basename(d) or d}: pass {p}, entry {c}" for d, (p, c) in positions.items())
        warnings.warn(f"{directory}: the ranks' checkpoints are at different positions ({shown}); a resume "
                      "from them repeats or skips samples. Restart all ranks together from checkpoints of one "
                      "step (delete the folders of ranks that are no longer in the job)", RuntimeWarning,
                      stacklevel=user_stacklevel())
    if own is not None:
        return own
    return min(found.values(), key=lambda c: (c[1].get("pass", 0), c[1].get("cursor", 0)), default=None)


def load_checkpoint(directory: str) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
    """The (model state, meta) saved in ``directory``, or None when there is none.

    Anything at the checkpoint's path that is not a checkpoint is a
    ``CheckpointError`` naming the file: a folder, a file that is not an
    ``.npz`` archive, one without meta data, or weights that are not finite.

    >>> load_checkpoint("/nonexistent") is None
    True
    """
    path = os.path.join(directory, FILE)
    if not os.path.lexists(path):
        return None
    check_file(path)
    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"{path}: not a readable checkpoint (not an .npz archive: no zip directory in its "
                              f"{os.path.getsize(path)} bytes); it was damaged or is another file: {START_OVER}")
    try:
        with np.load(path, allow_pickle=False) as archive:
            if "meta" not in archive.files:
                raise CheckpointError(f"{path}: not a readerkit checkpoint (no 'meta' entry; it holds "
                                      f"{sorted(archive.files)[:5]}); {START_OVER}")
            meta = json.loads(str(archive["meta"]))
            state = {k[6:]: archive[k] for k in archive.files if k.startswith("model/")}
    except CheckpointError:
        raise
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        raise CheckpointError(f"{path}: not a readable checkpoint ({exc or type(exc).__name__}); {START_OVER}") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path}: its meta data is not a JSON object; {START_OVER}")
    for name, value in state.items():
        if value.dtype.kind in "fc" and not np.isfinite(value).all():
            nan, inf = int(np.isnan(value).sum()), int(np.isinf(value).sum())
            held = " and ".join(f"{n} {what}" for n, what in ((nan, "NaN"), (inf, "infinite")) if n)
            raise CheckpointError(f"{path}: model state {name!r} holds {held} of {value.size} values: the run "
                                  "that saved it diverged. Resume from an earlier checkpoint, or start afresh with "
                                  "a lower learning rate")
    return state, meta


def read_meta(path: str) -> dict[str, Any] | None:
    """The meta data of the checkpoint file ``path`` alone (no model state is read), or None when it has none.

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> read_meta(save_checkpoint(folder.name, {"w": np.zeros(9)}, {"pass": 2}))
    {'pass': 2}
    """
    try:
        with np.load(path, allow_pickle=False) as archive:
            meta = json.loads(str(archive["meta"]))
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None
    return meta if isinstance(meta, dict) else None


def check_file(path: str) -> None:
    """Refuse a checkpoint path that is not a file (a folder, a broken link): nothing could be saved there.

    >>> check_file("/")
    Traceback (most recent call last):
    ...
    train.checkpoints.folders.CheckpointError: / is not a file (a folder?), so it cannot be a checkpoint; move it away, or give another checkpoint folder
    """
    if not os.path.isfile(path):
        raise CheckpointError(f"{path} is not a file (a folder?), so it cannot be a checkpoint; move it away, or "
                              "give another checkpoint folder")


def checkpoints_in(directory: str) -> list[str]:
    """The checkpoint files in ``directory`` and its ``rank<r>`` folders, for a run that must not overwrite them.

    >>> checkpoints_in("/nonexistent")
    []
    """
    if not os.path.isdir(directory):
        return []
    return [os.path.join(d, FILE) for d in [directory, *rank_folders(directory)] if os.path.lexists(os.path.join(d, FILE))]


def remove_checkpoints(directory: str, rank: int, world_size: int, *, keep_own: bool = False) -> None:
    """Remove what a fresh run of rank ``rank`` must not resume from later: its own checkpoint (unless
    ``keep_own``: the one it has just saved), and for rank 0 those of processes that are not in this job
    (the folder's own, or ranks beyond the job) that no live process holds.

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> _ = save_checkpoint(folder.name, {"w": np.zeros(1)}, {"pass": 1})
    >>> remove_checkpoints(folder.name, 0, 1); checkpoints_in(folder.name)
    []
    """
    own = os.path.join(rank_folder(directory, rank, world_size), FILE)
    doomed = set() if keep_own else {own}
    if rank == 0:
        for path in checkpoints_in(directory):
            folder = os.path.dirname(path)
            theirs = world_size > 1 and folder != directory and int(os.path.basename(folder)[4:]) < world_size
            # a rank folder a live process holds is not this run's to clear (hold_run keeps jobs apart)
            if path != own and not theirs and not folder_in_use(folder):
                doomed.add(path)
    for path in doomed:
        if os.path.isfile(path):
            os.unlink(path)
