"""Split-MNIST: MNIST's classes 0-1, then 2-3, and so on, as a timestamped stream of one day per task.

A *timestamped stream* is any reader whose entries are tuples ending in the
two columns ``(key, time)``:

- ``key``, an int that names the sample for good, whatever the stream's
  order: here the image's index in its MNIST split, so
  ``readers.sources.mnist.train(d)[key]`` is that image;
- ``time``, the entry's data time in seconds, a Python float, non-decreasing
  along the stream (what time triggers, such as ``time:86400``, count).

The other columns come first, so a model that maps ``["image", "label"]``
reads columns 0 and 1 as it does on plain MNIST; ``key_and_time`` reads the
last two of any entry. Split-MNIST's entries are
``(image float32[784], label int, key int, time float)``.

Task ``k`` holds the images of classes ``2k`` and ``2k + 1`` (``classes_of``),
in a seeded random order within the task, and the ``j``-th of its ``n_k``
entries has time ``k * TASK_SECONDS + j * TASK_SECONDS / n_k``: the task's
data times fill one simulated day, ``[k * 86400, (k + 1) * 86400)``, so a
trigger every 86400 seconds of data time fires once per task.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from readers.errors import BadValue
from readers.sources.datafiles import DataFile, Progress
from readers.sources.mnist import Mnist
from readers.stage import IndexedReader

__all__ = [
    "KEY_COLUMN", "MAX_TASKS", "SplitMnist", "TASK_SECONDS", "TIME_COLUMN", "classes_of", "key_and_time",
    "task_of", "test", "train",
]

#: Data time each task spans, in seconds: one simulated day.
TASK_SECONDS = 86400
#: MNIST's ten classes make five tasks of two.
MAX_TASKS = 5
#: Where a timestamped stream's entries hold the key and the time: their last two columns.
KEY_COLUMN, TIME_COLUMN = -2, -1


def key_and_time(entry: Sequence[Any]) -> tuple[int, float]:
    """The ``(key, time)`` of an entry of a timestamped stream: its last two columns.

    >>> key_and_time(("image", 3, 1204, 86400.0))
    (1204, 86400.0)
    >>> key_and_time((7,))
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: an entry of a timestamped stream ends in the columns (key, time); got an entry of 1 column: (7,)
    """
    if not isinstance(entry, (tuple, list)) or len(entry) < 2:
        size = f"of {len(entry)} column{'s' * (len(entry) != 1)}" if isinstance(entry, (tuple, list)) else "that is no tuple"
        raise BadValue(f"an entry of a timestamped stream ends in the columns (key, time); got an entry {size}: "
                       f"{entry!r}")
    return int(entry[KEY_COLUMN]), float(entry[TIME_COLUMN])


def classes_of(task: int) -> tuple[int, int]:
    """The two MNIST classes of task ``task`` (0-based): ``(2 * task, 2 * task + 1)``.

    >>> classes_of(0), classes_of(4)
    ((0, 1), (8, 9))
    >>> classes_of(5)
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: classes_of: task must be an int in 0..4 (Split-MNIST has 5 tasks), got 5
    """
    if isinstance(task, (bool, np.bool_)) or not isinstance(task, (int, np.integer)) or not 0 <= task < MAX_TASKS:
        raise BadValue(f"classes_of: task must be an int in 0..{MAX_TASKS - 1} (Split-MNIST has {MAX_TASKS} "
                       f"tasks), got {task!r}")
    return 2 * int(task), 2 * int(task) + 1


def task_of(label: Any) -> Any:
    """The task a label (or an array of them) belongs to: ``label // 2``.

    >>> task_of(7), task_of(np.array([0, 1, 2, 9])).tolist()
    (3, [0, 0, 1, 4])
    """
    return label // 2


def _checked_tasks(tasks: Any, where: str) -> int:
    if isinstance(tasks, (bool, np.bool_)) or not isinstance(tasks, (int, np.integer)) or not 1 <= tasks <= MAX_TASKS:
        raise BadValue(f"{where}: tasks must be an int in 1..{MAX_TASKS} (task k holds classes 2k and 2k+1, "
                       f"so {MAX_TASKS} tasks cover MNIST's ten), got {tasks!r}")
    return int(tasks)


def _checked_seed(seed: Any, where: str) -> int:
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise BadValue(f"{where}: seed must be an int >= 0 (it orders the entries within each task), got {seed!r}")
    return int(seed)


class SplitMnist(IndexedReader):
    """Split-MNIST over an MNIST split: an indexed timestamped stream of (image, label, key, time)."""

    name = "split_mnist"

    def __init__(self, mnist: Mnist, tasks: int, seed: int, per_task: int | None = None):
        super().__init__(mnist)
        # not ``self.seed``: that declares a seed ordering passes, and every pass here is the same
        self.tasks, self.order_seed, self.per_task = tasks, seed, per_task
        self._order: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def by_key(self) -> Mnist:
        """The reader the keys index: the MNIST split, so ``stream.by_key()[key]`` is the sample ``key`` names
        (what ``readers.trigger_set`` reads a stored set from).

        >>> import tempfile
        >>> from readers.sources.idx import write_idx
        >>> d = tempfile.TemporaryDirectory()
        >>> write_idx(f"{d.name}/train-images-idx3-ubyte", np.zeros((4, 28, 28), np.uint8))
        >>> write_idx(f"{d.name}/train-labels-idx1-ubyte", np.array([1, 0, 1, 0], np.uint8))
        >>> stream = train(d.name, tasks=1)
        >>> key = stream[0][2]
        >>> stream.by_key()[key][1] == stream[0][1]
        True
        >>> d.cleanup()
        """
        return self.parents[0]

    def order(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(keys int64, times float64, entries per task int64): entry i is MNIST's ``keys[i]`` at ``times[i]``."""
        if self._order is None:
            labels = self.parents[0].arrays()[1]
            tasks = task_of(labels.astype(np.int64))
            rng = np.random.default_rng(self.order_seed)
            # one generator through the tasks in order, so fewer tasks keep the first ones' order
            keys = [rng.permutation(np.flatnonzero(tasks == k))[:self.per_task] for k in range(self.tasks)]
            sizes = np.array([len(part) for part in keys], dtype=np.int64)
            times = [k * float(TASK_SECONDS) + np.arange(n) * float(TASK_SECONDS) / n if n else np.zeros(0)
                     for k, n in enumerate(sizes.tolist())]
            self._order = (np.concatenate(keys).astype(np.int64), np.concatenate(times), sizes)
        return self._order

    def task_sizes(self) -> list[int]:
        """The number of entries of each task, in order."""
        return self.order()[2].tolist()

    def __len__(self) -> int:
        return len(self.order()[0])

    def _get(self, i: int) -> tuple[np.ndarray, int, int, float]:
        keys, times, _ = self.order()
        image, label = self.parents[0].at(int(keys[i]))
        return image, label, int(keys[i]), float(times[i])

    def gather(self, indices: np.ndarray) -> list:
        images, labels, keys, times = self.gather_columns(indices)
        return list(zip(images, labels.tolist(), keys.tolist(), times.tolist()))

    def gather_columns(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        keys, times, _ = self.order()
        images, labels = self.parents[0].gather_columns(keys[indices])
        return images, labels, keys[indices], times[indices]

    def sample_ids(self, indices: np.ndarray) -> np.ndarray:
        return self.parents[0].sample_ids(self.order()[0][indices])

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_order"] = None  # made again from the labels, as the MNIST arrays are mapped again
        return state

    def _options(self) -> str:
        return f"tasks={self.tasks}, seed={self.order_seed}" + (f", per_task={self.per_task}" if self.per_task else "")


def _split(split: str, data_dir: str | os.PathLike | None, download: bool, tasks: int, seed: int,
           per_task: int | None, progress: Callable[[DataFile, str], Progress | None] | None,
           where: str) -> SplitMnist:
    tasks, seed = _checked_tasks(tasks, where), _checked_seed(seed, where)
    if per_task is not None and (isinstance(per_task, (bool, np.bool_)) or not isinstance(per_task, (int, np.integer))
                                 or per_task < 1):
        raise BadValue(f"{where}: per_task must be an int >= 1 (entries kept of each task) or None for all, "
                       f"got {per_task!r}")
    mnist = Mnist(split, None if data_dir is None else os.fspath(data_dir), download, progress)
    return SplitMnist(mnist, tasks, seed, None if per_task is None else int(per_task))


def train(data_dir: str | os.PathLike | None = None, *, download: bool = True, tasks: int = 5, seed: int = 0,
          per_task: int | None = None, progress: Callable[[DataFile, str], Progress | None] | None = None,
          ) -> SplitMnist:
    """MNIST's training images of classes 0..2*tasks-1 as Split-MNIST: (image, label, key, time), task by task.

    The files are found (or downloaded) as ``readers.sources.mnist.train`` finds
    them; nothing is read until the reader is used. ``seed`` orders the
    entries within each task; ``tasks`` (1..5) keeps the first tasks only;
    ``per_task`` keeps the first ``per_task`` entries of each task (a seeded
    random sample of its classes, for quick runs), their times still filling its day.

    >>> import tempfile
    >>> from readers.sources.idx import write_idx
    >>> folder = tempfile.TemporaryDirectory()
    >>> d = folder.name
    >>> write_idx(f"{d}/train-images-idx3-ubyte", np.arange(6, dtype=np.uint8).repeat(784).reshape(6, 28, 28))
    >>> write_idx(f"{d}/train-labels-idx1-ubyte", np.array([3, 0, 2, 1, 0, 9], np.uint8))
    >>> r = train(d, tasks=2)
    >>> [(label, key, time) for image, label, key, time in r()]
    [(0, 4, 0.0), (0, 1, 28800.0), (1, 3, 57600.0), (2, 2, 86400.0), (3, 0, 129600.0)]
    >>> [(label, key, time) for image, label, key, time in train(d, tasks=2, per_task=2)()]
    [(0, 4, 0.0), (0, 1, 43200.0), (2, 2, 86400.0), (3, 0, 129600.0)]
    >>> image, label, key, time = r[3]
    >>> image.shape, round(float(image[0]) * 255) == key, r.sample_ids(np.arange(5)).tolist()
    ((784,), True, [4, 1, 3, 2, 0])
    >>> r
    split_mnist(tasks=2, seed=0)
    └─ mnist('train', data_dir=...)
    >>> train(d, tasks=6)
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: split_mnist.train: tasks must be an int in 1..5 (task k holds classes 2k and 2k+1, ...), got 6
    """
    return _split("train", data_dir, download, tasks, seed, per_task, progress, "split_mnist.train")


def test(data_dir: str | os.PathLike | None = None, *, download: bool = True, tasks: int = 5, seed: int = 0,
         per_task: int | None = None, progress: Callable[[DataFile, str], Progress | None] | None = None,
         ) -> SplitMnist:
    """MNIST's test images as Split-MNIST, like ``train``: evaluate on the tasks seen so far by their labels.

    >>> r = test("/nonexistent", download=False, tasks=3)
    >>> r.parents[0].split, r.tasks, [classes_of(k) for k in range(r.tasks)]
    ('test', 3, [(0, 1), (2, 3), (4, 5)])
    """
    return _split("test", data_dir, download, tasks, seed, per_task, progress, "split_mnist.test")


test.__test__ = False  # not a pytest test function

