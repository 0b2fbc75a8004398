"""The fields of Psyche's run files: reading the TOML, and each kind of value with its checks.

Each function takes the file's ``path`` and the dotted ``key`` only to name
them in its error: a fault is one ``RunFileError`` saying the file, the key,
what is wrong and the fix (a did-you-mean for a misspelt name). The files'
layouts, which keys go where, are in ``readers.tokenized.runfiles``.
"""
from __future__ import annotations

import difflib
import os
import posixpath
import re
import urllib.parse
from collections.abc import Collection
from typing import Any

from readers.errors import BadValue, MissingFile
from readers.sources import locations
from readers.sources.locations import is_url, redact

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: tomli is the same parser, published on its own
    import tomli as tomllib

__all__ = ["EXAMPLES", "RunFileError", "check_keys", "folder", "folder_url", "host_port", "integer", "read_toml", "seed",
           "shuffle", "subtable", "token_size", "unknown", "vocab_size"]

#: Psyche's TokenSize spellings; the byte counts 2 and 4 are accepted too.
TOKEN_SIZES = {"TwoBytes": 2, "FourBytes": 4}
#: The same names by bytes per token: ``TOKEN_SIZE_NAMES[2] == "TwoBytes"``.
TOKEN_SIZE_NAMES = {size: name for name, size in TOKEN_SIZES.items()}
SEED_BYTES = 32
#: The deepest a run file's values nest (tables in tables, arrays in arrays); Psyche's files nest 5 deep at most.
MAX_DEPTH = 32
#: What to write for a key that is missing or wrong: one example each.
EXAMPLES = {
    "dir": 'dir = "tokens"',
    "token_size": 'token_size = "TwoBytes"',
    "seq_len": "seq_len = 2048",
    "vocab_size": "vocab_size = 256 (one more than the largest token id)",
    "shuffle_seed": "shuffle_seed = [1, 2, ..., 32] (32 byte values), an integer >= 0, or no key to keep the order",
    "global_batch_size_start": "global_batch_size_start = 8",
    "global_batch_size_end": "global_batch_size_end = 8",
    "global_batch_size_warmup_tokens": "global_batch_size_warmup_tokens = 0",
    "total_steps": "total_steps = 25000",
    "max_seq_len": "max_seq_len = 2048",
    "data_location": 'Server = "127.0.0.1:20001" under [model.LLM.data_location] (Psyche\'s newer layout: under '
                     '[model_extra_data.data_location]), or data_location = { Local = "tokens" }',
    "path": 'path = "tokens"',
    "token_size_in_bytes": 'token_size_in_bytes = "TwoBytes"',
    "shuffle": 'shuffle = "DontShuffle" or shuffle = { Seeded = [1, 2, ..., 32] }',
    "config": "a [config] table with global_batch_size_start, global_batch_size_end, "
              "global_batch_size_warmup_tokens and total_steps",
    "model": "a [model.LLM] table with max_seq_len and a [model.LLM.data_location]",
    "LLM": "a [model.LLM] table with max_seq_len and a [model.LLM.data_location]",
    "model_extra_data": "a [model_extra_data] table (Psyche's newer layout) with a [model_extra_data.data_location]",
}
#: What on a line is no bracket of TOML's: a basic or literal string, a comment.
_STRINGS = re.compile(r""""(?:[^"\\]|\\.)*"|'[^']*'|#.*""")
_AT = re.compile(r"\s*\(at (?:line (\d+), column (\d+)|end of document)\)$")


class RunFileError(BadValue):
    """A data.toml or state.toml that cannot be used: ``path``, dotted ``key`` (None for the whole file),
    ``problem`` and ``fix``, all in the message."""

    def __init__(self, path: str, key: str | None, problem: str, fix: str):
        self.path, self.key, self.problem, self.fix = path, key, problem, fix
        where = f"{path}: {key}" if key else path
        super().__init__(f"{where}: {problem}; {fix}")

    def __reduce__(self) -> tuple:
        return type(self), (self.path, self.key, self.problem, self.fix)


