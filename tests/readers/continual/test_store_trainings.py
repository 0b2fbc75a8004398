"""readers.continual.store, its trainings: a training's status, progress and metrics; its model, stored as it finishes."""
import multiprocessing
import os
import signal
import sqlite3

import numpy as np
import pytest

from readers.continual.store import PipelineStore
from tests.helpers.child_processes import exit_codes
from tests.helpers.store_rows import execute, is_postgres

WAIT = 60.0  # seconds: a bound for another process to finish, never a measure of speed


@pytest.fixture
def store(store_db):  # (each test on both backends: a sqlite file, and a PostgreSQL database)
    s = PipelineStore(store_db)
    yield s
    s.close()


def model(seed: int = 0) -> dict:
    """A model's state_dict() as the models in train give it: arrays of parameters, a step count."""
    rng = np.random.default_rng(seed)
    return {"W0": rng.standard_normal((4, 3)).astype(np.float32), "b0": np.zeros(3, np.float32),
            "m.W0": rng.standard_normal((4, 3)), "step": 40 + seed, "lr": 0.01}


def same(a: dict, b: dict) -> bool:
    return list(a) == list(b) and all(np.array_equal(a[k], b[k]) and np.asarray(a[k]).dtype == np.asarray(b[k]).dtype
                                      for k in a)


class DiesMidFinish(PipelineStore):
    """A store whose process is killed inside finish_training's transaction, the status and model written but
    not committed."""

    def _insert_model(self, db, training_id, blob, crc):
        super()._insert_model(db, training_id, blob, crc)
        os.kill(os.getpid(), signal.SIGKILL)


def die_mid_finish(path: str, training_id: int) -> None:
    DiesMidFinish(path, create=False).finish_training(training_id, {"accuracy": 1.0}, model_state=model())


class FailsMidFinish(PipelineStore):
    """A store whose model cannot be written (as on a full disk) after the status has changed."""

    def _insert_model(self, db, training_id, blob, crc):
        super()._insert_model(db, training_id, blob, crc)
        raise sqlite3.OperationalError("database or disk is full")


def trained(store: PipelineStore, triggers: int = 1) -> int:
    """A new pipeline with ``triggers`` stored sets; its id."""
    p = store.register_pipeline({})
    for t in range(triggers):
        store.add_trigger(p, t, [t], position=t + 1)
    return p


def test_a_training_runs_then_finishes_or_fails_and_then_no_longer_changes(store):
    p = store.register_pipeline({})
    store.add_trigger(p, 0, [1, 2], position=2)
    a = store.start_training(p, 0)
    got = store.training(a)
    assert {k: got[k] for k in ("training_id", "pipeline_id", "trigger_id", "status", "progress", "metrics",
                                "ended", "error")} == {"training_id": a, "pipeline_id": p, "trigger_id": 0,
                                                       "status": "running", "progress": 0.0, "metrics": {},
                                                       "ended": None, "error": None}
    store.update_training(a, progress={"step": 3, "steps": 10}, metrics={"loss": np.float32(0.5), "lr": 0.1})
    store.update_training(a, metrics={"loss": 0.25})
    store.finish_training(a, {"accuracy": 0.75})
    got = store.training(a)
    assert (got["status"], got["progress"], got["metrics"]) == (
        "finished", {"step": 3, "steps": 10}, {"loss": 0.25, "lr": 0.1, "accuracy": 0.75})
    assert got["ended"] >= got["started"]
    with pytest.raises(ValueError, match=f"update_training: training {a} is finished already; only a running"):
        store.update_training(a, progress=1.0)
    b = store.start_training(p, 0)
    store.fail_training(b, "CUDA out of memory")
    assert (store.training(b)["status"], store.training(b)["error"]) == ("failed", "CUDA out of memory")
    assert [t["training_id"] for t in store.trainings(p)] == [a, b] == [t["training_id"] for t in store.trainings()]


@pytest.mark.parametrize("progress", [1.5, -0.1, True, "half"])
def test_progress_is_a_fraction_or_a_dict(store, progress):
    p = store.register_pipeline({})
    store.add_trigger(p, 0, [1], position=1)
    t = store.start_training(p, 0)
    with pytest.raises(ValueError, match="progress must be a float from 0 to 1 or a dict"):
        store.update_training(t, progress=progress)
    assert store.training(t)["progress"] == 0.0


