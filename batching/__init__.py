"""readerkit batching: minibatches of entries, collation into arrays, bucketing.

>>> import readers
>>> r = readers.from_arrays([[1, 2], [3, 4], [5, 6]], [0, 1, 0])
>>> [len(b) for b in batch(r, 2)()]
[2, 1]
>>> images, labels = next(iter(collated(batch(r, 2))()))
>>> images.tolist(), labels.tolist()
([[1, 2], [3, 4]], [0, 1])
"""
from batching import bucket as _bucket
from batching import minibatch as _batch
from batching.collate import Padded, collate, collate_column
from readers.currying import Curried as _Curried

__all__ = ["Padded", "batch", "bucket_by_length", "collate", "collate_column", "collated"]

# The curried namespace, one line per decorator (toolz.curry): given only options, a decorator
# waits for its reader (toolz.pipe); given the reader, it runs, so a missing option is an error.
batch = _Curried(_batch.batch)
bucket_by_length = _Curried(_bucket.bucket_by_length)
collated = _Curried(_batch.collated)
