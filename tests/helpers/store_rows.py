"""Rows of a pipeline store changed behind its back, as another process (or damage) would, on either backend.

``execute(db, sql, params)`` runs one statement, with sqlite's ``?``
placeholders, on a sqlite file's path or a PostgreSQL URL, and commits it;
``set_row(db, pipeline_id, column=value, ...)`` changes a pipeline's row.
"""
from __future__ import annotations

import sqlite3

__all__ = ["execute", "is_postgres", "set_row"]


def is_postgres(db) -> bool:
    return str(db).startswith(("postgresql://", "postgres://"))


def execute(db, sql: str, params: tuple = ()) -> list:
    """Run ``sql`` on the store ``db`` (path or URL) and commit; its rows, if any."""
    if is_postgres(db):
        import psycopg
        with psycopg.connect(str(db), autocommit=True) as connection:
            cursor = connection.execute(sql.replace("?", "%s"), params)
            return cursor.fetchall() if cursor.description else []
    connection = sqlite3.connect(db)
    try:
        with connection:
            return connection.execute(sql, params).fetchall()
    finally:
        connection.close()


def set_row(db, pipeline_id: int, **columns) -> None:
    """Change a pipeline's row as another process's writes (or their absence) would have."""
    sets = ", ".join(f"{name} = ?" for name in columns)
    execute(db, f"UPDATE pipelines SET {sets} WHERE pipeline_id = ?", (*columns.values(), pipeline_id))
