"""A model that records the sample IDs it trains on, in its own checkpointed state.

Because the IDs live in state_dict, a checkpoint holds exactly the IDs whose
updates are in the saved weights: after a kill and a resume, the final state
lists every sample that contributed to the model, each as often as it did.
"""
import numpy as np

import readers
from readers.sources.idx import write_idx
from train.models.classifiers import SoftmaxRegression

N, FEATURES, CLASSES = 203, 5, 3


def dataset(seed: int = 0):
    """A small indexed reader of (features, label), shuffled globally per pass."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N, FEATURES)).astype(np.float32)
    y = (x[:, :CLASSES].argmax(axis=1)).astype(np.int64)
    return readers.with_index(readers.shuffle(readers.from_arrays(x, y), seed=seed))


MAPPING = {"image": 0, "label": 1, "id": 2}


class RecordingModel:
    def __init__(self, seed: int = 0):
        self.inner = SoftmaxRegression(FEATURES, CLASSES, lr=0.05, seed=seed)
        self.seen = np.zeros(0, dtype=np.int64)

    def step(self, batch):
        self.seen = np.concatenate([self.seen, np.asarray(batch["id"], dtype=np.int64)])
        return self.inner.step({"image": batch["image"], "label": batch["label"]})

    def evaluate(self, batch):
        return self.inner.evaluate({"image": batch["image"], "label": batch["label"]})

    def state_dict(self):
        return {**self.inner.state_dict(), "seen_ids": self.seen}

    def load_state_dict(self, state):
        state = dict(state)
        self.seen = np.asarray(state.pop("seen_ids"), dtype=np.int64)
        self.inner.load_state_dict(state)


def write_mnist(folder, seed: int = 0, sizes=(("train", 300), ("t10k", 60))):
    """MNIST-format files in ``folder``: images whose label is their brightest row band."""
    rng = np.random.default_rng(seed)
    for split, n in sizes:
        labels = rng.integers(0, 10, size=n).astype(np.uint8)
        images = rng.integers(0, 40, size=(n, 28, 28)).astype(np.uint8)
        for i, label in enumerate(labels):
            images[i, label * 2:label * 2 + 3, :] = 255
        write_idx(folder / f"{split}-images-idx3-ubyte.gz", images, compress=True)
        write_idx(folder / f"{split}-labels-idx1-ubyte", labels)
    return folder
