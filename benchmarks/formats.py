"""Users' formats (issues 28, 29): each reader against the loader a user would otherwise write, ratios in one run.

Each ``bench_<format>()`` makes its data with the format's own writer in a
temporary folder, times readerkit and its baseline in turns (the best of
``repeats`` passes each, so a noisy spell of the shared machine hits both),
and returns its rows; ``main()`` runs those present and prints one table.

``bench_image_folder()``: an image folder (10 classes, JPEGs written by
Pillow), decoded and resized to 64x64 RGB, shuffled, in collated batches of
64, through 2 process workers: ``prefetch(collated(batch(shard(shuffle(
image_folder(root, size=64))), 64)), 2, mode="process")`` against a
torchvision-style ``ImageFolder`` (a map-style torch ``Dataset`` listing the
sorted class folders, whose item is Pillow's open, ``convert("RGB")`` and
bilinear resize, as a uint8 HWC tensor) in a ``DataLoader(batch_size=64,
shuffle=True, num_workers=2)``. Both deliver uint8 (64, 64, 64, 3) batches
and int64 labels, each worker making whole batches of its share; the time of
a pass includes starting its workers. In the first row readerkit decodes the
JPEGs at half scale (Pillow's ``draft``, which ``image_folder`` uses when an
image is at least twice ``size``) and the baseline decodes them whole, as
torchvision does; the second (JPEGs already 64x64) and third (PNGs, no
``size``) rows decode the same pixels both ways. Goal: >= 1x. Skipped
without torch or Pillow.

``bench_parquet()``: an in-memory-sized file (60,000 rows (6,000 with --quick) of a uint8[784]
image and an int64 label, row groups of 4,096 rows, snappy, written by
pyarrow), a whole pass shuffled and in collated batches of 64 (a uint8 (64, 784)
array and an int64 (64,) array per batch), against:
  - datasets' own iteration of the same data shuffled: ``Dataset.from_parquet``
    (its Arrow cache made before timing), ``ds.shuffle(seed).with_format("numpy")
    .iter(batch_size=64)``. Goal: readerkit >= 1x.
  - pyarrow reading every row group in order and slicing batches of 64 (no
    shuffle: the ceiling of decoding). Goal: readerkit >= 0.8x.
readerkit's row is ``shuffle_row_groups(parquet(path), window=4, seed=k)`` ->
``batch(64)`` -> ``collated``; the global ``shuffle`` is shown too.


``bench_tar_shards()``: WebDataset shards of 64x64 RGB JPEGs with a class,
written by webdataset's ``ShardWriter``, decoded to uint8 HWC arrays, with 2
process workers: ``prefetch(tar_shards(paths), 2, mode="process")`` against
``webdataset.WebDataset(paths).decode("rgb8")`` in a torch DataLoader with
``num_workers=2``, as samples (``batch_size=None``) and as collated batches of
64 made in the workers. Each worker reads its own shard files in both.
Goal: >= 1x. Skipped without torch, webdataset or Pillow.

``bench_url_tokens()`` and ``bench_url_parquet()`` (issue 29): the same data read
by URL from ``readers.network.file_server.serve_folder`` on loopback, against the
same pipeline over the local files, in one run:
  - token windows (four 16 MB ``.bin`` files of 2-byte tokens, seq_len 1024), a
    pass of collated batches of 64 windows in the locality order
    ``shuffle_row_groups(tokens(...), window=4)``, each reader built afresh for
    each pass (nothing fetched is kept between passes): goal >= 0.5x the local
    read; the global shuffle is shown too, and one URL reader kept across
    passes, as a training run keeps it (its blocks, 256 MiB, hold this corpus);
  - Parquet (the file of ``bench_parquet``) with ``cache_dir=`` warm (one pass
    before timing), ``shuffle_row_groups`` and batches of 64: goal >= 0.9x.
Skipped without fsspec and aiohttp (``pip install 'readerkit[cloud]'``).

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
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import batching  # noqa: E402
import readers  # noqa: E402


class Row(NamedTuple):
    name: str
    readerkit: float  # entries per second
    baseline: float
    goal: float | None

    @property
    def ratio(self) -> float:
        return self.readerkit / self.baseline


def best_of(runs: list[Callable[[], int]], repeats: int) -> list[float]:
    """Entries per second of each run, the best of ``repeats`` turns taken in alternation."""
    best = [0.0] * len(runs)
    for _ in range(repeats):
        for k, run in enumerate(runs):
            start = time.perf_counter()
            n = run()
            best[k] = max(best[k], n / (time.perf_counter() - start))
    return best


def consume(batches: Iterable) -> int:
    """Entries in the batches, touching the first byte of each batch's images (as a training step would)."""
    n = 0
    for images, labels in batches:
        int(images[0, 0, 0, 0])
        n += len(labels)
    return n


