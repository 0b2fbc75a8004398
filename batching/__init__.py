"""readerkit batching: minibatches of entries, collation into arrays, bucketing.

>>> import readers
>>> r = readers.from_arrays([[1, 2], [3, 4], [5, 6]], [0, 1, 0])
>>> [len(b) for b in batch(r, 2)()]
[2, 1]
>>> images, labels = next(iter(collated(batch(r, 2))()))
>>> images.tolist(), labels.tolist()
([[1, 2], [3, 4]], [0, 1])
"""
from toolz import curry

from batching import minibatch as _batch
from batching import bucket as _bucket
from batching.collate import Padded, collate

__all__ = ["Padded", "batch", "bucket_by_length", "collate", "collated"]

# The curried namespace, one line per decorator: options may come first.
batch = curry(_batch.batch)
bucket_by_length = curry(_bucket.bucket_by_length)
collated = curry(_batch.collated)
