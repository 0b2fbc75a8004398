"""Training on Parquet files: a Parquet copy of MNIST, made with pyarrow, trains as well as the built-in reader.

Users' data is often Parquet (or Arrow) files, not a format readerkit knows
by name. ``readers.parquet`` reads them: building it reads the footers only,
an entry is the tuple of the chosen columns, and a batch takes each row
group's rows in one take. This example

1. writes MNIST's two splits as Parquet files with pyarrow, in row groups of
   1,000 rows: ``image`` a fixed-size list of 784 ``uint8`` pixels, ``label``
   an ``int64``, into a temporary folder removed at the end;
2. trains the same MLP, with the same seed, batch size and passes, twice: on
   the built-in ``mnist`` reader with the global shuffle, and on the Parquet
   files with ``readers.shuffle_row_groups`` (row groups in a random order,
   rows shuffled within a window of 8 groups: each row group decoded once a
   pass, the shuffle for Parquet data larger than memory);
3. prints both test accuracies and checks that they are the same, within
   ``TOLERANCE`` (0.5 points: the two shuffles give different orders, and two
   orders of the same data differ by a few tenths of a point after 2 passes);
4. trains a third time on the Parquet files, with the global shuffle: the
   same permutation as the built-in reader's, so the same entries in the same
   order, and checks that the accuracy is exactly the built-in reader's.

With ``--url``, the Parquet files are served over HTTP on 127.0.0.1
(``readers.network.file_server.serve_folder``, a server that answers byte
ranges, as a web server or object storage does) and every Parquet reader
reads ``http://127.0.0.1:PORT/train.parquet``: the footers and row groups
come as byte-range requests, through fsspec, and the accuracies are the same
(the files are the same data wherever they are read from).

From the repository root, with readerkit installed (``pip install -e .[arrow]``,
and ``.[cloud]`` for ``--url``) or on ``PYTHONPATH``::

    python examples/parquet_training.py [mnist-dir] [--passes N] [--samples N] [--url]

The MNIST files come from ``mnist-dir``, else ``$READERKIT_DATA``, else the
repository's sibling ``../shared/data/mnist``, else readerkit's download cache.
It exits non-zero with one line when pyarrow is missing or the accuracies differ.
"""
import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import readers
import train
from readers.sources import mnist
from train import MLP

ROOT = Path(__file__).resolve().parents[1]
SIBLING = ROOT.parent / "shared" / "data" / "mnist"
TOLERANCE = 0.005  # "the same accuracy": within half a point
ROWS_PER_GROUP = 1_000


def data_dir_of(given):
    """The MNIST folder: the one given, else None when $READERKIT_DATA is set or there is no sibling, else it."""
    if given:
        return given
    if os.environ.get("READERKIT_DATA") or not SIBLING.is_dir():
        return None  # readerkit looks in $READERKIT_DATA, then its cache, downloading what is missing
    return str(SIBLING)


def write_parquet(split, path, samples=None):
    """MNIST's ``split`` (a reader of it) as one Parquet file: uint8 pixels and int64 labels, as pyarrow writes them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    images, labels = split.arrays()  # the raw uint8 (n, 784) pixels and labels, as the IDX files hold them
    images, labels = images[:samples], labels[:samples]
    pixels = pa.FixedSizeListArray.from_arrays(pa.array(images.reshape(-1)), images.shape[1])
    table = pa.table({"image": pixels, "label": pa.array(labels.astype(np.int64))})
    pq.write_table(table, path, row_group_size=ROWS_PER_GROUP)
    return len(table), pq.ParquetFile(path).metadata.num_row_groups


def scaled(entry):
    """A Parquet row (uint8 pixels, label) as the built-in reader's entry: float32 pixels in 0..1, an int label."""
    image, label = entry
    return np.divide(image, np.float32(255), dtype=np.float32), int(label)


