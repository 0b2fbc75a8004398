"""data.toml and state.toml: a token data set and a training run, as Psyche writes them.

Psyche (github.com/PsycheFoundation/psyche, its ``config/`` folder) describes a
run with two TOML files:

data.toml
    The token data a data-provider server holds: ``dir`` (relative to the
    file), ``token_size`` (``"TwoBytes"`` or ``"FourBytes"``), ``seq_len`` and
    ``shuffle_seed`` (32 byte values). readerkit adds ``vocab_size`` (one more
    than the largest token id), which ``python cli.py tokenize`` records with
    the token size it wrote (``write_data``); a data.toml without it (Psyche's,
    or an older one) still reads, and the vocabulary is then found by reading
    the tokens.
state.toml
    The run: ``[config]`` holds the global batch-size schedule (from
    ``global_batch_size_start`` to ``global_batch_size_end`` over
    ``global_batch_size_warmup_tokens`` tokens) and ``total_steps``;
    ``[model.LLM]`` holds ``max_seq_len`` and ``data_location``, either
    ``Server = "host:port"`` (or a list of them: several servers, replicas
    or parts of the data) or ``Local = "folder"``. Psyche's newer layout
    (its ``split-coord`` branch) moves ``data_location``, ``architecture``,
    ``lr_schedule``, ``optimizer`` and ``checkpoint`` to a top-level
    ``[model_extra_data]`` table, and ``[model.LLM]`` gains
    ``checkpoint_source``; both layouts are read, and a ``data_location`` in
    both places is an error. Psyche's Local holds
    only a folder; readerkit also reads a ``[model.LLM.data_location.Local]``
    table (``path``, ``token_size_in_bytes``, ``shuffle``), shaped like
    Psyche's Http location. Psyche's Dummy, Http, WeightedHttp and
    Preprocessed locations are refused with a clear error.

A Local folder (and a data.toml's ``dir``) may be a URL, ``http(s)://`` or
``s3://`` (what ``readers.tokens`` reads): its token objects are read by byte
ranges, as Psyche's HTTP provider reads them, and a ``data.toml`` beside them
(fetched with one request for its size and one for its bytes) describes them
as a local folder's does; its ``dir`` is relative to its own URL. A
``load_data`` of a URL reads it the same way. Messages show URLs without
their passwords or query strings.

``load_data`` and ``load_run`` read them with the standard library's
``tomllib`` and check every key before returning a frozen dataclass. Keys
Psyche knows and readerkit has no use for (timings, checkpoint, optimizer,
learning-rate schedule..., and the older ``rounds_per_epoch`` and
``round_apply_time``) are accepted unread and listed in
``RunConfig.ignored``; any other key is an error with a did-you-mean. Every
fault is one ``RunFileError`` naming the file, the dotted key and the fix.
The two kinds are told apart by their top-level keys, so a data.toml given
where a state.toml is expected (or the reverse) is refused as the wrong kind
of file, saying which kind it is and which one its ``caller`` expects.

A 32-byte seed becomes ``int.from_bytes(bytes(values), "little")`` (an int in
[0, 2**256)), which ``readers.shuffle`` takes as is. The same seed always gives
the same readerkit order, but not Psyche's order: the shuffles differ.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from readers.errors import MissingFile
from readers.network.wire import show_address
from readers.sources import locations
from readers.sources.locations import is_url, redact
from readers.tokenized import runfile_fields as fields
from readers.tokenized.runfile_fields import RunFileError

__all__ = ["DataConfig", "LocalData", "RunConfig", "RunFileError", "ServerData", "data_text", "data_toml_of", "kind_of",
           "load_data", "load_run", "write_data"]

#: A Local folder without a data.toml holds 2-byte tokens, read in order (Psyche's Shuffle::default()).
DEFAULT_TOKEN_SIZE = 2
DATA_KEYS = ("dir", "token_size", "seq_len", "shuffle_seed", "vocab_size")
#: state.toml's top level as Psyche's Coordinator has it; only config and model are read.
STATE_KEYS = ("config", "model", "run_id", "run_state", "progress", "epoch_state",
              "run_state_start_unix_timestamp", "pending_pause", "model_extra_data")
CONFIG_USED = ("global_batch_size_start", "global_batch_size_end", "global_batch_size_warmup_tokens", "total_steps")
CONFIG_IGNORED = ("warmup_time", "cooldown_time", "epoch_time", "max_round_train_time", "round_witness_time",
                  "min_clients", "init_min_clients", "verification_percent", "witness_nodes",
                  "waiting_for_members_extra_time",
                  "rounds_per_epoch", "round_apply_time")  # the last two: Psyche's configs before 2026-02 / 2026-03
LLM_USED = ("max_seq_len", "data_location")
LLM_IGNORED = ("architecture", "data_type", "cold_start_warmup_steps", "checkpoint", "lr_schedule", "optimizer",
               "checkpoint_source", "checkpoint_data")
#: Psyche's newer [model_extra_data] (its ModelExtraData): only data_location is read.
EXTRA_IGNORED = ("version", "architecture", "data_type", "lr_schedule", "optimizer", "run_metadata", "checkpoint")
#: Where data_location may be: the older layout's, then the newer layout's.
LOCATION_KEYS = ("model.LLM.data_location", "model_extra_data.data_location")
LOCAL_KEYS = ("path", "token_size_in_bytes", "shuffle")
#: Psyche's other data locations: readerkit has no provider for them.
UNSUPPORTED = ("Dummy", "Http", "WeightedHttp", "Preprocessed")
LOCATIONS = ("Server", "Local", *UNSUPPORTED)
#: The top-level tables only a state.toml has: a file with one of them is a run file.
STATE_TABLES = ("config", "model", "model_extra_data")


@dataclass(frozen=True)
class DataConfig:
    """A data.toml: the token folder (absolute), bytes per token (2 or 4), the sequence length, the
    shuffle seed (an int >= 0, or None to keep the files' order) and the vocabulary size (None: not recorded)."""

    dir: str
    token_size: int
    seq_len: int
    shuffle_seed: int | None
    vocab_size: int | None = None


@dataclass(frozen=True)
class LocalData:
    """Token data in a local folder (absolute path) or a folder URL (ending in "/"): bytes per token, shuffle seed (None: in order), the
    run's sequence length, the vocabulary size its data.toml records (None: not recorded) and that data.toml's
    path (None: the folder has none, or the run file's Local table describes it)."""

    path: str
    token_size: int
    shuffle_seed: int | None
    seq_len: int
    vocab_size: int | None = None
    data_file: str | None = field(default=None, compare=False)


@dataclass(frozen=True, repr=False)
class ServerData:
    """Token data fetched from a data-provider server at ``host:port``, and from ``others`` when the run file's
    ``Server`` lists several (replicas or parts: ``readers.remote`` of ``addresses``)."""

    host: str
    port: int
    others: tuple[tuple[str, int], ...] = ()

    @property
    def addresses(self) -> list[str]:
        """Every server's ``host:port``, the first first.

        >>> ServerData("127.0.0.1", 20001, (("127.0.0.1", 20002),)).addresses
        ['127.0.0.1:20001', '127.0.0.1:20002']
        """
        return [show_address(h, p) for h, p in ((self.host, self.port), *self.others)]

    def __repr__(self) -> str:
        more = f", others={self.others!r}" if self.others else ""
        return f"ServerData(host={self.host!r}, port={self.port!r}{more})"

    @property
    def address(self) -> str:
        """``host:port``, an IPv6 host in brackets.

        >>> ServerData("127.0.0.1", 20001).address, ServerData("::1", 20001).address
        ('127.0.0.1:20001', '[::1]:20001')
        """
        return show_address(self.host, self.port)


@dataclass(frozen=True)
class RunConfig:
    """A state.toml: the global batch size grows from ``batch_start`` to ``batch_end`` over
    ``warmup_tokens`` tokens; ``total_steps`` steps of ``seq_len``-token sequences from ``data``
    (``LocalData`` or ``ServerData``). ``ignored`` lists the dotted keys present and not read."""

    batch_start: int
    batch_end: int
    warmup_tokens: int
    total_steps: int
    seq_len: int
    data: LocalData | ServerData
    ignored: tuple[str, ...] = ()


def _local(path: str, key: str, value: Any, seq_len: int) -> LocalData:
    """Local = "folder" (described by the folder's data.toml if it holds one) or the Local table."""
    if isinstance(value, dict):
        fields.check_keys(path, value, key, LOCAL_KEYS, required=LOCAL_KEYS)
        return LocalData(fields.folder(path, f"{key}.path", value["path"]),
                         fields.token_size(path, f"{key}.token_size_in_bytes", value["token_size_in_bytes"]),
                         fields.shuffle(path, f"{key}.shuffle", value["shuffle"]), seq_len)
    found = fields.folder(path, key, value)
    described = data_toml_of(found)
    if described is None:
        return LocalData(found, DEFAULT_TOKEN_SIZE, None, seq_len)
    data = load_data(described, caller=f"the Local data location of {path}")
    if data.seq_len != seq_len:
        raise RunFileError(redact(described), "seq_len", f"is {data.seq_len}, but model.LLM.max_seq_len is {seq_len} in {path}",
                           "make the two equal")
    return LocalData(data.dir, data.token_size, data.shuffle_seed, seq_len, data.vocab_size, redact(described))


def data_toml_of(folder: str) -> str | None:
    """The data.toml of a token folder (a local path, or a URL ending in "/": one ``stat``), or None if it has none.

    >>> import tempfile
    >>> tmp = tempfile.TemporaryDirectory()
    >>> data_toml_of(tmp.name) is None
    True
    >>> _ = open(os.path.join(tmp.name, "data.toml"), "w").write('dir = "."')
    >>> data_toml_of(tmp.name) == os.path.join(tmp.name, "data.toml")
    True
    """
    if not is_url(folder):
        described = os.path.join(folder, "data.toml")
        return described if os.path.isfile(described) else None
    described = folder.split("?")[0].rstrip("/") + "/data.toml"
    try:
        locations.stat(described)
    except MissingFile:
        return None
    return described


def _find_location(path: str, llm: dict[str, Any], extra: dict[str, Any]) -> tuple[str, Any]:
    """The dotted key and value of the one data_location, in [model.LLM] or in [model_extra_data].

    >>> _find_location("state.toml", {}, {"data_location": "Dummy"})
    ('model_extra_data.data_location', 'Dummy')
    >>> _find_location("state.toml", {"data_location": "Dummy"}, {"data_location": "Dummy"})
    Traceback (most recent call last):
    ...
    readers.tokenized.runfile_fields.RunFileError: state.toml: model_extra_data.data_location: given twice: as model.LLM.data_location and as model_extra_data.data_location; keep only one: ...
    """
    found = [(key, table["data_location"]) for key, table in zip(LOCATION_KEYS, (llm, extra)) if "data_location" in table]
    if not found:
        raise RunFileError(path, LOCATION_KEYS[0], "missing", f"add {fields.EXAMPLES['data_location']}")
    if len(found) > 1:
        raise RunFileError(path, LOCATION_KEYS[1], f"given twice: as {LOCATION_KEYS[0]} and as {LOCATION_KEYS[1]}",
                           "keep only one: [model_extra_data.data_location] in Psyche's newer layout, "
                           "[model.LLM.data_location] in the older one")
    return found[0]


def _location(path: str, key: str, value: Any, seq_len: int) -> LocalData | ServerData:
    """Psyche's data_location at dotted ``key``: one variant name, alone ("Dummy") or with its value."""
    fix = f"write {fields.EXAMPLES['data_location']}"
    if isinstance(value, dict) and len(value) == 1:
        (variant, inner), = value.items()
    elif isinstance(value, str):
        variant, inner = value, None
    else:
        raise RunFileError(path, key, f"must name one data location, got {value!r}", fix)
    if variant not in LOCATIONS:
        raise fields.unknown(path, f"{key}.{variant}", variant, LOCATIONS, "data location")
    if variant in UNSUPPORTED:
        raise RunFileError(path, f"{key}.{variant}", f"readerkit cannot read {variant} data "
                           "(it reads Server and Local data locations)",
                           'serve the tokens from a data-provider server and write Server = "host:port", or copy '
                           'them to a folder and write Local = "folder" (a local folder, or the URL of one holding '
                           '.bin or .npy token files: Local = "https://host/tokens/" or "s3://bucket/tokens/")')
    if inner is None:
        raise RunFileError(path, f"{key}.{variant}", "needs a value", fix)
    if variant == "Server" and isinstance(inner, list):
        if not inner:
            raise RunFileError(path, f"{key}.{variant}", "is an empty list",
                               'write Server = "host:port", or a list: Server = ["host1:port", "host2:port"]')
        first, *others = [fields.host_port(path, f"{key}.{variant}[{k}]", a) for k, a in enumerate(inner)]
        return ServerData(*first, tuple(others))
    if variant == "Server":
        return ServerData(*fields.host_port(path, f"{key}.{variant}", inner))
    return _local(path, f"{key}.{variant}", inner, seq_len)


def kind_of(doc: dict[str, Any]) -> str | None:
    """Which run file a TOML document is, told by its top-level keys: "state.toml", "data.toml" or None.

    >>> kind_of({"dir": ".", "seq_len": 2048}), kind_of({"config": {}, "model": {}}), kind_of({"colour": 1})
    ('data.toml', 'state.toml', None)
    """
    if any(key in doc for key in STATE_TABLES):
        return "state.toml"
    return "data.toml" if any(key in doc for key in DATA_KEYS) else None


def _run_data_toml(path: str, doc: dict[str, Any]) -> str:
    """Where the data.toml of a state.toml's data is, in words, as far as the run file says (nothing checked)."""
    llm = doc.get("model", {}).get("LLM", {}) if isinstance(doc.get("model"), dict) else {}
    extra = doc.get("model_extra_data", {})
    for table in (llm, extra):
        location = table.get("data_location") if isinstance(table, dict) else None
        if not (isinstance(location, dict) and len(location) == 1):
            continue
        (variant, inner), = location.items()
        if variant == "Server" and isinstance(inner, list) and inner and all(isinstance(a, str) for a in inner):
            inner = ", ".join(inner)
        if variant == "Server" and isinstance(inner, str):
            return (f"this run reads its tokens from the server at {inner}: give the data.toml that server was "
                    "started with")
        inner = inner.get("path") if variant == "Local" and isinstance(inner, dict) else inner
        if variant == "Local" and isinstance(inner, str) and is_url(inner):
            return f"this run's tokens are at {redact(inner)}: give the data.toml there"
        if variant == "Local" and isinstance(inner, str) and inner:
            folder = os.path.normpath(os.path.join(os.path.dirname(path), inner))
            described = os.path.join(folder, "data.toml")
            if os.path.isfile(described):
                return f"this run's tokens are described by {described}: give that file"
            return (f"this run's token folder {folder} has no data.toml: write one there "
                    "(dir = \".\", token_size, seq_len)")
    return "give the data.toml of a token folder"


def _wrong_kind(path: str, doc: dict[str, Any], expected: str, caller: str) -> RunFileError:
    """The error for a data.toml given where a state.toml is expected, or the reverse.

    >>> print(_wrong_kind("/runs/tokens/data.toml", {"dir": "."}, "state.toml", "train --config"))
    /runs/tokens/data.toml: this is a token folder's data.toml (dir, token_size, seq_len), but train --config expects a run file (state.toml, with [config] and [model.LLM]); give the run's state.toml, or write one whose [model.LLM.data_location] is Local = "/runs/tokens" (the folder of this data.toml)
    >>> print(_wrong_kind("/runs/state.toml", {"config": {}}, "data.toml", "serve --config"))
    /runs/state.toml: this is a run file (state.toml, with [config] and [model.LLM]), but serve --config expects a token folder's data.toml (dir, token_size, seq_len); give the data.toml of a token folder
    """
    data = "a token folder's data.toml (dir, token_size, seq_len)"
    run = "a run file (state.toml, with [config] and [model.LLM])"
    if expected == "state.toml":
        return RunFileError(path, None, f"this is {data}, but {caller} expects {run}",
                            f"give the run's state.toml, or write one whose [model.LLM.data_location] is "
                            f"Local = \"{os.path.dirname(path)}\" (the folder of this data.toml)")
    return RunFileError(path, None, f"this is {run}, but {caller} expects {data}", _run_data_toml(path, doc))


def load_data(path: str | os.PathLike, *, caller: str = "load_data") -> DataConfig:
    """Read a data.toml: ``dir`` relative to the file, ``token_size``, ``seq_len``, ``shuffle_seed``, ``vocab_size``.

    ``token_size`` is ``"TwoBytes"``/``"FourBytes"`` (or 2/4); ``shuffle_seed``
    is Psyche's 32 byte values (read little-endian), an int >= 0, or absent
    (or ``"DontShuffle"``) for no shuffle; ``vocab_size`` (readerkit's,
    optional) is an int >= 2 that the token size can hold. Raises ``RunFileError`` naming the
    file, the key and the fix; a state.toml is refused as the wrong kind of
    file, naming ``caller`` (what reads it: ``"serve --config"``) as the one
    that expects a data.toml.

    >>> import os, tempfile
    >>> tmp = tempfile.TemporaryDirectory()
    >>> os.mkdir(os.path.join(tmp.name, "tokens"))
    >>> with open(os.path.join(tmp.name, "data.toml"), "w") as f:
    ...     _ = f.write('dir = "tokens"\\ntoken_size = "TwoBytes"\\nseq_len = 2048\\nshuffle_seed = [1' + ', 0' * 31 + ']\\n')
    >>> data = load_data(os.path.join(tmp.name, "data.toml"))
    >>> data.dir == os.path.join(tmp.name, "tokens"), data.token_size, data.seq_len, data.shuffle_seed
    (True, 2, 2048, 1)
    >>> with open(os.path.join(tmp.name, "data.toml"), "w") as f:
    ...     _ = f.write('dir = "tokens"\\ntoken_size = "TwoByte"\\nseq_len = 2048\\n')
    >>> load_data(os.path.join(tmp.name, "data.toml"))
    Traceback (most recent call last):
    ...
    readers.tokenized.runfile_fields.RunFileError: .../data.toml: token_size: must be "TwoBytes" or "FourBytes" (or 2 or 4), got 'TwoByte'; did you mean 'TwoBytes'?
    >>> tmp.cleanup()

    See Also: load_run
    """
    path = os.fspath(path)
    path = path if is_url(path) else os.path.abspath(path)
    doc = fields.read_toml(path, "data.toml")
    shown = redact(path)  # a URL's password or signature stays out of every message
    if kind_of(doc) == "state.toml":
        raise _wrong_kind(shown, doc, "data.toml", caller)
    fields.check_keys(shown, doc, "", DATA_KEYS, required=DATA_KEYS[:3])
    seed = doc.get("shuffle_seed", "DontShuffle")
    size = fields.token_size(shown, "token_size", doc["token_size"])
    return DataConfig(dir=fields.folder(path, "dir", doc["dir"]), token_size=size,
                      seq_len=fields.integer(shown, doc, "", "seq_len", 1),
                      shuffle_seed=None if seed == "DontShuffle" else fields.seed(shown, "shuffle_seed", seed),
                      vocab_size=fields.vocab_size(shown, doc, size))


def data_text(*, token_size: int, vocab_size: int, seq_len: int, shuffle_seed: int | None = None) -> str:
    """The text of a data.toml for the token files in its own folder (``dir = "."``).

    The seed is written as Psyche's 32 byte values, which read back as the same int.

    >>> print(data_text(token_size=2, vocab_size=256, seq_len=2048, shuffle_seed=7), end="")
    dir = "."
    token_size = "TwoBytes"
    vocab_size = 256
    seq_len = 2048
    shuffle_seed = [7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    """
    lines = ['dir = "."', f'token_size = "{fields.TOKEN_SIZE_NAMES[token_size]}"', f"vocab_size = {vocab_size}",
             f"seq_len = {seq_len}"]
    if shuffle_seed is not None:
        lines.append(f"shuffle_seed = {list(shuffle_seed.to_bytes(fields.SEED_BYTES, 'little'))}")
    return "\n".join(lines) + "\n"


def write_data(folder: str | os.PathLike, text: str) -> str:
    """Write ``text`` as ``folder``'s data.toml, whole or not at all, after checking that it reads back
    (``load_data``); returns the file's path.

    >>> import tempfile
    >>> tmp = tempfile.TemporaryDirectory()
    >>> path = write_data(tmp.name, data_text(token_size=4, vocab_size=70_000, seq_len=128))
    >>> data = load_data(path)
    >>> data.token_size, data.vocab_size, data.seq_len, data.shuffle_seed, data.dir == tmp.name
    (4, 70000, 128, None, True)
    >>> tmp.cleanup()
    """
    path = os.path.join(os.path.abspath(os.fspath(folder)), "data.toml")
    part = f"{path}.part"
    try:
        with open(part, "w", encoding="utf-8") as f:
            f.write(text)
        data = load_data(part)
        if data.dir != os.path.dirname(path):
            raise RunFileError(path, "dir", f"would name {data.dir}, not its own folder", 'write dir = "."')
        os.replace(part, path)
    finally:
        if os.path.exists(part):
            os.unlink(part)
    return path


def load_run(path: str | os.PathLike, *, caller: str = "load_run") -> RunConfig:
    """Read a state.toml: the batch-size schedule, the steps, the sequence length and the data location.

    ``[model.LLM.data_location]`` (or ``[model_extra_data.data_location]`` in
    Psyche's newer layout) is ``Server = "host:port"`` or a list of them (a ``ServerData``),
    ``Local = "folder"`` (a ``LocalData`` described by the folder's data.toml
    if it holds one: its ``dir``, usually ``"."``, token size and seed, its
    ``seq_len`` equal to ``max_seq_len``; else 2-byte tokens, no shuffle), or the table
    ``[model.LLM.data_location.Local]`` with ``path``, ``token_size_in_bytes``
    and ``shuffle``. Paths are relative to the file. Psyche's other keys are
    listed in ``ignored``. Raises ``RunFileError`` naming the file, the key and
    the fix; a data.toml is refused as the wrong kind of file, naming
    ``caller`` (what reads it: ``"train --config"``) as the one that expects a
    state.toml.

    >>> import os, tempfile
    >>> tmp = tempfile.TemporaryDirectory()
    >>> with open(os.path.join(tmp.name, "state.toml"), "w") as f:
    ...     _ = f.write('''run_id = "test"
    ... [config]
    ... warmup_time = 30
    ... global_batch_size_start = 8
    ... global_batch_size_end = 16
    ... global_batch_size_warmup_tokens = 1000000
    ... total_steps = 25000
    ... [model.LLM]
    ... architecture = "HfLlama"
    ... max_seq_len = 2048
    ... [model.LLM.data_location]
    ... Server = "127.0.0.1:20001"
    ... ''')
    >>> run = load_run(os.path.join(tmp.name, "state.toml"))
    >>> run.batch_start, run.batch_end, run.warmup_tokens, run.total_steps, run.seq_len
    (8, 16, 1000000, 25000, 2048)
    >>> run.data, run.ignored
    (ServerData(host='127.0.0.1', port=20001), ('run_id', 'config.warmup_time', 'model.LLM.architecture'))
    >>> tmp.cleanup()

    See Also: load_data
    """
    path = os.path.abspath(os.fspath(path))
    doc = fields.read_toml(path, "state.toml")
    if kind_of(doc) == "data.toml":
        raise _wrong_kind(path, doc, "state.toml", caller)
    fields.check_keys(path, doc, "", STATE_KEYS, required=("config", "model"))
    config = fields.subtable(path, doc, "", "config")
    fields.check_keys(path, config, "config", CONFIG_USED + CONFIG_IGNORED, required=CONFIG_USED)
    start, end, warmup, total = (fields.integer(path, config, "config", key, low)
                                 for key, low in zip(CONFIG_USED, (1, 1, 0, 1)))
    if end < start:
        raise RunFileError(path, "config.global_batch_size_end",
                           f"is {end}, less than config.global_batch_size_start ({start})",
                           "the batch size grows from start to end: make end >= start (equal for a fixed size)")
    model = fields.subtable(path, doc, "", "model")
    fields.check_keys(path, model, "model", ("LLM",), required=("LLM",))
    llm = fields.subtable(path, model, "model", "LLM")
    fields.check_keys(path, llm, "model.LLM", LLM_USED + LLM_IGNORED, required=LLM_USED[:1])
    seq_len = fields.integer(path, llm, "model.LLM", "max_seq_len", 1)
    extra = fields.subtable(path, doc, "", "model_extra_data") if "model_extra_data" in doc else {}
    fields.check_keys(path, extra, "model_extra_data", ("data_location",) + EXTRA_IGNORED)
    data = _location(path, *_find_location(path, llm, extra), seq_len)
    ignored = ([k for k in doc if k not in ("config", "model", "model_extra_data")]
               + [f"config.{k}" for k in config if k in CONFIG_IGNORED]
               + [f"model.LLM.{k}" for k in llm if k in LLM_IGNORED]
               + [f"model_extra_data.{k}" for k in extra if k in EXTRA_IGNORED])
    return RunConfig(start, end, warmup, total, seq_len, data, tuple(ignored))
