"""readers.continual.store: pipelines and trigger sets; crashes mid-trigger; other processes reading.

(Trainings and their models: test_store_trainings.py; claims and heartbeats: test_owners.py.)
"""
import multiprocessing
import os
import pickle
import signal
import sqlite3
import threading
import time

import numpy as np
import pytest

import readers
from readers.continual.store import PipelineBusy, PipelineStore, StoredSet
from readers.continual.trigger_sets import trigger_set
from readers.sources.in_memory import from_arrays
from readers.storage.sqlite import DamagedFile
from tests.helpers.child_processes import exit_codes, joined, started

WAIT = 60.0  # seconds: a bound for another process to show up or finish, never a measure of speed
SOURCE_N = 100_000


def set_of(trigger_id: int, n: int = 2000) -> np.ndarray:
    """Trigger ``trigger_id``'s keys in these tests: overlapping the sets before it, and known to every process."""
    return (np.arange(n, dtype=np.int64) * (trigger_id + 1) + 7 * trigger_id) % SOURCE_N


@pytest.fixture
def store(store_db):  # (each test on both backends: a sqlite file, and a PostgreSQL database)
    s = PipelineStore(store_db)
    yield s
    s.close()


# -- jobs run in spawned processes (a spawned process imports what it runs) ---------------------


class DiesMidTrigger(PipelineStore):
    """A store whose process is killed inside add_trigger's transaction, the set inserted but not committed."""

    def _insert_trigger(self, db, row):
        super()._insert_trigger(db, row)
        os.kill(os.getpid(), signal.SIGKILL)


def die_mid_trigger(path: str, pipeline_id: int) -> None:
    DiesMidTrigger(path).add_trigger(pipeline_id, 2, set_of(2), position=300)


class SaysMidTrigger(PipelineStore):
    """A store that sets ``inside`` in the middle of add_trigger's transaction for trigger 4, the set inserted but
    not committed, and goes on."""

    inside: "multiprocessing.synchronize.Event"

    def _insert_trigger(self, db, row):
        super()._insert_trigger(db, row)
        if row[1] == 4:  # (pipeline_id, trigger_id, ...)
            self.inside.set()


def write_until_killed(path: str, pipeline_id: int, inside: "multiprocessing.synchronize.Event") -> None:
    """Claim the pipeline, then trigger after trigger of 60,000 keys, a training on each, setting ``inside`` in
    trigger 4's transaction; stops by itself after WAIT (it is killed first)."""
    store, deadline = SaysMidTrigger(path), time.monotonic() + WAIT
    store.inside = inside
    store.claim_pipeline(pipeline_id)
    for t in range(10 ** 6):
        store.add_trigger(pipeline_id, t, set_of(t, 60_000), np.full(60_000, t + 1.0), position=1000 * t)
        store.update_training(store.start_training(pipeline_id, t), progress=0.5)
        if time.monotonic() > deadline:
            break


def write_while_read(path: str, pipeline_id: int, steps: int, ids: "multiprocessing.Queue",
                     halfway: "multiprocessing.synchronize.Event", seen: "multiprocessing.synchronize.Event") -> None:
    """Store triggers 0..steps while training on trigger 0, reporting progress; halfway, wait to be seen."""
    with PipelineStore(path) as store:
        store.add_trigger(pipeline_id, 0, set_of(0), position=0)
        training = store.start_training(pipeline_id, 0)
        ids.put(training)
        for t in range(1, steps + 1):
            store.add_trigger(pipeline_id, t, set_of(t), np.full(2000, float(t)), position=t)
            store.update_training(training, progress=t / steps, metrics={"step": t})
            if t == steps // 2:
                halfway.set()
                if not seen.wait(WAIT):
                    raise TimeoutError("the reader never saw the training halfway")
        store.finish_training(training, {"done": True})




# -- pipelines ------------------------------------------------------------------------------------


def test_pipelines_are_registered_with_their_config(store):
    before = time.time()
    a = store.register_pipeline({"model": "mlp", "lr": 0.1, "classes": [0, 1]})
    b = store.register_pipeline({"model": "cnn"})
    assert (a, b) == (1, 2)
    got = store.pipeline(a)
    assert got["config"] == {"model": "mlp", "lr": 0.1, "classes": [0, 1]} and before <= got["created"] <= time.time()
    assert [p["config"]["model"] for p in store.pipelines()] == ["mlp", "cnn"]
    assert (got["owner"], got["heartbeat"]) == (None, None)  # no process holds it until claim_pipeline
    with pytest.raises(LookupError, match=r"pipeline: no pipeline 9 in \S+ \(its pipelines: 1-2\)"):
        store.pipeline(9)


# -- triggers -------------------------------------------------------------------------------------


