"""Pre-tokenized text: an indexed reader of fixed windows over memory-mapped token files.

``tokens(path, seq_len=...)`` reads ``.bin`` files (raw little-endian
tokens, 2 or 4 bytes each) and ``.npy`` files (through numpy's own header,
never as raw bytes). Entry i is window i: ``seq_len + 1`` consecutive tokens,
the model's inputs and, shifted by one, its next-token targets. Windows start
every ``seq_len`` tokens, so each token is a target exactly once, and never
cross the end of a file: a file of n tokens holds ``(n - 1) // seq_len``
windows, and its last tokens that do not fill one are left out (at most
``seq_len`` per file).

Nothing is read to build the reader: the lengths come from the file sizes
(and the ``.npy`` headers). The files are memory-mapped in each process that
reads them, and a batch gathers its windows with one vectorised take per
file from a strided view of the mapping, so a global shuffle over billions of
tokens needs no index array and no copy of the data.

A mapped file must not change while it is read: a read past the end of a file
cut short kills the process (SIGBUS), and a file rewritten in place changes
the entries under the reader. So the reader records each file's size,
modification time and identity (inode, device) when it is built. Every read
checks first that the mapped file keeps its size (an ``fstat`` of the map's
own descriptor, about 0.4 us a read); the whole record is checked when a
file is mapped, at each pass start, before a file is read whole
(``largest_token``, ``digest``) and on a read at most ``CHECK_EVERY`` seconds
after the last such check. A file that changed is refused with a
``TokenFileChanged`` naming it; a server answers the request with a
``server_error`` and serves on. Only a change in the microseconds between a
check and the read it guards can still get past.

The first time a file is mapped in a process, a sample of a few KiB is
checked (``readers.tokenized.token_checks``), once: a 2-byte read of a
``.bin`` file that looks like 4-byte tokens (every second token 0, or under
16 while the others reach far higher) is refused, unless ``vocab_size`` is
given, and an id beyond a given ``vocab_size`` as a wrong token size or a
stale data.toml. A file passed stays passed in that process (its stamp is
checked on every mapping), so a file mapped again is not sampled again.

Any path may also be a URL (``http(s)://``, ``s3://``, whatever fsspec
reads): a folder or prefix URL, a glob, or object URLs, read by byte ranges
(``readers.tokenized.token_objects``) beside the mapped files, with the same
layouts, checks, entries and digest. Building the reader costs one ``stat``
per object (and a small header read per ``.npy``). An object is compared with
its first ``stat`` (size and ETag or version) on its first read in each pass
in each process, one request per object read, so one rewritten between passes
is refused with ``TokenFileChanged`` naming its URL before anything of it is
read again; a rewrite in the middle of a pass is seen at the next pass.
"""
from __future__ import annotations

import collections
import mmap
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from readers.digests import array_digest, hasher
from readers.errors import BadType, BadValue, FileError, MissingFile, make_folder
from readers.sources import locations
from readers.sources.locations import is_url, redact
from readers.stage import IndexedReader
from readers.tokenized import token_checks, token_objects
from readers.tokenized.runfile_fields import MOST_IDS

__all__ = ["TokenFileChanged", "TokenFileError", "Tokens", "check_new_corpus", "tokenize_bytes", "tokens"]

#: Bytes per token and the little-endian dtype of a .bin file's tokens.
TOKEN_DTYPES = {2: np.dtype("<u2"), 4: np.dtype("<u4")}
SUFFIXES = (".bin", ".npy")
_INT32_MAX = np.iinfo(np.int32).max


class TokenFileError(BadValue):
    """A token file that cannot be read as asked; the message names the file and the fault."""


class TokenFileChanged(TokenFileError):
    """A token file that changed (cut short, rewritten, replaced or removed) after the reader opened it."""


def _files(path: Any) -> list[str]:
    """The token files ``path`` names: a file, a folder's .bin and .npy files (by name), or a list of either."""
    if isinstance(path, (str, os.PathLike)):
        path = [path]
    elif not isinstance(path, Sequence) or not path:
        raise BadType(f"tokens: path must be a file, a folder or a non-empty list of them, got {path!r}")
    found = []
    for item in map(os.fspath, path):
        if is_url(item):
            found += _objects(item)
        elif os.path.isdir(item):
            names = sorted(os.listdir(item))
            inside = [os.path.join(item, n) for n in names if n.endswith(SUFFIXES) and not n.startswith(".")
                      and os.path.isfile(os.path.join(item, n))]
            if not inside:
                shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "") if names else "nothing"
                raise TokenFileError(f"{item}: no .bin or .npy token files in this folder (it holds {shown}); "
                                     "make them with `python cli.py tokenize SRC... --out DIR`")
            found += inside
        elif not os.path.exists(item):
            raise TokenFileError(f"{item}: no such file or folder; check the path")
        elif not item.endswith(SUFFIXES):
            raise TokenFileError(f"{item}: not a token file: give .bin files (raw little-endian tokens) or .npy "
                                 "files, or a folder of them")
        else:
            found.append(item)
    return found


