"""The decorators: readers made from other readers, entry by entry or pass by pass.

``maps`` (map_readers, with_index), ``slicing`` (firstn, skip, filter_entries),
``combine`` (chain, compose), ``shuffling`` (shuffle, on the keyed
``permutation``), ``sharding`` (shard by global worker), ``locality``
(node_shuffle), ``row_groups`` (shuffle_row_groups: row-group locality), ``mixing`` (mix: weighted blends) and ``replay`` (repeat,
cache). Each keeps the stage contract of ``readers.stage``; the public names
are ``readers.X``.
"""
