"""The Split-MNIST continual pipeline on each store backend: sqlite against PostgreSQL, the same accuracies, and the
store's share of the run time.

examples/continual_mnist.py's pipeline (five tasks, one trigger per task,
``time:86400``, the MLP 784-256-10, at least --min-steps steps per training)
runs once per backend with each strategy: on a sqlite file in a temporary
folder, and on a PostgreSQL server this script starts itself (initdb and
pg_ctl of the system's PostgreSQL, on 127.0.0.1 at a free port, fsync off as
in the tests; tests/helpers/postgres_server.py). For each it prints the final
accuracies (they must be equal, bit for bit: the store keeps what the run
computes, never changes it; a difference is flagged and the exit code is 1),
the run's wall time, and the store's share of it: the seconds spent inside
PipelineStore calls (opening it, every trigger set written and read back,
every progress report, every model stored; the lease's heartbeat thread
included) over the wall time.

Usage: python benchmarks/continual_store.py [--data-dir DIR] [--per-task 2000] [--min-steps 600]
                                             [--strategies gdumb:500]
(--per-task 0: all of MNIST.) Needs psycopg (pip install 'readerkit[postgres]') and PostgreSQL's server binaries;
run as root, the server runs as the postgres user. Machines here are shared and noisy: read the shares, not the
absolute seconds.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import train  # noqa: E402
from readers.continual.store import PipelineStore  # noqa: E402
from readers.sources import split_mnist  # noqa: E402
from tests.helpers.postgres_server import PostgresServer, missing  # noqa: E402

_TIMED = ("register_pipeline", "pipeline", "pipelines", "add_trigger", "trigger", "trigger_meta", "triggers",
          "last_trigger", "claim_pipeline", "release_pipeline", "heartbeat", "owner_alive", "lease", "mark_abandoned",
          "start_training", "update_training", "finish_training", "drop_models", "fail_training", "training",
          "trainings", "last_finished", "model_state")


class _Clock:
    def __init__(self):
        self.seconds, self.calls, self._lock = 0.0, 0, threading.Lock()

    def add(self, seconds: float) -> None:
        with self._lock:
            self.seconds += seconds
            self.calls += 1


def _timed(name: str):
    def method(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return getattr(PipelineStore, name)(self, *args, **kwargs)
        finally:
            self.clock.add(time.perf_counter() - started)
    method.__name__ = name
    return method


TimedStore = type("TimedStore", (PipelineStore,), {name: _timed(name) for name in _TIMED})


def run(db: str, strategy: str, stream, test, min_steps: int, seed: int) -> dict:
    clock = _Clock()
    started = time.perf_counter()
    opened = time.perf_counter()
    store = TimedStore(db)
    store.clock = clock
    clock.add(time.perf_counter() - opened)
    try:
        records = train.run_pipeline(stream, "time:86400", strategy,
                                     lambda s: train.MLP(784, n_classes=10, lr=3e-3, seed=s), db=store, test=test,
                                     min_steps=min_steps, seed=seed)
    finally:
        store.close()
    wall = time.perf_counter() - started
    return {"accuracies": records[-1]["accuracies"], "average": records[-1]["average_accuracy"], "wall": wall,
            "store": clock.seconds, "calls": clock.calls}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sibling = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist"
    parser.add_argument("--data-dir", default=str(sibling) if sibling.is_dir() else None)
    parser.add_argument("--per-task", type=int, default=2000, help="samples kept of each task (0: all)")
    parser.add_argument("--min-steps", type=int, default=600)
    parser.add_argument("--strategies", default="gdumb:500")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    why = missing()
    if why is not None:
        print(f"cannot start a PostgreSQL server: {why}", file=sys.stderr)
        return 2
    download = args.data_dir is None
    stream = split_mnist.train(args.data_dir, download=download, per_task=args.per_task or None)
    test = split_mnist.test(args.data_dir, download=download)
    print(f"Split-MNIST, {args.per_task or 'all'} samples per task, min_steps {args.min_steps}, seed {args.seed}")
    print(f"{'strategy':<12} {'backend':<10} {'average':>8}  {'per task (%)':<26} {'wall s':>7} {'store s':>8} "
          f"{'share':>6} {'calls':>6}")
    server, failed = PostgresServer(), False
    try:
        server.start()
        with tempfile.TemporaryDirectory() as scratch:
            for strategy in args.strategies.split(","):
                results = {}
                for backend in ("sqlite", "postgres"):
                    db = os.path.join(scratch, f"{strategy.replace(':', '_')}.db") if backend == "sqlite" else \
                        server.database()
                    r = results[backend] = run(db, strategy, stream, test, args.min_steps, args.seed)
                    per_task = " ".join(f"{100 * a:.1f}" for a in r["accuracies"])
                    print(f"{strategy:<12} {backend:<10} {100 * r['average']:>7.2f}%  {per_task:<26} {r['wall']:>7.2f} "
                          f"{r['store']:>8.3f} {100 * r['store'] / r['wall']:>5.1f}% {r['calls']:>6}", flush=True)
                same = results["sqlite"]["accuracies"] == results["postgres"]["accuracies"]
                failed |= not same
                print(f"{strategy:<12} accuracies {'EQUAL on both backends' if same else 'DIFFER: a bug'}")
    finally:
        server.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
