"""MNIST (and anything in its format, such as Fashion-MNIST): indexed readers.

Entries are ``(image, label)``: ``image`` a float32[784] vector, the 28x28
pixels in row order scaled from 0..255 to 0.0..1.0 (x / 255); ``label`` an
int 0..9. The IDX files are decoded once into ``.npy`` files in the per-user
cache and memory-mapped afterwards, so the second start is fast.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np

from readers.identity import file_digest
from readers.plans import take_rows
from readers.sources.datafiles import DataFile, Progress, cache_dir, fetch_all
from readers.sources.idx import IdxError, read_idx
from readers.stage import IndexedReader

__all__ = ["MIRRORS", "Mnist", "test", "train"]

MIRRORS = [
    "https://ossci-datasets.s3.amazonaws.com/mnist",
    "https://storage.googleapis.com/cvdf-datasets/mnist",
    "http://yann.lecun.com/exdb/mnist",
]


def _file(stem: str, sha256: str) -> DataFile:
    dotted = stem.replace("-idx", ".idx", 1)  # the names some archives use
    return DataFile(f"{stem}.gz", sha256, aliases=(stem, f"{dotted}.gz", dotted))


FILES = {
    "train": (
        _file("train-images-idx3-ubyte", "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609"),
        _file("train-labels-idx1-ubyte", "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c"),
    ),
    "test": (
        _file("t10k-images-idx3-ubyte", "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6"),
        _file("t10k-labels-idx1-ubyte", "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"),
    ),
}


#: The IDX types a label file may hold: any integer one.
LABEL_DTYPES = (np.uint8, np.int8, np.int16, np.int32)


def _decoded(path: str, **expect: Any) -> tuple[np.ndarray, str]:
    """The IDX file at ``path`` as an array, decoded once and memory-mapped from the cache, and its SHA-256.

    The cache is keyed by the file's content, so the same file read through
    several folders is decoded and stored once, and a changed file is decoded
    again.
    """
    digest = file_digest(path)
    folder = cache_dir("decoded")
    cached = os.path.join(folder, f"{os.path.basename(path)}.{digest[:24]}.npy")
    if os.path.isfile(cached):
        try:
            return np.load(cached, mmap_mode="r"), digest
        except (OSError, ValueError):  # a damaged cache entry is decoded again
            pass
    array = read_idx(path, **expect)  # a file of another rank or type is named before its size is checked
    tmp = None
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".", suffix=".npy.part", dir=folder)
        with os.fdopen(fd, "wb") as f:
            np.save(f, array)
        os.replace(tmp, cached)
    except OSError:  # a read-only or full cache only costs the decoding next time
        pass
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    return array, digest


class Mnist(IndexedReader):
    """An MNIST-format split: indexed, read from memory-mapped decoded arrays."""

    name = "mnist"

    def __init__(self, split: str, data_dir: str | None, download: bool,
                 progress: Callable[[DataFile, str], Progress | None] | None):
        super().__init__()
        self.split, self.data_dir, self.download, self.progress = split, data_dir, download, progress
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None
        self._digest: str | None = None

    def paths(self) -> tuple[str, str]:
        """The image and label files of this split, downloading them when missing."""
        image_path, label_path = fetch_all(
            "mnist", FILES[self.split], MIRRORS, self.data_dir, download=self.download, progress=self.progress
        )
        return image_path, label_path

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The raw (uint8 images (n, 28, 28), uint8 labels (n,)), loaded on first use."""
        if self._arrays is None:
            image_path, label_path = self.paths()
            # checked again below: a cached .npy is not read by read_idx
            (images, image_sha), (labels, label_sha) = (_decoded(image_path, ndim=3, dtype=np.uint8),
                                                        _decoded(label_path, ndim=1, dtype=LABEL_DTYPES))
            if images.ndim != 3 or images.dtype != np.uint8:
                raise IdxError(
                    f"{image_path}: expected uint8 images of rank 3 (count, rows, cols), "
                    f"got {images.dtype} of shape {images.shape}; is this an MNIST-format image file?"
                )
            if labels.ndim != 1 or labels.dtype.kind not in "iu":
                raise IdxError(
                    f"{label_path}: expected integer labels of rank 1, got {labels.dtype} of shape "
                    f"{labels.shape}; is this an MNIST-format label file?"
                )
            if len(images) != len(labels):
                raise IdxError(
                    f"{label_path} has {len(labels)} labels but {image_path} has {len(images)} images; "
                    "the two files must come from the same split"
                )
            # plain arrays over the mapped file: np.memmap's indexing runs Python code on every access
            self._arrays = (images.view(np.ndarray).reshape(len(images), -1), labels.view(np.ndarray))
            self._digest = f"sha256:{image_sha},{label_sha}"
        return self._arrays

    def digest(self) -> str:
        """The SHA-256 of the image and label files (computed anyway, to key the decoded cache)."""
        if self._digest is None:
            self.arrays()
        return self._digest

    def __len__(self) -> int:
        return len(self.arrays()[1])

    def _get(self, i: int) -> tuple[np.ndarray, int]:
        images, labels = self.arrays()
        # a division, not a multiplication by 1/255, which is one ulp off for half the values
        return np.divide(images[i], np.float32(255), dtype=np.float32), int(labels[i])

    def gather(self, indices: np.ndarray) -> list:
        images, labels = self.gather_columns(indices)
        return list(zip(images, labels.tolist()))

    def gather_columns(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        images, labels = self.arrays()
        return (np.divide(take_rows(images, indices), np.float32(255), dtype=np.float32),
                labels[indices].astype(np.int64))

    def wire_columns(self, indices: np.ndarray) -> tuple[tuple[np.ndarray, np.ndarray], tuple[dict, dict]]:
        """``gather_columns`` as the files hold it, for a server to send in a quarter of the bytes: the images'
        bytes, which the client divides by 255 in float32 as ``gather_columns`` does, and the labels' bytes, which
        it widens to int64.

        >>> import tempfile
        >>> from readers.network.wire import decode_column
        >>> from readers.sources.idx import write_idx
        >>> folder = tempfile.TemporaryDirectory()
        >>> write_idx(f"{folder.name}/train-images-idx3-ubyte", np.arange(2 * 784, dtype=np.uint8).reshape(2, 28, 28))
        >>> write_idx(f"{folder.name}/train-labels-idx1-ubyte", np.array([7, 1], np.uint8))
        >>> r = train(folder.name)
        >>> (images, labels), ways = r.wire_columns(np.array([1, 0]))
        >>> images.dtype, [np.array_equal(decode_column(c, w), g) for c, w, g in
        ...                zip((images, labels), ways, r.gather_columns(np.array([1, 0])))]
        (dtype('uint8'), [True, True])
        """
        images, labels = self.arrays()
        return (take_rows(images, indices), labels[indices]), ({"as": "<f4", "divide": 255}, {"as": "<i8"})

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_arrays"] = state["_digest"] = None  # a copy in another process maps the cache itself
        return state

    def _options(self) -> str:
        where = f", data_dir={self.data_dir!r}" if self.data_dir else ""
        return f"{self.split!r}{where}"

    def identity(self) -> str:
        return f"{self.name}({self.split!r})"  # the files' digest says which data; the folder does not matter


def train(data_dir: str | os.PathLike | None = None, *, download: bool = True,
          progress: Callable[[DataFile, str], Progress | None] | None = None) -> Mnist:
    """The 60,000 training images as an indexed reader of (float32[784] in 0..1, int label).

    Files come from ``data_dir``, then ``$READERKIT_DATA``, then the per-user
    cache, where missing ones are downloaded and checked. Nothing is read until
    the reader is used. Works for Fashion-MNIST files given by ``data_dir``.

    >>> import tempfile
    >>> from readers.sources.idx import write_idx
    >>> folder = tempfile.TemporaryDirectory()
    >>> d = folder.name
    >>> write_idx(f"{d}/train-images-idx3-ubyte", np.full((2, 28, 28), 255, np.uint8))
    >>> write_idx(f"{d}/train-labels-idx1-ubyte.gz", np.array([7, 1], np.uint8), compress=True)
    >>> r = train(d)
    >>> image, label = r[0]
    >>> len(r), image.shape, image.dtype, float(image.max()), label
    (2, (784,), dtype('float32'), 1.0, 7)
    """
    return Mnist("train", None if data_dir is None else os.fspath(data_dir), download, progress)


def test(data_dir: str | os.PathLike | None = None, *, download: bool = True,
         progress: Callable[[DataFile, str], Progress | None] | None = None) -> Mnist:
    """The 10,000 test images, like ``train``.

    >>> test("/nonexistent", download=False).split
    'test'
    """
    return Mnist("test", None if data_dir is None else os.fspath(data_dir), download, progress)


test.__test__ = False  # not a pytest test function