def fit(train_data, test_data, passes):
    """Train the MLP on ``train_data`` (seed 0), scored on ``test_data``: the final test accuracy and seconds taken."""
    start = time.perf_counter()
    history = train.train(train_data, ["image", "label"], batch_size=128, passes=passes,
                          model=MLP(hidden=(256,), lr=3e-3, seed=0), test_provider=test_data, seed=0)
    return history[-1]["test_accuracy"], time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", nargs="?", help="the folder of the MNIST files")
    parser.add_argument("--passes", type=int, default=2, help="training passes (default 2)")
    parser.add_argument("--samples", type=int, default=None, help="train on the first N samples only")
    parser.add_argument("--url", action="store_true", help="serve the Parquet files over HTTP and read them by URL")
    args = parser.parse_args(argv)
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        sys.exit("parquet_training: this example needs pyarrow: pip install 'readerkit[arrow]' (or pyarrow)")
    if args.url:
        try:
            import aiohttp  # noqa: F401
            import fsspec  # noqa: F401
        except ImportError:
            sys.exit("parquet_training: --url needs fsspec and aiohttp: pip install 'readerkit[cloud]'")

    data_dir = data_dir_of(args.data_dir)
    built_in = {"train": mnist.train(data_dir), "test": mnist.test(data_dir)}
    with tempfile.TemporaryDirectory(prefix="parquet-mnist-") as folder:
        for split, reader in built_in.items():
            rows, groups = write_parquet(reader, Path(folder, f"{split}.parquet"),
                                         args.samples if split == "train" else None)
            size = Path(folder, f"{split}.parquet").stat().st_size
            print(f"{split}.parquet: {rows} rows in {groups} row groups, {size / 1e6:.1f} MB")

        # the Parquet files, as readers: nothing but the footers is read here
        stack = contextlib.ExitStack()
        where = folder
        if args.url:
            from readers.network.file_server import serve_folder

            where = stack.enter_context(serve_folder(folder)).url
            print(f"serving {folder} at {where}")
        parquet_train = readers.parquet(f"{where}/train.parquet")
        parquet_test = readers.map_readers(scaled, readers.parquet(f"{where}/test.parquet"))
        built_in_train = built_in["train"]
        if args.samples is not None:
            built_in_train = readers.firstn(built_in_train, args.samples)

        mnist_accuracy, mnist_s = fit(readers.shuffle(built_in_train, seed=0), built_in["test"], args.passes)
        print(f"built-in mnist reader, global shuffle: test accuracy {mnist_accuracy:.2%} ({mnist_s:.1f} s)")
        # shuffle the row groups first, then scale: map_readers keeps the shuffle's plan, not the row groups
        shuffled = readers.map_readers(scaled, readers.shuffle_row_groups(parquet_train, window=8, seed=0))
        parquet_accuracy, parquet_s = fit(shuffled, parquet_test, args.passes)
        print(f"readers.parquet, shuffle_row_groups:   test accuracy {parquet_accuracy:.2%} ({parquet_s:.1f} s)")
        # the global shuffle draws the same permutation from (seed, pass) over any reader of the same length, so
        # over the Parquet copy it feeds the same entries in the same order as over the built-in reader
        same_order, same_order_s = fit(readers.map_readers(scaled, readers.shuffle(parquet_train, seed=0)),
                                       parquet_test, args.passes)
        print(f"readers.parquet, global shuffle:       test accuracy {same_order:.2%} ({same_order_s:.1f} s)")
        stack.close()  # the server stops

    if same_order != mnist_accuracy:
        sys.exit(f"parquet_training: in the same order, the Parquet copy gave {same_order:.2%} and the built-in "
                 f"reader {mnist_accuracy:.2%}; the entries differ")
    gap = abs(parquet_accuracy - mnist_accuracy)
    if gap > TOLERANCE:
        sys.exit(f"parquet_training: the accuracies differ by {gap:.2%}, more than {TOLERANCE:.1%}")
    print(f"the same accuracy: {gap * 100:.2f} points apart, within {TOLERANCE * 100:.1f}")
    print(f"final test accuracy: {parquet_accuracy:.2%}")


if __name__ == "__main__":
    main()
