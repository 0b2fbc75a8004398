"""The (image, label) entries of a format reader for the command line: columns or fields picked, image bytes decoded.

The built-in format plugins (``parquet``, ``arrow``, ``tar-shards``,
``image-folder``) take the command line's ``--data``, ``--columns`` and
``--size`` through ``reader_splits``. A table's or a sample's image is often
stored as encoded bytes (PNG or JPEG; a Hugging Face ``Image`` column is a
struct whose ``"bytes"`` field holds them): ``decode_images`` maps a reader
so that such values come decoded with Pillow as ``uint8`` arrays (a grey
image H x W, a colour one H x W x 3), resized to ``size`` x ``size`` when
given. ``pick_fields`` turns a tar shard's dict into ``(image, label)``.
Both keep the reader's access (a map of an indexed reader is indexed), its
sharding, seeding and resume, and both pickle. ``describe_roles`` gives the
words ``train`` prints: which column is the image and which the label.

>>> import io, readers
>>> from PIL import Image
>>> png = io.BytesIO()
>>> Image.new("L", (3, 2), color=9).save(png, format="PNG")
>>> r = decode_images(readers.from_sequence([(png.getvalue(), 1)]), ("image", "label"))
>>> image, label = r.at(0)
>>> image.dtype, image.shape, label
(dtype('uint8'), (2, 3), 1)
>>> describe_roles(r)
"image = column 'image' (uint8[2, 3] decoded from PNG), label = column 'label'"
"""
from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from readers.errors import BadValue, ReaderkitError
from readers.ops.maps import map_readers

__all__ = ["DecodeImages", "ImageDecodeFailed", "PickFields", "PillowMissing", "decode_images", "describe_roles", "image_format",
           "mark_roles", "parse_columns", "pick_fields", "pillow", "scale_pixels"]

#: The first bytes of the encoded images Pillow decodes here, and the format's name.
MAGIC = ((b"\x89PNG\r\n\x1a\n", "PNG"), (b"\xff\xd8\xff", "JPEG"), (b"GIF8", "GIF"), (b"BM", "BMP"),
         (b"RIFF", "WEBP"))
#: A tar shard's image fields, in the order the first present one is taken as the image.
IMAGE_FIELDS = ("jpg", "jpeg", "png", "webp", "ppm", "pgm", "bmp")


class ImageDecodeFailed(ReaderkitError, ValueError):
    """A column's or field's bytes looked like an image and did not decode; the message names the column."""


def parse_columns(text: str | Sequence[str] | None, option: str = "--columns") -> tuple[str, ...] | None:
    """The names of a ``--columns`` value (``"image,label"``), None when not given; an empty name is an error.

    >>> parse_columns("image, label"), parse_columns(None), parse_columns(["a"])
    (('image', 'label'), None, ('a',))
    >>> parse_columns("image,")
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: --columns 'image,': an empty column name; give names separated by commas, e.g. image,label
    """
    if text is None:
        return None
    names = tuple(n.strip() for n in (text.split(",") if isinstance(text, str) else text))
    if not names or not all(names):
        raise BadValue(f"{option} {text!r}: an empty column name; give names separated by commas, e.g. image,label")
    return names


def _encoded(value: Any) -> bytes | None:
    """The encoded image bytes ``value`` holds (bytes, or a struct with ``"bytes"``), None for anything else."""
    if isinstance(value, Mapping) and isinstance(value.get("bytes"), (bytes, bytearray)):
        value = value["bytes"]
    if isinstance(value, (bytes, bytearray)) and image_format(value) is not None:
        return bytes(value)
    return None


def image_format(value: Any) -> str | None:
    """The image format ("PNG", "JPEG", ...) of encoded bytes (or a struct with ``"bytes"``), else None.

    >>> image_format(b"\\x89PNG\\r\\n\\x1a\\n..."), image_format({"bytes": b"\\xff\\xd8\\xff\\xe0", "path": None})
    ('PNG', 'JPEG')
    >>> image_format(b"text"), image_format(3) is None
    (None, True)
    """
    if isinstance(value, Mapping):
        value = value.get("bytes")
    if not isinstance(value, (bytes, bytearray)):
        return None
    return next((name for magic, name in MAGIC if bytes(value[:len(magic)]) == magic), None)


