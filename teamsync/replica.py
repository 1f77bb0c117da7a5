"""The replica: the hub's change feed applied to the local SQLite, one page per transaction.

Each page is applied with the link's cursor moved in the same transaction, so a crash
leaves either both or neither. The transaction first inserts a row in the apply marker
table (m015): the outbox triggers skip any write made while it is there, and no other
connection ever sees it (it is deleted before the commit), so applied changes never echo
back to the hub while other writers go on being captured.

A pulled vector is kept when the hub's model is the local embedder's; otherwise the row is
saved pending (no embedding) and the local re-embedding fills it in.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from thatch.frontend.store.db import atomic
from thatch.frontend.store.migrations.team import (
    APPLYING_TABLE,
    LINKS_TABLE,
    REVS_TABLE,
    VERSIONS_TABLE,
)
from thatch.hub.v1 import hub_pb2
from thatch.teamsync.links import Link

__all__ = ["Applied", "apply_page", "drop_replica"]

_UPSERT = (
    "INSERT INTO entries (slug, store, label, content, embedding, model, branch, confidence, "
    "archived, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (slug, store) DO UPDATE SET label = excluded.label, "
    "content = excluded.content, embedding = excluded.embedding, model = excluded.model, "
    "branch = excluded.branch, confidence = excluded.confidence, "
    "archived = excluded.archived, created_at = excluded.created_at, "
    "updated_at = excluded.updated_at"
)


@dataclass(frozen=True)
class Applied:
    saved: int
    deleted: int
    reset: bool


def _vector(memory: hub_pb2.Memory, local_model: str | None) -> tuple[bytes | None, str | None]:
    blob = bytes(memory.vector)
    if local_model is None or memory.model != local_model or not blob or len(blob) % 4:
        return None, None
    return blob, memory.model


def apply_page(
    conn: sqlite3.Connection, link: Link, page: hub_pb2.PullResponse, local_model: str | None
) -> Applied:
    """Apply ``page`` to ``link``'s store and store its cursor, in one transaction.

    A ``reset`` page drops the replica of the store and moves the cursor to the start.
    Changes to the team's other stores are skipped (each link follows the feed itself).
    """
    saved = deleted = 0
    with atomic(conn):
        conn.execute(f"INSERT INTO {APPLYING_TABLE} (marker) VALUES (1)")
        if page.reset:
            drop_replica(conn, link.store)
            _move_cursor(conn, link.store, 0, 0)
            conn.execute(f"DELETE FROM {APPLYING_TABLE}")
            return Applied(0, 0, True)
        conn.execute("INSERT OR IGNORE INTO stores (name) VALUES (?)", (link.store,))
        for change in page.changes:
            if change.store != link.store:
                continue
            if change.HasField("memory"):
                _save(conn, change, local_model)
                saved += 1
            else:
                deleted += conn.execute(
                    "DELETE FROM entries WHERE slug = ? AND store = ?", (change.slug, change.store)
                ).rowcount
                conn.execute(
                    "DELETE FROM dedup_pairs WHERE store = ? AND (slug_a = ? OR slug_b = ?)",
                    (change.store, change.slug, change.slug),
                )
                conn.execute(
                    f"DELETE FROM {VERSIONS_TABLE} WHERE store = ? AND slug = ?",
                    (change.store, change.slug),
                )
            conn.execute(
                f"INSERT INTO {REVS_TABLE} (store, slug, rev) VALUES (?, ?, ?) "
                "ON CONFLICT (store, slug) DO UPDATE SET rev = excluded.rev",
                (change.store, change.slug, change.rev),
            )
        if page.HasField("next"):
            _move_cursor(conn, link.store, page.next.txid, page.next.seq)
        conn.execute(f"DELETE FROM {APPLYING_TABLE}")
    return Applied(saved, deleted, False)


def _save(conn: sqlite3.Connection, change: hub_pb2.Change, local_model: str | None) -> None:
    memory = change.memory
    blob, model = _vector(memory, local_model)
    conn.execute(
        _UPSERT,
        (
            change.slug,
            change.store,
            memory.label,
            memory.content,
            blob,
            model,
            memory.branch if memory.HasField("branch") else None,
            memory.confidence if memory.HasField("confidence") else None,
            int(memory.archived),
            memory.created_at,
            memory.updated_at,
        ),
    )
    # Which rows are conflict versions, for hygiene to name (m021).
    if change.conflict_of:
        conn.execute(
            f"INSERT INTO {VERSIONS_TABLE} (store, slug, conflict_of) VALUES (?, ?, ?) "
            "ON CONFLICT (store, slug) DO UPDATE SET conflict_of = excluded.conflict_of",
            (change.store, change.slug, change.conflict_of),
        )
    else:
        conn.execute(
            f"DELETE FROM {VERSIONS_TABLE} WHERE store = ? AND slug = ?",
            (change.store, change.slug),
        )


def _move_cursor(conn: sqlite3.Connection, store: str, txid: int, seq: int) -> None:
    conn.execute(
        f"UPDATE {LINKS_TABLE} SET cursor_txid = ?, cursor_seq = ? WHERE store = ?",
        (txid, seq, store),
    )


def drop_replica(conn: sqlite3.Connection, store: str) -> None:
    """Delete the replica of ``store`` (call inside an applying transaction): its memories
    and the revisions seen. Writes still in the outbox stay and are pushed."""
    conn.execute("DELETE FROM entries WHERE store = ?", (store,))
    conn.execute("DELETE FROM dedup_pairs WHERE store = ?", (store,))
    conn.execute(f"DELETE FROM {REVS_TABLE} WHERE store = ?", (store,))
    conn.execute(f"DELETE FROM {VERSIONS_TABLE} WHERE store = ?", (store,))