def test_a_trigger_round_trips_its_keys_weights_position_and_info(store):
    p = store.register_pipeline({})
    weights = np.linspace(0, 3, 2000)
    store.add_trigger(p, 0, set_of(0), position=500, time=12.5, info={"classes": {"0": np.int64(3)}, "note": "x"})
    store.add_trigger(p, 1, set_of(1).astype(np.int32), weights, position=900)
    keys, w, position, info = store.trigger(p, 0)
    assert keys.dtype == np.int64 and keys.tolist() == set_of(0).tolist()
    assert w.dtype == np.float32 and w.tolist() == [1.0] * 2000
    assert (position, info) == (500, {"classes": {"0": 3}, "note": "x"})
    second = store.trigger(p, 1)
    assert isinstance(second, StoredSet) and second.position == 900
    assert second.keys.tolist() == set_of(1).tolist() and second.weights.tolist() == weights.astype(np.float32).tolist()
    meta = store.trigger_meta(p, 0)
    assert {k: meta[k] for k in ("size", "weighted", "position", "time")} == {
        "size": 2000, "weighted": False, "position": 500, "time": 12.5}
    assert store.trigger_meta(p, 1)["weighted"] and store.trigger_meta(p, 1)["time"] is None


def test_sets_may_overlap_across_triggers(store):
    p = store.register_pipeline({})
    store.add_trigger(p, 0, [1, 2, 3], position=3)
    store.add_trigger(p, 1, [3, 4, 1, 1], position=5)  # keys of the set before, and a key twice
    assert [store.trigger(p, t).keys.tolist() for t in (0, 1)] == [[1, 2, 3], [3, 4, 1, 1]]


def test_an_empty_set_is_a_trigger_too(store):
    p = store.register_pipeline({})
    store.add_trigger(p, 0, [], position=0)
    assert store.trigger(p, 0).keys.tolist() == [] and store.last_trigger(p) == (0, 0)


@pytest.mark.parametrize("trigger_id, position, match", [
    (0, 30, r"has triggers 0-1, so the next trigger_id is 2, not 0 \(it is stored already, and a set is written"),
    (1, 30, r"next trigger_id is 2, not 1 \(it is stored already"),
    (3, 30, r"next trigger_id is 2, not 3 \(trigger ids go up by one from 0, with no gaps\)"),
    (2, 19, r"position 19 is before trigger 1's \(20\)"),
    (2, 20, r"position 20 is trigger 1's already; a trigger covers new samples, so give the stream's samples seen "
            r"at this trigger, more than 20"),
])
def test_trigger_ids_are_consecutive_and_positions_strictly_increase(store, trigger_id, position, match):
    p = store.register_pipeline({})
    store.add_trigger(p, 0, [1], position=10)
    store.add_trigger(p, 1, [2], position=20)
    with pytest.raises(ValueError, match=match):
        store.add_trigger(p, trigger_id, [9, 9], position=position)
    assert store.triggers(p) == [0, 1] and store.trigger(p, 1).keys.tolist() == [2]
    store.add_trigger(p, 2, [3], position=21)  # the refusal left no transaction open
    assert store.last_trigger(p) == (2, 21)


def test_a_triggers_time_never_goes_back_when_both_are_given(store):
    p = store.register_pipeline({})
    store.add_trigger(p, 0, [1], position=10, time=100.0)
    with pytest.raises(ValueError, match=r"add_trigger: time 99.5 is before trigger 0's \(100.0\); the stream's time "
                                         r"never goes back: give the time of the stream at this trigger"):
        store.add_trigger(p, 1, [2], position=20, time=99.5)
    assert store.triggers(p) == [0]
    store.add_trigger(p, 1, [2], position=20, time=100.0)  # the same time: a burst of samples at one moment
    store.add_trigger(p, 2, [3], position=30)  # no time: nothing to compare
    store.add_trigger(p, 3, [4], position=40, time=5.0)  # the last trigger has none: nothing to compare either
    assert [store.trigger_meta(p, t)["time"] for t in range(4)] == [100.0, 100.0, None, 5.0]


def test_each_pipeline_counts_its_own_triggers_from_zero(store):
    a, b = store.register_pipeline({}), store.register_pipeline({})
    with pytest.raises(ValueError, match="pipeline 1 has no triggers yet, so the next trigger_id is 0, not 1"):
        store.add_trigger(a, 1, [1], position=1)
    store.add_trigger(a, 0, [1], position=1)
    store.add_trigger(b, 0, [2], position=1)
    store.add_trigger(a, 1, [3], position=2)
    assert (store.triggers(a), store.triggers(b), store.last_trigger(b)) == ([0, 1], [0], (0, 1))
    assert store.last_trigger(store.register_pipeline({})) is None