class PillowMissing(ReaderkitError, ModuleNotFoundError):
    """Pillow, which decodes the images, is not installed: the message says how to install it."""


def pillow(who: str = "image bytes are decoded") -> Any:
    """Pillow's ``Image`` module, or ``PillowMissing`` saying that ``who`` needs it and which ``pip install`` brings
    it: the one import of Pillow for every reader that decodes images.

    >>> pillow().__name__
    'PIL.Image'
    """
    try:
        from PIL import Image
    except ImportError:
        raise PillowMissing(f"{who} with Pillow, which is not installed: pip install pillow "
                            "(or pip install readerkit[images])") from None
    return Image


def _resized(array: np.ndarray, size: int | None) -> np.ndarray:
    if size is None or array.shape[:2] == (size, size):
        return array
    Image = pillow()
    image = Image.fromarray(array[:, :, 0] if array.ndim == 3 and array.shape[2] == 1 else array)
    return np.asarray(image.resize((size, size), Image.Resampling.BILINEAR))


def _decode(data: bytes, size: int | None, where: str) -> np.ndarray:
    Image = pillow()
    try:
        with Image.open(io.BytesIO(data)) as opened:
            image = opened if opened.mode in ("L", "RGB") else opened.convert("RGB")
            if size is not None:
                image = image.resize((size, size), Image.Resampling.BILINEAR)
            return np.asarray(image)
    except Exception as exc:  # whatever Pillow raises about bad bytes
        raise ImageDecodeFailed(f"{where}: its {image_format(data)} bytes do not decode ({type(exc).__name__}: "
                                f"{exc}); fix or drop that row") from exc


class DecodeImages:
    """Map a tuple entry: each value that holds PNG/JPEG bytes decoded to ``uint8``, resized to ``size``."""

    def __init__(self, names: Sequence[str], size: int | None = None):
        self.names, self.size = tuple(names), size

    def __call__(self, entry: Any) -> Any:
        values = entry if isinstance(entry, tuple) else (entry,)
        out = []
        for i, value in enumerate(values):
            data = _encoded(value)
            where = f"column {self.names[i]!r}" if i < len(self.names) else f"column {i}"
            out.append(value if data is None else _decode(data, self.size, where))
        return tuple(out) if isinstance(entry, tuple) else out[0]

    def __repr__(self) -> str:
        return f"DecodeImages({list(self.names)!r}, size={self.size!r})"

    @property
    def __name__(self) -> str:  # its name in a pipeline's repr and identity (``describe``): with the
        return repr(self)  # columns, so a resume that names other columns says which


class PickFields:
    """Map a tar shard's dict to ``(image, label)``: field ``image`` (None: the first image field) and ``label``."""

    def __init__(self, image: str | None, label: str, size: int | None = None):
        self.image, self.label, self.size = image, label, size

    def image_field(self, entry: Mapping[str, Any]) -> str:
        """The field this sample's image is in."""
        if self.image is not None:
            return self.image
        found = next((f for f in IMAGE_FIELDS if f in entry), None)
        if found is None:
            raise BadValue(f"sample {entry.get('__key__')!r} has no image field (one of {', '.join(IMAGE_FIELDS)}); "
                           f"its fields are {_fields(entry)}: name the image with --columns FIELD,LABEL")
        return found

    def __call__(self, entry: Mapping[str, Any]) -> tuple[Any, Any]:
        image = self.image_field(entry)
        for name in (image, self.label):
            if name not in entry:
                raise BadValue(f"sample {entry.get('__key__')!r} has no field {name!r}; its fields are "
                               f"{_fields(entry)}: choose two with --columns IMAGE,LABEL")
        value = entry[image]
        data = _encoded(value)
        value = _decode(data, self.size, f"sample {entry.get('__key__')!r}, field {image!r}") if data else value
        if isinstance(value, np.ndarray):
            value = _resized(value, self.size)
        return value, entry[self.label]

    def __repr__(self) -> str:
        return f"PickFields({self.image!r}, {self.label!r}, size={self.size!r})"

    @property
    def __name__(self) -> str:  # (as DecodeImages')
        return repr(self)


def _fields(entry: Mapping[str, Any]) -> str:
    return ", ".join(repr(k) for k in entry if k != "__key__")


