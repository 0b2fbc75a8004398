"""Expected failures: the errors readerkit raises on purpose, whose message says what was wrong and what to do.

Bad input, a refused resume, a busy folder, missing data: each derives from
``ReaderkitError``, and also from the built-in exception such code raised
before (``BadValue`` is a ``ValueError``), so ``except ValueError`` still
catches it. The command line prints a ``ReaderkitError`` as one line;
anything else, such as a ``TypeError`` raised inside a user's reader, is a
bug somewhere and keeps its traceback.

A reader of your own may raise them too, to be reported the same way:

>>> import readers
>>> def rows():
...     raise readers.BadValue("rows.csv, line 3: 'x' is not a number; fix the file")
>>> try:
...     list(rows())
... except ValueError as exc:
...     print(isinstance(exc, readers.ReaderkitError), exc)
True rows.csv, line 3: 'x' is not a number; fix the file

An error raised in a worker process reaches the consumer as its own type
(``readers.workers.forwarding``): these take their message alone, so they
pickle.
"""
from __future__ import annotations

import os
import re

__all__ = ["BadType", "BadValue", "FileError", "MissingFile", "NotFound", "ReaderkitError", "TimedOut", "make_folder"]

#: A URL's scheme and its ``user:password@`` (or ``token@``), which a message must not show.
_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)[^/\s@'\"]+@")


class ReaderkitError(Exception):
    """An expected failure: the message names what was wrong and says what to change.

    A URL's ``user:password@`` never reaches a message: it is taken out of
    every URL in the message when the error is made (the messages of
    readerkit show URLs through ``readers.sources.locations.redact``; this
    catches one that does not).

    >>> issubclass(BadValue, ReaderkitError), issubclass(BadValue, ValueError)
    (True, True)
    >>> str(BadValue("https://me:secret@host/a.tar: not a tar file; check the path"))
    'https://host/a.tar: not a tar file; check the path'
    """

    def __init__(self, *args: object):
        super().__init__(*(_USERINFO.sub(r"\1", a) if isinstance(a, str) else a for a in args))


class BadValue(ReaderkitError, ValueError):
    """A value readerkit cannot use: an option out of range, a malformed file or spec, data that does not fit."""


class BadType(ReaderkitError, TypeError):
    """A value of a kind readerkit cannot use: a reader that is not callable, a column that is not numbers."""


class NotFound(ReaderkitError, LookupError):
    """A name or id that is not there: a pipeline, a training, a client of a round."""


class FileError(ReaderkitError, OSError):
    """A file or folder that cannot be used as asked: not writable, not openable."""


class MissingFile(FileError, FileNotFoundError):
    """A file or folder that does not exist."""


class TimedOut(ReaderkitError, TimeoutError):
    """Something held by another process for longer than readerkit waits: a lock, a folder."""


def make_folder(path: str | os.PathLike, what: str) -> None:
    """Make the folder ``path`` (and its parents) for ``what``, or raise a ``FileError`` that says why not.

    A folder the operating system refuses (a path through a file, no permission, a full disk) is an expected
    failure: the message names the folder, the reason and what to give instead.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile() as f:
    ...     make_folder(os.path.join(f.name, "runs"), "the checkpoint folder")
    Traceback (most recent call last):
    ...
    readers.errors.FileError: cannot make the checkpoint folder .../runs (Not a directory): give a folder this process can write
    """
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise FileError(f"cannot make {what} {os.fspath(path)} ({exc.strerror or exc}): give a folder this process "
                        "can write") from None
