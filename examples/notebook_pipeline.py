"""A notebook-style tour of MNIST: compose a pipeline, look inside it, batch it, train on it.

Each ``# %%`` marker starts a cell (VS Code, PyCharm and Jupytext run them one
by one); as a script it runs top to bottom, from the repository root, with
readerkit installed (``pip install -e .``) or on ``PYTHONPATH``::

    python examples/notebook_pipeline.py [mnist-dir]

The MNIST files come from ``mnist-dir``, else ``$READERKIT_DATA``, else the
repository's sibling ``../shared/data/mnist``, else readerkit's download cache.
"""
# %% Where the data is
# `__file__` and the command line only mean something when this runs as a script.
import os
import sys
from pathlib import Path

import toolz

import batching
import readers
import train
from readers.sources import mnist
from train import MLP

script = globals().get("__file__")
args = sys.argv[1:] if script else []
sibling = (Path(script).resolve().parent if script else Path.cwd()).parents[1] / "shared" / "data" / "mnist"
if args:
    data_dir = args[0]
elif os.environ.get("READERKIT_DATA") or not sibling.is_dir():
    data_dir = None  # readerkit looks in $READERKIT_DATA, then its cache, downloading what is missing
else:
    data_dir = str(sibling)

# %% Compose the pipeline
# Nothing is read yet: each stage only wraps the one before. The MNIST reader is
# indexed (len, [i]), and so is firstn of it, so shuffle without a buffer size is a
# global shuffle: a fresh permutation each pass, decided by (seed, pass) alone.
pipeline = toolz.pipe(
    mnist.train(data_dir),
    readers.firstn(n=30_000),  # half the training set keeps the tour quick
    readers.shuffle(seed=0),
)
print(pipeline)

# %% Preview a few entries
# An entry is (image, label): 784 pixels scaled to 0..1, and an int class.
for image, label in readers.firstn(pipeline, 3)():
    print(f"image {image.shape} {image.dtype} in [{image.min():.1f}, {image.max():.1f}]  label {label}")

# %% A collated batch
# batch groups entries into lists; collated turns each list into one array per column.
# train() does the same internally, so this cell shows exactly what the model is fed.
batches = toolz.pipe(pipeline, batching.batch(batch_size=128), batching.collated())
images, labels = next(iter(batches()))
print(f"images {images.shape} {images.dtype}, labels {labels.shape} {labels.dtype}: {labels[:10].tolist()} ...")

# %% Train an MLP
# EndPass carries the pass's training metrics; TestResult follows it, once the test split is scored.
seen = {}


def report(event):
    if isinstance(event, train.EndPass):
        seen.update(event.metrics)
    elif isinstance(event, train.TestResult):
        print(f"pass {event.pass_id}: train loss {seen['loss']:.4f}  train accuracy {seen['accuracy']:.2%}  "
              f"test accuracy {event.metrics['accuracy']:.2%}  {seen['samples_per_s']:,.0f} samples/s")


history = train.train(
    pipeline, ["image", "label"],  # column 0 feeds the model's "image" input, column 1 its "label"
    batch_size=128, passes=2,
    model=MLP(hidden=(256,), lr=3e-3, seed=0),
    event_handler=report,
    test_provider=mnist.test(data_dir),
)

# %% The result
print(f"final test accuracy: {history[-1]['test_accuracy']:.2%}")
