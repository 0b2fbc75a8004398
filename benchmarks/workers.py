"""Prefetch and parallel workers (issue 5): speed-ups and overheads against baselines in one run.

1. CPU-bound map: a deterministic pure-Python function holding the GIL,
   calibrated here to about 50 us per entry (the rows show the serial
   time per entry measured), over 20,000 ints.
   ``prefetch(map_readers(f, src), 2, mode="process")`` against the serial
   ``map_readers(f, src)``, for an indexed source (``from_sequence``) and a
   stream (a plain generator function), and
   ``xmap_readers(f, src, 2, 256, order=True, mode="process")``. Goal: >= 1.7x.
   Row 1d is the ceiling: the same work split over two bare processes, which
   shows how much parallelism the (shared) machine gave during the run. Row 1e
   is one process worker against serial: what the hand-off costs per entry
   (issue 17's goal: >= 0.95x); row 1f the same with ``persistent=True``,
   whose passes after the first start no process. Rows 1g and 1h hold the
   limit (issue 32): ``multiprocessing.Pool(2).imap(f, ..., chunksize=256)``,
   start and join included, against prefetch with 2 processes and the same
   with ``persistent=True``. Goal: >= 0.9x.
2. Trivial map (x + 1) over 2,000,000 ints: prefetch with 2 processes (goal
   >= 0.8x serial) and 2 threads (for information). Beside it, torch's
   DataLoader on the same data and work (a map-style dataset whose item i is
   i + 1, batch_size=None), num_workers=2 against num_workers=0, over the
   first 50,000 ints only (it is 20 to 500 times slower), and readerkit's 2
   processes against its 2 workers. Measured last (a DataLoader leaves a
   thread behind, which would turn readerkit's automatic start method to
   spawn); skipped without torch.
3. MNIST-shaped data through 2 process workers, and serially for reference:
   entries (28x28 uint8 image, int64 label) of ``from_arrays``, and collated
   batches of 64 (a (64, 28, 28) uint8 array and 64 int64 labels). Figure:
   GB/s of array bytes delivered to a consumer that reads the first byte of
   every image, and the bytes that crossed through shared memory (alignment
   included); baseline: ``np.copyto`` of the same bytes in the same chunk sizes
   into a preallocated buffer. No goal in the issue: for information.
4. Overlap: a producer that sleeps t = 20 ms per batch, 25 batches, and a
   consumer that sleeps t per batch: serially about 2t per batch; through
   ``prefetch(producer, 1)`` in a thread and in a process. Goal: <= 1.15 t.

Every figure is the best of ``--repeats`` passes (the least disturbed one);
the configurations of a row take turns, so a noisy spell hits them all. A
pass's time includes starting and joining its workers. Process workers use
``--start-method`` (default: readerkit's own choice, fork while this process
has no other threads). Progress, and each prefetch stage's ``stats()`` of its
best pass, go to stderr; the table goes to stdout. Machines here are shared
and noisy: read the ratios, not the absolute rates, and read row 1 against 1d.

Usage: python benchmarks/workers.py [--quick] [--repeats 5] [--start-method spawn]
(``--quick`` shrinks every size so the whole run takes well under a minute.)
"""
from __future__ import annotations

import argparse
import functools
import math
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import batching  # noqa: E402
import readers  # noqa: E402
from readers import allocator  # noqa: E402
from readers.workers.channels import pick_start_method  # noqa: E402

ENTRY_US = 50  # row 1's work per entry
POOL_CHUNK = 256  # rows 1g and 1h: the Pool's chunksize (256 entries of 50 us: 13 ms a chunk)
XMAP_BUFFER = 256  # row 1's xmap_readers buffer_size
BATCH = 64  # row 3's batch size
SIZES = {  # name: (default, --quick)
    "cpu": (20_000, 6_000),
    "trivial": (2_000_000, 500_000),
    "torch": (50_000, 5_000),
    "mnist": (60_000, 20_000),
    "batches": (25, 25),
}


class Measure(NamedTuple):
    seconds: float  # of the best pass
    result: Any  # what that pass's consumer returned
    stats: dict | None  # the prefetch stage's stats() of that pass


