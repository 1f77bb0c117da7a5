"""A store's memories in each order the UI's Memories page offers (m022; docs/database.md)."""

from __future__ import annotations

import sqlite3

__all__ = ["ARCHIVED_INDEX", "PAGE_ORDER_INDEXES", "m022_page_orders"]

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


def m022_page_orders(conn: sqlite3.Connection) -> None:
    """A page of a store's memories read in index order, 100 rows, where each page sorted
    the whole store first: 170 ms a page at 100k memories. Building the five took 0.7 s
    at 100k (hooks leave it to the next MCP server or CLI command)."""
    for name, (columns, column) in PAGE_ORDER_INDEXES.items():
        conn.execute(
            f"CREATE INDEX IF NOT EXISTS {name} ON entries ({columns}) WHERE {column} IS NOT NULL"
        )
    # The Stores page's archived counts, and the archived filter, without reading the rest.
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS {ARCHIVED_INDEX} ON entries (store) WHERE archived != 0"
    )
