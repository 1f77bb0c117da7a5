"""Branch memory that follows git (m013; docs/database.md §branch-lifecycle).

New tables and one partial index: ``entries`` keeps the earlier release's exact columns,
so its SQL works unchanged on a migrated file.
"""

from __future__ import annotations

import sqlite3

__all__ = [
    "BRANCH_EVENTS_TABLE",
    "BRANCH_INDEX",
    "BRANCH_REFS_TABLE",
    "BRANCH_RENAMES_TABLE",
    "m013_branch_lifecycle",
    "m023_branch_renames",
]

BRANCH_REFS_TABLE = "_thatch_branch_refs"

BRANCH_EVENTS_TABLE = "_thatch_branch_events"

BRANCH_INDEX = "thatch_entries_branch"

BRANCH_RENAMES_TABLE = "_thatch_branch_renames"


def m013_branch_lifecycle(conn: sqlite3.Connection) -> None:
    """The refs thatch last saw per (store, repository) and what it did to memories.

    ``_thatch_branch_refs``: full ref name → commit, as ``git for-each-ref`` printed it at
    the last sync (``seen_ms``), per store and repository (its common git dir): two clones
    of one project keep separate snapshots. ``_thatch_branch_events``: one row per memory
    promoted (``branch`` cleared; ``origin_branch`` keeps the name) or archived (undone by
    ``thatch restore-branch``, which sets ``undone_ms``).
    """
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {BRANCH_REFS_TABLE} (store TEXT NOT NULL, "
        "repo TEXT NOT NULL, ref TEXT NOT NULL, commit_id TEXT NOT NULL, "
        "seen_ms INTEGER NOT NULL, PRIMARY KEY (store, repo, ref)) WITHOUT ROWID"
    )
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {BRANCH_EVENTS_TABLE} ("
        "id INTEGER PRIMARY KEY, store TEXT NOT NULL, slug TEXT NOT NULL, "
        "origin_branch TEXT NOT NULL, action TEXT NOT NULL "
        "CHECK (action IN ('promoted', 'archived')), commit_id TEXT, "
        "at_ms INTEGER NOT NULL, undone_ms INTEGER)"
    )
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS thatch_branch_events_origin "
        f"ON {BRANCH_EVENTS_TABLE} (store, origin_branch, action)"
    )
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS thatch_branch_events_slug "
        f"ON {BRANCH_EVENTS_TABLE} (store, slug)"
    )
    # A deleted branch's memories found without reading the store: only branch-scoped
    # rows are in it, so it stays small and costs other writes next to nothing.
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS {BRANCH_INDEX} ON entries (store, branch) "
        "WHERE branch IS NOT NULL"
    )


def m023_branch_renames(conn: sqlite3.Connection) -> None:
    """``_thatch_branch_renames``: one row per memory a sync moved from a gone branch to
    the one that appeared at its tip (``git branch -m``): the old name and the commit stay
    on record. A table of its own: m013's events allow only promoted and archived."""
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {BRANCH_RENAMES_TABLE} ("
        "id INTEGER PRIMARY KEY, store TEXT NOT NULL, slug TEXT NOT NULL, "
        "old_branch TEXT NOT NULL, new_branch TEXT NOT NULL, commit_id TEXT, "
        "at_ms INTEGER NOT NULL)"
    )
