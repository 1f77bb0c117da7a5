"""The schema (docs/database.md §tables): its named, ordered migrations, applied on open.

The list and the runner live here; each migration's body lives in ``migrations/`` (one
module per group of tables), so the order is read in one place.

Each migration runs in its own ``BEGIN IMMEDIATE`` transaction together with the row that
records it in ``_thatch_migrations``; a process that finds every name recorded does no
write at all. Each step is also idempotent on its own (it inspects the schema first), so a
database touched by the earlier release, which does not know the record table, migrates
correctly whatever state it is in. A migration that must read every row (m009) only
changes the schema there and schedules a backfill (``backfill``) that does the row work
in short transactions afterwards, so no other writer waits long on the lock.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

from thatch.frontend.store import backfill, lexical
from thatch.frontend.store.migrations.anchors import (
    ANCHORS_TABLE,
    GONE_CHECKOUTS_TABLE,
    m014_code_anchors,
    m019_anchor_verdict_stat,
    m024_anchor_base_path,
    m025_gone_checkouts,
    m026_anchor_staged_moves,
)
from thatch.frontend.store.migrations.branches import (
    BRANCH_EVENTS_TABLE,
    BRANCH_REFS_TABLE,
    BRANCH_RENAMES_TABLE,
    m013_branch_lifecycle,
    m023_branch_renames,
)
from thatch.frontend.store.migrations.changes import (
    CHANGES_KEPT,
    CHANGES_TABLE,
    VERSIONS_TABLE,
    m004_store_versions,
    m005_pending_index,
    m006_conflict_free_triggers,
    m007_change_log,
)
from thatch.frontend.store.migrations.chat import (
    CHAT_BINDING_TABLES,
    CHAT_TABLES,
    m008_chat_and_repo_paths,
    m011_chat_binding,
    m028_chat_event_times,
)
from thatch.frontend.store.migrations.chat_remote import (
    CHAT_REMOTE_TABLES,
    m018_chat_remote,
    m027_chat_refused,
    m029_chat_outbox_told,
)
from thatch.frontend.store.migrations.duplicates import (
    DUP_PAIRS_TABLE,
    DUP_SCANNED_TABLE,
    DUP_UNCHECKED_TABLE,
    m010_duplicate_candidates,
    m031_duplicate_unchecked,
)
from thatch.frontend.store.migrations.engines import m012_defaults_off, m032_engine_embeddings
from thatch.frontend.store.migrations.flat_reads import m022_flat_reads, m030_pending_by_store
from thatch.frontend.store.migrations.lexical import (
    fill_fts,
    fill_fts_identifiers,
    m009_fts,
    m017_fts_identifiers,
)
from thatch.frontend.store.migrations.links import LINKS_TABLE, m016_memory_links
from thatch.frontend.store.migrations.tables import (
    TABLES,
    m001_create_tables,
    m002_chat_sessions_nocase,
    m003_add_columns,
    table_columns,
)
from thatch.frontend.store.migrations.team import (
    TEAM_TABLES,
    m015_team_sync,
    m020_team_recalls,
    m021_team_conflict_versions,
)
from thatch.frontend.store.schema_lag import (
    MIGRATIONS_TABLE,
    READ_IF_MADE,
    has_table,
    recorded,
    schema_lag,
)
from thatch.frontend.store.transactions import ThatchConnection, atomic

# The names of the tables the migrations make, for the modules and tests that read them.
__all__ = [
    "ANCHORS_TABLE",
    "BACKFILLS",
    "BRANCH_EVENTS_TABLE",
    "BRANCH_REFS_TABLE",
    "BRANCH_RENAMES_TABLE",
    "BUILDS_INDEXES",
    "CHANGES_KEPT",
    "CHANGES_TABLE",
    "CHAT_BINDING_TABLES",
    "CHAT_REMOTE_TABLES",
    "CHAT_TABLES",
    "DUP_PAIRS_TABLE",
    "DUP_SCANNED_TABLE",
    "DUP_UNCHECKED_TABLE",
    "GONE_CHECKOUTS_TABLE",
    "LINKS_TABLE",
    "MIGRATIONS",
    "MIGRATIONS_TABLE",
    "MIGRATION_MMAP_BYTES",
    "NEEDS_FTS5",
    "READ_IF_MADE",
    "TABLES",
    "TEAM_TABLES",
    "VERSIONS_TABLE",
    "applied_migrations",
    "has_table",
    "init_schema",
    "run_backfills",
    "schema_lag",
    "table_columns",
]


MIGRATIONS: list[tuple[str, Callable[[sqlite3.Connection], None]]] = [
    ("m001_create_tables", m001_create_tables),
    ("m002_chat_sessions_nocase", m002_chat_sessions_nocase),
    ("m003_add_columns", m003_add_columns),
    ("m004_store_versions", m004_store_versions),
    ("m005_pending_index", m005_pending_index),
    ("m006_conflict_free_triggers", m006_conflict_free_triggers),
    ("m007_change_log", m007_change_log),
    ("m008_chat_and_repo_paths", m008_chat_and_repo_paths),
    ("m009_fts", m009_fts),
    ("m010_duplicate_candidates", m010_duplicate_candidates),
    ("m011_chat_binding", m011_chat_binding),
    ("m012_defaults_off", m012_defaults_off),
    ("m013_branch_lifecycle", m013_branch_lifecycle),
    ("m014_code_anchors", m014_code_anchors),
    ("m015_team_sync", m015_team_sync),
    ("m016_memory_links", m016_memory_links),
    ("m017_fts_identifiers", m017_fts_identifiers),
    ("m018_chat_remote", m018_chat_remote),
    ("m019_anchor_verdict_stat", m019_anchor_verdict_stat),
    ("m020_team_recalls", m020_team_recalls),
    ("m021_team_conflict_versions", m021_team_conflict_versions),
    ("m022_flat_reads", m022_flat_reads),
    ("m023_branch_renames", m023_branch_renames),
    ("m024_anchor_base_path", m024_anchor_base_path),
    ("m025_gone_checkouts", m025_gone_checkouts),
    ("m026_anchor_staged_moves", m026_anchor_staged_moves),
    ("m027_chat_refused", m027_chat_refused),
    ("m028_chat_event_times", m028_chat_event_times),
    ("m029_chat_outbox_told", m029_chat_outbox_told),
    ("m030_pending_by_store", m030_pending_by_store),
    ("m031_duplicate_unchecked", m031_duplicate_unchecked),
    ("m032_engine_embeddings", m032_engine_embeddings),
]
# Migrations a SQLite without FTS5 cannot run: left unrecorded, so that the first process
# with FTS5 applies them (recall meanwhile ranks by vectors alone).
NEEDS_FTS5 = frozenset({"m009_fts", "m017_fts_identifiers"})
# Migrations whose backfill reads every memory (m009: indexing 100k memories takes seconds
# of work, in short transactions), or that index every memory (m022: 1 s at 100k) or
# every chat message (m028), or that read every memory to index a few (m030's index of
# pending rows: 0.1-0.15 s at 100k memories with the file in the page cache, however
# few are pending): a hook opens with ``build_indexes=False`` and leaves them to the
# next MCP server or CLI command, so a host never waits on them. The chat outbox's
# indexes (m027, m029) read only the outbox (80 ms at 100k waiting): hooks build them.
BUILDS_INDEXES = frozenset(
    {
        "m009_fts",
        "m017_fts_identifiers",
        "m022_flat_reads",
        "m028_chat_event_times",
        "m030_pending_by_store",
        "m031_duplicate_unchecked",
        "m032_engine_embeddings",
    }
)
# Each scheduled backfill's step (``backfill``), by the name of the migration scheduling it.
BACKFILLS: dict[str, backfill.Step] = {
    lexical.BACKFILL_009: fill_fts,
    lexical.BACKFILL: fill_fts_identifiers,
}


applied_migrations = recorded  # the migrations a file records (schema_lag.recorded)


def init_schema(
    conn: sqlite3.Connection,
    applied_at: str,
    *,
    build_indexes: bool = True,
    fill_now: bool = True,
) -> list[str]:
    """Apply every migration not yet recorded, then (``build_indexes`` and ``fill_now``)
    run the backfills still pending; returns the migration names applied now.

    ``build_indexes=False`` leaves the ``BUILDS_INDEXES`` migrations and every backfill for
    a later open; ``fill_now=False`` leaves the backfills to the caller (``run_backfills``).
    """
    done = _migrate(conn, applied_at, build_indexes)
    if build_indexes and fill_now:
        run_backfills(conn)
    return done


def run_backfills(
    conn: sqlite3.Connection,
    *,
    guard: Callable[[], AbstractContextManager[object]] = nullcontext,
    sleep: Callable[[float], object] = time.sleep,
) -> set[str]:
    """Every pending backfill this SQLite can run, in short transactions; those finished.
    ``guard`` and ``sleep`` as in ``backfill.run`` (the lock to take, how to pause)."""
    steps = BACKFILLS
    with guard():
        waiting = backfill.pending(conn) & steps.keys()
        if waiting & NEEDS_FTS5 and not lexical.fts5_available(conn):
            steps = {name: step for name, step in steps.items() if name not in NEEDS_FTS5}
    if not waiting:
        return set()
    return backfill.run(conn, steps, guard=guard, sleep=sleep)


# How much of the file migrations read through a memory map (see ``_mapped``).
MIGRATION_MMAP_BYTES = 1 << 30


@contextmanager
def _mapped(conn: sqlite3.Connection) -> Iterator[None]:
    """The file memory-mapped while migrating, then as before.

    An index over ``entries`` (m005, m007) is one ``CREATE INDEX`` reading every row under
    the write lock; pages read through the map instead of ``read(2)`` take about half as
    long (~0.4 s → ~0.2 s each at 100k memories). Only while migrating: the map is kept
    out of every other open's way.
    """
    (before,) = conn.execute("PRAGMA mmap_size").fetchone()
    conn.execute(f"PRAGMA mmap_size = {MIGRATION_MMAP_BYTES}")
    try:
        yield
    finally:
        conn.execute(f"PRAGMA mmap_size = {int(before)}")


def _migrate(conn: sqlite3.Connection, applied_at: str, build_indexes: bool) -> list[str]:
    missing = {name for name, _ in MIGRATIONS} - applied_migrations(conn)
    if not missing:
        return []
    skipped = frozenset() if build_indexes else BUILDS_INDEXES
    if missing - skipped and not lexical.fts5_available(conn):
        skipped |= NEEDS_FTS5
    if missing <= skipped:
        return []
    with _mapped(conn):
        return _apply(conn, applied_at, skipped)


def _apply(conn: sqlite3.Connection, applied_at: str, skipped: frozenset[str]) -> list[str]:
    if isinstance(conn, ThatchConnection):
        conn.schema_lag = None  # read again when next asked, however far this gets
    done: list[str] = []
    for name, migrate in MIGRATIONS:
        if name in skipped:
            continue
        with atomic(conn):
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} "
                "(name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
            )
            # Re-checked under the write lock: another process may have just applied it.
            if name in applied_migrations(conn):
                continue
            migrate(conn)
            conn.execute(
                f"INSERT INTO {MIGRATIONS_TABLE} (name, applied_at) VALUES (?, ?)",
                (name, applied_at),
            )
            done.append(name)
    return done
