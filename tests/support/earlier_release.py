"""An earlier-release database of any size, and that release's write statements.

Used by the upgrade tests and by ``bench/migrate.py``: the file is what the TypeScript
release (v0.1.30 ``src/db.ts``) leaves behind with its oldest ``entries`` layout (before the
telemetry and archive columns), so every migration of this thatch has work to do.
"""

from __future__ import annotations

import random
import sqlite3
import struct
from pathlib import Path

LEGACY_ENTRIES = """
CREATE TABLE IF NOT EXISTS entries (
  slug TEXT NOT NULL,
  store TEXT NOT NULL REFERENCES stores(name),
  label TEXT NOT NULL,
  content TEXT NOT NULL,
  embedding BLOB,
  model TEXT,
  branch TEXT,
  confidence INTEGER,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  PRIMARY KEY (slug, store)
)"""
# v0.1.30's own layout: the telemetry and archive columns its statements name.
CURRENT_ENTRIES = LEGACY_ENTRIES.replace(
    "  created_at TEXT NOT NULL,\n  updated_at TEXT NOT NULL,",
    "  archived INTEGER NOT NULL DEFAULT 0,\n  created_at TEXT NOT NULL,\n"
    "  updated_at TEXT NOT NULL,\n  recall_count INTEGER NOT NULL DEFAULT 0,\n"
    "  last_recalled_at TEXT,",
)
OTHER_DDL = """
CREATE TABLE IF NOT EXISTS stores (name TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS dedup_pairs (store TEXT NOT NULL, slug_a TEXT NOT NULL,
  slug_b TEXT NOT NULL, status TEXT NOT NULL, checked_at TEXT NOT NULL,
  PRIMARY KEY (store, slug_a, slug_b));
CREATE TABLE IF NOT EXISTS chat_sessions (session_id TEXT PRIMARY KEY,
  name TEXT NOT NULL UNIQUE, registered_at TEXT NOT NULL, last_seen TEXT NOT NULL);
INSERT OR IGNORE INTO stores (name) VALUES ('global');
"""
STORES = ("global", "acme/app", "acme/lib", "tools/cli")
STAMP = "2024-06-01T08:00:00.000Z"
DIM = 384
_WORDS_TEXT = """build release target binaries integration tests postgres port fixtures tabs
pull requests reviewed deploys actions staging cluster production redis schema version
migration cache alembic defaults oauth tokens middleware logging structlog bundler paths
pathlib worker queue retry budget timeout socket embedder vector index ranking recall"""
_WORDS = _WORDS_TEXT.split()

# The earlier release's write statements on entries, verbatim from its src/db.ts (v0.1.30).
INSERT = """INSERT INTO entries (slug, store, label, content, embedding, model, branch, confidence, archived, created_at, updated_at)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""  # noqa: E501 (verbatim)
UPSERT = """
      INSERT INTO entries (slug, store, label, content, embedding, model, branch, confidence, archived, created_at, updated_at)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
      ON CONFLICT(slug, store) DO UPDATE SET
        label = excluded.label,
        content = excluded.content,
        embedding = excluded.embedding,
        model = excluded.model,
        branch = COALESCE(excluded.branch, entries.branch),
        confidence = COALESCE(excluded.confidence, entries.confidence),
        archived = COALESCE(?, entries.archived),
        updated_at = excluded.updated_at
      """  # noqa: E501 (verbatim)
FORGET = "DELETE FROM entries WHERE slug = ? AND store = ?"
# Its connection set-up, in its order (WAL first, then the 5 s busy timeout).
PRAGMAS = ("PRAGMA journal_mode = WAL", "PRAGMA busy_timeout = 5000", "PRAGMA foreign_keys = ON")


def fixed_blob(seed: int = 1) -> bytes:
    """One unit vector's float32 bytes, as the earlier release wrote them."""
    rng = random.Random(seed)
    values = [rng.gauss(0.0, 1.0) for _ in range(DIM)]
    norm = sum(v * v for v in values) ** 0.5
    return struct.pack(f"<{DIM}f", *(v / norm for v in values))


def memory_text(i: int, rng: random.Random) -> tuple[str, str]:
    """(label, content) of memory ``i``: 10–150 words, one identifier unique to it."""
    label = " ".join(rng.choices(_WORDS, k=rng.randint(2, 5))) + f" {i}"
    body = " ".join(rng.choices(_WORDS, k=rng.randint(10, 150)))
    return label, f"# {label}\n\n{body} mark_{i}."


def slug_of(i: int) -> str:
    return f"memory-{i:06d}"


def build(path: Path, rows: int, *, legacy: bool = True, seed: int = 7) -> None:
    """An earlier-release file with ``rows`` memories spread over ``STORES`` (one
    transaction); ``legacy``: the oldest ``entries`` layout, else v0.1.30's."""
    rng = random.Random(seed)
    blob = fixed_blob()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.executescript(OTHER_DDL + (LEGACY_ENTRIES if legacy else CURRENT_ENTRIES) + ";")
        conn.execute("BEGIN")
        conn.executemany("INSERT OR IGNORE INTO stores (name) VALUES (?)", [(s,) for s in STORES])
        conn.executemany(
            "INSERT INTO entries (slug, store, label, content, embedding, model, branch, "
            "confidence, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'm', NULL, NULL, ?, ?)",
            (
                (slug_of(i), STORES[i % len(STORES)], *memory_text(i, rng), blob, STAMP, STAMP)
                for i in range(rows)
            ),
        )
        conn.execute("COMMIT")
    finally:
        conn.close()
