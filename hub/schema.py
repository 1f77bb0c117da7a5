"""The hub's schema (docs/team.md §schema): named migrations recorded in the database.

As the SQLite store does (frontend/store/schema.py), each migration runs in its own
transaction together with the row recording it in ``_thatch_migrations``. Several hub
replicas may start at once: each transaction first takes a transaction-level advisory
lock and re-checks the record, so every migration runs exactly once.

Migrations run as the owner (the operator's admin role); the hub serves as a restricted
role that ``check_role`` verifies before serving.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import psycopg
from psycopg import Connection
from psycopg.rows import TupleRow

from thatch.hub.migrations import (
    TABLES,
    m001_tables,
    m002_row_security,
    m003_stamps_and_auth,
    m004_purge_horizon,
    m005_applied_writes,
    m006_hub_reads_migrations,
    m007_chat,
    m008_hnsw_screen,
    m009_chat_peers_of_live_members,
    m010_write_ids_per_member,
)

__all__ = [
    "MIGRATIONS",
    "MIGRATIONS_TABLE",
    "VECTOR_FIX",
    "HubRoleError",
    "applied_migrations",
    "check_role",
    "migrate",
    "missing_migrations",
    "vector_problem",
]

MIGRATIONS_TABLE = "_thatch_migrations"

MIGRATIONS: list[tuple[str, Callable[[Connection[TupleRow], str], None]]] = [
    ("m001_tables", m001_tables),
    ("m002_row_security", m002_row_security),
    ("m003_stamps_and_auth", m003_stamps_and_auth),
    ("m004_purge_horizon", m004_purge_horizon),
    ("m005_applied_writes", m005_applied_writes),
    ("m006_hub_reads_migrations", m006_hub_reads_migrations),
    ("m007_chat", m007_chat),
    ("m008_hnsw_screen", m008_hnsw_screen),
    ("m009_chat_peers_of_live_members", m009_chat_peers_of_live_members),
    ("m010_write_ids_per_member", m010_write_ids_per_member),
]

# pg_advisory_xact_lock key serialising migrations between hub replicas ("thatch" in ASCII).
_MIGRATION_LOCK = 0x7468617463680001


class HubRoleError(Exception):
    """The hub's database role could bypass row-level security; the message says why."""


def applied_migrations(conn: Connection[TupleRow]) -> set[str]:
    exists = conn.execute("SELECT to_regclass(%s)", (MIGRATIONS_TABLE,)).fetchone()
    if exists is None or exists[0] is None:
        return set()
    return {str(row[0]) for row in conn.execute(f"SELECT name FROM {MIGRATIONS_TABLE}")}


def missing_migrations(conn: Connection[TupleRow]) -> list[str]:
    """The migrations this hub needs that the database has not recorded (all of them when
    the hub's role may not even read the record: m006 grants that)."""
    try:
        applied = applied_migrations(conn)
    except psycopg.errors.InsufficientPrivilege:
        applied = set()
    return [name for name, _step in MIGRATIONS if name not in applied]


def migrate(conn: Connection[TupleRow], hub_role: str, applied_at: datetime) -> list[str]:
    """Apply every migration not yet recorded, as the owner; the names applied now.

    ``hub_role`` must exist (``CREATE ROLE thatch_hub LOGIN``): the migrations grant it what
    the hub needs and nothing more. ``conn`` must not be inside a transaction.
    """
    done: list[str] = []
    for name, step in MIGRATIONS:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} "
                "(name text PRIMARY KEY, applied_at timestamptz NOT NULL)"
            )
            if name in applied_migrations(conn):
                continue
            step(conn, hub_role)
            conn.execute(
                f"INSERT INTO {MIGRATIONS_TABLE} (name, applied_at) VALUES (%s, %s)",
                (name, applied_at),
            )
            done.append(name)
    return done


VECTOR_FIX = (
    "install pgvector 0.8.0 or newer on the database server, then run "
    "ALTER EXTENSION vector UPDATE in the hub's database as its owner, and restart the hub"
)


def vector_problem(conn: Connection[TupleRow]) -> str | None:
    """Why the server's pgvector cannot serve the hub (None: it can), on a migrated
    database. The HNSW screen (hub/memories.py) sets ``hnsw.iterative_scan``, which
    pgvector 0.8.0 added: with 0.7 every recall over a store past ``EXACT_SCAN_MAX``
    memories failed with "invalid configuration parameter name". The loaded library
    defines the setting, whatever version the database's extension records (a server
    upgraded without ``ALTER EXTENSION vector UPDATE`` serves), so it is asked for after
    a vector value has loaded the library; ``conn`` must not be inside a transaction.
    A database error (a lost connection, a type the role cannot see) is raised: it says
    nothing about the version."""
    with conn.transaction():
        conn.execute("SELECT '[1]'::vector")
        row = conn.execute(
            "SELECT current_setting('hnsw.iterative_scan', true), "
            "(SELECT extversion FROM pg_extension WHERE extname = 'vector')"
        ).fetchone()
    if row is not None and row[0] is not None:
        return None
    recorded = row[1] if row is not None else None
    return (
        f"the server's pgvector (the vector extension {recorded or 'of unknown version'}) "
        "has no iterative index scans: the hub needs pgvector 0.8.0 or newer"
    )


def check_role(conn: Connection[TupleRow]) -> None:
    """Refuse to serve as a role row-level security does not bind: a superuser, a
    BYPASSRLS role, or the owner of a hub table (owners bypass their tables' policies)."""
    row = conn.execute(
        "SELECT current_user, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"
    ).fetchone()
    if row is None:
        raise HubRoleError("cannot read the hub's own role from pg_roles")
    user, superuser, bypass = row
    if superuser or bypass:
        raise HubRoleError(
            f"the hub connects as {user!r}, a {'superuser' if superuser else 'BYPASSRLS role'}: "
            "row-level security would not separate teams. Connect as the restricted role the "
            "migrations granted (docs/team.md §roles)"
        )
    owned = [
        str(name)
        for (name,) in conn.execute(
            "SELECT tablename FROM pg_tables WHERE tableowner = current_user "
            "AND tablename = ANY(%s)",
            (list(TABLES),),
        )
    ]
    if owned:
        raise HubRoleError(
            f"the hub connects as {user!r}, the owner of {', '.join(sorted(owned))}: owners "
            "bypass row-level security. Run migrations as the owner and serve as another role "
            "(docs/team.md §roles)"
        )