class Row(NamedTuple):
    name: str
    figure: str
    baseline: str
    ratio: float
    unit: str  # how the ratio is shown: "x" (higher is better) or "t" (lower is better)
    target: float | None
    stats: dict | None = None


# -- what crosses into workers: module-level, so spawned workers can import it ----------


def busy(x: int, rounds: int) -> int:
    """``rounds`` steps of a linear congruential generator from ``x``: pure Python, holds the GIL."""
    for _ in range(rounds):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    return x


def plus_one(x: int) -> int:
    return x + 1


def ints(n: int):
    """A stream source: 0 .. n-1 from a plain generator (no length, no random access)."""
    yield from range(n)


def slow_batches(n: int, t: float):
    """A producer that takes ``t`` seconds per batch without holding the GIL."""
    for i in range(n):
        time.sleep(t)
        yield i


class PlusOne:
    """torch's map-style dataset for row 2 (duck-typed, so this module imports without torch)."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i + 1


# -- consumers: each returns what it counted -------------------------------------------------


def count(entries: Iterable) -> int:
    n = 0
    for _ in entries:
        n += 1
    return n


def touch_entries(entries: Iterable) -> int:
    """Read the first byte of every image, so no transfer can be skipped lazily; the array bytes seen."""
    nbytes = seen = 0
    for image, _label in entries:
        seen += int(image[0, 0])
        nbytes += image.nbytes
    return nbytes


def touch_batches(entries: Iterable) -> int:
    nbytes = seen = 0
    for images, labels in entries:
        seen += int(images[:, 0, 0].sum()) + int(labels[0])
        nbytes += images.nbytes + labels.nbytes
    return nbytes


def slow_consumer(entries: Iterable, t: float) -> int:
    n = 0
    for _ in entries:
        time.sleep(t)
        n += 1
    return n


def memcpy(columns: tuple[np.ndarray, ...], rows: int) -> int:
    """np.copyto of ``rows`` rows at a time of each column into preallocated buffers; the bytes moved."""
    buffers = [np.empty_like(c[:rows]) for c in columns]
    nbytes = 0
    for start in range(0, len(columns[0]), rows):
        for column, buf in zip(columns, buffers):
            chunk = column[start:start + rows]
            np.copyto(buf[:len(chunk)], chunk)
            nbytes += chunk.nbytes
    return nbytes


# -- measuring ---------------------------------------------------------------------------------


def best_of(run: Callable[[], Any], repeats: int) -> Measure:
    """The fastest of ``repeats`` calls of ``run``."""
    return interleaved([(run, None)], repeats)[0]


def trial(reader: Any, consume: Callable[[Iterable], Any]) -> tuple[Callable[[], Any], Any]:
    """A full pass of ``reader`` through ``consume``, and the stage whose stats() describe it (or None)."""
    return (lambda: consume(reader())), (reader if hasattr(reader, "stats") else None)


def interleaved(trials: list[tuple[Callable[[], Any], Any]], repeats: int) -> list[Measure]:
    """The best of ``repeats`` runs of each trial, with its stage's stats() of that run.

    The trials take turns, so a noisy spell on the machine hits all of them,
    not just the one that happened to run then.
    """
    best = [Measure(math.inf, None, None)] * len(trials)
    for _ in range(repeats):
        for k, (run, stage) in enumerate(trials):
            t0 = time.perf_counter()
            result = run()
            seconds = time.perf_counter() - t0
            if seconds < best[k].seconds:
                best[k] = Measure(seconds, result, stage.stats() if stage is not None else None)
    return best


def rate(m: Measure) -> float:
    return m.result / m.seconds


def progress(row: Row) -> None:
    line = f"  {row.name}: {row.figure} (baseline {row.baseline})"
    s = row.stats
    if s:
        line += (f"; stats: consumer_wait {s.get('consumer_wait', 0):.2f}, output_wait "
                 f"{s.get('output_wait', 0):.2f}, input_wait {s.get('input_wait', 0):.2f}, "
                 f"queue_fill {s.get('queue_fill', 0):.2f}, shm {s.get('shm_bytes', 0) / 1e6:.1f} MB")
    print(line, file=sys.stderr, flush=True)


def speedup(name: str, fast: Measure, slow: Measure, unit: str, target: float | None,
            ceiling: Measure | None = None) -> Row:
    """A throughput row: ``fast`` against the baseline ``slow``, both as counts per second.

    ``ceiling``: the best this machine allowed in the same run; the figure says how close ``fast`` came.
    """
    figure = f"{rate(fast):,.0f} {unit}"
    if ceiling is not None:
        figure += f" ({rate(fast) / rate(ceiling):.0%} of the ceiling)"
    row = Row(name, figure, f"{rate(slow):,.0f} {unit}", rate(fast) / rate(slow), "x", target, fast.stats)
    progress(row)
    return row


def gbps(m: Measure) -> float:
    return m.result / m.seconds / 1e9


# -- rows ---------------------------------------------------------------------------------------


def calibrate(us: float) -> int:
    """LCG rounds that take about ``us`` microseconds here: the best of many short timings,
    as one of them is likely to fall in a quiet moment of a shared machine."""
    trial_rounds, calls = 1000, 50
    t = best_of(lambda: [busy(i, trial_rounds) for i in range(calls)], 30).seconds
    return max(1, round(us * 1e-6 / (t / (calls * trial_rounds))))


def busy_share(n: int, rounds: int, w: int, workers: int) -> None:
    for x in range(w, n, workers):
        busy(x, rounds)


def bare_processes(n: int, rounds: int, workers: int, start_method: str | None) -> int:
    """The same work split over plain processes, no readerkit: what this machine allows right now."""
    ctx = multiprocessing.get_context(pick_start_method(start_method))
    procs = [ctx.Process(target=busy_share, args=(n, rounds, w, workers)) for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    return n


def pool_imap(n: int, rounds: int, workers: int, start_method: str | None) -> int:
    """The same work through ``multiprocessing.Pool.imap``, results taken in order as they come: the limit."""
    with multiprocessing.get_context(pick_start_method(start_method)).Pool(workers) as pool:
        return count(pool.imap(functools.partial(busy, rounds=rounds), range(n), chunksize=POOL_CHUNK))


def cpu_rows(n: int, repeats: int, start_method: str | None) -> list[Row]:
    rounds = calibrate(ENTRY_US)
    work = functools.partial(busy, rounds=rounds)
    indexed, stream = readers.from_sequence(range(n)), functools.partial(ints, n)
    process = {"mode": "process", "start_method": start_method}
    kept = readers.prefetch(readers.map_readers(work, indexed), 1, persistent=True, **process)
    kept2 = readers.prefetch(readers.map_readers(work, indexed), 2, persistent=True, **process)
    (serial, serial_stream, single, single_kept, parallel, parallel_stream, xmap, bare, parallel_kept,
     pool) = interleaved([
        trial(readers.map_readers(work, indexed), count),
        trial(readers.map_readers(work, stream), count),
        trial(readers.prefetch(readers.map_readers(work, indexed), 1, **process), count),
        trial(kept, count),  # its first pass starts the worker; the best of the later ones counts
        trial(readers.prefetch(readers.map_readers(work, indexed), 2, **process), count),
        trial(readers.prefetch(readers.map_readers(work, stream), 2, **process), count),
        trial(readers.xmap_readers(work, indexed, 2, XMAP_BUFFER, order=True, **process), count),
        (functools.partial(bare_processes, n, rounds, 2, start_method), None),
        trial(kept2, count),
        (functools.partial(pool_imap, n, rounds, 2, start_method), None),
    ], repeats)
    kept.close()
    kept2.close()
    us = serial.seconds / n * 1e6
    print(f"  1: {rounds} LCG rounds per entry, {us:.0f} us per entry serially; "
          f"the machine gives 2 bare processes {rate(bare) / rate(serial):.2f}x", file=sys.stderr)
    return [
        speedup(f"1a {us:.0f} us map, indexed: prefetch 2 proc / serial", parallel, serial, "entries/s", 1.7,
                bare),
        speedup(f"1b {us:.0f} us map, stream: prefetch 2 proc / serial", parallel_stream, serial_stream,
                "entries/s", 1.7, bare),
        speedup(f"1c {us:.0f} us map: xmap_readers 2 proc / serial", xmap, serial, "entries/s", 1.7, bare),
        speedup("1d ceiling: the same work in 2 bare processes / serial", bare, serial, "entries/s", None),
        speedup(f"1e {us:.0f} us map, indexed: prefetch 1 proc / serial (the per-entry cost)", single, serial,
                "entries/s", 0.95),
        speedup(f"1f {us:.0f} us map, indexed: prefetch 1 proc, persistent / serial (no start)", single_kept,
                serial, "entries/s", 0.95),
        speedup(f"1g {us:.0f} us map, indexed: prefetch 2 proc / Pool(2).imap, chunksize {POOL_CHUNK}", parallel,
                pool, "entries/s", 0.9),
        speedup(f"1h {us:.0f} us map, indexed: prefetch 2 proc, persistent / Pool(2).imap", parallel_kept, pool,
                "entries/s", 0.9),
    ]


def torch_dataloader() -> Any:
    """torch's DataLoader class, or None when torch cannot be imported."""
    try:
        from torch.utils.data import DataLoader
    except ImportError:
        return None
    return DataLoader


