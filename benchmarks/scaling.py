"""Process workers from 1 to every core, the per-pass start cost, and feeding a GPU (issue 17).

1. Workers: a deterministic pure-Python map (LCG steps, holds the GIL) calibrated
   to about 50 us an entry (the title shows the measured figure), over
   ``--entries`` ints; entries/s as multiples of serial (a plain loop over half
   the entries, taking turns with the rest of its row: "serial / best" below 1
   says the row ran in a slow spell of the machine) for k workers
   (``--workers``; default 1, 2, 4, 8, 14 capped at the cores): readerkit
   ``prefetch(map_readers(f, from_sequence(...)), k, mode="process")``; the same
   with ``persistent=True`` where prefetch has it (after one warm-up pass);
   the limit, ``multiprocessing.Pool(k)`` with ``imap(f, ..., chunksize=256)``
   and with ``map`` (the same chunks), with the start method readerkit picked,
   start and join included: the faster of the two in each row is "the Pool";
   torch ``DataLoader(batch_size=64, num_workers=k)`` over a dataset whose item
   i is f(i). Then readerkit / Pool and persistent / Pool at every k, and the
   goals (issue 32): >= 0.9x the Pool at every k, both; and k=1 >= 0.95x serial
   (issue 17). A k above the cores is marked: the Pool is oversubscribed too.
2. Spawn: a fresh ``prefetch(map_readers(abs, ...), min(4, cores),
   mode="process")``'s first pass and its later passes (best of two), under
   spawn and fork, and with ``persistent=True`` where it exists. The work is
   trivial, so a pass is mostly starting and stopping workers. Goal: a later
   pass under spawn, persistent, in < 20 ms.
3. GPU feed, only where ``torch.cuda.is_available()``: MNIST training images
   (``--data-dir``, default $READERKIT_DATA or ../shared/data/mnist; random data
   of that shape when none is found, and the table says so), a small CNN
   (conv 16 and 32, 3x3, ReLU and 2x2 pooling each, then linear) with Adam.
   Samples/s of an epoch (synchronized) at batch 128 and 1024, as ratios to the
   GPU-resident limit (data on the GPU, batches gathered by randperm): readerkit
   ``collated(batch(shuffle(...)))`` then ``.to("cuda")``; ``readers.torch_loader``
   over that pipeline (where it exists); ``readers.torch_loader`` over
   ``collated(batch(shuffle(mnist.train(...))), narrow=True)`` (where collated
   has ``narrow``, issue 32: the uint8 pixels are gathered, pinned and copied,
   and divided by 255 on the GPU; the same float32 tensors);
   ``DataLoader(TensorDataset)``, nw=0; a per-sample ``DataLoader``, nw=4,
   pinned, persistent. One warm-up epoch each. Goal: torch_loader >= 0.95x
   (shown for each torch_loader row).

Figures are the best of ``--repeats`` (3; 2 with ``--quick``); the runs of a
row take turns, so a noisy spell hits them all. Read the ratios, not the rates.
Tables go to stdout, progress to stderr, every figure to ``--json FILE``.

Usage: python benchmarks/scaling.py [--quick] [--repeats 3] [--workers 1,2,4]
       [--entries 40000] [--data-dir DIR] [--json scaling.json]
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import inspect
import json
import math
import multiprocessing
import os
import platform
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import batching  # noqa: E402
import readers  # noqa: E402
from readers.workers.channels import pick_start_method  # noqa: E402
from readers.workers.prefetch import prefetch as _prefetch  # noqa: E402

PERSISTENT = "persistent" in inspect.signature(_prefetch).parameters  # issue 17, section 1: not there before
NARROW = "narrow" in inspect.signature(batching.minibatch.collated).parameters  # issue 32, section 3

ENTRY_US, POOL_CHUNK, TORCH_BATCH, SPAWN_ENTRIES, GPU_BATCHES = 50, 256, 64, 2_000, (128, 1024)
DEFAULT_WORKERS = (1, 2, 4, 8, 14)
K1_GOAL, POOL_GOAL, TORCH_LOADER_GOAL, SPAWN_GOAL_MS = 0.95, 0.9, 0.95, 20


# -- what crosses into workers: module-level, so spawned workers can import it ----------------


def busy(x: int, rounds: int) -> int:
    """``rounds`` steps of a linear congruential generator from ``x``: pure Python, holds the GIL."""
    for _ in range(rounds):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    return x


def sample(x: np.ndarray, y: np.ndarray, i: int) -> tuple[np.ndarray, int]:
    return x[i], int(y[i])


class Items:
    """torch's map-style dataset whose item i is ``func(i)`` (duck-typed: this module imports without torch)."""

    def __init__(self, n: int, func: Callable[[int], Any]):
        self.n, self.func = n, func

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        return self.func(i)


