"""Team sync's local side (m015; docs/team.md §sync-protocol): links, outbox, revisions.

A linked store is a project store shared through a hub: PostgreSQL holds the truth, this
file a replica plus an outbox. Triggers on ``entries`` queue every write to a linked store
in ``team_outbox`` in the writing transaction itself, whoever writes (the earlier release's
own SQL included), so nothing written offline is lost. The team sync process applies the
hub's changes inside a transaction that holds a row in ``_thatch_team_applying``: the
triggers see that row only in that transaction (no other connection sees an uncommitted
row), so an applied change never echoes back into the outbox. Tokens never live here.
"""

from __future__ import annotations

import sqlite3

__all__ = [
    "APPLYING_TABLE",
    "CONFLICTS_TABLE",
    "LINKS_TABLE",
    "MACHINE_TABLE",
    "OUTBOX_TABLE",
    "RECALLS_TABLE",
    "RECALLS_TRIGGER",
    "REVS_TABLE",
    "TEAM_TABLES",
    "TEAM_TRIGGERS",
    "VERSIONS_TABLE",
    "m015_team_sync",
    "m020_team_recalls",
    "m021_team_conflict_versions",
]

LINKS_TABLE = "team_links"
OUTBOX_TABLE = "team_outbox"
REVS_TABLE = "team_revs"
CONFLICTS_TABLE = "team_conflicts"
APPLYING_TABLE = "_thatch_team_applying"
MACHINE_TABLE = "_thatch_team_machine"
RECALLS_TABLE = "team_recalls"
VERSIONS_TABLE = "team_conflict_versions"
TEAM_TABLES = (
    LINKS_TABLE,
    OUTBOX_TABLE,
    REVS_TABLE,
    CONFLICTS_TABLE,
    APPLYING_TABLE,
    MACHINE_TABLE,
    RECALLS_TABLE,
    VERSIONS_TABLE,
)

TEAM_TRIGGERS = (
    "thatch_team_entries_insert",
    "thatch_team_entries_update",
    "thatch_team_entries_delete",
)

RECALLS_TRIGGER = "thatch_team_entries_recalled"

_NOW = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
_NOT_APPLYING = f"NOT EXISTS (SELECT 1 FROM {APPLYING_TABLE})"


def _linked(row: str) -> str:
    return f"EXISTS (SELECT 1 FROM {LINKS_TABLE} WHERE store = {row}.store)"


def _base_rev(row: str) -> str:
    return f"(SELECT rev FROM {REVS_TABLE} WHERE store = {row}.store AND slug = {row}.slug)"


def _queue_remember(row: str, when: str) -> str:
    # INSERT … SELECT … WHERE: a statement inside a trigger body cannot carry its own WHEN.
    # The id is assigned (AUTOINCREMENT), so no outer conflict policy can touch it.
    return (
        f"INSERT INTO {OUTBOX_TABLE} (store, slug, op, base_rev, label, content, branch, "
        f"confidence, archived, queued_at) SELECT {row}.store, {row}.slug, 'remember', "
        f"{_base_rev(row)}, {row}.label, {row}.content, {row}.branch, {row}.confidence, "
        f"{row}.archived, {_NOW} WHERE {when};"
    )


def _queue_forget(row: str, when: str) -> str:
    return (
        f"INSERT INTO {OUTBOX_TABLE} (store, slug, op, base_rev, label, queued_at) "
        f"SELECT {row}.store, {row}.slug, 'forget', {_base_rev(row)}, {row}.label, {_NOW} "
        f"WHERE {when};"
    )


_MOVED = "(OLD.store IS NOT NEW.store OR OLD.slug IS NOT NEW.slug)"
_CHANGED = (
    f"({_MOVED} OR OLD.label IS NOT NEW.label OR OLD.content IS NOT NEW.content "
    "OR OLD.branch IS NOT NEW.branch OR OLD.confidence IS NOT NEW.confidence "
    "OR OLD.archived IS NOT NEW.archived)"
)


