"""Code anchors: what code a memory is about (m014; docs/database.md §code-anchors)."""

from __future__ import annotations

import sqlite3

__all__ = [
    "ANCHORS_TABLE",
    "ANCHOR_TRIGGERS",
    "GONE_CHECKOUTS_TABLE",
    "m014_code_anchors",
    "m019_anchor_verdict_stat",
    "m024_anchor_base_path",
    "m025_gone_checkouts",
    "m026_anchor_staged_moves",
]

ANCHORS_TABLE = "thatch_anchors"
GONE_CHECKOUTS_TABLE = "thatch_gone_checkouts"

ANCHOR_TRIGGERS = (
    "thatch_anchors_entries_insert",
    "thatch_anchors_entries_delete",
    "thatch_anchors_entries_update",
)


def _drop(row: str) -> str:
    return f"DELETE FROM {ANCHORS_TABLE} WHERE store = {row}.store AND slug = {row}.slug;"


def m014_code_anchors(conn: sqlite3.Connection) -> None:
    """One row per anchor of a memory: the file (``root`` the git top level or "",
    ``path`` relative to it, else absolute), the optional symbol or line span, and what was
    captured at save (blob id, span hash, commit, the file's mtime and size).

    A table of its own, so the earlier release's exact SQL on ``entries`` keeps working.
    Triggers drop a memory's anchors whenever its text, key or row is replaced, whoever
    writes (an ``INSERT OR REPLACE`` of the earlier release fires the insert trigger): an
    anchor never vouches for text it was not saved with. thatch's own save writes the new
    anchors after the row, in the same transaction.
    """
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {ANCHORS_TABLE} ("
        "store TEXT NOT NULL, slug TEXT NOT NULL, seq INTEGER NOT NULL, "
        "root TEXT NOT NULL, path TEXT NOT NULL, symbol TEXT, "
        "line_start INTEGER, line_end INTEGER, "
        "blob TEXT NOT NULL, span_hash TEXT, commit_id TEXT, "
        "mtime_ns INTEGER, size INTEGER, "
        "status TEXT NOT NULL DEFAULT 'fresh', checked_at TEXT, "
        "PRIMARY KEY (store, slug, seq)) WITHOUT ROWID"
    )
    # The rename pass reads the distinct (root, commit) pairs and moves by path.
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS thatch_anchors_commit ON {ANCHORS_TABLE} "
        "(root, commit_id, path)"
    )
    for name in ANCHOR_TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    conn.execute(
        f"CREATE TRIGGER {ANCHOR_TRIGGERS[0]} AFTER INSERT ON entries BEGIN {_drop('NEW')} END"
    )
    conn.execute(
        f"CREATE TRIGGER {ANCHOR_TRIGGERS[1]} AFTER DELETE ON entries BEGIN {_drop('OLD')} END"
    )
    conn.execute(
        f"CREATE TRIGGER {ANCHOR_TRIGGERS[2]} AFTER UPDATE OF slug, store, content ON entries "
        "WHEN OLD.slug IS NOT NEW.slug OR OLD.store IS NOT NEW.store "
        f"OR OLD.content IS NOT NEW.content BEGIN {_drop('OLD')} END"
    )


def m019_anchor_verdict_stat(conn: sqlite3.Connection) -> None:
    """The file's mtime and size a stored verdict was reached on (``checked_mtime_ns``,
    ``checked_size``): a recall whose budget ran out shows a stored ``changed`` only while
    the file's stat is still that one."""
    from thatch.frontend.store.migrations.tables import table_columns

    present = table_columns(conn, ANCHORS_TABLE)
    for name in ("checked_mtime_ns", "checked_size"):
        if name not in present:
            conn.execute(f"ALTER TABLE {ANCHORS_TABLE} ADD COLUMN {name} INTEGER")


def m024_anchor_base_path(conn: sqlite3.Connection) -> None:
    """The anchor's path in its captured commit while a rename only staged in the working
    tree has moved it (``base_path``; NULL: ``path``): the rename pass moves it back when
    the rename is undone before its commit, which no diff from that commit can show."""
    from thatch.frontend.store.migrations.tables import table_columns

    if "base_path" not in table_columns(conn, ANCHORS_TABLE):
        conn.execute(f"ALTER TABLE {ANCHORS_TABLE} ADD COLUMN base_path TEXT")


def m025_gone_checkouts(conn: sqlite3.Connection) -> None:
    """Per ``root`` of a gone checkout that still has anchors (a removed worktree, a
    deleted project), the checkouts (``top``) already asked whether they take them over
    and at which of their HEADs (``head``): a checkout is asked again only once its HEAD
    moved, so a root nobody claims costs no git process at every pass."""
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {GONE_CHECKOUTS_TABLE} ("
        "root TEXT NOT NULL, top TEXT NOT NULL, head TEXT NOT NULL, "
        "PRIMARY KEY (root, top)) WITHOUT ROWID"
    )
    # A pass reads by (top, head) and forgets by top: without it each was a scan, and
    # forgetting 10,000 roots asked at once took 8 s.
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS thatch_gone_checkouts_top ON {GONE_CHECKOUTS_TABLE} "
        "(top, head)"
    )


def m026_anchor_staged_moves(conn: sqlite3.Connection) -> None:
    """An index of the anchors a staged rename moved (``base_path`` set: next to none).
    Every rename pass asks whether a checkout holds one (``Store.move_anchors``), which
    otherwise reads every anchor captured at its HEAD: 45 ms at 50k anchors."""
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS thatch_anchors_staged ON {ANCHORS_TABLE} "
        "(root, commit_id) WHERE base_path IS NOT NULL"
    )