def test_a_training_needs_a_stored_trigger_and_an_unknown_training_is_named(store):
    p = store.register_pipeline({})
    with pytest.raises(LookupError, match=r"start_training: pipeline 1 has no trigger 0 .*\(its triggers: none\)"):
        store.start_training(p, 0)
    with pytest.raises(LookupError, match=r"update_training: no training 3 in .* \(its trainings: none\)$"):
        store.update_training(3, progress=0.1)
    with pytest.raises(LookupError, match="training: no training 3"):
        store.training(3)


@pytest.mark.parametrize("state", [model(), {}, {"step": 0}, {"w": np.zeros((0, 5), np.float16)}])
def test_a_finished_trainings_model_reads_back_whole_and_writable(store, state):
    p = trained(store)
    t = store.start_training(p, 0)
    store.finish_training(t, {"accuracy": 0.5}, model_state=state)
    back = store.model_state(t)
    assert same(back, state) and store.training(t)["status"] == "finished"
    for value in back.values():
        if isinstance(value, np.ndarray):
            assert value.flags.writeable
    with PipelineStore(store.path, create=False) as other:  # another process's view: the file
        assert same(other.model_state(t), state)


def test_model_state_is_none_without_one_and_refused_for_an_unknown_training(store):
    p = trained(store)
    running, plain, failed = (store.start_training(p, 0) for _ in range(3))
    store.finish_training(plain, {"accuracy": 0.5})
    store.fail_training(failed, "loss is nan")
    assert [store.model_state(t) for t in (running, plain, failed)] == [None, None, None]
    with pytest.raises(LookupError, match=r"model_state: no training 9 in \S+ \(its trainings: 1-3\)$"):
        store.model_state(9)


@pytest.mark.parametrize("state, match", [
    ({"w": [1.0, 2.0]}, r"finish_training: model_state\['w'\] is a list"),
    ("weights.npz", "finish_training: model_state must be a dict"),
])
def test_a_model_state_that_cannot_be_stored_leaves_the_training_running(store, state, match):
    p = trained(store)
    t = store.start_training(p, 0)
    with pytest.raises(TypeError, match=match):
        store.finish_training(t, {"accuracy": 1.0}, model_state=state)
    assert (store.training(t)["status"], store.training(t)["metrics"], store.model_state(t)) == ("running", {}, None)
    store.finish_training(t, model_state={"w": np.ones(2)})
    assert store.model_state(t)["w"].tolist() == [1.0, 1.0]


def test_a_model_state_is_not_stored_for_a_training_that_ended_already(store):
    p = trained(store)
    t = store.start_training(p, 0)
    store.fail_training(t, "interrupted")
    with pytest.raises(ValueError, match=f"finish_training: training {t} is failed already"):
        store.finish_training(t, model_state=model())
    assert store.model_state(t) is None


def test_a_model_that_fails_to_write_leaves_the_training_running(tmp_path):
    with FailsMidFinish(tmp_path / "p.db") as store:
        p = trained(store)
        t = store.start_training(p, 0)
        with pytest.raises(sqlite3.OperationalError, match="disk is full"):
            store.finish_training(t, {"accuracy": 1.0}, model_state=model())
        assert (store.training(t)["status"], store.training(t)["ended"], store.model_state(t)) == ("running", None, None)


def test_a_process_killed_mid_finish_leaves_the_training_running_without_a_model(store):
    p = trained(store)
    t = store.start_training(p, 0)
    child = multiprocessing.get_context("spawn").Process(target=die_mid_finish, args=(store.path, t))
    assert exit_codes([child], WAIT) == [-signal.SIGKILL]  # (None: it hung)
    got = store.training(t)
    assert (got["status"], got["metrics"], store.model_state(t)) == ("running", {}, None)
    store.finish_training(t, {"accuracy": 1.0}, model_state=model(1))  # a restarted pipeline finishes it whole
    assert same(store.model_state(t), model(1))


def flip_last_byte(db, t: int) -> None:
    blob, = execute(db, "SELECT state FROM models WHERE training_id = ?", (t,))[0]
    execute(db, "UPDATE models SET state = ? WHERE training_id = ?", (bytes(blob[:-1]) + bytes([blob[-1] ^ 1]), t))


