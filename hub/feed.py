"""The change feed a machine pulls to keep its replica (docs/team.md §sync-protocol).

A position is ``(txid, seq)``: the writing transaction's id and a sequence value, both
stamped by trigger on every insert, update and tombstone. A page holds only rows whose
transaction is older than every transaction still running that may write here
(``_HORIZON``): a transaction that began earlier may commit later with a smaller position,
and a cursor that moved past it would skip its rows for good. Held back, they arrive on a
later pull.

Transaction ids are the whole cluster's, so ``pg_snapshot_xmin`` alone counts every
database's writers: one long transaction of another application on a shared cluster (an
idle session in a transaction) held every team's pulls back while it lasted. A running
transaction of a session connected to another database (``pg_stat_activity``), or
prepared there, is left out: a session stays in its database for good, so it can never
write this one's rows. Any running transaction not shown so still holds the feed back.
"""

from __future__ import annotations

from psycopg import Connection
from psycopg.rows import TupleRow

from thatch.hub.memories import MEMORY_COLUMNS, memory_from_hub_row
from thatch.hub.session import Member, as_member
from thatch.hub.values import START, Change, Cursor, Page

__all__ = ["START", "Change", "Cursor", "Page", "changes_after"]

# The oldest running transaction that may write this database (pg_snapshot_xmin without
# those placed in another database), else the snapshot's xmax. A session's own top-level
# id (``backend_xid``, shown to every role) and its database (``datid``) belong together
# for good, as do a prepared transaction's, so a read cached for the transaction stays
# true. (PostgreSQL reads a session slot's datid, then its xid: a wrong pair would need a
# new session to start in that slot and take an id in between.)
# (pg_locks was the first try: a session of another database merely *waiting* for one of
# this database's transactions lists that id beside its own locks, and placed it there.)
# Running ids are within 2^31 of each other: their 32-bit forms compare safely. ORDER BY
# and LIMIT, not min(): PostgreSQL has min(xid8) from 15 on, the hub runs on 13.
# pg_catalog named throughout: a role's search_path must not swap in a look-alike view.
_HORIZON = """
WITH elsewhere AS MATERIALIZED (
    SELECT backend_xid AS xid FROM pg_catalog.pg_stat_activity
    WHERE backend_xid IS NOT NULL AND datid IS NOT NULL AND datid <> (
        SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database()
    )
    UNION ALL
    SELECT transaction FROM pg_catalog.pg_prepared_xacts
    WHERE database <> pg_catalog.current_database()
)
SELECT coalesce((
    SELECT running FROM pg_catalog.pg_snapshot_xip(snapshot) AS running
    WHERE NOT EXISTS (SELECT FROM elsewhere WHERE elsewhere.xid = pg_catalog.xid(running))
    ORDER BY running LIMIT 1
), pg_catalog.pg_snapshot_xmax(snapshot))::text
FROM (SELECT pg_catalog.pg_current_snapshot() AS snapshot) AS now
"""


def changes_after(
    conn: Connection[TupleRow], who: Member, cursor: Cursor, limit: int = 500
) -> Page:
    """The team's changes after ``cursor``, oldest first, at most ``limit``."""
    with as_member(conn, who):
        horizon = conn.execute(
            "SELECT purged_txid::text, purged_seq FROM teams WHERE id = thatch_team()"
        ).fetchone()
        purged = START if horizon is None else Cursor(int(horizon[0]), int(horizon[1]))
        if START < cursor < purged:
            return Page([], cursor, reset=True)
        # Read before the rows: every transaction older than this that could write here
        # has ended by then, so its rows are in the next statement's snapshot.
        # pg_stat_activity is read once per transaction and kept: a copy read earlier
        # could pair a session's database with a later session's id, so read it anew.
        conn.execute("SELECT pg_catalog.pg_stat_clear_snapshot()")
        xmin = int(conn.execute(_HORIZON).fetchone()[0])  # type: ignore[index]
        rows = conn.execute(
            f"SELECT {MEMORY_COLUMNS}, m.rev, m.conflict_of, m.author, m.deleted_at IS NOT NULL, "
            "m.txid::text, m.seq, m.vector FROM memories m WHERE m.team = thatch_team() "
            "AND (m.txid, m.seq) > (%s::text::xid8, %s) AND m.txid < %s::text::xid8 "
            "ORDER BY m.txid, m.seq LIMIT %s",
            (str(cursor.txid), cursor.seq, str(xmin), limit),
        ).fetchall()
    changes = [
        Change(
            store=row[1],
            slug=row[0],
            rev=int(row[13]),
            conflict_of=row[14],
            author=row[15],
            memory=None if row[16] else memory_from_hub_row(row),
            vector=None if row[16] or row[19] is None else bytes(row[19]),
        )
        for row in rows
    ]
    last = Cursor(int(rows[-1][17]), int(rows[-1][18])) if rows else cursor
    if len(rows) < limit and last < purged and purged.txid < xmin:
        # Caught up below the purge horizon (a pull from the start after a purge): no row
        # lies between, and none can still come (its transaction would be older than
        # xmin), so the cursor moves to the horizon; else the next pull would be reset,
        # and the one after that, for ever.
        last = purged
    return Page(changes, last)
