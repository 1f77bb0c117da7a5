"""A database written by the earlier release opens, migrates and works, untouched otherwise."""

from __future__ import annotations

import json
import sqlite3
import struct
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.earlier_release import CURRENT_ENTRIES, LEGACY_ENTRIES
from tests.support.fts import assert_index_in_step
from thatch.frontend.store.lexical import lexical_hits
from thatch.frontend.store.memory_store import Store
from thatch.frontend.store.vectors import cosine

# The earlier release's DDL, written out by hand (tests/support/earlier_release.py; its
# LEGACY_ENTRIES predates the three telemetry/archive columns).
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
        assert_index_in_step(store.conn)  # the index is built from the existing rows on open
        assert list(lexical_hits(store.conn, ["acme/app"], "deploy")) == [
            ("acme/app", "deploy-steps")
        ]
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


def test_unmigrated_earlier_release_file_that_cannot_be_written_is_read(tmp_path: Path) -> None:
    """The earlier release's file, immutable to this process before thatch ever migrated
    it: lists, shows and searches answer from its own schema; writes fail as read-only."""
    from tests.support.mounts import immutable

    path = tmp_path / "thatch.db"
    vectors = build_database(path, CURRENT_ENTRIES)
    with immutable(path), Store.open(path) as store:
        assert [m.label for m in store.list("acme/app")] == ["  Ünïcode Label ", "Deploy steps"]
        for _ in range(2):  # no change log here: every search reads the rows afresh
            found = store.search(["acme/app", "global"], vectors[0], limit=3)
            assert found[0].memory.slug == "deploy-steps"
            assert found[0].score == pytest.approx(1.0, abs=1e-9)
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            store.forget("acme/app", "Deploy steps")
    with Store.open(path) as migrated:  # writable again: migrated as usual
        assert migrated.search(["global"], vectors[2], limit=1)[0].memory.slug == "xpa9"


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


# The earlier release's statements, exactly as its src/db.ts (v0.1.30) prepares them, run by a
# separate process over a plain sqlite3 connection. It never writes INSERT OR REPLACE into
# entries, nor edits content with a plain UPDATE; those two stand for any other client.
EARLIER_STATEMENTS = {
    "ensure_store": "INSERT OR IGNORE INTO stores (name) VALUES (?)",
    "insert": """INSERT INTO entries (slug, store, label, content, embedding, model, branch, confidence, archived, created_at, updated_at)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",  # noqa: E501 (verbatim)
    "upsert": """
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
      """,  # noqa: E501 (verbatim)
    "replace_entry": "INSERT OR REPLACE INTO entries (slug, store, label, content, embedding, "
    "model, branch, confidence, archived, created_at, updated_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    "edit_entry": "UPDATE entries SET content = ?, updated_at = ? WHERE slug = ? AND store = ?",
    "unpair": "DELETE FROM dedup_pairs WHERE store = ? AND (slug_a = ? OR slug_b = ?)",
    "telemetry": """UPDATE entries SET recall_count = recall_count + 1, last_recalled_at = ?
         WHERE (store, slug) IN (VALUES (?, ?))""",
    "forget": "DELETE FROM entries WHERE slug = ? AND store = ?",
    "mark_checked": "INSERT OR REPLACE INTO dedup_pairs (store, slug_a, slug_b, status, "
    "checked_at) VALUES (?, ?, ?, ?, ?)",
}

# argv: path, then JSON [[statement name, [params…]], …]; bytes params as {"hex": …}.
EARLIER_CLIENT = """
import json, sqlite3, sys
statements = json.loads(sys.argv[2])
steps = json.loads(sys.argv[3])
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=5)
conn.execute("PRAGMA journal_mode = WAL")
conn.execute("PRAGMA busy_timeout = 5000")
conn.execute("PRAGMA foreign_keys = ON")
for name, params in steps:
    values = [bytes.fromhex(p["hex"]) if isinstance(p, dict) else p for p in params]
    try:
        conn.execute(statements[name], values)
    except sqlite3.Error as error:
        print(f"{name}: {error}", file=sys.stderr)
        sys.exit(1)
conn.close()
"""


def run_earlier_release(path: Path, *steps: tuple[str, Sequence[object]]) -> None:
    encoded = [
        [name, [{"hex": p.hex()} if isinstance(p, bytes) else p for p in params]]
        for name, params in steps
    ]
    done = subprocess.run(
        [sys.executable, "-c", EARLIER_CLIENT, str(path), json.dumps(EARLIER_STATEMENTS),
         json.dumps(encoded)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def entry_params(slug: str, content: str, vector: np.ndarray, **extra: object) -> list[object]:
    """The earlier release's remember() parameters for a memory in 'acme/app'."""
    now = "2024-07-01T10:00:00.000Z"
    return [slug, "acme/app", slug.title(), content, earlier_release_blob(vector), "m",
            extra.get("branch"), extra.get("confidence"), 0, now, now]  # fmt: skip


