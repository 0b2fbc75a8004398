"""run_pipeline against each store backend (sqlite, a real PostgreSQL server): a killed supervisor resumed from another
process, two supervisors racing for one pipeline, the lease kept through a long training, a server restart."""
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from readers import PipelineBusy, PipelineStore
from readers.storage.postgres import StoreUnreachable
from tests.helpers import paths as _paths
from tests.helpers.child_processes import joined
from tests.helpers.continual_data import blobs, softmax
from train.continual import supervisor
from train.continual.supervisor import run_pipeline

ROOT = str(_paths.ROOT)
WAIT = 60.0  # seconds: a bound for another process to show up or finish, never a measure of speed
OPTIONS = {"min_steps": 30, "batch_size": 16}


def run(db, resume=None, **options):
    stream, test, source = blobs(per_task=80)
    return run_pipeline(stream, "time:86400", "new:0.5", softmax(), db=db, test=test, source=source, resume=resume,
                        **{**OPTIONS, **options})


def final_model(db) -> dict:
    with PipelineStore(db, create=False) as store:
        return store.model_state(store.last_finished(1)["training_id"])


def same_models(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The records and final model of the pipeline run whole, on sqlite (the backends store the same bytes)."""
    db = str(tmp_path_factory.mktemp("whole") / "runs.db")
    return run(db), final_model(db)


def test_a_supervisor_killed_mid_training_resumes_bit_identically_from_another_process(store_db, uninterrupted):
    script = textwrap.dedent(f"""
        import os, signal
        from tests.helpers.continual_data import blobs, softmax
        from tests.train.continual.test_supervisor_store import run
        def die(event):
            if type(event).__name__ == "EndIteration" and die.passes == 2 and event.batch_id == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            if type(event).__name__ == "EndPass":
                die.passes += 1
        die.passes = 0
        run({store_db!r}, event_handler=die)
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == -signal.SIGKILL, out.stderr
    with PipelineStore(store_db, create=False) as store:
        assert [t["status"] for t in store.trainings(1)][-1] == "running"
    resumed = run(store_db, resume=1)  # this process: not the one that held the pipeline, whose pid is gone
    records, model = uninterrupted
    assert [r["accuracies"] for r in resumed] == [r["accuracies"] for r in records][-len(resumed):]
    assert same_models(final_model(store_db), model)


def race(db: str, barrier, results, done) -> None:
    """Resume pipeline 1 at the barrier; the winner says so and holds the pipeline until ``done``."""
    def won(pipeline_id):
        results.put("won")
        if not done.wait(WAIT):
            raise TimeoutError("never told to go on")

    barrier.wait(WAIT)
    try:
        run(db, resume=1, on_start=won)
    except PipelineBusy as exc:
        results.put(f"busy: {exc}")


def test_two_supervisors_racing_for_one_pipeline_one_wins_and_the_other_is_refused(store_db):
    run(store_db)
    spawn = multiprocessing.get_context("spawn")
    barrier, results, done = spawn.Barrier(2), spawn.Queue(), spawn.Event()
    children = [spawn.Process(target=race, args=(store_db, barrier, results, done)) for _ in range(2)]
    for child in children:
        child.start()
    try:
        got = sorted(results.get(timeout=WAIT)[:4] for _ in children)
    finally:
        done.set()
        codes = [joined(child, WAIT) for child in children]
    assert got == ["busy", "won"] and codes == [0, 0]


def try_claim(db: str, stale_after: float) -> str:
    code = f"""
from readers import PipelineBusy, PipelineStore
with PipelineStore({db!r}, create=False) as store:
    try:
        store.claim_pipeline(1, stale_after={stale_after})
        print("claimed")
    except PipelineBusy:
        print("busy")
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=WAIT)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_a_live_supervisor_keeps_its_lease_through_a_long_training(store_db, monkeypatch):
    # Regression (issue 31, 2): the lease was refreshed by the store's writes alone, so a training that wrote
    # nothing for stale_after seconds lost its pipeline to another host; a thread beats every LEASE_S / 4 now
    monkeypatch.setattr(supervisor, "LEASE_S", 1.0)
    seen = []

    def stall(event):  # a long step: no write for 1.6 leases, then another process tries to claim
        if type(event).__name__ == "EndIteration" and not seen:
            time.sleep(1.6)
            seen.append(try_claim(store_db, 1.0))

    run(store_db, event_handler=stall)
    assert seen == ["busy"]


class RestartsMidTrigger(PipelineStore):
    """A store whose server restarts inside trigger 1's transaction, the set inserted but not committed."""

    server = None

    def _insert_trigger(self, db, row):
        super()._insert_trigger(db, row)
        if row[1] == 1:
            self.server.restart()


def test_a_server_restart_mid_run_reconnects_or_fails_clearly_and_resumes_bit_identically(postgres_server,
                                                                                            uninterrupted):
    records, model = uninterrupted
    url = postgres_server.database()
    restarted = []

    def restart(event):  # between two transactions: the next one reconnects, and the run goes on
        if type(event).__name__ == "EndIteration" and not restarted:
            postgres_server.restart()
            restarted.append(True)

    whole = run(url, event_handler=restart)
    assert restarted and [r["accuracies"] for r in whole] == [r["accuracies"] for r in records]
    assert same_models(final_model(url), model)

    url = postgres_server.database()  # inside a transaction: it fails, saying so, and a resume goes on
    with PipelineStore(url) as store:
        store.server = postgres_server
        store.__class__ = RestartsMidTrigger
        with pytest.raises(StoreUnreachable, match=r"^the connection to the PostgreSQL store postgresql://127.0.0.1:"
                                                   r"\d+/\w+ was lost during a transaction \(.*\); nothing of it was "
                                                   r"committed: the next one reconnects; a stopped pipeline goes on "
                                                   r"with --resume"):
            run(store)
        assert store.triggers(1) == [0]  # the same store goes on: reconnected
    resumed = run(url, resume=1)
    assert [r["accuracies"] for r in resumed] == [r["accuracies"] for r in records][1:]
    assert same_models(final_model(url), model)
    assert os.environ.get("PGPASSWORD") is None