# -- parquet ----------------------------------------------------------------------------------------

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


def bench_parquet(quick: bool = False, repeats: int = 3) -> list[Row]:
    """Parquet, shuffled and batched (64): readerkit's row-group shuffle against datasets and pyarrow in order."""
    try:
        import datasets
    except ImportError as exc:
        print(f"parquet: skipped ({exc}); pip install pyarrow datasets", file=sys.stderr)
        return []
    datasets.disable_progress_bars()
    rows, row_group = (6_000, 1024) if quick else (60_000, 4096)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "train.parquet")
        _write_parquet(path, rows, row_group)
        ds = datasets.Dataset.from_parquet(path, cache_dir=os.path.join(folder, "hf"))
        names = ["row_groups", "global", "datasets", "pyarrow"]
        runs = [_readerkit(path, "row_groups"), _readerkit(path, "global"), _datasets(ds), _pyarrow_in_order(path)]
        for run in runs:
            run(99)  # warm: the page cache, imports
        best = dict.fromkeys(names, 0.0)
        for k in range(repeats):  # interleaved, so that a noisy neighbour hits every row alike
            for name, run in zip(names, runs):
                best[name] = max(best[name], _rate(run, k) * BATCH)
        del ds
    what = f"parquet, {rows:,} rows uint8[784] + int64, row groups of {row_group}, shuffled, batches of {BATCH}"
    return [Row(f"{what}: shuffle_row_groups / datasets' shuffled iter", best["row_groups"], best["datasets"], 1.0),
            Row(f"{what}: shuffle_row_groups / pyarrow row groups in order", best["row_groups"], best["pyarrow"], 0.8),
            Row(f"{what}: global shuffle / pyarrow row groups in order", best["global"], best["pyarrow"], None)]


# -- image folder ---------------------------------------------------------------------------------


def write_images(root: str, n: int, shape: tuple[int, int], suffix: str, classes: int = 10) -> None:
    """``n`` photo-like images (smooth gradients plus noise) of ``shape`` (h, w), in ``classes`` folders."""
    from PIL import Image
    rng = np.random.default_rng(0)
    h, w = shape
    yy, xx = np.mgrid[0:h, 0:w]
    for k in range(n):
        label = k % classes
        folder = os.path.join(root, f"class_{label:02d}")
        os.makedirs(folder, exist_ok=True)
        base = np.stack([(xx * (1 + label) + k) % 256, (yy * 3 + 7 * k) % 256, (xx + yy + 11 * label) % 256], -1)
        image = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
        Image.fromarray(image).save(os.path.join(folder, f"{k:06d}{suffix}"), **({"quality": 90} if suffix == ".jpg"
                                                                                 else {}))


class TorchImageFolder:
    """torchvision's ImageFolder, written out: sorted class folders, (path, label) samples, Pillow's loader."""

    def __init__(self, root: str, size: int | None):
        self.classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
        self.samples = [(os.path.join(root, c, f), label) for label, c in enumerate(self.classes)
                        for f in sorted(os.listdir(os.path.join(root, c)))]
        self.size = size

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> Any:
        import torch
        from PIL import Image
        path, label = self.samples[i]
        with open(path, "rb") as f:
            image = Image.open(f).convert("RGB")
        if self.size is not None:
            image = image.resize((self.size, self.size), Image.Resampling.BILINEAR)
        return torch.from_numpy(np.asarray(image).copy()), label


