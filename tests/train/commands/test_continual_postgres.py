"""`cli.py pipeline run|status --db postgresql://...`: a pipeline on a PostgreSQL store from the command line, and
`pipeline status` naming each pipeline's owner (host, pid, heartbeat age) from any process."""
import os
import re
import socket

from click.testing import CliRunner

import cli
from readers import PipelineStore
from tests.helpers.continual_data import fake_mnist
from tests.helpers.store_rows import set_row

HERE = socket.gethostname()


def test_pipeline_run_and_status_on_a_postgres_url(tmp_path, postgres_server):
    url = postgres_server.database()
    data = fake_mnist(tmp_path / "mnist", per_class=6, test_per_class=2)
    run = CliRunner().invoke(cli.main, ["pipeline", "run", "--data-dir", data, "--no-download", "--db", url,
                                        "--min-steps", "2"], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    assert re.search(rf"pipeline 1 in {re.escape(url)}: average accuracy", run.output), run.output
    status = CliRunner().invoke(cli.main, ["pipeline", "status", "--db", url])
    assert status.exit_code == 0 and status.output.splitlines()[0] == f"{url}: 1 pipeline"
    assert "held by" not in status.output  # the run released it


def test_status_names_each_pipelines_owner_host_pid_and_heartbeat_age(store_db):
    # Regression (issue 31, 2): `pipeline status` did not say which process, on which host, holds a pipeline
    with PipelineStore(store_db) as store:
        mine, theirs, gone = (store.register_pipeline({"trigger": "every:2", "strategy": "all", "stream": "s"})
                              for _ in range(3))
        store.claim_pipeline(mine)
        heartbeat = store.pipeline(mine)["heartbeat"]
    set_row(store_db, theirs, owner="gpu-3:4242", heartbeat=heartbeat - 10)
    set_row(store_db, gone, owner="gpu-4:77", heartbeat=heartbeat - 1000)
    lines = CliRunner().invoke(cli.main, ["pipeline", "status", "--db", store_db]).output.splitlines()
    assert re.fullmatch(rf"pipeline 1: s, trigger every:2, strategy all; 0 triggers; held by process {os.getpid()} on "
                        rf"host '{HERE}', heartbeat \d+\.\d s ago", lines[1]), lines
    assert re.fullmatch(r"pipeline 2: .*; held by process 4242 on host 'gpu-3', heartbeat 1\d\.\d s ago", lines[2])
    assert re.fullmatch(r"pipeline 3: .*; held by process 77 on host 'gpu-4', heartbeat \d+\.\d s ago \(gone: its "
                        r"lease ran out\)", lines[3])
