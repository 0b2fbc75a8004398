"""What the cache and the continual store keep on disk: sqlite3 files and entries as bytes.

``sqlite`` opens a shared sqlite3 file with its checks (marks, WAL mode, its
tables made atomically), runs transactions, shares one connection between
threads, and checks each blob's CRC-32; ``postgres`` is the same seam over a
PostgreSQL database (psycopg 3), for the pipeline store that machines
share; ``codec`` writes an entry (arrays,
numbers, strings, nested tuples and dicts) as bytes, never pickle.
"""