def bench_image_folder(quick: bool = False, repeats: int = 3) -> list[Row]:
    """Image folder, decoded, 2 process workers, against a torchvision-style ImageFolder in a DataLoader."""
    try:
        import PIL  # noqa: F401
        import torch
    except ImportError as exc:
        print(f"image folder: skipped ({exc})", file=sys.stderr)
        return []
    torch.set_num_threads(1)
    n = 640 if quick else 3200
    rows = []
    for name, stored, size, suffix in [("JPEG 128x128 -> 64x64", (128, 128), 64, ".jpg"),
                                       ("JPEG 64x64", (64, 64), 64, ".jpg"),
                                       ("PNG 64x64", (64, 64), None, ".png")]:
        with tempfile.TemporaryDirectory() as root:
            write_images(root, n, stored, suffix)
            # as the DataLoader: each worker makes whole batches of its share (the shard follows the workers)
            ours = readers.prefetch(batching.collated(batching.batch(readers.shard(
                readers.shuffle(readers.image_folder(root, size=size), seed=0)), 64)), 2, mode="process",
                start_method="fork")
            loader = torch.utils.data.DataLoader(TorchImageFolder(root, size), batch_size=64, shuffle=True,
                                                 num_workers=2, generator=torch.Generator().manual_seed(0))
            first = next(iter(ours()))
            assert first[0].shape == (64, 64, 64, 3) and first[0].dtype == np.uint8, first[0].shape
            readerkit, baseline = best_of([lambda: consume(ours()), lambda: consume(loader)], repeats)
            rows.append(Row(f"image folder, {name}, {n} images, batches of 64, 2 processes", readerkit, baseline, 1.0))
            print(f"  {rows[-1].name}: {readerkit:.0f} vs {baseline:.0f} images/s", file=sys.stderr)
    return rows


# -- tar shards -----------------------------------------------------------------------------------


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
    # fork, as the DataLoader does on Linux: once a DataLoader has run, this process keeps a thread of
    # torch's, and readerkit's default would then spawn its workers (a script of readerkit alone forks)
    if batch_size is None:
        r = readers.prefetch(readers.tar_shards(paths), 2, mode="process", start_method="fork")
        return sum(entry["jpg"].shape[0] > 0 for entry in r())
    tuples = readers.map_readers(image_and_class, readers.tar_shards(paths))
    r = readers.prefetch(batching.collated(batching.batch(tuples, batch_size)), 2, mode="process",
                         start_method="fork")
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


def bench_tar_shards(quick: bool = False, repeats: int = 3) -> list[Row]:
    """WebDataset shards of 64x64 JPEGs, decoded, 2 process workers: tar_shards against webdataset + DataLoader."""
    try:
        import torch  # noqa: F401
        import webdataset  # noqa: F401
        from PIL import Image  # noqa: F401
    except ImportError as exc:
        print(f"tar shards: skipped ({exc}); pip install webdataset pillow torch", file=sys.stderr)
        return []
    images, per_shard = (800, 100) if quick else (8000, 500)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        paths = _write_jpeg_shards(folder, images, per_shard)
        for batch_size in (None, 64):
            def ours() -> int:
                return _count_readerkit(paths, batch_size)

            def theirs() -> int:
                return _count_webdataset(paths, batch_size)

            assert ours() == theirs() == images, "tar shards bench: a sample was lost or doubled"
            readerkit, baseline = best_of([ours, theirs], repeats)
            what = "samples (dicts)" if batch_size is None else f"collated batches of {batch_size} in the workers"
            rows.append(Row(f"tar shards, {images} 64x64 JPEGs in {len(paths)} shards, {what}, 2 processes",
                            readerkit, baseline, 1.0))
    return rows


# -- over HTTP ------------------------------------------------------------------------------------


def _cloud() -> bool:
    try:
        import aiohttp  # noqa: F401
        import fsspec  # noqa: F401
    except ImportError as exc:
        print(f"over HTTP: skipped ({exc}); pip install 'readerkit[cloud]'", file=sys.stderr)
        return False
    return True


def _batches(make: Callable[[int], Any]) -> Callable[[int], int]:
    """A pass of collated batches of ``BATCH`` over ``make(seed)``; the number of batches."""
    def run(seed: int) -> int:
        n = 0
        for columns in batching.collated(batching.batch(make(seed), BATCH))():
            n += 1
        return n
    return run


def _best(runs: dict[str, Callable[[int], int]], repeats: int) -> dict[str, float]:
    """Entries per second of each run, the best of ``repeats`` passes taken in turns, after one warm pass each."""
    for run in runs.values():
        run(99)
    best = dict.fromkeys(runs, 0.0)
    for k in range(repeats):
        for name, run in runs.items():
            best[name] = max(best[name], _rate(run, k) * BATCH)
    return best


