"""Schema, connection settings, migrations and the transaction helper (docs/database.md
§file-and-connection, §tables)."""

from __future__ import annotations

import os
import platform
import re
import sqlite3
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.fts import assert_index_in_step
from thatch.common.environment import default_db_path
from thatch.frontend.errors import BUSY_MESSAGE, DatabaseBusyError, DatabaseOpenError
from thatch.frontend.store.backfill import BACKFILLS_TABLE
from thatch.frontend.store.db import atomic, connect
from thatch.frontend.store.lexical import DOCS_TABLE, FTS_TABLE
from thatch.frontend.store.memory_store import Store
from thatch.frontend.store.migrations.branches import (
    BRANCH_EVENTS_TABLE,
    BRANCH_REFS_TABLE,
    BRANCH_RENAMES_TABLE,
)
from thatch.frontend.store.schema import (
    ANCHORS_TABLE,
    CHANGES_TABLE,
    CHAT_BINDING_TABLES,
    CHAT_REMOTE_TABLES,
    CHAT_TABLES,
    DUP_PAIRS_TABLE,
    DUP_SCANNED_TABLE,
    DUP_UNCHECKED_TABLE,
    GONE_CHECKOUTS_TABLE,
    LINKS_TABLE,
    MIGRATIONS,
    MIGRATIONS_TABLE,
    TEAM_TABLES,
    VERSIONS_TABLE,
)

# (name, type, notnull, default, pk) per column, exactly as docs/database.md §tables declares them.
EXPECTED: dict[str, list[tuple[str, str, int, str | None, int]]] = {
    "stores": [("name", "TEXT", 0, None, 1)],
    "entries": [
        ("slug", "TEXT", 1, None, 1),
        ("store", "TEXT", 1, None, 2),
        ("label", "TEXT", 1, None, 0),
        ("content", "TEXT", 1, None, 0),
        ("embedding", "BLOB", 0, None, 0),
        ("model", "TEXT", 0, None, 0),
        ("branch", "TEXT", 0, None, 0),
        ("confidence", "INTEGER", 0, None, 0),
        ("archived", "INTEGER", 1, "0", 0),
        ("created_at", "TEXT", 1, None, 0),
        ("updated_at", "TEXT", 1, None, 0),
        ("recall_count", "INTEGER", 1, "0", 0),
        ("last_recalled_at", "TEXT", 0, None, 0),
    ],
    "dedup_pairs": [
        ("store", "TEXT", 1, None, 1),
        ("slug_a", "TEXT", 1, None, 2),
        ("slug_b", "TEXT", 1, None, 3),
        ("status", "TEXT", 1, None, 0),
        ("checked_at", "TEXT", 1, None, 0),
    ],
    "prediction_matchers": [
        ("id", "TEXT", 0, None, 1),
        ("store", "TEXT", 1, None, 0),
        ("description", "TEXT", 1, None, 0),
        ("embedding", "BLOB", 0, None, 0),
        ("model", "TEXT", 0, None, 0),
        ("created_at", "TEXT", 1, None, 0),
        ("updated_at", "TEXT", 1, None, 0),
    ],
    "predictions": [
        ("id", "TEXT", 0, None, 1),
        ("store", "TEXT", 1, None, 0),
        ("statement", "TEXT", 1, None, 0),
        ("rationale", "TEXT", 0, None, 0),
        ("embedding", "BLOB", 0, None, 0),
        ("model", "TEXT", 0, None, 0),
        ("confidence", "REAL", 1, "0.5", 0),
        ("confirm_count", "REAL", 1, "0", 0),
        ("disconfirm_count", "REAL", 1, "0", 0),
        ("created_at", "TEXT", 1, None, 0),
        ("updated_at", "TEXT", 1, None, 0),
    ],
    "prediction_edges": [
        ("matcher_id", "TEXT", 1, None, 1),
        ("prediction_id", "TEXT", 1, None, 2),
        ("weight", "REAL", 1, "1.0", 0),
        ("created_at", "TEXT", 1, None, 0),
    ],
    "prediction_provenance": [
        ("id", "TEXT", 0, None, 1),
        ("prediction_id", "TEXT", 1, None, 0),
        ("signal", "TEXT", 1, None, 0),
        ("detail", "TEXT", 0, None, 0),
        ("created_at", "TEXT", 1, None, 0),
    ],
    "chat_sessions": [
        ("session_id", "TEXT", 0, None, 1),
        ("name", "TEXT", 1, None, 0),
        ("topic", "TEXT", 0, None, 0),
        ("project", "TEXT", 0, None, 0),
        ("host_kind", "TEXT", 1, "'opencode'", 0),
        ("registered_at", "TEXT", 1, None, 0),
        ("last_seen", "TEXT", 1, None, 0),
        ("auto", "INTEGER", 1, "0", 0),
        ("worktree", "TEXT", 1, "''", 0),
    ],
    "chat_messages": [
        ("id", "INTEGER", 0, None, 1),
        ("from_session", "TEXT", 1, None, 0),
        ("to_session", "TEXT", 1, None, 0),
        ("body", "TEXT", 1, None, 0),
        ("created_at", "TEXT", 1, None, 0),
        ("delivered_at", "TEXT", 0, None, 0),
        ("read_at", "TEXT", 0, None, 0),
        ("via_broadcast", "INTEGER", 1, "0", 0),
    ],
    "repo_paths": [
        ("worktree_path", "TEXT", 0, None, 1),
        ("main_path", "TEXT", 1, None, 0),
        ("repo_slug", "TEXT", 1, None, 0),
        ("resolved_at", "INTEGER", 1, None, 0),
    ],
}
EXPECTED["behavior_matchers"] = EXPECTED["prediction_matchers"]
EXPECTED["behaviors"] = [
    (row[0].replace("prediction", "behavior"), *row[1:]) for row in EXPECTED["predictions"]
]
EXPECTED["behavior_edges"] = [
    (row[0].replace("prediction", "behavior"), *row[1:]) for row in EXPECTED["prediction_edges"]
]
EXPECTED["behavior_provenance"] = [
    (row[0].replace("prediction", "behavior"), *row[1:])
    for row in EXPECTED["prediction_provenance"]
]

