"""What a file this process could not migrate lacks of the schema, and whether to read a
table it may lack (docs/database.md §compatibility).

Apart from ``schema``, whose migrations bring numpy: the hooks ask at every step, and
their warm path must not pay that import (100 ms).
"""

from __future__ import annotations

import sqlite3

from thatch.frontend.store.migrations import team
from thatch.frontend.store.migrations.branches import BRANCH_REFS_TABLE, BRANCH_RENAMES_TABLE
from thatch.frontend.store.migrations.duplicates import DUP_UNCHECKED_TABLE
from thatch.frontend.store.migrations.tables import TABLES
from thatch.frontend.store.transactions import SchemaLag, ThatchConnection

__all__ = [
    "CHAT_REFUSED",
    "MIGRATIONS_TABLE",
    "READ_IF_MADE",
    "has_table",
    "recorded",
    "schema_lag",
]

MIGRATIONS_TABLE = "_thatch_migrations"

# The tables read even in a file this process could not migrate (read-only), by the
# migration that makes each: where that migration is not recorded and the table is
# absent, their readers answer "none" (``has_table``).
READ_IF_MADE: dict[str, str] = {
    **dict.fromkeys(TABLES, "m001_create_tables"),  # an earlier release's file may lack some
    "thatch_defaults_off": "m012_defaults_off",
    BRANCH_REFS_TABLE: "m013_branch_lifecycle",
    team.LINKS_TABLE: "m015_team_sync",
    team.VERSIONS_TABLE: "m021_team_conflict_versions",
    BRANCH_RENAMES_TABLE: "m023_branch_renames",
    DUP_UNCHECKED_TABLE: "m031_duplicate_unchecked",  # absent: the exact counts
}
# The migrations whose absence a reader asks about: those above, m003's columns of
# chat_sessions and m027's of chat_outbox (``chat_store``).
CHAT_REFUSED = "m027_chat_refused"
WATCHED = frozenset({*READ_IF_MADE.values(), "m003_add_columns", CHAT_REFUSED})


def recorded(conn: sqlite3.Connection) -> set[str]:
    """The migrations ``conn``'s file records (none before its first)."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (MIGRATIONS_TABLE,)
    ).fetchone()
    if exists is None:
        return set()
    return {row[0] for row in conn.execute(f"SELECT name FROM {MIGRATIONS_TABLE}")}


def schema_lag(conn: sqlite3.Connection) -> SchemaLag:
    """``conn``'s SchemaLag over the ``WATCHED`` migrations, read once per connection (a
    hook asks at every step) and again after this connection migrates the file. A file
    lacking one is watched: another process may migrate it under a long-lived one (the
    MCP server, the UI), whose reads would otherwise miss the tables made meanwhile."""
    lag = getattr(conn, "schema_lag", None)
    if lag is not None and not lag.migrations:
        return lag  # a file that recorded them lacks nothing for good
    if lag is None:
        lag = _read_lag(conn)
        if not lag.migrations:
            if isinstance(conn, ThatchConnection):
                conn.schema_lag = lag
            return lag
    version = conn.execute("PRAGMA schema_version").fetchone()[0]
    if getattr(conn, "schema_lag_version", None) != version:
        lag = _read_lag(conn)  # read after the version: never older than what it names
        if isinstance(conn, ThatchConnection):
            conn.schema_lag, conn.schema_lag_version = lag, version
    return lag


def _read_lag(conn: sqlite3.Connection) -> SchemaLag:
    unrecorded = WATCHED - recorded(conn)
    waiting = {table for table, name in READ_IF_MADE.items() if name in unrecorded}
    if not waiting:
        return SchemaLag(unrecorded, frozenset())
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return SchemaLag(unrecorded, frozenset(waiting - {row[0] for row in rows}))


def has_table(conn: sqlite3.Connection, table: str) -> bool:
    """Whether to read ``table`` (one of ``READ_IF_MADE``): no only where the migration
    making it is not recorded and the file lacks it, in a file this process could not
    migrate. A recorded migration's table is read, so one lost from a migrated file fails
    as SQLite's "no such table" instead of reading as empty."""
    return table not in schema_lag(conn).tables
