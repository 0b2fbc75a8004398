"""Throughput and memory of the core pipeline, side by side with baselines in one run.

a. Per-entry pipeline on MNIST-shaped data (60000 x 784 uint8, int labels):
   source -> shuffle(buf_size=8192) -> map (label to a Python int) -> batch(128)
   -> collate, then float32/255 once per batch. readerkit (indexed source and
   plain-generator source) against the same work as plain Paddle-style
   generators, and against torch's DataLoader(batch_size=128, shuffle=True,
   num_workers=0) when torch is installed.
b. Indexed path: global shuffle + batch + collate against the raw numpy limit
   (np.random.permutation, then X[idx].astype(np.float32) / 255 per batch, and
   the same with X.take(idx, 0), the faster of numpy's two takes for rows of
   many values: the ratio is to the faster), the three interleaved pass by
   pass, best of --repeats each.
c. Memory: peak RSS of a global shuffle over 10,000,000 entries against
   iterating them in order, each in a fresh process.
d. Start-up: the wall time of a fresh interpreter that imports readers (and
   batching, train) against one that imports numpy alone, interleaved, best of
   --import-repeats each (a bare interpreter shown for scale): with bytecode
   cached, as an installed package runs (in a temporary pycache prefix), then as
   this environment runs them (with PYTHONDONTWRITEBYTECODE set, every module of
   readers is compiled from source at each start, numpy's are not).

Usage: python benchmarks/pipeline.py [--entries 60000] [--repeats 5] [--import-repeats 15] [--system-malloc]
Every row runs with the same allocator settings (tuned as train() tunes them,
or glibc's defaults with --system-malloc).
Machines here are shared and noisy: read the ratios, not the absolute rates.
"""
from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import batching  # noqa: E402
import readers  # noqa: E402
from readers import allocator  # noqa: E402

BATCH = 128
BUF = 8192


def mnist_like(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, size=(n, 784), dtype=np.uint8), rng.integers(0, 10, size=n)


def label_to_int(entry):
    image, label = entry
    return image, int(label)


def to_float(images: np.ndarray) -> np.ndarray:
    return images.astype(np.float32) / 255


# -- a. per-entry pipelines ------------------------------------------------------------


def readerkit_pipeline(source):
    return batching.collated(batching.batch(readers.map_readers(label_to_int, readers.shuffle(source, BUF, seed=0)), BATCH))


def run_readerkit(pipeline) -> int:
    n = 0
    for images, labels in pipeline():
        to_float(images)
        n += len(labels)
    return n


def paddle_style(x: np.ndarray, y: np.ndarray):
    """The same pipeline as plain generators, written the way Paddle's decorators are."""

    def source():
        for i in range(len(x)):
            yield x[i], y[i]

    def shuffled():
        buf = []
        for e in source():
            buf.append(e)
            if len(buf) >= BUF:
                random.shuffle(buf)
                yield from buf
                buf = []
        if buf:
            random.shuffle(buf)
            yield from buf

    def mapped():
        for e in shuffled():
            yield label_to_int(e)

    def batched():
        b = []
        for e in mapped():
            b.append(e)
            if len(b) == BATCH:
                yield b
                b = []
        if b:
            yield b

    def run() -> int:
        n = 0
        for b in batched():
            to_float(np.stack([e[0] for e in b]))
            labels = np.array([e[1] for e in b])
            n += len(labels)
        return n

    return run


def torch_dataloader(x: np.ndarray, y: np.ndarray):
    try:
        import torch
        from torch.utils.data import DataLoader, Dataset
    except ImportError:
        return None

    class Arrays(Dataset):
        def __len__(self):
            return len(x)

        def __getitem__(self, i):
            return x[i], int(y[i])

    loader = DataLoader(Arrays(), batch_size=BATCH, shuffle=True, num_workers=0)
    torch.manual_seed(0)

    def run() -> int:
        n = 0
        for images, labels in loader:
            images.float() / 255
            n += len(labels)
        return n

    return run


# -- b. indexed path --------------------------------------------------------------------


def numpy_limit(x: np.ndarray, y: np.ndarray, take: bool = False):
    """The limit: a permutation, then one take of each array a batch, as ``x[idx]`` or (``take``) ``x.take(idx, 0)``,
    numpy's faster way for rows of many values (readerkit takes rows so: ``readers.plans.take_rows``)."""
    rng = np.random.default_rng(0)

    def run() -> int:
        idx_all = rng.permutation(len(x))
        n = 0
        for start in range(0, len(x), BATCH):
            idx = idx_all[start:start + BATCH]
            to_float(x.take(idx, 0) if take else x[idx])
            n += len(y[idx])
        return n

    return run


def readerkit_global(x: np.ndarray, y: np.ndarray):
    pipeline = batching.collated(batching.batch(readers.shuffle(readers.from_arrays(x, y), seed=0), BATCH))
    return lambda: run_readerkit(pipeline)


# -- c. memory ----------------------------------------------------------------------------

MEMORY_CHILD = """
import sys
sys.path.insert(0, {root!r})
import numpy as np, readers, batching
# numpy.random (and the hashlib it brings) is imported by a shuffle's first pass, not by import readers: import it in
# both children, so that its few MiB of modules do not count as the shuffle's memory
import numpy.random
r = readers.from_arrays(np.arange({n}, dtype=np.int64))
if {shuffled}:
    r = readers.shuffle(r, seed=0)
total = 0
for (ids,) in batching.collated(batching.batch(r, 1024))():
    total += len(ids)
assert total == {n}
# VmHWM belongs to this address space; ru_maxrss would carry the parent's peak across exec
print(next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:")))
"""


def peak_rss_kib(n: int, shuffled: bool) -> int:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = MEMORY_CHILD.format(root=root, n=n, shuffled=shuffled)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return int(out.stdout.strip())


