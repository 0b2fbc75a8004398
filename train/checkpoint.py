"""Checkpoints: the model's state and the data position in one file, written atomically.

A checkpoint is a ``.npz`` archive (no pickle): the model's arrays under
``model/<name>``, and a JSON document under ``meta`` with the position in
the data, the seed and whatever else the driver needs to resume.
"""
from __future__ import annotations

import glob
import json
import os
import tempfile
import warnings
import zipfile
from typing import Any

import numpy as np

__all__ = ["CheckpointError", "load_checkpoint", "load_for_rank", "rank_folder", "save_checkpoint"]

FILE = "checkpoint.npz"


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or does not fit; the message names the file."""


def save_checkpoint(directory: str, model_state: dict[str, Any], meta: dict[str, Any]) -> str:
    """Write ``model_state`` and ``meta`` to ``directory/checkpoint.npz`` atomically.

    A crash at any moment leaves either the previous checkpoint or the new one.

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> d = folder.name
    >>> path = save_checkpoint(d, {"w": np.ones(2, np.float32), "step": 3}, {"pass": 1})
    >>> state, meta = load_checkpoint(d)
    >>> state["w"].tolist(), int(state["step"]), meta
    ([1.0, 1.0], 3, {'pass': 1})
    """
    os.makedirs(directory, exist_ok=True)
    arrays = {f"model/{k}": np.asarray(v) for k, v in model_state.items()}
    for key, value in arrays.items():
        if value.dtype == object:
            raise TypeError(f"save_checkpoint: model state {key[6:]!r} is not numeric ({type(model_state[key[6:]]).__name__}); state_dict() must hold arrays and numbers")
    arrays["meta"] = np.array(json.dumps(meta))
    # a save killed before its rename leaves a part file that nothing else would remove
    for stale in glob.glob(os.path.join(directory, ".checkpoint.*.npz.part")):
        os.unlink(stale)
    fd, tmp = tempfile.mkstemp(prefix=".checkpoint.", suffix=".npz.part", dir=directory)
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


def rank_folder(directory: str, rank: int, world_size: int) -> str:
    """Where this process saves its checkpoints: ``directory``, or ``directory/rank<r>`` for one of several.

    >>> rank_folder("ck", 0, 1), rank_folder("ck", 2, 3)
    ('ck', 'ck/rank2')
    """
    return directory if world_size == 1 else os.path.join(directory, f"rank{rank}")


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
    others = [os.path.join(directory, name) for name in sorted(os.listdir(directory))
              if name.startswith("rank") and name[4:].isdigit()] if os.path.isdir(directory) else []
    found = {d: c for d in [directory, *others] if (c := load_checkpoint(d)) is not None}
    positions = {d: (c[1].get("pass", 0), c[1].get("cursor", 0)) for d, c in found.items()}
    if len(set(positions.values())) > 1:
        # the processes share no channel to agree on one position: say so rather than resume unevenly
        shown = ", ".join(f"{os.path.basename(d) or d}: pass {p}, entry {c}" for d, (p, c) in positions.items())
        warnings.warn(f"{directory}: the ranks' checkpoints are at different positions ({shown}); a resume "
                      "from them repeats or skips samples. Restart all ranks together from checkpoints of one "
                      "step (delete the folders of ranks that are no longer in the job)", RuntimeWarning, stacklevel=2)
    if own is not None:
        return own
    return min(found.values(), key=lambda c: (c[1].get("pass", 0), c[1].get("cursor", 0)), default=None)


def load_checkpoint(directory: str) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
    """The (model state, meta) saved in ``directory``, or None when there is none.

    >>> load_checkpoint("/nonexistent") is None
    True
    """
    path = os.path.join(directory, FILE)
    if not os.path.isfile(path):
        return None
    try:
        with np.load(path, allow_pickle=False) as archive:
            meta = json.loads(str(archive["meta"]))
            state = {k[6:]: archive[k] for k in archive.files if k.startswith("model/")}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        raise CheckpointError(f"{path}: not a readable checkpoint ({exc or type(exc).__name__}); delete it to start afresh") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path}: its meta data is not a JSON object; delete it to start afresh")
    return state, meta
