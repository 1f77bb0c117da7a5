"""The schema (docs/database.md §tables) and its named, ordered migrations, applied on open.

Each migration runs in its own ``BEGIN IMMEDIATE`` transaction together with the row that
records it in ``_thatch_migrations``; a process that finds every name recorded does no
write at all. Each step is also idempotent on its own (it inspects the schema first), so a
database touched by the earlier release, which does not know the record table, migrates
correctly whatever state it is in. A migration that must read every row (m009) only
changes the schema there and schedules a backfill (``backfill``) that does the row work
in short transactions afterwards, so no other writer waits long on the lock.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

from thatch.frontend.store import backfill, lexical
from thatch.frontend.store.db import atomic
from thatch.frontend.store.rows import MISSING, USABLE

MIGRATIONS_TABLE = "_thatch_migrations"

# The 14 tables, in creation order, exactly as the earlier release declares them.
TABLES: dict[str, str] = {
    "stores": "CREATE TABLE IF NOT EXISTS stores (name TEXT PRIMARY KEY)",
    "entries": """CREATE TABLE IF NOT EXISTS entries (
  slug TEXT NOT NULL,
  store TEXT NOT NULL REFERENCES stores(name),
  label TEXT NOT NULL,
  content TEXT NOT NULL,
  embedding BLOB,
  model TEXT,
  branch TEXT,
  confidence INTEGER,
  archived INTEGER NOT NULL DEFAULT 0,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  recall_count INTEGER NOT NULL DEFAULT 0,
  last_recalled_at TEXT,
  PRIMARY KEY (slug, store)
)""",
    "dedup_pairs": """CREATE TABLE IF NOT EXISTS dedup_pairs (
  store TEXT NOT NULL,
  slug_a TEXT NOT NULL,
  slug_b TEXT NOT NULL,
  status TEXT NOT NULL,
  checked_at TEXT NOT NULL,
  PRIMARY KEY (store, slug_a, slug_b)
)""",
    "prediction_matchers": """CREATE TABLE IF NOT EXISTS prediction_matchers (
  id TEXT PRIMARY KEY,
  store TEXT NOT NULL REFERENCES stores(name),
  description TEXT NOT NULL,
  embedding BLOB,
  model TEXT,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
)""",
    "predictions": """CREATE TABLE IF NOT EXISTS predictions (
  id TEXT PRIMARY KEY,
  store TEXT NOT NULL REFERENCES stores(name),
  statement TEXT NOT NULL,
  rationale TEXT,
  embedding BLOB,
  model TEXT,
  confidence REAL NOT NULL DEFAULT 0.5,
  confirm_count REAL NOT NULL DEFAULT 0,
  disconfirm_count REAL NOT NULL DEFAULT 0,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
)""",
    "prediction_edges": """CREATE TABLE IF NOT EXISTS prediction_edges (
  matcher_id TEXT NOT NULL REFERENCES prediction_matchers(id) ON DELETE CASCADE,
  prediction_id TEXT NOT NULL REFERENCES predictions(id) ON DELETE CASCADE,
  weight REAL NOT NULL DEFAULT 1.0,
  created_at TEXT NOT NULL,
  PRIMARY KEY (matcher_id, prediction_id)
)""",
    "prediction_provenance": """CREATE TABLE IF NOT EXISTS prediction_provenance (
  id TEXT PRIMARY KEY,
  prediction_id TEXT NOT NULL REFERENCES predictions(id) ON DELETE CASCADE,
  signal TEXT NOT NULL,
  detail TEXT,
  created_at TEXT NOT NULL
)""",
    "behavior_matchers": """CREATE TABLE IF NOT EXISTS behavior_matchers (
  id TEXT PRIMARY KEY,
  store TEXT NOT NULL REFERENCES stores(name),
  description TEXT NOT NULL,
  embedding BLOB,
  model TEXT,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
)""",
    "behaviors": """CREATE TABLE IF NOT EXISTS behaviors (
  id TEXT PRIMARY KEY,
  store TEXT NOT NULL REFERENCES stores(name),
  statement TEXT NOT NULL,
  rationale TEXT,
  embedding BLOB,
  model TEXT,
  confidence REAL NOT NULL DEFAULT 0.5,
  confirm_count REAL NOT NULL DEFAULT 0,
  disconfirm_count REAL NOT NULL DEFAULT 0,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
)""",
    "behavior_edges": """CREATE TABLE IF NOT EXISTS behavior_edges (
  matcher_id TEXT NOT NULL REFERENCES behavior_matchers(id) ON DELETE CASCADE,
  behavior_id TEXT NOT NULL REFERENCES behaviors(id) ON DELETE CASCADE,
  weight REAL NOT NULL DEFAULT 1.0,
  created_at TEXT NOT NULL,
  PRIMARY KEY (matcher_id, behavior_id)
)""",
    "behavior_provenance": """CREATE TABLE IF NOT EXISTS behavior_provenance (
  id TEXT PRIMARY KEY,
  behavior_id TEXT NOT NULL REFERENCES behaviors(id) ON DELETE CASCADE,
  signal TEXT NOT NULL,
  detail TEXT,
  created_at TEXT NOT NULL
)""",
    "chat_sessions": """CREATE TABLE IF NOT EXISTS chat_sessions (
  session_id TEXT PRIMARY KEY,
  name TEXT NOT NULL UNIQUE COLLATE NOCASE,
  topic TEXT,
  project TEXT,
  host_kind TEXT NOT NULL DEFAULT 'opencode',
  registered_at TEXT NOT NULL,
  last_seen TEXT NOT NULL,
  auto INTEGER NOT NULL DEFAULT 0,
  worktree TEXT NOT NULL DEFAULT ''
)""",
    "chat_messages": """CREATE TABLE IF NOT EXISTS chat_messages (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  from_session TEXT NOT NULL,
  to_session TEXT NOT NULL,
  body TEXT NOT NULL,
  created_at TEXT NOT NULL,
  delivered_at TEXT,
  read_at TEXT,
  via_broadcast INTEGER NOT NULL DEFAULT 0
)""",
    "repo_paths": """CREATE TABLE IF NOT EXISTS repo_paths (
  worktree_path TEXT PRIMARY KEY,
  main_path TEXT NOT NULL,
  repo_slug TEXT NOT NULL,
  resolved_at INTEGER NOT NULL
)""",
}

# Columns later releases added, with the declarations ALTER TABLE gives them.
ADDED_COLUMNS: dict[str, list[tuple[str, str]]] = {
    "entries": [
        ("recall_count", "INTEGER NOT NULL DEFAULT 0"),
        ("last_recalled_at", "TEXT"),
        ("archived", "INTEGER NOT NULL DEFAULT 0"),
    ],
    "chat_sessions": [
        ("topic", "TEXT"),
        ("project", "TEXT"),
        ("host_kind", "TEXT NOT NULL DEFAULT 'opencode'"),
        ("auto", "INTEGER NOT NULL DEFAULT 0"),
        ("worktree", "TEXT NOT NULL DEFAULT ''"),
    ],
    "chat_messages": [
        ("delivered_at", "TEXT"),
        ("read_at", "TEXT"),
        ("via_broadcast", "INTEGER NOT NULL DEFAULT 0"),
    ],
}

_NOCASE_NAME = re.compile(r"""(^|[\s(,])["`\[]?name["`\]]?\s[^,]*\bCOLLATE\s+NOCASE\b""", re.I)


def m001_create_tables(conn: sqlite3.Connection) -> None:
    for ddl in TABLES.values():
        conn.execute(ddl)
    conn.execute("INSERT OR IGNORE INTO stores (name) VALUES ('global')")


def m002_chat_sessions_nocase(conn: sqlite3.Connection) -> None:
    """Rebuild a chat_sessions table whose ``name`` predates ``COLLATE NOCASE``."""
    row = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'chat_sessions'"
    ).fetchone()
    if row is None or _NOCASE_NAME.search(row[0] or ""):
        return
    old_columns = table_columns(conn, "chat_sessions")
    conn.execute("DROP TABLE IF EXISTS chat_sessions_nocase")
    conn.execute(
        TABLES["chat_sessions"].replace("IF NOT EXISTS chat_sessions", "chat_sessions_nocase", 1)
    )
    new_columns = table_columns(conn, "chat_sessions_nocase")
    shared = [name for name in old_columns if name in new_columns]
    listed = ", ".join(f'"{name}"' for name in shared)
    order = "registered_at, rowid" if "registered_at" in old_columns else "rowid"
    # INSERT OR IGNORE in registered_at order: the first row of each case group wins.
    conn.execute(
        f"INSERT OR IGNORE INTO chat_sessions_nocase ({listed}) "
        f"SELECT {listed} FROM chat_sessions ORDER BY {order}"
    )
    conn.execute("DROP TABLE chat_sessions")
    conn.execute("ALTER TABLE chat_sessions_nocase RENAME TO chat_sessions")


def m003_add_columns(conn: sqlite3.Connection) -> None:
    for table, columns in ADDED_COLUMNS.items():
        present = table_columns(conn, table)
        for name, declaration in columns:
            if name not in present:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {declaration}")


VERSIONS_TABLE = "_thatch_store_versions"
# Every change to an entry except its recall telemetry: what a cached vector matrix or
# a displayed row depends on. Telemetry stamps (every recall) must not drop the cache.
_VERSIONED_COLUMNS = (
    "slug, store, label, content, embedding, model, branch, confidence, archived, "
    "created_at, updated_at"
)


def _bump(row: str) -> str:
    return (
        f"INSERT OR IGNORE INTO {VERSIONS_TABLE} (store, version) VALUES ({row}.store, 0); "
        f"UPDATE {VERSIONS_TABLE} SET version = version + 1 WHERE store = {row}.store;"
    )


def m004_store_versions(conn: sqlite3.Connection) -> None:
    """Per-store change counters kept by triggers, so caches survive unrelated commits.

    Triggers live in the database, so writes by any client (an earlier release included)
    move the counter; ``PRAGMA data_version`` alone would drop every cached matrix on each
    commit anywhere in the file, telemetry stamps and chat heartbeats included.
    Its trigger bodies conflict under an outer upsert; m006 replaces them (this step is
    kept as it was so that databases which recorded it stay comparable).
    """
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {VERSIONS_TABLE} "
        "(store TEXT PRIMARY KEY, version INTEGER NOT NULL)"
    )
    conn.execute(
        "CREATE TRIGGER IF NOT EXISTS thatch_entries_insert AFTER INSERT ON entries "
        f"BEGIN {_bump('NEW')} END"
    )
    conn.execute(
        "CREATE TRIGGER IF NOT EXISTS thatch_entries_delete AFTER DELETE ON entries "
        f"BEGIN {_bump('OLD')} END"
    )
    conn.execute(
        f"CREATE TRIGGER IF NOT EXISTS thatch_entries_update AFTER UPDATE OF {_VERSIONED_COLUMNS} "
        f"ON entries BEGIN {_bump('NEW')} END"
    )
    conn.execute(
        "CREATE TRIGGER IF NOT EXISTS thatch_entries_move AFTER UPDATE OF store ON entries "
        f"WHEN OLD.store IS NOT NEW.store BEGIN {_bump('OLD')} END"
    )


def m005_pending_index(conn: sqlite3.Connection) -> None:
    """Pending rows found without scanning the table (every recall asks for them)."""
    conn.execute(
        "CREATE INDEX IF NOT EXISTS thatch_entries_pending "
        f"ON entries (updated_at, store, slug) WHERE {MISSING}"
    )


def _bump_never_conflicting(row: str) -> str:
    """The counter bump as statements that cannot conflict under any outer policy.

    Inside a trigger the outer statement's conflict policy replaces the trigger's own
    (an ``INSERT OR IGNORE`` fired by an upsert aborts on conflict), so the row is created
    only when missing, and the bump itself is an UPDATE of a key it does not change.
    """
    return (
        f"INSERT INTO {VERSIONS_TABLE} (store, version) SELECT {row}.store, 0 "
        f"WHERE NOT EXISTS (SELECT 1 FROM {VERSIONS_TABLE} WHERE store = {row}.store); "
        f"UPDATE {VERSIONS_TABLE} SET version = version + 1 WHERE store = {row}.store;"
    )


ENTRY_TRIGGERS = (
    "thatch_entries_insert",
    "thatch_entries_delete",
    "thatch_entries_update",
    "thatch_entries_move",
)


def m006_conflict_free_triggers(conn: sqlite3.Connection) -> None:
    """Replace m004's triggers: the earlier release's upsert failed on their INSERT OR IGNORE.

    ``INSERT … ON CONFLICT(slug, store) DO UPDATE`` into entries fired the insert trigger
    under the upsert's ABORT policy, so its ``INSERT OR IGNORE`` into the counters raised
    ``UNIQUE constraint failed``. The counters stay (older thatch processes still key on
    them); only the trigger bodies change.
    """
    for name in ENTRY_TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    conn.execute(
        "CREATE TRIGGER thatch_entries_insert AFTER INSERT ON entries "
        f"BEGIN {_bump_never_conflicting('NEW')} END"
    )
    conn.execute(
        "CREATE TRIGGER thatch_entries_delete AFTER DELETE ON entries "
        f"BEGIN {_bump_never_conflicting('OLD')} END"
    )
    conn.execute(
        f"CREATE TRIGGER thatch_entries_update AFTER UPDATE OF {_VERSIONED_COLUMNS} "
        f"ON entries BEGIN {_bump_never_conflicting('NEW')} END"
    )
    conn.execute(
        "CREATE TRIGGER thatch_entries_move AFTER UPDATE OF store ON entries "
        f"WHEN OLD.store IS NOT NEW.store BEGIN {_bump_never_conflicting('OLD')} END"
    )


CHANGES_TABLE = "_thatch_entry_changes"
# Log entries kept: a cache further behind than this reloads its store once instead.
CHANGES_KEPT = 10_000


def _log(row: str) -> str:
    """Append the row's key to the change log and drop entries past the kept window.

    Neither statement can conflict (the sequence is assigned, the delete has no key), so
    the outer statement's conflict policy never matters.
    """
    return (
        f"INSERT INTO {CHANGES_TABLE} (store, slug) VALUES ({row}.store, {row}.slug); "
        f"DELETE FROM {CHANGES_TABLE} WHERE seq <= "
        f"(SELECT max(seq) FROM {CHANGES_TABLE}) - {CHANGES_KEPT};"
    )


def m007_change_log(conn: sqlite3.Connection) -> None:
    """A log of which (store, slug) changed, so caches re-read those rows, not the store.

    The same triggers as m006 (counters and all, for thatch processes that key on them),
    each also logging the row it touched; a slug or store change logs the old key too.
    AUTOINCREMENT keeps sequence numbers from ever being reused after pruning.
    """
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {CHANGES_TABLE} (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
        "store TEXT NOT NULL, slug TEXT NOT NULL)"
    )
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS thatch_entry_changes_store ON {CHANGES_TABLE} (store, seq)"
    )
    # A store's usable rows without a scan of every store's (a 10-row store in a 100k
    # file). Partial, so pending lookups keep using m005's index of pending rows.
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS thatch_entries_usable ON entries (store) WHERE {USABLE}"
    )
    for name in ENTRY_TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    conn.execute(
        "CREATE TRIGGER thatch_entries_insert AFTER INSERT ON entries "
        f"BEGIN {_bump_never_conflicting('NEW')} {_log('NEW')} END"
    )
    conn.execute(
        "CREATE TRIGGER thatch_entries_delete AFTER DELETE ON entries "
        f"BEGIN {_bump_never_conflicting('OLD')} {_log('OLD')} END"
    )
    conn.execute(
        f"CREATE TRIGGER thatch_entries_update AFTER UPDATE OF {_VERSIONED_COLUMNS} "
        f"ON entries BEGIN {_bump_never_conflicting('NEW')} {_log('NEW')} END"
    )
    conn.execute(
        "CREATE TRIGGER thatch_entries_move AFTER UPDATE OF slug, store ON entries "
        "WHEN OLD.store IS NOT NEW.store OR OLD.slug IS NOT NEW.slug "
        f"BEGIN {_bump_never_conflicting('OLD')} {_log('OLD')} END"
    )


CHAT_TABLES: dict[str, str] = {
    "chat_name_counters": "CREATE TABLE IF NOT EXISTS chat_name_counters "
    "(base TEXT PRIMARY KEY, next INTEGER NOT NULL)",
    "chat_leave_tombstones": "CREATE TABLE IF NOT EXISTS chat_leave_tombstones "
    "(session_id TEXT PRIMARY KEY, left_at TEXT NOT NULL)",
    "chat_wakes": "CREATE TABLE IF NOT EXISTS chat_wakes "
    "(session_id TEXT NOT NULL, at TEXT NOT NULL)",
    # When once-a-day chat upkeep (pruning) last ran, so concurrent reminders run it once.
    "chat_upkeep": "CREATE TABLE IF NOT EXISTS chat_upkeep "
    "(task TEXT PRIMARY KEY, at TEXT NOT NULL)",
}


def m008_chat_and_repo_paths(conn: sqlite3.Connection) -> None:
    """The chat's own tables (docs/chat.md §tables) and the indexes its queries use.

    ``repo_paths`` itself is one of the 14 tables m001 creates (an earlier release may
    have made it too); it is created here again for a file whose m001 predates it.
    """
    for ddl in CHAT_TABLES.values():
        conn.execute(ddl)
    conn.execute(TABLES["repo_paths"])
    conn.execute(
        "CREATE INDEX IF NOT EXISTS thatch_chat_messages_to ON chat_messages (to_session, read_at)"
    )
    conn.execute(
        "CREATE INDEX IF NOT EXISTS thatch_chat_wakes_session ON chat_wakes (session_id, at)"
    )


FTS_TRIGGERS = (
    "thatch_entries_fts_insert",
    "thatch_entries_fts_delete",
    "thatch_entries_fts_update",
)
_FTS, _DOCS = lexical.FTS_TABLE, lexical.DOCS_TABLE


def _unindex(row: str) -> str:
    """Drop the indexed text of ``row``'s key, if any, from the index and the docs table.

    By key, not by ``entries.rowid``: VACUUM may renumber that, and ``INSERT OR REPLACE``
    deletes the row it replaces without firing delete triggers (unless the writer enabled
    recursive_triggers), so its text is still indexed when the insert trigger runs. The
    FTS5 ``'delete'`` command needs the text exactly as indexed: the docs table keeps it.
    Nothing here can conflict, so the outer statement's conflict policy never matters.
    """
    return (
        f"INSERT INTO {_FTS} ({_FTS}, rowid, words, parts) "
        f"SELECT 'delete', doc, body, replace(body, '_', ' ') FROM {_DOCS} "
        f"WHERE store = {row}.store AND slug = {row}.slug; "
        f"DELETE FROM {_DOCS} WHERE store = {row}.store AND slug = {row}.slug;"
    )


def _index(row: str) -> str:
    """Index ``row``'s label and content under its key (replacing what the key had)."""
    return (
        f"{_unindex(row)} "
        f"INSERT INTO {_DOCS} (store, slug, body) "
        f"VALUES ({row}.store, {row}.slug, {row}.label || char(10) || {row}.content); "
        f"INSERT INTO {_FTS} (rowid, words, parts) "
        f"SELECT doc, body, replace(body, '_', ' ') FROM {_DOCS} "
        f"WHERE store = {row}.store AND slug = {row}.slug;"
    )


def m009_fts(conn: sqlite3.Connection) -> None:
    """The lexical index of memories (docs/database.md §lexical-index); existing rows are
    indexed afterwards by its backfill (``fill_fts``), a few thousand per transaction.

    ``_thatch_fts_docs`` holds each key's indexed text once (``label`` newline ``content``);
    the FTS5 table reads its columns through a view (external content), so the text is
    not stored a second time. Triggers keep both in step with ``entries`` for every writer
    from this transaction on, so the backfill only adds keys they have not indexed yet.
    Skipped (not recorded) by a SQLite without FTS5: see ``init_schema``.
    """
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {_DOCS} (doc INTEGER PRIMARY KEY, store TEXT NOT NULL, "
        "slug TEXT NOT NULL, body TEXT NOT NULL, UNIQUE (store, slug))"
    )
    conn.execute(
        f"CREATE VIEW IF NOT EXISTS {lexical.SOURCE_VIEW} AS "
        f"SELECT doc, body AS words, replace(body, '_', ' ') AS parts FROM {_DOCS}"
    )
    conn.execute(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {_FTS} USING fts5(words, parts, "
        f"content='{lexical.SOURCE_VIEW}', content_rowid='doc', "
        f'tokenize="{lexical.TOKENIZER}")'
    )
    for name in FTS_TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    # Emptied first: also right for a file whose index a crash or an older SQLite left
    # behind half-made (empty in every file this release has not indexed: no cost).
    conn.execute(f"DELETE FROM {_DOCS}")
    conn.execute(f"INSERT INTO {_FTS} ({_FTS}) VALUES ('delete-all')")
    conn.execute(
        f"CREATE TRIGGER {FTS_TRIGGERS[0]} AFTER INSERT ON entries BEGIN {_index('NEW')} END"
    )
    conn.execute(
        f"CREATE TRIGGER {FTS_TRIGGERS[1]} AFTER DELETE ON entries BEGIN {_unindex('OLD')} END"
    )
    conn.execute(
        f"CREATE TRIGGER {FTS_TRIGGERS[2]} AFTER UPDATE OF slug, store, label, content "
        "ON entries WHEN OLD.slug IS NOT NEW.slug OR OLD.store IS NOT NEW.store "
        "OR OLD.label IS NOT NEW.label OR OLD.content IS NOT NEW.content "
        f"BEGIN {_unindex('OLD')} {_index('NEW')} END"
    )
    backfill.schedule(conn, lexical.BACKFILL)


def fill_fts(conn: sqlite3.Connection, after: list[str] | None, rows: int) -> list[str] | None:
    """Backfill step of m009: index up to ``rows`` entries after key ``after`` (slug, store).

    Walks the primary key's index, so it is exact whatever VACUUM does to rowids. A key
    already in ``_thatch_fts_docs`` was indexed by a trigger (written since m009) with its
    current text: skipped, so no memory is indexed twice. A key changed or inserted behind
    the walk is the triggers' too, so none is missed.
    """
    slug, store = after if after is not None else ("", "")
    found = conn.execute(
        "SELECT slug, store FROM entries WHERE (slug, store) > (?, ?) "
        "ORDER BY slug, store LIMIT 1 OFFSET ?",
        (slug, store, rows - 1),
    ).fetchone()
    (top,) = conn.execute(f"SELECT coalesce(max(doc), 0) FROM {_DOCS}").fetchone()
    bound = "" if found is None else "AND (e.slug, e.store) <= (?, ?)"
    conn.execute(
        f"INSERT INTO {_DOCS} (store, slug, body) "
        "SELECT e.store, e.slug, e.label || char(10) || e.content FROM entries AS e "
        f"WHERE (e.slug, e.store) > (?, ?) {bound} AND NOT EXISTS "
        f"(SELECT 1 FROM {_DOCS} AS d WHERE d.store = e.store AND d.slug = e.slug)",
        (slug, store) if found is None else (slug, store, *found),
    )
    # Docs rows made just now are exactly those above the old maximum (INTEGER PRIMARY KEY
    # assigns max + 1; no other writer runs inside this transaction).
    conn.execute(
        f"INSERT INTO {_FTS} (rowid, words, parts) "
        f"SELECT doc, body, replace(body, '_', ' ') FROM {_DOCS} WHERE doc > ?",
        (top,),
    )
    return None if found is None else list(found)


CHAT_BINDING_TABLES: dict[str, str] = {
    "chat_keys": "CREATE TABLE IF NOT EXISTS chat_keys "
    "(session_id TEXT PRIMARY KEY, key_hash TEXT NOT NULL)",
    "chat_secret": "CREATE TABLE IF NOT EXISTS chat_secret "
    "(id INTEGER PRIMARY KEY CHECK (id = 1), salt TEXT NOT NULL)",
}


def m011_chat_binding(conn: sqlite3.Connection) -> None:
    """Chat identities bound to their holders, and what retention needs (docs/chat.md).

    ``chat_keys`` keeps a hash of each identity's key (a separate table: the earlier
    release writes ``chat_sessions`` and must find it as it left it); ``chat_secret`` the
    random secret hook keys are derived from. The indexes let upkeep trim engine
    provenance per item without scanning the table.
    """
    import secrets

    for ddl in CHAT_BINDING_TABLES.values():
        conn.execute(ddl)
    conn.execute(
        "INSERT OR IGNORE INTO chat_secret (id, salt) VALUES (1, ?)", (secrets.token_hex(32),)
    )
    conn.execute(
        "CREATE INDEX IF NOT EXISTS thatch_prediction_provenance_item "
        "ON prediction_provenance (prediction_id, created_at)"
    )
    conn.execute(
        "CREATE INDEX IF NOT EXISTS thatch_behavior_provenance_item "
        "ON behavior_provenance (behavior_id, created_at)"
    )


def m012_defaults_off(conn: sqlite3.Connection) -> None:
    """The default behaviors a person switched off (docs/engines.md §defaults): seeding
    never brings those back."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS thatch_defaults_off (key TEXT PRIMARY KEY, at TEXT NOT NULL)"
    )


DUP_SCANNED_TABLE = "_thatch_dup_scanned"
DUP_PAIRS_TABLE = "_thatch_dup_pairs"
DUP_TRIGGERS = (
    "thatch_dup_entries_insert",
    "thatch_dup_entries_delete",
    "thatch_dup_entries_update",
)


def _unscan(row: str) -> str:
    """Forget that ``row``'s key was compared with its store, and every pair naming it.

    By key: an ``INSERT OR REPLACE`` (the earlier release's way to overwrite) fires only
    the insert trigger, which then clears what the replaced row had. Nothing here can
    conflict, so the outer statement's conflict policy never matters.
    """
    return (
        f"DELETE FROM {DUP_SCANNED_TABLE} WHERE store = {row}.store AND slug = {row}.slug; "
        f"DELETE FROM {DUP_PAIRS_TABLE} WHERE store = {row}.store AND slug_a = {row}.slug; "
        f"DELETE FROM {DUP_PAIRS_TABLE} WHERE store = {row}.store AND slug_b = {row}.slug;"
    )


def m010_duplicate_candidates(conn: sqlite3.Connection) -> None:
    """Duplicate candidates kept at write time (docs/database.md §duplicate-candidates).

    ``_thatch_dup_scanned`` names the memories already compared with their store;
    ``_thatch_dup_pairs`` holds, per compared memory, its nearest neighbours with cosine at
    least the floor (sorted slugs, exact score). Triggers clear both for any key whose
    vector, archived flag or key changes, whoever writes (the earlier release included), so
    a stored pair is never stale: a cleared memory is only unchecked until compared again.
    Only tables and triggers: existing memories are compared later in short chunks
    (``Store.check_duplicates``), never inside this transaction.
    """
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {DUP_SCANNED_TABLE} (store TEXT NOT NULL, "
        "slug TEXT NOT NULL, PRIMARY KEY (store, slug)) WITHOUT ROWID"
    )
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {DUP_PAIRS_TABLE} (store TEXT NOT NULL, "
        "slug_a TEXT NOT NULL, slug_b TEXT NOT NULL, score REAL NOT NULL, "
        "PRIMARY KEY (store, slug_a, slug_b)) WITHOUT ROWID"
    )
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS thatch_dup_pairs_b ON {DUP_PAIRS_TABLE} (store, slug_b)"
    )
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS thatch_dup_pairs_score ON {DUP_PAIRS_TABLE} (store, score)"
    )
    for name in DUP_TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    conn.execute(
        f"CREATE TRIGGER {DUP_TRIGGERS[0]} AFTER INSERT ON entries BEGIN {_unscan('NEW')} END"
    )
    conn.execute(
        f"CREATE TRIGGER {DUP_TRIGGERS[1]} AFTER DELETE ON entries BEGIN {_unscan('OLD')} END"
    )
    conn.execute(
        f"CREATE TRIGGER {DUP_TRIGGERS[2]} AFTER UPDATE OF slug, store, embedding, archived "
        "ON entries WHEN OLD.slug IS NOT NEW.slug OR OLD.store IS NOT NEW.store "
        "OR OLD.embedding IS NOT NEW.embedding OR OLD.archived IS NOT NEW.archived "
        f"BEGIN {_unscan('OLD')} {_unscan('NEW')} END"
    )


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
]
# Migrations a SQLite without FTS5 cannot run: left unrecorded, so that the first process
# with FTS5 applies them (recall meanwhile ranks by vectors alone).
NEEDS_FTS5 = frozenset({"m009_fts"})
# Migrations whose backfill reads every memory (m009: indexing 100k memories takes seconds
# of work, in short transactions): a hook opens with ``build_indexes=False`` and leaves
# them to the next MCP server or CLI command, so a host never waits on them.
BUILDS_INDEXES = frozenset({"m009_fts"})
# Each scheduled backfill's step (``backfill``), by the name of the migration scheduling it.
BACKFILLS: dict[str, backfill.Step] = {lexical.BACKFILL: fill_fts}


def table_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')]


def applied_migrations(conn: sqlite3.Connection) -> set[str]:
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (MIGRATIONS_TABLE,)
    ).fetchone()
    if exists is None:
        return set()
    return {row[0] for row in conn.execute(f"SELECT name FROM {MIGRATIONS_TABLE}")}


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