def as_text(db, t: int) -> None:  # (|| makes text of a blob; a PostgreSQL bytea column holds bytes only)
    if is_postgres(db):
        pytest.skip("a bytea column cannot be made to hold text")
    execute(db, "UPDATE models SET state = substr(state, 1, length(state) - 1) || x'01' WHERE training_id = ?", (t,))


@pytest.mark.parametrize("damage", [flip_last_byte, as_text])
def test_a_damaged_model_is_refused_naming_the_training_and_the_file(store, damage):
    p = trained(store)
    t = store.start_training(p, 0)
    store.finish_training(t, model_state=model())
    damage(store.path, t)  # changed outside readerkit
    with pytest.raises(ValueError, match=rf"^the model of training {t} in \S+ is damaged \(its CRC-32 "
                                         r"does not match\): the file was changed outside readerkit"):
        store.model_state(t)


def test_last_finished_is_the_finished_training_on_the_latest_trigger(store):
    p, other = trained(store, 3), trained(store, 3)
    assert store.last_finished(p) is None
    on_2 = store.start_training(p, 2)
    on_1 = store.start_training(p, 1)
    store.finish_training(on_1)
    assert store.last_finished(p)["training_id"] == on_1  # the one on trigger 2 still runs
    store.finish_training(on_2, {"accuracy": 0.8})
    store.finish_training(store.start_training(p, 0))  # finished last, but on an earlier trigger
    store.fail_training(store.start_training(p, 2), "loss is nan")
    store.start_training(p, 2)  # running
    store.finish_training(store.start_training(other, 2))
    got = store.last_finished(p)
    assert got == store.training(on_2) and (got["trigger_id"], got["metrics"]) == (2, {"accuracy": 0.8})


def test_last_finished_takes_the_last_training_on_a_tie_and_names_an_unknown_pipeline(store):
    p = trained(store, 2)
    first, second = store.start_training(p, 1), store.start_training(p, 1)
    store.finish_training(second)
    store.finish_training(first)  # finished later, but started first
    assert store.last_finished(p)["training_id"] == second
    with pytest.raises(LookupError, match=r"last_finished: no pipeline 7 in .* \(its pipelines: 1\)"):
        store.last_finished(7)


def test_keep_models_keeps_the_latest_in_the_finishing_transaction(store):
    p, q = trained(store, 4), trained(store, 1)
    other = store.start_training(q, 0)
    store.finish_training(other, model_state=model(9))
    ids = []
    for t in range(4):
        ids.append(store.start_training(p, t))
        store.finish_training(ids[-1], model_state=model(t), keep_models=2)
    assert [store.model_state(i) is None for i in ids] == [True, True, False, False]
    assert same(store.model_state(ids[-1]), model(3)) and same(store.model_state(other), model(9))  # q's untouched
    assert store.drop_models(p, keep=1) == 1 and store.model_state(ids[2]) is None
    assert store.drop_models(p, keep=1) == 0 and store.drop_models(p, keep=0) == 1
    with pytest.raises(ValueError, match="keep_models must be an int >= 1"):
        store.finish_training(store.start_training(p, 3), model_state=model(), keep_models=0)
    with pytest.raises(ValueError, match="drop_models: keep must be an int >= 0"):
        store.drop_models(p, keep=-1)
    with pytest.raises(LookupError, match=r"drop_models: no pipeline 7 in .* \(its pipelines: 1-2\)$"):
        store.drop_models(7)


class CommitInterrupted:
    """A connection whose next COMMIT is interrupted (as by Ctrl-C arriving there)."""

    def __init__(self, db):
        self.db, self.armed = db, False

    def execute(self, sql, *args, **kwargs):
        if sql == "COMMIT" and self.armed:
            self.armed = False
            raise KeyboardInterrupt
        return self.db.execute(sql, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.db, name)


def test_an_interrupt_at_commit_leaves_no_transaction_open(store):
    p = trained(store)
    t = store.start_training(p, 0)
    database = store._db
    database._connection = connection = CommitInterrupted(database._connection)
    connection.armed = True
    with pytest.raises(KeyboardInterrupt):
        store.update_training(t, progress=0.5)
    db = connection.db
    assert not (db.in_transaction if isinstance(db, sqlite3.Connection) else db.info.transaction_status)
    store.fail_training(t, "interrupted")  # the next call works: the interrupted one was rolled back
    assert store.training(t)["status"] == "failed" and store.training(t)["progress"] == 0.0
