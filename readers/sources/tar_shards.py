"""tar_shards: samples of WebDataset ``.tar`` shards, streamed, sharded by shard file, resumed at (shard, offset).

A sample is a run of consecutive tar members whose names share the key
before the first dot of the base name (``train/00042.jpg`` and
``train/00042.cls``: key ``train/00042``); its fields are named by the
extension after that dot. An entry is the dict of the sample's fields plus
``"__key__"``, as webdataset gives it. The built-in decoders:

=================  ==============================================================
``jpg jpeg png``   Pillow, to a ``uint8`` array H x W x 3 (RGB; grey and RGBA too)
``npy``            ``numpy.load``
``json``           ``json.loads``
``txt``            ``str`` (UTF-8)
``cls``            ``int``
anything else      the member's ``bytes``, or what ``decode``'s function makes
=================  ==============================================================

Each pass splits the shard files between the global workers (file i goes to
worker ``i % total``, after the pass's seeded order when ``seed`` is given),
so a worker opens only its own files; a position counts the worker's entries
and resumes at (shard, offset): whole shards are passed by their headers,
and the offset within one by member names, neither decoded. Shuffle: the
shard order (``seed=``, drawn anew from (seed, pass) every pass), plus a
buffer shuffle over the stream: ``readers.shuffle(tar_shards(...), 1000,
seed=0)``. Files are found and opened only through ``readers.sources.locations``.
"""
from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import tarfile
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from readers.errors import BadType, BadValue, FileError, ReaderkitError
from readers.graph import Share
from readers.identity import function_identity
from readers.launch import worker_info
from readers.plugins.pairs import parse_columns, pick_fields, pillow
from readers.sources.file_access import DISK_BYTES, FileCacheSetting, open_checked
from readers.sources.locations import Stat, expand_paths, open_file, redact
from readers.stage import Stage

__all__ = ["TarMemberError", "TarShardError", "decode_field", "from_data_dir", "split_name", "tar_shards"]

IMAGES = ("jpg", "jpeg", "png")
ON_ERROR = ("raise", "skip")


class TarShardError(FileError):
    """A shard that is not a whole tar file (cut short, or not a tar): the message names the shard."""


class TarMemberError(ReaderkitError, ValueError):
    """A member of a shard that does not decode: the message names the shard and the member."""


def split_name(name: str) -> tuple[str, str]:
    """(key, extension) of a member name, as webdataset splits it: at the first dot of the base name.

    >>> split_name("train/00042.seg.png"), split_name("a.b/c.JSON"), split_name("README")
    (('train/00042', 'seg.png'), ('a.b/c', 'json'), ('README', ''))
    """
    folder, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    return (folder + "/" if folder else "") + stem, ext.lower()


def _image(data: bytes) -> np.ndarray:
    Image = pillow("tar_shards decodes .jpg/.png")
    with Image.open(io.BytesIO(data)) as image:
        if image.mode != "RGB":
            image = image.convert("RGB")
        return np.asarray(image)  # (an RGB image converted to RGB would be copied once more)


BUILTIN: dict[str, Callable[[bytes], Any]] = {
    **dict.fromkeys(IMAGES, _image),
    "npy": lambda data: np.load(io.BytesIO(data), allow_pickle=False),
    "json": json.loads,
    "txt": lambda data: data.decode("utf-8"),
    "cls": lambda data: int(data.decode("ascii").strip()),
}


def decode_field(ext: str, data: bytes, decode: Any = True) -> Any:
    """One field's value: the built-in decoder of extension ``ext`` (the last part of a ``seg.png``),
    else ``decode``'s: a dict's function for ``ext`` (it wins over the built-ins), or a function
    ``decode(ext, data)`` for the extensions without one; ``decode=False`` keeps every field's bytes.

    >>> decode_field("cls", b"7"), decode_field("json", b'{"a": 1}'), decode_field("bin", b"xy")
    (7, {'a': 1}, b'xy')
    >>> decode_field("txt", b"hi", False), decode_field("txt", b"hi", {"txt": bytes.upper})
    (b'hi', b'HI')
    >>> decode_field("csv", b"1,2", lambda ext, data: data.split(b","))
    [b'1', b'2']
    """
    if decode is False:
        return data
    if isinstance(decode, Mapping) and ext in decode:
        return decode[ext](data)
    builtin = BUILTIN.get(ext.rpartition(".")[2])
    if builtin is not None:
        return builtin(data)
    return decode(ext, data) if callable(decode) else data


def _check_whole(path: str, f: Any, end: int) -> None:
    """Refuse a shard whose members stop before tar's end-of-archive blocks: it was cut short."""
    f.seek(end)
    tail = f.read(1024)
    if len(tail) < 1024 or tail.strip(b"\0"):
        raise TarShardError(f"tar_shards: {redact(path)} is cut short (no end-of-archive after byte {end}): the shard "
                            "was not written to its end; write it again (or drop it from the list)")


