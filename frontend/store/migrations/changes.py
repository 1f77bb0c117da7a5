"""Per-store change counters and the ``entries`` change log the caches follow (m004-m007).

The triggers live in the database, so writes by any client (the earlier release included)
are counted and logged; ``changelog`` reads what they keep."""

from __future__ import annotations

import sqlite3

from thatch.frontend.store.rows import MISSING, USABLE

__all__ = [
    "CHANGES_KEPT",
    "CHANGES_TABLE",
    "ENTRY_TRIGGERS",
    "PENDING_INDEX",
    "VERSIONS_TABLE",
    "m004_store_versions",
    "m005_pending_index",
    "m006_conflict_free_triggers",
    "m007_change_log",
]

VERSIONS_TABLE = "_thatch_store_versions"

# Every change to an entry except its recall telemetry: what a cached vector matrix or
# a displayed row depends on. Telemetry stamps (every recall) must not drop the cache.
_VERSIONED_COLUMNS = (
    "slug, store, label, content, embedding, model, branch, confidence, archived, "
    "created_at, updated_at"
)


def _bump(row: str) -> str:
    return (
        f"INSERT OR IGNORE INTO {VERSIONS_TABLE} (store, version) VALUES ({row}.store, 0); "
        f"UPDATE {VERSIONS_TABLE} SET version = version + 1 WHERE store = {row}.store;"
    )


def m004_store_versions(conn: sqlite3.Connection) -> None:
    """Per-store change counters kept by triggers, so caches survive unrelated commits.

    Triggers live in the database, so writes by any client (an earlier release included)
    move the counter; ``PRAGMA data_version`` alone would drop every cached matrix on each
    commit anywhere in the file, telemetry stamps and chat heartbeats included.
    Its trigger bodies conflict under an outer upsert; m006 replaces them (this step is
    kept as it was so that databases which recorded it stay comparable).
    """
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {VERSIONS_TABLE} "
        "(store TEXT PRIMARY KEY, version INTEGER NOT NULL)"
    )
    conn.execute(
        "CREATE TRIGGER IF NOT EXISTS thatch_entries_insert AFTER INSERT ON entries "
        f"BEGIN {_bump('NEW')} END"
    )
    conn.execute(
        "CREATE TRIGGER IF NOT EXISTS thatch_entries_delete AFTER DELETE ON entries "
        f"BEGIN {_bump('OLD')} END"
    )
    conn.execute(
        f"CREATE TRIGGER IF NOT EXISTS thatch_entries_update AFTER UPDATE OF {_VERSIONED_COLUMNS} "
        f"ON entries BEGIN {_bump('NEW')} END"
    )
    conn.execute(
        "CREATE TRIGGER IF NOT EXISTS thatch_entries_move AFTER UPDATE OF store ON entries "
        f"WHEN OLD.store IS NOT NEW.store BEGIN {_bump('OLD')} END"
    )


# Every store's pending rows, oldest first (m005; one store's: m030's).
PENDING_INDEX = "thatch_entries_pending"


def m005_pending_index(conn: sqlite3.Connection) -> None:
    """Pending rows found without scanning the table (every recall asks for them)."""
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS {PENDING_INDEX} "
        f"ON entries (updated_at, store, slug) WHERE {MISSING}"
    )


def _bump_never_conflicting(row: str) -> str:
    """The counter bump as statements that cannot conflict under any outer policy.

    Inside a trigger the outer statement's conflict policy replaces the trigger's own
    (an ``INSERT OR IGNORE`` fired by an upsert aborts on conflict), so the row is created
    only when missing, and the bump itself is an UPDATE of a key it does not change.
    """
    return (
        f"INSERT INTO {VERSIONS_TABLE} (store, version) SELECT {row}.store, 0 "
        f"WHERE NOT EXISTS (SELECT 1 FROM {VERSIONS_TABLE} WHERE store = {row}.store); "
        f"UPDATE {VERSIONS_TABLE} SET version = version + 1 WHERE store = {row}.store;"
    )