TABLE_ORDER = [
    "stores",
    "entries",
    "dedup_pairs",
    "prediction_matchers",
    "predictions",
    "prediction_edges",
    "prediction_provenance",
    "behavior_matchers",
    "behaviors",
    "behavior_edges",
    "behavior_provenance",
    "chat_sessions",
    "chat_messages",
    "repo_paths",
]

# (table, from column, to table, to column, on_delete)
EXPECTED_FOREIGN_KEYS = {
    ("entries", "store", "stores", "name", "NO ACTION"),
    ("prediction_matchers", "store", "stores", "name", "NO ACTION"),
    ("predictions", "store", "stores", "name", "NO ACTION"),
    ("prediction_edges", "matcher_id", "prediction_matchers", "id", "CASCADE"),
    ("prediction_edges", "prediction_id", "predictions", "id", "CASCADE"),
    ("prediction_provenance", "prediction_id", "predictions", "id", "CASCADE"),
    ("behavior_matchers", "store", "stores", "name", "NO ACTION"),
    ("behaviors", "store", "stores", "name", "NO ACTION"),
    ("behavior_edges", "matcher_id", "behavior_matchers", "id", "CASCADE"),
    ("behavior_edges", "behavior_id", "behaviors", "id", "CASCADE"),
    ("behavior_provenance", "behavior_id", "behaviors", "id", "CASCADE"),
}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "thatch.db") as opened:
        yield opened


def test_fresh_file_has_the_14_tables_exactly(store: Store) -> None:
    """Every column of every table matches the spec: name, type, notnull, default, pk."""
    for table, columns in EXPECTED.items():
        info = [tuple(row[1:]) for row in store.conn.execute(f"PRAGMA table_info({table})")]
        assert info == columns, table


def test_tables_are_created_in_spec_order(store: Store) -> None:
    """The 14 tables appear in sqlite_master in the order docs/database.md §tables lists them."""
    names = [
        row[0] for row in store.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    ]
    assert [name for name in names if name in EXPECTED] == TABLE_ORDER
    extra = {
        MIGRATIONS_TABLE,
        VERSIONS_TABLE,
        CHANGES_TABLE,
        "sqlite_sequence",
        *CHAT_TABLES,
        *CHAT_BINDING_TABLES,
        *CHAT_REMOTE_TABLES,
    }
    extra.add("thatch_defaults_off")
    extra.add(BACKFILLS_TABLE)
    extra |= {DUP_PAIRS_TABLE, DUP_SCANNED_TABLE, DUP_UNCHECKED_TABLE, ANCHORS_TABLE}
    extra |= {GONE_CHECKOUTS_TABLE, LINKS_TABLE}
    extra |= {BRANCH_EVENTS_TABLE, BRANCH_REFS_TABLE, BRANCH_RENAMES_TABLE}
    extra |= set(TEAM_TABLES)
    fts = {
        DOCS_TABLE,
        FTS_TABLE,
        *(f"{FTS_TABLE}_{s}" for s in ("data", "idx", "docsize", "config")),
    }
    assert set(names) - set(EXPECTED) <= extra | fts


def test_foreign_keys_and_nocase_are_declared(store: Store) -> None:
    """References, ON DELETE CASCADE and chat_sessions.name NOCASE UNIQUE are as specified."""
    found = set()
    for table in EXPECTED:
        for row in store.conn.execute(f"PRAGMA foreign_key_list({table})"):
            found.add((table, row[3], row[2], row[4], row[6]))
    assert found == EXPECTED_FOREIGN_KEYS
    store.conn.execute(
        "INSERT INTO chat_sessions (session_id, name, registered_at, last_seen) "
        "VALUES ('s1', 'Alice', 't', 't')"
    )
    with pytest.raises(sqlite3.IntegrityError):
        store.conn.execute(
            "INSERT INTO chat_sessions (session_id, name, registered_at, last_seen) "
            "VALUES ('s2', 'ALICE', 't', 't')"
        )


def test_global_store_row_exists(store: Store) -> None:
    """Schema init inserts the 'global' store."""
    assert store.conn.execute("SELECT name FROM stores").fetchall() == [("global",)]


def test_connection_pragmas(store: Store, tmp_path: Path) -> None:
    """WAL (the -wal file exists), busy_timeout 5000, foreign_keys 1, autocommit mode."""
    assert store.conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert store.conn.execute("PRAGMA busy_timeout").fetchone() == (5000,)
    assert store.conn.execute("PRAGMA foreign_keys").fetchone() == (1,)
    assert store.conn.isolation_level is None
    assert (tmp_path / "thatch.db-wal").exists()


