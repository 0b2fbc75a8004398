"""readers.continual.schema: the pipeline store's file (opened, marked, refused) and how a set is laid out in it."""
import multiprocessing
import os
import sqlite3
import threading
import time
import zlib

import numpy as np
import pytest

from readers.caching.database import open_database
from readers.continual import schema
from readers.continual.schema import (
    APPLICATION_ID,
    SCHEMA,
    NotAPipelineStore,
    as_json,
    decode_set,
    decode_state,
    encode_set,
    encode_state,
    listed,
    open_store,
)
from readers.storage.codec import encode
from tests.conftest import HANG
from tests.helpers.child_processes import joined, started


def test_open_store_makes_a_marked_wal_file_and_opens_it_again(tmp_path):
    path = tmp_path / "runs" / "pipelines.db"
    db = open_store(str(path))
    pragmas = [db.execute(f"PRAGMA {p}").fetchone()[0]
               for p in ("journal_mode", "synchronous", "user_version", "application_id", "busy_timeout")]
    assert pragmas == ["wal", 1, SCHEMA, APPLICATION_ID, 60000]
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == {"pipelines", "triggers", "trainings", "models", "sqlite_sequence"}
    columns = {t: [r[1] for r in db.execute(f"PRAGMA table_info({t})")] for t in ("pipelines", "models")}
    assert columns == {"pipelines": ["pipeline_id", "config", "created", "owner", "heartbeat"],
                       "models": ["training_id", "state", "crc"]}
    db.execute("INSERT INTO pipelines (config, created) VALUES ('{}', 0)")
    db.close()
    again = open_store(str(path), create=False)
    assert again.execute("SELECT count(*) FROM pipelines").fetchone() == (1,)
    again.close()


@pytest.mark.parametrize("make, reason", [
    (lambda p: p.write_bytes(b"not a database at all" * 100), "file is not a database"),
    (lambda p: sqlite3.connect(p).execute("CREATE TABLE notes (x)").connection.commit(), "it holds other tables"),
    (lambda p: sqlite3.connect(p).execute("PRAGMA user_version = 3"), "it is another program's database"),
    (lambda p: sqlite3.connect(p).execute(f"PRAGMA application_id = {APPLICATION_ID + 1}"),
     "it is another program's database"),
])
def test_what_is_not_a_pipeline_store_is_refused_and_left_as_it_was(tmp_path, make, reason):
    path = tmp_path / "theirs.db"
    make(path)
    before = path.read_bytes()
    with pytest.raises(NotAPipelineStore, match=rf"theirs.db is not a readerkit pipeline store \({reason}\): give "):
        open_store(str(path))
    assert path.read_bytes() == before
    assert not (tmp_path / "theirs.db-wal").exists()


def test_a_readerkit_cache_is_not_a_pipeline_store(tmp_path):
    open_database(tmp_path).close()
    with pytest.raises(NotAPipelineStore, match="it holds other tables"):
        open_store(str(tmp_path / "cache.sqlite3"))


def test_another_schema_of_the_store_is_named(tmp_path):
    path = str(tmp_path / "p.db")
    open_store(path).close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 9")
    with pytest.raises(NotAPipelineStore, match=rf"another version of readerkit: schema 9, and this one reads {SCHEMA}"):
        open_store(path)


SCHEMA_1 = """
CREATE TABLE pipelines (pipeline_id INTEGER PRIMARY KEY AUTOINCREMENT, config TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE triggers (pipeline_id INTEGER NOT NULL REFERENCES pipelines, trigger_id INTEGER NOT NULL,
    size INTEGER NOT NULL, keys BLOB NOT NULL, weights BLOB, crc INTEGER NOT NULL, position INTEGER NOT NULL,
    time REAL, info TEXT NOT NULL, created REAL NOT NULL, PRIMARY KEY (pipeline_id, trigger_id));
CREATE TABLE trainings (training_id INTEGER PRIMARY KEY AUTOINCREMENT, pipeline_id INTEGER NOT NULL,
    trigger_id INTEGER NOT NULL, status TEXT NOT NULL, progress TEXT NOT NULL, metrics TEXT NOT NULL,
    started REAL NOT NULL, ended REAL, error TEXT);
INSERT INTO pipelines (config, created) VALUES ('{}', 0);
"""