def _samples(path: str, opener: Callable[[str], Any] = open_file) -> Iterator[list[tuple[str, Callable[[], bytes]]]]:
    """The samples of one shard, each a list of (member name, a function reading its bytes), in order;
    ``opener(path)`` opens it (a reader's opens through its cache and checks a URL is unchanged)."""
    with opener(path) as f:
        try:
            archive = tarfile.open(fileobj=f, mode="r:")
        except tarfile.TarError as exc:
            raise TarShardError(f"tar_shards: {redact(path)} is not a tar file ({exc}); check the path") from None
        members: list = []
        key = None
        try:
            for info in archive:
                if not info.isfile():
                    continue
                this = split_name(info.name)[0]
                if members and this != key:
                    yield members
                    members = []
                key = this
                members.append((info.name, _reader(archive, info, path)))
        except tarfile.TarError as exc:
            raise TarShardError(f"tar_shards: {redact(path)} is cut short or damaged after member "
                                f"{members[-1][0] if members else '(none)'!r} ({exc}); write the shard again") from None
        if members:
            yield members
        _check_whole(path, f, archive.offset)


def _reader(archive: tarfile.TarFile, info: tarfile.TarInfo, path: str) -> Callable[[], bytes]:
    def read() -> bytes:
        try:
            data = archive.extractfile(info).read()  # type: ignore[union-attr]
        except tarfile.TarError as exc:
            raise TarShardError(f"tar_shards: {redact(path)} is cut short in member {info.name!r} ({exc}); "
                                "write the shard again") from None
        if len(data) != info.size:
            raise TarShardError(f"tar_shards: {redact(path)} is cut short in member {info.name!r}; write the shard "
                                "again")
        return data
    return read


class TarShards(Stage):
    """The samples of WebDataset shard files, this global worker's files only (see ``tar_shards``)."""

    name = "tar_shards"

    def __init__(self, paths: list[str], decode: Any, seed: int | None, on_error: str,
                 file_cache: FileCacheSetting | None = None):
        super().__init__()
        self.paths, self.decode, self.seed, self.on_error = paths, decode, seed, on_error
        self.file_cache = FileCacheSetting(None, DISK_BYTES, "tar_shards") if file_cache is None else file_cache
        self.seen: dict[str, Stat] = {}  # a URL's size and version when this reader first opened it

    def _open(self, path: str) -> Any:
        """A shard opened to read: a URL by ranges or from the cache, refused if it changed since first seen."""
        return open_checked(path, self.seen, self.file_cache.cache(path))

    def share(self) -> Share:
        info = worker_info()
        return Share(info.global_id, info.total, True)

    def _mine(self, pass_id: int) -> list[str]:
        """This worker's shard files of pass ``pass_id``, in the order it reads them."""
        order = np.arange(len(self.paths))
        if self.seed is not None:
            order = np.random.default_rng([self.seed, pass_id]).permutation(len(self.paths))
        k, total = self.share()[:2]
        return [self.paths[i] for i in order[k::total]]

    def _entry(self, path: str, members: list) -> Any:
        key = split_name(members[0][0])[0]
        entry: dict[str, Any] = {"__key__": key}
        for name, read in members:
            data = read()  # a shard cut short raises, whatever on_error says
            ext = split_name(name)[1]
            try:
                entry[ext] = decode_field(ext, data, self.decode)
            except ImportError:
                raise
            except Exception as exc:
                error = TarMemberError(f"tar_shards: member {name!r} of {redact(path)} does not decode as .{ext} "
                                       f"({type(exc).__name__}: {exc}); fix or drop that sample, or pass "
                                       "on_error='skip' to skip it with a warning")
                if self.on_error == "raise":
                    raise error from exc
                warnings.warn(str(error), stacklevel=2)
                return None
        return entry

    def share_count(self, pass_id: int, limit: int) -> int:
        """The entries of this worker's shards in pass ``pass_id``, up to ``limit``: counted from the
        tar headers, or (``on_error="skip"``, where a sample that does not decode is no entry) by decoding."""
        if limit <= 0:
            return 0
        if self.on_error == "skip":
            samples: Iterator = self._seek(pass_id, 0)
        else:
            samples = (sample for path in self._mine(pass_id) for sample in _samples(path, self._open))
        with contextlib.closing(samples):  # the last shard opened is closed now
            return sum(1 for _ in itertools.islice(samples, limit))

    def _stream(self, pass_id: int) -> Iterator[dict]:
        return self._seek(pass_id, 0)

    def _seek(self, pass_id: int, cursor: int) -> Iterator[dict]:
        for path in self._mine(pass_id):
            for members in _samples(path, self._open):
                if cursor and self.on_error == "raise":  # no sample is skipped: pass them unread
                    cursor -= 1
                    continue
                entry = self._entry(path, members)
                if entry is None:
                    continue
                if cursor:  # a skipped sample is no entry: count only those given
                    cursor -= 1
                    continue
                yield entry

    def _options(self) -> str:
        opts = f"{len(self.paths)} shard{'s' if len(self.paths) != 1 else ''}"
        if self.decode is not True:
            opts += f", decode={self.decode!r}" if not callable(self.decode) else ", decode=<function>"
        opts += "" if self.seed is None else f", seed={self.seed}"
        return opts + ("" if self.on_error == "raise" else f", on_error={self.on_error!r}")

    def identity(self) -> str:
        title = self.title()
        if callable(self.decode):
            title += " " + function_identity(self.decode)
        return title