ENTRY_TRIGGERS = (
    "thatch_entries_insert",
    "thatch_entries_delete",
    "thatch_entries_update",
    "thatch_entries_move",
)


def m006_conflict_free_triggers(conn: sqlite3.Connection) -> None:
    """Replace m004's triggers: the earlier release's upsert failed on their INSERT OR IGNORE.

    ``INSERT … ON CONFLICT(slug, store) DO UPDATE`` into entries fired the insert trigger
    under the upsert's ABORT policy, so its ``INSERT OR IGNORE`` into the counters raised
    ``UNIQUE constraint failed``. The counters stay (older thatch processes still key on
    them); only the trigger bodies change.
    """
    for name in ENTRY_TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    conn.execute(
        "CREATE TRIGGER thatch_entries_insert AFTER INSERT ON entries "
        f"BEGIN {_bump_never_conflicting('NEW')} END"
    )
    conn.execute(
        "CREATE TRIGGER thatch_entries_delete AFTER DELETE ON entries "
        f"BEGIN {_bump_never_conflicting('OLD')} END"
    )
    conn.execute(
        f"CREATE TRIGGER thatch_entries_update AFTER UPDATE OF {_VERSIONED_COLUMNS} "
        f"ON entries BEGIN {_bump_never_conflicting('NEW')} END"
    )
    conn.execute(
        "CREATE TRIGGER thatch_entries_move AFTER UPDATE OF store ON entries "
        f"WHEN OLD.store IS NOT NEW.store BEGIN {_bump_never_conflicting('OLD')} END"
    )


CHANGES_TABLE = "_thatch_entry_changes"

# Log entries kept: a cache further behind than this reloads its store once instead.
CHANGES_KEPT = 10_000


def _log(row: str) -> str:
    """Append the row's key to the change log and drop entries past the kept window.

    Neither statement can conflict (the sequence is assigned, the delete has no key), so
    the outer statement's conflict policy never matters.
    """
    return (
        f"INSERT INTO {CHANGES_TABLE} (store, slug) VALUES ({row}.store, {row}.slug); "
        f"DELETE FROM {CHANGES_TABLE} WHERE seq <= "
        f"(SELECT max(seq) FROM {CHANGES_TABLE}) - {CHANGES_KEPT};"
    )


def m007_change_log(conn: sqlite3.Connection) -> None:
    """A log of which (store, slug) changed, so caches re-read those rows, not the store.

    The same triggers as m006 (counters and all, for thatch processes that key on them),
    each also logging the row it touched; a slug or store change logs the old key too.
    AUTOINCREMENT keeps sequence numbers from ever being reused after pruning.
    """
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {CHANGES_TABLE} (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
        "store TEXT NOT NULL, slug TEXT NOT NULL)"
    )
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS thatch_entry_changes_store ON {CHANGES_TABLE} (store, seq)"
    )
    # A store's usable rows without a scan of every store's (a 10-row store in a 100k
    # file). Partial, so pending lookups keep using m005's index of pending rows.
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS thatch_entries_usable ON entries (store) WHERE {USABLE}"
    )
    for name in ENTRY_TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    conn.execute(
        "CREATE TRIGGER thatch_entries_insert AFTER INSERT ON entries "
        f"BEGIN {_bump_never_conflicting('NEW')} {_log('NEW')} END"
    )
    conn.execute(
        "CREATE TRIGGER thatch_entries_delete AFTER DELETE ON entries "
        f"BEGIN {_bump_never_conflicting('OLD')} {_log('OLD')} END"
    )
    conn.execute(
        f"CREATE TRIGGER thatch_entries_update AFTER UPDATE OF {_VERSIONED_COLUMNS} "
        f"ON entries BEGIN {_bump_never_conflicting('NEW')} {_log('NEW')} END"
    )
    conn.execute(
        "CREATE TRIGGER thatch_entries_move AFTER UPDATE OF slug, store ON entries "
        "WHEN OLD.store IS NOT NEW.store OR OLD.slug IS NOT NEW.slug "
        f"BEGIN {_bump_never_conflicting('OLD')} {_log('OLD')} END"
    )
