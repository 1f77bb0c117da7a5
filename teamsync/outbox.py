"""The outbox (m015 ``team_outbox``): writes to linked stores waiting for the hub's ack.

Triggers on ``entries`` fill it in the writing transaction. The sync process pushes the
waiting rows in id order and settles each batch by its acks in one transaction: a row is
deleted only once the hub acknowledged it. A row the hub (or this machine) refused is kept
aside with the reason, shown by ``thatch team status``, never retried.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from thatch.frontend.secret_scan import scan
from thatch.frontend.store.db import atomic
from thatch.frontend.store.migrations.team import CONFLICTS_TABLE, OUTBOX_TABLE, REVS_TABLE
from thatch.frontend.store.slugs import slugify
from thatch.hub.v1 import hub_pb2

__all__ = [
    "Queued",
    "Settled",
    "check",
    "counts",
    "newest_id",
    "refused",
    "set_aside",
    "settle",
    "waiting",
    "write_of",
]

_COLUMNS = "id, store, slug, op, base_rev, label, content, branch, confidence, archived, refused"


@dataclass(frozen=True)
class Queued:
    id: int
    store: str
    slug: str
    op: str  # "remember" | "forget"
    base_rev: int | None
    label: str
    content: str | None
    branch: str | None
    confidence: int | None
    archived: int | None
    refused: str | None


@dataclass
class Settled:
    """What one batch's acks did."""

    saved: int = 0
    forgotten: int = 0
    conflicts: list[tuple[str, str]] = field(default_factory=list)  # (slug, kept as)
    refused: list[tuple[int, str]] = field(default_factory=list)  # (row id, reason)
    unacked: int = 0


def waiting(conn: sqlite3.Connection, store: str, limit: int) -> list[Queued]:
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM {OUTBOX_TABLE} WHERE store = ? AND refused IS NULL "
        "ORDER BY id LIMIT ?",
        (store, limit),
    )
    return [Queued(*row) for row in rows]


def newest_id(conn: sqlite3.Connection) -> int:
    """The highest row id in the outbox (0 when empty), of any store, refused or not."""
    return int(conn.execute(f"SELECT coalesce(max(id), 0) FROM {OUTBOX_TABLE}").fetchone()[0])


def refused(conn: sqlite3.Connection, store: str) -> list[Queued]:
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM {OUTBOX_TABLE} WHERE store = ? AND refused IS NOT NULL "
        "ORDER BY id",
        (store,),
    )
    return [Queued(*row) for row in rows]


def counts(conn: sqlite3.Connection, store: str) -> tuple[int, int]:
    """(waiting, refused) rows of ``store``."""
    waiting_rows, refused_rows = conn.execute(
        f"SELECT count(*) FILTER (WHERE refused IS NULL), count(*) FILTER "
        f"(WHERE refused IS NOT NULL) FROM {OUTBOX_TABLE} WHERE store = ?",
        (store,),
    ).fetchone()
    return int(waiting_rows or 0), int(refused_rows or 0)


def check(row: Queued) -> str | None:
    """Why ``row`` must not leave this machine, or None. The second line of defence: a save
    through thatch already refused secrets, but the earlier release writes unchecked."""
    if row.op == "remember":
        for text in (row.label, row.content or ""):
            found = scan(text)
            if found:
                return f"secret ({found[0].kind})"
    if slugify(row.label) != row.slug:
        # The hub addresses a memory by its label's slug: a row keyed otherwise (a
        # conflict version an earlier hub kept as "<slug>--conflict-<n>" under the
        # original's label) would write the original. Conflict versions the hub keeps
        # now have labels of their own ("<label> (conflict <n>)") and pass.
        return f"the hub cannot address slug {row.slug!r} by its label (edit it on the hub)"
    return None


def set_aside(conn: sqlite3.Connection, row_id: int, reason: str) -> None:
    conn.execute(f"UPDATE {OUTBOX_TABLE} SET refused = ? WHERE id = ?", (reason, row_id))


def write_of(row: Queued, machine: str) -> hub_pb2.Write:
    write = hub_pb2.Write(
        write_id=f"{machine}:{row.id}",
        op=hub_pb2.Write.REMEMBER if row.op == "remember" else hub_pb2.Write.FORGET,
        store=row.store,
        label=row.label,
    )
    if row.base_rev is not None:
        write.base_rev = row.base_rev
    if row.op == "remember":
        write.stored_text = row.content or ""
        if row.branch is not None:
            write.branch = row.branch
        if row.confidence is not None:
            write.confidence = row.confidence
        if row.archived is not None:
            write.archived = bool(row.archived)
    return write


def settle(
    conn: sqlite3.Connection,
    rows: list[Queued],
    acks: list[hub_pb2.Ack],
    machine: str,
    now: str,
) -> Settled:
    """Apply the acks of a pushed batch, in one transaction. A row without an ack stays
    waiting (the retry carries the same write id: the hub applies it once)."""
    by_id = {f"{machine}:{row.id}": row for row in rows}
    done = Settled()
    acked: set[int] = set()
    with atomic(conn):
        for ack in acks:
            row = by_id.get(ack.write_id)
            if row is None or row.id in acked:
                continue
            acked.add(row.id)
            if ack.outcome == hub_pb2.Ack.REFUSED:
                reason = ack.reason or "refused by the hub"
                set_aside(conn, row.id, reason)
                done.refused.append((row.id, reason))
                continue
            if ack.outcome == hub_pb2.Ack.OUTCOME_UNSPECIFIED:
                continue  # not an answer: retried
            conn.execute(f"DELETE FROM {OUTBOX_TABLE} WHERE id = ?", (row.id,))
            if ack.outcome == hub_pb2.Ack.SAVED:
                done.saved += 1
                _seen(conn, row, ack.rev)
            elif ack.outcome == hub_pb2.Ack.FORGOTTEN:
                done.forgotten += 1
                if ack.rev:
                    _seen(conn, row, ack.rev)
            elif ack.outcome == hub_pb2.Ack.CONFLICT:
                done.conflicts.append((row.slug, ack.slug))
                conn.execute(
                    f"INSERT INTO {CONFLICTS_TABLE} (store, slug, kept_as, at) VALUES (?, ?, ?, ?)",
                    (row.store, row.slug, ack.slug, now),
                )
        done.unacked = len(rows) - len(acked)
    return done


def _seen(conn: sqlite3.Connection, row: Queued, rev: int) -> None:
    """The hub holds ``row``'s write at ``rev``: later writes queued on top of it (same
    slug, same base) are based on ``rev`` now, not conflicts with this machine's own."""
    conn.execute(
        f"UPDATE {OUTBOX_TABLE} SET base_rev = ? WHERE store = ? AND slug = ? AND id > ? "
        "AND base_rev IS ? AND refused IS NULL",
        (rev, row.store, row.slug, row.id, row.base_rev),
    )
    conn.execute(
        f"INSERT INTO {REVS_TABLE} (store, slug, rev) VALUES (?, ?, ?) "
        "ON CONFLICT (store, slug) DO UPDATE SET rev = excluded.rev",
        (row.store, row.slug, rev),
    )
