"""readers.continual.owners: one process runs a pipeline; claims of live, dead and far-away owners; heartbeats."""
import json
import multiprocessing
import os
import socket
import sqlite3
import time

import pytest

from readers.continual import owners
from readers.continual.owners import PipelineBusy
from readers.continual.store import PipelineStore
from tests.helpers.child_processes import joined
from tests.helpers.store_rows import set_row

WAIT = 60.0  # seconds: a bound for another process to show up or finish, never a measure of speed
HERE = socket.gethostname()


@pytest.fixture
def store(store_db):  # (each test on both backends: a sqlite file, and a PostgreSQL database)
    s = PipelineStore(store_db)
    yield s
    s.close()


def far_away(monkeypatch, store: PipelineStore, pipeline_id: int) -> None:
    """Have a process on another host claim the pipeline: this one, under another host name for the claim."""
    monkeypatch.setattr(owners.socket, "gethostname", lambda: "far-away")
    store.claim_pipeline(pipeline_id)
    monkeypatch.undo()
    assert socket.gethostname() == HERE


# -- jobs run in spawned processes (a spawned process imports what it runs) ---------------------


def hold(path: str, pipeline_id: int, claimed: "multiprocessing.synchronize.Event",
         stop: "multiprocessing.synchronize.Event") -> None:
    """Claim the pipeline and start a training; hold both until told to stop, then end without releasing."""
    store = PipelineStore(path, create=False)
    store.claim_pipeline(pipeline_id)
    store.start_training(pipeline_id, 0)
    claimed.set()
    if not stop.wait(WAIT):
        raise TimeoutError("never told to stop")
    store.close()


def claim_and_exit(path: str, pipeline_id: int) -> None:
    """Claim the pipeline, start a training and end, leaving both (a process that died)."""
    store = PipelineStore(path, create=False)
    store.claim_pipeline(pipeline_id)
    store.start_training(pipeline_id, 0)
    store.close()


# -- claims ------------------------------------------------------------------------------------


def test_a_claim_records_this_host_and_pid_and_may_be_made_again(store):
    p = store.register_pipeline({})
    before = time.time()
    store.claim_pipeline(p)
    got = store.pipeline(p)
    assert got["owner"] == f"{HERE}:{os.getpid()}" and before <= got["heartbeat"] <= time.time()
    set_row(store.path, p, heartbeat=before - 500)
    store.claim_pipeline(p)  # this process is no other: claimed again, heartbeat refreshed
    assert store.pipeline(p)["heartbeat"] >= before


def test_a_live_process_holding_the_pipeline_is_not_taken_over(store):
    p = store.register_pipeline({})
    store.add_trigger(p, 0, [1], position=1)
    spawn = multiprocessing.get_context("spawn")
    claimed, stop = spawn.Event(), spawn.Event()
    child = spawn.Process(target=hold, args=(store.path, p, claimed, stop))
    child.start()
    try:
        assert claimed.wait(WAIT), "the child never claimed the pipeline"
        with pytest.raises(PipelineBusy, match=rf"^claim_pipeline: pipeline {p} in .* is held by process "
                                               rf"{child.pid} on host '{HERE}', last seen \d+\.\d s ago; that process "
                                               rf"is alive and runs the pipeline: wait for it to end, or stop it "
                                               rf"first \(kill {child.pid}\); its lease runs out once 120 s unseen"
                           ) as refused:
            store.claim_pipeline(p)
        assert (refused.value.pipeline_id, refused.value.host, refused.value.pid) == (p, HERE, child.pid)
        with pytest.raises(ValueError, match=rf"mark_abandoned: this process \({HERE}:{os.getpid()}\) does not hold "
                                             rf"pipeline {p} in .* \(process {child.pid} on host '{HERE}' does\): "
                                             rf"call claim_pipeline\({p}\) first"):
            store.mark_abandoned(p)
        assert [t["status"] for t in store.trainings(p)] == ["running"]  # the live pipeline's training is left be
        assert store.release_pipeline(p) is False and store.pipeline(p)["owner"] == f"{HERE}:{child.pid}"
    finally:
        stop.set()
        assert joined(child, WAIT) == 0
    store.claim_pipeline(p)  # its process has ended: the claim is taken over
    assert store.mark_abandoned(p) == [1] and store.training(1)["error"] == "interrupted"


def test_the_claim_of_a_dead_process_of_this_host_is_taken_over(store):
    p = store.register_pipeline({})
    store.add_trigger(p, 0, [1], position=1)
    child = multiprocessing.get_context("spawn").Process(target=claim_and_exit, args=(store.path, p))
    child.start()
    assert joined(child, WAIT) == 0
    assert store.pipeline(p)["owner"] == f"{HERE}:{child.pid}"  # it never released it
    store.claim_pipeline(p)
    assert store.pipeline(p)["owner"] == f"{HERE}:{os.getpid()}"
    assert store.mark_abandoned(p) == [1]


