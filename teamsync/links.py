"""The links (m015 ``team_links``): which local store is shared through which hub.

A link names the hub's URL, the team and member its token stands for, the hub's pinned
embedding model, the durable feed cursor and the last outcome of a sync. The local store
and the hub's store have the same name (``owner/repo``). Tokens are never stored here
(``tokens``).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from thatch.common.shell_words import shell_quote
from thatch.frontend.errors import InvalidInputError
from thatch.frontend.store.db import atomic
from thatch.frontend.store.migrations.team import (
    APPLYING_TABLE,
    CONFLICTS_TABLE,
    LINKS_TABLE,
    MACHINE_TABLE,
    OUTBOX_TABLE,
    RECALLS_TABLE,
    REVS_TABLE,
    VERSIONS_TABLE,
)
from thatch.frontend.store.schema_lag import has_table

__all__ = [
    "AlreadyLinked",
    "Link",
    "NotLinked",
    "add_link",
    "all_links",
    "get_link",
    "machine_id",
    "note_error",
    "note_ok",
    "remove_link",
]

_COLUMNS = (
    "store, hub_url, team, member, hub_model, cursor_txid, cursor_seq, linked_at, "
    "last_ok_at, last_error, last_error_at"
)


class NotLinked(InvalidInputError):
    """The store is not shared with a team on this machine."""

    def __init__(self, store: str) -> None:
        super().__init__(
            f"store {store!r} is not shared with a team on this machine "
            "(`thatch team status` lists the shared stores)"
        )


class AlreadyLinked(InvalidInputError):
    """The store is already shared through a hub; ``fix`` leaves it (the store's name
    shell-quoted: it reaches the command as one argument, and runs nothing)."""

    def __init__(self, store: str, hub_url: str) -> None:
        super().__init__(f"store {store!r} is already shared through {hub_url}")
        self.fix = (
            "stop sharing it there first (the writes it has not pushed yet are dropped): "
            f"thatch team leave --store {shell_quote(store)}"
        )


@dataclass(frozen=True)
class Link:
    store: str
    hub_url: str
    team: str
    member: str
    hub_model: str
    cursor_txid: int
    cursor_seq: int
    linked_at: str
    last_ok_at: str | None
    last_error: str | None
    last_error_at: str | None


def _link(row: tuple[object, ...]) -> Link:
    return Link(*row)  # type: ignore[arg-type]


def all_links(conn: sqlite3.Connection) -> list[Link]:
    """Every shared store's link; none in a file no thatch could migrate to m015 (read-only:
    docs/database.md §compatibility)."""
    if not has_table(conn, LINKS_TABLE):
        return []
    return [_link(row) for row in conn.execute(f"SELECT {_COLUMNS} FROM {LINKS_TABLE} ORDER BY 1")]


def get_link(conn: sqlite3.Connection, store: str) -> Link | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM {LINKS_TABLE} WHERE store = ?", (store,)).fetchone()
    return None if row is None else _link(row)


def machine_id(conn: sqlite3.Connection) -> str:
    """This database's id (m015): write ids are ``<machine id>:<outbox row id>``."""
    return str(conn.execute(f"SELECT id FROM {MACHINE_TABLE}").fetchone()[0])


def add_link(
    conn: sqlite3.Connection,
    *,
    store: str,
    hub_url: str,
    team: str,
    member: str,
    hub_model: str,
    now: str,
) -> int:
    """Share ``store`` and queue its existing memories for upload, in one transaction;
    how many were queued. The hub keeps both versions of a slug it already holds."""
    with atomic(conn):
        old = get_link(conn, store)
        if old is not None:
            raise AlreadyLinked(store, old.hub_url)
        conn.execute(
            f"INSERT INTO {LINKS_TABLE} (store, hub_url, team, member, hub_model, linked_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (store, hub_url, team, member, hub_model, now),
        )
        conn.execute("INSERT OR IGNORE INTO stores (name) VALUES (?)", (store,))
        queued = conn.execute(
            f"INSERT INTO {OUTBOX_TABLE} (store, slug, op, base_rev, label, content, branch, "
            "confidence, archived, queued_at) SELECT store, slug, 'remember', NULL, label, "
            "content, branch, confidence, archived, ? FROM entries WHERE store = ? "
            "ORDER BY created_at, slug",
            (now, store),
        ).rowcount
    return int(queued)


def remove_link(conn: sqlite3.Connection, store: str) -> int:
    """Stop sharing ``store``: its local memories stay (a personal copy from now on), the
    writes not yet pushed are dropped; how many were dropped."""
    with atomic(conn):
        if get_link(conn, store) is None:
            raise NotLinked(store)
        dropped = conn.execute(f"DELETE FROM {OUTBOX_TABLE} WHERE store = ?", (store,)).rowcount
        for table in (REVS_TABLE, CONFLICTS_TABLE, RECALLS_TABLE, VERSIONS_TABLE, LINKS_TABLE):
            conn.execute(f"DELETE FROM {table} WHERE store = ?", (store,))
        conn.execute(f"DELETE FROM {APPLYING_TABLE}")
    return int(dropped)


def note_ok(conn: sqlite3.Connection, store: str, now: str) -> None:
    with atomic(conn):
        conn.execute(
            f"UPDATE {LINKS_TABLE} SET last_ok_at = ?, last_error = NULL, last_error_at = NULL "
            "WHERE store = ?",
            (now, store),
        )


def note_error(conn: sqlite3.Connection, store: str, message: str, now: str) -> None:
    with atomic(conn):
        conn.execute(
            f"UPDATE {LINKS_TABLE} SET last_error = ?, last_error_at = ? WHERE store = ?",
            (message, now, store),
        )
