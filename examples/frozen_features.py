"""Frozen features, computed once: a fixed first layer's outputs cached by sample ID, a head trained on them.

When the lower layers of a network are frozen (a pretrained backbone, or the
frozen stages of PipeTransformer), their outputs for a sample never change:
compute each sample's once, keep it, and train only the head. Here the frozen
layer is a fixed random projection of an MNIST image (784 -> 512, ReLU), made
slow on purpose (``--cost-ms`` per image, standing for a backbone's forward
pass). ``readers.cached`` keeps its outputs in memory and in ``--cache-dir``,
below the shuffle, so every pass reorders the samples and still finds them by
ID; a softmax head trains on the features.

Run from the repository root, with readerkit installed (``pip install -e .``)
or on ``PYTHONPATH``::

    python examples/frozen_features.py [--data-dir DIR] [--cache-dir DIR] [--samples 20000]
                                       [--passes 3] [--cost-ms 0.2]

It prints one line per pass (its time, the cache's hits and misses in it) and
the final test accuracy. Run it twice with the same ``--cache-dir`` and the
second run's first pass reads every feature from disk. The MNIST files come
from ``--data-dir``, else ``$READERKIT_DATA``, else the repository's sibling
``../shared/data/mnist``, else readerkit's download cache.
"""
import argparse
import functools
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import readers
import train
from readers.sources import mnist
from train import SoftmaxRegression

WIDTH = 512
_PROJECTION = np.random.default_rng(0).normal(scale=784 ** -0.5, size=(784, WIDTH)).astype(np.float32)


def frozen_layer(entry, cost_ms):
    """An image's features (float32[512]): the frozen layer's forward pass, which takes ``cost_ms`` at least."""
    image, label = entry
    until = time.perf_counter() + cost_ms / 1000
    features = np.maximum(image @ _PROJECTION, 0)
    while time.perf_counter() < until:  # the rest of a real backbone's work
        pass
    return features, label


def frozen_layer_with(cost_ms):
    """The frozen layer at ``cost_ms``: a partial, so the cost is part of the cache's key (another cost is
    another function, with entries of its own)."""
    return functools.partial(frozen_layer, cost_ms=cost_ms)


def default_data_dir():
    sibling = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist"
    return None if os.environ.get("READERKIT_DATA") or not sibling.is_dir() else str(sibling)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=default_data_dir())
    parser.add_argument("--cache-dir", help="where the features are kept (default: a temporary folder)")
    parser.add_argument("--samples", type=int, default=20000, help="training images used (0: all 60,000)")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--cost-ms", type=float, default=0.2, help="the frozen layer's time per image")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as scratch:
        folder = args.cache_dir or scratch
        images = mnist.train(args.data_dir, download=args.data_dir is None)
        if args.samples:
            images = readers.firstn(images, args.samples)
        layer = readers.cached(images, frozen_layer_with(args.cost_ms), directory=folder)
        test_images = mnist.test(args.data_dir, download=args.data_dir is None)
        test_features = readers.cached(test_images, frozen_layer_with(args.cost_ms), directory=folder)
        before = layer.stats()
        started = [time.perf_counter()]

        def report(event):
            nonlocal before
            if isinstance(event, train.BeginPass):
                started[0] = time.perf_counter()
            elif isinstance(event, train.EndPass):
                now = layer.stats()
                hits, misses = now["hits"] - before["hits"], now["misses"] - before["misses"]
                print(f"pass {event.pass_id}: {time.perf_counter() - started[0]:.2f} s, {hits} features from the "
                      f"cache, {misses} computed")
                before = now

        history = train.train(
            readers.shuffle(layer, seed=0), ["image", "label"], batch_size=128, passes=args.passes,
            model=SoftmaxRegression(WIDTH, 10, lr=3e-3, seed=0), event_handler=report, test_provider=test_features,
        )
        saved = layer.stats()["time_saved_s"]
    accuracy = history[-1]["test_accuracy"]
    print(f"the cache saved {saved:.1f} s of the frozen layer's time")
    print(f"final test accuracy: {accuracy:.1%}")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except (OSError, ValueError) as exc:
        sys.exit(f"frozen_features: {exc}")
