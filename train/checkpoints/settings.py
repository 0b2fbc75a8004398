"""``Checkpoints``: a run's checkpoint and resume settings, in one object that ``train`` and ``train_steps`` take."""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from readers.checks import whole
from readers.errors import BadType, BadValue

__all__ = ["Checkpoints", "checkpoints_of"]


@dataclass(frozen=True)
class Checkpoints:
    """Where a run saves its checkpoints, how often, and whether it resumes or replaces what is there.

    ``folder`` holds the checkpoints (locked for the run: a second run into it
    fails at once; under a launcher with several processes each saves in a
    ``rank<r>`` subfolder). ``every``: steps between checkpoints within a pass
    (``train`` also saves after every pass; ``train_steps`` at the end);
    None, only those. ``resume`` continues from the last checkpoint there,
    refusing a folder without one, or one made with other settings or data.
    ``overwrite`` starts a new run in a folder that holds a checkpoint, which is
    replaced at the first save (else refused). ``config``: a JSON dict of your
    own settings, which a resume must find the same. Checked when made.

    >>> Checkpoints("runs/mnist", every=200, resume=True)
    Checkpoints(folder='runs/mnist', every=200, resume=True, overwrite=False, config={})
    >>> Checkpoints("runs/mnist", resume=True, overwrite=True)
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: Checkpoints: resume=True continues the run in the folder and overwrite=True replaces it; give one of them
    """

    folder: str
    every: int | None = None
    resume: bool = False
    overwrite: bool = False
    config: Mapping[str, Any] = field(default_factory=dict)

    __hash__ = None  # type: ignore[assignment]  # (its config is a dict)

    def __post_init__(self) -> None:
        folder, every, config = self.folder, self.every, self.config
        if not isinstance(folder, (str, os.PathLike)) or not os.fspath(folder):
            raise BadType(f"Checkpoints: folder must be a path (a str or os.PathLike), got {folder!r}")
        for name in ("resume", "overwrite"):
            if not isinstance(getattr(self, name), bool):
                raise BadType(f"Checkpoints: {name} must be True or False, got {getattr(self, name)!r}")
        if self.resume and self.overwrite:
            raise BadValue("Checkpoints: resume=True continues the run in the folder and overwrite=True replaces "
                           "it; give one of them")
        if config is not None and not isinstance(config, Mapping):
            raise BadType(f"Checkpoints: config must be a dict of your own settings (JSON data), got "
                          f"{type(config).__name__} {config!r}")
        object.__setattr__(self, "folder", os.fspath(folder))
        object.__setattr__(self, "every", None if every is None else whole(every, "every", "Checkpoints", 1,
                                                                           floats=False))
        object.__setattr__(self, "config", dict(config or {}))


def checkpoints_of(value: Any, where: str) -> Checkpoints | None:
    """``checkpoints=`` as given to ``train`` or ``train_steps``: a ``Checkpoints``, a folder's path (its
    defaults), or None for a run without checkpoints.

    >>> checkpoints_of("runs/a", "train")
    Checkpoints(folder='runs/a', every=None, resume=False, overwrite=False, config={})
    >>> checkpoints_of(True, "train")
    Traceback (most recent call last):
    ...
    readers.errors.BadType: train: checkpoints must be a train.Checkpoints(folder, ...), a folder's path or None, got bool True
    """
    if value is None or isinstance(value, Checkpoints):
        return value
    if isinstance(value, (str, os.PathLike)):
        return Checkpoints(value)
    raise BadType(f"{where}: checkpoints must be a train.Checkpoints(folder, ...), a folder's path or None, got "
                  f"{type(value).__name__} {value!r}")
