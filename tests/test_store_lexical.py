"""The lexical index and recall's fused ranking (docs/database.md §lexical-index, §ranking)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from tests.support.fts import assert_index_in_step
from thatch.frontend.store import backfill, lexical, schema
from thatch.frontend.store.lexical import Identifier, lexical_hits, query_items
from thatch.frontend.store.memory_store import Store

FILLER = (
    "The team met on Tuesday to talk about the quarterly roadmap, hiring plans and the "
    "office move. Most of the discussion was about priorities for the next release and how "
    "to split the work between the two squads. Someone suggested moving the retro to "
    "Thursdays so that more people can attend. "
)


def unit(seed: int, dim: int = 8) -> np.ndarray:
    vector = np.random.default_rng(seed).normal(size=dim).astype(np.float32)
    return vector / np.linalg.norm(vector)


@pytest.mark.parametrize(
    ("text", "identifiers", "words"),
    [
        ("where is _resolve_store", ['words: "_resolve_store"', 'parts: "resolve store"',
                                     'camel: "resolve store"'], []),
        ("THATCH_DB_PATH unset", ['words: "thatch_db_path"', 'parts: "thatch db path"',
                                  'camel: "t h a t c h d b p a t h"'], ["unset"]),
        ("MemoryStore class", ['words: "memorystore"', 'parts: "memory store"',
                               'camel: "memory store"'], ["class"]),
        ("see frontend/store/schema.py.", ['words: "frontend store schema py"',
                                           'parts: "frontend store schema py"',
                                           'camel: "frontend store schema py"'], ["see"]),
        ("ticket ERR-1234 and 42", ['words: "err 1234"', 'parts: "err 1234"',
                                    'camel: "e r r 1234"'], ["ticket", "42"]),
        ("how do I run the tests", [], ["run", "tests"]),
        ('"; DROP TABLE entries; --', [], ["drop", "table", "entries"]),
        ("", [], []),
    ],
)  # fmt: skip
def test_query_items_keep_identifiers_whole_and_split(
    text: str, identifiers: list[str], words: list[str]
) -> None:
    triples = [Identifier(*identifiers[i : i + 3]) for i in range(0, len(identifiers), 3)]
    assert query_items(text) == (triples, words)


@pytest.mark.parametrize(
    "text", ["getUserName", "getUserName()", "HTTPServer", "parse_HTTPResponse", "Ärger_überAll"]
)
def test_camel_split_in_python_is_the_triggers_sql(tmp_path: Path, text: str) -> None:
    """The query splits its names as column ``camel`` holds them (m017's SQL)."""
    conn = sqlite3.connect(tmp_path / "scratch.db")
    (in_sql,) = conn.execute(f"SELECT {lexical.camel_sql('?')}", (text,)).fetchone()
    conn.close()
    assert in_sql == lexical.camel_text(text)


def test_camel_case_names_are_found_by_their_words(tmp_path: Path) -> None:
    """Column ``camel`` (m017): a question's plain words, a part of a name and the name in
    another case find a memory that holds the name in CamelCase, and only that one."""
    with Store.open(tmp_path / "thatch.db") as store:
        store.remember("p", "a", "# a\n\nCall getUserName on the HTTPServer first.", unit(1), "m")
        store.remember("p", "b", "# b\n\nThe getusername endpoint is gone.", unit(2), "m")
        store.remember("p", "c", "# c\n\nNothing about it here at all.", unit(3), "m")
        assert lexical.has_camel(store.conn)
        for query in ["which user name call", "UserName", "the http server"]:
            assert [slug for _, slug in lexical_hits(store.conn, ["p"], query)][:1] == ["a"]
        assert list(lexical_hits(store.conn, ["p"], "user name")) == [("p", "a")]
        # The fused order: equal cosines, the lexical lift decides.
        query_vector = unit(1) + unit(2) + unit(3)
        found = store.search(["p"], query_vector, text="where do we read the user name")
        assert found[0].memory.slug == "a"


def test_earlier_release_writes_are_indexed_with_their_camel_case_split(
    tmp_path: Path,
) -> None:
    """The earlier release's exact statements (insert, upsert, delete) keep column
    ``camel`` in step: its triggers use built-in SQL only."""
    from tests.support import earlier_release as er

    path = tmp_path / "thatch.db"
    with Store.open(path) as store:  # the store's row, which entries reference
        store.remember("p", "seed", "# seed\n\nnothing", unit(1), "m")
    conn = sqlite3.connect(path)
    for pragma in er.PRAGMAS:
        conn.execute(pragma)
    row = ("ts-1", "p", "ts one", "Set maxRetryCount in the config.", er.fixed_blob(1), "m",
           None, None, 0, er.STAMP, er.STAMP)  # fmt: skip
    conn.execute(er.INSERT, row)
    conn.execute(er.INSERT, ("ts-2", "p", "ts two", "ReadTimeout hits", *row[4:]))
    conn.execute(er.UPSERT, (*row[:3], "Set maxRetryDelay in the config.", *row[4:], None))
    conn.execute(er.FORGET, ("ts-2", "p"))
    conn.commit()
    conn.close()
    with Store.open(path) as store:
        assert_index_in_step(store.conn)
        assert list(lexical_hits(store.conn, ["p"], "which delay")) == [("p", "ts-1")]
        assert lexical_hits(store.conn, ["p"], "count") == {}  # the upsert replaced it
        assert lexical_hits(store.conn, ["p"], "timeout") == {}  # deleted


def _without_m017(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        schema, "MIGRATIONS", [m for m in schema.MIGRATIONS if m[0] != "m017_fts_identifiers"]
    )


@pytest.mark.parametrize("m009_fill_pending", [False, True])
def test_m017_rebuilds_an_m009_index_with_the_camel_column(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, m009_fill_pending: bool
) -> None:
    """A file indexed by m009 alone (its fill done, or still pending) is indexed again by
    m017's backfill: every memory in step, m009's fill dropped, CamelCase found."""
    path = tmp_path / "thatch.db"
    _without_m017(monkeypatch)
    with Store.open(path) as store:
        for i in range(30):
            store.remember("p", f"m{i}", f"# m{i}\n\nvalue_{i} sets retryBudget{i}", unit(i), "m")
        assert not lexical.has_camel(store.conn)
        if m009_fill_pending:  # as if m009 had just run on these memories
            store.conn.execute(f"DELETE FROM {lexical.DOCS_TABLE}")
            store.conn.execute(
                f"INSERT INTO {lexical.FTS_TABLE} ({lexical.FTS_TABLE}) VALUES ('delete-all')"
            )
            backfill.schedule(store.conn, lexical.BACKFILL_009)
            store.conn.commit()
    monkeypatch.undo()
    with Store.open(path, fill_now=False) as store:
        assert backfill.pending(store.conn) == {lexical.BACKFILL}
        assert store._lexical_filling  # dense order until the fill ends
    with Store.open(path) as store:
        assert backfill.pending(store.conn) == set()
        assert_index_in_step(store.conn)
        assert lexical.has_camel(store.conn)
        assert list(lexical_hits(store.conn, ["p"], "budget7")) == [("p", "m7")]
        store.remember("p", "new", "# new\n\nAfter the rebuild: loadBalancer.", unit(99), "m")
        store.forget("p", "m3")
        assert_index_in_step(store.conn)
        assert list(lexical_hits(store.conn, ["p"], "load balancer")) == [("p", "new")]


def test_identifiers_are_found_whole_and_by_their_parts(tmp_path: Path) -> None:
    with Store.open(tmp_path / "thatch.db") as store:
        memories = {
            "env": "# env\n\nSet THATCH_DB_PATH to move the database file.",
            "resolver": "# resolver\n\n_resolve_store picks the project store.",
            "camel": "# camel\n\nMemoryStore wraps the SQLite connection.",
            "path": "# path\n\nMigrations live in frontend/store/schema.py today.",
            "ticket": "# ticket\n\nThe flaky test is tracked as ERR-1234.",
            "prose": "# prose\n\nThe store resolves paths of the database for memory.",
        }
        for i, (label, text) in enumerate(memories.items()):
            store.remember("p", label, text, unit(i), "m")
        assert_index_in_step(store.conn)

        def first(text: str) -> str:
            return next(iter(lexical_hits(store.conn, ["p"], text)))[1]

        assert first("THATCH_DB_PATH") == "env"
        assert first("what does thatch db path do") == "env"  # the parts of the name
        assert first("_resolve_store") == "resolver"
        assert first("memorystore") == "camel"
        assert first("schema.py") == "path"
        assert first("frontend/store/schema.py") == "path"
        assert first("err-1234") == "ticket"
        assert lexical_hits(store.conn, ["other"], "THATCH_DB_PATH") == {}
        assert lexical_hits(store.conn, ["p"], "zzz qqq") == {}
        assert lexical_hits(store.conn, ["p"], 'NEAR("x" AND) * ^ "') == {}  # not FTS5 syntax


def test_shown_score_stays_the_cosine_only_the_order_changes(tmp_path: Path) -> None:
    query = unit(1)
    near = (query + 0.3 * unit(2)).astype(np.float32)
    farther = (query + 0.6 * unit(3)).astype(np.float32)
    with Store.open(tmp_path / "thatch.db") as store:
        store.remember("p", "near", "# near\n\nabout deploys", near, "m")
        store.remember("p", "farther", "# farther\n\nset RETRY_BUDGET_MS for deploys", farther, "m")
        dense = store.search(["p"], query)
        fused = store.search(["p"], query, text="RETRY_BUDGET_MS")
        assert [m.memory.label for m in dense] == ["near", "farther"]
        assert [m.memory.label for m in fused] == ["farther", "near"]
        assert {m.memory.label: m.score for m in fused} == {m.memory.label: m.score for m in dense}
        # Archived memories stay out even with a strong exact match.
        store.remember(
            "p",
            "farther",
            "# farther\n\nset RETRY_BUDGET_MS",
            farther,
            "m",
            overwrite=True,
            archived=True,
        )
        assert [m.memory.label for m in store.search(["p"], query, text="RETRY_BUDGET_MS")] == [
            "near"
        ]


def test_index_is_kept_by_key_through_vacuum_and_rowid_reuse(tmp_path: Path) -> None:
    """VACUUM may renumber entries' rowids and a deleted rowid may be reused: the index is
    keyed by (store, slug), so both leave it right."""
    with Store.open(tmp_path / "thatch.db") as store:
        for i in range(5):
            store.remember("p", f"m{i}", f"# m{i}\n\ntoken_{i}", unit(i), "m")
        store.forget("p", "m4")
        store.forget("p", "m1")
        store.conn.execute("VACUUM")
        store.remember("p", "m9", "# m9\n\ntoken_9", unit(9), "m")
        assert_index_in_step(store.conn)
        assert [slug for _, slug in lexical_hits(store.conn, ["p"], "token_9")] == ["m9"]
        assert lexical_hits(store.conn, ["p"], "token_4") == {}


def test_without_fts5_the_migration_waits_and_recall_ranks_by_vectors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SQLite without FTS5 leaves m009 and m017 unrecorded (the next process with FTS5
    applies them)."""
    path = tmp_path / "thatch.db"
    monkeypatch.setattr(lexical, "fts5_available", lambda conn: False)
    with Store.open(path) as store:
        names = {row[0] for row in store.conn.execute("SELECT name FROM _thatch_migrations")}
        assert names == {name for name, _ in schema.MIGRATIONS} - schema.NEEDS_FTS5
        store.remember("p", "a", "# a\n\nTOKEN_A", unit(1), "m")
        assert [m.memory.label for m in store.search(["p"], unit(1), text="TOKEN_A")] == ["a"]
    monkeypatch.undo()
    with Store.open(path) as store:  # FTS5 again: the index is built from the rows
        assert_index_in_step(store.conn)
        assert list(lexical_hits(store.conn, ["p"], "TOKEN_A")) == [("p", "a")]


def test_exact_identifier_buried_in_a_long_memory_is_recalled_first(
    tmp_path: Path, minilm_server: object
) -> None:
    """Real MiniLM: the name a query asks for, deep in a long memory, ranks first."""
    from thatch.embedder.client.embedder_client import EmbedderClient
    from thatch.embedder.client.kind import Kind

    long_text = (
        "# Planning notes\n\n"
        + FILLER * 4
        + "Unrelated aside: the lookup lives in _resolve_store_for_worktree now. "
        + FILLER * 4
    )
    others = {
        "Store resolution": "# Store resolution\n\nHow thatch decides which memory store a "
        "project uses: the git remote, else the repository folder name.",
        "Worktrees": "# Worktrees\n\nLinked git worktrees share the main checkout's store.",
        "Resolving stores": "# Resolving stores\n\nThe resolver maps a directory to a store "
        "name and caches the answer per worktree.",
        "Database path": "# Database path\n\nTHATCH_DB_PATH overrides where the file lives.",
    }
    query = "where is _resolve_store_for_worktree"
    address = minilm_server.address  # type: ignore[attr-defined]
    with EmbedderClient(address, autostart=False) as client:
        texts = [long_text, *others.values()]
        vectors = client.embed(texts, Kind.PASSAGE, timeout=60).vectors
        query_vector = client.embed([query], Kind.QUERY, timeout=60).vectors[0]
    with Store.open(tmp_path / "thatch.db") as store:
        for label, text, vector in zip(["Planning notes", *others], texts, vectors, strict=True):
            store.remember("p", label, text, vector, "m")
        dense = [m.memory.label for m in store.search(["p"], query_vector)]
        print(
            [(m.memory.label, round(m.score, 3)) for m in store.search(["p"], query_vector)],
            lexical_hits(store.conn, ["p"], query),
        )
        fused = store.search(["p"], query_vector, text=query)
    assert dense[0] != "Planning notes"  # the dense model alone blurs the name away
    assert fused[0].memory.label == "Planning notes"


def test_hooks_leave_the_index_build_to_a_later_open(tmp_path: Path) -> None:
    """``build_indexes=False`` (hooks) never builds the index; the next plain open does."""
    path = tmp_path / "thatch.db"
    with Store.open(path, build_indexes=False) as store:
        store.remember("p", "a", "# a\n\nTOKEN_A", unit(1), "m")
        names = {row[0] for row in store.conn.execute("SELECT name FROM _thatch_migrations")}
        assert names == {name for name, _ in schema.MIGRATIONS} - schema.BUILDS_INDEXES
        assert not lexical.index_present(store.conn)
        assert [m.memory.label for m in store.search(["p"], unit(1), text="TOKEN_A")] == ["a"]
    before = path.read_bytes()  # closing checkpointed the WAL into it
    with Store.open(path, build_indexes=False) as store:  # only m009, m017 missing: no write
        assert store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
    assert path.read_bytes() == before
    with Store.open(path) as store:
        assert_index_in_step(store.conn)
        assert list(lexical_hits(store.conn, ["p"], "TOKEN_A")) == [("p", "a")]


def test_a_hooks_open_before_m017_ranks_lexically_without_the_camel_column(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hook's open (``build_indexes=False``) leaves m017 to a later open: its searches
    use the two columns m009 made, and still rank by them."""
    path = tmp_path / "thatch.db"
    _without_m017(monkeypatch)
    with Store.open(path) as store:
        store.remember("p", "a", "# a\n\nSet retry_budget_ms to 300.", unit(1), "m")
        store.remember("p", "b", "# b\n\nThe cache is cold at start.", unit(2), "m")
    monkeypatch.undo()
    with Store.open(path, build_indexes=False) as store:
        assert not lexical.has_camel(store.conn)
        assert "m017_fts_identifiers" not in {
            row[0] for row in store.conn.execute("SELECT name FROM _thatch_migrations")
        }
        query = unit(1) + unit(2)
        assert store.search(["p"], query, text="retry budget")[0].memory.slug == "a"
        assert store.search(["p"], query, text="cold cache")[0].memory.slug == "b"
