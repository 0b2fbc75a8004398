"""The database of ``readers.PipelineStore``: its tables, how the file is opened, how a set is laid out in it.

The words are Modyn's. A *pipeline* is registered (its config, as JSON) and
gets a ``pipeline_id``. At each *trigger* the pipeline decides its training
set: the keys of the samples to train on (indices into the pipeline's
source) with a weight each, stored under ``(pipeline_id, trigger_id)``;
trigger ids go 0, 1, 2, ... per pipeline, and sets may overlap. Each
*training* on a set gets a ``training_id`` and a status any process can read.

``pipelines``
    one row per registration: its config (JSON), the time it was made, and
    the process that holds it (``owner``, ``"host:pid"``, NULL when none)
    with the time it last wrote (``heartbeat``), so that two processes never
    run one pipeline.
``triggers``
    one row per set: its keys as one BLOB of little-endian int64, its
    weights as one of float32 (NULL when all are 1), a CRC-32 of both
    checked on every read, the stream position and time it covers, its
    info (JSON).
``trainings``
    one row per training: status, progress and metrics (JSON), times, error.
``models``
    a finished training's model state, when one was given: one BLOB
    (``readers.storage.codec``'s layout, never pickle) and its CRC-32, written
    in the transaction that marks the training finished.

A set is one row, not a row per key: it is written once and read whole, so
a 60,000-key set is one insert of 480 kB (about a millisecond) where rows
would take 60,000 inserts and an index, and a reader gets it in one read.
The file is opened as ``readers.storage.sqlite`` opens every readerkit
file: in WAL mode with ``synchronous = NORMAL``, so readers never wait for
the writer; a process killed at any point loses no committed transaction,
and a power cut may lose the last ones but never leaves half of one.
``PRAGMA application_id`` marks the file as a pipeline store and
``user_version`` is its schema. A store damaged outside sqlite (a table
dropped, a page overwritten) is refused with ``damaged_store``'s error when
opened or at the statement that meets the damage: it holds what cannot be
computed again, so it is never set aside or remade.

A PostgreSQL store (``open_database`` with a ``postgresql://`` URL) has the
same tables in PostgreSQL's types (BIGINT CRCs, BYTEA blobs, DOUBLE
PRECISION times, identity columns) and ``readerkit_meta`` for the marks:
``application`` = ``readerkit pipeline store`` and ``schema``. They are
judged by the same check as a file's (a database holding other tables,
another program's marks or another schema is refused before anything
changes), and made in the first write transaction, under the store's
advisory lock, so that processes making them at once agree.
"""
from __future__ import annotations

import functools
import json
import os
import sqlite3
from typing import Any

import numpy as np

from readers.errors import BadType, BadValue, FileError, MissingFile, make_folder
from readers.storage.codec import CorruptEntry, decode, encode
from readers.storage.sqlite import (
    DamagedFile,
    FileFormat,
    Marks,
    blob_crc,
    check_crc,
    connect,
    damaged,
    is_damage,
)

__all__ = ["APPLICATION_ID", "BLOBS", "COLUMNS", "SCHEMA", "NotAPipelineStore", "as_json", "damaged_store", "decode_set", "decode_state",
           "encode_set", "encode_state", "listed", "open_database", "open_store"]

