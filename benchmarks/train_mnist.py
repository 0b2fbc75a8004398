"""The main job against the same job in PyTorch: wall time of the whole command, side by side.

readerkit: ``python cli.py train --reader mnist`` with its defaults, as a user runs it.
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
    ours, theirs = [], []
    ours_acc = theirs_acc = float("nan")
    ours_passes = theirs_passes = 0
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "log.jsonl")
        cli = [sys.executable, "cli.py", "train", "--reader", "mnist", "--data-dir", data_dir, "--no-download", "--log-json", log]
        timed(cli, env)  # the first start decodes the IDX files into the cache, as a user's first run does
        for _ in range(args.rounds):
            seconds, _ = timed(cli, env)
            ours.append(seconds)
            records = [json.loads(line) for line in open(log)]
            ours_acc, ours_passes = records[-1]["test_accuracy"], len(records)
            if has_torch:
                seconds, out = timed([sys.executable, "-c", TORCH_JOB, data_dir], env)
                theirs.append(seconds)
                records = [json.loads(line) for line in out.splitlines()]
                theirs_acc, theirs_passes = records[-1]["test_accuracy"], len(records)
    print(f"{'job':44} {'wall s (median)':>16} {'passes':>7} {'test accuracy':>14}")
    print(f"{'readerkit: python cli.py train --reader mnist':44} {statistics.median(ours):16.2f} {ours_passes:7d} {100 * ours_acc:13.2f}%")
    if has_torch:
        print(f"{'PyTorch MLP, DataLoader, until 97.5%':44} {statistics.median(theirs):16.2f} {theirs_passes:7d} {100 * theirs_acc:13.2f}%")
        print(f"readerkit / torch wall time: {statistics.median(ours) / statistics.median(theirs):.2f}x (goal <= 1.0x, at higher accuracy)")
    else:
        print("PyTorch is not installed: pip install torch==2.13.0 for the comparison")


if __name__ == "__main__":
    main()
