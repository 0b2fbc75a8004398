"""image_folder: a folder of images, one sub-folder a class (torchvision's ImageFolder layout), as an indexed reader.

::

    root/cat/001.jpg        -> (image, 0)
    root/cat/more/002.png   -> (image, 0)   (images in deeper folders belong to their class folder)
    root/dog/003.jpg        -> (image, 1)

Classes are the sorted names of the sub-folders of ``root`` that hold
images, and labels their indices; entries come class by class, each class's
files in sorted order. Images directly in ``root`` belong to no class and are
left out. The folder is listed when the reader is first used, not when it is
made, and the listing travels with the reader into worker processes.

Images decode with Pillow (the ``images`` extra) into ``uint8`` arrays of
shape (height, width, channels), converted to ``mode``:

- ``"RGB"`` (the default, as torchvision's loader): 3 channels; a grayscale
  image has its gray copied into all three, an RGBA or LA image loses its
  alpha channel (no compositing onto a background), a palette image is
  looked up;
- ``"L"``: 1 channel of gray (ITU-R 601-2 luma of a colour image), shape
  (height, width, 1);
- ``"RGBA"``: 4 channels; an image without alpha gets an opaque one (255).

``size=`` resizes every image (bilinear, antialiased, as Pillow and
torchvision's ``Resize`` do) to one shape, so a batch of them stacks; without
it each image keeps its own size. A JPEG at least twice as large as ``size``
in both sides is first decoded at a reduced scale (1/2, 1/4 or 1/8, never
below ``size``; Pillow's ``draft``, as its ``thumbnail`` does), which is
several times faster than decoding it whole; its pixels then differ slightly
from a full decode's resized (a reduced decode averages blocks of pixels).

``root`` may be a URL of a folder or prefix (``http(s)://``, ``s3://``,
through fsspec): it is listed once (recursively; a web server's index pages
of links), each image's ``stat`` taken then, and each image is read with one
request for its bytes after one for its size and version: an image that
changed since the listing is refused (``FileChanged``, naming it). The
digest is by content, so a folder and its copy behind a URL have one.
Messages and the repr show a URL through ``redact``.
"""
from __future__ import annotations

import os
import urllib.parse
from collections.abc import Sequence
from typing import Any

import numpy as np

from readers.digests import hasher, value_digest
from readers.errors import BadType, BadValue, MissingFile, ReaderkitError
from readers.plugins.pairs import PillowMissing, mark_roles, parse_columns, pillow
from readers.sources.locations import (
    Stat,
    expand_paths,
    is_url,
    open_file,
    redact,
    stats,
)
from readers.stage import IndexedReader

__all__ = [
    "EXTENSIONS", "ImageDecodeError", "ImageFolder", "PillowMissing", "decode_image", "from_data_dir", "image_folder",
]

#: The file names read as images (as torchvision's ImageFolder), compared in lower case.
EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
MODES = {"RGB": 3, "L": 1, "RGBA": 4}
#: Files of a folder hashed whole for its digest (with every file's name): spread evenly over the listing.
DIGEST_FILES = 16


class ImageDecodeError(BadValue):
    """A file that does not decode as an image: the message names it and says what to do."""


def _pil() -> Any:
    return pillow("image_folder decodes images")


def decode_image(path: str, size: tuple[int, int] | None = None, mode: str = "RGB",
                 seen: Stat | None = None) -> np.ndarray:
    """The image file at ``path`` as a ``uint8`` array (height, width, channels) in ``mode``, resized to
    ``size`` = (height, width) when given; a file that does not decode raises ``ImageDecodeError`` naming it.
    ``seen``: its ``stat`` when listed; a file changed since raises ``FileChanged``.

    >>> import tempfile
    >>> from PIL import Image
    >>> path = os.path.join(tempfile.mkdtemp(), "gray.png")
    >>> Image.new("L", (4, 2), color=7).save(path)
    >>> a = decode_image(path)
    >>> a.shape, a.dtype, a[0, 0].tolist()
    ((2, 4, 3), dtype('uint8'), [7, 7, 7])
    >>> decode_image(path, (3, 3), "L").shape
    (3, 3, 1)
    >>> _ = open(path, "wb").write(b"not an image")
    >>> decode_image(path)
    Traceback (most recent call last):
    ...
    readers.sources.image_folder.ImageDecodeError: .../gray.png does not decode as an image (UnidentifiedImageError: ...): replace the file, or remove it from the folder
    """
    Image = _pil()
    with open_file(path, seen=seen) as f:  # a missing file is a MissingFile, not a bad image
        try:
            with Image.open(f) as opened:
                if size is not None:  # a JPEG at least twice too big decodes at 1/2, 1/4 or 1/8 of its size
                    opened.draft(mode if mode in ("RGB", "L") else None, (size[1], size[0]))
                image = opened.convert(mode)  # reads the whole file: truncated or corrupt data fails here
            if size is not None and image.size != (size[1], size[0]):
                image = image.resize((size[1], size[0]), Image.Resampling.BILINEAR)
        except ReaderkitError:  # the file could not be read (a remote failure, a changed object): not a bad image
            raise
        except Exception as exc:  # whatever Pillow raises about a file's bytes (OSError, SyntaxError, zlib.error...)
            raise ImageDecodeError(f"{redact(path)} does not decode as an image ({type(exc).__name__}: {exc}): replace "
                                   "the file, or remove it from the folder") from exc
    array = np.asarray(image)
    return array[:, :, None] if array.ndim == 2 else array


