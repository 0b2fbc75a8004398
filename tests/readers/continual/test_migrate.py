"""readers.continual.migrate and `pipeline migrate`: a store copied whole, ids, blobs and CRCs as they are, either way."""
import numpy as np
import pytest
from click.testing import CliRunner

import cli
import readers
from readers.continual.migrate import migrate_store
from readers.continual.schema import COLUMNS
from readers.continual.store import PipelineStore
from tests.helpers.store_rows import execute


def filled(db: str) -> None:
    """Two pipelines (the first with a gap in its training ids), weighted and plain sets, trainings of every
    status, models kept and dropped."""
    with PipelineStore(db) as store:
        a, b = store.register_pipeline({"strategy": "gdumb:4"}), store.register_pipeline({"strategy": "all"})
        store.add_trigger(a, 0, [5, 1, 7], position=10, time=86400.0, info={"classes": {"0": 3}})
        store.add_trigger(a, 1, [7, 2], [0.5, 2.0], position=20)
        store.add_trigger(b, 0, np.arange(1000) * 3, position=1000)
        done = store.start_training(a, 0)
        store.update_training(done, progress={"step": 3, "steps": 3}, metrics={"loss": 0.25})
        store.finish_training(done, {"accuracy": 0.5}, model_state={"w": np.eye(3, dtype=np.float32), "step": 3})
        store.fail_training(store.start_training(b, 0), "loss is nan")
        last = store.start_training(a, 1)
        store.finish_training(last, model_state={"w": np.ones(3), "step": 9}, keep_models=1)
        store.claim_pipeline(b)
        store.release_pipeline(b)
        store.claim_pipeline(a)  # held by this process, alive: copied as it is (a stopped pipeline's owner is too)


def rows(db: str) -> dict:
    return {table: [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)
                    for row in execute(db, f"SELECT {', '.join(columns)} FROM {table} ORDER BY {columns[0]}")]
            for table, columns in COLUMNS.items()}


def test_a_round_trip_sqlite_postgres_sqlite_keeps_every_row_and_the_sets_read_back_equal(tmp_path, postgres_server,
                                                                                           monkeypatch):
    from readers.continual import migrate
    monkeypatch.setattr(migrate.PipelineStore, "lease", lambda self, p, **kw: None)  # (this process holds one)
    first, url, back = str(tmp_path / "a.db"), postgres_server.database(), str(tmp_path / "b.db")
    filled(first)
    assert migrate_store(first, url) == {"pipelines": 2, "triggers": 3, "trainings": 3, "models": 1}
    migrate_store(url, back)
    assert rows(first) == rows(url) == rows(back) and rows(back)["triggers"][2][3] is not None
    source = readers.from_arrays(np.arange(3000) * 10)
    for db in (url, back):
        for p, t in ((1, 0), (1, 1), (2, 0)):
            original = readers.trigger_set(first, p, t, source=source, weights=True)
            copied = readers.trigger_set(db, p, t, source=source, weights=True)
            assert [tuple(map(float, e)) for e in copied()] == [tuple(map(float, e)) for e in original()]
        with PipelineStore(db, create=False) as store:  # ids go on after the copied ones; models read back
            assert store.model_state(3)["step"] == 9 and store.register_pipeline({}) == 3
            assert store.start_training(1, 1) == 4


def test_a_store_held_by_a_live_process_or_a_destination_not_empty_is_refused(tmp_path, store_db):
    filled(str(tmp_path / "a.db"))
    with pytest.raises(ValueError, match=r"^pipeline migrate: pipeline 1 of .*a.db is held by process \d+ on host "
                                         r"'.*', which runs it: stop it first"):
        migrate_store(str(tmp_path / "a.db"), store_db)
    with PipelineStore(tmp_path / "a.db") as store:
        store.release_pipeline(1)
    with PipelineStore(store_db) as store:
        store.register_pipeline({})
    with pytest.raises(ValueError, match=r"^pipeline migrate: the destination \S+ is not empty \(it holds 1 pipeline, "
                                         r"0 triggers, 0 trainings, 0 models\): give an empty store"):
        migrate_store(str(tmp_path / "a.db"), store_db)
    assert len(rows(store_db)["pipelines"]) == 1


def test_pipeline_migrate_copies_and_names_what_it_copied(tmp_path, postgres_server):
    filled(str(tmp_path / "a.db"))
    with PipelineStore(tmp_path / "a.db") as store:
        store.release_pipeline(1)
    url = postgres_server.database()
    result = CliRunner().invoke(cli.main, ["pipeline", "migrate", "--from", str(tmp_path / "a.db"), "--to", url])
    assert result.exit_code == 0, result.output
    assert result.output == f"copied 2 pipelines, 3 triggers, 3 trainings, 1 models into {url}\n"
    again = CliRunner().invoke(cli.main, ["pipeline", "migrate", "--from", str(tmp_path / "a.db"), "--to", url])
    assert again.exit_code == 1 and again.output.startswith("Error: pipeline migrate: the destination postgresql://")
    missing = CliRunner().invoke(cli.main, ["pipeline", "migrate", "--from", str(tmp_path / "no.db"), "--to", url])
    assert missing.exit_code == 1 and "no pipeline store at --from" in missing.output