def _objects(url: str) -> list[str]:
    """The token objects a URL names: itself, a folder's (prefix's) or a glob's .bin and .npy objects."""
    found = locations.expand_paths(url, suffixes=SUFFIXES, what=".bin or .npy token files")
    wrong = [u for u in found if not _suffix(u).endswith(SUFFIXES)]
    if wrong:
        raise TokenFileError(f"{redact(wrong[0])}: not a token file: give .bin objects (raw little-endian tokens) or "
                             ".npy objects, or a folder (prefix) of them")
    return found


def _suffix(path: str) -> str:
    """The name a suffix is read from: a URL's path, without its query string (a signed URL's)."""
    return redact(path) if is_url(path) else path


def _layout(path: str, token_size: int, size: int | None = None) -> tuple[int, np.dtype, int]:
    """(tokens, dtype, byte offset of the first token) of one file, from its size or its .npy header alone,
    checked against ``token_size``; nothing is mapped or read past the header. ``size``: a URL's, from its
    ``stat`` (its header is read by a range request)."""
    remote, shown = is_url(path), redact(path)
    if _suffix(path).endswith(".npy"):
        try:
            with (token_objects.header(path, size) if remote else open(path, "rb")) as f:
                version = np.lib.format.read_magic(f)
                shape, fortran, dtype = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                                         else np.lib.format.read_array_header_2_0(f))
                offset = f.tell()
        except ValueError as exc:
            raise TokenFileError(f"{shown}: not a readable .npy file ({exc}); save tokens with np.save") from None
        if dtype.kind not in "iu" or dtype.itemsize != token_size:
            name = TOKEN_DTYPES[token_size].name
            raise TokenFileError(
                f"{shown} holds {dtype} values ({dtype.itemsize} bytes each), which disagrees with "
                f"token_size={token_size}: save the tokens as {name} (np.save(path, tokens.astype(np.{name}))), "
                "or pass the token_size they were saved with")
        if len(shape) != 1:
            raise TokenFileError(f"{shown} holds an array of shape {shape}; token files hold one sequence "
                                 "(1-D): save tokens.reshape(-1)")
        _check_npy_size(shown, shape[0], dtype, offset, os.path.getsize(path) if size is None else size)
        return shape[0], dtype, offset
    size = os.path.getsize(path) if size is None else size
    if size % token_size:
        other = 6 - token_size
        hint = f" (try token_size={other})" if size % other == 0 else ""
        raise TokenFileError(f"{shown} has {size:,} bytes, not a multiple of token_size={token_size}: it was "
                             f"cut short, or written with another token size{hint}")
    return size // token_size, TOKEN_DTYPES[token_size], 0


def _check_npy_size(path: str, n: int, dtype: np.dtype, offset: int, size: int) -> None:
    """Refuse a .npy file of ``size`` bytes whose header announces more tokens than its bytes hold (cut short, or
    its header edited): mapping it would fail, and reading past its end would kill the process."""
    if offset + n * dtype.itemsize > size:
        held = max(size - offset, 0) // dtype.itemsize
        raise TokenFileError(f"{path}: its .npy header announces {n:,} tokens ({n * dtype.itemsize:,} bytes after "
                             f"the {offset}-byte header), but the file has {size:,} bytes, room for {held:,}: it was "
                             "cut short or its header edited; save the tokens again with np.save")


#: What a token file is, as the reader opened it: size, modification time (ns), inode and device.
Stamp = tuple[int, int, int, int]


def _stamp(path: str) -> Stamp:
    found = os.stat(path)
    return found.st_size, found.st_mtime_ns, found.st_ino, found.st_dev


def _check_unchanged(path: str, stamp: Stamp, now: os.stat_result | Stamp | None = None) -> None:
    """Refuse ``path`` when it is no longer the file of ``stamp`` (``_stamp``): reading a mapped file cut short
    kills the process, and one rewritten would give other entries than before. ``now``: the file's
    ``os.fstat`` (or stamp), when it is open already (else the path is looked up).

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> np.arange(8, dtype="<u2").tofile(f"{folder.name}/a.bin")
    >>> stamp = _stamp(f"{folder.name}/a.bin")
    >>> _check_unchanged(f"{folder.name}/a.bin", stamp)
    >>> os.truncate(f"{folder.name}/a.bin", 4)
    >>> _check_unchanged(f"{folder.name}/a.bin", stamp)
    Traceback (most recent call last):
    ...
    readers.tokenized.windows.TokenFileChanged: .../a.bin changed while it was being read: it had 16 bytes when the reader opened it and has 4 now (cut short or rewritten); ...
    """
    try:
        now = os.stat(path) if now is None else now
    except OSError as exc:
        change = f"it is gone ({exc.strerror or exc})"
    else:
        found = (now.st_size, now.st_mtime_ns, now.st_ino, now.st_dev) if isinstance(now, os.stat_result) else now
        if found == stamp:
            return
        if found[2:] != stamp[2:]:
            change = "another file has taken its name (a new inode)"
        elif found[0] != stamp[0]:
            how = "cut short or rewritten" if found[0] < stamp[0] else "written to"
            change = f"it had {stamp[0]:,} bytes when the reader opened it and has {found[0]:,} now ({how})"
        else:
            change = "it was rewritten in place (its modification time moved), so its windows may hold other tokens"
    raise TokenFileChanged(f"{path} changed while it was being read: {change}; a token file must stay as it is while "
                           "a reader or server uses it: write new tokens to new files, then build the reader (or "
                           "restart the server) again")