class ImageFolder(IndexedReader):
    """An ImageFolder layout as an indexed reader of ``(image, label)``; made by ``image_folder``."""

    name = "image_folder"

    def __init__(self, root: str, size: tuple[int, int] | None, mode: str, classes: tuple[str, ...] | None):
        super().__init__()
        self.root, self.size, self.mode, self.given_classes = root, size, mode, classes
        self._listing: tuple[tuple[str, ...], list[str], np.ndarray] | None = None
        self._stats: list[Stat] | None = None

    def listing(self) -> tuple[tuple[str, ...], list[str], np.ndarray]:
        """(class names, each image's path below ``root``, each image's label), listed on first use."""
        if self._listing is None:
            listing = _list(self.root, self.given_classes)
            if is_url(self.root):  # a URL's images are checked against these when read
                self._stats = stats([_join(self.root, below) for below in listing[1]])
            self._listing = listing
        return self._listing

    def _decode(self, i: int) -> np.ndarray:
        """The image of entry ``i``."""
        files = self.listing()[1]
        seen = None if self._stats is None else self._stats[i]
        return decode_image(_join(self.root, files[i]), self.size, self.mode, seen)

    @property
    def classes(self) -> list[str]:
        """The class names, label k being ``classes[k]``."""
        return list(self.listing()[0])

    @property
    def class_to_idx(self) -> dict[str, int]:
        """Each class name's label (torchvision's name for it)."""
        return {name: k for k, name in enumerate(self.listing()[0])}

    def path(self, i: int) -> str:
        """The file of entry ``i``."""
        return _join(self.root, self.listing()[1][i])

    def __len__(self) -> int:
        return len(self.listing()[1])

    def _get(self, i: int) -> tuple[np.ndarray, int]:
        return self._decode(i), int(self.listing()[2][i])

    def gather_columns(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        if self.size is None:  # images of their own sizes do not stack
            return None
        _, files, labels = self.listing()
        images = np.empty((len(indices), *self.size, MODES[self.mode]), np.uint8)
        for k, i in enumerate(indices.tolist()):
            images[k] = self._decode(i)
        return images, labels[indices].astype(np.int64)

    def _options(self) -> str:
        opts = repr(redact(self.root))
        opts += "" if self.size is None else f", size={self.size}"
        opts += "" if self.mode == "RGB" else f", mode={self.mode!r}"
        return opts + ("" if self.given_classes is None else f", classes={list(self.given_classes)}")

    def identity(self) -> str:
        return self.title().replace(repr(redact(self.root)), "folder", 1)  # the digest says which images; not where

    def digest(self) -> str:
        """The classes, every image's name below ``root`` and label, and the bytes of DIGEST_FILES of them."""
        classes, files, labels = self.listing()
        h = hasher()
        h.update(str(value_digest([list(classes), list(files), labels])).encode())
        for k in np.unique(np.linspace(0, len(files) - 1, min(DIGEST_FILES, len(files))).round().astype(int)):
            with open_file(_join(self.root, files[k])) as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
        return h.hexdigest()


def _join(root: str, below: str) -> str:
    """The path of a file ``below`` root (a relative path with "/"), root a folder or a URL."""
    return root.rstrip("/") + "/" + below if is_url(root) else os.path.join(root, below)


def _below(root: str, path: str) -> str:
    """``path`` relative to ``root``: a local relative path, or a URL's part after root's, with "/"."""
    if not is_url(root):
        return os.path.relpath(path, root)
    for prefix, name in ((root.rstrip("/") + "/", path), (redact(root).rstrip("/") + "/", redact(path))):
        if name.startswith(prefix):
            return urllib.parse.unquote(name[len(prefix):])
    raise BadValue(f"image_folder: {redact(path)} was listed under {redact(root)} but does not start with it; "
                   "give the folder's URL as the server lists it")


def _list(root: str, given: tuple[str, ...] | None) -> tuple[tuple[str, ...], list[str], np.ndarray]:
    """(classes, paths below root, labels) of the images in root's sub-folders, class by class."""
    found = expand_paths(root, suffixes=EXTENSIONS, what="image files (" + ", ".join(EXTENSIONS) + ")")
    by_class: dict[str, list[str]] = {}
    for path in found:
        below = _below(root, path)
        head, sep, _ = below.partition("/" if is_url(root) else os.sep)
        if sep:  # an image directly in root has no class
            by_class.setdefault(head, []).append(below)
    if not by_class:
        raise MissingFile(f"{redact(root)}: no class sub-folders with images; image_folder reads root/<class>/<image>, "
                          "so give the folder that holds one sub-folder per class")
    classes = tuple(sorted(by_class)) if given is None else given
    if given is not None:
        unknown = sorted(set(by_class) - set(given))
        if unknown:
            raise BadValue(f"{redact(root)}: the sub-folders {unknown} hold images but are not in classes={list(given)}; "
                           "add them to classes, or move them out of the folder")
    files: list[str] = []
    labels: list[int] = []
    for label, name in enumerate(classes):
        mine = by_class.get(name, [])
        files += mine
        labels += [label] * len(mine)
    return classes, files, np.array(labels, np.int64)


def _size(size: Any) -> tuple[int, int] | None:
    if size is None:
        return None
    pair = (size, size) if isinstance(size, (int, np.integer)) and not isinstance(size, bool) else size
    if (isinstance(pair, Sequence) and not isinstance(pair, str) and len(pair) == 2
            and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1 for v in pair)):
        return int(pair[0]), int(pair[1])
    raise BadValue(f"image_folder: size must be an int >= 1 (a square) or a pair (height, width) of them, got {size!r}")