def _dotted(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def read_toml(path: str, kind: str) -> dict[str, Any]:
    """The TOML document at ``path``; a missing file, bad UTF-8 or bad syntax is a ``RunFileError``.

    >>> import os, tempfile
    >>> tmp = tempfile.TemporaryDirectory()
    >>> with open(os.path.join(tmp.name, "state.toml"), "w") as f:
    ...     _ = f.write('run_id = "test"\\n[config]\\ntotal_steps 10\\n')
    >>> read_toml(os.path.join(tmp.name, "state.toml"), "state.toml")
    Traceback (most recent call last):
    ...
    readers.tokenized.runfile_fields.RunFileError: .../state.toml: line 3, column 13: not valid TOML (Expected '=' after a key in a key/value pair); correct the TOML syntax of that line: 'total_steps 10'
    >>> tmp.cleanup()
    """
    if is_url(path):  # a data.toml behind a URL, beside its tokens: two requests (its size, its bytes)
        try:
            with locations.open_file(path) as f:
                raw = f.read()
        except MissingFile:
            raise RunFileError(redact(path), None, "no such object", f"give the URL of the {kind} file") from None
        path = redact(path)
    else:
        if not os.path.isfile(path):
            problem = "is a folder, not a file" if os.path.isdir(path) else "no such file"
            raise RunFileError(path, None, problem, f"give the path of the {kind} file")
        with open(path, "rb") as f:
            raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RunFileError(path, None, f"not UTF-8 text (byte {raw[exc.start]:#04x} at offset {exc.start})",
                           "save the file as UTF-8, as TOML requires") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _syntax_error(path, text, exc) from None
    except RecursionError:  # the parser recurses once per level of an inline table or array
        raise _too_deep(path, text, kind) from None
    _check_depth(path, doc, kind)
    return doc


def _flat(kind: str) -> str:
    """The advice for a ``kind`` of file (state.toml, data.toml) nested too deeply."""
    return f"a {kind}'s tables and arrays nest a few levels: write them flat"


def _too_deep(path: str, text: str, kind: str = "state.toml") -> RunFileError:
    """The error for a document of ``kind`` nested too deeply for the parser: the first line that opens more than
    ``MAX_DEPTH`` brackets (counted outside strings and comments), and its dotted key.

    >>> print(_too_deep("state.toml", "[config]\\nwarmup_time = " + "[" * 40 + "]" * 40))
    state.toml: config.warmup_time: line 2: nested more than 32 deep; a state.toml's tables and arrays nest a few levels: write them flat
    """
    table, fix = "", _flat(kind)
    for number, line in enumerate(text.splitlines(), 1):
        bare = _STRINGS.sub("", line).strip()
        if bare.startswith("[") and "=" not in bare:
            table = bare.strip("[] ")
        elif max(bare.count("{"), bare.count("[")) > MAX_DEPTH:
            key = _dotted(table, bare.split("=")[0].strip()) if "=" in bare else None
            return RunFileError(path, key, f"line {number}: nested more than {MAX_DEPTH} deep", fix)
    return RunFileError(path, None, f"values nested more than {MAX_DEPTH} deep", fix)


def _check_depth(path: str, doc: dict[str, Any], kind: str = "state.toml") -> None:
    """Refuse tables or arrays nested more than ``MAX_DEPTH`` deep (dotted keys nest without brackets) in a
    document of ``kind``, naming the dotted key where the bound is passed: deeper, a message quoting the value
    would fail in turn.

    >>> _check_depth("state.toml", {"config": {"total_steps": 10}})
    >>> deep = {"x": 1}
    >>> for _ in range(40):
    ...     deep = {"a": deep}
    >>> _check_depth("data.toml", {"model": deep}, "data.toml")
    Traceback (most recent call last):
    ...
    readers.tokenized.runfile_fields.RunFileError: data.toml: model.a.a...: nested more than 32 deep; a data.toml's tables and arrays nest a few levels: write them flat
    """
    stack: list[tuple[str, Any, int]] = [("", doc, 0)]
    while stack:
        key, value, depth = stack.pop()
        if depth > MAX_DEPTH:
            parts = key.split(".")
            shown = ".".join(parts[:3]) + "..." if len(parts) > 3 else key
            raise RunFileError(path, shown, f"nested more than {MAX_DEPTH} deep", _flat(kind))
        if isinstance(value, dict):
            stack.extend((_dotted(key, str(k)), v, depth + 1) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((f"{key}[{i}]", v, depth + 1) for i, v in enumerate(value))


def _syntax_error(path: str, text: str, exc: Exception) -> RunFileError:
    """tomllib's message reworded: the line and column first, then that line's text."""
    message = str(exc)
    lines = text.splitlines() or [""]
    found = _AT.search(message)
    if found is None:
        return RunFileError(path, None, f"not valid TOML ({message})", "correct the TOML syntax")
    line, column = (int(found[1]), int(found[2])) if found[1] else (len(lines), len(lines[-1]) + 1)
    source = lines[line - 1] if line <= len(lines) else ""
    return RunFileError(path, None, f"line {line}, column {column}: not valid TOML ({message[:found.start()]})",
                        f"correct the TOML syntax of that line: {source!r}")


def unknown(path: str, key: str, word: str, known: Collection[str], what: str = "key") -> RunFileError:
    """The error for ``word``, not one of ``known``: a did-you-mean, else the names allowed.

    >>> print(unknown("state.toml", "config.total_step", "total_step", ["total_steps", "epoch_time"]))
    state.toml: config.total_step: unknown key 'total_step'; did you mean 'total_steps'?
    >>> print(unknown("data.toml", "colour", "colour", ["dir", "seq_len"]))
    data.toml: colour: unknown key 'colour'; remove it, or use one of: dir, seq_len
    """
    close = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    fix = f"did you mean {close[0]!r}?" if close else f"remove it, or use one of: {', '.join(known)}"
    return RunFileError(path, key, f"unknown {what} {word!r}", fix)


def check_keys(path: str, table: dict[str, Any], prefix: str, known: Collection[str],
               required: Collection[str] = ()) -> None:
    """Check that every key of ``table`` (at dotted ``prefix``) is ``known`` and every ``required`` one is there.

    >>> check_keys("data.toml", {"dir": "."}, "", ["dir", "seq_len"], required=["dir"])
    >>> check_keys("state.toml", {}, "model.LLM", ["max_seq_len"], required=["max_seq_len"])
    Traceback (most recent call last):
    ...
    readers.tokenized.runfile_fields.RunFileError: state.toml: model.LLM.max_seq_len: missing; add max_seq_len = 2048
    """
    for key in table:
        if key not in known:
            raise unknown(path, _dotted(prefix, key), key, known)
    for key in required:
        if key not in table:
            raise RunFileError(path, _dotted(prefix, key), "missing", f"add {EXAMPLES[key]}")


def subtable(path: str, parent: dict[str, Any], prefix: str, key: str) -> dict[str, Any]:
    """``parent[key]``, which must be a table.

    >>> subtable("state.toml", {"model": {"LLM": {}}}, "", "model")
    {'LLM': {}}
    >>> subtable("state.toml", {"config": 3}, "", "config")
    Traceback (most recent call last):
    ...
    readers.tokenized.runfile_fields.RunFileError: state.toml: config: must be a table, got 3; write a [config] table with ...
    """
    value = parent[key]
    if not isinstance(value, dict):
        raise RunFileError(path, _dotted(prefix, key), f"must be a table, got {value!r}", f"write {EXAMPLES[key]}")
    return value


def integer(path: str, table: dict[str, Any], prefix: str, key: str, minimum: int) -> int:
    """``table[key]``, an integer (not a bool or float) >= ``minimum``.

    >>> integer("state.toml", {"total_steps": 10}, "config", "total_steps", 1)
    10
    >>> integer("state.toml", {"total_steps": 0}, "config", "total_steps", 1)
    Traceback (most recent call last):
    ...
    readers.tokenized.runfile_fields.RunFileError: state.toml: config.total_steps: must be >= 1, got 0; write it as total_steps = 25000
    """
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise RunFileError(path, _dotted(prefix, key), f"must be an integer, got {value!r}",
                           f"write it as {EXAMPLES[key]}")
    if value < minimum:
        raise RunFileError(path, _dotted(prefix, key), f"must be >= {minimum}, got {value}",
                           f"write it as {EXAMPLES[key]}")
    return value


def token_size(path: str, key: str, value: Any) -> int:
    """Bytes per token from Psyche's ``"TwoBytes"``/``"FourBytes"`` or the count 2 or 4.

    >>> token_size("data.toml", "token_size", "FourBytes"), token_size("data.toml", "token_size", 2)
    (4, 2)
    >>> token_size("data.toml", "token_size", 3)
    Traceback (most recent call last):
    ...
    readers.tokenized.runfile_fields.RunFileError: data.toml: token_size: must be "TwoBytes" or "FourBytes" (or 2 or 4), got 3; write "TwoBytes" ...
    """
    if value in (2, 4) and not isinstance(value, (bool, float)):
        return value
    if isinstance(value, str) and value in TOKEN_SIZES:
        return TOKEN_SIZES[value]
    if isinstance(value, str) and (close := difflib.get_close_matches(value, TOKEN_SIZES, n=1, cutoff=0.6)):
        fix = f"did you mean {close[0]!r}?"
    else:
        fix = 'write "TwoBytes" for tokens of 2 bytes (vocabularies up to 65536) or "FourBytes"'
    raise RunFileError(path, key, f'must be "TwoBytes" or "FourBytes" (or 2 or 4), got {value!r}', fix)


#: The most ids tokens of each size can hold: 2 bytes, 0..65535; 4 bytes, as many as int32 ids (what readers.tokens gives).
MOST_IDS = {2: 1 << 16, 4: 1 << 31}


def vocab_size(path: str, table: dict[str, Any], size: int) -> int | None:
    """``table["vocab_size"]`` (None if absent): an integer >= 2 that tokens of ``size`` bytes can hold.

    >>> vocab_size("data.toml", {"vocab_size": 256}, 2), vocab_size("data.toml", {}, 2)
    (256, None)
    >>> vocab_size("data.toml", {"vocab_size": 100_000}, 2)
    Traceback (most recent call last):
    ...
    readers.tokenized.runfile_fields.RunFileError: data.toml: vocab_size: is 100000, more ids than 2-byte tokens hold (65,536); write token_size = "FourBytes" if the tokens are 4 bytes each, or correct vocab_size
    """
    if "vocab_size" not in table:
        return None
    value = integer(path, table, "", "vocab_size", 2)
    if value > MOST_IDS[size]:
        raise RunFileError(path, "vocab_size", f"is {value}, more ids than {size}-byte tokens hold ({MOST_IDS[size]:,})",
                           'write token_size = "FourBytes" if the tokens are 4 bytes each, or correct vocab_size'
                           if size == 2 else "correct vocab_size: token ids are int32")
    return value


def seed(path: str, key: str, value: Any) -> int:
    """A seed as an int >= 0: an int as is, or Psyche's 32 byte values as ``int.from_bytes(.., "little")``.

    >>> seed("data.toml", "shuffle_seed", [1] + [0] * 31), seed("data.toml", "shuffle_seed", [0] * 31 + [1])
    (1, 452312848583266388373324160190187140051835877600158453279131187530910662656)
    >>> seed("data.toml", "shuffle_seed", [1, 2, 3])
    Traceback (most recent call last):
    ...
    readers.tokenized.runfile_fields.RunFileError: data.toml: shuffle_seed: a seed must be 32 byte values, got 3; write ...
    """
    fix = f"write {EXAMPLES['shuffle_seed']}"
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise RunFileError(path, key, f"a seed must be >= 0, got {value}", fix)
        return value
    if not isinstance(value, list):
        raise RunFileError(path, key, f"a seed must be {SEED_BYTES} byte values or an integer, got {value!r}", fix)
    if len(value) != SEED_BYTES:
        raise RunFileError(path, key, f"a seed must be {SEED_BYTES} byte values, got {len(value)}", fix)
    for i, byte in enumerate(value):
        if isinstance(byte, bool) or not isinstance(byte, int) or not 0 <= byte <= 255:
            raise RunFileError(path, f"{key}[{i}]", f"must be a byte (an integer 0..255), got {byte!r}", fix)
    return int.from_bytes(bytes(value), "little")


def shuffle(path: str, key: str, value: Any) -> int | None:
    """Psyche's Shuffle: ``"DontShuffle"`` gives None, ``{ Seeded = [32 byte values] }`` the seed (see ``seed``).

    >>> shuffle("state.toml", "shuffle", "DontShuffle") is None, shuffle("state.toml", "shuffle", {"Seeded": [7] + [0] * 31})
    (True, 7)
    >>> shuffle("state.toml", "shuffle", {"Seed": [7] + [0] * 31})
    Traceback (most recent call last):
    ...
    readers.tokenized.runfile_fields.RunFileError: state.toml: shuffle.Seed: unknown shuffle 'Seed'; did you mean 'Seeded'?
    """
    if value == "DontShuffle":
        return None
    if isinstance(value, dict) and len(value) == 1:
        (variant, inner), = value.items()
        if variant != "Seeded":
            raise unknown(path, f"{key}.{variant}", variant, ("Seeded",), "shuffle")
        return seed(path, f"{key}.Seeded", inner)
    if isinstance(value, str):
        raise unknown(path, key, value, ("DontShuffle",), "shuffle")
    raise RunFileError(path, key, f"must be \"DontShuffle\" or {{ Seeded = [...] }}, got {value!r}",
                       f"write {EXAMPLES['shuffle']}")


def folder(path: str, key: str, value: Any) -> str:
    """``value``, an existing folder relative to the folder of the file at ``path``, made absolute.

    >>> import os, tempfile
    >>> tmp = tempfile.TemporaryDirectory()
    >>> os.mkdir(os.path.join(tmp.name, "tokens"))
    >>> folder(os.path.join(tmp.name, "data.toml"), "dir", "tokens") == os.path.join(tmp.name, "tokens")
    True
    >>> folder(os.path.join(tmp.name, "data.toml"), "dir", "../elsewhere")
    Traceback (most recent call last):
    ...
    readers.tokenized.runfile_fields.RunFileError: .../data.toml: dir: '../elsewhere' (...) no such folder; give the folder of ...
    >>> tmp.cleanup()
    """
    if not isinstance(value, str) or not value:
        raise RunFileError(redact(path), key, f"must be a folder path (a string), got {value!r}",
                           "give the folder of the token files, relative to this file's folder or absolute")
    if is_url(value) or is_url(path):
        return folder_url(path, key, value)
    found = os.path.normpath(os.path.join(os.path.dirname(path), value))
    if not os.path.isdir(found):
        problem = "is a file, not a folder" if os.path.exists(found) else "no such folder"
        raise RunFileError(path, key, f"{value!r} ({found}) {problem}",
                           "give the folder of the .bin/.npy token files, relative to this file's folder")
    return found


def folder_url(path: str, key: str, value: str) -> str:
    """A token folder given as a URL (``value``), or relative to a file behind one (``path``), as a URL ending in
    "/"; nothing is asked of the server here (the token reader lists the folder, and names it if it holds no tokens).

    >>> folder_url("/runs/state.toml", "data_location.Local", "https://host/corpus/tokens")
    'https://host/corpus/tokens/'
    >>> folder_url("s3://bucket/corpus/data.toml", "dir", "."), folder_url("https://h/a/data.toml", "dir", "../b")
    ('s3://bucket/corpus/', 'https://h/b/')
    >>> folder_url("https://h/a/data.toml", "dir", "/data/tokens")
    Traceback (most recent call last):
    ...
    readers.tokenized.runfile_fields.RunFileError: https://h/a/data.toml: dir: '/data/tokens' is a local folder, named by a file behind a URL; give the folder relative to the data.toml (dir = ".") or as a URL
    """
    if is_url(value):
        return value if value.endswith("/") or "?" in value else value + "/"
    if os.path.isabs(value):
        raise RunFileError(redact(path), key, f"{value!r} is a local folder, named by a file behind a URL",
                           'give the folder relative to the data.toml (dir = ".") or as a URL')
    parts = urllib.parse.urlsplit(path)
    inner = posixpath.normpath(posixpath.join(posixpath.dirname(parts.path), value))
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, inner.rstrip("/") + "/", "", ""))


def host_port(path: str, key: str, value: Any) -> tuple[str, int]:
    """``"host:port"`` split, the port 1..65535; an IPv6 host is written in brackets.

    >>> host_port("state.toml", "Server", "127.0.0.1:20001"), host_port("state.toml", "Server", "[::1]:20001")
    (('127.0.0.1', 20001), ('::1', 20001))
    >>> host_port("state.toml", "Server", "127.0.0.1:99999")
    Traceback (most recent call last):
    ...
    readers.tokenized.runfile_fields.RunFileError: state.toml: Server: port must be 1..65535, got '99999'; write it as ...
    """
    fix = 'write it as Server = "127.0.0.1:20001" (an IPv6 host in brackets: "[::1]:20001")'
    if not isinstance(value, str):
        raise RunFileError(path, key, f'must be "host:port", got {value!r}', fix)
    host, colon, port = value.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise RunFileError(path, key, f"IPv6 host not in brackets: {value!r}", fix)
    if not colon or not host:
        raise RunFileError(path, key, f'must be "host:port", got {value!r}', fix)
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise RunFileError(path, key, f"port must be 1..65535, got {port!r}", fix)
    return host, int(port)