def test_second_init_changes_nothing(tmp_path: Path) -> None:
    """Opening an initialised file again writes nothing at all."""
    path = tmp_path / "thatch.db"
    Store.open(path).close()
    before = path.read_bytes()
    with Store.open(path) as again:
        assert again.conn.total_changes == 0
        dump = list(again.conn.iterdump())
    assert path.read_bytes() == before
    with Store.open(path) as third:
        assert list(third.conn.iterdump()) == dump


def test_migrations_are_recorded_by_name_in_order(store: Store) -> None:
    """Each named migration is recorded once in _thatch_migrations, in order."""
    rows = store.conn.execute(f"SELECT name FROM {MIGRATIONS_TABLE} ORDER BY rowid").fetchall()
    assert [row[0] for row in rows] == [name for name, _ in MIGRATIONS]


def test_legacy_entries_gain_columns_with_defaults(tmp_path: Path) -> None:
    """entries without recall_count/last_recalled_at/archived gain (0, NULL, 0), rows intact."""
    path = tmp_path / "legacy.db"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE stores (name TEXT PRIMARY KEY);
        CREATE TABLE entries (slug TEXT NOT NULL, store TEXT NOT NULL REFERENCES stores(name),
          label TEXT NOT NULL, content TEXT NOT NULL, embedding BLOB, model TEXT, branch TEXT,
          confidence INTEGER, created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
          PRIMARY KEY (slug, store));
        INSERT INTO stores VALUES ('o/r');
        INSERT INTO entries VALUES ('a', 'o/r', 'A', '# A\n\nx', X'0000803f', 'm', 'dev', 7,
          '2024-01-01T00:00:00.000Z', '2024-01-02T00:00:00.000Z');
        """
    )
    conn.close()
    with Store.open(path) as store:
        row = store.conn.execute(
            "SELECT slug, store, label, content, embedding, model, branch, confidence, "
            "created_at, updated_at, recall_count, last_recalled_at, archived FROM entries"
        ).fetchone()
        assert row == (
            "a", "o/r", "A", "# A\n\nx", b"\x00\x00\x80\x3f", "m", "dev", 7,
            "2024-01-01T00:00:00.000Z", "2024-01-02T00:00:00.000Z", 0, None, 0,
        )  # fmt: skip
        info = [tuple(r[1:]) for r in store.conn.execute("PRAGMA table_info(entries)")]
        assert sorted(info) == sorted(EXPECTED["entries"])


def test_chat_sessions_without_nocase_are_rebuilt(tmp_path: Path) -> None:
    """First row per case-insensitive name wins, by registered_at then rowid; columns added."""
    path = tmp_path / "legacy.db"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE chat_sessions (session_id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE,
          registered_at TEXT NOT NULL, last_seen TEXT NOT NULL);
        INSERT INTO chat_sessions VALUES ('s1', 'Alice', '2024-01-02T00:00:00.000Z', 'x');
        INSERT INTO chat_sessions VALUES ('s2', 'alice', '2024-01-01T00:00:00.000Z', 'y');
        INSERT INTO chat_sessions VALUES ('s3', 'ALICE', '2024-01-01T00:00:00.000Z', 'z');
        INSERT INTO chat_sessions VALUES ('s4', 'bob', '2024-01-03T00:00:00.000Z', 'w');
        CREATE TABLE chat_messages (id INTEGER PRIMARY KEY AUTOINCREMENT,
          from_session TEXT NOT NULL, to_session TEXT NOT NULL, body TEXT NOT NULL,
          created_at TEXT NOT NULL);
        INSERT INTO chat_messages (from_session, to_session, body, created_at)
          VALUES ('s1', 's4', 'hi', 't');
        """
    )
    conn.close()
    with Store.open(path) as store:
        rows = store.conn.execute(
            "SELECT session_id, name, last_seen, topic, project, host_kind, auto, worktree "
            "FROM chat_sessions ORDER BY session_id"
        ).fetchall()
        assert rows == [
            ("s2", "alice", "y", None, None, "opencode", 0, ""),
            ("s4", "bob", "w", None, None, "opencode", 0, ""),
        ]
        for table in ("chat_sessions", "chat_messages"):
            info = [tuple(r[1:]) for r in store.conn.execute(f"PRAGMA table_info({table})")]
            assert sorted(info) == sorted(EXPECTED[table]), table
        assert store.conn.execute(
            "SELECT body, delivered_at, read_at, via_broadcast FROM chat_messages"
        ).fetchall() == [("hi", None, None, 0)]
        with pytest.raises(sqlite3.IntegrityError):
            store.conn.execute(
                "INSERT INTO chat_sessions (session_id, name, registered_at, last_seen) "
                "VALUES ('s5', 'BOB', 't', 't')"
            )


def test_parent_directory_is_created_0700(tmp_path: Path) -> None:
    """A missing parent directory is created with mode 0700."""
    path = tmp_path / "deep" / "thatch" / "thatch.db"
    connect(path).close()
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700


@pytest.mark.parametrize("kind", ["parent_is_file", "is_directory", "not_a_database"])
def test_unopenable_database_gives_one_line_error(tmp_path: Path, kind: str) -> None:
    """`cannot open database at <path>: <reason>` for every way a path can be unusable."""
    if kind == "parent_is_file":
        (tmp_path / "file").write_text("x")
        path = tmp_path / "file" / "thatch.db"
    elif kind == "is_directory":
        path = tmp_path / "dir.db"
        path.mkdir()
    else:
        path = tmp_path / "junk.db"
        path.write_bytes(b"this is not sqlite at all, " * 100)
    with pytest.raises(DatabaseOpenError) as caught:
        Store.open(path)
    message = str(caught.value)
    assert message.startswith(f"cannot open database at {path}: ")
    assert "\n" not in message and len(message) > len(f"cannot open database at {path}: ")