# -- measuring ----------------------------------------------------------------------------------


def settle(timeout: float = 2.0) -> list[str]:
    """Let the queue feeder threads a DataLoader or Pool left behind end (untimed), and name any thread alive.

    While one lives, readerkit's automatic start method would be spawn.
    """
    deadline = time.monotonic() + timeout
    for t in threading.enumerate():
        if t.name == "QueueFeederThread":
            t.join(max(0.0, deadline - time.monotonic()))
    return [t.name for t in threading.enumerate() if t is not threading.main_thread()]


def interleaved(runs: list[Callable[[], Any]], repeats: int, before: Callable[[], Any] | None = None) -> list[float]:
    """The best seconds of ``repeats`` calls of each run, taking turns; ``before`` is called untimed before each."""
    best = [math.inf] * len(runs)
    for _ in range(repeats):
        for i, run in enumerate(runs):
            if before is not None:
                before()
            t0 = time.perf_counter()
            run()
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


def consume(reader: Any) -> int:
    n = 0
    for _ in reader():
        n += 1
    return n


def calibrate(us: float) -> int:
    """LCG rounds that take about ``us`` microseconds here (best of many short timings)."""
    rounds, calls = 1000, 50
    t = min(interleaved([lambda: [busy(i, rounds) for i in range(calls)]], 30))
    return max(1, round(us * 1e-6 / (t / (calls * rounds))))


def process_prefetch(reader: Any, k: int, **options: Any) -> Any:
    return readers.prefetch(reader, k, mode="process", **options)


