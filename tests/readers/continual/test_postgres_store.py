"""readers.PipelineStore on PostgreSQL: the database's marks, addresses and passwords (never shown), pickling,
psycopg missing, a server that cannot be reached, the server's clock, and racing writers. (Everything the sqlite
store does, the parametrised modules beside this one run on both backends.)"""
import multiprocessing
import pickle

import numpy as np
import pytest

import readers
from readers.continual.schema import SCHEMA, NotAPipelineStore
from readers.continual.store import PipelineStore
from readers.storage import postgres
from readers.storage.postgres import StoreUnreachable
from readers.storage.sqlite import DamagedFile
from tests.helpers.child_processes import joined
from tests.helpers.postgres_server import PASSWORD
from tests.helpers.store_rows import execute

WAIT = 60.0  # seconds: a bound for another process to finish, never a measure of speed


@pytest.fixture
def url(postgres_server):
    return postgres_server.database()


@pytest.fixture
def secret_url(postgres_server):
    """A database of the role that must give a password, as its URL (no password in it)."""
    return postgres_server.database("secretive").replace("readerkit@", "secretive@")


def test_a_new_database_gets_the_tables_and_marks_and_opens_again(url):
    with PipelineStore(url) as store:
        store.register_pipeline({"k": 1})
    assert dict(execute(url, "SELECT key, value FROM readerkit_meta")) == {
        "application": "readerkit pipeline store", "schema": str(SCHEMA)}
    types = dict(execute(url, "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = "
                              "'triggers'"))
    assert (types["keys"], types["crc"], types["time"]) == ("bytea", "bigint", "double precision")
    with PipelineStore(url, create=False) as again:
        assert again.pipelines()[0]["config"] == {"k": 1}


def test_a_crc_above_2_to_the_31_is_stored(url):
    # (CRC-32s pass PostgreSQL's INTEGER: the column is a BIGINT)
    keys = next(k for k in ([i] for i in range(1000)) if readers.storage.sqlite.blob_crc(np.int64(k).tobytes()) > 2**31)
    with PipelineStore(url) as store:
        store.add_trigger(store.register_pipeline({}), 0, keys, position=1)
        assert store.trigger(1, 0).keys.tolist() == keys


@pytest.mark.parametrize("make, reason", [
    ("CREATE TABLE notes (text TEXT)", "it holds other tables"),
    ("CREATE TABLE readerkit_meta (key TEXT PRIMARY KEY, value TEXT); INSERT INTO readerkit_meta VALUES "
     "('application', 'something else')", "it is another program's database"),
])
def test_a_database_holding_other_tables_or_anothers_marks_is_refused_and_left_as_it_was(url, make, reason):
    for statement in make.split("; "):
        execute(url, statement)
    with pytest.raises(NotAPipelineStore, match=rf"^postgresql://127.0.0.1:\d+/\w+ is not a readerkit pipeline store "
                                                rf"\({reason}\)"):
        PipelineStore(url)
    assert "pipelines" not in {t for t, in execute(url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}


def test_another_schema_version_and_an_empty_database_opened_to_read_are_refused(url):
    with pytest.raises(NotAPipelineStore, match=r"\(it is empty\)"):
        PipelineStore(url, create=False)
    PipelineStore(url).close()
    execute(url, "UPDATE readerkit_meta SET value = '9' WHERE key = 'schema'")
    with pytest.raises(NotAPipelineStore, match=rf"made by another version of readerkit: schema 9, and this one "
                                                rf"reads {SCHEMA}"):
        PipelineStore(url)


def test_a_table_dropped_is_refused_as_damage(url):
    PipelineStore(url).close()
    execute(url, "DROP TABLE models")
    with pytest.raises(DamagedFile, match=r"is damaged \(its table models is missing\)"):
        PipelineStore(url, create=False)


def test_a_password_from_pgpassword_works_and_is_in_no_repr_message_or_pickle(secret_url, monkeypatch):
    monkeypatch.delenv("PGPASSWORD", raising=False)
    with pytest.raises(StoreUnreachable, match=r"cannot reach the PostgreSQL store postgresql://127.0.0.1:\d+/\w+ "
                                               r"\(.*password.*\): start the server, or check the address"):
        PipelineStore(secret_url)
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    with PipelineStore(secret_url) as store:
        p = store.register_pipeline({})
        assert repr(store) == f"PipelineStore({secret_url!r})" and PASSWORD not in pickle.dumps(store).decode("latin1")
        with pickle.loads(pickle.dumps(store)) as copy:  # (the worker finds the password where this process did)
            assert copy.pipeline(p)["pipeline_id"] == p


def test_a_password_in_the_url_is_redacted_everywhere_but_kept_for_a_pickled_copy(secret_url, monkeypatch):
    # Regression (issue 31, 1): the store named its address, a path, in every repr and message
    monkeypatch.delenv("PGPASSWORD", raising=False)
    with_password = secret_url.replace("secretive@", f"secretive:{PASSWORD}@")
    with PipelineStore(with_password) as store:
        assert repr(store) == f"PipelineStore({secret_url.replace('secretive@', 'secretive:***@')!r})"
        assert PASSWORD not in store.path
        with pytest.raises(LookupError) as missing:
            store.pipeline(3)
        assert PASSWORD not in str(missing.value)
        with pickle.loads(pickle.dumps(store)) as copy:  # (the password travels in the pickled state)
            assert copy.pipelines() == []
    with pytest.raises(StoreUnreachable) as refused:
        PipelineStore(secret_url.replace("secretive@", "secretive:wrong-one@"))
    assert "wrong-one" not in str(refused.value) and "password authentication failed" in str(refused.value)


def test_heartbeats_are_on_the_servers_clock(url, monkeypatch):
    with PipelineStore(url) as store:
        p = store.register_pipeline({})
        store.claim_pipeline(p)
        monkeypatch.setattr(postgres.time, "time", lambda: 0.0)  # this host's clock, wrong by 56 years
        assert store.heartbeat(p) and store.owner_alive(p) is True
        server_now, = execute(url, "SELECT EXTRACT(EPOCH FROM now())::float8")[0]
        assert abs(store.pipeline(p)["heartbeat"] - server_now) < 3600


def add_triggers(url: str, pipeline_id: int, first: int, count: int, results) -> None:
    """Add triggers from ``first`` on, each the next id, skipping the ones another writer took."""
    added = 0
    with PipelineStore(url, create=False) as store:
        for _ in range(4 * count):
            last = store.last_trigger(pipeline_id)
            t = 0 if last is None else last[0] + 1
            try:
                store.add_trigger(pipeline_id, t, [first], position=t + 1)
                added += 1
            except ValueError:  # the other writer took that id between the read and the write: read again
                continue
            if added == count:
                break
    results.put(added)


def test_writers_of_two_processes_serialise_and_never_store_a_trigger_twice(url):
    with PipelineStore(url) as store:
        p = store.register_pipeline({})
    spawn = multiprocessing.get_context("spawn")
    results = spawn.Queue()
    writers = [spawn.Process(target=add_triggers, args=(url, p, k, 15, results)) for k in (0, 1)]
    for w in writers:
        w.start()
    assert [joined(w, WAIT) for w in writers] == [0, 0]
    added = results.get(timeout=WAIT) + results.get(timeout=WAIT)
    with PipelineStore(url) as store:
        assert store.triggers(p) == list(range(added)) and added == 30
        assert [store.trigger(p, t).position for t in range(added)] == list(range(1, added + 1))