def test_another_hosts_claim_holds_until_its_heartbeat_is_stale(store, monkeypatch):
    p = store.register_pipeline({})
    far_away(monkeypatch, store, p)
    assert store.pipeline(p)["owner"] == f"far-away:{os.getpid()}"  # the same pid on another host is another
    with pytest.raises(PipelineBusy, match=rf"^claim_pipeline: pipeline {p} in .* is held by process {os.getpid()} "
                                           r"on host 'far-away', last seen \d+\.\d s ago: wait for it to end, or stop "
                                           r"it; if it is dead, it counts as gone once 120 s unseen \(\d+ s more\)$"
                           ) as refused:
        store.claim_pipeline(p)
    assert refused.value.host == "far-away" and 0 <= refused.value.seen < 120
    set_row(store.path, p, heartbeat=time.time() - 50)  # its last write, 50 s ago
    with pytest.raises(PipelineBusy, match=r"last seen 5\d\.\d s ago: .* gone once 120 s unseen \(\d+ s more"):
        store.claim_pipeline(p)
    store.claim_pipeline(p, stale_after=30)  # 50 s unseen is dead enough for this caller
    assert store.pipeline(p)["owner"] == f"{HERE}:{os.getpid()}"


def test_another_hosts_claim_without_a_heartbeat_is_stale(store, monkeypatch):
    p = store.register_pipeline({})
    far_away(monkeypatch, store, p)
    set_row(store.path, p, heartbeat=None)
    store.claim_pipeline(p)
    assert store.pipeline(p)["owner"] == f"{HERE}:{os.getpid()}"


@pytest.mark.parametrize("stale_after", [0, -1.0, float("nan"), float("inf"), "120", True, None])
def test_stale_after_is_a_number_of_seconds(store, stale_after):
    p = store.register_pipeline({})
    with pytest.raises(ValueError, match=r"claim_pipeline: stale_after must be a finite number of seconds > 0 .* "
                                         rf"got {stale_after!r}"):
        store.claim_pipeline(p, stale_after=stale_after)
    assert store.pipeline(p)["owner"] is None
    with pytest.raises(ValueError, match=rf"owner_alive: stale_after must be a finite number .* got {stale_after!r}"):
        store.owner_alive(p, stale_after=stale_after)


def test_claims_name_an_unknown_pipeline(store):
    for call in (store.claim_pipeline, store.release_pipeline, store.mark_abandoned, store.heartbeat,
                 store.owner_alive):
        with pytest.raises(LookupError, match=rf"{call.__name__}: no pipeline 3 in .*\(its pipelines: none\)"):
            call(3)


def test_release_clears_only_this_processs_claim(store, monkeypatch):
    mine, theirs = store.register_pipeline({}), store.register_pipeline({})
    far_away(monkeypatch, store, theirs)
    store.claim_pipeline(mine)
    assert store.release_pipeline(mine) is True and store.release_pipeline(mine) is False
    assert (store.pipeline(mine)["owner"], store.pipeline(mine)["heartbeat"]) == (None, None)
    assert store.release_pipeline(theirs) is False and store.pipeline(theirs)["owner"] == f"far-away:{os.getpid()}"
    store.claim_pipeline(mine)  # released: free to claim
    assert store.pipeline(mine)["owner"] == f"{HERE}:{os.getpid()}"


# -- mark_abandoned ------------------------------------------------------------------------------


def test_mark_abandoned_needs_the_claim(store, monkeypatch):
    p = store.register_pipeline({})
    store.add_trigger(p, 0, [1], position=1)
    t = store.start_training(p, 0)
    with pytest.raises(ValueError, match=rf"does not hold pipeline {p} in .* \(no process does\): call "
                                         rf"claim_pipeline\({p}\) first, which is refused while another process runs"):
        store.mark_abandoned(p)
    far_away(monkeypatch, store, p)
    with pytest.raises(ValueError, match=rf"\(process {os.getpid()} on host 'far-away' does\)"):
        store.mark_abandoned(p)
    assert store.training(t)["status"] == "running"


def test_mark_abandoned_fails_only_the_pipelines_running_trainings(store):
    a, b = store.register_pipeline({}), store.register_pipeline({})
    for p in (a, b):
        store.add_trigger(p, 0, [1], position=1)
    done, left, other = store.start_training(a, 0), store.start_training(a, 0), store.start_training(b, 0)
    store.finish_training(done)
    store.claim_pipeline(a)
    assert store.mark_abandoned(a) == [left] and store.mark_abandoned(a) == []
    assert [store.training(t)["status"] for t in (done, left, other)] == ["finished", "failed", "running"]
    with pytest.raises(ValueError, match=rf"training {left} is failed already \(interrupted\)"):
        store.finish_training(left)  # the old process, still alive after all, is refused
    assert json.dumps(store.trainings()) and json.dumps(store.pipelines())  # every status is plain data


# -- heartbeats ----------------------------------------------------------------------------------


def _add_trigger(store, p, t):
    store.add_trigger(p, 1, [2], position=2)


