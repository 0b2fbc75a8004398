"""Users' formats: readerkit's format readers against each format's own tools, ratios in one run.

Parquet (``bench_parquet``): an in-memory-sized file (--rows rows of a uint8[784]
image and an int64 label, row groups of --row-group rows, snappy, written by
pyarrow), a whole pass shuffled and in collated batches of 64 (a uint8 (64, 784)
array and an int64 (64,) array per batch), against:
  - datasets' own iteration of the same data shuffled: ``Dataset.from_parquet``
    (its Arrow cache made before timing), ``ds.shuffle(seed).with_format("numpy")
    .iter(batch_size=64)``. Goal: readerkit >= 1x.
  - pyarrow reading every row group in order and slicing batches of 64 (no
    shuffle: the ceiling of decoding). Goal: readerkit >= 0.8x.
readerkit's row is ``shuffle_row_groups(parquet(path), window=4, seed=k)`` ->
``batch(64)`` -> ``collated``; the global ``shuffle`` is shown too.

Usage: python benchmarks/formats.py [--rows 60000] [--row-group 4096] [--repeats 3]
Files go to a temporary folder, removed afterwards. Machines here are shared and
noisy: read the ratios (best of the repeats, rows interleaved), not the rates.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import batching  # noqa: E402
import readers  # noqa: E402

BATCH = 64


def _rate(run: Callable[[int], int], seed: int) -> float:
    """Batches per second of one whole pass of ``run(seed)`` (which returns how many batches it made)."""
    start = time.perf_counter()
    batches = run(seed)
    return batches / (time.perf_counter() - start)


def _write_parquet(path: str, rows: int, row_group: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(rows, 784), dtype=np.uint8)
    table = pa.table({"image": pa.FixedSizeListArray.from_arrays(pa.array(images.ravel()), 784),
                      "label": pa.array(rng.integers(0, 10, size=rows), pa.int64())})
    pq.write_table(table, path, row_group_size=row_group, compression="snappy")


def _readerkit(path: str, shuffled: str) -> Callable[[int], int]:
    def run(seed: int) -> int:
        source = readers.parquet(path)  # built afresh: every row group is decoded in the timed pass
        order = (readers.shuffle_row_groups(source, window=4, seed=seed) if shuffled == "row_groups"
                 else readers.shuffle(source, seed=seed))
        n = 0
        for images, labels in batching.collated(batching.batch(order, BATCH))():
            n += 1
        assert images.dtype == np.uint8 and images.shape[1] == 784 and labels.dtype == np.int64
        return n
    return run


def _datasets(ds) -> Callable[[int], int]:
    def run(seed: int) -> int:
        n = 0
        for batch in ds.shuffle(seed=seed).with_format("numpy").iter(batch_size=BATCH):
            n += 1
        assert batch["image"].shape[1] == 784
        return n
    return run


def _pyarrow_in_order(path: str) -> Callable[[int], int]:
    import pyarrow.parquet as pq

    def run(seed: int) -> int:
        n = 0
        with open(path, "rb") as f:
            pf = pq.ParquetFile(f)
            for g in range(pf.num_row_groups):
                table = pf.read_row_group(g)
                images = table.column("image").chunk(0).flatten().to_numpy().reshape(-1, 784)
                labels = table.column("label").to_numpy()
                for lo in range(0, len(labels), BATCH):
                    batch = images[lo:lo + BATCH], labels[lo:lo + BATCH]
                    n += 1
        assert batch[0].shape[1] == 784
        return n
    return run


def bench_parquet(rows: int = 60_000, row_group: int = 4096, repeats: int = 3) -> dict[str, float]:
    """Print and return the best batches/s of each row (see the module doc)."""
    try:
        import datasets
    except ImportError:
        print("parquet: skipped (needs pyarrow and datasets: pip install pyarrow datasets)")
        return {}
    datasets.disable_progress_bars()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "train.parquet")
        _write_parquet(path, rows, row_group)
        ds = datasets.Dataset.from_parquet(path, cache_dir=os.path.join(folder, "hf"))
        runs = {
            "readerkit, shuffle_row_groups(window=4)": _readerkit(path, "row_groups"),
            "readerkit, global shuffle": _readerkit(path, "global"),
            "datasets, ds.shuffle().iter()": _datasets(ds),
            "pyarrow, row groups in order": _pyarrow_in_order(path),
        }
        for run in runs.values():
            run(99)  # warm: the page cache, imports
        rates: dict[str, list[float]] = {name: [] for name in runs}
        for k in range(repeats):  # interleaved, so that a noisy neighbour hits every row alike
            for name, run in runs.items():
                rates[name].append(_rate(run, k))
        best = {name: max(r) for name, r in rates.items()}
        ours = best["readerkit, shuffle_row_groups(window=4)"]
        size = os.path.getsize(path) / 1e6
        print(f"parquet: {rows:,} rows (uint8[784] + int64), row groups of {row_group}, {size:.0f} MB snappy; "
              f"a whole pass in batches of {BATCH}, best of {repeats}:")
        for name, rate in best.items():
            print(f"   {name:<42} {rate:9.1f} batches/s  {rate * BATCH:11,.0f} rows/s   "
                  f"readerkit (row groups) is {ours / rate:5.2f}x this")
        print(f"   goals: >= 1x datasets ({ours / best['datasets, ds.shuffle().iter()']:.2f}x), "
              f">= 0.8x pyarrow in order ({ours / best['pyarrow, row groups in order']:.2f}x)")
        del ds
        return best


BENCHES = {"parquet": bench_parquet}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(BENCHES), action="append", help="run only these (repeatable)")
    parser.add_argument("--rows", type=int, default=60_000)
    parser.add_argument("--row-group", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for name in args.only or BENCHES:
        if name == "parquet":
            bench_parquet(args.rows, args.row_group, args.repeats)
        else:
            BENCHES[name]()


if __name__ == "__main__":
    main()
