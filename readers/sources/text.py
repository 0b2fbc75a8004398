"""text_file: the lines of a text file, without their line endings."""
from __future__ import annotations

import codecs
import os
from collections.abc import Iterator

from readers.errors import BadValue, MissingFile, ReaderkitError
from readers.identity import file_digest
from readers.stage import Stage

__all__ = ["TextDecodeError", "text_file"]


class TextDecodeError(ReaderkitError, UnicodeDecodeError):
    """Bytes of a text file that do not decode; the message names the file and line and says what to do."""

    def __init__(self, encoding: str, data: bytes, start: int, end: int, reason: str, message: str = ""):
        super().__init__(encoding, data, start, end, reason)  # (the arguments pickle and rebuild it)
        self.message = message

    def __str__(self) -> str:
        return self.message or super().__str__()


class TextFile(Stage):
    name = "text_file"

    def __init__(self, path: str, encoding: str, errors: str):
        super().__init__()
        self.path, self.encoding, self.errors = path, encoding, errors

    def _stream(self, pass_id: int) -> Iterator[str]:
        if not os.path.isfile(self.path):
            raise MissingFile(f"text_file: no file at {self.path!r} (cwd {os.getcwd()!r}); check the path")
        return _lines(self.path, self.encoding, self.errors)

    def _options(self) -> str:
        opts = repr(self.path)
        opts += "" if self.encoding == "utf-8" else f", encoding={self.encoding!r}"
        return opts + ("" if self.errors == "strict" else f", errors={self.errors!r}")

    def identity(self) -> str:
        return self.title().replace(repr(self.path), "file", 1)  # the file's digest says which; not its path

    def digest(self) -> str | None:
        return file_digest(self.path) if os.path.isfile(self.path) else None


def _lines(path: str, encoding: str, errors: str) -> Iterator[str]:
    # opened here, in the generator, so a pass that is never iterated holds no file
    with open(path, encoding=encoding, errors=errors, newline="") as f:
        try:
            for line in f:
                yield line.rstrip("\r\n")
        except UnicodeDecodeError as exc:
            raise _decode_error(path, encoding, exc) from None


def _mark(exc: UnicodeError) -> tuple[str, int]:
    """A decoding error handler that puts a lone surrogate (never in strictly decoded text) for bad bytes."""
    return "\udc00", exc.end


def _decode_error(path: str, encoding: str, exc: UnicodeDecodeError) -> TextDecodeError:
    """``exc`` (raised decoding a chunk of the file, not a line) as an error naming the line of its bad bytes."""
    codecs.register_error("readerkit.mark", _mark)  # (registering again replaces it: no harm)
    with open(path, encoding=encoding, errors="readerkit.mark", newline="") as f:
        line = next((k for k, text in enumerate(f, 1) if "\udc00" in text), None)
    bad = exc.object[exc.start:exc.end]
    where = f"line {line}" if line is not None else "a line"
    message = (f"text_file: {where} of {path!r} is not valid {encoding}: {exc.reason} ({bytes(bad)!r}); "
               f"pass the file's encoding= (e.g. 'latin-1'), or errors='replace' (or 'ignore') to read past bad bytes")
    return TextDecodeError(exc.encoding, exc.object, exc.start, exc.end, exc.reason, message)


def text_file(path: str | os.PathLike, encoding: str = "utf-8", errors: str = "strict") -> TextFile:
    """A reader of a text file's lines, without their line endings.

    The file is opened when a pass starts and closed when it ends or stops.
    ``encoding`` and ``errors`` are ``open()``'s: bytes that do not decode
    raise an error naming the file and line, unless ``errors`` says what to do
    with them ("replace", "ignore", "backslashreplace", "surrogateescape", ...).

    >>> import tempfile, os
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "lines.txt")
    >>> _ = open(path, "w").write("first\\n\\nthird\\r\\n")
    >>> list(text_file(path)())
    ['first', '', 'third']
    >>> _ = open(path, "wb").write(b"caf\\xc3\\xa9\\nna\\xefve\\n")
    >>> list(text_file(path)())
    Traceback (most recent call last):
    ...
    readers.sources.text.TextDecodeError: text_file: line 2 of '.../lines.txt' is not valid utf-8: invalid continuation byte (b'\\xef'); pass the file's encoding= (e.g. 'latin-1'), or errors='replace' (or 'ignore') to read past bad bytes
    >>> r = text_file(path, errors="ignore")
    >>> list(r()), r
    (['café', 'nave'], text_file('.../lines.txt', errors='ignore'))
    """
    for kind, name, find in (("encoding", encoding, codecs.lookup), ("errors", errors, codecs.lookup_error)):
        try:
            find(name)
        except (LookupError, TypeError):
            raise BadValue(f"text_file: unknown {kind} {name!r}; give one open() takes, e.g. "
                           f"{'utf-8 or latin-1' if kind == 'encoding' else 'strict, replace or ignore'}") from None
    return TextFile(os.fspath(path), encoding, errors)