def test_default_db_path_follows_env(tmp_path: Path) -> None:
    """THATCH_DB_PATH wins; else $XDG_CONFIG_HOME/thatch/thatch.db; else ~/.config."""
    assert default_db_path({"THATCH_DB_PATH": "/x/y.db"}) == Path("/x/y.db")
    assert default_db_path({"XDG_CONFIG_HOME": str(tmp_path)}) == tmp_path / "thatch/thatch.db"
    assert default_db_path({"HOME": "/h"}) == Path("/h/.config/thatch/thatch.db")


def test_atomic_nests_with_savepoints(store: Store) -> None:
    """An inner failure rolls back only the savepoint; an outer one rolls back everything."""
    conn = store.conn
    with atomic(conn):
        conn.execute("INSERT INTO stores VALUES ('outer')")
        with pytest.raises(RuntimeError), atomic(conn):
            conn.execute("INSERT INTO stores VALUES ('inner')")
            raise RuntimeError("inner")
    assert not conn.in_transaction
    with pytest.raises(KeyboardInterrupt), atomic(conn):
        conn.execute("INSERT INTO stores VALUES ('lost')")
        raise KeyboardInterrupt
    names = {row[0] for row in conn.execute("SELECT name FROM stores")}
    assert names == {"global", "outer"}


def test_busy_write_lock_gives_busy_error(tmp_path: Path, store: Store) -> None:
    """A write lock held elsewhere past the timeout raises the spec's busy message."""
    holder = connect(tmp_path / "thatch.db")
    try:
        holder.execute("BEGIN IMMEDIATE")
        store.conn.execute("PRAGMA busy_timeout = 20")  # keep the test fast
        with pytest.raises(DatabaseBusyError) as caught:
            store.remember("global", "x", "# x", None, None)
        assert str(caught.value) == BUSY_MESSAGE
        holder.execute("ROLLBACK")
    finally:
        holder.close()
    assert not store.conn.in_transaction
    assert store.list("global") == []


def test_store_versions_move_on_changes_but_not_on_recall_stamps(store: Store) -> None:
    """The per-store counter the cache keys on: writes move it, telemetry does not."""

    def version(name: str) -> int | None:
        row = store.conn.execute(
            f"SELECT version FROM {VERSIONS_TABLE} WHERE store = ?", (name,)
        ).fetchone()
        return None if row is None else int(row[0])

    vector = [1.0, 0.0]
    store.remember("p", "a", "# a", vector, "m")
    first = version("p")
    assert first is not None and version("q") is None
    store.recall(["p"], vector)
    assert version("p") == first
    store.remember("p", "a", "# a\n\nmore", vector, "m", overwrite=True)
    store.forget("p", "a")
    assert version("p") == (first or 0) + 2
    store.remember("q", "b", "# b", None, None)
    [pending] = store.pending_memories()
    store.fill_embedding(pending, vector, "m")
    assert version("q") == 2 and version("p") == (first or 0) + 2


def test_pending_lookups_use_the_partial_index(store: Store) -> None:
    """Finding pending rows reads an index of pending rows, not the whole table or store
    (the UI's order indexes, m022, tempted SQLite's planner into reading the store)."""
    statements: list[str] = []
    store.conn.set_trace_callback(statements.append)
    store.pending_memories(store="p")
    store.pending_memories()
    store.pending_count("p")
    store.pending_count_in(["p", "q"])
    # Counted up to a cap (the session start, the UI) or asked whether any (every write).
    store.pending_count("p", up_to=3)
    store.pending_count_in(["p", "q"], up_to=3)
    store.pending_count(up_to=0)
    store.conn.set_trace_callback(None)
    for sql in statements:
        if "FROM entries" not in sql:
            continue
        plan = store.conn.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall()
        assert any("thatch_entries_pending" in str(step) for step in plan), (sql, plan)
    assert sum("FROM entries" in sql for sql in statements) == 7, statements


