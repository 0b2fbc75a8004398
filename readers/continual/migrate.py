"""``migrate_store``: a pipeline store copied whole into an empty one, either backend to either (``pipeline migrate``).

Every pipeline, trigger, training and model is copied with its ids, and
the sets and models as they are stored: their bytes and CRC-32s, unchecked
(a damaged one stays damaged, and is refused where it is read). The source
is read in one snapshot; the destination is written in one transaction, so a
copy that fails leaves it empty. A pipeline that a live process holds is
refused: stop it first, or the copy would miss what it writes next.
"""
from __future__ import annotations

import os

from readers.continual import schema
from readers.continual.store import PipelineStore
from readers.errors import BadValue

__all__ = ["migrate_store"]


def migrate_store(source: str | os.PathLike, destination: str | os.PathLike) -> dict[str, int]:
    """Copy the pipeline store ``source`` into ``destination`` (made if missing, refused unless empty); return the
    rows copied per table. Each is a sqlite file's path or a ``postgresql://`` URL.

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> with PipelineStore(f"{folder.name}/a.db") as store:
    ...     p = store.register_pipeline({"strategy": "all"})
    ...     store.add_trigger(p, 0, [3, 1], [0.5, 1.0], position=2)
    >>> migrate_store(f"{folder.name}/a.db", f"{folder.name}/b.db")
    {'pipelines': 1, 'triggers': 1, 'trainings': 0, 'models': 0}
    >>> with PipelineStore(f"{folder.name}/b.db", create=False) as copy:
    ...     copy.trigger(1, 0).keys.tolist()
    [3, 1]
    >>> migrate_store(f"{folder.name}/a.db", f"{folder.name}/b.db")
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: pipeline migrate: the destination .../b.db is not empty (it holds 1 pipeline, 1 trigger, 0 trainings, 0 models): give an empty store (a new file, or a new database: createdb NAME)
    """
    with PipelineStore(source, create=False) as src, PipelineStore(destination) as dst:
        for p in src.pipelines():
            held = src.lease(p["pipeline_id"])
            if held is not None and held["alive"]:
                raise BadValue(f"pipeline migrate: pipeline {p['pipeline_id']} of {src.path} is held by process "
                               f"{held['pid']} on host {held['host']!r}, which runs it: stop it first (the copy would "
                               "miss what it writes next)")
        rows = {}
        with src._db.transaction(write=False) as db:  # (one snapshot of every table)
            for table, columns in schema.COLUMNS.items():
                selected = ", ".join(f"CAST({c} AS {src._db.blob})" if c in schema.BLOBS else c for c in columns)
                rows[table] = db.execute(f"SELECT {selected} FROM {table} ORDER BY {columns[0]}").fetchall()
        with dst._db.transaction(write=True) as db:
            counts = {table: db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] for table in schema.COLUMNS}
            if any(counts.values()):
                held = ", ".join(f"{n} {table[:-1]}{'s' * (n != 1)}" for table, n in counts.items())
                raise BadValue(f"pipeline migrate: the destination {dst.path} is not empty (it holds {held}): give an "
                               "empty store (a new file, or a new database: createdb NAME)")
            for table, columns in schema.COLUMNS.items():
                marks = ", ".join("?" for _ in columns)
                for row in rows[table]:
                    db.execute(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})",
                               tuple(bytes(v) if isinstance(v, memoryview) else v for v in row))
            dst._db.ids_taken(db, "pipelines", "pipeline_id")
            dst._db.ids_taken(db, "trainings", "training_id")
    return {table: len(found) for table, found in rows.items()}
