"""Training on data another process serves: MNIST from ``python cli.py serve``, read with ``readers.remote``.

The trainer holds no data: its readers are connections to data-provider
servers, one for each split. ``readers.remote`` is an indexed reader, so the
global shuffle, batching and evaluation work on it as on local files, and
the next batches travel while the model trains on this one.

In three terminals, from the repository root (readerkit installed with
``pip install -e .`` or on ``PYTHONPATH``)::

    # terminals 1 and 2: the servers (Ctrl-C stops each)
    python cli.py serve --reader mnist --data-dir ../shared/data/mnist --port 20001
    python cli.py serve --reader mnist --data-dir ../shared/data/mnist --split test --port 20002

    # terminal 3: the trainer
    python examples/remote_training.py --train 127.0.0.1:20001 --test 127.0.0.1:20002

Or in one command, which starts both servers on free ports, trains against
them and stops them at the end::

    python examples/remote_training.py [mnist-dir]

The MNIST files come from ``mnist-dir``, else the repository's sibling
``../shared/data/mnist``. A server on an address other machines can reach
needs a shared secret (``--secret-file`` there, ``READERKIT_SECRET`` here).
It prints one line per pass and the final test accuracy, and exits non-zero
with one line when the data or a server is missing.
"""
import argparse
import contextlib
import subprocess
import sys
import tempfile
from pathlib import Path

import readers
import train
from train import MLP

ROOT = Path(__file__).resolve().parents[1]
SIBLING = ROOT.parent / "shared" / "data" / "mnist"


@contextlib.contextmanager
def serving(data_dir, split):
    """``python cli.py serve`` of one split on a free port, for a with block: its address. Stopped after, always."""
    with tempfile.TemporaryFile("w+") as log:  # the server's log: a line per connection, its totals at the end
        server = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "serve", "--reader", "mnist", "--data-dir",
                                   str(data_dir), "--split", split, "--port", "0"],
                                  stdout=subprocess.PIPE, stderr=log, text=True, cwd=ROOT)
        try:
            line = server.stdout.readline()  # "serving 60000 entries on 127.0.0.1:PORT", once it listens
            if not line.startswith("serving "):
                log.seek(0)
                raise RuntimeError(f"the {split} server did not start: {log.read().strip()[-1000:]}")
            print(f"{split} server: {line.strip()}")
            yield line.split()[-1]
        finally:
            stop(server)
            log.seek(0)
            for line in log:
                if line.startswith("stopped:"):
                    print(f"{split} server {line.strip()}")


def stop(server):
    """SIGTERM, as Ctrl-C would: the server finishes its answers, logs its totals and exits."""
    server.terminate()
    try:
        server.wait(10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
    server.stdout.close()


def train_remote(train_address, test_address, passes):
    """Train an MLP on the entries served at ``train_address``, scored on ``test_address``'s each pass."""
    train_data = readers.remote(train_address)
    test_data = readers.remote(test_address)
    print(f"reading {train_data}")
    seen = {}

    def report(event):
        if isinstance(event, train.EndPass):
            seen.update(event.metrics)
        elif isinstance(event, train.TestResult):
            print(f"pass {event.pass_id}: train loss {seen['loss']:.4f}  train accuracy {seen['accuracy']:.2%}  "
                  f"test accuracy {event.metrics['accuracy']:.2%}  {seen['samples_per_s']:,.0f} samples/s")

    history = train.train(
        readers.shuffle(train_data, seed=0),  # a global shuffle: remote entries are read by index
        ["image", "label"], batch_size=128, passes=passes,
        model=MLP(hidden=(256,), lr=3e-3, seed=0),
        event_handler=report, test_provider=test_data,
    )
    print(f"final test accuracy: {history[-1]['test_accuracy']:.2%}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", nargs="?", default=str(SIBLING), help="Folder of the MNIST files, to serve.")
    parser.add_argument("--train", help="Address of a running server of the train split (host:port).")
    parser.add_argument("--test", help="Address of a running server of the test split (host:port).")
    parser.add_argument("--passes", type=int, default=2)
    args = parser.parse_args()
    if (args.train is None) != (args.test is None):
        parser.error("give both --train and --test (servers already running), or neither to start them here")
    if args.train is not None:
        train_remote(args.train, args.test, args.passes)
        return
    if not (Path(args.data_dir) / "train-images-idx3-ubyte.gz").is_file():
        sys.exit(f"remote_training: no MNIST files in {args.data_dir}; give the folder that holds "
                 "train-images-idx3-ubyte.gz and the other three")
    with serving(args.data_dir, "train") as train_address, serving(args.data_dir, "test") as test_address:
        train_remote(train_address, test_address, args.passes)


if __name__ == "__main__":
    try:
        main()
    except (OSError, RuntimeError, readers.RemoteError) as exc:  # a server not there, or refusing: one line
        sys.exit(f"remote_training: {exc}")