def test_a_stores_pending_lookups_search_its_own_index(store: Store) -> None:
    """A store's pending count (every session start, every recall whose scope leaves
    global out) and its oldest pending memories search m030's index of that store's
    pending rows; through m005's, which leads with updated_at, they stepped over every
    other store's backlog. The oldest pending memories of every store keep m005's."""
    store.remember("p", "a", "# a", None, None)
    statements: list[str] = []
    store.conn.set_trace_callback(statements.append)
    store.pending_memories(store="p")
    store.pending_count("p")
    store.pending_count("p", up_to=3)
    store.pending_count_in(["p", "q"])
    store.pending_count_in(["p"], up_to=3)
    store.conn.set_trace_callback(None)
    asked = [sql for sql in statements if "FROM entries" in sql]
    assert len(asked) == 5, statements
    for sql in asked:
        plan = " ".join(row[3] for row in store.conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
        assert "INDEX thatch_entries_pending_store (store=?)" in plan, (sql, plan)
    statements.clear()
    store.conn.set_trace_callback(statements.append)
    store.pending_memories()
    store.conn.set_trace_callback(None)
    (every,) = [sql for sql in statements if "FROM entries" in sql]
    plan = " ".join(row[3] for row in store.conn.execute(f"EXPLAIN QUERY PLAN {every}"))
    assert re.search(r"INDEX thatch_entries_pending\b", plan), plan


def test_a_stores_pending_lookups_step_over_no_other_stores_backlog(store: Store) -> None:
    """The work of a store's pending lookups, in SQLite's instructions, is the same however
    many of global's memories wait for an embedding (7-17 ms for a store with none
    beside 100k pending in global, at every session start, capped or not)."""
    store.remember("p", "a", "# a", None, None)

    def global_pending(first: int, count: int) -> None:
        rows = [(f"g{i}", f"2024-01-01T00:00:{i % 60:02d}.000Z") for i in range(count)]
        with atomic(store.conn):
            store.conn.executemany(
                "INSERT INTO entries (slug, store, label, content, created_at, updated_at) "
                "VALUES (?1, 'global', ?1, '# g', '2024-01-01T00:00:00.000Z', ?2)",
                [(f"{slug}-{first}", stamp) for slug, stamp in rows],
            )

    def steps(call: Callable[[], object]) -> int:
        call()  # prepared first: SQLite 3.51 counts some of the preparing too (3.40 not)
        ticks = 0

        def tick() -> int:
            nonlocal ticks
            ticks += 1
            return 0

        store.conn.set_progress_handler(tick, 1)
        try:
            call()
        finally:
            store.conn.set_progress_handler(None, 1)
        return ticks

    lookups: list[Callable[[], object]] = [
        lambda: store.pending_count("p"),
        lambda: store.pending_count("p", up_to=10),
        lambda: store.pending_count("none", up_to=10),
        lambda: store.pending_count_in(["p", "none"], up_to=10),
        lambda: store.pending_memories(store="p"),
    ]
    global_pending(0, 10)
    few = [steps(lookup) for lookup in lookups]
    global_pending(10, 400)
    assert store.pending_count("global") == 410
    assert [steps(lookup) for lookup in lookups] == few
    assert [m.slug for m in store.pending_memories(store="p")] == ["a"]


def test_the_rename_pass_finds_staged_moves_through_their_partial_index(store: Store) -> None:
    """A pass that finds no rename asks whether the checkout holds a staged move to undo:
    an index of those moves (m026) answers, not a read of every anchor at its HEAD (45 ms
    at 50k anchors, each pass)."""
    statements: list[str] = []
    store.conn.set_trace_callback(statements.append)
    assert store.move_anchors("/repo", "a" * 40, {}, []) == 0
    store.conn.set_trace_callback(None)
    asked = [sql for sql in statements if "base_path IS NOT NULL" in sql]
    assert len(asked) == 1, statements
    plan = store.conn.execute(f"EXPLAIN QUERY PLAN {asked[0]}").fetchall()
    assert any("thatch_anchors_staged" in str(step) for step in plan), plan


def test_the_chat_prune_reads_refused_mail_through_their_partial_indexes(store: Store) -> None:
    """The daily chat prune finds the refused mail to delete in the indexes of the refused
    rows (m029's of those told, m027's of those untold), never reading the chat outbox,
    which holds the mail waiting for the hub, bodies and all (48-109 ms a step at 100k waiting
    mails, when one delete read every row)."""
    store.conn.executemany(
        "INSERT INTO chat_outbox (message_id, team, to_peer, from_session, body, queued_at, "
        "refused, told_at) VALUES (?, 'A', 7, 'mcp_000000000000', 'b', 't', ?, ?)",
        [(1, None, None), (2, "gone", None), (3, "gone", "2026-01-01T00:00:00.000Z")],
    )
    statements: list[str] = []
    store.conn.set_trace_callback(statements.append)
    assert store.chat().prune()
    store.conn.set_trace_callback(None)
    asked = [sql for sql in statements if "FROM chat_outbox" in sql]
    assert len(asked) == 2, statements
    used: set[str] = set()
    for sql in asked:
        plan = [row[3] for row in store.conn.execute(f"EXPLAIN QUERY PLAN {sql}")]
        assert not [step for step in plan if step.startswith("SCAN") and "INDEX" not in step]
        used.update(re.findall(r"INDEX (thatch_chat_outbox_\w+)", " ".join(plan)))
    assert used == {"thatch_chat_outbox_told", "thatch_chat_outbox_untold"}, asked
    assert [row[0] for row in store.conn.execute("SELECT message_id FROM chat_outbox")] == [1]


ENTRY_COLUMNS = "slug, store, label, content, created_at, updated_at"
OUTER_POLICIES = [
    f"INSERT INTO entries ({ENTRY_COLUMNS}) VALUES (?, 'p', ?, ?, 't', 't')",
    f"INSERT OR ABORT INTO entries ({ENTRY_COLUMNS}) VALUES (?, 'p', ?, ?, 't', 't')",
    f"INSERT OR FAIL INTO entries ({ENTRY_COLUMNS}) VALUES (?, 'p', ?, ?, 't', 't')",
    f"INSERT OR ROLLBACK INTO entries ({ENTRY_COLUMNS}) VALUES (?, 'p', ?, ?, 't', 't')",
    f"INSERT OR IGNORE INTO entries ({ENTRY_COLUMNS}) VALUES (?, 'p', ?, ?, 't', 't')",
    f"INSERT OR REPLACE INTO entries ({ENTRY_COLUMNS}) VALUES (?, 'p', ?, ?, 't', 't')",
    f"INSERT INTO entries ({ENTRY_COLUMNS}) VALUES (?, 'p', ?, ?, 't', 't') "
    "ON CONFLICT (slug, store) DO UPDATE SET content = excluded.content",
]


@pytest.mark.parametrize("statement", OUTER_POLICIES)
def test_entry_triggers_never_conflict_under_any_outer_policy(store: Store, statement: str) -> None:
    """Counter rows already exist; every outer policy still writes and moves the counter.

    (m004's ``INSERT OR IGNORE`` aborted under ABORT/FAIL/ROLLBACK and upserts, and under
    an outer REPLACE it replaced the counter row, resetting it to a value seen before.)
    """

    def version() -> int:
        return int(
            store.conn.execute(
                f"SELECT version FROM {VERSIONS_TABLE} WHERE store = 'p'"
            ).fetchone()[0]
        )

    store.remember("p", "a", "# a", [1.0, 0.0], "m")
    store.remember("p", "b", "# b", [0.0, 1.0], "m")
    before = version()
    store.conn.execute(statement, ("c", "c", "# c"))  # a new row
    assert version() == before + 1
    if any(word in statement for word in ("IGNORE", "REPLACE", "ON CONFLICT")):  # existing row
        store.conn.execute(statement, ("a", "a", "# a again"))
        ignored = "IGNORE" in statement  # nothing written, nothing to count
        assert version() == before + 1 if ignored else version() > before + 1
    store.conn.execute("UPDATE OR REPLACE entries SET content = '# b2' WHERE slug = 'b'")
    store.conn.execute("UPDATE OR IGNORE entries SET content = '# b3' WHERE slug = 'b'")
    assert version() > before + 2
    assert store.show("p", "c") is not None
    assert_index_in_step(store.conn)


def test_upgrade_replaces_m004_triggers_and_keeps_m004_recorded(tmp_path: Path) -> None:
    """A file left by the previous thatch (m001–m005) gets m006; m004 stays recorded."""
    path = tmp_path / "thatch.db"
    conn = connect(path)
    with atomic(conn):
        conn.execute(f"CREATE TABLE {MIGRATIONS_TABLE} (name TEXT PRIMARY KEY, applied_at TEXT)")
        for name, migrate in MIGRATIONS[:5]:
            migrate(conn)
            conn.execute(f"INSERT INTO {MIGRATIONS_TABLE} VALUES (?, 't')", (name,))
    old = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
    assert any("OR IGNORE" in sql for (sql,) in old)
    conn.close()
    with Store.open(path) as store:
        names = [r[0] for r in store.conn.execute(f"SELECT name FROM {MIGRATIONS_TABLE}")]
        assert names == [name for name, _ in MIGRATIONS]
        triggers = store.conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name"
        ).fetchall()
        fresh = Store.open(tmp_path / "fresh.db")
        try:
            expected = fresh.conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name"
            ).fetchall()
        finally:
            fresh.close()
        assert triggers == expected
        assert not any("OR IGNORE" in sql for _, sql in triggers)


