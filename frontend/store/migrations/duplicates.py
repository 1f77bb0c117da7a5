"""Duplicate candidates kept at write time (m010; docs/database.md §duplicate-candidates)."""

from __future__ import annotations

import sqlite3

__all__ = [
    "DUP_PAIRS_TABLE",
    "DUP_SCANNED_TABLE",
    "DUP_TRIGGERS",
    "m010_duplicate_candidates",
]

DUP_SCANNED_TABLE = "_thatch_dup_scanned"

DUP_PAIRS_TABLE = "_thatch_dup_pairs"

DUP_TRIGGERS = (
    "thatch_dup_entries_insert",
    "thatch_dup_entries_delete",
    "thatch_dup_entries_update",
)


def _unscan(row: str) -> str:
    """Forget that ``row``'s key was compared with its store, and every pair naming it.

    By key: an ``INSERT OR REPLACE`` (the earlier release's way to overwrite) fires only
    the insert trigger, which then clears what the replaced row had. Nothing here can
    conflict, so the outer statement's conflict policy never matters.
    """
    return (
        f"DELETE FROM {DUP_SCANNED_TABLE} WHERE store = {row}.store AND slug = {row}.slug; "
        f"DELETE FROM {DUP_PAIRS_TABLE} WHERE store = {row}.store AND slug_a = {row}.slug; "
        f"DELETE FROM {DUP_PAIRS_TABLE} WHERE store = {row}.store AND slug_b = {row}.slug;"
    )


def m010_duplicate_candidates(conn: sqlite3.Connection) -> None:
    """Duplicate candidates kept at write time (docs/database.md §duplicate-candidates).

    ``_thatch_dup_scanned`` names the memories already compared with their store;
    ``_thatch_dup_pairs`` holds, per compared memory, its nearest neighbours with cosine at
    least the floor (sorted slugs, exact score). Triggers clear both for any key whose
    vector, archived flag or key changes, whoever writes (the earlier release included), so
    a stored pair is never stale: a cleared memory is only unchecked until compared again.
    Only tables and triggers: existing memories are compared later in short chunks
    (``Store.check_duplicates``), never inside this transaction.
    """
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {DUP_SCANNED_TABLE} (store TEXT NOT NULL, "
        "slug TEXT NOT NULL, PRIMARY KEY (store, slug)) WITHOUT ROWID"
    )
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {DUP_PAIRS_TABLE} (store TEXT NOT NULL, "
        "slug_a TEXT NOT NULL, slug_b TEXT NOT NULL, score REAL NOT NULL, "
        "PRIMARY KEY (store, slug_a, slug_b)) WITHOUT ROWID"
    )
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS thatch_dup_pairs_b ON {DUP_PAIRS_TABLE} (store, slug_b)"
    )
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS thatch_dup_pairs_score ON {DUP_PAIRS_TABLE} (store, score)"
    )
    for name in DUP_TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    conn.execute(
        f"CREATE TRIGGER {DUP_TRIGGERS[0]} AFTER INSERT ON entries BEGIN {_unscan('NEW')} END"
    )
    conn.execute(
        f"CREATE TRIGGER {DUP_TRIGGERS[1]} AFTER DELETE ON entries BEGIN {_unscan('OLD')} END"
    )
    conn.execute(
        f"CREATE TRIGGER {DUP_TRIGGERS[2]} AFTER UPDATE OF slug, store, embedding, archived "
        "ON entries WHEN OLD.slug IS NOT NEW.slug OR OLD.store IS NOT NEW.store "
        "OR OLD.embedding IS NOT NEW.embedding OR OLD.archived IS NOT NEW.archived "
        f"BEGIN {_unscan('OLD')} {_unscan('NEW')} END"
    )
