"""The round coordinator's costs: assign_batches over many clients, the batch-size schedule, a client's share.

a. assign_batches for 10,000 clients (rank ints, and names), a batch of 32,768
   samples: the median of many calls, against the 10 ms budget of a round.
b. BatchSchedule for the reference's largest run (12,288 -> 32,768 samples over
   540B tokens of 2,048): building it, and one data_index / step_at question.
c. round_share: opening a client's share deep in a pass of a 10,000,000-entry
   shuffled reader and reading it in collated batches.

Usage: python benchmarks/rounds.py [--clients 10000] [--repeats 50]
Machines here are shared and noisy: read the medians, not single runs.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import batching  # noqa: E402
import readers  # noqa: E402
from readers.tokenized.rounds import assign_batches, round_share  # noqa: E402
from readers.tokenized.schedule import BatchSchedule  # noqa: E402

BUDGET_MS = 10.0


def timings_ms(work, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        work()
        times.append((time.perf_counter() - t) * 1e3)
    return times


def median_ms(work, repeats: int) -> float:
    return statistics.median(timings_ms(work, repeats))


def bench_assign(clients: int, repeats: int) -> None:
    for kind, ids in (("rank ints", list(range(clients))), ("names", [f"client-{i:06d}" for i in range(clients)])):
        ids = ids[::-1]  # not sorted already
        times = timings_ms(lambda: assign_batches(ids, data_index=10 ** 9, global_batch_size=32768, seed=7), repeats)
        ms = statistics.median(times)
        verdict = "within" if ms < BUDGET_MS else "OVER"
        print(f"a. assign_batches, {clients} clients ({kind}): {ms:.2f} ms median, {min(times):.2f} ms best "
              f"({verdict} the {BUDGET_MS:.0f} ms budget)")


def bench_schedule(repeats: int) -> None:
    t = time.perf_counter()
    schedule = BatchSchedule(start=12288, end=32768, warmup_tokens=549755813888, seq_len=2048)
    built = (time.perf_counter() - t) * 1e3
    steps = np.random.default_rng(0).integers(0, 325000, 1000).tolist()
    ms = median_ms(lambda: [schedule.data_index(s) for s in steps], repeats) / len(steps)
    back = median_ms(lambda: [schedule.step_at(10 ** 9 + s) for s in steps], repeats) / len(steps)
    print(f"b. BatchSchedule (12288 -> 32768 over 540B tokens): built in {built:.1f} ms "
          f"({schedule.warmup_steps} warm-up steps); data_index {ms * 1e3:.1f} us, step_at {back * 1e3:.1f} us a call")


def bench_share(repeats: int) -> None:
    n = 10_000_000
    source = readers.from_arrays(np.zeros((n, 4), dtype=np.uint8), np.zeros(n, dtype=np.int32))
    data = readers.shuffle(source, seed=0)
    assignment = assign_batches(range(64), data_index=3 * n - 4000, global_batch_size=64 * 1024, seed=1)
    client = next(c for c, (start, end) in assignment.items() if start < 3 * n <= end)  # from pass 2 into pass 3
    ms = median_ms(lambda: [b for b in batching.collated(batching.batch(round_share(data, assignment, client),
                                                                        256))()], max(3, repeats // 10))
    print(f"c. round_share of {assignment[client]} over a shuffle of {n} entries: 1024 samples in "
          f"{ms:.2f} ms, opened and read in collated batches of 256")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    bench_assign(args.clients, args.repeats)
    bench_schedule(args.repeats)
    bench_share(args.repeats)


if __name__ == "__main__":
    main()