def test_loading_a_store_reads_only_its_usable_rows(store: Store) -> None:
    """A store's vectors come through an index of usable rows; pending lookups keep theirs."""
    from thatch.frontend.store.rows import MISSING, USABLE

    def plan(sql: str) -> str:
        return str(store.conn.execute(f"EXPLAIN QUERY PLAN {sql}", ("p",)).fetchall())

    load = f"SELECT slug, archived, branch, embedding FROM entries WHERE store = ? AND {USABLE}"
    assert "thatch_entries_usable" in plan(load)
    pending = f"SELECT count(*) FROM entries WHERE store IN (?) AND {MISSING}"
    assert "thatch_entries_pending" in plan(pending)


def test_chat_tables_are_added_by_m008(store: Store) -> None:
    """m008 adds chat.md §1's extra tables with exactly its columns."""
    columns = {
        table: [
            (row[1], row[2], row[3], row[5])
            for row in store.conn.execute(f"PRAGMA table_info({table})")
        ]
        for table in CHAT_TABLES
    }
    assert columns["chat_name_counters"] == [("base", "TEXT", 0, 1), ("next", "INTEGER", 1, 0)]
    assert columns["chat_leave_tombstones"] == [
        ("session_id", "TEXT", 0, 1),
        ("left_at", "TEXT", 1, 0),
    ]
    assert columns["chat_wakes"] == [("session_id", "TEXT", 1, 0), ("at", "TEXT", 1, 0)]
    assert "m008_chat_and_repo_paths" in [name for name, _ in MIGRATIONS]


def test_chat_binding_tables_and_provenance_indexes_are_added_by_m011(store: Store) -> None:
    """m011: a hash per identity's key, one random secret, provenance indexed per item."""
    conn = store.conn
    assert [(r[1], r[2], r[3], r[5]) for r in conn.execute("PRAGMA table_info(chat_keys)")] == [
        ("session_id", "TEXT", 0, 1),
        ("key_hash", "TEXT", 1, 0),
    ]
    (salt,) = conn.execute("SELECT salt FROM chat_secret").fetchone()
    assert len(salt) == 64 and int(salt, 16) >= 0
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("INSERT INTO chat_secret (id, salt) VALUES (2, 'x')")
    plan = " ".join(
        str(r[3])
        for r in conn.execute(
            "EXPLAIN QUERY PLAN SELECT rowid FROM prediction_provenance WHERE prediction_id = ? "
            "ORDER BY created_at DESC",
            ("x",),
        )
    )
    assert "thatch_prediction_provenance_item" in plan
    assert "m011_chat_binding" in [name for name, _ in MIGRATIONS]