def trivial_rows(n: int, repeats: int, start_method: str | None) -> tuple[list[Row], Measure]:
    """Rows 2a and 2b, and the 2-process measure for 2d."""
    source = readers.from_sequence(range(n))
    serial, processes, threads = interleaved([
        trial(readers.map_readers(plus_one, source), count),
        trial(readers.prefetch(readers.map_readers(plus_one, source), 2, mode="process",
                               start_method=start_method), count),
        trial(readers.prefetch(readers.map_readers(plus_one, source), 2), count),
    ], repeats)
    return [
        speedup("2a x + 1: prefetch 2 proc / serial", processes, serial, "entries/s", 0.8),
        speedup("2b x + 1: prefetch 2 threads / serial", threads, serial, "entries/s", None),
    ], processes


def torch_rows(n: int, repeats: int, readerkit: Measure) -> list[Row]:
    """Rows 2c and 2d; run last, as a DataLoader leaves a thread behind, which would make
    readerkit's automatic start method spawn for any row after it."""
    loader = torch_dataloader()
    if loader is None:
        print("  2c, 2d: torch is not installed, skipped", file=sys.stderr)
        return []
    torch0, torch2 = interleaved([(lambda: count(loader(PlusOne(n), batch_size=None, num_workers=0)), None),
                                  (lambda: count(loader(PlusOne(n), batch_size=None, num_workers=2)), None)],
                                 repeats)
    return [
        speedup(f"2c x + 1, torch DataLoader ({n:,}): 2 workers / 0", torch2, torch0, "entries/s", None),
        speedup("2d x + 1, 2 workers: readerkit proc / torch", readerkit, torch2, "entries/s", None),
    ]


