"""The chat's own tables and indexes (m008, m011; docs/chat.md §tables)."""

from __future__ import annotations

import sqlite3

from thatch.frontend.store.chat_rows import READ_ROWS, SENT_ROWS
from thatch.frontend.store.migrations.tables import TABLES

__all__ = [
    "CHAT_BINDING_TABLES",
    "CHAT_TABLES",
    "m008_chat_and_repo_paths",
    "m011_chat_binding",
    "m028_chat_event_times",
]

CHAT_TABLES: dict[str, str] = {
    "chat_name_counters": "CREATE TABLE IF NOT EXISTS chat_name_counters "
    "(base TEXT PRIMARY KEY, next INTEGER NOT NULL)",
    "chat_leave_tombstones": "CREATE TABLE IF NOT EXISTS chat_leave_tombstones "
    "(session_id TEXT PRIMARY KEY, left_at TEXT NOT NULL)",
    "chat_wakes": "CREATE TABLE IF NOT EXISTS chat_wakes "
    "(session_id TEXT NOT NULL, at TEXT NOT NULL)",
    # When once-a-day chat upkeep (pruning) last ran, so concurrent reminders run it once.
    "chat_upkeep": "CREATE TABLE IF NOT EXISTS chat_upkeep "
    "(task TEXT PRIMARY KEY, at TEXT NOT NULL)",
}


def m008_chat_and_repo_paths(conn: sqlite3.Connection) -> None:
    """The chat's own tables (docs/chat.md §tables) and the indexes its queries use.

    ``repo_paths`` itself is one of the 14 tables m001 creates (an earlier release may
    have made it too); it is created here again for a file whose m001 predates it.
    """
    for ddl in CHAT_TABLES.values():
        conn.execute(ddl)
    conn.execute(TABLES["repo_paths"])
    conn.execute(
        "CREATE INDEX IF NOT EXISTS thatch_chat_messages_to ON chat_messages (to_session, read_at)"
    )
    conn.execute(
        "CREATE INDEX IF NOT EXISTS thatch_chat_wakes_session ON chat_wakes (session_id, at)"
    )


CHAT_BINDING_TABLES: dict[str, str] = {
    "chat_keys": "CREATE TABLE IF NOT EXISTS chat_keys "
    "(session_id TEXT PRIMARY KEY, key_hash TEXT NOT NULL)",
    "chat_secret": "CREATE TABLE IF NOT EXISTS chat_secret "
    "(id INTEGER PRIMARY KEY CHECK (id = 1), salt TEXT NOT NULL)",
}


def m011_chat_binding(conn: sqlite3.Connection) -> None:
    """Chat identities bound to their holders, and what retention needs (docs/chat.md).

    ``chat_keys`` keeps a hash of each identity's key (a separate table: the earlier
    release writes ``chat_sessions`` and must find it as it left it); ``chat_secret`` the
    random secret hook keys are derived from. The indexes let upkeep trim engine
    provenance per item without scanning the table.
    """
    import secrets

    for ddl in CHAT_BINDING_TABLES.values():
        conn.execute(ddl)
    conn.execute(
        "INSERT OR IGNORE INTO chat_secret (id, salt) VALUES (1, ?)", (secrets.token_hex(32),)
    )
    conn.execute(
        "CREATE INDEX IF NOT EXISTS thatch_prediction_provenance_item "
        "ON prediction_provenance (prediction_id, created_at)"
    )
    conn.execute(
        "CREATE INDEX IF NOT EXISTS thatch_behavior_provenance_item "
        "ON behavior_provenance (behavior_id, created_at)"
    )


def m028_chat_event_times(conn: sqlite3.Connection) -> None:
    """The times of the chat's events, sends and reads, each in its own index: ``chat
    tail``'s backlog walks them newest first and stops at its last N events, where it
    sorted every message's send and read (897 ms at 1M messages) to keep 20."""
    conn.execute(
        "CREATE INDEX IF NOT EXISTS thatch_chat_messages_sent "
        f"ON chat_messages (created_at) WHERE {SENT_ROWS}"
    )
    conn.execute(
        "CREATE INDEX IF NOT EXISTS thatch_chat_messages_read "
        f"ON chat_messages (read_at) WHERE {READ_ROWS}"
    )