def test_migrating_leaves_the_memory_map_setting_as_it_was(tmp_path: Path) -> None:
    """Migrations read through a memory map (index builds scan every row); the connection
    gets its own setting back for everything after them."""
    path = tmp_path / "thatch.db"
    raw = sqlite3.connect(path)
    (default,) = raw.execute("PRAGMA mmap_size").fetchone()
    raw.close()
    with Store.open(path) as store:
        assert store.conn.execute("PRAGMA mmap_size").fetchone() == (default,)


def test_ui_pages_read_a_page_not_the_store(store: Store) -> None:
    """Each order of the Memories page walks its own index (m022) and each count stops
    early: before, every page sorted the whole store (170 ms at 100k memories)."""
    from thatch.frontend.ui.queries import SORTS, newest_page

    index = {"newest": "created", "oldest": "created", "updated": "updated"}
    store.remember("p", "a", "# a\n\nx", None, None)
    for sort in SORTS:
        for archived in ("live", "all", "archived"):
            statements: list[str] = []
            store.conn.set_trace_callback(statements.append)
            newest_page(store, "p", branch=None, archived=archived, offset=0, limit=9, sort=sort)
            store.conn.set_trace_callback(None)
            count, page = [s for s in statements if "FROM entries" in s]
            plans = [
                [row[3] for row in store.conn.execute(f"EXPLAIN QUERY PLAN {sql}")]
                for sql in (count, page)
            ]
            assert "LIMIT" in count and all("SCAN entries" not in step for step in plans[0])
            wanted = "archived" if archived == "archived" else index.get(sort, sort)
            assert any(f"INDEX thatch_entries_{wanted} (store=?" in s for s in plans[1]), plans
            if archived != "archived":  # only the outer ORDER BY, over the page's rows
                assert sum("TEMP B-TREE" in step for step in plans[1]) == 1, plans
    # A branch's page reads the branch index, not the whole store in the page's order.
    statements = []
    store.conn.set_trace_callback(statements.append)
    newest_page(store, "p", branch="dev", archived="live", offset=0, limit=9)
    store.list_first("p", 9)  # memory_list's first labels: the label index
    store.conn.set_trace_callback(None)
    branch_page, listed = [s for s in statements if "FROM entries" in s and "ORDER BY" in s]
    for sql, name in [(branch_page, "branch"), (listed, "label")]:
        plan = [row[3] for row in store.conn.execute(f"EXPLAIN QUERY PLAN {sql}")]
        assert any(f"INDEX thatch_entries_{name} (store=?" in s for s in plan), plan


def insert_entries(store: Store, rows: list[tuple[object, ...]], *stores: str) -> None:
    """Raw rows (slug, store, label, content, branch, created_at[, archived]), updated when
    created, into ``stores`` made first: thousands at once, as the earlier release wrote."""
    archived = len(rows[0]) > 6
    with atomic(store.conn):
        for name in stores or ("p",):
            store.conn.execute("INSERT OR IGNORE INTO stores (name) VALUES (?)", (name,))
        store.conn.executemany(
            "INSERT INTO entries (slug, store, label, content, branch, created_at, updated_at"
            + (
                ", archived) VALUES (?, ?, ?, ?, ?, ?, ?6, ?)"
                if archived
                else ") VALUES (?, ?, ?, ?, ?, ?, ?6)"
            ),
            rows,
        )


def test_ui_counts_stop_past_their_cap_and_many_branches_are_no_list(store: Store) -> None:
    from thatch.frontend.ui.queries import (
        BRANCH_CHOICES,
        COUNTED_UP_TO,
        branch_choices,
        newest_page,
    )

    rows: list[tuple[object, ...]] = [
        (f"m{i:05d}", "p", f"m{i}", f"# m{i}\n\nx", f"b{i % (BRANCH_CHOICES + 1):03d}", "t")
        for i in range(COUNTED_UP_TO + 1)
    ]
    insert_entries(store, rows)
    page = newest_page(store, "p", branch=None, archived="live", offset=0, limit=100)
    assert (page.total, page.more, page.next_page, len(page.memories)) == (
        COUNTED_UP_TO,
        True,
        True,
        100,
    )
    last = newest_page(store, "p", branch=None, archived="all", offset=COUNTED_UP_TO, limit=100)
    assert (last.next_page, [m.slug for m in last.memories]) == (False, ["m00000"])
    assert branch_choices(store, "p") is None
    with atomic(store.conn):
        store.conn.execute("DELETE FROM entries WHERE branch = 'b200'")
    assert branch_choices(store, "p") == [f"b{i:03d}" for i in range(BRANCH_CHOICES)]


