"""readers.mix: random access into a blend, against a precomputed index array (Megatron's way).

For D sources (random weights, 10**5 rows of 16 float32 and a label each,
10**5 * D entries in the mix), the time to find the sources of a batch of 64
random positions (``locate``), to gather their columns (``gather_columns``, what a
collated batch takes) and their entries (``gather``); against the same work with an
index array made up front (two int64 arrays over the whole pass, as Megatron's
``build_blending_indices`` makes: 16 bytes per position, built here from
``locate`` over all positions). The mix itself holds O(D) numbers.

Usage: python benchmarks/mix.py [--sources 2 10 100] [--repeats 7]
Machines here are shared and noisy: the best of the repeats is shown.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import readers  # noqa: E402
from readers.ops.mixing import mix  # noqa: E402

BATCH = 64
ROWS = 10**5


def best(work, repeats: int, calls: int = 200) -> float:
    """The best of ``repeats`` runs of ``calls`` calls, in microseconds per call."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            work()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, nargs="+", default=[2, 10, 100])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    data = readers.from_arrays(rng.random((ROWS, 16), dtype=np.float32), np.arange(ROWS))
    print(f"batch of {BATCH} random positions, microseconds per batch (best of {args.repeats})")
    print(f"{'sources':>7} {'locate':>8} {'columns':>8} {'entries':>8} | {'array lookup':>12} "
          f"{'columns':>8} | {'build array':>11} {'array MB':>8}")
    for d in args.sources:
        m = mix([data] * d, list(rng.random(d) + 0.1), seed=0)
        idx = rng.integers(0, len(m), BATCH)
        locate, columns = best(lambda: m.locate(idx), args.repeats), best(lambda: m.gather_columns(idx), args.repeats)
        entries = best(lambda: list(m.gather(idx)), args.repeats)
        start = time.perf_counter()
        source, k = m.locate(np.arange(len(m)))  # the index array, as a precomputing blend would hold it
        build = time.perf_counter() - start
        lookup = best(lambda: (source[idx], k[idx]), args.repeats)
        sizes = np.array([ROWS] * d)

        def precomputed():
            s, j = source[idx], k[idx] % sizes[source[idx]]
            order = np.argsort(s, kind="stable")
            return [data.gather_columns(j[order][s[order] == g]) for g in np.unique(s)]

        array_columns = best(precomputed, args.repeats)
        print(f"{d:>7} {locate:>8.0f} {columns:>8.0f} {entries:>8.0f} | {lookup:>12.1f} "
              f"{array_columns:>8.0f} | {build:>10.2f}s {(source.nbytes + k.nbytes) / 2**20:>8.0f}")


if __name__ == "__main__":
    main()