def transfer(name: str, moved: Measure, copied: Measure) -> Row:
    shm = (moved.stats or {}).get("shm_bytes", 0)
    figure = f"{gbps(moved):.2f} GB/s" + (f" ({shm / 1e6:.1f} MB via shm)" if moved.stats else "")
    row = Row(name, figure, f"{gbps(copied):.2f} GB/s memcpy", gbps(moved) / gbps(copied), "x", None, moved.stats)
    progress(row)
    return row


def mnist_rows(n: int, repeats: int, start_method: str | None) -> list[Row]:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    y = rng.integers(0, 10, size=n, dtype=np.int64)
    source = readers.from_arrays(x, y)
    batches = batching.collated(batching.batch(source, BATCH))
    process = {"mode": "process", "start_method": start_method}
    entries2, entries1, copy_entries, batches2, batches1, copy_batches = interleaved([
        trial(readers.prefetch(source, 2, **process), touch_entries),
        trial(source, touch_entries),
        (functools.partial(memcpy, (x,), 1), None),
        trial(readers.prefetch(batches, 2, **process), touch_batches),
        trial(batches, touch_batches),
        (functools.partial(memcpy, (x, y), BATCH), None),
    ], repeats)
    print(f"  3: {entries1.result / 1e6:.1f} MB of images per pass", file=sys.stderr)
    return [
        transfer("3a MNIST entries, 2 proc: GB/s / memcpy (784 B)", entries2, copy_entries),
        transfer("3b MNIST entries, serial: GB/s / memcpy (784 B)", entries1, copy_entries),
        transfer(f"3c MNIST batches of {BATCH}, 2 proc: GB/s / memcpy", batches2, copy_batches),
        transfer(f"3d MNIST batches of {BATCH}, serial: GB/s / memcpy", batches1, copy_batches),
    ]