WRITES = {
    "add_trigger": _add_trigger,
    "start_training": lambda store, p, t: store.start_training(p, 0),
    "update_training": lambda store, p, t: store.update_training(t, progress=0.5),
    "update_training()": lambda store, p, t: store.update_training(t),
    "finish_training": lambda store, p, t: store.finish_training(t, model_state={"step": 1}),
    "fail_training": lambda store, p, t: store.fail_training(t, "loss is nan"),
    "mark_abandoned": lambda store, p, t: store.mark_abandoned(p),
}


@pytest.mark.parametrize("write", list(WRITES))
def test_the_owners_writes_refresh_its_heartbeat(store, write):
    p = store.register_pipeline({})
    store.add_trigger(p, 0, [1], position=1)
    t = store.start_training(p, 0)
    store.claim_pipeline(p)
    old = time.time() - 500
    set_row(store.path, p, heartbeat=old)
    WRITES[write](store, p, t)
    assert store.pipeline(p)["heartbeat"] > old + 400


@pytest.mark.parametrize("write", [w for w in WRITES if w != "mark_abandoned"])
def test_another_processs_writes_leave_the_owners_heartbeat_alone(store, monkeypatch, write):
    p = store.register_pipeline({})
    store.add_trigger(p, 0, [1], position=1)
    t = store.start_training(p, 0)
    far_away(monkeypatch, store, p)
    set_row(store.path, p, heartbeat=123.0)
    WRITES[write](store, p, t)
    assert store.pipeline(p)["heartbeat"] == 123.0


class FailsAfterBeat(PipelineStore):
    """A store whose write fails (as on a full disk) just after the heartbeat, last in its transaction."""

    def _beat(self, db, pipeline_id):
        super()._beat(db, pipeline_id)
        raise sqlite3.OperationalError("database or disk is full")


def test_a_heartbeat_is_refreshed_in_the_writes_transaction(store):
    p = store.register_pipeline({})
    store.add_trigger(p, 0, [1], position=1)
    t = store.start_training(p, 0)
    store.claim_pipeline(p)
    set_row(store.path, p, heartbeat=123.0)
    with FailsAfterBeat(store.path, create=False) as failing:
        with pytest.raises(sqlite3.OperationalError, match="disk is full"):
            failing.add_trigger(p, 1, [2], position=2)
        with pytest.raises(sqlite3.OperationalError, match="disk is full"):
            failing.finish_training(t, model_state={"step": 1})
    assert store.pipeline(p)["heartbeat"] == 123.0 and store.triggers(p) == [0]
    assert store.training(t)["status"] == "running" and store.model_state(t) is None


def test_a_live_owner_of_this_host_is_refused_while_its_lease_runs_and_taken_over_after(store):
    # Regression (issue 31, 2): an owner of this host was judged by its pid alone, never by its lease, so a
    # heartbeat-less owner whose pid lived held the pipeline forever; the lease decides now, on every host
    p = store.register_pipeline({})
    set_row(store.path, p, owner=f"{HERE}:{os.getppid()}", heartbeat=time.time() - 10)  # our parent: alive, not us
    with pytest.raises(PipelineBusy, match=rf"held by process {os.getppid()} on host '{HERE}', last seen \d+\.\d s "
                                           rf"ago; that process is alive and runs the pipeline: wait for it to end"):
        store.claim_pipeline(p)
    store.claim_pipeline(p, stale_after=5)  # its lease ran out 5 s after its last heartbeat: alive or not, it is gone
    assert store.pipeline(p)["owner"] == f"{HERE}:{os.getpid()}"
    set_row(store.path, p, owner=f"{HERE}:{os.getppid()}", heartbeat=None)  # no heartbeat: no lease
    store.claim_pipeline(p)
    assert store.owner_alive(p) is True and store.pipeline(p)["owner"] == f"{HERE}:{os.getpid()}"


def test_heartbeat_refreshes_only_the_owners_claim(store):
    p = store.register_pipeline({})
    assert store.heartbeat(p) is False and store.pipeline(p)["heartbeat"] is None
    store.claim_pipeline(p)
    set_row(store.path, p, heartbeat=time.time() - 100)
    before = time.time()
    assert store.heartbeat(p) is True and before <= store.pipeline(p)["heartbeat"] <= time.time()
    set_row(store.path, p, owner="far-away:123", heartbeat=before - 100)
    assert store.heartbeat(p) is False and store.pipeline(p)["heartbeat"] == before - 100


def test_owner_alive_says_whether_a_running_training_can_still_end(store):
    p = store.register_pipeline({})
    assert store.owner_alive(p) is None
    store.claim_pipeline(p)
    assert store.owner_alive(p) is True
    set_row(store.path, p, owner=f"{HERE}:{2 ** 22 + 12345}")  # a pid no process has
    assert store.owner_alive(p) is False
    set_row(store.path, p, owner="far-away:123", heartbeat=time.time())
    assert store.owner_alive(p) is True
    set_row(store.path, p, heartbeat=time.time() - 500)
    assert store.owner_alive(p) is False and store.owner_alive(p, stale_after=1000) is True