def test_a_schema_1_store_is_refused_as_another_versions_and_left_as_it_was(tmp_path):
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(f"{SCHEMA_1} PRAGMA user_version = 1; PRAGMA application_id = {APPLICATION_ID};")
    db.close()
    before = path.read_bytes()
    assert SCHEMA == 2
    with pytest.raises(NotAPipelineStore, match=r"old.db is not a readerkit pipeline store \(made by another version "
                                                r"of readerkit: schema 1, and this one reads 2\): give another file"):
        open_store(str(path))
    assert path.read_bytes() == before


def test_open_store_without_create_makes_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(schema, "EMPTY_WAIT", 0.1)  # an empty file is watched that long before it is refused
    with pytest.raises(FileNotFoundError, match=r"no pipeline store at '.*missing.db'.*PipelineStore\(path\)"):
        open_store(str(tmp_path / "missing.db"), create=False)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "empty.db").touch()
    with pytest.raises(NotAPipelineStore, match=r"\(it is empty\)"):
        open_store(str(tmp_path / "empty.db"), create=False)


@pytest.mark.parametrize("keys, weights", [
    ([5, 0, 5, 2 ** 40], None),
    (np.array([1, 2, 3], np.uint32), np.array([0.5, 0.0, 3.25])),
    (np.array([], np.int64), None),
    ([], []),
])
def test_a_set_round_trips_through_its_bytes(keys, weights):
    k, w = decode_set(*encode_set(keys, weights), "trigger 0")
    assert k.dtype == np.int64 and w.dtype == np.float32 and k.flags.writeable
    assert k.tolist() == list(np.asarray(keys).tolist())
    assert w.tolist() == ([1.0] * len(k) if weights is None else np.asarray(weights, np.float32).tolist())


def test_weights_all_one_by_default_take_no_bytes():
    assert encode_set(np.arange(10))[1] is None


@pytest.mark.parametrize("keys, weights, error, match", [
    (np.zeros((2, 2), int), None, ValueError, r"1-d array of ints .* got shape \(2, 2\)"),
    ([1.0, 2.0], None, TypeError, "keys must be ints .* got dtype float64"),
    ([3, -2], None, ValueError, "from 0 up, got -2"),
    (np.array([2 ** 63], np.uint64), None, ValueError, "from 0 up, got 9223372036854775808"),
    ([1, 2], [1.0], ValueError, r"one value per key \(2\), got shape \(1,\)"),
    ([1, 2], [1.0, float("nan")], ValueError, r"finite and >= 0, got nan \(for key 2\)"),
    ([1, 2], [-1.0, 1.0], ValueError, r"finite and >= 0, got -1.0 \(for key 1\)"),
])
def test_a_bad_set_is_refused_saying_what_is_wrong(keys, weights, error, match):
    with pytest.raises(error, match=match):
        encode_set(keys, weights)


def test_a_damaged_set_is_refused():
    keys, weights, crc = encode_set([1, 2, 3])
    damaged = keys[:8] + bytes([keys[8] ^ 1]) + keys[9:]
    with pytest.raises(ValueError, match="trigger 4 of pipeline 2 is damaged"):
        decode_set(damaged, weights, crc, "trigger 4 of pipeline 2")


def test_as_json_takes_numpy_numbers_and_refuses_what_json_would_change():
    assert as_json({"counts": np.bincount([0, 1, 1]), "n": np.float32(0.5)}, "info", "x") == \
        '{"counts": [1, 2], "n": 0.5}'
    with pytest.raises(ValueError, match=r"x: info\['a'\]\[1\]\[2\] has a key that is not a str"):
        as_json({"a": [{}, {2: 1}]}, "info", "x")
    with pytest.raises(TypeError, match="x: config must be a dict .* got list"):
        as_json([1], "config", "x")
    with pytest.raises(ValueError, match="x: info must be JSON data .* holds object"):
        as_json({"f": object()}, "info", "x")


@pytest.mark.parametrize("ids, shown", [([], "none"), ([3], "3"), ([0, 1, 2, 4, 6, 7], "0-2, 4, 6-7")])
def test_listed_shows_ids_as_runs(ids, shown):
    assert listed(ids) == shown


# -- model states ---------------------------------------------------------------------------------


