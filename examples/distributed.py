"""Data-parallel training under torchrun: a readerkit pipeline sharded over every DataLoader worker of every rank.

Each rank builds the same pipeline, ``shuffle(seed=0)`` then ``shard(equalize="pad")``,
and wraps it with ``readers.torch_dataset`` for a DataLoader with 2 workers. The
shard is chosen inside each worker as its pass starts, so the 2 ranks x 2 workers
read disjoint quarters of every epoch, and ``equalize="pad"`` tops the short
quarters up with entries of weight 0, so every rank takes the same number of
steps and DistributedDataParallel's gradient all-reduce never waits for a rank
that ran out of data. The weight column is the per-sample loss weight.

Run from the repository root, with readerkit installed (``pip install -e .``)
or on ``PYTHONPATH``, two processes on this machine that meet on 127.0.0.1
(``GLOO_SOCKET_IFNAME=lo``, on Linux, keeps gloo's own connections on loopback too)::

    GLOO_SOCKET_IFNAME=lo torchrun --nnodes 1 --nproc-per-node 2 --master-addr 127.0.0.1 \\
        --master-port 29500 examples/distributed.py [--data-dir MNIST_DIR] [--samples N] [--epochs E]

``--standalone`` instead of the address and port picks a free port. Either way
torch's rendezvous store listens on all interfaces; tests/helpers/torchrun_job.py
shows how to keep it on 127.0.0.1.

Without torchrun, ``python examples/distributed.py`` trains in one process, its
two DataLoader workers sharing the data. The data is MNIST from ``--data-dir``
or ``$READERKIT_DATA`` when given (nothing is downloaded), else generated
MNIST-like arrays: 784 features in 0..1 and 10 classes.

Every rank prints one line per epoch (its steps, samples and padding), and
rank 0 prints the accuracy on the training data, measured over all ranks.
"""
import argparse
import datetime
import os

import numpy as np
import toolz
import torch
import torch.distributed as dist
import torch.nn.functional as F

import readers
from readers.sources import mnist


def say(line: str) -> None:
    """Print ``line`` in one write: the ranks share one output, and a line must not be split by another's."""
    print(line + "\n", end="", flush=True)


def generated(samples: int, seed: int = 0):
    """MNIST-like data: 10 random 784-pixel prototypes, each sample a noisy copy of one, in 0..1."""
    rng = np.random.default_rng(seed)
    prototypes = rng.random((10, 784), dtype=np.float32)
    labels = rng.integers(0, 10, samples)
    images = np.clip(prototypes[labels] + rng.normal(0, 0.3, (samples, 784)).astype(np.float32), 0, 1)
    return readers.from_arrays(images, labels)


def source(args):
    data_dir = args.data_dir or os.environ.get("READERKIT_DATA")
    if not data_dir:
        return generated(args.samples or 2000)
    train_images = mnist.train(args.data_dir, download=False)  # None: readerkit looks in $READERKIT_DATA
    return readers.firstn(train_images, args.samples) if args.samples else train_images


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", help="a folder with the MNIST files (default: $READERKIT_DATA, else generated data)")
    parser.add_argument("--samples", type=int, default=None, help="use the first N samples (default: all; 2000 generated)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:  # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)

    # the same seed on every rank: one order for the whole epoch, which shard then splits
    pipeline = toolz.pipe(source(args), readers.shuffle(seed=0), readers.shard(equalize="pad"))
    dataset = readers.torch_dataset(pipeline)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, num_workers=2)

    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    model = torch.nn.Sequential(torch.nn.Linear(784, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    if distributed:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)

    for epoch in range(args.epochs):
        dataset.set_epoch(epoch)  # pass `epoch` of the pipeline: a new shuffle, the same on every rank
        steps, real, pads, total_loss = 0, 0, 0, 0.0
        for images, labels, weights in loader:
            weights = weights.float()
            losses = F.cross_entropy(model(images), labels, reduction="none")
            loss = (losses * weights).sum() / weights.sum().clamp(min=1)  # padding counts for nothing
            optimizer.zero_grad()
            loss.backward()  # under DDP, the gradient all-reduce: every rank must get here equally often
            optimizer.step()
            steps += 1
            real += int(weights.sum())
            pads += int((weights == 0).sum())
            total_loss += float((losses.detach() * weights).sum())
        say(f"rank {rank}/{world}: epoch {epoch}: {steps} steps, {real} samples (+{pads} padding), "
            f"mean loss {total_loss / max(real, 1):.3f}")

    # accuracy on the training data: each rank scores its shard, the counts are summed
    correct = torch.zeros(2, dtype=torch.float64)
    with torch.no_grad():
        for images, labels, weights in loader:
            hits = (model(images).argmax(1) == labels).double()
            correct += torch.stack([(hits * weights).sum(), weights.sum()])
    if distributed:
        dist.all_reduce(correct)
    if rank == 0:
        say(f"accuracy on the training data: {float(correct[0] / correct[1]):.2%} of {int(correct[1])} samples")
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
