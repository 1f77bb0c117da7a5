"""Memory links: what a memory depends on (m016; docs/database.md §memory-links)."""

from __future__ import annotations

import sqlite3

__all__ = ["LINKS_TABLE", "LINK_TRIGGERS", "m016_memory_links"]

LINKS_TABLE = "thatch_links"

LINK_TRIGGERS = (
    "thatch_links_entries_insert",
    "thatch_links_entries_delete",
    "thatch_links_entries_update",
)


def m016_memory_links(conn: sqlite3.Connection) -> None:
    """One row per (memory, memory it depends on), both of one store: ``memory_remember``'s
    ``related``. A dependent inherits the code-changed marker of what it depends on.

    A table of its own, so the earlier release's exact SQL on ``entries`` keeps working.
    Triggers, whoever writes: a memory's own links go whenever its text, key or row is
    replaced (a link never vouches for text it was not saved with; thatch's own save
    writes the new ones after the row, in the same transaction), and the links to a memory
    go with its row or key (the dependent stays; a later memory of that label is another).
    """
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {LINKS_TABLE} ("
        "store TEXT NOT NULL, slug TEXT NOT NULL, target TEXT NOT NULL, "
        "PRIMARY KEY (store, slug, target)) WITHOUT ROWID"
    )
    # Forgetting a memory drops the links to it: found by target.
    conn.execute(f"CREATE INDEX IF NOT EXISTS thatch_links_target ON {LINKS_TABLE} (store, target)")
    for name in LINK_TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    own = f"DELETE FROM {LINKS_TABLE} WHERE store = {{0}}.store AND slug = {{0}}.slug;"
    to = f"DELETE FROM {LINKS_TABLE} WHERE store = {{0}}.store AND target = {{0}}.slug;"
    conn.execute(
        f"CREATE TRIGGER {LINK_TRIGGERS[0]} AFTER INSERT ON entries BEGIN {own.format('NEW')} END"
    )
    conn.execute(
        f"CREATE TRIGGER {LINK_TRIGGERS[1]} AFTER DELETE ON entries "
        f"BEGIN {own.format('OLD')} {to.format('OLD')} END"
    )
    conn.execute(
        f"CREATE TRIGGER {LINK_TRIGGERS[2]} AFTER UPDATE OF slug, store, content ON entries "
        "WHEN OLD.slug IS NOT NEW.slug OR OLD.store IS NOT NEW.store "
        f"OR OLD.content IS NOT NEW.content BEGIN {own.format('OLD')} "
        f"DELETE FROM {LINKS_TABLE} WHERE store = OLD.store AND target = OLD.slug "
        "AND (OLD.slug IS NOT NEW.slug OR OLD.store IS NOT NEW.store); END"
    )
