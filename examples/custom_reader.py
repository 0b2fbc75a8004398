"""A reader of your own: a plain generator function over a CSV file, decorated, batched and trained.

The CSV has a header row, numeric feature columns and an integer class in the
last column. Every fifth row is held out as the test split. Without a path,
the script writes a small learnable dataset (2000 rows, 6 features, 3 classes,
fixed seed) into a temporary folder and trains on that.

Run from the repository root, with readerkit installed (``pip install -e .``)
or on ``PYTHONPATH``::

    python examples/custom_reader.py [path.csv]

It prints one line per pass and the final test accuracy, and exits non-zero
when the data cannot be read or the model learns nothing.
"""
import csv
import sys
import tempfile
from pathlib import Path

import numpy as np
import toolz

import readers
import train
from train import MLP


def csv_reader(path, *, test):
    """A reader creator: the rows of one split of the CSV at ``path``, as lists of strings."""
    def reader():
        # opened inside the generator, so every pass (every call) reads the file afresh
        with open(path, newline="") as f:
            rows = csv.reader(f)
            next(rows)  # the header
            for i, row in enumerate(rows):
                if (i % 5 == 4) == test:
                    yield row
    return reader


def parse_row(row):
    """A CSV row as (float32 features, int label): the entry the models' "image" and "label" take."""
    *features, label = row
    return np.array(features, dtype=np.float32), int(label)


def write_demo_csv(path, rows=2000, features=6, classes=3, seed=0):
    """Overlapping Gaussian blobs, one per class: learnable, though not perfectly."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, features))
    labels = rng.integers(classes, size=rows)
    x = centres[labels] + rng.normal(size=(rows, features))
    header = ",".join([f"x{j}" for j in range(features)] + ["label"])
    np.savetxt(path, np.column_stack([x, labels]), fmt=["%.4f"] * features + ["%d"],
               delimiter=",", header=header, comments="")
    return path


def main(argv):
    with tempfile.TemporaryDirectory() as tmp:
        path = argv[1] if len(argv) > 1 else write_demo_csv(Path(tmp) / "blobs.csv")

        def split(test):
            return toolz.pipe(
                csv_reader(path, test=test),
                readers.map_readers(parse_row),
                readers.cache,  # parse once; later passes replay the entries from memory
            )

        # A stream has no random access, so it is shuffled through a buffer. Seeded, the
        # order of pass k depends only on (seed, k): a rerun trains on the same batches.
        train_data = readers.shuffle(split(test=False), buf_size=500, seed=0)
        test_data = split(test=True)

        # One pass to size the model; being complete, it also fills the cache.
        entries = list(train_data())
        if not entries:
            raise ValueError(f"{path} has no training rows; give it a header and at least one data row")
        n_features, n_classes = len(entries[0][0]), 1 + max(label for _, label in entries)
        print(f"{Path(path).name}: {len(entries)} training rows, {n_features} features, {n_classes} classes")

        def report(event):
            # TestResult arrives after each pass's EndPass, once test_provider has been evaluated
            if isinstance(event, train.TestResult):
                m = event.metrics
                print(f"pass {event.pass_id}: test loss {m['loss']:.3f}  test accuracy {m['accuracy']:.1%}")

        # train() batches and collates the entries itself; the mapping names column 0
        # "image" and column 1 "label", the inputs the built-in models read.
        history = train.train(
            train_data, ["image", "label"], batch_size=32, passes=5,
            model=MLP(n_features, hidden=(32,), n_classes=n_classes, lr=1e-2, seed=0),
            event_handler=report, test_provider=test_data,
        )
    accuracy = history[-1]["test_accuracy"]
    print(f"final test accuracy: {accuracy:.1%}")
    if not accuracy > 1 / n_classes:  # also catches NaN, from an empty test split
        sys.exit(f"test accuracy {accuracy:.1%} is no better than chance; is the class in the last column?")


if __name__ == "__main__":
    try:
        main(sys.argv)
    except (OSError, ValueError) as exc:  # unreadable file or malformed row: one line, exit status 1
        sys.exit(f"custom_reader: {exc}")