SCHEMA = 2  # 2: models, and pipelines' owner and heartbeat
APPLICATION_ID = 0x726B7064  # "rkpd": the file is a readerkit pipeline store, whatever tables it has
_OURS = {"pipelines", "triggers", "trainings", "models", "sqlite_sequence"}
_TABLES = """
CREATE TABLE IF NOT EXISTS pipelines (pipeline_id INTEGER PRIMARY KEY AUTOINCREMENT, config TEXT NOT NULL,
    created REAL NOT NULL, owner TEXT, heartbeat REAL);
CREATE TABLE IF NOT EXISTS triggers (pipeline_id INTEGER NOT NULL REFERENCES pipelines, trigger_id INTEGER NOT NULL,
    size INTEGER NOT NULL, keys BLOB NOT NULL, weights BLOB, crc INTEGER NOT NULL, position INTEGER NOT NULL,
    time REAL, info TEXT NOT NULL, created REAL NOT NULL, PRIMARY KEY (pipeline_id, trigger_id));
CREATE TABLE IF NOT EXISTS trainings (training_id INTEGER PRIMARY KEY AUTOINCREMENT, pipeline_id INTEGER NOT NULL,
    trigger_id INTEGER NOT NULL, status TEXT NOT NULL, progress TEXT NOT NULL, metrics TEXT NOT NULL,
    started REAL NOT NULL, ended REAL, error TEXT);
CREATE INDEX IF NOT EXISTS trainings_by_pipeline ON trainings (pipeline_id, status);
CREATE TABLE IF NOT EXISTS models (training_id INTEGER PRIMARY KEY, state BLOB NOT NULL, crc INTEGER NOT NULL);
"""
# PostgreSQL's: the same tables in its types (BIGINT for CRC-32s, which pass INTEGER's 2**31; BYTEA; DOUBLE
# PRECISION; identity columns, BY DEFAULT so that `pipeline migrate` keeps ids), and readerkit_meta for the marks
# sqlite keeps in application_id and user_version.
META = "readerkit_meta"
_PG_TABLES = f"""
CREATE TABLE IF NOT EXISTS {META} (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS pipelines (pipeline_id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    config TEXT NOT NULL, created DOUBLE PRECISION NOT NULL, owner TEXT, heartbeat DOUBLE PRECISION);
CREATE TABLE IF NOT EXISTS triggers (pipeline_id BIGINT NOT NULL REFERENCES pipelines, trigger_id BIGINT NOT NULL,
    size BIGINT NOT NULL, keys BYTEA NOT NULL, weights BYTEA, crc BIGINT NOT NULL, position BIGINT NOT NULL,
    time DOUBLE PRECISION, info TEXT NOT NULL, created DOUBLE PRECISION NOT NULL, PRIMARY KEY (pipeline_id, trigger_id));
CREATE TABLE IF NOT EXISTS trainings (training_id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    pipeline_id BIGINT NOT NULL, trigger_id BIGINT NOT NULL, status TEXT NOT NULL, progress TEXT NOT NULL,
    metrics TEXT NOT NULL, started DOUBLE PRECISION NOT NULL, ended DOUBLE PRECISION, error TEXT);
CREATE INDEX IF NOT EXISTS trainings_by_pipeline ON trainings (pipeline_id, status);
CREATE TABLE IF NOT EXISTS models (training_id BIGINT PRIMARY KEY, state BYTEA NOT NULL, crc BIGINT NOT NULL);
"""
#: Every table's columns, in the order `pipeline migrate` copies them (a table after those it refers to).
COLUMNS = {
    "pipelines": ("pipeline_id", "config", "created", "owner", "heartbeat"),
    "triggers": ("pipeline_id", "trigger_id", "size", "keys", "weights", "crc", "position", "time", "info", "created"),
    "trainings": ("training_id", "pipeline_id", "trigger_id", "status", "progress", "metrics", "started", "ended",
                  "error"),
    "models": ("training_id", "state", "crc"),
}
BLOBS = {"keys", "weights", "state"}
_KIND = "readerkit pipeline store"  # readerkit_meta's 'application': the database is one, whatever tables it has


class NotAPipelineStore(BadValue):
    """A file that is not a readerkit pipeline store (``reason`` says why); it is left as it was.

    >>> str(NotAPipelineStore("/d/notes.db", "it holds other tables"))
    '/d/notes.db is not a readerkit pipeline store (it holds other tables): give another file'
    """

    def __init__(self, path: str, reason: str):
        self.path, self.reason = path, reason
        super().__init__(f"{path} is not a readerkit pipeline store ({reason}): give another file")


