"""What the cache and the continual store keep on disk: sqlite3 files and entries as bytes.

``codec`` writes an entry (arrays, numbers, strings, nested tuples and
dicts) as bytes, never pickle.
"""