def test_an_unknown_trigger_or_pipeline_is_named_with_what_exists(store):
    p = store.register_pipeline({})
    for t in range(3):
        store.add_trigger(p, t, [t], position=t)
    with pytest.raises(LookupError, match=r"trigger: pipeline 1 has no trigger 5 in .* \(its triggers: 0-2\)"):
        store.trigger(p, 5)
    with pytest.raises(LookupError, match=r"add_trigger: no pipeline 4 in .*\(its pipelines: 1\)$"):
        store.add_trigger(4, 0, [1], position=0)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"time": float("inf")}, ValueError, "time must be a finite number"),
    ({"info": {1: 2}}, ValueError, r"info\[1\] has a key that is not a str"),
    ({"info": "class counts"}, TypeError, "info must be a dict"),
    ({"position": -1}, ValueError, "position must be an int >= 0, got -1"),
])
def test_bad_trigger_metadata_is_refused_before_anything_is_written(store, kwargs, error, match):
    p = store.register_pipeline({})
    with pytest.raises(error, match=match):
        store.add_trigger(p, 0, [1], **{"position": 0, **kwargs})
    assert store.triggers(p) == []


def test_a_60000_key_set_writes_and_reads_back_whole(store):
    p = store.register_pipeline({})
    keys, weights = set_of(0, 60_000), np.random.default_rng(0).random(60_000)
    store.add_trigger(p, 0, keys, weights, position=60_000)
    back = store.trigger(p, 0)
    assert back.keys.tolist() == keys.tolist()


# -- crashes ----------------------------------------------------------------------------------------


def test_a_process_killed_mid_trigger_leaves_no_half_written_set(store):
    p = store.register_pipeline({})
    store.add_trigger(p, 0, set_of(0), position=100)
    store.add_trigger(p, 1, set_of(1), position=200)
    child = multiprocessing.get_context("spawn").Process(target=die_mid_trigger, args=(store.path, p))
    assert exit_codes([child], WAIT) == [-signal.SIGKILL]  # (None: it hung)
    assert store.triggers(p) == [0, 1] and store.last_trigger(p) == (1, 200)
    assert [store.trigger(p, t).keys.tolist() for t in (0, 1)] == [set_of(0).tolist(), set_of(1).tolist()]
    with PipelineStore(store.path) as again:  # a restarted pipeline goes on after the last complete trigger
        again.add_trigger(p, 2, set_of(2), position=300)
    assert store.trigger(p, 2).keys.tolist() == set_of(2).tolist()


def test_a_writer_killed_in_a_loop_leaves_whole_triggers_and_running_trainings(store):
    p = store.register_pipeline({})
    spawn = multiprocessing.get_context("spawn")
    inside = spawn.Event()
    writer = spawn.Process(target=write_until_killed, args=(store.path, p, inside))
    with started(writer):
        assert inside.wait(WAIT), "the writer never reached trigger 4"
        os.kill(writer.pid, signal.SIGKILL)  # inside trigger 4's transaction, most likely: it writes 720 kB
        writer.join(WAIT)
        assert writer.exitcode == -signal.SIGKILL
    ids = store.triggers(p)
    assert len(ids) >= 4 and ids == list(range(len(ids))) and store.last_trigger(p) == (ids[-1], 1000 * ids[-1])
    for t in ids:
        keys, weights, _, _ = store.trigger(p, t)
        assert keys.tolist() == set_of(t, 60_000).tolist() and set(weights.tolist()) == {t + 1.0}
    running = [t["training_id"] for t in store.trainings(p) if t["status"] == "running"]
    assert running and running == [t["training_id"] for t in store.trainings(p)][-len(running):]
    store.claim_pipeline(p)  # the killed writer's pid is dead: the claim is taken over
    assert store.mark_abandoned(p) == running and store.mark_abandoned(p) == []
    assert {(t["status"], t["error"]) for t in store.trainings(p)} == {("failed", "interrupted")}
    store.add_trigger(p, ids[-1] + 1, [1], position=1000 * ids[-1] + 1)


# -- other processes and threads ------------------------------------------------------------------


def test_another_process_reads_sets_and_a_trainings_status_while_one_writes(store):
    p, steps = store.register_pipeline({}), 40
    spawn = multiprocessing.get_context("spawn")
    ids, halfway, seen = spawn.Queue(), spawn.Event(), spawn.Event()
    source = from_arrays(np.arange(SOURCE_N) * 10)
    writer = spawn.Process(target=write_while_read, args=(store.path, p, steps, ids, halfway, seen))
    with started(writer):
        training = ids.get(timeout=WAIT)
        assert halfway.wait(WAIT), "the writer never got halfway"
        status = store.training(training)
        assert (status["status"], status["progress"], status["ended"]) == ("running", 0.5, None)
        assert status["metrics"]["step"] >= steps // 2
        seen.set()
        reads = 0
        while writer.is_alive() or reads == 0:  # every set read while the writer goes on is whole
            last, _ = store.last_trigger(p)
            r = trigger_set(store.path, p, last, source=source, weights=True)
            assert [int(x) for x, _ in r()] == (set_of(last) * 10).tolist()
            assert {float(w) for _, w in r()} == {float(last or 1)}
            reads += 1
            writer.join(0.01)
        assert joined(writer, WAIT) == 0
    status = store.training(training)
    assert (status["status"], status["progress"]) == ("finished", 1.0)
    assert status["metrics"] == {"step": steps, "done": True} and status["ended"] >= status["started"]
    assert store.last_trigger(p) == (steps, steps)