#: The most seconds between two full checks of a mapped file that is being read (its size is checked on every
#: read): a file rewritten in place at the same size is refused within this time.
CHECK_EVERY = 1.0

#: Files kept mapped at once per process: each mapping holds a file descriptor, and corpora come in
#: thousands of shards. The least recently read is unmapped first.
MAPPED = 128


def _check_token_size(token_size: Any, where: str) -> None:
    if token_size not in TOKEN_DTYPES or isinstance(token_size, bool):
        raise BadValue(f"{where}: token_size must be 2 or 4 (bytes per token), got {token_size!r}")


class Tokens(IndexedReader):
    """Windows of ``seq_len + 1`` tokens over memory-mapped token files (see ``tokens``).

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> np.arange(9, dtype="<u2").tofile(f"{folder.name}/a.bin")
    >>> Tokens([f"{folder.name}/a.bin"], 4, 2)
    tokens(seq_len=4, token_size=2: 1 file, 9 tokens)
    """

    name = "tokens"

    def __init__(self, paths: list[str], seq_len: int, token_size: int, vocab_size: int | None = None):
        super().__init__()
        self.paths, self.seq_len, self.token_size = paths, seq_len, token_size
        self.remote = [k for k, p in enumerate(paths) if is_url(p)]  # objects read by ranges, not mapped
        self._remote = frozenset(self.remote)
        # before the layouts: a change while they are read is seen; a URL's Stat (size, version), a request each
        self.stamps: list[Any] = [_stamp(p) if not is_url(p) else None for p in paths]
        for k, found in zip(self.remote, locations.stats([paths[k] for k in self.remote])):
            self.stamps[k] = found
        self.vocab_size = vocab_size
        self.layouts: list[tuple[int, np.dtype, int]] = [None] * len(paths)  # type: ignore[list-item]
        for k, p in enumerate(paths):
            if not is_url(p):
                self.layouts[k] = _layout(p, token_size)
        found = token_objects.at_once(lambda k: _layout(paths[k], token_size, self.stamps[k].size), self.remote)
        for k, layout in zip(self.remote, found):
            self.layouts[k] = layout
        self.sizes = [n for n, _, _ in self.layouts]
        short = [(redact(p), n) for p, n in zip(paths, self.sizes) if n < seq_len + 1]
        if short:
            shown = "; ".join(f"{p} holds {n:,}" for p, n in short[:3]) + ("; ..." if len(short) > 3 else "")
            raise TokenFileError(
                f"{len(short)} token file{'s are' if len(short) > 1 else ' is'} shorter than one window of "
                f"seq_len + 1 = {seq_len + 1:,} tokens ({shown}); windows never cross files, so join short "
                "documents into larger files, or lower seq_len")
        counts = [(n - 1) // seq_len for n in self.sizes]
        self.offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)  # window index of each file
        # file k -> [its windows' view, its map, when it was last checked unchanged (time.monotonic)]
        self._views: collections.OrderedDict[int, list] = collections.OrderedDict()
        self._sampled_files: set[int] = set()  # files whose sample passed, in this process (_sampled)
        self._seen_in_pass: set[int] = set()  # objects checked unchanged in this process since its pass began
        self._block = token_objects.block_windows(seq_len, token_size)  # windows per block of an object
        self._blocks = token_objects.Blocks()  # blocks of objects fetched whole, in this process
        self._recent: dict[tuple[int, int], int] = {}  # windows the last look-ahead read by ranges, by block

    def _tokens(self, k: int) -> tuple[np.ndarray, mmap.mmap]:
        """File ``k``'s tokens as a read-only array over a memory map of the file, and the map, once the file is
        checked unchanged; the map is made from the descriptor that was checked, so it is of the file the
        reader was built on."""
        try:
            f = open(self.paths[k], "rb")
        except OSError:
            _check_unchanged(self.paths[k], self.stamps[k])  # gone, or another file: say so
            raise
        with f:  # the map holds a descriptor of its own
            _check_unchanged(self.paths[k], self.stamps[k], os.fstat(f.fileno()))
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        n, dtype, offset = self.layouts[k]
        return np.frombuffer(mapped, dtype=dtype, count=n, offset=offset), mapped

    def _window_view(self, k: int) -> np.ndarray:
        """File ``k``'s windows as a (windows, seq_len + 1) strided view of its mapping; no copy. At most
        MAPPED files stay mapped.

        A file cut short under its map would kill the process at a read past
        its new end, so every read checks first that the mapped file keeps
        its size (an ``fstat`` of the map's descriptor, a quarter of a
        microsecond); its modification time and inode are checked when it is
        mapped, at each pass start (``for_pass``), and on a read at most
        ``CHECK_EVERY`` seconds after the last check.
        """
        found = self._views.get(k)
        if found is None:
            a, mapped = self._sampled(k)
            view = np.lib.stride_tricks.as_strided(
                a, shape=(int(self.offsets[k + 1] - self.offsets[k]), self.seq_len + 1),
                strides=(self.seq_len * a.strides[0], a.strides[0]), writeable=False)
            self._views[k] = [view, mapped, time.monotonic()]
            if len(self._views) > MAPPED:
                self._views.popitem(last=False)  # unmapped once no batch holds a view of it
            return view
        view, mapped, checked = found
        self._views.move_to_end(k)
        stamp = self.stamps[k]
        if mapped.size() != stamp[0]:
            _check_unchanged(self.paths[k], stamp, (mapped.size(), *stamp[1:]))
        if time.monotonic() - checked > CHECK_EVERY:
            _check_unchanged(self.paths[k], stamp)
            found[2] = time.monotonic()
        return view

    def for_pass(self, pass_id: int) -> Tokens:
        """Itself, once every file is checked unchanged (size, modification time, inode): a pass starts by
        binding its source to the pass (``Stage.for_pass``), so a file rewritten or replaced since the reader
        was built is refused before the pass reads anything.

        >>> import tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> np.arange(9, dtype="<u2").tofile(f"{folder.name}/a.bin")
        >>> r = tokens(folder.name, seq_len=4)
        >>> os.remove(f"{folder.name}/a.bin")
        >>> list(r())
        Traceback (most recent call last):
        ...
        readers.tokenized.windows.TokenFileChanged: .../a.bin changed while it was being read: it is gone (No such file or directory); ...
        """
        for path, stamp in zip(self.paths, self.stamps):
            if not isinstance(stamp, locations.Stat):
                _check_unchanged(path, stamp)
        self._seen_in_pass = set()  # each object is compared with its stat again on its first read in this pass
        return super().for_pass(pass_id)

    def _sampled(self, k: int) -> tuple[np.ndarray, mmap.mmap]:
        """``_tokens(k)`` (the array and its map), once a sample of it is checked against the token size and the
        vocabulary size: the first time in this process only. ``_tokens`` checks the file's stamp on every
        mapping, so a file that passed is the same file, and its sample need not be read again (with more files
        than ``MAPPED`` read at random, almost every read maps one again)."""
        a, mapped = self._tokens(k)
        if k in self._sampled_files:
            return a, mapped
        problem = (token_checks.four_byte_problem(self.paths[k], a, self.token_size, self.vocab_size)
                   or token_checks.vocabulary_problem(self.paths[k], a, self.vocab_size))
        if problem:
            raise TokenFileError(problem)
        self._sampled_files.add(k)
        return a, mapped

    def _ready(self, k: int) -> None:
        """Object ``k`` (a URL) compared with its first ``stat`` on its first read in this pass in this process,
        and its sample checked on its first read in this process, as a mapped file's (``_sampled``)."""
        url, seen = self.paths[k], self.stamps[k]
        if k not in self._seen_in_pass:
            try:
                now = locations.stat(url)
            except MissingFile:
                now = None
            if now != seen:
                change = ("it is gone (no such object)" if now is None else
                          f"it had {seen.size:,} bytes (version {seen.version or '?'}) when the reader opened it and "
                          f"has {now.size:,} bytes (version {now.version or '?'}) now")
                raise TokenFileChanged(f"{redact(url)} changed while it was being read: {change}; a token file must "
                                       "stay as it is while a reader or server uses it: write new tokens to new "
                                       "objects, then build the reader (or restart the server) again")
            self._seen_in_pass.add(k)
        if k in self._sampled_files:
            return
        n, dtype, offset = self.layouts[k]
        a = token_objects.sample(url, seen.size, dtype, offset, n)
        name = redact(url)
        problem = ((n % 2 == 0 and token_checks.four_byte_problem(name, a, self.token_size, self.vocab_size))
                   or token_checks.vocabulary_problem(name, a, self.vocab_size))
        if problem:
            raise TokenFileError(problem)
        self._sampled_files.add(k)

    def _prepare(self, files: list[int]) -> None:
        """``_ready`` for the objects among ``files``, side by side."""
        token_objects.at_once(self._ready, [k for k in files if k in self._remote
                                            and (k not in self._seen_in_pass or k not in self._sampled_files)])

    def check_samples(self) -> None:
        """Check a sample of every file as its first read does (the token size, ``vocab_size``), so that a wrong
        token size is refused before anything is built on the tokens; raises ``TokenFileError``.

        >>> import tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> np.frombuffer(b"a rose is a rose. " * 4, np.uint8).astype("<u4").tofile(f"{folder.name}/a.bin")
        >>> tokens(folder.name, seq_len=2, token_size=4).check_samples()
        >>> tokens(folder.name, seq_len=2, token_size=2).check_samples()
        Traceback (most recent call last):
        ...
        readers.tokenized.windows.TokenFileError: .../a.bin: read as 2-byte tokens (token_size = "TwoBytes"), every second token is 0 in a sample of 144: probably 4-byte tokens; ...
        """
        self._prepare(list(range(len(self.paths))))
        for k in range(len(self.paths)):
            if not is_url(self.paths[k]):
                self._sampled(k)

    def max_token(self) -> int:
        """The largest token id in all the files, read in 16 MiB blocks (to size a vocabulary).

        >>> import tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> np.array([3, 900, 7], dtype="<u2").tofile(f"{folder.name}/a.bin")
        >>> tokens(folder.name, seq_len=2).max_token()
        900
        """
        return self.largest_token()[0]

    def largest_token(self) -> tuple[int, str]:
        """The largest token id in all the files and the first file that holds it, read in 16 MiB blocks, each
        file's sample checked first; an id beyond ``vocab_size`` raises ``TokenFileError``.

        >>> import tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> np.array([3, 900, 7], dtype="<u2").tofile(f"{folder.name}/a.bin")
        >>> np.array([4, 901, 8], dtype="<u2").tofile(f"{folder.name}/b.bin")
        >>> top, path = tokens(folder.name, seq_len=2).largest_token()
        >>> top, os.path.basename(path)
        (901, 'b.bin')
        >>> tokens(folder.name, seq_len=2, vocab_size=901).largest_token()
        Traceback (most recent call last):
        ...
        readers.tokenized.windows.TokenFileError: .../b.bin holds the token id 901, beyond vocab_size = 901 ...
        """
        top, where = -1, 0
        self._prepare(list(range(len(self.paths))))
        for k, n in enumerate(self.sizes):
            if is_url(self.paths[k]):
                block = token_objects.largest(self.paths[k], self.stamps[k].size, *self.layouts[k][1:], n)
                if block > top:
                    top, where = block, k
                continue
            a = self._sampled(k)[0]
            for lo in range(0, n, 1 << 23):
                block = int(a[lo:lo + (1 << 23)].max())
                if block > top:
                    top, where = block, k
            del a
        if self.vocab_size is not None and top >= self.vocab_size:
            raise TokenFileError(token_checks.too_large(redact(self.paths[where]), top, self.vocab_size))
        return max(top, 0), redact(self.paths[where])

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_views"] = collections.OrderedDict()  # another process maps the files itself
        state["_sampled_files"] = set()  # and checks their samples itself
        state["_seen_in_pass"] = set()  # and compares the objects it reads with their stat itself
        return state

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def _get(self, i: int) -> np.ndarray:
        return self.gather_columns(np.array([i], np.int64))[0]

    def gather(self, indices: np.ndarray) -> list:
        return list(self.gather_columns(indices))

    def gather_columns(self, indices: np.ndarray) -> np.ndarray:
        """The windows at ``indices`` as one int32 array (len(indices), seq_len + 1)."""
        indices = np.asarray(indices, np.int64)
        if self.remote:
            return self._gather_objects(indices)
        if len(self.paths) == 1:
            return self._checked(self._window_view(0)[indices], 0)
        out = np.empty((len(indices), self.seq_len + 1), np.int32)
        files = np.searchsorted(self.offsets, indices, side="right") - 1
        for k in np.unique(files).tolist():
            rows = files == k
            out[rows] = self._checked(self._window_view(k)[indices[rows] - self.offsets[k]], k)
        return out

    def wire_columns(self, indices: np.ndarray) -> tuple[np.ndarray, dict[str, str]] | None:
        """The windows at ``indices`` in the files' own 2-byte dtype, checked as ``gather_columns`` checks them, for
        a server to send in half the bytes; the client widens them to int32 (``{"as": "<i4"}``). None where a file
        holds 4-byte ids or is behind a URL (``gather_columns`` is sent as it is).

        >>> import tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> np.arange(9, dtype="<u2").tofile(f"{folder.name}/a.bin")
        >>> windows, way = tokens(folder.name, seq_len=4).wire_columns(np.array([1, 0]))
        >>> windows.dtype, windows.tolist(), way
        (dtype('uint16'), [[4, 5, 6, 7, 8], [0, 1, 2, 3, 4]], {'as': '<i4'})
        """
        dtypes = {dtype for _, dtype, _ in self.layouts}
        if self.remote or len(dtypes) != 1 or next(iter(dtypes)).itemsize > 2:
            return None
        indices = np.asarray(indices, np.int64)
        if len(self.paths) == 1:
            return self._checked(self._window_view(0)[indices], 0, widen=False), {"as": "<i4"}
        out = np.empty((len(indices), self.seq_len + 1), next(iter(dtypes)))
        files = np.searchsorted(self.offsets, indices, side="right") - 1
        for k in np.unique(files).tolist():
            rows = files == k
            out[rows] = self._checked(self._window_view(k)[indices[rows] - self.offsets[k]], k, widen=False)
        return out, {"as": "<i4"}

    def _gather_objects(self, indices: np.ndarray) -> np.ndarray:
        """``gather_columns`` where some files are URLs: windows in blocks kept whole are taken from them here;
        each object's other windows become byte ranges, merged when close and fetched at once, the objects of
        the batch side by side; mapped files are read as ``gather_columns`` reads them."""
        out = np.empty((len(indices), self.seq_len + 1), np.int32)
        files = np.searchsorted(self.offsets, indices, side="right") - 1
        within = indices - self.offsets[files]
        keys, where = np.unique((files << 32) | (within // self._block), return_inverse=True)
        self._prepare(np.unique(files).tolist())
        fetch = np.zeros(len(indices), bool)
        for j, key in enumerate(keys.tolist()):
            k, b = key >> 32, key & 0xFFFFFFFF
            rows = where == j
            if k not in self._remote:
                out[rows] = self._checked(self._window_view(k)[within[rows]], k)
                continue
            view = self._blocks.get((k, b))  # the block's windows, a strided view of its tokens
            if view is None:
                fetch |= rows
            elif view.dtype == np.uint16 and self.vocab_size is None:  # nothing to check: cast as it is copied
                out[rows] = view[within[rows] - b * self._block]
            else:
                out[rows] = self._checked(view[within[rows] - b * self._block], k)

        def read(k: int) -> tuple[np.ndarray, np.ndarray]:
            rows = fetch & (files == k)
            n, dtype, offset = self.layouts[k]
            return rows, self._checked(token_objects.read_rows(self.paths[k], self.stamps[k].size, dtype, offset,
                                                               within[rows] * self.seq_len, self.seq_len + 1), k)

        if fetch.any():
            for rows, windows in token_objects.at_once(read, np.unique(files[fetch]).tolist()):
                out[rows] = windows
        return out

    def _fetch_blocks(self, k: int, blocks: list[int]) -> None:
        """Fetch blocks ``blocks`` of object ``k`` whole (one range each, at once) into the process's LRU."""
        n, dtype, offset = self.layouts[k]
        item, step = dtype.itemsize, self._block * self.seq_len
        spans = [(b * step, min((b + 1) * step + 1, n)) for b in blocks]  # tokens; a block's last window's target too
        data = locations.read_ranges(self.paths[k], [(offset + a * item, (z - a) * item) for a, z in spans],
                                     gap=-1, size=self.stamps[k].size)  # each block its own request: side by side
        for b, (a, z), got in zip(blocks, spans, data):
            if len(got) != (z - a) * item:  # the object is shorter than it was: reread its size to say how
                locations.check_unchanged(self.paths[k], locations.Stat(self.stamps[k].size, "?"))
            tokens = np.frombuffer(got, dtype=dtype)
            self._blocks.put((k, b), np.lib.stride_tricks.as_strided(
                tokens, shape=((len(tokens) - 1) // self.seq_len, self.seq_len + 1),
                strides=(self.seq_len * item, item), writeable=False))

    def groups(self) -> np.ndarray | None:
        """Where objects behind URLs are read: the window offsets of their blocks (``token_objects``), which
        ``readers.shuffle_row_groups`` keeps together; None for mapped files alone, read at any window alike.

        >>> import tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> np.arange(9, dtype="<u2").tofile(f"{folder.name}/a.bin")
        >>> tokens(folder.name, seq_len=4).groups() is None
        True
        """
        if not self.remote:
            return None
        counts = np.diff(self.offsets)
        starts = [self.offsets[k] + np.arange(0, c, self._block) for k, c in enumerate(counts.tolist())]
        return np.concatenate([*starts, [self.offsets[-1]]]).astype(np.int64)

    def gather_ahead(self, chunks: Any) -> Any:
        """``(indices, gather_columns(indices))`` for each chunk, read ``AHEAD_BYTES`` of windows ahead where
        objects are behind URLs: each block those chunks need ``DENSE`` of or more is fetched whole first."""
        if not self.remote:
            yield from super().gather_ahead(chunks)
            return
        chunks, window = iter(chunks), (self.seq_len + 1) * self.token_size
        while True:
            ahead, size = [], 0
            for indices in chunks:
                ahead.append(np.asarray(indices, np.int64))
                size += len(ahead[-1]) * window
                if size >= token_objects.AHEAD_BYTES:
                    break
            if not ahead:
                return
            self._fetch_dense(np.concatenate(ahead))
            for indices in ahead:
                yield indices, self.gather_columns(indices)

    def _fetch_dense(self, indices: np.ndarray) -> None:
        """Fetch whole, at once, the blocks of objects that ``indices`` need ``DENSE`` of or more and are not kept."""
        files = np.searchsorted(self.offsets, indices, side="right") - 1
        keys, counts = np.unique(np.stack([files, (indices - self.offsets[files]) // self._block]), axis=1,
                                 return_counts=True)
        # DENSE of a block or more, counting what the look-ahead before this one took of it by ranges (a
        # block that a locality order begins at the end of one look-ahead is fetched whole in the next)
        recent, self._recent = self._recent, {}
        wanted: dict[int, list[int]] = {}
        for (k, b), count in zip(keys.T.tolist(), counts.tolist()):
            if k not in self._remote or self._blocks.get((k, b)) is not None:
                continue
            if (count + recent.get((k, b), 0)) >= token_objects.DENSE * self._block:
                wanted.setdefault(k, []).append(b)
            else:
                self._recent[(k, b)] = count
        self._prepare(list(wanted))
        token_objects.at_once(lambda k: self._fetch_blocks(k, wanted[k]), list(wanted))

    def _checked(self, windows: np.ndarray, k: int, widen: bool = True) -> np.ndarray:
        """Windows as int32 (without ``widen``: as they are, checked); a token that int32 cannot hold (a negative or a
        4-byte id >= 2**31) names its file, and so does one beyond ``vocab_size``. The bounds are found once, in as
        few passes as the checks need: none for 2-byte ids without ``vocab_size``, the max alone for unsigned ids,
        the min too for signed ones (a .npy file's)."""
        if not windows.size or (windows.dtype == np.uint16 and self.vocab_size is None):
            return windows.astype(np.int32) if widen else windows
        high = int(windows.max())
        low = int(windows.min()) if windows.dtype.kind == "i" else 0
        if low < 0 or high > _INT32_MAX:
            raise TokenFileError(f"{redact(self.paths[k])} holds the token id {low if low < 0 else high}, outside "
                                 f"0..{_INT32_MAX:,}: token ids are non-negative and fit in int32 (is "
                                 "token_size right?)")
        if self.vocab_size is not None and high >= self.vocab_size:
            raise TokenFileError(token_checks.too_large(redact(self.paths[k]), high, self.vocab_size))
        return windows.astype(np.int32) if widen else windows

    def sample_ids(self, indices: np.ndarray) -> np.ndarray:
        return indices

    def _options(self) -> str:
        files = f"{len(self.paths)} file{'s' if len(self.paths) > 1 else ''}"
        # vocab_size is a check, not the data: left out, so a checkpoint's pipeline is the same with it or without
        return f"seq_len={self.seq_len}, token_size={self.token_size}: {files}, {sum(self.sizes):,} tokens"

    def digest(self) -> str:
        """The files' token counts and a sampled digest of each (``array_digest``): their content, not their names."""
        h = hasher()
        for k in range(len(self.paths)):
            if is_url(self.paths[k]):  # the same bytes as a mapped file's array_digest, read by ranges
                self._seen_in_pass.discard(k)
                self._ready(k)
                n, dtype, offset = self.layouts[k]
                h.update(f"{n}:{token_objects.digest(self.paths[k], self.stamps[k].size, dtype, offset, n)};".encode())
                continue
            array = self._tokens(k)[0]
            h.update(f"{len(array)}:{array_digest(array)};".encode())
            del array  # one file mapped at a time
        return h.hexdigest()


def tokens(path: Any, *, seq_len: int, token_size: int = 2, vocab_size: int | None = None) -> Tokens:
    """An indexed reader of windows of ``seq_len + 1`` tokens from pre-tokenized files.

    ``path`` is a ``.bin`` file (raw little-endian tokens), a ``.npy`` file,
    a folder (its ``.bin`` and ``.npy`` files, by name) or a list of them.
    ``token_size`` is the bytes per token, 2 (vocabularies up to 65,536) or 4.
    ``vocab_size``, where known (a data.toml's), bounds the ids: one beyond
    it raises ``TokenFileError`` naming its file. It is at most what tokens
    of ``token_size`` bytes hold (65,536 ids for 2 bytes), as in a data.toml. A 2-byte read of a ``.bin``
    file that looks like 4-byte tokens (every second token 0, or under 16
    while the others reach far higher) raises it too, as probably 4-byte
    tokens (checked on a sample when a file is first read), unless
    ``vocab_size`` is given: a known vocabulary says how the tokens were
    written.
    Entry i is an int32 array of ``seq_len + 1`` tokens (int32 whatever the
    files hold: signed, so a pad target can be -100, and what an embedding
    lookup takes; half the memory of int64). Windows start every ``seq_len``
    tokens and never cross a file: see the module's docstring.

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> np.arange(10, dtype="<u2").tofile(f"{folder.name}/a.bin")
    >>> np.save(f"{folder.name}/b.npy", np.arange(100, 107, dtype=np.uint16))
    >>> r = tokens(folder.name, seq_len=3)
    >>> len(r), r[0].tolist(), r[2].tolist(), r[3].tolist(), r[0].dtype
    (5, [0, 1, 2, 3], [6, 7, 8, 9], [100, 101, 102, 103], dtype('int32'))
    >>> np.arange(9, dtype="<u2").tofile(f"{folder.name}/c.bin")
    >>> tokens(f"{folder.name}/c.bin", seq_len=3, token_size=4)
    Traceback (most recent call last):
    ...
    readers.tokenized.windows.TokenFileError: .../c.bin has 18 bytes, not a multiple of token_size=4: it was cut short, or written with another token size (try token_size=2)
    >>> np.arange(1, 41, dtype="<u4").tofile(f"{folder.name}/d.bin")
    >>> tokens(f"{folder.name}/d.bin", seq_len=3)[0]
    Traceback (most recent call last):
    ...
    readers.tokenized.windows.TokenFileError: .../d.bin: read as 2-byte tokens (token_size = "TwoBytes"), every second token is 0 in a sample of 80: probably 4-byte tokens; ...
    >>> tokens(f"{folder.name}/d.bin", seq_len=3, vocab_size=100_000)
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: tokens: vocab_size=100000 is more ids than 2-byte tokens hold (65,536); pass token_size=4 if the tokens are 4 bytes each, or correct vocab_size
    """
    if isinstance(seq_len, bool) or not isinstance(seq_len, (int, np.integer)) or seq_len < 1:
        raise BadValue(f"tokens: seq_len must be an int >= 1 (tokens per window, before the next-token "
                       f"target), got {seq_len!r}")
    _check_token_size(token_size, "tokens")
    if vocab_size is not None and (isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer))
                                   or vocab_size < 2):
        raise BadValue(f"tokens: vocab_size must be an int >= 2 (one more than the largest token id) or None, "
                       f"got {vocab_size!r}")
    if vocab_size is not None and vocab_size > MOST_IDS[token_size]:  # as a data.toml's is refused (vocab_size)
        raise BadValue(f"tokens: vocab_size={vocab_size} is more ids than {token_size}-byte tokens hold "
                       f"({MOST_IDS[token_size]:,}); " + ("pass token_size=4 if the tokens are 4 bytes each, or correct "
                                                          "vocab_size" if token_size == 2 else
                                                          "correct vocab_size: token ids are int32"))
    return Tokens(_files(path), int(seq_len), int(token_size), None if vocab_size is None else int(vocab_size))


def check_new_corpus(path: Any, *, overwrite: bool = False) -> None:
    """Refuse, with a ``FileError`` naming it, to replace the corpus already at ``path`` unless ``overwrite``:
    the one refusal of ``tokenize_bytes`` and ``cli.py tokenize``, made before anything is read.

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> check_new_corpus(f"{folder.name}/tokens.bin")  # nothing there
    >>> np.arange(3, dtype="<u2").tofile(f"{folder.name}/tokens.bin")
    >>> check_new_corpus(f"{folder.name}/tokens.bin", overwrite=True)
    >>> check_new_corpus(f"{folder.name}/tokens.bin")
    Traceback (most recent call last):
    ...
    readers.errors.FileError: .../tokens.bin already holds a corpus (6 bytes); replace it with overwrite=True (tokenize --overwrite), or write to another folder
    """
    path = os.fspath(path)
    if os.path.exists(path) and not overwrite:
        size = f"{os.path.getsize(path):,} bytes" if os.path.isfile(path) else "not a file"
        raise FileError(f"{path} already holds a corpus ({size}); replace it with overwrite=True (tokenize "
                        "--overwrite), or write to another folder")


def tokenize_bytes(sources: Sequence[Any], out: Any, *, token_size: int = 2, name: str = "tokens.bin",
                   overwrite: bool = False, progress: Any = None) -> str:
    """Write the bytes of text files as one ``.bin`` token file: byte-level tokens, 0..255, one per byte.

    The sources are joined in the order given, each ended by a newline if it
    lacks one, into ``out/name`` (little-endian, ``token_size`` bytes per
    token), read and written in 1 MiB blocks. ``progress(done)`` is called
    with the bytes read so far. Returns the file's path; the file appears
    whole or not at all (written to a part file, then renamed). A file
    already there is a corpus: it is replaced only with ``overwrite=True``,
    else ``FileError`` is raised before anything is read.

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> _ = open(f"{folder.name}/a.txt", "w").write("hi")
    >>> path = tokenize_bytes([f"{folder.name}/a.txt"], folder.name)
    >>> np.fromfile(path, "<u2").tolist()
    [104, 105, 10]
    >>> tokenize_bytes([f"{folder.name}/a.txt"], folder.name)
    Traceback (most recent call last):
    ...
    readers.errors.FileError: .../tokens.bin already holds a corpus (6 bytes); replace it with overwrite=True (tokenize --overwrite), or write to another folder
    """
    _check_token_size(token_size, "tokenize")
    sources = [os.fspath(s) for s in sources]
    if not sources:
        raise BadValue("tokenize: give at least one text file to tokenize")
    for source in sources:
        if not os.path.isfile(source):
            raise TokenFileError(f"{source}: no such file (a folder?); give text files to tokenize")
    path = os.path.join(os.fspath(out), name)
    check_new_corpus(path, overwrite=overwrite)
    make_folder(out, "the token folder")
    part, done = f"{path}.part", 0
    try:
        with open(part, "wb") as f:
            for source in sources:
                last = b"\n"
                with open(source, "rb") as src:
                    for block in iter(lambda: src.read(1 << 20), b""):
                        np.frombuffer(block, np.uint8).astype(TOKEN_DTYPES[token_size]).tofile(f)
                        last, done = block[-1:], done + len(block)
                        if progress is not None:
                            progress(done)
                if last != b"\n":
                    np.array([10], TOKEN_DTYPES[token_size]).tofile(f)
        os.replace(part, path)
    finally:
        if os.path.exists(part):
            os.unlink(part)
    return path
