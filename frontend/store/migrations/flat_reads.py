"""Indexes that keep reads flat in store size (m022; docs/database.md): a page of the UI's
Memories page in each of its orders, memory_list's first labels, archived counts, and the
hygiene report's counts that every session start makes; and (m030) a store's pending
memories, flat in the other stores' pending backlog."""

from __future__ import annotations

import sqlite3

from thatch.frontend.store.rows import MISSING, USABLE

__all__ = [
    "ARCHIVED_INDEX",
    "CREATED_ROWS",
    "LABELLED_ROWS",
    "PAGE_ORDER_INDEXES",
    "PENDING_BY_STORE",
    "RECALLED_ROWS",
    "STALE_KEY",
    "UPDATED_ROWS",
    "m022_flat_reads",
    "m030_pending_by_store",
]

# Conditions true of every row (a NOT NULL TEXT column's value is >= ''; a number is >=
# -infinity, and text or a blob sorts above any number), stated in the partial indexes
# below and in the queries meant to use them, so that only those queries can: with plain
# indexes on ``store`` first, SQLite's planner (no statistics) took one over the partial
# index of pending rows that every recall counts, and read the whole store. Not "X IS NOT
# NULL": SQLite 3.46 and later drop that term of a NOT NULL column from a query, and then
# no query could use the index.
CREATED_ROWS = "created_at >= ''"
UPDATED_ROWS = "updated_at >= ''"
RECALLED_ROWS = "recall_count >= -9e999"
LABELLED_ROWS = "label >= ''"
# name -> (columns, condition). Each serves one of the UI's orders after ``store = ?``,
# ending in slug; the label one serves memory_list's first page too.
PAGE_ORDER_INDEXES = {
    "thatch_entries_created": ("store, created_at, slug", CREATED_ROWS),
    "thatch_entries_updated": ("store, updated_at, slug", UPDATED_ROWS),
    "thatch_entries_recalled": ("store, recall_count, last_recalled_at, slug", RECALLED_ROWS),
    "thatch_entries_label": ("store, label, slug", LABELLED_ROWS),
}
ARCHIVED_INDEX = "thatch_entries_archived"
# One store's pending rows in ``pending_memories``' order (m030).
PENDING_BY_STORE = "thatch_entries_pending_store"
# When a live memory was last touched: the hygiene report's "stale" is this before a cutoff.
STALE_KEY = "max(updated_at, COALESCE(last_recalled_at, updated_at))"


def m022_flat_reads(conn: sqlite3.Connection) -> None:
    """A page of a store's memories read in index order, 100 rows, where each page sorted
    the whole store first (170 ms a page at 100k memories); the stale and other-model
    counts of the hygiene report read an index, not the 530 MB table (0.36 s of every
    session start at 100k). Building them took about 1 s at 100k (hooks leave it to the
    next MCP server or CLI command)."""
    for name, (columns, condition) in PAGE_ORDER_INDEXES.items():
        conn.execute(f"CREATE INDEX IF NOT EXISTS {name} ON entries ({columns}) WHERE {condition}")
    # The Stores page's archived counts, and the archived filter, without reading the rest.
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS {ARCHIVED_INDEX} ON entries (store) WHERE archived != 0"
    )
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS thatch_entries_stale ON entries (store, {STALE_KEY}) "
        "WHERE archived = 0"
    )
    conn.execute(
        "CREATE INDEX IF NOT EXISTS thatch_entries_models ON entries (store, model) "
        f"WHERE archived = 0 AND {USABLE}"
    )


def m030_pending_by_store(conn: sqlite3.Connection) -> None:
    """One store's pending rows, oldest first, without the other stores': m005's index of
    pending rows leads with ``updated_at``, so a store's pending count (every session start,
    every recall whose scope leaves ``global`` out) stepped over every other store's pending
    rows, 7-17 ms for a store with none beside 100k in ``global``. m005's stays, for the
    reads of every store (the oldest pending memories of all, whether any waits)."""
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS {PENDING_BY_STORE} "
        f"ON entries (store, updated_at, slug) WHERE {MISSING}"
    )