def m015_team_sync(conn: sqlite3.Connection) -> None:
    """The link per shared store (its hub, team, member, the hub's pinned model, the
    durable feed cursor and the last outcome), the outbox, the hub revision last seen per
    (store, slug), the conflict versions the hub kept, the apply marker, the machine id
    that makes write ids unique in a team, and the triggers that fill the outbox.

    Only what a memory's owner wrote is queued: an embedding or telemetry change (re-embed,
    recall stamps) is not in the trigger's column list, and an update that changes none of
    the pushed values queues nothing.
    """
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {LINKS_TABLE} ("
        "store TEXT PRIMARY KEY, hub_url TEXT NOT NULL, team TEXT NOT NULL, "
        "member TEXT NOT NULL, hub_model TEXT NOT NULL DEFAULT '', "
        "cursor_txid INTEGER NOT NULL DEFAULT 0, cursor_seq INTEGER NOT NULL DEFAULT 0, "
        "linked_at TEXT NOT NULL, last_ok_at TEXT, last_error TEXT, last_error_at TEXT)"
    )
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {OUTBOX_TABLE} ("
        "id INTEGER PRIMARY KEY AUTOINCREMENT, store TEXT NOT NULL, slug TEXT NOT NULL, "
        "op TEXT NOT NULL, base_rev INTEGER, label TEXT NOT NULL, content TEXT, "
        "branch TEXT, confidence INTEGER, archived INTEGER, queued_at TEXT NOT NULL, "
        "refused TEXT)"
    )
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {REVS_TABLE} (store TEXT NOT NULL, slug TEXT NOT NULL, "
        "rev INTEGER NOT NULL, PRIMARY KEY (store, slug)) WITHOUT ROWID"
    )
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {CONFLICTS_TABLE} (store TEXT NOT NULL, "
        "slug TEXT NOT NULL, kept_as TEXT NOT NULL, at TEXT NOT NULL)"
    )
    conn.execute(f"CREATE TABLE IF NOT EXISTS {APPLYING_TABLE} (marker INTEGER PRIMARY KEY)")
    conn.execute(f"CREATE TABLE IF NOT EXISTS {MACHINE_TABLE} (id TEXT NOT NULL)")
    conn.execute(
        f"INSERT INTO {MACHINE_TABLE} (id) SELECT lower(hex(randomblob(16))) "
        f"WHERE NOT EXISTS (SELECT 1 FROM {MACHINE_TABLE})"
    )
    for name in TEAM_TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    conn.execute(
        f"CREATE TRIGGER {TEAM_TRIGGERS[0]} AFTER INSERT ON entries "
        f"WHEN {_linked('NEW')} AND {_NOT_APPLYING} "
        f"BEGIN {_queue_remember('NEW', '1')} END"
    )
    # A moved row (slug or store changed) is a forget of the old key, then a save of the
    # new one, in that order: one trigger, so the order is the statements'.
    moved_away = f"{_MOVED} AND {_linked('OLD')}"
    conn.execute(
        f"CREATE TRIGGER {TEAM_TRIGGERS[1]} AFTER UPDATE OF "
        "slug, store, label, content, branch, confidence, archived ON entries "
        f"WHEN {_NOT_APPLYING} AND {_CHANGED} AND ({_linked('OLD')} OR {_linked('NEW')}) "
        f"BEGIN {_queue_forget('OLD', moved_away)} "
        f"{_queue_remember('NEW', _linked('NEW'))} END"
    )
    conn.execute(
        f"CREATE TRIGGER {TEAM_TRIGGERS[2]} AFTER DELETE ON entries "
        f"WHEN {_linked('OLD')} AND {_NOT_APPLYING} "
        f"BEGIN {_queue_forget('OLD', '1')} END"
    )


def m020_team_recalls(conn: sqlite3.Connection) -> None:
    """Recall telemetry of linked stores, queued for the hub (docs/team.md §telemetry): a
    recall stamps ``recall_count`` on the row here (no outbox write: telemetry is not the
    memory) and this trigger queues one event per stamp in the same transaction, whoever
    stamps (the earlier release's SQL included); the sync process sends them as
    ``RecordRecalls`` and deletes what the hub answered. The hub appends events, never
    updates its row, so recalls on several machines never conflict."""
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {RECALLS_TABLE} (id INTEGER PRIMARY KEY AUTOINCREMENT, "
        "store TEXT NOT NULL, slug TEXT NOT NULL, at TEXT NOT NULL)"
    )
    conn.execute(f"CREATE INDEX IF NOT EXISTS {RECALLS_TABLE}_store ON {RECALLS_TABLE} (store, id)")
    conn.execute(f"DROP TRIGGER IF EXISTS {RECALLS_TRIGGER}")
    conn.execute(
        f"CREATE TRIGGER {RECALLS_TRIGGER} AFTER UPDATE OF recall_count ON entries "
        f"WHEN NEW.recall_count > OLD.recall_count AND {_linked('NEW')} AND {_NOT_APPLYING} "
        f"BEGIN INSERT INTO {RECALLS_TABLE} (store, slug, at) "
        f"VALUES (NEW.store, NEW.slug, coalesce(NEW.last_recalled_at, {_NOW})); END"
    )


def m021_team_conflict_versions(conn: sqlite3.Connection) -> None:
    """The conflict versions among the pulled memories (docs/team.md §conflicts): the slug
    of each row the hub kept as a second version (``conflict_of`` set), with the slug of
    the memory it is a version of, so hygiene names them for the user to merge. Filled
    and cleared by the replica as it applies the feed (a row pulled without
    ``conflict_of``, or a tombstone, deletes its entry)."""
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {VERSIONS_TABLE} (store TEXT NOT NULL, "
        "slug TEXT NOT NULL, conflict_of TEXT NOT NULL, PRIMARY KEY (store, slug)) WITHOUT ROWID"
    )
