"""The change log: which memories changed, read for the caches (the database core).

Triggers keep it in the database (``migrations.changes``, m004-m007), so writes from any
client are counted and logged: a per-store counter (``_thatch_store_versions``) and the
keys of the rows each write touched (``_thatch_entry_changes``, an increasing ``seq``,
pruned to the last ``CHANGES_KEPT`` entries). The vector matrices (``matrix_cache``),
their shared snapshots (``vector_snapshot``) and the duplicate check (``duplicates``)
follow it through these queries, each inside the caller's transaction.
"""

from __future__ import annotations

import sqlite3
from typing import NamedTuple

from thatch.frontend.store.migrations.changes import CHANGES_KEPT, CHANGES_TABLE, VERSIONS_TABLE

__all__ = [
    "CHANGES_KEPT",
    "LogPosition",
    "changed_slugs",
    "log_bounds",
    "log_position",
    "logged",
    "logged_since",
    "store_version",
]


class LogPosition(NamedTuple):
    """A store's change counter and the change log's last sequence number, read together."""

    version: int
    seq: int


def log_position(conn: sqlite3.Connection, store: str) -> LogPosition:
    version, seq = conn.execute(
        f"SELECT (SELECT version FROM {VERSIONS_TABLE} WHERE store = ?), "
        f"(SELECT max(seq) FROM {CHANGES_TABLE})",
        (store,),
    ).fetchone()
    return LogPosition(int(version or 0), int(seq or 0))


def store_version(conn: sqlite3.Connection, store: str) -> int:
    """The store's change counter (0 before its first write)."""
    row = conn.execute(f"SELECT version FROM {VERSIONS_TABLE} WHERE store = ?", (store,)).fetchone()
    return int(row[0]) if row else 0


def log_bounds(conn: sqlite3.Connection) -> tuple[int | None, int | None]:
    """The first and last sequence numbers still in the log (None: empty)."""
    low, high = conn.execute(
        f"SELECT (SELECT min(seq) FROM {CHANGES_TABLE}), (SELECT max(seq) FROM {CHANGES_TABLE})"
    ).fetchone()
    return low, high


def changed_slugs(conn: sqlite3.Connection, store: str, after: int) -> list[str]:
    """The keys of ``store`` logged after sequence number ``after``, each once."""
    return [
        row[0]
        for row in conn.execute(
            f"SELECT DISTINCT slug FROM {CHANGES_TABLE} WHERE store = ? AND seq > ?",
            (store, after),
        )
    ]


def logged(conn: sqlite3.Connection, after: int, upto: int) -> list[tuple[int, str, str]]:
    """(seq, store, slug) of the log entries in (``after``, ``upto``], in order."""
    return conn.execute(
        f"SELECT seq, store, slug FROM {CHANGES_TABLE} WHERE seq > ? AND seq <= ? ORDER BY seq",
        (after, upto),
    ).fetchall()


def logged_since(conn: sqlite3.Connection, store: str, slug: str, after: int) -> bool:
    """Whether the key was logged after sequence number ``after``."""
    return (
        conn.execute(
            f"SELECT 1 FROM {CHANGES_TABLE} WHERE store = ? AND seq > ? AND slug = ? LIMIT 1",
            (store, after, slug),
        ).fetchone()
        is not None
    )
