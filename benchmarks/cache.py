"""Cached maps (readers.cached): memory hits, warm disk hits, pass 2 against pass 1, and the disk tier against
what a user would write instead, every ratio against a baseline measured in the same run.

1. Memory hits: small entries (a float32[16] array and an int label) of
   ``shuffle(cached(np_array(ids), f), seed=0)``, after a first pass has
   computed them all, so that every later pass is memory hits only. The
   limit: the same pipeline over the precomputed results,
   ``shuffle(from_arrays(features, labels))``, and both pipelines under
   ``batching.batch(..., 64)``; goals: >= 0.7x the limit, each way, and >=
   500,000 entries/s. For scale, a plain dict lookup of every key in a
   shuffled order (1b). Every pass measured has an order of its own (a pass
   in the order of the one before it finds the entries in the CPU's caches).
2. Warm disk hits: MNIST-sized entries (784 float32) with memory_bytes=0, so
   every hit reads the disk tier, from the folder a first pass wrote and
   flushed. One process reading a shuffled pass, then two at once (spawned,
   started together by a barrier), each reading a whole pass, or half of one
   (``shard(..., k, 2)``): entries/s in all, from the first start to the last
   end, and the 2/1 scaling. Rows 2a-2c read the tier as it stores these
   entries (the row says how: dense files, its fast path for fixed-shape
   entries keyed by sample IDs, or sqlite blobs); when that is dense files,
   rows 2d-2f read the same entries cached with ``key=`` (keys that are not
   sample IDs), which stay sqlite blobs. Every reading process counts its
   misses: any miss stops the run (the disk was not warm). Goal: >= 50,000
   entries/s from one process. 2a is 4a read in a process of its own; its
   limit, a memmap copying row k, is 4d.
3. Pass 2 against pass 1 of a map that takes 1 ms per entry: a busy loop
   (pure Python, holding the GIL, calibrated here to 1 ms on a quiet core;
   the row shows the time it took; not a sleep, so the work takes a core as
   real preprocessing does) that returns 784 float32, cached with a
   directory. Pass 1 computes and writes (its time includes the end-of-pass
   flush); pass 2 reads the same reader again (memory hits), and "a new
   reader" is a fresh ``cached`` on the same folder, as a new run or a
   worker process would start (disk hits, then memory). Goal: pass 1 / pass
   2 >= 50x.
4. The disk tier against the simplest things a user would write instead, on
   the same warm workload as 2 (every key once, in a shuffled order, 784
   float32): (a) ``cached``, memory_bytes=0, through ``shuffle``, against
   its limit (d), goal >= 0.8x; (b) the
   same with ``key=``, so sqlite blobs; (c) one ``.npy`` file per key,
   ``np.load`` in a loop; (d) a dense ``np.lib.format.open_memmap`` of shape
   (N, 784), a copy of row k in a loop (keys that are dense ints); (e) that
   memmap through ``shuffle(np_array(mm))``; (f) the sqlite floor: (b)'s
   database read with bare sqlite3 (the same SELECT of 64 keys,
   ``np.frombuffer``), no checksum and no decode. The write side, (g)-(k):
   pass 1 of a ~free function (``np.full``) for (a) and (b), ``np.save`` per
   key, rows written into the memmap and flushed, and the same function
   through ``shuffle(map_readers(f, src))``, not cached: what the function
   itself costs. Below the table, dense rows read against sqlite blobs.

Every figure is the best of --repeats runs, the trials of a section taking
turns so that a noisy spell hits them all alike; the folders are temporary
and removed at the end. Progress goes to stderr, the table to stdout.
Machines here are shared and noisy: read the ratios within one run, not the
absolute rates.

Usage: python benchmarks/cache.py [--quick] [--repeats 5] [--json FILE]
(``--quick`` shrinks every size so the whole run takes about 15 s.)
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import multiprocessing
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import batching  # noqa: E402
import readers  # noqa: E402

SIZES = {  # name: (default, --quick)
    "memory": (100_000, 20_000),  # entries of 1
    "disk": (20_000, 3_000),  # entries of 2 and 4
    "slow": (2_000, 200),  # entries of 3
}
WIDTH = 784  # floats in an MNIST-sized entry
SLOW_US = 1000  # section 3's work per entry
BATCH = 64


class Row(NamedTuple):
    name: str
    figure: str
    baseline: str
    ratio: float | None
    target: str | None  # what the goal is, as shown
    met: bool | None  # None: no goal
    values: dict  # the raw figures, for the JSON


# -- the functions that get cached: module-level, so that a spawned process has the same ones --------------


def small_entry(i: Any) -> tuple:
    return np.full(16, i, np.float32), int(i) % 10


def mnist_sized(i: Any) -> np.ndarray:
    return np.full(WIDTH, i, np.float32)


def busy(x: int, rounds: int) -> int:
    """``rounds`` steps of a linear congruential generator from ``x``: pure Python, holds the GIL."""
    for _ in range(rounds):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    return x


def slow_entry(i: Any, rounds: int) -> np.ndarray:
    return np.full(WIDTH, busy(int(i), rounds) % 255, np.float32)


def sample_id(i: Any) -> int:
    return int(i)


def disk_reader(n: int, directory: str, keyed: bool = False) -> Any:
    """MNIST-sized entries cached on disk only. ``keyed``: keys from ``key=``, which are not sample IDs, so the
    entries are sqlite blobs even where the tier has a dense path for sample IDs."""
    return readers.cached(readers.np_array(np.arange(n)), mnist_sized, directory=directory, memory_bytes=0,
                          key=sample_id if keyed else None)


def storage(directory: str) -> str:
    """How the tier stored the entries in ``directory``: dense files (a fast path) or sqlite blobs."""
    return "dense files" if any(name.startswith("dense-") for name in os.listdir(directory)) else "sqlite blobs"


def database(directory: str) -> str:
    found = [name for name in os.listdir(directory) if name.endswith(".sqlite3")]
    if len(found) != 1:
        raise RuntimeError(f"expected one sqlite3 database in {directory}, found {found}")
    return os.path.join(directory, found[0])


# -- measuring ----------------------------------------------------------------------------------------------


def count(entries: Any) -> int:
    n = 0
    for _ in entries:
        n += 1
    return n


def count_batches(batches: Any) -> int:
    return sum(len(b) for b in batches)


def interleaved(trials: list[Callable[[], int]], repeats: int) -> list[tuple[float, int]]:
    """(best seconds, entries) of each trial over ``repeats`` rounds, the trials taking turns."""
    best = [(math.inf, 0)] * len(trials)
    for _ in range(repeats):
        for k, run in enumerate(trials):
            start = time.perf_counter()
            n = run()
            seconds = time.perf_counter() - start
            if seconds < best[k][0]:
                best[k] = (seconds, n)
    return best


def rate(measure: tuple[float, int]) -> float:
    return measure[1] / measure[0]


def row(name: str, value: float, unit: str, baseline: str | None = None, base: float | None = None,
        at_least: float | None = None, ratio_at_least: float | None = None, note: str = "") -> Row:
    """A row whose figure is ``value`` ``unit`` (higher is better), against ``base`` when given; its goals, a
    ratio to ``base`` and a figure, when given: met when each is."""
    ratio = None if base is None else value / base
    targets, met = [], None
    if ratio_at_least is not None:
        targets.append(f">= {ratio_at_least:g}x")
        met = ratio >= ratio_at_least
    if at_least is not None:
        targets.append(f">= {at_least:,.0f} {unit}")
        met = (met is not False) and value >= at_least
    target = ", ".join(targets) or None
    figure = f"{value:,.0f} {unit}" + (f" ({note})" if note else "")
    shown = "-" if base is None else f"{baseline}: {base:,.0f} {unit}"
    r = Row(name, figure, shown, ratio, target, met, {"value": value, "unit": unit, "baseline": base})
    print(f"  {name}: {figure}, baseline {shown}", file=sys.stderr, flush=True)
    return r


# -- 1. memory hits -----------------------------------------------------------------------------------------


def memory_rows(n: int, repeats: int) -> list[Row]:
    ids = np.arange(n)
    store = readers.cached(readers.np_array(ids), small_entry)
    hits = readers.shuffle(store, seed=0)
    count(hits())  # pass 1 computes every entry: the passes measured are memory hits only
    results = [small_entry(i) for i in ids]
    arrays = readers.from_arrays(np.stack([f for f, _ in results]), np.array([y for _, y in results]))
    plain = readers.shuffle(arrays, seed=0)
    table, order = dict(enumerate(results)), np.random.default_rng(0).permutation(n).tolist()

    def lookups() -> int:
        for k in order:
            table[k]
        return len(order)

    # Every pass has an order of its own (each reader is built once, the batched ones with another seed): a pass
    # in the order of the one before it finds the memory tier's entries in the CPU's caches, 2-3x faster.
    hit_batches = batching.batch(readers.shuffle(store, seed=1), BATCH)
    plain_batches = batching.batch(readers.shuffle(arrays, seed=1), BATCH)
    cached_pass, plain_pass, dict_pass, cached_batched, plain_batched = interleaved([
        lambda: count(hits()), lambda: count(plain()), lookups,
        lambda: count_batches(hit_batches()), lambda: count_batches(plain_batches()),
    ], repeats)
    stats = store.stats()
    if stats["misses"] != n or stats["memory_entries"] != n:
        raise RuntimeError(f"1: expected {n:,} misses and every entry in memory, got {stats}")
    return [
        row("1a memory hits, shuffle(cached) / the limit", rate(cached_pass), "entries/s",
            "shuffle(from_arrays(results))", rate(plain_pass), ratio_at_least=0.7, at_least=500_000),
        row("1b memory hits, shuffle(cached) / a dict lookup loop", rate(cached_pass), "entries/s", "dict",
            rate(dict_pass)),
        row(f"1c memory hits, batch(shuffle(cached), {BATCH}) / the limit", rate(cached_batched), "entries/s",
            "batch(shuffle(from_arrays))", rate(plain_batched), ratio_at_least=0.7),
    ]


# -- 2. warm disk hits from one and two processes -----------------------------------------------------------


def disk_worker(k: int, n: int, directory: str, keyed: bool, commands: Any, results: Any, barrier: Any) -> None:
    """Read passes of the warm cache as told: "one" (alone), "whole" or "half" (with the other worker)."""
    store = disk_reader(n, directory, keyed)
    shuffled = readers.shuffle(store, seed=k)
    half = readers.shard(readers.shuffle(store, seed=0), k, 2)
    count(readers.firstn(shuffled, 512)())  # open the database and find the namespace before any timing
    results.put(("ready", k))
    while (command := commands.get()) is not None:
        reader = half if command == "half" else shuffled
        if command != "one":
            barrier.wait(timeout=120)
        start = time.perf_counter()  # CLOCK_MONOTONIC on Linux: comparable between processes
        entries = count(reader())
        results.put((k, entries, start, time.perf_counter(), store.stats()["misses"]))


def two_processes(n: int, directory: str, keyed: bool, repeats: int) -> dict[str, tuple[float, int]]:
    """(best seconds from the first start to the last end, entries in all) of each way of reading."""
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(2), context.Queue()
    commands = [context.Queue() for _ in range(2)]
    workers = [context.Process(target=disk_worker, args=(k, n, directory, keyed, commands[k], results, barrier),
                               daemon=True) for k in range(2)]
    best = {"one": (math.inf, 0), "whole": (math.inf, 0), "half": (math.inf, 0)}
    try:
        for w in workers:
            w.start()
        for _ in workers:
            results.get(timeout=120)
        for _ in range(repeats):
            for command in best:  # taking turns
                active = [0] if command == "one" else [0, 1]
                for k in active:
                    commands[k].put(command)
                found = [results.get(timeout=300) for _ in active]
                if any(misses for *_, misses in found):
                    raise RuntimeError(f"2: a reading process missed the warm cache in {directory}: {found}")
                seconds = max(f[3] for f in found) - min(f[2] for f in found)
                best[command] = min(best[command], (seconds, sum(f[1] for f in found)))
    finally:
        for q in commands:
            q.put(None)
        for w in workers:
            w.join(30)
            if w.is_alive():
                w.terminate()
                w.join()
    return best


def disk_process_rows(n: int, paths: dict[str, str], repeats: int) -> list[Row]:
    """Rows 2a-2c for the tier as it stores these entries, and 2d-2f for sqlite blobs when that is another path."""
    kinds = [("", paths["tier"], False)]
    if storage(paths["tier"]) != "sqlite blobs":
        kinds.append(("key=, ", paths["keyed"], True))
    rows = []
    for letters, (how, directory, keyed) in zip(("abc", "def"), kinds):
        best = two_processes(n, directory, keyed, repeats)
        one, kind = rate(best["one"]), f"{how}{storage(directory)}"
        rows += [
            row(f"2{letters[0]} warm disk hits ({kind}), 1 process", one, "entries/s", at_least=50_000),
            row(f"2{letters[1]} warm disk hits ({kind}), 2 processes, a whole pass each: in all / 1 process",
                rate(best["whole"]), "entries/s", "1 process", one),
            row(f"2{letters[2]} warm disk hits ({kind}), 2 processes, half a pass each: in all / 1 process",
                rate(best["half"]), "entries/s", "1 process", one),
        ]
    return rows


# -- 3. pass 1 against pass 2 of a 1 ms map -----------------------------------------------------------------


def calibrate(us: float) -> int:
    """LCG rounds that take about ``us`` microseconds here: the best of many short timings."""
    trial_rounds, calls = 1000, 20

    def trial() -> int:
        for i in range(calls):
            busy(i, trial_rounds)
        return calls

    seconds = interleaved([trial], 20)[0][0]
    return max(1, round(us * 1e-6 / (seconds / (calls * trial_rounds))))


def slow_rows(n: int, repeats: int, root: str) -> list[Row]:
    func = functools.partial(slow_entry, rounds=calibrate(SLOW_US))
    ids = readers.np_array(np.arange(n))
    first, compute = math.inf, math.inf
    for k in range(min(repeats, 2)):  # pass 1 takes n ms: at most twice
        directory = os.path.join(root, f"slow{k}")
        store = readers.cached(ids, func, directory=directory)
        reader = readers.shuffle(store, seed=0)
        (seconds, _), = interleaved([lambda: count(reader())], 1)
        if seconds < first:
            first, compute = seconds, store.stats()["compute_s"]
    second = interleaved([lambda: count(reader())], repeats)[0]
    fresh = math.inf
    for _ in range(repeats):  # a new reader reads the disk once, then has its own memory tier
        again = readers.shuffle(readers.cached(ids, func, directory=directory), seed=0)
        fresh = min(fresh, interleaved([lambda: count(again())], 1)[0][0])
    us = compute / n * 1e6  # the function's own time per entry: 1 ms on a quiet machine, more under load
    note = f"pass 1 {first:.2f} s, {us:,.0f} us/entry in the function, {(first - compute) / n * 1e6:,.0f} us to cache it"
    return [
        row(f"3a busy-loop map ({us:,.0f} us/entry), {n:,} entries: pass 2 (memory) / pass 1", n / second[0],
            "entries/s", "pass 1", n / first, ratio_at_least=50, note=note),
        row("3b the same: pass 1 of a new reader on the folder (disk, then memory) / pass 1", n / fresh, "entries/s",
            "pass 1", n / first, ratio_at_least=50),
    ]


# -- 4. the disk tier against a .npy per key and a dense memmap ---------------------------------------------


def write_npy(folder: str, order: list[int]) -> int:
    os.makedirs(folder, exist_ok=True)
    for k in order:
        np.save(os.path.join(folder, f"{k}.npy"), mnist_sized(k))
    return len(order)


def write_memmap(path: str, order: list[int]) -> int:
    mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(len(order), WIDTH))
    for k in order:
        mm[k] = mnist_sized(k)
    mm.flush()
    del mm
    return len(order)


def read_npy(folder: str, order: list[int]) -> int:
    for k in order:
        np.load(os.path.join(folder, f"{k}.npy"))
    return len(order)


def read_memmap(mm: np.ndarray, order: list[int]) -> int:
    for k in order:
        np.array(mm[k])  # a copy: reading the row, not just making a view of it
    return len(order)


def read_sqlite(path: str, order: list[int]) -> int:
    """The cache file's blobs by their row keys in ``order``, by bare sqlite3, 64 keys a SELECT."""
    db = sqlite3.connect(path)
    try:
        select = f"SELECT v FROM entries WHERE k IN ({', '.join('?' * 64)})"
        n = 0
        for lo in range(0, len(order), 64):
            part = order[lo:lo + 64]
            for (blob,) in db.execute(select, part + [part[-1]] * (64 - len(part))).fetchall():
                np.frombuffer(blob, np.float32, count=WIDTH, offset=len(blob) - 4 * WIDTH)
                n += 1
        return n
    finally:
        db.close()