def image_folder(root: str | os.PathLike, *, size: int | tuple[int, int] | None = None, mode: str = "RGB",
                 classes: Sequence[str] | None = None) -> ImageFolder:
    """An indexed reader of ``(image, label)`` over a folder with one sub-folder of images per class.

    ``image`` is a ``uint8`` array (height, width, channels) decoded with
    Pillow in ``mode`` ("RGB": 3 channels, the default; "L": 1; "RGBA": 4;
    the module doc says how each converts), resized to ``size`` (an int for a
    square, or (height, width)) when given; ``label`` is the int index of its
    class in ``classes``. By default the classes are the sorted names of the
    sub-folders that hold images; give ``classes`` (the list of a training
    folder, say) to fix the labels of a folder that lacks some of them. Nothing
    is read until the reader is used; a file that does not decode raises
    ``ImageDecodeError`` naming it. ``r.classes`` and ``r.path(i)`` say what
    entry i is.

    >>> import tempfile
    >>> from PIL import Image
    >>> root = tempfile.mkdtemp()
    >>> for name, color in [("cat/a.png", (255, 0, 0)), ("cat/b.jpg", (0, 255, 0)), ("dog/c.png", (0, 0, 255))]:
    ...     os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
    ...     Image.new("RGB", (6, 4), color).save(os.path.join(root, name))
    >>> r = image_folder(root, size=(2, 3))
    >>> len(r), r.classes, [label for _, label in r()]
    (3, ['cat', 'dog'], [0, 0, 1])
    >>> image, label = r[2]
    >>> image.shape, image.dtype, image[0, 0].tolist(), label
    ((2, 3, 3), dtype('uint8'), [0, 0, 255], 1)
    >>> r
    image_folder('...', size=(2, 3))
    >>> image_folder(root, size=0)
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: image_folder: size must be an int >= 1 (a square) or a pair (height, width) of them, got 0
    """
    if not isinstance(root, (str, os.PathLike)):
        raise BadType(f"image_folder: root must be a folder's path (str or os.PathLike), got {type(root).__name__}")
    if mode not in MODES:
        raise BadValue(f"image_folder: mode must be one of {sorted(MODES)}, got {mode!r}")
    if classes is not None:
        if isinstance(classes, str) or not all(isinstance(c, str) for c in classes):
            raise BadType(f"image_folder: classes must be a list of sub-folder names, got {classes!r}")
        classes = tuple(classes)
        if len(set(classes)) != len(classes):
            raise BadValue(f"image_folder: classes has repeated names: {list(classes)}")
    shape = _size(size)
    _pil()  # a missing Pillow is said now, not at the first image
    return ImageFolder(os.fspath(root), shape, mode, classes)


def from_data_dir(data_dir: str | os.PathLike | None = None, data: str | os.PathLike | None = None,
                  size: int | None = None, columns: Any = None) -> ImageFolder:
    """Images in one sub-folder per class (--data ROOT or --data-dir ROOT), as (uint8 RGB image, label).

    The ``image-folder`` reader plugin (``--reader image-folder --data ROOT --size 28``):
    ``image_folder(root, size=size)``. Its entries are (image, label) already:
    ``--columns`` may only say ``image,label``.

    >>> from_data_dir(None)
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: the image-folder reader needs the folder of class sub-folders: give --data-dir ROOT
    """
    root = data if data is not None else data_dir
    if root is None:
        raise BadValue("the image-folder reader needs the folder of class sub-folders: give --data-dir ROOT")
    names = parse_columns(columns)
    if names not in (None, ("image", "label")):
        raise BadValue(f"image-folder: no columns {', '.join(map(repr, names))}; its entries are (image, label): "
                       "leave --columns out")
    return mark_roles(image_folder(root, size=size), f"the image files under {redact(os.fspath(root))}",
                      "the index of the class sub-folder")
