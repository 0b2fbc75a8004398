"""Finding, downloading and checking a dataset's files.

An explicit folder (``data_dir``, and its ``<dataset>`` subfolder) is the only
place looked in when given. Otherwise files are looked up in ``$READERKIT_DATA``
(and its ``<dataset>`` subfolder), then in the per-user cache
(``$XDG_CACHE_HOME/readerkit`` or ``~/.cache/readerkit``), where missing files
are downloaded from a list of mirrors, tried in turn, checked against their
published SHA-256 and written atomically. A set of files always comes from one
folder, so two datasets are never mixed.
"""
from __future__ import annotations

import hashlib
import http.client
import os
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from readers.errors import BadValue, MissingFile, make_folder

__all__ = ["DataFile", "MissingDataError", "cache_dir", "fetch", "fetch_all", "locate", "search_dirs"]

#: progress(done_bytes, total_bytes or None) after every chunk of a download
Progress = Callable[[int, "int | None"], None]


class MissingDataError(MissingFile):
    """A dataset's files are not on disk and could not be downloaded."""


@dataclass(frozen=True)
class DataFile:
    """One file of a dataset: its name, published SHA-256 and accepted aliases (e.g. unzipped)."""

    name: str
    sha256: str
    aliases: tuple[str, ...] = ()


def cache_dir(dataset: str) -> str:
    """The per-user cache folder for ``dataset`` (not created here).

    >>> cache_dir("mnist").endswith(os.path.join("readerkit", "mnist"))
    True
    """
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "readerkit", dataset)


def search_dirs(dataset: str, data_dir: str | os.PathLike | None = None) -> list[str]:
    """The folders searched for ``dataset``'s files, in order.

    >>> search_dirs("mnist", "/data/mnist")[0]
    '/data/mnist'
    """
    if data_dir is not None:  # an explicit folder is the only place looked in
        return [os.fspath(data_dir), os.path.join(os.fspath(data_dir), dataset)]
    dirs = []
    env = os.environ.get("READERKIT_DATA")
    if env:
        dirs += [env, os.path.join(env, dataset)]
    dirs.append(cache_dir(dataset))
    return dirs


def locate(file: DataFile, dirs: Sequence[str]) -> str | None:
    """The first existing path of ``file`` (or an alias) in ``dirs``, else None.

    >>> locate(DataFile("surely-missing.gz", ""), ["/nonexistent"]) is None
    True
    """
    for d in dirs:
        for name in (file.name, *file.aliases):
            path = os.path.join(d, name)
            if os.path.isfile(path):
                return path
    return None


def _download(url: str, dest_dir: str, file: DataFile, progress: Progress | None, timeout: float) -> str:
    """Download ``url`` into ``dest_dir`` atomically; raise ValueError on a short or wrong body."""
    make_folder(dest_dir, "the download folder")
    fd, tmp = tempfile.mkstemp(prefix=f".{file.name}.", suffix=".part", dir=dest_dir)
    try:
        h = hashlib.sha256()
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as response:
            total = response.headers.get("Content-Length")
            total = int(total) if total and total.isdigit() else None
            done = 0
            while block := response.read(1 << 16):
                out.write(block)
                h.update(block)
                done += len(block)
                if progress is not None:
                    progress(done, total)
            out.flush()
            os.fsync(out.fileno())
        # http.client returns a short body silently when the connection drops
        if total is not None and done != total:
            raise BadValue(f"the download stopped after {done} of {total} bytes")
        if h.hexdigest() != file.sha256:
            raise BadValue(f"SHA-256 {h.hexdigest()} does not match the published {file.sha256}")
        final = os.path.join(dest_dir, file.name)
        os.replace(tmp, final)
        return final
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _reason(exc: BaseException) -> str:
    """What a mirror answered, on one short line (a broken server may send anything)."""
    if isinstance(exc, urllib.error.HTTPError):
        text = f"HTTP {exc.code} {exc.reason}"
    elif isinstance(exc, urllib.error.URLError):
        text = str(exc.reason)
    else:
        text = str(exc) or type(exc).__name__
    text = " ".join(text.split())
    return text if len(text) <= 200 else text[:197] + "..."