def overlap_rows(n: int, t: float, repeats: int, start_method: str | None) -> list[Row]:
    producer = functools.partial(slow_batches, n, t)
    consume = functools.partial(slow_consumer, t=t)
    cases = [
        ("4a overlap, serial: s per batch / t", producer, None),
        ("4b overlap, prefetch 1 thread: s per batch / t", readers.prefetch(producer, 1), 1.15),
        ("4c overlap, prefetch 1 proc: s per batch / t",
         readers.prefetch(producer, 1, mode="process", start_method=start_method), 1.15),
    ]
    measures = interleaved([trial(reader, consume) for _, reader, _ in cases], repeats)
    rows = []
    for (name, _, target), m in zip(cases, measures):
        per_batch = m.seconds / m.result
        row = Row(name, f"{per_batch * 1e3:.1f} ms", f"t = {t * 1e3:.0f} ms", per_batch / t, "t", target, m.stats)
        progress(row)
        rows.append(row)
    return rows


# -- report -------------------------------------------------------------------------------------


def met(row: Row) -> str:
    if row.target is None:
        return "info"
    ok = row.ratio >= row.target if row.unit == "x" else row.ratio <= row.target
    return "yes" if ok else "NO"


def table(rows: list[Row]) -> str:
    lines = ["| row | figure | baseline | ratio | target | met? |", "|---|---|---|---|---|---|"]
    for r in rows:
        ratio = f"{r.ratio:.{2 if r.ratio >= 0.1 else 3}f}" + ("x" if r.unit == "x" else " t")
        target = "-" if r.target is None else (f">= {r.target}x" if r.unit == "x" else f"<= {r.target} t")
        lines.append(f"| {r.name} | {r.figure} | {r.baseline} | {ratio} | {target} | {met(r)} |")
    return "\n".join(lines)


def section(title: str) -> None:
    print(title, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: the whole run in well under a minute")
    parser.add_argument("--repeats", type=int, default=None, help="passes per figure, the best counts (5; --quick 2)")
    parser.add_argument("--start-method", choices=["fork", "spawn", "forkserver"], default=None,
                        help="for process workers (default: readerkit's automatic choice)")
    args = parser.parse_args(argv)
    size = {k: v[1] if args.quick else v[0] for k, v in SIZES.items()}
    repeats = args.repeats or (2 if args.quick else 5)
    # every row runs with the allocator settings train() applies
    allocator.tune_allocator()
    method = args.start_method or f"automatic, now {pick_start_method(None)}"
    print(f"{os.cpu_count()} CPUs, best of {repeats}, process workers: {method}", file=sys.stderr)
    started = time.perf_counter()
    rows: list[Row] = []
    section("1. CPU-bound map")
    rows += cpu_rows(size["cpu"], repeats, args.start_method)
    section("2. trivial map")
    trivial, processes = trivial_rows(size["trivial"], repeats, args.start_method)
    rows += trivial
    section("3. MNIST-shaped transfer")
    rows += mnist_rows(size["mnist"], repeats, args.start_method)
    section("4. prefetch overlap")
    rows += overlap_rows(size["batches"], 0.020, repeats, args.start_method)
    section("2. (torch) trivial map")
    rows += torch_rows(size["torch"], repeats, processes)
    rows.sort(key=lambda row: row.name.split()[0])
    print(f"done in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    print(table(rows))


if __name__ == "__main__":
    main()
