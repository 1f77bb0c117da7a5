"""Duplicate candidates kept at write time (m010; docs/database.md §duplicate-candidates)."""

from __future__ import annotations

import sqlite3

__all__ = [
    "DUP_PAIRS_TABLE",
    "DUP_SCANNED_TABLE",
    "DUP_TRIGGERS",
    "DUP_UNCHECKED_TABLE",
    "DUP_UNCHECKED_TRIGGERS",
    "m010_duplicate_candidates",
    "m031_duplicate_unchecked",
]

DUP_SCANNED_TABLE = "_thatch_dup_scanned"

DUP_PAIRS_TABLE = "_thatch_dup_pairs"

# m031: the embedded memories not compared with their store yet, by key.
DUP_UNCHECKED_TABLE = "_thatch_dup_unchecked"

DUP_TRIGGERS = (
    "thatch_dup_entries_insert",
    "thatch_dup_entries_delete",
    "thatch_dup_entries_update",
)


DUP_UNCHECKED_TRIGGERS = (
    "thatch_dup_unchecked_entries_insert",
    "thatch_dup_unchecked_entries_delete",
    "thatch_dup_unchecked_entries_update",
    "thatch_dup_unchecked_scanned_insert",
    "thatch_dup_unchecked_scanned_delete",
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


def _usable(row: str) -> str:
    """``rows.USABLE`` of ``row`` (NEW or OLD): not imported, migrations stay as written."""
    blob = f"{row}.embedding"
    return f"(typeof({blob}) = 'blob' AND length({blob}) > 0 AND length({blob}) % 4 = 0)"


def _recheck(row: str) -> str:
    """Make ``row``'s key unchecked exactly when it is usable and has no checked mark.

    Deleted, then inserted: never ``OR IGNORE``, whose policy the outer statement's
    overrides (m006); nothing here can conflict."""
    return (
        f"DELETE FROM {DUP_UNCHECKED_TABLE} WHERE store = {row}.store AND slug = {row}.slug; "
        f"INSERT INTO {DUP_UNCHECKED_TABLE} (store, slug) "
        f"SELECT {row}.store, {row}.slug WHERE {_usable(row)} AND NOT EXISTS "
        f"(SELECT 1 FROM {DUP_SCANNED_TABLE} s WHERE s.store = {row}.store "
        f"AND s.slug = {row}.slug);"
    )


def m031_duplicate_unchecked(conn: sqlite3.Connection) -> None:
    """The embedded memories not compared with their store yet (archived included, as
    ``duplicates.progress`` counts them), kept by triggers: the session start's "is any
    memory unchecked?" reads one row of it, and while the check runs counts only them.
    Counting every embedded memory and every checked mark (two counts of the whole store,
    6-10 ms at 100k memories) was paid at every session start.

    Each trigger sets a key from what it then holds, never by arithmetic, so the order
    the triggers fire in (m010's clear a checked mark before or after these run) and an
    ``INSERT OR REPLACE`` (its replaced row fires no delete trigger) leave it exact: a key
    is in the table exactly when its memory is usable and has no checked mark. Filled once
    from every memory (an anti-join reading every row, as m030's index does): a hook
    leaves it to the next MCP server or CLI command (``BUILDS_INDEXES``).
    """
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {DUP_UNCHECKED_TABLE} (store TEXT NOT NULL, "
        "slug TEXT NOT NULL, PRIMARY KEY (store, slug)) WITHOUT ROWID"
    )
    for name in DUP_UNCHECKED_TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    entries_insert, entries_delete, entries_update, scanned_insert, scanned_delete = (
        DUP_UNCHECKED_TRIGGERS
    )
    conn.execute(
        f"CREATE TRIGGER {entries_insert} AFTER INSERT ON entries BEGIN {_recheck('NEW')} END"
    )
    conn.execute(
        f"CREATE TRIGGER {entries_delete} AFTER DELETE ON entries BEGIN "
        f"DELETE FROM {DUP_UNCHECKED_TABLE} WHERE store = OLD.store AND slug = OLD.slug; END"
    )
    conn.execute(
        f"CREATE TRIGGER {entries_update} AFTER UPDATE OF slug, store, embedding, archived "
        f"ON entries BEGIN DELETE FROM {DUP_UNCHECKED_TABLE} WHERE store = OLD.store "
        f"AND slug = OLD.slug; {_recheck('NEW')} END"
    )
    conn.execute(
        f"CREATE TRIGGER {scanned_insert} AFTER INSERT ON {DUP_SCANNED_TABLE} BEGIN "
        f"DELETE FROM {DUP_UNCHECKED_TABLE} WHERE store = NEW.store AND slug = NEW.slug; END"
    )
    conn.execute(
        f"CREATE TRIGGER {scanned_delete} AFTER DELETE ON {DUP_SCANNED_TABLE} BEGIN "
        f"DELETE FROM {DUP_UNCHECKED_TABLE} WHERE store = OLD.store AND slug = OLD.slug; "
        f"INSERT INTO {DUP_UNCHECKED_TABLE} (store, slug) "
        f"SELECT e.store, e.slug FROM entries e WHERE e.store = OLD.store "
        f"AND e.slug = OLD.slug AND {_usable('e')}; END"
    )
    conn.execute(f"DELETE FROM {DUP_UNCHECKED_TABLE}")
    conn.execute(
        f"INSERT INTO {DUP_UNCHECKED_TABLE} (store, slug) SELECT e.store, e.slug "
        f"FROM entries e WHERE {_usable('e')} AND NOT EXISTS (SELECT 1 FROM "
        f"{DUP_SCANNED_TABLE} s WHERE s.store = e.store AND s.slug = e.slug)"
    )