def close(reader: Any) -> None:
    """Stop a reader's persistent workers; a reader without them may have no close()."""
    if hasattr(reader, "close"):
        reader.close()


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def markdown(head: list[str], rows: list[list[str]]) -> None:
    print("\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                    + ["| " + " | ".join(cells) + " |" for cells in rows]))


def machine() -> dict[str, Any]:
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    info = {"cores": os.cpu_count(), "cpu": cpu, "python": platform.python_version(), "torch": None, "gpu": None}
    try:
        import torch
        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return info


# -- 1. workers ---------------------------------------------------------------------------------


def serial_loop(n: int, work: Callable[[int], int]) -> None:
    for x in range(n):
        work(x)


def bare_pool(n: int, work: Callable[[int], int], k: int, method: str) -> None:
    with multiprocessing.get_context(method).Pool(k) as pool:
        pool.map(work, range(n), chunksize=POOL_CHUNK)


def pool_imap(n: int, work: Callable[[int], int], k: int, method: str) -> None:
    """The results in order as they come, as readerkit's consumer takes them."""
    with multiprocessing.get_context(method).Pool(k) as pool:
        for _ in pool.imap(work, range(n), chunksize=POOL_CHUNK):
            pass


def readerkit_pass(reader: Any, methods: set[str]) -> None:
    methods.add(pick_start_method(None))  # the start method this pass's workers get
    consume(reader)


def torch_loader_pass(n: int, work: Callable[[int], int], k: int) -> None:
    from torch.utils.data import DataLoader
    for _ in DataLoader(Items(n, work), batch_size=TORCH_BATCH, num_workers=k):
        pass


def workers_table(n: int, ks: list[int], repeats: int) -> dict[str, Any]:
    rounds = calibrate(ENTRY_US)
    work = functools.partial(busy, rounds=rounds)
    source = readers.from_sequence(range(n))
    torch_ok = importlib.util.find_spec("torch") is not None
    # serial runs in every row on half the entries, taking turns with the rest, so a slow spell of a shared
    # machine hits the row's baseline too: each row's ratios are to its own serial
    n_serial = max(1_000, n // 2)
    serial_source = readers.from_sequence(range(n_serial))
    out = {"entries": n, "serial_entries": n_serial, "rounds": rounds, "persistent": PERSISTENT,
           "torch": torch_ok, "rows": []}
    serial = rk_serial = math.inf  # seconds per entry
    for k in ks:
        others = settle()
        method, methods = pick_start_method(None), set()  # the Pool gets what readerkit picks now
        plain = process_prefetch(readers.map_readers(work, source), k)
        runs = {"serial": functools.partial(serial_loop, n_serial, work),
                "readerkit_serial": functools.partial(consume, readers.map_readers(work, serial_source)),
                "readerkit": functools.partial(readerkit_pass, plain, methods)}
        kept = None
        if PERSISTENT:
            kept = process_prefetch(readers.map_readers(work, source), k, persistent=True)
            consume(kept)  # warm-up: start the workers once
            runs["readerkit_persistent"] = functools.partial(consume, kept)
        runs["pool_imap"] = functools.partial(pool_imap, n, work, k, method)
        runs["pool_map"] = functools.partial(bare_pool, n, work, k, method)
        if torch_ok:
            runs["torch"] = functools.partial(torch_loader_pass, n, work, k)
        try:
            seconds = dict(zip(runs, interleaved(list(runs.values()), repeats, settle), strict=True))
        finally:
            close(plain)
            if kept is not None:
                close(kept)
        seconds["pool"] = min(seconds["pool_imap"], seconds["pool_map"])  # the limit: the faster of the two
        row_serial = seconds.pop("serial") / n_serial
        serial, rk_serial = min(serial, row_serial), min(rk_serial, seconds.pop("readerkit_serial") / n_serial)
        out["rows"].append({"workers": k, "start_method": "/".join(sorted(methods)), "threads_then": others,
                            "within_cores": k <= (os.cpu_count() or 1), "serial_entries_per_s": 1 / row_serial,
                            **{f"{name}_entries_per_s": n / s for name, s in seconds.items()}})
        log(f"  k={k} ({method}): " + ", ".join(f"{name} {n / s:,.0f}/s" for name, s in seconds.items())
            + f"; serial in this row {1 / row_serial:,.0f}/s")
    out["us_per_entry"], out["readerkit_serial_us_per_entry"] = serial * 1e6, rk_serial * 1e6
    log(f"  {rounds} LCG rounds: {serial * 1e6:.1f} us per entry in a loop, "
        f"{rk_serial * 1e6:.1f} us through map_readers serially")
    for row in out["rows"]:
        names = [name for name in ("readerkit", "readerkit_persistent", "pool", "pool_imap", "pool_map", "torch")
                 if f"{name}_entries_per_s" in row]
        row.update({f"{name}_x": row[f"{name}_entries_per_s"] / row["serial_entries_per_s"] for name in names})
        row["serial_vs_best"] = row["serial_entries_per_s"] * serial  # below 1: the row ran in a slow spell
        for name in ("readerkit", "readerkit_persistent"):
            if name in names:
                row[f"{name}_vs_pool"] = row[f"{name}_entries_per_s"] / row["pool_entries_per_s"]
                row[f"{name}_goal"] = goal(row["workers"], row, name)
    return out


def goal(k: int, row: dict, name: str) -> str:
    """met / NOT met for the goals at k workers: >= 0.9x the Pool (issue 32) and, at k=1, >= 0.95x serial."""
    checks = [row[f"{name}_vs_pool"] >= POOL_GOAL] + ([row[f"{name}_x"] >= K1_GOAL] if k == 1 else [])
    return "met" if all(checks) else "NOT met"


def print_workers(t: dict[str, Any]) -> None:
    pers, torch_ok = t["persistent"], t["torch"]
    print(f"\n1. Workers on a {t['us_per_entry']:.0f} us/entry pure-Python map, {t['entries']:,} entries: "
          f"entries/s as multiples of serial (the Pool, the faster of imap and map, chunksize {POOL_CHUNK}, is the limit)")
    head = ["workers", "start", "serial / best", "readerkit prefetch"] + (["readerkit persistent"] if pers else []) + \
        ["Pool imap", "Pool map"] + ([f"torch DataLoader b{TORCH_BATCH}"] if torch_ok else []) + \
        ["readerkit / Pool"] + (["persistent / Pool"] if pers else []) + ["goal"]
    rows = []
    for r in t["rows"]:
        start = r["start_method"] + ("" if r["within_cores"] else ", k > cores")
        cells = [str(r["workers"]), start, f"{r['serial_vs_best']:.2f}", f"{r['readerkit_x']:.2f}x"]
        cells += [f"{r['readerkit_persistent_x']:.2f}x"] if pers else []
        cells += [f"{r['pool_imap_x']:.2f}x", f"{r['pool_map_x']:.2f}x"] + ([f"{r['torch_x']:.2f}x"] if torch_ok else [])
        cells += [f"{r['readerkit_vs_pool']:.2f}"] + ([f"{r['readerkit_persistent_vs_pool']:.2f}"] if pers else [])
        goals = r["readerkit_goal"] + (f" (persistent: {r['readerkit_persistent_goal']})" if pers else "")
        rows.append(cells + [goals])
    markdown(head, rows)
    if not torch_ok:
        print("torch is not installed: no DataLoader column")
    for r in t["rows"]:
        if r["threads_then"]:
            print(f"k={r['workers']}: readerkit chose {r['start_method']} with threads alive: {r['threads_then']}")
    if not pers:
        print("prefetch has no persistent= option yet: that column is left out")
    print(f"goals: >= {POOL_GOAL}x the Pool at every k, prefetch and persistent alike; k=1 also >= {K1_GOAL}x serial")


# -- 2. spawn -----------------------------------------------------------------------------------


def spawn_table(n: int, repeats: int) -> dict[str, Any]:
    k = min(4, os.cpu_count() or 1)
    source = readers.map_readers(abs, readers.from_sequence(range(n)))  # nearly no work
    cases = [(m, p) for p in ((False, True) if PERSISTENT else (False,)) for m in ("spawn", "fork")]
    rows = []
    for method, persistent in cases:
        if method not in multiprocessing.get_all_start_methods():
            continue
        first = later = math.inf
        for _ in range(repeats):
            options = {"start_method": method, **({"persistent": True} if persistent else {})}
            reader = process_prefetch(source, k, **options)
            try:
                first = min(first, interleaved([functools.partial(consume, reader)], 1)[0])
                later = min(later, *interleaved([functools.partial(consume, reader)] * 2, 1))
            finally:
                close(reader)
        row = {"start_method": method, "persistent": persistent, "first_ms": first * 1e3, "later_ms": later * 1e3}
        if method == "spawn" and persistent:
            row["goal"] = "met" if row["later_ms"] < SPAWN_GOAL_MS else "NOT met"
        rows.append(row)
        log(f"  {method}, persistent={persistent}: first {first * 1e3:.0f} ms, later {later * 1e3:.0f} ms")
    return {"workers": k, "entries": n, "rows": rows}


def print_spawn(t: dict[str, Any]) -> None:
    print(f"\n2. Per-pass start cost: prefetch(map_readers(abs, {t['entries']:,} ints), {t['workers']}, "
          "mode='process'), ms per pass")
    markdown(["start method", "persistent", "first pass", "later pass", "goal (later < 20 ms, spawn persistent)"],
             [[r["start_method"], "yes" if r["persistent"] else "no", f"{r['first_ms']:.0f} ms",
               f"{r['later_ms']:.0f} ms", r.get("goal", "-")] for r in t["rows"]])
    if not PERSISTENT:
        print("prefetch has no persistent= option yet: no persistent rows")


# -- 3. GPU feed --------------------------------------------------------------------------------


def mnist_arrays(data_dir: str | None, quick: bool,
                 folder: str) -> tuple[np.ndarray, np.ndarray, str, Any]:
    """float32 (n, 784) in 0..1 and int64 labels, where they came from, and the same samples as an MNIST reader
    (``readers.sources.mnist``: its ``wire_columns`` give the uint8 pixels), written to ``folder`` when they are
    not the whole of the files at ``data_dir``."""
    from readers.sources import mnist
    from readers.sources.idx import write_idx
    try:
        reader = mnist.train(data_dir, download=False)
        images, labels = reader.arrays()
        where = "MNIST training images"
    except Exception as exc:  # noqa: BLE001 - any missing or unreadable file: fall back, and say so
        log(f"  MNIST not found ({exc}); random MNIST-shaped data instead")
        rng = np.random.default_rng(0)
        images, labels = rng.integers(0, 256, (60_000, 784), np.uint8), rng.integers(0, 10, 60_000).astype(np.uint8)
        where, reader = "random MNIST-shaped data (no MNIST files found)", None
    n = 10_000 if quick else len(images)
    if reader is None or n < len(images):
        write_idx(os.path.join(folder, "train-images-idx3-ubyte"), np.ascontiguousarray(images[:n]).reshape(n, 28, 28))
        write_idx(os.path.join(folder, "train-labels-idx1-ubyte"), np.ascontiguousarray(labels[:n]))
        reader = mnist.train(folder, download=False)
    # the division of readers.sources.mnist (x / 255 in float32): the narrowed row gives these values bit for bit
    x = np.divide(images[:n].reshape(n, 784), np.float32(255), dtype=np.float32)
    return x, labels[:n].astype(np.int64), where, reader


def small_cnn(torch: Any) -> Any:
    nn = torch.nn
    return nn.Sequential(nn.Unflatten(1, (1, 28, 28)), nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(32 * 7 * 7, 10))


def gpu_table(x: np.ndarray, y: np.ndarray, repeats: int, source: Any = None, device: str = "cuda") -> dict[str, Any]:
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    model = small_cnn(torch).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    xg, yg = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)

    def step(xb: Any, yb: Any) -> None:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    def epoch(batches: Any) -> Callable[[], None]:
        def run() -> None:
            sync()
            for xb, yb in batches():
                step(xb.to(device, non_blocking=True), yb.to(device, non_blocking=True))
            sync()
        return run

    rows, closers = [], []
    try:
        for b in GPU_BATCHES:
            def resident(b: int = b) -> Any:
                perm = torch.randperm(len(xg), device=device)
                return ((xg[i], yg[i]) for i in perm.split(b))

            pipeline = batching.collated(batching.batch(readers.shuffle(readers.from_arrays(x, y), seed=0), b))
            runs = {"limit": epoch(resident),
                    "readerkit_to_device": epoch(lambda p=pipeline: ((torch.from_numpy(xb), torch.from_numpy(yb))
                                                                     for xb, yb in p()))}
            if hasattr(readers, "torch_loader"):
                loader = readers.torch_loader(pipeline, device)
                closers.append(loader)
                runs["readerkit_torch_loader"] = epoch(loader)
            if NARROW and source is not None:
                narrow = readers.torch_loader(batching.collated(batching.batch(readers.shuffle(source, seed=0), b),
                                                                narrow=True), device)
                closers.append(narrow)
                runs["readerkit_torch_loader_narrow"] = epoch(narrow)
            tensors = DataLoader(TensorDataset(xt, yt), batch_size=b, shuffle=True, num_workers=0)
            runs["dataloader_tensordataset_nw0"] = epoch(lambda d=tensors: iter(d))
            samples = DataLoader(Items(len(x), functools.partial(sample, x, y)), batch_size=b, shuffle=True,
                                 num_workers=4, pin_memory=True, persistent_workers=True)
            closers.append(samples)
            runs["dataloader_per_sample_nw4_pinned_persistent"] = epoch(lambda d=samples: iter(d))
            for run in runs.values():  # warm-up: cudnn autotuning, allocator, persistent workers
                run()
            seconds = dict(zip(runs, interleaved(list(runs.values()), repeats), strict=True))
            row = {"batch": b, **{f"{k}_samples_per_s": len(x) / s for k, s in seconds.items()},
                   **{f"{k}_vs_limit": seconds["limit"] / s for k, s in seconds.items()}}
            goals = [(label, row[f"{k}_vs_limit"] >= TORCH_LOADER_GOAL) for k, label in
                     (("readerkit_torch_loader", "torch_loader"), ("readerkit_torch_loader_narrow", "narrow"))
                     if k in seconds]
            if goals:
                row["goal"] = ", ".join(f"{label}: {'met' if ok else 'NOT met'}" for label, ok in goals)
            rows.append(row)
            log(f"  batch {b}: " + ", ".join(f"{k} {seconds['limit'] / s:.2f}" for k, s in seconds.items()))
    finally:
        for c in closers:
            close(c)
            if getattr(c, "_iterator", None) is not None:
                c._iterator._shutdown_workers()  # a persistent DataLoader's workers, stopped now
    return {"samples": len(x), "rows": rows}


def print_gpu(t: dict[str, Any] | None, why: str) -> None:
    print(f"\n3. GPU feed: {why}")
    if t is None:
        return
    names = [("limit", "GPU-resident limit"), ("readerkit_to_device", "readerkit collated, then .to"),
             ("readerkit_torch_loader", "readerkit torch_loader"),
             ("readerkit_torch_loader_narrow", "readerkit torch_loader, collated(narrow=True) over mnist.train"),
             ("dataloader_tensordataset_nw0", "DataLoader(TensorDataset) nw=0"),
             ("dataloader_per_sample_nw4_pinned_persistent", "DataLoader per-sample nw=4 pinned persistent")]
    names = [(k, label) for k, label in names if f"{k}_vs_limit" in t["rows"][0]]
    head = ["batch"] + [label for _, label in names] + ["limit samples/s", "goal (torch_loader >= 0.95)"]
    markdown(head, [[str(r["batch"])] + [f"{r[k + '_vs_limit']:.2f}" for k, _ in names]
                    + [f"{r['limit_samples_per_s']:,.0f}", r.get("goal", "n/a: no torch_loader")] for r in t["rows"]])


# -- main ---------------------------------------------------------------------------------------


def worker_counts(text: str | None) -> list[int]:
    if text is None:
        return sorted({min(k, os.cpu_count() or 1) for k in DEFAULT_WORKERS})
    try:
        ks = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise SystemExit(f"--workers takes whole numbers separated by commas, like 1,2,4; got {text!r}") from None
    if not ks or min(ks) < 1:
        raise SystemExit(f"--workers needs at least one count, each >= 1; got {text!r}")
    return ks


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run (under 30 s here)")
    parser.add_argument("--repeats", type=int, default=None, help="passes per figure, the best counts (3; --quick 2)")
    parser.add_argument("--workers", default=None, help="worker counts, e.g. 1,2,4 (default 1,2,4,8,14, cores at most)")
    parser.add_argument("--entries", type=int, default=None,
                        help="entries of table 1 (default max(40,000, 5,000 x the most workers); --quick 4,000)")
    parser.add_argument("--data-dir", help="MNIST files (default $READERKIT_DATA, else ../shared/data/mnist)",
                        default=os.environ.get("READERKIT_DATA") or os.path.join(ROOT, "..", "shared", "data", "mnist"))
    parser.add_argument("--json", metavar="FILE", default=None, help="write every figure here")
    args = parser.parse_args(argv)
    ks = worker_counts(args.workers)
    repeats = args.repeats or (2 if args.quick else 3)
    if repeats < 1:
        raise SystemExit(f"--repeats must be at least 1, got {repeats}")
    entries = args.entries or (4_000 if args.quick else max(40_000, 5_000 * max(ks)))
    info = machine()
    print(f"machine: {info['cores']} cores, {info['cpu']}, GPU {info['gpu'] or 'none'}; python {info['python']}, "
          f"torch {info['torch'] or 'not installed'}; best of {repeats}; readerkit start method now: "
          f"{pick_start_method(None)}")
    started = time.perf_counter()
    log("1. workers")
    workers = workers_table(entries, ks, repeats)
    print_workers(workers)
    log("2. spawn")
    spawn = spawn_table(500 if args.quick else SPAWN_ENTRIES, repeats)
    print_spawn(spawn)
    gpu, why = None, "needs a GPU (torch.cuda.is_available() is False here): skipped"
    if info["gpu"]:
        log("3. GPU feed")
        with tempfile.TemporaryDirectory(prefix="readerkit-scaling-") as folder:
            x, y, where, source = mnist_arrays(os.path.abspath(args.data_dir), args.quick, folder)
            why = f"{where}, {len(x):,} samples, small CNN + Adam; samples/s of an epoch / the GPU-resident limit"
            gpu = gpu_table(x, y, repeats, source)
    print_gpu(gpu, why)
    seconds = time.perf_counter() - started
    print(f"\ndone in {seconds:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "repeats": repeats, "quick": args.quick, "seconds": seconds,
                       "workers": workers, "spawn": spawn, "gpu": gpu, "gpu_note": why}, f, indent=2)


if __name__ == "__main__":
    main()