# -- d. start-up ---------------------------------------------------------------------------------

IMPORTS = {"bare interpreter": "pass", "import numpy": "import numpy", "import readers": "import readers",
           "import batching": "import batching", "import train": "import train"}


def import_seconds(repeats: int, names: list[str], env: dict[str, str]) -> dict[str, float]:
    """Best wall time of a fresh interpreter running each of ``names`` (of IMPORTS), the interpreters started in turn
    after one that is not timed (it writes the bytecode where ``env`` lets it)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    best = dict.fromkeys(names, float("inf"))
    for timed in [False] + [True] * repeats:
        for name in names:
            t = time.perf_counter()
            subprocess.run([sys.executable, "-c", IMPORTS[name]], cwd=root, env=env, check=True)
            if timed:
                best[name] = min(best[name], time.perf_counter() - t)
    return best


def import_rows(repeats: int) -> list[tuple]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="readerkit-pycache-") as prefix:
        cached = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        cached["PYTHONPYCACHEPREFIX"] = prefix
        modes = [("bytecode cached", list(IMPORTS), cached)]
        if os.environ.get("PYTHONDONTWRITEBYTECODE"):
            modes.append(("no bytecode written", ["import numpy", "import readers"], dict(os.environ)))
        for mode, names, env in modes:
            took = import_seconds(repeats, names, env)
            for name, seconds in took.items():
                note = "s, baseline" if name == "import numpy" else f"s, {seconds / took['import numpy']:.2f}x numpy"
                if name == "import readers":
                    note += " (goal < 0.25 s)"
                rows.append(("d", f"{name}, {mode}", seconds, note))
    return rows


# -- driver ----------------------------------------------------------------------------------


def rate(run, repeats: int) -> float:
    """Best entries per second over ``repeats`` full passes (the least disturbed one)."""
    return rates([run], repeats)[0]


def rates(runs: list, repeats: int) -> list[float]:
    """Best entries per second of each run over ``repeats`` rounds that run each once, in turn: a load that
    comes and goes meets every run alike, so their ratio holds up better than one run after the other."""
    best = [0.0] * len(runs)
    for _ in range(repeats):
        for k, run in enumerate(runs):
            t = time.perf_counter()
            n = run()
            best[k] = max(best[k], n / (time.perf_counter() - t))
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=60000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--memory-entries", type=int, default=10_000_000)
    parser.add_argument("--import-repeats", type=int, default=15, help="fresh interpreters per import in d (0: skip d)")
    parser.add_argument("--system-malloc", action="store_true",
                        help="leave glibc's allocator alone (by default every row runs with readers.tune_allocator(), as train() does)")
    args = parser.parse_args(argv)
    if args.system_malloc:
        os.environ["READERKIT_MALLOC"] = "system"
    else:
        # tuned before any row runs, as train() tunes it, so every row gets the same allocator
        allocator.tune_allocator()
    x, y = mnist_like(args.entries)

    def source_gen():
        for i in range(len(x)):
            yield x[i], y[i]

    rows = []
    plain = rate(paddle_style(x, y), args.repeats)
    rows.append(("a", "plain generators (Paddle style)", plain, "baseline"))
    indexed = rate(lambda: run_readerkit(readerkit_pipeline(readers.from_arrays(x, y))), args.repeats)
    rows.append(("a", "readerkit, indexed source", indexed, f"{indexed / plain:.2f}x plain (goal >= 1.5x)"))
    stream = rate(lambda: run_readerkit(readerkit_pipeline(source_gen)), args.repeats)
    rows.append(("a", "readerkit, generator source", stream, f"{stream / plain:.2f}x plain"))
    loader = torch_dataloader(x, y)
    if loader is not None:
        torch_rate = rate(loader, max(1, args.repeats // 2))
        rows.append(("a", "torch DataLoader, num_workers=0", torch_rate, f"{torch_rate / plain:.2f}x plain"))
        rows.append(("a", "readerkit indexed / torch", indexed / torch_rate, "ratio (goal >= 3x)"))
    else:
        rows.append(("a", "torch DataLoader", float("nan"), "torch not installed"))
    indexing, taking, glob = rates([numpy_limit(x, y), numpy_limit(x, y, take=True), readerkit_global(x, y)],
                                   2 * args.repeats)
    limit = max(indexing, taking)
    rows.append(("b", "raw numpy limit, x[idx]", indexing, "baseline" if indexing >= taking else ""))
    rows.append(("b", "raw numpy limit, x.take(idx, 0)", taking, "baseline" if taking > indexing else ""))
    rows.append(("b", "readerkit global shuffle+batch+collate", glob,
                 f"{glob / limit:.3f}x the faster limit (goal >= 0.97x); {glob / indexing:.3f}x x[idx]"))
    if args.memory_entries:
        ordered = peak_rss_kib(args.memory_entries, False)
        shuffled = peak_rss_kib(args.memory_entries, True)
        delta = (shuffled - ordered) / 1024
        rows.append(("c", f"peak RSS in order, {args.memory_entries:,} entries", ordered / 1024, "MiB"))
        rows.append(("c", "peak RSS with global shuffle", shuffled / 1024, f"MiB, +{delta:.1f} MiB (goal < 10 MB)"))
    if args.import_repeats:
        rows += import_rows(args.import_repeats)

    print(f"{'':2} {'pipeline':42} {'entries/s or MiB':>18}  note")
    for part, name, value, note in rows:
        shown = f"{value:,.0f}" if value > 100 else f"{value:.3f}" if part == "d" else f"{value:.2f}"
        print(f"{part:2} {name:42} {shown:>18}  {note}")


if __name__ == "__main__":
    main()