def tar_shards(urls: Any, *, decode: Any = True, seed: int | None = None, on_error: str = "raise",
               cache_dir: str | os.PathLike | None = None, cache_dir_bytes: int = DISK_BYTES) -> TarShards:
    """A reader of the samples of WebDataset shards: dicts of fields by extension, plus ``"__key__"``.

    ``urls``: a shard file, a folder of them, a glob, brace patterns
    (``shard-{000000..000099}.tar``) or a list. ``decode``: True (the
    built-in decoders; other fields as bytes), False (every field's bytes),
    a dict ``{extension: function(bytes)}`` (over the built-ins), or a
    function ``decode(ext, data)`` for the extensions without a built-in.
    ``seed``: shuffle the shard order, anew each pass (add
    ``readers.shuffle(reader, buf_size, seed=...)`` to shuffle samples).
    ``on_error``: a member that does not decode raises ``TarMemberError``
    naming the shard and member ("raise"), or its sample is skipped with a
    warning ("skip"). A shard cut short always raises ``TarShardError``.
    Nothing is opened until a pass starts; each global worker reads its own files.

    A shard may be a URL (``https://host/shard-{000..099}.tar``, ``s3://bucket/prefix/``,
    whatever fsspec reads; ``pip install 'readerkit[cloud]'``): it is streamed
    by range requests of ``locations.BLOCK`` bytes, or, with ``cache_dir``,
    downloaded whole once into that local folder (at most ``cache_dir_bytes``
    of shards kept, the least recently used dropped) and read from there
    after. A shard that changed since the reader first read it (another
    size or ETag) is refused, naming it. Local shards are never cached.

    >>> import tempfile, os, webdataset as wds, readers
    >>> folder = tempfile.mkdtemp()
    >>> with wds.ShardWriter(os.path.join(folder, "shard-%03d.tar"), maxcount=2, verbose=0) as sink:
    ...     for i in range(3):
    ...         sink.write({"__key__": f"s{i}", "cls": i, "txt": f"sample {i}"})
    >>> r = tar_shards(os.path.join(folder, "shard-{000..001}.tar"))
    >>> [(e["__key__"], e["cls"], e["txt"]) for e in r()]
    [('s0', 0, 'sample 0'), ('s1', 1, 'sample 1'), ('s2', 2, 'sample 2')]
    >>> r
    tar_shards(2 shards)
    >>> shuffled = readers.shuffle(tar_shards(folder, seed=0), 100, seed=0)  # shard order, then a buffer
    >>> sorted(e["cls"] for e in shuffled())
    [0, 1, 2]
    """
    if not (isinstance(decode, bool) or callable(decode) or isinstance(decode, Mapping)):
        raise BadType(f"tar_shards: decode={decode!r}: give True, False, a dict {{extension: function}} or a "
                      "function(ext, data)")
    if isinstance(decode, Mapping):
        bad = [k for k, f in decode.items() if not callable(f)]
        if bad:
            raise BadType(f"tar_shards: decode[{bad[0]!r}] is not callable; give a function of the member's bytes")
    if on_error not in ON_ERROR:
        raise BadValue(f"tar_shards: on_error must be 'raise' or 'skip', got {on_error!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        raise BadType(f"tar_shards: seed must be an int or None, got {seed!r}")
    paths = expand_paths(urls, suffixes=[".tar"], what="tar shards")
    file_cache = FileCacheSetting(cache_dir, cache_dir_bytes, "tar_shards")
    return TarShards(paths, decode, None if seed is None else int(seed), on_error, file_cache)


def from_data_dir(data_dir: str | os.PathLike | None = None, data: str | None = None, columns: Any = None,
                  size: int | None = None) -> Any:
    """WebDataset .tar shards at --data or --data-dir (a folder, a glob or a brace pattern), as (image, label).

    The ``tar-shards`` plugin: ``tar_shards(data)`` with its defaults, each
    sample's fields picked by ``--columns IMAGE,LABEL`` (by default its first
    image field, ``jpg``, ``jpeg`` or ``png``, and ``cls``), the image resized
    to ``--size`` x ``--size`` when given.

    >>> from_data_dir(None)
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: tar-shards: give the shards with --data-dir (a folder, a glob or 'shard-{000..009}.tar')
    """
    where = data if data is not None else data_dir
    if where is None:
        raise BadValue("tar-shards: give the shards with --data-dir (a folder, a glob or 'shard-{000..009}.tar')")
    names = parse_columns(columns)
    if names is not None and len(names) != 2:
        raise BadValue(f"tar-shards: --columns {','.join(names)}: give two fields, IMAGE,LABEL (e.g. jpg,cls)")
    image, label = names or (None, "cls")
    return pick_fields(tar_shards(where), image, label, size)
