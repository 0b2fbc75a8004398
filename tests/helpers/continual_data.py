"""A small class-incremental stream for the pipeline tests: Gaussian blobs, two classes per task, a day each."""
import os

import numpy as np

import readers
import train

DAY = 86400.0


def blobs(tasks=3, per_task=160, dim=6, seed=0, test_per_task=40):
    """(stream, test, source): task k holds classes 2k, 2k+1, one blob each; entries (x, label, key, time).

    ``source`` is the indexed reader the keys index (entry key is (x, label)), as the MNIST split is for Split-MNIST.
    """
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-4, 4, size=(2 * tasks, dim)).astype(np.float32)

    def make(n):
        labels = np.concatenate([2 * k + rng.integers(0, 2, n) for k in range(tasks)]).astype(np.int64)
        x = (centres[labels] + rng.normal(scale=0.5, size=(len(labels), dim))).astype(np.float32)
        times = np.concatenate([k * DAY + np.arange(n) * DAY / n for k in range(tasks)])
        return x, labels, times

    x, labels, times = make(per_task)
    keys = rng.permutation(len(labels))  # keys name rows of the source, in another order than the stream's
    source_x, source_y = np.empty_like(x), np.empty_like(labels)
    source_x[keys], source_y[keys] = x, labels
    stream = readers.from_sequence([(x[i], int(labels[i]), int(keys[i]), float(times[i])) for i in range(len(x))])
    tx, tl, tt = make(test_per_task)
    test = readers.from_sequence([(tx[i], int(tl[i]), i, float(tt[i])) for i in range(len(tx))])
    return stream, test, readers.from_arrays(source_x, source_y)


def softmax(dim=6, classes=6, lr=0.05):
    """A model factory as run_pipeline calls it: model(seed)."""
    return lambda seed: train.SoftmaxRegression(dim, classes, lr=lr, seed=seed)


def fake_mnist(folder, per_class=30, test_per_class=10, seed=0):
    """MNIST files in ``folder`` whose ten classes are easy to tell apart: a bright band per class, plus noise."""
    from readers.sources.idx import write_idx

    rng = np.random.default_rng(seed)
    os.makedirs(folder, exist_ok=True)
    for split, n in (("train", per_class), ("t10k", test_per_class)):
        labels = rng.permutation(np.repeat(np.arange(10), n)).astype(np.uint8)
        images = rng.integers(0, 60, size=(len(labels), 28, 28)).astype(np.uint8)
        for i, label in enumerate(labels):
            images[i, 2 * label + 4:2 * label + 7, :] = 250
        write_idx(f"{folder}/{split}-images-idx3-ubyte", images)
        write_idx(f"{folder}/{split}-labels-idx1-ubyte", labels)
    return str(folder)
