"""The main job against the same job in PyTorch: wall time of the whole command, side by side.

readerkit: ``python cli.py train --reader mnist`` with its defaults, as a user runs it,
and again with PyTorch's settings (lr 1e-3, no decay) for the same job step for step.
PyTorch: load the same IDX files, an MLP 784-256-10 with Adam (lr 1e-3), batch 128,
DataLoader(shuffle=True), passes until test accuracy reaches 97.5% (at most 10).
Each runs in a fresh process, alternating, ``--rounds`` times; the table shows the
median wall time and the final test accuracy of each.

Usage: python benchmarks/train_mnist.py [--data-dir ../shared/data/mnist] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TORCH_JOB = r"""
import gzip, json, sys, time
import numpy as np, torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

def idx(path):
    raw = gzip.open(path).read()
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(shape)

d = sys.argv[1]
x = torch.from_numpy(idx(f"{d}/train-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / 255)
y = torch.from_numpy(idx(f"{d}/train-labels-idx1-ubyte.gz").astype(np.int64))
tx = torch.from_numpy(idx(f"{d}/t10k-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / 255)
ty = torch.from_numpy(idx(f"{d}/t10k-labels-idx1-ubyte.gz").astype(np.int64))
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
loader = DataLoader(TensorDataset(x, y), batch_size=128, shuffle=True)
for p in range(10):
    for xb, yb in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
    with torch.no_grad():
        acc = (model(tx).argmax(1) == ty).float().mean().item()
    print(json.dumps({"pass": p, "test_accuracy": acc}), flush=True)
    if acc >= 0.975:
        break
"""


def timed(cmd: list[str], env: dict) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return time.perf_counter() - start, proc.stdout


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=os.path.join(ROOT, "..", "shared", "data", "mnist"))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    data_dir = os.path.abspath(args.data_dir)
    env = {**os.environ, "PYTHONPATH": ROOT}
    try:
        import torch  # noqa: F401
        has_torch = True
    except ImportError:
        has_torch = False
    rows: dict[str, list] = {}

    def record(name: str, seconds: float, records: list[dict]) -> None:
        entry = rows.setdefault(name, [[], 0, float("nan")])
        entry[0].append(seconds)
        entry[1], entry[2] = len(records), records[-1]["test_accuracy"]

    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "log.jsonl")
        cli = [sys.executable, "cli.py", "train", "--reader", "mnist", "--data-dir", data_dir, "--no-download", "--log-json", log]
        jobs = {"readerkit: cli.py train --reader mnist (defaults)": cli,
                "readerkit, torch's settings: --lr 1e-3 --lr-decay 1": cli + ["--lr", "1e-3", "--lr-decay", "1"]}
        timed(cli, env)  # the first start decodes the IDX files into the cache, as a user's first run does
        for _ in range(args.rounds):
            for name, cmd in jobs.items():
                seconds, _ = timed(cmd, env)
                record(name, seconds, [json.loads(line) for line in open(log)])
            if has_torch:
                seconds, out = timed([sys.executable, "-c", TORCH_JOB, data_dir], env)
                record("PyTorch MLP, DataLoader, lr 1e-3, until 97.5%", seconds,
                       [json.loads(line) for line in out.splitlines()])
    print(f"{'job':54} {'wall s (median)':>16} {'passes':>7} {'test accuracy':>14}")
    for name, (times, passes, accuracy) in rows.items():
        print(f"{name:54} {statistics.median(times):16.2f} {passes:7d} {100 * accuracy:13.2f}%")
    if has_torch:
        torch_time = statistics.median(rows["PyTorch MLP, DataLoader, lr 1e-3, until 97.5%"][0])
        for name in jobs:
            print(f"{name}: {statistics.median(rows[name][0]) / torch_time:.2f}x torch's wall time (goal <= 1.0x)")
    else:
        print("PyTorch is not installed: pip install torch==2.13.0 for the comparison")


if __name__ == "__main__":
    main()
