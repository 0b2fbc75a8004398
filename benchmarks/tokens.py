"""Token windows: readerkit's pipeline against the raw numpy limit, and its memory, in one run.

a. Throughput: windows of seq_len + 1 = 1025 tokens (token_size 2) from a
   file of --tokens tokens, through readers.tokens -> global shuffle ->
   batch(64) -> collate, against the raw numpy limit: random window starts,
   then a fancy-index gather of the 64 windows from the memory map, as int32
   (two forms: a 2-D index array, and rows of a strided view of the map).
   Goal: readerkit at >= 0.8x the faster raw form.
b. Memory: what the reader allocates beyond the mapping, by tracemalloc (numpy
   reports its buffers to it; the mapping's pages are the kernel's): after it
   is built, and at the peak of a pass's first --batches batches. Goal for
   100M tokens: under 10 MB.

Usage: python benchmarks/tokens.py [--tokens 100000000] [--batches 400] [--repeats 3]
The token file is written to a temporary folder and removed afterwards.
Machines here are shared and noisy: read the ratios, not the absolute rates.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import tracemalloc

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import batching  # noqa: E402
import readers  # noqa: E402

SEQ_LEN, BATCH = 1024, 64


def write_tokens(path: str, n: int) -> None:
    """n random 2-byte tokens, written in blocks so that the writer's memory stays small."""
    rng = np.random.default_rng(0)
    with open(path, "wb") as f:
        for lo in range(0, n, 1 << 24):
            rng.integers(0, 50257, size=min(1 << 24, n - lo), dtype=np.uint16).astype("<u2").tofile(f)


def raw_index(mm: np.ndarray, batches: int, seed: int) -> float:
    """Batches/s of the raw limit with a 2-D index array: starts[:, None] + arange(1025)."""
    rng = np.random.default_rng(seed)
    windows, offsets = (len(mm) - 1) // SEQ_LEN, np.arange(SEQ_LEN + 1)
    start = time.perf_counter()
    for _ in range(batches):
        starts = rng.integers(0, windows, size=BATCH) * SEQ_LEN
        batch = mm[starts[:, None] + offsets].astype(np.int32)
    assert batch.shape == (BATCH, SEQ_LEN + 1)
    return batches / (time.perf_counter() - start)


def raw_strided(mm: np.ndarray, batches: int, seed: int) -> float:
    """Batches/s of the raw limit as rows of a strided view of the map."""
    rng = np.random.default_rng(seed)
    windows = (len(mm) - 1) // SEQ_LEN
    view = np.lib.stride_tricks.as_strided(mm, shape=(windows, SEQ_LEN + 1), strides=(SEQ_LEN * 2, 2),
                                           writeable=False)
    start = time.perf_counter()
    for _ in range(batches):
        batch = view[rng.integers(0, windows, size=BATCH)].astype(np.int32)
    assert batch.shape == (BATCH, SEQ_LEN + 1)
    return batches / (time.perf_counter() - start)


def pipeline(path: str, seed: int):
    return batching.collated(batching.batch(readers.shuffle(readers.tokens(path, seq_len=SEQ_LEN), seed=seed), BATCH))


def readerkit(path: str, batches: int, seed: int) -> float:
    it = pipeline(path, seed)()
    start = time.perf_counter()
    for _, batch in zip(range(batches), it):
        pass
    elapsed = time.perf_counter() - start
    assert batch.shape == (BATCH, SEQ_LEN + 1) and batch.dtype == np.int32
    return batches / elapsed


def memory(path: str, batches: int) -> tuple[float, float]:
    """(MB the reader holds once built, MB at the peak of its first batches), beyond the mapping."""
    tracemalloc.start()
    reader = pipeline(path, 0)
    built = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    for _, batch in zip(range(batches), reader()):
        pass
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return built / 1e6, peak / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=100_000_000)
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    # whole batches of one pass: a shorter file gives fewer
    args.batches = min(args.batches, ((args.tokens - 1) // SEQ_LEN) // BATCH)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "tokens.bin")
        write_tokens(path, args.tokens)
        mm = np.memmap(path, dtype="<u2", mode="r")
        for fn in (raw_index, raw_strided):
            fn(mm, 20, 99)  # page the file in once, so no row pays for the first reads
        rates: dict[str, list[float]] = {"raw, 2-D index": [], "raw, strided rows": [], "readerkit": []}
        for k in range(args.repeats):  # interleaved, so that a noisy neighbour hits every row alike
            rates["raw, 2-D index"].append(raw_index(mm, args.batches, k))
            rates["raw, strided rows"].append(raw_strided(mm, args.batches, k))
            rates["readerkit"].append(readerkit(path, args.batches, k))
        best = {name: max(r) for name, r in rates.items()}
        limit = max(best["raw, 2-D index"], best["raw, strided rows"])
        print(f"a. {args.tokens:,} tokens, windows of {SEQ_LEN + 1}, batches of {BATCH} (best of {args.repeats}):")
        for name, rate in best.items():
            print(f"   {name:<18} {rate:8.1f} batches/s  {rate * BATCH * SEQ_LEN / 1e6:7.1f} M tokens/s  "
                  f"{rate / limit:5.2f}x the faster raw form")
        built, peak = memory(path, min(args.batches, 100))
        print(f"b. memory beyond the mapping: {built:.3f} MB once built, {peak:.2f} MB at the peak of a pass "
              f"(one batch is {BATCH * (SEQ_LEN + 1) * 4 / 1e6:.2f} MB of int32)")
        del mm


if __name__ == "__main__":
    main()