def fetch_all(
    dataset: str,
    files: Sequence[DataFile],
    mirrors: Sequence[str],
    data_dir: str | os.PathLike | None = None,
    *,
    download: bool = True,
    progress: Callable[[DataFile, str], Progress | None] | None = None,
    timeout: float = 30.0,
) -> list[str]:
    """The paths of ``files``, like ``fetch``; one error lists every file that is missing.

    >>> import tempfile
    >>> empty = tempfile.TemporaryDirectory()
    >>> fetch_all("demo", [DataFile("a.gz", "0" * 64), DataFile("b.gz", "0" * 64)], [],
    ...           data_dir=empty.name, download=False)
    Traceback (most recent call last):
    ...
    readers.sources.datafiles.MissingDataError: demo files a.gz, b.gz not found; looked in: ...
    >>> fetch_all("demo", [DataFile("a.gz", "0" * 64)], [], data_dir="/nonexistent", download=False)
    Traceback (most recent call last):
    ...
    readers.sources.datafiles.MissingDataError: demo: the data folder /nonexistent does not exist; check its name (--data-dir / data_dir), or leave it out to use READERKIT_DATA and the cache
    """
    dirs = search_dirs(dataset, data_dir)
    # every file from one folder: files from two folders can pair one dataset's images
    # with another's labels and still train without an error
    for d in dirs:
        found = [locate(f, [d]) for f in files]
        if all(found):
            return found
    failures: list[str] = []
    cache = cache_dir(dataset)
    # an explicit folder is never silently replaced by other folders or a download
    if download and data_dir is None:
        for file in files:
            if locate(file, [cache]) is not None:
                continue
            for base in mirrors:
                url = base.rstrip("/") + "/" + file.name
                try:
                    callback = progress(file, url) if progress is not None else None
                    _download(url, cache, file, callback, timeout)
                    break
                # HTTPException: a mirror that does not speak HTTP (bad status line, broken chunks)
                except (OSError, ValueError, http.client.HTTPException) as exc:
                    failures.append(f"{url}: {_reason(exc)}")
        found = [locate(f, [cache]) for f in files]
        if all(found):
            return found
    if data_dir is not None:
        tried = f"not tried for an explicit folder ({data_dir})"
    else:
        tried = ("; ".join(failures) if failures else "no mirrors to try") if download else "off (--no-download)"
    looked = dirs
    # named against the most complete folder: what it would take to make one folder whole
    best = max(looked, key=lambda d: sum(locate(f, [d]) is not None for f in files))
    missing = [f.name for f in files if locate(f, [best]) is None]
    what = f"file {missing[0]}" if len(missing) == 1 else f"files {', '.join(missing)}"
    if data_dir is not None and not os.path.isdir(data_dir):  # a mistyped folder: say so first
        raise MissingDataError(f"{dataset}: the data folder {data_dir} does not exist; check its name "
                               f"(--data-dir / data_dir), or leave it out to use READERKIT_DATA and the cache")
    raise MissingDataError(
        f"{dataset} {what} not found; looked in: {', '.join(looked)} (all of a dataset's files must be in "
        f"one folder). Download: {tried}. Put the {'file' if len(missing) == 1 else 'files'} (gzipped or not) "
        f"in one of those folders, pass --data-dir DIR, or set READERKIT_DATA=DIR"
    )


def fetch(
    dataset: str,
    file: DataFile,
    mirrors: Sequence[str],
    data_dir: str | os.PathLike | None = None,
    *,
    download: bool = True,
    progress: Callable[[DataFile, str], Progress | None] | None = None,
    timeout: float = 30.0,
) -> str:
    """The path of ``file``: found on disk, or downloaded into the cache and checked.

    ``progress(file, url)`` may return a per-chunk callback for a progress bar.
    When every mirror fails, ``MissingDataError`` says where the file was looked
    for, what each mirror answered, and how to supply the file by hand.

    >>> import tempfile
    >>> empty = tempfile.TemporaryDirectory()
    >>> fetch("demo", DataFile("nothing.gz", "0" * 64), [], data_dir=empty.name, download=False)
    Traceback (most recent call last):
    ...
    readers.sources.datafiles.MissingDataError: demo file nothing.gz not found; looked in: ...

    See Also:
        fetch_all
    """
    return fetch_all(dataset, [file], mirrors, data_dir, download=download, progress=progress, timeout=timeout)[0]
