"""Training on WebDataset shards: MNIST digits written as PNG shards with webdataset, read with ``readers.tar_shards``.

WebDataset keeps samples as consecutive members of ``.tar`` shards, one
member a field (``00042.png``, ``00042.cls``). This example

1. writes a subset of MNIST (``--samples`` training digits, 2,000 test ones)
   with webdataset's own ``ShardWriter``: each digit a PNG (Pillow) and its
   class, ``--per-shard`` samples a shard, into a temporary folder removed at
   the end;
2. reads them back with ``readers.tar_shards``, which decodes the PNGs to
   ``uint8`` arrays and the ``.cls`` fields to ints; training shuffles the
   shard order (seeded, anew each pass) and then the samples in a buffer of
   1,000, and maps each sample to ``(image, label)``: 784 pixels scaled to 0..1;
3. trains an MLP on them and prints each pass's test accuracy and the final one.

From the repository root, with readerkit installed (``pip install -e .[images]``
and ``pip install webdataset``) or on ``PYTHONPATH``::

    python examples/webdataset_images.py [mnist-dir] [--samples N] [--per-shard N] [--passes N]

The MNIST files come from ``mnist-dir``, else ``$READERKIT_DATA``, else the
repository's sibling ``../shared/data/mnist``, else readerkit's download cache.
It exits non-zero with one line when webdataset or Pillow is missing.
"""
import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import readers
import train
from readers.sources import mnist
from train import MLP

ROOT = Path(__file__).resolve().parents[1]
SIBLING = ROOT.parent / "shared" / "data" / "mnist"
TEST_SAMPLES = 2_000


def data_dir_of(given):
    """The MNIST folder: the one given, else None when $READERKIT_DATA is set or there is no sibling, else it."""
    if given:
        return given
    if os.environ.get("READERKIT_DATA") or not SIBLING.is_dir():
        return None  # readerkit looks in $READERKIT_DATA, then its cache, downloading what is missing
    return str(SIBLING)


def write_shards(split, folder, samples, per_shard):
    """The first ``samples`` digits of ``split`` as WebDataset shards in ``folder``, by webdataset's ShardWriter."""
    import webdataset as wds
    from PIL import Image

    images, labels = split.arrays()  # the raw uint8 (n, 784) pixels and labels
    os.makedirs(folder)
    with wds.ShardWriter(os.path.join(folder, "shard-%06d.tar"), maxcount=per_shard, verbose=0) as sink:
        for i in range(min(samples, len(labels))):
            # webdataset encodes the fields by extension: the PIL image as PNG, the class as its decimal text
            sink.write({"__key__": f"{i:06d}", "png": Image.fromarray(images[i].reshape(28, 28)),
                        "cls": int(labels[i])})
    return sorted(Path(folder).glob("shard-*.tar"))


def image_and_label(sample):
    """A decoded sample (a dict: "png" a uint8 28x28x3 array, "cls" an int) as (784 floats in 0..1, label)."""
    pixels = sample["png"][..., 0].reshape(-1)  # Pillow decodes to RGB: the three channels of a grey digit are equal
    return np.divide(pixels, np.float32(255), dtype=np.float32), sample["cls"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", nargs="?", help="the folder of the MNIST files")
    parser.add_argument("--samples", type=int, default=12_000, help="training digits to write (default 12,000)")
    parser.add_argument("--per-shard", type=int, default=1_000, help="samples a shard (default 1,000)")
    parser.add_argument("--passes", type=int, default=3, help="training passes (default 3)")
    args = parser.parse_args(argv)
    try:
        import PIL  # noqa: F401
        import webdataset  # noqa: F401
    except ImportError as exc:
        sys.exit(f"webdataset_images: this example needs webdataset and Pillow ({exc.name} is missing): "
                 "pip install webdataset 'readerkit[images]'")

    data_dir = data_dir_of(args.data_dir)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="webdataset-mnist-") as folder:
        train_shards = write_shards(mnist.train(data_dir), os.path.join(folder, "train"), args.samples,
                                    args.per_shard)
        test_shards = write_shards(mnist.test(data_dir), os.path.join(folder, "test"), TEST_SAMPLES, args.per_shard)
        size = sum(p.stat().st_size for p in train_shards + test_shards)
        print(f"wrote {len(train_shards)} training shards and {len(test_shards)} test shards of up to "
              f"{args.per_shard} PNG digits, {size / 1e6:.1f} MB, in {time.perf_counter() - start:.1f} s")

        # brace patterns, as a user names shards; nothing is opened until a pass starts
        train_data = readers.tar_shards(os.path.join(folder, "train", f"shard-{{000000..{len(train_shards) - 1:06d}}}.tar"),
                                        seed=0)
        test_data = readers.tar_shards(os.path.join(folder, "test", f"shard-{{000000..{len(test_shards) - 1:06d}}}.tar"))
        print(f"train: {train_data!r}, test: {test_data!r}")
        first = next(iter(train_data()))
        print(f"a sample: {sorted(first)}, png {first['png'].shape} {first['png'].dtype}, cls {first['cls']}")

        shuffled = readers.shuffle(train_data, 1_000, seed=0)  # the seeded shard order, then a buffer of samples

        def report(event):
            if isinstance(event, train.TestResult):
                print(f"pass {event.pass_id}: test accuracy {event.metrics['accuracy']:.2%}")

        start = time.perf_counter()
        history = train.train(readers.map_readers(image_and_label, shuffled), ["image", "label"], batch_size=128,
                              passes=args.passes, model=MLP(hidden=(256,), lr=3e-3, seed=0), event_handler=report,
                              test_provider=readers.map_readers(image_and_label, test_data), seed=0)
        print(f"trained {args.passes} passes in {time.perf_counter() - start:.1f} s")
    print(f"final test accuracy: {history[-1]['test_accuracy']:.2%}")


if __name__ == "__main__":
    main()