def test_a_branch_of_over_ten_thousand_walks_the_order_index(store: Store) -> None:
    """A branch holding most of a store is paged from the order's index when its page is
    among the order's first rows: sorting its 98,000 rows took 0.1-0.3 s a page. Where it
    is not (here the 300 newest are another branch's), or the branch is small, the page
    reads the branch index as before. Every page is the right one either way."""
    from thatch.frontend.ui.queries import COUNTED_UP_TO, newest_page

    def branch_of(i: int) -> str:
        return "new" if i >= COUNTED_UP_TO + 300 else "dev" if i % 500 == 7 else "main"

    rows: list[tuple[object, ...]] = [
        (f"m{i:05d}", "p", f"m{i}", "# m\n\nx", branch_of(i), f"{i:05d}", i % 50 == 0)
        for i in range(COUNTED_UP_TO + 600)
    ]
    insert_entries(store, rows)
    cases = [
        ("main", "oldest", "live", 30, True),
        ("main", "oldest", "all", 30, True),
        ("main", "newest", "live", 30, False),  # the store's newest 300 are "new"'s
        ("dev", "oldest", "live", 0, False),
    ]
    for branch, sort, archived, offset, walked in cases:
        mine = sorted(
            (r for r in rows if r[4] == branch and (archived == "all" or not r[6])),
            key=lambda r: (r[5], r[0]),
            reverse=sort == "newest",
        )
        statements: list[str] = []
        store.conn.set_trace_callback(statements.append)
        page = newest_page(
            store, "p", branch=branch, archived=archived, offset=offset, limit=20, sort=sort
        )
        store.conn.set_trace_callback(None)
        wanted = [r[0] for r in mine[offset : offset + 20]]
        assert [m.slug for m in page.memories] == wanted, (branch, sort)
        assert page.next_page
        assert any(re.search(r"rowid IN \(\d", s) for s in statements) == walked
        if not walked:
            (sql,) = [s for s in statements if "ORDER BY" in s and "branch = " in s]
            plan = [row[3] for row in store.conn.execute(f"EXPLAIN QUERY PLAN {sql}")]
            assert any("INDEX thatch_entries_branch (store=?" in s for s in plan), plan


def test_a_walked_page_is_one_snapshot(store: Store, tmp_path: Path) -> None:
    """The walk's rowids are fetched by a second statement: a writer deleting the newest
    row and inserting into another store in between reused its rowid, and the page showed
    that store's row."""
    from thatch.frontend.ui.queries import COUNTED_UP_TO, newest_page

    rows: list[tuple[object, ...]] = [
        (f"m{i:05d}", "p", f"m{i}", "# m\n\nx", "main", f"{i:05d}")
        for i in range(COUNTED_UP_TO + 5)
    ]
    insert_entries(store, rows, "p", "q")
    other = sqlite3.connect(tmp_path / "thatch.db", isolation_level=None)

    def between(sql: str) -> None:
        # The fetch of the walk's rowids (traced with its values) is about to run: a
        # writer comes in between.
        if re.search(r"WHERE rowid IN \(\d", sql):
            (newest,) = other.execute("SELECT max(rowid) FROM entries").fetchone()
            other.execute("DELETE FROM entries WHERE rowid = ?", (newest,))
            other.execute(
                "INSERT INTO entries (rowid, slug, store, label, content, branch, created_at, "
                "updated_at) VALUES (?, 'intruder', 'q', 'intruder', '# x', 'main', '9', '9')",
                (newest,),
            )

    store.conn.set_trace_callback(between)
    try:
        page = newest_page(store, "p", branch="main", archived="live", offset=0, limit=5)
    finally:
        store.conn.set_trace_callback(None)
        other.close()
    assert [m.slug for m in page.memories] == [r[0] for r in rows[::-1][:5]]


def test_the_hygiene_counts_read_an_index_not_the_table(store: Store) -> None:
    """Every session start counts stale and other-model memories: a scan of the table,
    0.36 s at 100k memories, until m022 gave each its index; counted up to a cap as the
    session start counts them, too."""
    store.remember("p", "a", "# a\n\nx", None, None)
    for count, index in [
        (lambda: store.stale_count("p"), "thatch_entries_stale"),
        (lambda: store.model_mismatch_count("p", "m"), "thatch_entries_models"),
        (lambda: store.stale_count("p", up_to=3), "thatch_entries_stale"),
        (lambda: store.model_mismatch_count("p", "m", up_to=3), "thatch_entries_models"),
    ]:
        statements: list[str] = []
        store.conn.set_trace_callback(statements.append)
        count()
        store.conn.set_trace_callback(None)
        (sql,) = [s for s in statements if "FROM entries" in s]
        plan = [row[3] for row in store.conn.execute(f"EXPLAIN QUERY PLAN {sql}")]
        assert any(f"INDEX {index} (store=?" in step for step in plan), plan


PLAN_TESTS = "read_a_page or pending_lookups or hygiene_counts or chat_prune_reads"
CURRENT_SQLITE = """import sys
import pysqlite3.dbapi2 as current
sys.modules["sqlite3"] = sys.modules["sqlite3.dbapi2"] = current
"""


@pytest.mark.skipif(
    not (sys.platform == "linux" and platform.machine() == "x86_64"),
    reason="pysqlite3-binary ships wheels for x86-64 Linux only",
)
def test_the_query_plans_hold_on_a_current_sqlite(tmp_path: Path) -> None:
    """Python's SQLite is 3.40 here; SQLite 3.46 and later drop `X IS NOT NULL` of a NOT
    NULL column from a query, and m022's indexes conditioned on it went unused: every
    Memories page sorted the whole store again. The plan tests, run on SQLite 3.51."""
    import subprocess

    (tmp_path / "sitecustomize.py").write_text(CURRENT_SQLITE)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
    }
    version = subprocess.run(
        [sys.executable, "-c", "import sqlite3; print(sqlite3.sqlite_version)"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert tuple(int(part) for part in version.split(".")) >= (3, 46), version
    # One process: the suite's own workers (-n 2) would each collect this file again.
    pytest_args = ["-q", "-p", "no:cacheprovider", "-n", "0", __file__, "-k", PLAN_TESTS]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *pytest_args],
        env=env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert run.returncode == 0 and "\n6 passed" in run.stdout, run.stdout[-3000:]