def _mark(reader: Any, source: Any, image_role: str, label_role: str, names: Sequence[str] | None) -> Any:
    reader.roles_source, reader.image_role, reader.label_role = source, image_role, label_role
    reader.entry_names = None if names is None else tuple(names)
    return reader


def decode_images(reader: Any, names: Sequence[str], size: int | None = None) -> Any:
    """``reader`` (tuple entries whose columns are ``names``) with image bytes decoded by Pillow to ``uint8``.

    >>> import readers
    >>> list(decode_images(readers.from_sequence([(1, b"x")]), ("a", "b"))())
    [(1, b'x')]
    """
    names = tuple(names)
    image, label = (names + ("", ""))[:2]
    mapped = map_readers(DecodeImages(names, size), reader)
    return _mark(mapped, reader, f"column {image!r}", f"column {label!r}", names)


def pick_fields(reader: Any, image: str | None, label: str = "cls", size: int | None = None) -> Any:
    """A tar shard reader's dicts as ``(image, label)``: field ``image`` (None: its first image field) and ``label``.

    >>> import readers
    >>> r = pick_fields(readers.from_sequence([{"__key__": "a", "npy": 1.5, "cls": 2}]), "npy")
    >>> list(r()), describe_roles(r)
    ([(1.5, 2)], "image = field 'npy' (float), label = field 'cls'")
    """
    mapped = map_readers(PickFields(image, label, size), reader)
    return _mark(mapped, reader, "" if image is None else f"field {image!r}", f"field {label!r}", None)


def mark_roles(reader: Any, image_role: str, label_role: str, names: Sequence[str] | None = None) -> Any:
    """Tell ``describe_roles`` what ``reader``'s (image, label) are, in words (and ``names``, its columns' names,
    when it has any); returns ``reader``.

    >>> import readers
    >>> describe_roles(mark_roles(readers.from_sequence([(0.5, 1)]), "the x", "the y"))
    'image = the x (float), label = the y'
    """
    return _mark(reader, None, image_role, label_role, names)


class ScalePixels:
    """Map an (image, label) entry: a ``uint8`` image to ``float32`` in [0, 1] (divided by 255); others as they are."""

    def __call__(self, entry: tuple[Any, Any]) -> tuple[Any, Any]:
        image, label = entry
        if isinstance(image, np.ndarray) and image.dtype == np.uint8:
            image = image * np.float32(1 / 255)
        return image, label

    def __repr__(self) -> str:
        return "ScalePixels()"


def scale_pixels(reader: Any) -> Any:
    """``reader``'s (image, label) entries with ``uint8`` images as ``float32`` in [0, 1], as ``train`` wants them.

    >>> import readers
    >>> image, label = scale_pixels(readers.from_sequence([(np.array([0, 255], np.uint8), 1)])).at(0)
    >>> image.dtype, image.tolist(), label
    (dtype('float32'), [0.0, 1.0], 1)
    """
    return map_readers(ScalePixels(), reader)


def _shown(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype}[{', '.join(map(str, value.shape))}]"
    return type(value).__name__


def describe_roles(reader: Any, note: str = "") -> str | None:
    """Which column or field of ``reader`` is the image and which the label (read from its first entry), or None
    for a reader that was not made by ``decode_images``, ``pick_fields`` or ``mark_roles``; ``note`` is added to
    what is said of the image.

    >>> import readers
    >>> describe_roles(readers.from_sequence([1])) is None
    True
    """
    if not hasattr(reader, "image_role"):
        return None
    entry = next(iter(reader()), None)
    if not isinstance(entry, tuple) or len(entry) < 2:
        return None
    source = reader.roles_source
    raw = None if source is None else next(iter(source()), None)
    image_role, how = reader.image_role, ""
    if isinstance(raw, Mapping):  # a tar shard's sample: which field, decoded by tar_shards from its extension
        field = reader.func.image_field(raw) if hasattr(reader, "func") else None
        image_role = image_role or f"field {field!r}"
        if field in IMAGE_FIELDS and isinstance(entry[0], np.ndarray):
            how = f" decoded from {'JPEG' if field in ('jpg', 'jpeg') else field.upper()}"
    elif isinstance(raw, tuple) and raw and image_format(raw[0]) is not None:
        how = f" decoded from {image_format(raw[0])}"
    return f"image = {image_role} ({_shown(entry[0])}{how}{note}), label = {reader.label_role}"