def test_one_writer_thread_and_reader_threads_share_a_store(store):
    p, errors = store.register_pipeline({}), []
    store.add_trigger(p, 0, set_of(0), position=0)

    def read():
        try:
            for _ in range(50):
                last, _ = store.last_trigger(p)
                assert store.trigger(p, last).keys.tolist() == set_of(last).tolist()
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    readers_ = [threading.Thread(target=read) for _ in range(3)]
    for t in readers_:
        t.start()
    for t in range(1, 30):
        store.add_trigger(p, t, set_of(t), position=t)
    for t in readers_:
        t.join(WAIT)
    assert errors == [] and store.last_trigger(p) == (29, 29)


def test_a_store_pickles_as_its_path_and_closes_once(store):
    p = store.register_pipeline({"k": 1})
    copy = pickle.loads(pickle.dumps(store))
    try:
        assert copy is not store and copy.path == store.path and copy.pipeline(p)["config"] == {"k": 1}
    finally:
        copy.close()
    copy.close()
    with pytest.raises(ValueError, match=r"the pipeline store \S+ is closed"):
        copy.triggers(p)


def test_a_pickled_store_opens_the_same_file_from_another_folder(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    with PipelineStore("runs.db") as store:
        pid = store.register_pipeline({"strategy": "all"})
        copy = pickle.dumps(store)
    monkeypatch.chdir(tmp_path / "b")
    with pickle.loads(copy) as again:
        assert [p["pipeline_id"] for p in again.pipelines()] == [pid]
    assert not (tmp_path / "b" / "runs.db").exists()


def test_the_store_module_and_readers_export_pipeline_busy():
    assert readers.PipelineBusy is PipelineBusy and issubclass(PipelineBusy, ValueError)
    assert "PipelineBusy" in readers.__all__


# -- a damaged store (issue 27, item 14) --------------------------------------------------------------------------


def _stored_training(path) -> None:
    with PipelineStore(path) as store:
        p = store.register_pipeline({"trigger": "every:2"})
        store.add_trigger(p, 0, np.arange(2), position=2)
        store.finish_training(store.start_training(p, 0), {"accuracy": 0.5})


def test_a_store_whose_trainings_table_was_dropped_is_refused_when_opened(tmp_path):
    # Regression (issue 27, 14): a dropped trainings table gave a raw sqlite3.OperationalError
    _stored_training(tmp_path / "runs.db")
    with sqlite3.connect(tmp_path / "runs.db") as db:
        db.execute("DROP TABLE trainings")
    with pytest.raises(DamagedFile, match=r"runs.db is damaged \(its table trainings is missing\): the file was "
                                          "changed outside readerkit; restore it from a copy, or give another file"):
        PipelineStore(tmp_path / "runs.db", create=False)


def test_a_table_dropped_under_an_open_store_is_refused_at_the_statement_that_meets_it(tmp_path):
    _stored_training(tmp_path / "runs.db")
    store = PipelineStore(tmp_path / "runs.db")
    with sqlite3.connect(tmp_path / "runs.db") as db:
        db.execute("DROP TABLE trainings")
    with pytest.raises(DamagedFile, match=r"runs.db is damaged \(no such table: trainings\)"):
        store.trainings(1)
    store.close()
    assert os.path.exists(tmp_path / "runs.db")  # what it holds cannot be computed again: never set aside


def test_a_store_with_a_damaged_page_is_refused_saying_so(tmp_path):
    _stored_training(tmp_path / "runs.db")
    with sqlite3.connect(tmp_path / "runs.db") as db:
        page = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'trainings'").fetchone()[0]
        size = db.execute("PRAGMA page_size").fetchone()[0]
    with open(tmp_path / "runs.db", "r+b") as file:
        file.seek((page - 1) * size)
        file.write(b"\xa5" * size)
    with PipelineStore(tmp_path / "runs.db", create=False) as store, \
            pytest.raises(DamagedFile, match=r"runs.db is damaged \(database disk image is malformed\): the file was "
                                             "changed outside readerkit"):
        store.trainings(1)