def bench_url_tokens(quick: bool = False, repeats: int = 3) -> list[Row]:
    """Token windows over HTTP on loopback against the same windows from the local files."""
    if not _cloud():
        return []
    from readers.network.file_server import serve_folder
    from readers.tokenized.token_objects import block_windows

    files, tokens_per_file, seq_len = (2, 1_000_000, 1024) if quick else (4, 8_000_000, 1024)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as folder, serve_folder(folder) as server:
        for k in range(files):
            rng.integers(0, 50_000, tokens_per_file, dtype=np.uint16).tofile(os.path.join(folder, f"part-{k}.bin"))
        url = f"{server.url}/"
        assert len(readers.tokens(folder, seq_len=seq_len)) == len(readers.tokens(url, seq_len=seq_len))

        def local(seed: int) -> Any:  # built afresh each pass: nothing a pass fetched is kept for the next
            return readers.tokens(folder, seq_len=seq_len)

        def remote(seed: int) -> Any:
            return readers.tokens(url, seq_len=seq_len)
        kept = remote(0)  # one reader for every pass, as a training run keeps it: its fetched blocks stay
        runs = {
            "url": _batches(lambda seed: readers.shuffle_row_groups(remote(seed), window=4, seed=seed)),
            # mapped files have no blocks: groups of as many windows as a block of the URL's (2,048)
            "local": _batches(lambda seed: readers.shuffle_row_groups(local(seed), window=4, seed=seed,
                                                                      group_size=block_windows(seq_len, 2))),
            "url kept": _batches(lambda seed: readers.shuffle_row_groups(kept, window=4, seed=seed)),
            "url global": _batches(lambda seed: readers.shuffle(remote(seed), seed=seed)),
            "local global": _batches(lambda seed: readers.shuffle(local(seed), seed=seed)),
        }
        best = _best(runs, repeats)
    what = f"token windows, {files} x {tokens_per_file * 2 // 10**6} MB .bin, seq_len {seq_len}, batches of {BATCH}"
    return [Row(f"{what}: http on loopback / local files, shuffle_row_groups", best["url"], best["local"], 0.5),
            Row(f"{what}: http on loopback / local files, global shuffle", best["url global"], best["local global"],
                None),
            Row(f"{what}: http, one reader kept across passes / local files, shuffle_row_groups", best["url kept"],
                best["local"], None)]


def bench_url_parquet(quick: bool = False, repeats: int = 3) -> list[Row]:
    """Parquet over HTTP with the local cache warm against the local file."""
    if not _cloud():
        return []
    from readers.network.file_server import serve_folder

    rows, row_group = (6_000, 1024) if quick else (60_000, 4096)
    with tempfile.TemporaryDirectory() as folder, serve_folder(folder) as server, \
            tempfile.TemporaryDirectory() as cache:
        _write_parquet(os.path.join(folder, "train.parquet"), rows, row_group)
        url = f"{server.url}/train.parquet"
        runs = {
            "url": _batches(lambda seed: readers.shuffle_row_groups(
                readers.parquet(url, cache_dir=cache), window=4, seed=seed)),
            "local": _batches(lambda seed: readers.shuffle_row_groups(
                readers.parquet(os.path.join(folder, "train.parquet")), window=4, seed=seed)),
        }
        best = _best(runs, repeats)
    what = f"parquet, {rows:,} rows, shuffle_row_groups, batches of {BATCH}"
    return [Row(f"{what}: http, cache_dir warm / local file", best["url"], best["local"], 0.9)]


# -- the table ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small data: a run of seconds")
    parser.add_argument("--repeats", type=int, default=3, help="passes per configuration; the best is kept")
    args = parser.parse_args(argv)
    benches = [bench for name, bench in sorted(globals().items()) if name.startswith("bench_") and callable(bench)]
    rows = [row for bench in benches for row in bench(quick=args.quick, repeats=args.repeats)]
    print(f"{'row':<80} {'readerkit/s':>12} {'baseline/s':>11} {'ratio':>6}  goal")
    for row in rows:
        goal = "" if row.goal is None else f">= {row.goal:g}x {'met' if row.ratio >= row.goal else 'NOT met'}"
        print(f"{row.name:<80} {row.readerkit:>12.0f} {row.baseline:>11.0f} {row.ratio:>5.2f}x  {goal}")


if __name__ == "__main__":
    main()
