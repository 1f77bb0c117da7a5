"""Indexes that keep reads flat in store size (m022; docs/database.md): a page of the UI's
Memories page in each of its orders, memory_list's first labels, archived counts, and the
hygiene report's counts that every session start makes."""

from __future__ import annotations

import sqlite3

from thatch.frontend.store.rows import USABLE

__all__ = ["ARCHIVED_INDEX", "PAGE_ORDER_INDEXES", "STALE_KEY", "m022_flat_reads"]

# name -> (columns, the NOT NULL column whose "IS NOT NULL" makes it partial). Each serves
# one of the UI's orders after ``store = ?``, ending in slug. The condition is always true
# (the column is NOT NULL); it is there so that only a query stating it can use the index:
# with a plain index on ``store`` first, SQLite's planner (no statistics) took it over the
# partial index of pending rows that every recall counts, and read the whole store.
PAGE_ORDER_INDEXES = {
    "thatch_entries_created": ("store, created_at, slug", "created_at"),
    "thatch_entries_updated": ("store, updated_at, slug", "updated_at"),
    "thatch_entries_recalled": ("store, recall_count, last_recalled_at, slug", "recall_count"),
    "thatch_entries_label": ("store, label, slug", "label"),  # and memory_list's page
}
ARCHIVED_INDEX = "thatch_entries_archived"
# When a live memory was last touched: the hygiene report's "stale" is this before a cutoff.
STALE_KEY = "max(updated_at, COALESCE(last_recalled_at, updated_at))"


def m022_flat_reads(conn: sqlite3.Connection) -> None:
    """A page of a store's memories read in index order, 100 rows, where each page sorted
    the whole store first (170 ms a page at 100k memories); the stale and other-model
    counts of the hygiene report read an index, not the 530 MB table (0.36 s of every
    session start at 100k). Building them took about 1 s at 100k (hooks leave it to the
    next MCP server or CLI command)."""
    for name, (columns, column) in PAGE_ORDER_INDEXES.items():
        conn.execute(
            f"CREATE INDEX IF NOT EXISTS {name} ON entries ({columns}) WHERE {column} IS NOT NULL"
        )
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
