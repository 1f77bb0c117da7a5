"""The hub's connections to PostgreSQL: one pool per hub process (docs/team.md §roles).

The role is checked before the pool opens (``schema.check_role``: one row-level security
binds), so a misconfigured hub fails at once with the reason instead of retrying
connections; every connection runs in autocommit, so the only transactions are the
explicit ones of ``session.as_member``, whose team and member end with them: a
connection handed back to the pool, or by a PgBouncer in transaction mode to another hub
replica, carries neither. Behind a PgBouncer older than 1.21 in transaction mode, which
cannot carry prepared statements, ``prepare=False`` turns them off (``thatch hub serve
--no-prepare``).
"""

from __future__ import annotations

import psycopg
from psycopg import Connection
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

from thatch.hub.schema import check_role

__all__ = ["new_pool", "open_checked", "open_pool"]


def _configure(conn: Connection[TupleRow]) -> None:
    conn.autocommit = True


def _configure_unprepared(conn: Connection[TupleRow]) -> None:
    conn.autocommit = True
    # psycopg prepares a statement run often on its connection; PgBouncer before 1.21 in
    # transaction mode hands the next transaction another server connection, which has
    # no such statement ("prepared statement ... does not exist"). None: never prepare.
    conn.prepare_threshold = None


def new_pool(
    conninfo: str, *, min_size: int = 1, max_size: int = 8, prepare: bool = True
) -> ConnectionPool:
    """A pool not yet open (``open_checked`` opens it): a server can register its
    service on it first and answer UNAVAILABLE until it is. ``prepare=False`` turns
    psycopg's prepared statements off (PgBouncer < 1.21 in transaction mode)."""
    return ConnectionPool(
        conninfo,
        min_size=min_size,
        max_size=max_size,
        configure=_configure if prepare else _configure_unprepared,
        open=False,
        name="thatch-hub",
    )


def open_checked(pool: ConnectionPool, conninfo: str) -> None:
    """Check the role (``HubRoleError`` when it could bypass row-level security), then open
    ``pool`` (made with ``conninfo``) and wait for its first connections."""
    with psycopg.connect(conninfo, autocommit=True) as probe:
        check_role(probe)
    pool.open(wait=True)


def open_pool(
    conninfo: str, *, min_size: int = 1, max_size: int = 8, prepare: bool = True
) -> ConnectionPool:
    """An open pool of autocommit connections as a checked role; the caller closes it.
    ``HubRoleError`` when the role could bypass row-level security."""
    pool = new_pool(conninfo, min_size=min_size, max_size=max_size, prepare=prepare)
    open_checked(pool, conninfo)
    return pool