def blob_keys(directory: str) -> list[int]:
    """The row keys of the blobs in the cache in ``directory``, in a shuffled order."""
    with contextlib.closing(sqlite3.connect(database(directory))) as db:
        keys = [k for (k,) in db.execute("SELECT k FROM entries WHERE v IS NOT NULL")]
    return [keys[i] for i in np.random.default_rng(3).permutation(len(keys))]


def disk_bytes(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(e.stat().st_size for e in os.scandir(path) if e.is_file())


def write_rows(n: int, root: str, repeats: int) -> tuple[list[Row], dict[str, str]]:
    """The write side of 4, which also leaves the warm stores that 2 and 4 read; their paths."""
    order = np.random.default_rng(1).permutation(n).tolist()
    plain = readers.shuffle(readers.map_readers(mnist_sized, readers.np_array(np.arange(n))), seed=0)
    best = dict.fromkeys(("tier", "keyed", "npy", "memmap", "map"), math.inf)
    for k in range(repeats):  # each in a fresh folder: a write is measured once per folder
        paths = {"tier": os.path.join(root, f"tier{k}"), "keyed": os.path.join(root, f"keyed{k}"),
                 "npy": os.path.join(root, f"npy{k}"), "memmap": os.path.join(root, f"dense{k}.npy")}
        tier = readers.shuffle(disk_reader(n, paths["tier"]), seed=0)
        keyed = readers.shuffle(disk_reader(n, paths["keyed"], keyed=True), seed=0)
        measures = interleaved([
            lambda: count(tier()), lambda: count(keyed()), functools.partial(write_npy, paths["npy"], order),
            functools.partial(write_memmap, paths["memmap"], order), lambda: count(plain())], 1)
        for key, (seconds, _) in zip(best, measures):
            best[key] = min(best[key], seconds)
    a = n / best["tier"]
    size = {key: f"{disk_bytes(path) / n:,.0f} B/entry on disk" for key, path in paths.items()}
    return [
        row(f"4g write: cached ({storage(paths['tier'])}), pass 1 of a ~free function, memory_bytes=0", a,
            "entries/s", note=size["tier"]),
        row(f"4h write: cached, key= ({storage(paths['keyed'])}) / 4g", n / best["keyed"], "entries/s", "4g", a,
            note=size["keyed"]),
        row("4i write: np.save, one .npy per key / 4g", n / best["npy"], "entries/s", "4g", a, note=size["npy"]),
        row("4j write: rows into a dense open_memmap, flushed / 4g", n / best["memmap"], "entries/s", "4g", a,
            note=size["memmap"]),
        row("4k the function alone, shuffle(map_readers(f)), not cached / 4g", n / best["map"], "entries/s", "4g",
            a),
    ], paths


def read_rows(n: int, paths: dict[str, str], repeats: int) -> list[Row]:
    order = np.random.default_rng(2).permutation(n).tolist()
    stores = [disk_reader(n, paths["tier"]), disk_reader(n, paths["keyed"], keyed=True)]
    tier, keyed = (readers.shuffle(s, seed=0) for s in stores)
    mm = np.load(paths["memmap"], mmap_mode="r")
    dense = readers.shuffle(readers.np_array(mm), seed=0)
    keys = blob_keys(paths["keyed"])
    tier_m, keyed_m, npy_m, memmap_m, dense_m, sqlite_m = interleaved([
        lambda: count(tier()), lambda: count(keyed()), functools.partial(read_npy, paths["npy"], order),
        functools.partial(read_memmap, mm, order), lambda: count(dense()),
        functools.partial(read_sqlite, database(paths["keyed"]), keys)], repeats)
    for s in stores:
        if s.stats()["misses"]:
            raise RuntimeError(f"4: the cache was not warm: {s.stats()}")
    del mm
    a = rate(tier_m)
    return [
        row(f"4a warm reads: cached ({storage(paths['tier'])}), memory_bytes=0, shuffle / the limit, 4d", a,
            "entries/s", "4d", rate(memmap_m), ratio_at_least=0.8),
        row(f"4b warm reads: cached, key= ({storage(paths['keyed'])}) / 4a", rate(keyed_m), "entries/s", "4a", a),
        row("4c warm reads: np.load, one .npy per key / 4a", rate(npy_m), "entries/s", "4a", a),
        row("4d warm reads: dense memmap, a copy of row k (4a's limit)", rate(memmap_m), "entries/s"),
        row("4e warm reads: dense memmap, shuffle(np_array(mm)) / 4a", rate(dense_m), "entries/s", "4a", a),
        row("4f warm reads: 4b's blobs by bare sqlite3 (no checksum, no decode) / 4a", rate(sqlite_m), "entries/s",
            "4a", a),
    ]


# -- report -------------------------------------------------------------------------------------------------


def table(rows: list[Row]) -> str:
    lines = ["| row | figure | baseline | ratio | target | met? |", "|---|---|---|---|---|---|"]
    for r in rows:
        ratio = "-" if r.ratio is None else f"{r.ratio:.{2 if r.ratio >= 0.1 else 3}f}x"
        met = "info" if r.met is None else "yes" if r.met else "NO"
        lines.append(f"| {r.name} | {r.figure} | {r.baseline} | {ratio} | {r.target or '-'} | {met} |")
    return "\n".join(lines)


def dense_against_blobs(rows: list[Row]) -> dict[str, float]:
    """Warm reads of dense rows over warm reads of sqlite blobs (4b), each way of reading dense rows."""
    value = {r.name.split()[0]: r.values["value"] for r in rows}
    return {"readers' tier (4a)": value["4a"] / value["4b"], "memmap, a loop (4d)": value["4d"] / value["4b"],
            "memmap, shuffle(np_array) (4e)": value["4e"] / value["4b"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: the whole run in about 15 s")
    parser.add_argument("--repeats", type=int, default=None, help="runs per figure, the best counts (5; --quick 2)")
    parser.add_argument("--json", default=None, help="also write the figures to this file, as one JSON object")
    args = parser.parse_args(argv)
    size = {k: v[1] if args.quick else v[0] for k, v in SIZES.items()}
    repeats = args.repeats or (2 if args.quick else 5)
    print(f"{os.cpu_count()} CPUs, best of {repeats}, sizes {size}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="readerkit-cache-bench-") as root:
        print("4. writes (and the warm stores for 2 and 4)", file=sys.stderr)
        written, paths = write_rows(size["disk"], root, min(repeats, 2))
        rows += written
        print("4. warm reads", file=sys.stderr)
        rows += read_rows(size["disk"], paths, repeats)
        print("2. warm disk hits, 1 and 2 processes", file=sys.stderr)
        rows += disk_process_rows(size["disk"], paths, repeats)
        print("1. memory hits", file=sys.stderr)
        rows += memory_rows(size["memory"], repeats)
        print("3. pass 1 against pass 2 of a 1 ms map", file=sys.stderr)
        rows += slow_rows(size["slow"], repeats, root)
    seconds = time.perf_counter() - started
    rows.sort(key=lambda r: r.name.split()[0])
    print(f"done in {seconds:.0f} s", file=sys.stderr)
    print(f"{os.cpu_count()} CPUs; best of {repeats}; {size['memory']:,} small entries (1), {size['disk']:,} of "
          f"784 float32 (2, 4), {size['slow']:,} of a 1 ms busy-loop map (3)")
    print(table(rows))
    factors = dense_against_blobs(rows)
    print("dense rows against sqlite blobs (4b), warm reads: "
          + ", ".join(f"{name} {factor:.1f}x" for name, factor in factors.items()))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"cpus": os.cpu_count(), "quick": args.quick, "repeats": repeats, "sizes": size,
                       "seconds": round(seconds, 1), "slow_map": f"busy loop calibrated to {SLOW_US} us",
                       "rows": [r._asdict() for r in rows], "dense_against_blobs": factors}, out)
            out.write("\n")


if __name__ == "__main__":
    main()
