"""The tables of the earlier release and the columns later releases added (m001-m003)."""

from __future__ import annotations

import re
import sqlite3

__all__ = [
    "ADDED_COLUMNS",
    "TABLES",
    "m001_create_tables",
    "m002_chat_sessions_nocase",
    "m003_add_columns",
    "table_columns",
]

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


def table_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')]


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
