"""readers.cached: a function computed once per sample ID, kept in memory and on disk for a node.

``cached`` is the decorator; the ``memory`` tier is an LRU within a byte
budget; the ``disk`` tier is a sqlite3 ``database`` shared by a node's
processes, with ``dense`` memory-mapped files for fixed-shape entries;
``admin`` is what ``cli.py cache info|clear`` runs.
"""
