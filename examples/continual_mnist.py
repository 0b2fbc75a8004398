"""Class-incremental Split-MNIST: NewData forgets, AllData remembers, GDumb with 500 samples comes close.

Five tasks arrive one simulated day each (classes 0-1, then 2-3, ...), a
trigger fires once per task (``time:86400``) and the MLP of ``cli.py train``
is trained on each trigger's set, with the defaults of ``cli.py pipeline
run``. Three strategies choose the sets:

- ``new``: the samples since the last trigger, training the previous model
  on: it learns each new pair of classes and forgets the others
  (catastrophic forgetting), so the average over the five tasks falls to
  about 20%;
- ``all``: everything seen so far, training the previous model on (about 97%);
- ``gdumb:500``: GDumb (Prabhu et al., ECCV 2020): a class-balanced memory of
  500 samples and a new model trained on it at each trigger. The paper
  reports about 90% on MNIST at this memory size.

Run from the repository root, with readerkit installed (``pip install -e .``)
or on ``PYTHONPATH``::

    python examples/continual_mnist.py [--data-dir DIR] [--db runs.db] [--per-task N] [--min-steps 600]
                                       [--strategies new,all,gdumb:500] [--json FILE]

It prints each pipeline's table (a row per trigger: the set, the accuracy
on each task so far) and then one line per strategy with its final average
accuracy. ``--per-task`` keeps that many samples of each task, for a quick
run. The MNIST files come from ``--data-dir``, else ``$READERKIT_DATA``,
else the repository's sibling ``../shared/data/mnist``, else readerkit's
download cache.
"""
import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import train
from readers.sources import split_mnist
from train.commands.continual_table import HEADER, row_of


def default_data_dir():
    sibling = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist"
    return None if os.environ.get("READERKIT_DATA") or not sibling.is_dir() else str(sibling)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=default_data_dir())
    parser.add_argument("--db", help="the pipeline store (default: a temporary file)")
    parser.add_argument("--per-task", type=int, default=None, help="samples kept of each task (default: all)")
    parser.add_argument("--min-steps", type=int, default=600, help="steps each training runs at least")
    parser.add_argument("--strategies", default="new,all,gdumb:500")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the final figures here as JSON")
    args = parser.parse_args(argv)

    download = args.data_dir is None
    stream = split_mnist.train(args.data_dir, download=download, per_task=args.per_task)
    test = split_mnist.test(args.data_dir, download=download)
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        db = args.db or os.path.join(scratch, "runs.db")
        for strategy in args.strategies.split(","):
            print(f"\nstrategy {strategy}:\n{HEADER}")
            records = train.run_pipeline(
                stream, "time:86400", strategy, lambda seed: train.MLP(784, n_classes=10, lr=3e-3, seed=seed),
                db=db, test=test, min_steps=args.min_steps, seed=args.seed,
                on_trigger=lambda record: print(row_of(record), flush=True))
            last = records[-1]
            results[strategy] = {"average_accuracy": last["average_accuracy"], "accuracies": last["accuracies"],
                                 "seconds": sum(r["seconds"] for r in records), "pipeline_id": last["pipeline_id"]}
    print()
    for strategy, result in results.items():
        per_task = " ".join(f"{100 * a:.1f}" for a in result["accuracies"])
        print(f"{strategy}: final average accuracy {100 * result['average_accuracy']:.2f}% "
              f"(per task: {per_task}) in {result['seconds']:.1f} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