def _plain(value: Any) -> Any:
    """numpy scalars and arrays as JSON takes them (class counts are often numpy ints)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise BadType(f"{type(value).__name__} {value!r:.60}")


def _bad_key(value: Any, where: str) -> str | None:
    """Where a dict in ``value`` has a key that is not a str (JSON would make it one), or None."""
    if isinstance(value, dict):
        for k, v in value.items():
            found = f"{where}[{k!r}]" if not isinstance(k, str) else _bad_key(v, f"{where}[{k!r}]")
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        return next((f for i, v in enumerate(value) if (f := _bad_key(v, f"{where}[{i}]"))), None)
    return None


def as_json(value: Any, what: str, where: str) -> str:
    """``value``, a dict, as JSON text (numpy numbers as numbers); what JSON cannot hold as it is, refused.

    >>> as_json({"counts": {"0": np.int64(3)}}, "info", "add_trigger")
    '{"counts": {"0": 3}}'
    >>> as_json({"counts": {0: 3}}, "info", "add_trigger")
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: add_trigger: info['counts'][0] has a key that is not a str, which JSON would turn into one: use str keys, e.g. {str(label): count}
    """
    if not isinstance(value, dict):
        raise BadType(f"{where}: {what} must be a dict (stored as JSON), got {type(value).__name__} {value!r:.60}")
    bad = _bad_key(value, what)
    if bad:
        raise BadValue(f"{where}: {bad} has a key that is not a str, which JSON would turn into one: use str keys, "
                       "e.g. {str(label): count}")
    try:
        return json.dumps(value, default=_plain)
    except (TypeError, ValueError) as exc:
        raise BadValue(f"{where}: {what} must be JSON data (dicts, lists, str, numbers), but it holds "
                       f"{exc}") from None


def listed(ids: list[int]) -> str:
    """Ids as runs, for messages that say what exists.

    >>> listed([0, 1, 2, 5]), listed([])
    ('0-2, 5', 'none')
    """
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "none"


def encode_set(keys: Any, weights: Any = None, where: str = "add_trigger") -> tuple[bytes, bytes | None, int]:
    """A set as stored: (keys as little-endian int64 bytes, weights as float32 bytes or None for all 1, CRC-32).

    >>> import zlib
    >>> k, w, crc = encode_set([3, 1], [0.5, 2])
    >>> len(k), len(w), crc == zlib.crc32(w, zlib.crc32(k))
    (16, 8, True)
    >>> encode_set([3, -1])
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: add_trigger: keys are indices into the source, from 0 up, got -1
    """
    k = np.asarray(keys)
    if k.ndim != 1:
        raise BadValue(f"{where}: keys must be a 1-d array of ints (indices into the source), got shape {k.shape}")
    if k.size and k.dtype.kind not in "iu":
        raise BadType(f"{where}: keys must be ints (indices into the source), got dtype {k.dtype}")
    if k.size and (k.min() < 0 or k.max() > np.iinfo(np.int64).max):
        bad = k.min() if k.min() < 0 else k.max()
        raise BadValue(f"{where}: keys are indices into the source, from 0 up, got {bad}")
    keys_blob, weights_blob = k.astype("<i8").tobytes(), None
    if weights is not None:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != k.shape:
            raise BadValue(f"{where}: weights must have one value per key ({len(k)}), got shape {w.shape}")
        bad = ~(np.isfinite(w) & (w >= 0))
        if bad.any():
            raise BadValue(f"{where}: weights must be finite and >= 0, got {w[bad][0]} (for key {k[bad][0]})")
        weights_blob = w.astype("<f4").tobytes()
    return keys_blob, weights_blob, blob_crc(keys_blob, weights_blob)


def decode_set(keys: bytes, weights: bytes | None, crc: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    """(keys as int64, weights as float32) from their stored bytes, checked against their CRC-32.

    >>> k, w = decode_set(*encode_set([3, 1]), "trigger 0")
    >>> k.tolist(), w.tolist()
    ([3, 1], [1.0, 1.0])
    >>> decode_set(b"12345678", None, 0, "trigger 0 of pipeline 1")
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: trigger 0 of pipeline 1 is damaged (its CRC-32 does not match): the file was changed outside readerkit; write the set again
    """
    check_crc(crc, what, "write the set again", keys, weights)
    k = np.frombuffer(keys, "<i8").astype(np.int64)
    return k, np.ones(len(k), np.float32) if weights is None else np.frombuffer(weights, "<f4").astype(np.float32)


def _state_value(value: Any) -> bool:
    """Whether a model state may hold ``value``: a numeric array, or a number."""
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "biufc"
    return isinstance(value, (int, float, np.bool_, np.number))


def encode_state(state: Any, where: str = "finish_training") -> tuple[bytes, int]:
    """A model state as stored: (``readers.storage.codec`` blob, never pickle; its CRC-32).

    >>> import zlib
    >>> blob, crc = encode_state({"w": np.zeros((2, 2), np.float32), "step": 3})
    >>> crc == zlib.crc32(blob)
    True
    >>> encode_state({"w": [1.0, 2.0]})
    Traceback (most recent call last):
    ...
    readers.errors.BadType: finish_training: model_state['w'] is a list; a model state maps str names to numeric numpy arrays, ints and floats (a model's state_dict()): convert it, e.g. np.asarray(value) (a torch tensor: t.detach().cpu().numpy())
    """
    if not isinstance(state, dict):
        raise BadType(f"{where}: model_state must be a dict of str names to numpy arrays and numbers (a model's "
                      f"state_dict()), got {type(state).__name__}")
    for name, value in state.items():
        if not isinstance(name, str):
            raise BadType(f"{where}: model_state has the name {name!r}, which is not a str: use str names")
        if not _state_value(value):
            held = f"an array of {value.dtype}" if isinstance(value, np.ndarray) else f"a {type(value).__name__}"
            raise BadType(f"{where}: model_state[{name!r}] is {held}; a model state maps str names to numeric "
                          "numpy arrays, ints and floats (a model's state_dict()): convert it, e.g. "
                          "np.asarray(value) (a torch tensor: t.detach().cpu().numpy())")
    blob = encode(state)
    return blob, blob_crc(blob)


def decode_state(blob: bytes, crc: int, what: str) -> dict:
    """A model state from its stored blob, checked against its CRC-32; its arrays are writable copies.

    >>> state = decode_state(*encode_state({"w": np.ones(2), "step": 3}), "the model of training 1")
    >>> state["w"].flags.writeable, state["step"]
    (True, 3)
    >>> decode_state(b"RKC1", 0, "the model of training 1 in runs.db")
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: the model of training 1 in runs.db is damaged (its CRC-32 does not match): the file was changed outside readerkit; train again on the training's trigger set
    """
    remedy = "train again on the training's trigger set"
    check_crc(crc, what, remedy, blob)
    try:
        state = decode(blob)
    except CorruptEntry:
        raise damaged(what, remedy, "it does not decode") from None
    if not isinstance(state, dict):
        raise damaged(what, remedy, f"it holds a {type(state).__name__}")
    return {name: np.array(v) if isinstance(v, np.ndarray) else v for name, v in state.items()}


def damaged_store(path: str, reason: str) -> DamagedFile:
    """The error for the pipeline store at ``path``, damaged as ``reason`` says.

    >>> str(damaged_store("/d/runs.db", "its table trainings is missing"))
    '/d/runs.db is damaged (its table trainings is missing): the file was changed outside readerkit; restore it from a copy, or give another file'
    """
    return DamagedFile(path, reason, "the file was changed outside readerkit; restore it from a copy, or give another "
                                     "file")


class _StoreFile(FileFormat):
    """A pipeline store's file: its tables and marks, and how a file that is not one is refused."""

    tables, schema, application_id = _TABLES, SCHEMA, APPLICATION_ID

    def check(self, path: str, marks: Marks, create: bool) -> None:
        app, version, tables = marks
        if app == APPLICATION_ID and version != SCHEMA:
            raise NotAPipelineStore(path, f"made by another version of readerkit: schema {version}, and this one "
                                          f"reads {SCHEMA}")
        if app != APPLICATION_ID and (app or version or tables - _OURS or not (create or tables)):
            raise NotAPipelineStore(path, "it holds other tables" if tables - _OURS else "it is empty" if marks.empty
                                    else "it is another program's database")
        gone = sorted(_OURS - {"sqlite_sequence"} - tables)
        if app == APPLICATION_ID and gone:
            raise damaged_store(path, f"its table{'s' if len(gone) > 1 else ''} {', '.join(gone)} "
                                      f"{'are' if len(gone) > 1 else 'is'} missing")

    def no_wal(self, path: str) -> Exception:
        return NotAPipelineStore(path, "it cannot be put in WAL mode, as on some network file systems")

    def failed(self, path: str, exc: sqlite3.DatabaseError) -> BaseException | None:
        if isinstance(exc, sqlite3.OperationalError) and "unable to open" in str(exc):
            return FileError(f"cannot open the pipeline store {path} ({exc}): its folder must be writable (sqlite keeps "
                           "the -wal and -shm files beside it)")
        if is_damage(exc):
            return damaged_store(path, str(exc))
        return NotAPipelineStore(path, str(exc))


def _pg_marks(db: Any) -> Marks:
    """A PostgreSQL database's marks, as sqlite's: (APPLICATION_ID if readerkit_meta says it is a pipeline store,
    -1 if it says something else, else 0; its schema; its tables, readerkit_meta aside)."""
    tables = frozenset(name for name, in db.execute("SELECT tablename FROM pg_tables WHERE schemaname = "
                                                     "current_schema()"))
    if META not in tables:
        return Marks(0, 0, tables)
    meta = dict(db.execute(f"SELECT key, value FROM {META}").fetchall())
    kind, version = meta.get("application"), meta.get("schema", "0")
    return Marks(APPLICATION_ID if kind == _KIND else -1 if kind or meta else 0,
                 int(version) if version.isdigit() else -1, tables - {META})


def _pg_setup(address: str, create: bool, db: Any) -> None:
    """Judge a PostgreSQL database's marks as a sqlite file's, then make its tables and marks if it has none: in
    the first write transaction, under the store's lock, so processes making it at once agree."""
    marks = _pg_marks(db)
    _StoreFile().check(address, marks, create)
    if marks.application_id != APPLICATION_ID:
        for statement in filter(str.strip, _PG_TABLES.split(";")):
            db.execute(statement)
        db.execute(f"INSERT INTO {META} (key, value) VALUES ('application', ?), ('schema', ?) ON CONFLICT (key) "
                   "DO NOTHING", (_KIND, str(SCHEMA)))


def open_database(db: str, create: bool = True) -> Any:
    """The ``Database`` of the pipeline store ``db``: a sqlite file's path (``open_store``) or a PostgreSQL URL
    (``postgresql://user@host:port/dbname``; a database whose marks are judged as a file's, its tables made when
    ``create``). Its errors name ``db`` without its password.

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> database = open_database(os.path.join(folder.name, "runs.db"))
    >>> database.blob
    'BLOB'
    >>> database.close()
    """
    from readers.storage.postgres import PostgresDatabase, is_postgres, redact
    from readers.storage.sqlite import Database

    if is_postgres(db):
        shown = redact(db)
        return PostgresDatabase(db, functools.partial(_pg_setup, shown, create), APPLICATION_ID,
                                f"the pipeline store {shown} is closed: open it again with PipelineStore(url)",
                                functools.partial(damaged_store, shown))
    return Database(open_store(db, create), f"the pipeline store {db} is closed: open it again with "
                                            "PipelineStore(path)", functools.partial(damaged_store, db))


#: Seconds an empty file is watched, when opened to read, for the process that is making it to write its tables.
EMPTY_WAIT = 2.0


def open_store(path: str, create: bool = True) -> sqlite3.Connection:
    """A connection to the pipeline store at ``path`` (made, with its folder, when ``create``), in WAL mode.

    Statements run in autocommit unless a transaction is begun; a busy file
    is waited on for up to a minute. A file that is not a pipeline store is
    refused (``NotAPipelineStore``) before anything in it changes. Opened
    only to read, an empty file is watched for up to ``EMPTY_WAIT`` seconds:
    a pipeline that has just made it has its tables written within
    milliseconds.

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> db = open_store(os.path.join(folder.name, "runs", "pipelines.db"))
    >>> db.execute("PRAGMA journal_mode").fetchone(), db.execute("PRAGMA synchronous").fetchone()
    (('wal',), (1,))
    >>> db.close()
    >>> open_store(os.path.join(folder.name, "other.db"), create=False)
    Traceback (most recent call last):
    ...
    readers.errors.MissingFile: no pipeline store at '.../other.db' (...): check the path; a pipeline makes it with PipelineStore(path)
    """
    if not os.path.exists(path):
        if not create:
            raise MissingFile(f"no pipeline store at {path!r} (cwd {os.getcwd()!r}): check the path; a pipeline "
                              "makes it with PipelineStore(path)")
        make_folder(os.path.dirname(os.path.abspath(path)), "the pipeline store's folder")
    return connect(path, _StoreFile(), create, wait=EMPTY_WAIT)
