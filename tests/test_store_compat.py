"""A database written by the earlier release opens, migrates and works, untouched otherwise."""

from __future__ import annotations

import sqlite3
import struct
from pathlib import Path

import numpy as np
import pytest
from thatch.frontend.store import Store
from thatch.frontend.vectors import cosine

# The earlier release's DDL, written out by hand; LEGACY_ENTRIES predates the three
# telemetry/archive columns.
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
CREATE TABLE IF NOT EXISTS predictions (id TEXT PRIMARY KEY,
  store TEXT NOT NULL REFERENCES stores(name), statement TEXT NOT NULL, rationale TEXT,
  embedding BLOB, model TEXT, confidence REAL NOT NULL DEFAULT 0.5,
  confirm_count REAL NOT NULL DEFAULT 0, disconfirm_count REAL NOT NULL DEFAULT 0,
  created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS chat_sessions (session_id TEXT PRIMARY KEY,
  name TEXT NOT NULL UNIQUE COLLATE NOCASE, topic TEXT, project TEXT,
  host_kind TEXT NOT NULL DEFAULT 'opencode', registered_at TEXT NOT NULL,
  last_seen TEXT NOT NULL, auto INTEGER NOT NULL DEFAULT 0, worktree TEXT NOT NULL DEFAULT '');
INSERT OR IGNORE INTO stores (name) VALUES ('global');
"""
ORIGINAL_COLUMNS = (
    "slug, store, label, content, embedding, model, branch, confidence, created_at, updated_at"
)


def earlier_release_blob(values: np.ndarray) -> bytes:
    """What the TypeScript release wrote: the Float32Array's own bytes, little-endian."""
    return struct.pack(f"<{len(values)}f", *values.tolist())


def build_database(path: Path, entries_ddl: str) -> list[np.ndarray]:
    rng = np.random.default_rng(42)
    vectors = [rng.normal(size=384).astype(np.float32) for _ in range(4)]
    conn = sqlite3.connect(path)
    conn.executescript(OTHER_DDL + entries_ddl + ";")
    conn.execute("INSERT INTO stores VALUES ('acme/app')")
    bge = "Xenova/bge-small-en-v1.5"
    rows = [
        ("deploy-steps", "acme/app", "Deploy steps", vectors[0], bge, None, 8),
        ("ünïcode-label", "acme/app", "  Ünïcode Label ", vectors[1], bge, "dev", None),
        ("xpa9", "global", "!!!", vectors[2], "old-model", None, 3),
        ("pending", "global", "Pending", None, None, None, None),
    ]  # fmt: skip
    for slug, store, label, vector, model, branch, confidence in rows:
        conn.execute(
            f"INSERT INTO entries ({ORIGINAL_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                slug,
                store,
                label,
                f"# {label}\n\ntext of {slug}",
                None if vector is None else earlier_release_blob(vector),
                model,
                branch,
                confidence,
                "2024-06-01T08:00:00.000Z",
                "2024-06-02T09:30:00.250Z",
            ),
        )
    conn.execute(
        "INSERT INTO dedup_pairs VALUES ('acme/app', 'deploy-steps', 'ünïcode-label', "
        "'unrelated', '2024-06-03T00:00:00.000Z')"
    )
    conn.execute(
        "INSERT INTO predictions (id, store, statement, created_at, updated_at) "
        "VALUES ('p1', 'global', 'likes tabs', 't', 't')"
    )
    conn.commit()
    conn.close()
    return vectors


def snapshot(conn: sqlite3.Connection) -> dict[str, list[tuple[object, ...]]]:
    """Original columns of every row, with their SQLite storage types, plus other tables."""
    typed = ", ".join(f"{c}, typeof({c})" for c in ORIGINAL_COLUMNS.split(", "))
    return {
        "entries": conn.execute(f"SELECT {typed} FROM entries ORDER BY rowid").fetchall(),
        "dedup_pairs": conn.execute("SELECT * FROM dedup_pairs").fetchall(),
        "predictions": conn.execute("SELECT * FROM predictions").fetchall(),
        "stores": conn.execute("SELECT * FROM stores ORDER BY name").fetchall(),
    }


@pytest.mark.parametrize("variant", ["legacy", "current"])
def test_earlier_release_database_opens_unchanged(tmp_path: Path, variant: str) -> None:
    """Migrates (legacy gains 0/NULL/0), lists, shows, searches; original bytes intact."""
    path = tmp_path / "thatch.db"
    vectors = build_database(path, LEGACY_ENTRIES if variant == "legacy" else CURRENT_ENTRIES)
    raw = sqlite3.connect(path)
    before = snapshot(raw)
    raw.close()

    with Store.open(path) as store:
        assert snapshot(store.conn) == before
        added = store.conn.execute(
            "SELECT recall_count, last_recalled_at, archived FROM entries"
        ).fetchall()
        assert added == [(0, None, 0)] * 4
        assert [m.label for m in store.list("acme/app")] == ["  Ünïcode Label ", "Deploy steps"]
        shown = store.show("acme/app", "DEPLOY STEPS")
        assert shown is not None and shown.dim == 384 and shown.confidence == 8
        assert store.show("global", "!!!") is not None
        assert store.pending_count() == 1

        found = store.search(["acme/app", "global"], vectors[1], limit=3)
        assert found[0].memory.slug == "ünïcode-label"
        assert found[0].score == pytest.approx(1.0, abs=1e-9)
        expected = sorted((cosine(vectors[1], v) for v in vectors[:3]), reverse=True)
        assert [m.score for m in found] == pytest.approx(expected, abs=1e-12)
        assert store.model_mismatch_count("global", "Xenova/bge-small-en-v1.5") == 1
        # Reads recorded no usage and rewrote nothing.
        assert snapshot(store.conn) == before

    with Store.open(path) as again:
        assert snapshot(again.conn) == before


def test_store_writes_blobs_the_earlier_release_reads(tmp_path: Path) -> None:
    """A vector saved by the store is exactly the bytes the earlier release would write."""
    path = tmp_path / "thatch.db"
    vectors = build_database(path, LEGACY_ENTRIES)
    with Store.open(path) as store:
        store.remember("acme/app", "new one", "# new one\n\nx", vectors[3], "m")
    raw = sqlite3.connect(path)
    try:
        blob = raw.execute("SELECT embedding FROM entries WHERE slug = 'new-one'").fetchone()[0]
        assert blob == earlier_release_blob(vectors[3])
        assert len(blob) == 4 * 384
        # The earlier release's own queries still run against the migrated schema.
        rows = raw.execute(
            "SELECT slug FROM entries WHERE store = ? AND archived = 0 ORDER BY slug",
            ("acme/app",),
        ).fetchall()
        assert rows == [("deploy-steps",), ("new-one",), ("ünïcode-label",)]
    finally:
        raw.close()
