"""Users' data in their formats (issue 28): readerkit's format readers against each format's own loader, in one run.

Each ``bench_<format>()`` writes its data with the format's own writer into a
temporary folder, times readerkit's reader and the baseline over the same
files in turns (best of ``--repeats``), and prints its rows; ``main()`` runs
every ``bench_`` function present. Read the ratios (readerkit's rate over the
baseline's), not the absolute rates: machines here are shared and noisy.

tar_shards: WebDataset shards of 64x64 RGB JPEGs with a class, decoded to
uint8 HWC arrays, with 2 process workers:
``readers.prefetch(readers.tar_shards(paths), 2, mode="process")`` against
``webdataset.WebDataset(paths).decode("rgb8")`` in a torch DataLoader with
``num_workers=2`` (``batch_size=None``: samples, as readerkit gives them).
Each worker reads its own shard files in both. Goal: >= 1x.

Usage: python benchmarks/formats.py [--quick] [--repeats 3]
"""
from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import readers  # noqa: E402


def _best(runs: dict[str, Callable[[], int]], repeats: int) -> dict[str, tuple[float, int]]:
    """The best (seconds, entries) of each run over ``repeats`` turns, the runs taking turns."""
    best: dict[str, tuple[float, int]] = {}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            n = run()
            took = time.perf_counter() - start
            if name not in best or took < best[name][0]:
                best[name] = (took, n)
    return best


def _write_jpeg_shards(folder: str, images: int, per_shard: int, size: int = 64) -> list[str]:
    import webdataset as wds
    from PIL import Image

    rng = np.random.default_rng(0)
    with wds.ShardWriter(os.path.join(folder, "shard-%04d.tar"), maxcount=per_shard, verbose=0) as sink:
        for i in range(images):
            pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
            out = io.BytesIO()
            Image.fromarray(pixels).save(out, format="JPEG", quality=90)
            sink.write({"__key__": f"{i:07d}", "jpg": out.getvalue(), "cls": i % 10})
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".tar"))


def image_and_class(entry: dict) -> tuple:
    """A sample's (image, class), as webdataset's ``to_tuple("jpg", "cls")`` gives them."""
    return entry["jpg"], entry["cls"]


def _count_readerkit(paths: list[str], batch_size: int | None) -> int:
    import batching

    if batch_size is None:
        r = readers.prefetch(readers.tar_shards(paths), 2, mode="process")
        return sum(entry["jpg"].shape[0] > 0 for entry in r())
    tuples = readers.map_readers(image_and_class, readers.tar_shards(paths))
    r = readers.prefetch(batching.collated(batching.batch(tuples, batch_size)), 2, mode="process")
    return sum(len(labels) for images, labels in r())


def _count_webdataset(paths: list[str], batch_size: int | None) -> int:
    import torch.utils.data
    import webdataset as wds

    dataset = wds.WebDataset(paths, shardshuffle=False, empty_check=False).decode("rgb8")
    if batch_size is not None:
        dataset = dataset.to_tuple("jpg", "cls").batched(batch_size)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
    with warnings.catch_warnings():  # torch warns that rgb8's arrays (Pillow's buffers) are read-only
        warnings.simplefilter("ignore", UserWarning)
        if batch_size is None:
            return sum(entry["jpg"].shape[0] > 0 for entry in loader)
        return sum(len(labels) for images, labels in loader)


def bench_tar_shards(quick: bool = False, repeats: int = 3) -> list[str]:
    """WebDataset shards of 64x64 JPEGs, decoded, 2 process workers: tar_shards against webdataset + DataLoader."""
    try:
        import torch  # noqa: F401
        import webdataset  # noqa: F401
        from PIL import Image  # noqa: F401
    except ImportError as exc:
        return [f"tar_shards: skipped ({exc}); pip install webdataset pillow torch"]
    images, per_shard = (800, 100) if quick else (8000, 500)
    with tempfile.TemporaryDirectory() as folder:
        paths = _write_jpeg_shards(folder, images, per_shard)
        rows = [f"tar_shards: {images} 64x64 JPEGs in {len(paths)} shards, decoded, 2 process workers"]
        for batch_size in (None, 64):
            best = _best({"readerkit": lambda: _count_readerkit(paths, batch_size),
                          "webdataset": lambda: _count_webdataset(paths, batch_size)}, repeats)
            (ours, n), (theirs, m) = best["readerkit"], best["webdataset"]
            if n != images or m != images:
                raise AssertionError(f"tar_shards bench: readerkit gave {n}, webdataset {m} of {images} samples")
            what = "samples (dicts)" if batch_size is None else f"collated batches of {batch_size} (in the workers)"
            rows += [f"  {what}:",
                     f"    readerkit prefetch(..., 2, mode='process'): {images / ours:9.0f} samples/s",
                     f"    webdataset + DataLoader(num_workers=2):     {images / theirs:9.0f} samples/s",
                     f"    ratio: {theirs / ours:.2f}x (goal >= 1x)"]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a run of seconds")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    benches = [f for name, f in sorted(globals().items()) if name.startswith("bench_") and callable(f)]
    for bench in benches:
        print("\n".join(bench(quick=args.quick, repeats=args.repeats)), flush=True)


if __name__ == "__main__":
    main()