def migrated_by_previous_thatch(path: Path) -> None:
    """The file as the previous thatch left it: m001–m005 applied (m004's triggers)."""
    from thatch.frontend.store import db
    from thatch.frontend.store.schema import MIGRATIONS, MIGRATIONS_TABLE

    conn = db.connect(path)
    try:
        with db.atomic(conn):
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} "
                "(name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
            )
            for name, migrate in MIGRATIONS[:5]:
                migrate(conn)
                conn.execute(f"INSERT INTO {MIGRATIONS_TABLE} VALUES (?, 't')", (name,))
    finally:
        conn.close()


def unit(rng: np.random.Generator) -> np.ndarray:
    vector = rng.normal(size=384).astype(np.float32)
    return vector / np.linalg.norm(vector)


@pytest.mark.parametrize("start", ["fresh", "upgraded"])
def test_earlier_release_statements_work_and_thatch_sees_each(tmp_path: Path, start: str) -> None:
    """Each earlier-release statement succeeds on a migrated file; a warm store sees it."""
    path = tmp_path / "thatch.db"
    if start == "upgraded":
        migrated_by_previous_thatch(path)
    rng = np.random.default_rng(9)
    a, b, c, d = (unit(rng) for _ in range(4))
    near_a = (a + 0.01 * unit(rng)).astype(np.float32)
    with Store.open(path) as store:
        triggers = store.conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'trigger'"
        ).fetchall()
        # The change log's four, the lexical index's three, the duplicate candidates' three,
        # the code anchors' three, team sync's outbox three, the memory links' three, the chat
        # outbox's one, team sync's recall events' one, the unchecked memories' five (m031).
        assert len(triggers) == 26
        store.remember("acme/app", "alpha", "# alpha", a, "m")
        store.remember("acme/app", "alpha twin", "# alpha twin", near_a, "m")
        assert [p.slug_b for p in store.find_duplicates("acme/app")] == ["alpha-twin"]

        def top(vector: np.ndarray) -> tuple[Any, ...]:
            assert_index_in_step(store.conn)
            best = store.search(["acme/app"], vector, limit=1)[0]
            return best.memory.slug, best.memory.content, best.score

        def lexical(text: str) -> list[str]:
            return sorted(slug for _, slug in lexical_hits(store.conn, ["acme/app"], text))

        run_earlier_release(path, ("ensure_store", ["acme/app"]),
                            ("insert", entry_params("beta", "# beta", b)))  # fmt: skip
        assert top(b) == ("beta", "# beta", pytest.approx(1.0, abs=1e-9))

        # The upsert, both ways: onto an existing row (with thatch's counter row present)
        # and as a plain insert.
        assert lexical("beta") == ["beta"]
        run_earlier_release(path, ("upsert", [*entry_params("beta", "# beta v2 zeta_9", c), None]))
        assert top(c) == ("beta", "# beta v2 zeta_9", pytest.approx(1.0, abs=1e-9))
        assert lexical("zeta_9") == ["beta"]
        assert top(b)[0] != "beta" or top(b)[2] < 0.5
        run_earlier_release(path, ("upsert", [*entry_params("gamma", "# gamma", d), None]))
        assert top(d) == ("gamma", "# gamma", pytest.approx(1.0, abs=1e-9))

        run_earlier_release(
            path, ("replace_entry", entry_params("gamma", "# gamma v2 OmegaRay", b))
        )
        assert top(b) == ("gamma", "# gamma v2 OmegaRay", pytest.approx(1.0, abs=1e-9))
        assert lexical("OmegaRay") == ["gamma"]
        assert store.show("acme/app", "gamma").content == "# gamma v2 OmegaRay"  # type: ignore[union-attr]

        run_earlier_release(
            path, ("edit_entry", ["# gamma v3 Kappa.delta", "t", "gamma", "acme/app"])
        )
        assert lexical("kappa.delta") == ["gamma"] and lexical("OmegaRay") == []
        assert_index_in_step(store.conn)

        verdict = ["acme/app", "alpha", "alpha-twin", "duplicate", "2024-07-01T10:00:00.000Z"]
        run_earlier_release(path, ("mark_checked", verdict))
        assert store.find_duplicates("acme/app") == []
        run_earlier_release(path, ("unpair", ["acme/app", "alpha", "alpha"]))
        assert [p.slug_b for p in store.find_duplicates("acme/app")] == ["alpha-twin"]

        run_earlier_release(path, ("telemetry", ["2024-07-02T00:00:00.000Z", "acme/app", "beta"]))
        shown = store.search(["acme/app"], c, limit=1)[0].memory
        assert (shown.slug, shown.recall_count) == ("beta", 1)
        assert shown.last_recalled_at == "2024-07-02T00:00:00.000Z"

        run_earlier_release(path, ("forget", ["beta", "acme/app"]),
                            ("unpair", ["acme/app", "beta", "beta"]))  # fmt: skip
        assert store.show("acme/app", "beta") is None
        assert lexical("zeta_9") == []
        assert_index_in_step(store.conn)
        assert "beta" not in [m.memory.slug for m in store.search(["acme/app"], c)]
        assert sorted(m.slug for m in store.list("acme/app")) == ["alpha", "alpha-twin", "gamma"]

    with Store.open(path) as again:
        names = [row[0] for row in again.conn.execute("SELECT name FROM _thatch_migrations")]
        assert "m004_store_versions" in names and "m006_conflict_free_triggers" in names
        assert again.conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert "m009_fts" in names
        assert_index_in_step(again.conn)