def test_a_model_state_round_trips_with_writable_arrays_of_its_dtypes():
    state = {"W0": np.arange(6, dtype=np.float32).reshape(2, 3), "b0": np.zeros(0, np.float64),
             "mask": np.array([True, False]), "ids": np.arange(3, dtype=np.uint16), "step": 12, "lr": 0.5,
             "scale": np.float32(2.0), "big": 2 ** 62, "done": True}
    back = decode_state(*encode_state(state), "the model of training 1")
    assert list(back) == list(state)
    for name, value in state.items():
        if isinstance(value, np.ndarray):
            assert back[name].dtype == value.dtype and back[name].shape == value.shape
            assert back[name].tolist() == value.tolist() and back[name].flags.writeable
        else:
            assert back[name] == value and type(back[name]) is type(value)
    back["W0"][0, 0] = 9.0  # writable, and its own: the blob is not changed under another reader
    assert decode_state(*encode_state(state), "x")["W0"][0, 0] == 0.0
    assert decode_state(*encode_state({}), "x") == {}


@pytest.mark.parametrize("state, match", [
    ([1, 2], r"model_state must be a dict of str names .* got list"),
    ({1: np.zeros(2)}, r"model_state has the name 1, which is not a str: use str names"),
    ({"w": [1.0]}, r"model_state\['w'\] is a list; a model state maps str names to numeric numpy arrays"),
    ({"w": np.array(["a"])}, r"model_state\['w'\] is an array of <U1"),
    ({"w": np.array([object()])}, r"model_state\['w'\] is an array of object"),
    ({"opt": {"lr": 0.1}}, r"model_state\['opt'\] is a dict; .* convert it"),
    ({"name": "mlp"}, r"model_state\['name'\] is a str"),
])
def test_a_model_state_that_is_not_names_to_arrays_and_numbers_is_refused(state, match):
    with pytest.raises(TypeError, match=r"^finish_training: " + match):
        encode_state(state)


def test_a_damaged_model_state_is_refused_naming_it():
    blob, crc = encode_state({"w": np.ones(4)})
    damaged = blob[:-1] + bytes([blob[-1] ^ 1])
    with pytest.raises(ValueError, match=r"^the model of training 3 in runs.db is damaged \(its CRC-32 does not "
                                         r"match\): the file was changed outside readerkit; train again"):
        decode_state(damaged, crc, "the model of training 3 in runs.db")
    with pytest.raises(ValueError, match=r"is damaged \(it does not decode\)"):
        decode_state(blob[:-8], zlib.crc32(blob[:-8]), "the model of training 3")
    listed_ = encode([np.ones(2)])
    with pytest.raises(ValueError, match=r"is damaged \(it holds a list\)"):
        decode_state(listed_, zlib.crc32(listed_), "the model of training 3")


def test_a_store_being_made_by_another_process_is_waited_for_when_opened_to_read(tmp_path, monkeypatch):
    path = str(tmp_path / "pipelines.db")
    sqlite3.connect(path).close()  # the file exists, empty, as just after the maker's connect
    reader, waiting, sleep = threading.current_thread(), threading.Event(), time.sleep

    def noted_sleep(seconds: float) -> None:
        if threading.current_thread() is reader:  # it found the file empty, and waits for its maker
            waiting.set()
        sleep(seconds)

    def make() -> None:
        if waiting.wait(HANG):
            open_store(path).close()

    monkeypatch.setattr(time, "sleep", noted_sleep)
    maker = threading.Thread(target=make, name="test-maker")
    maker.start()
    try:
        db = open_store(path, create=False)  # waits for the tables rather than calling the file "empty"
        assert db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        db.close()
    finally:
        waiting.set()
        maker.join()


def make_stores(paths, go):
    """Make each store in turn, once the test is watching for it (in a child process)."""
    for path in paths:
        if not go.wait(60):
            return
        go.clear()
        open_store(path).close()


def test_opening_to_read_a_store_another_process_is_making_never_finds_it_empty(tmp_path):
    # Regression: `pipeline status` run as `pipeline run` started was refused, "(it is empty)", in the moment
    # between the maker's connect, which makes the file, and its tables' commit. Without the wait most rounds fail.
    paths = [str(tmp_path / f"{i}.db") for i in range(10)]
    go = multiprocessing.get_context("spawn").Event()
    maker = multiprocessing.get_context("spawn").Process(target=make_stores, args=(paths, go))
    with started(maker):  # (a failed round leaves it waiting for its go: it is killed)
        for path in paths:
            go.set()
            while not os.path.exists(path):  # opened the moment it appears, as early as a reader can
                assert maker.is_alive(), f"the maker died with exit code {maker.exitcode}"
                time.sleep(0.0005)
            db = open_store(path, create=False)
            assert db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
            db.close()
        assert joined(maker, 60) == 0
