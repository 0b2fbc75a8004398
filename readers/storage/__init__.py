"""What the cache and the continual store keep on disk: sqlite3 files and entries as bytes.

``sqlite`` opens a shared sqlite3 file with its checks (marks, WAL mode, its
tables made atomically), runs transactions, shares one connection between
threads, and checks each blob's CRC-32; ``codec`` writes an entry (arrays,
numbers, strings, nested tuples and dicts) as bytes, never pickle.
"""
