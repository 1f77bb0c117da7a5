"""Memory operations of the Store (docs/database.md §value-formats, §queries) on real SQLite
files."""

from __future__ import annotations

import sqlite3
import struct
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from thatch.frontend.errors import InvalidInputError
from thatch.frontend.store.memory_store import Memory, RememberOutcome, Store
from thatch.frontend.store.vectors import cosine, decode, encode
from thatch.frontend.timefmt import format_timestamp, parse_timestamp

START = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


class StepClock:
    """A clock that only moves when told to."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture
def clock() -> StepClock:
    return StepClock()


@pytest.fixture
def store(tmp_path: Path, clock: StepClock) -> Iterator[Store]:
    with Store.open(tmp_path / "thatch.db", clock=clock) as opened:
        yield opened


def unit(*values: float) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def save(store: Store, label: str, vector: np.ndarray | None, name: str = "p", **kw: object):
    return store.remember(name, label, f"# {label}\n\nbody", vector, "m1", **kw)  # type: ignore[arg-type]


def bulk_insert(store: Store, name: str, vectors: np.ndarray) -> list[str]:
    """Rows m0000, m0001, ... written in one transaction (fast setup for big stores)."""
    slugs = [f"m{i:04d}" for i in range(len(vectors))]
    store.conn.execute("BEGIN")
    store.conn.execute("INSERT OR IGNORE INTO stores VALUES (?)", (name,))
    store.conn.executemany(
        "INSERT INTO entries (slug, store, label, content, embedding, model, created_at, "
        "updated_at) VALUES (?, ?, ?, '# x', ?, 'm', 't', 't')",
        [(slug, name, slug, encode(v)) for slug, v in zip(slugs, vectors, strict=True)],
    )
    store.conn.execute("COMMIT")
    return slugs


def test_timestamps_are_utc_milliseconds() -> None:
    """Format YYYY-MM-DDTHH:MM:SS.mmmZ in UTC, truncated to ms, and back."""
    local = datetime(2025, 3, 1, 13, 0, 0, 999999, tzinfo=UTC).astimezone()
    assert format_timestamp(local) == "2025-03-01T13:00:00.999Z"
    assert parse_timestamp("2025-03-01T13:00:00.999Z") == datetime(
        2025, 3, 1, 13, 0, 0, 999000, tzinfo=UTC
    )
    with pytest.raises(ValueError):
        format_timestamp(datetime(2025, 1, 1))
    with pytest.raises(ValueError):
        parse_timestamp("2025-03-01 13:00:00")


def test_blob_is_exactly_little_endian_float32_of_a_view() -> None:
    """A view into a larger buffer stores only its own 4×dim bytes."""
    backing = np.arange(10, dtype=np.float32)
    view = backing[2:5]
    blob = encode(view)
    assert blob == struct.pack("<3f", 2, 3, 4) and len(blob) == 12
    assert encode(backing[::3]) == struct.pack("<4f", 0, 3, 6, 9)
    assert encode(np.array([1.5, -2.0], dtype=">f4")) == struct.pack("<2f", 1.5, -2.0)
    assert decode(blob).tolist() == [2.0, 3.0, 4.0]  # type: ignore[union-attr]
    assert decode(b"\x00" * 7) is None and decode(b"") is None and decode(None) is None


def test_cosine_values() -> None:
    """cos = dot/(|a||b|) in float64, 0 for a zero vector."""
    assert cosine([1, 0], [0, 1]) == 0.0
    assert cosine([1, 1], [2, 2]) == pytest.approx(1.0, abs=1e-12)
    assert cosine([0, 0], [1, 2]) == 0.0


@pytest.mark.parametrize(
    "bad", [[], [[1.0, 2.0]], [1.0, float("nan")], [float("inf")], "abc", [[]]]
)
def test_malformed_vectors_are_refused_and_nothing_saved(store: Store, bad: object) -> None:
    """Empty, 2-D, non-finite or non-numeric vectors raise InvalidInputError; no row written."""
    with pytest.raises(InvalidInputError):
        store.remember("p", "x", "# x", bad, "m")
    with pytest.raises(InvalidInputError):
        store.search(["p"], bad)
    assert store.list("p") == []


def test_remember_saves_and_reports_exists(store: Store) -> None:
    """Plain insert saves; the same slug again is `exists` and changes nothing."""
    assert save(store, "Build & Test", unit(1, 0)) is RememberOutcome.SAVED
    assert save(store, "build test", unit(0, 1)) is RememberOutcome.EXISTS
    [memory] = store.list("p")
    assert (memory.slug, memory.label, memory.content) == (
        "build-test",
        "Build & Test",
        "# Build & Test\n\nbody",
    )
    assert (memory.dim, memory.model, memory.recall_count, memory.archived) == (2, "m1", 0, False)
    assert memory.created_at == memory.updated_at == "2025-03-01T12:00:00.123Z"


def test_pending_memory_stores_null_embedding_and_model(store: Store) -> None:
    """A None vector saves embedding NULL and model NULL, invisible to search."""
    assert save(store, "later", None) is RememberOutcome.SAVED
    memory = store.show("p", "later")
    assert memory is not None and memory.pending and memory.model is None
    row = store.conn.execute("SELECT embedding, model FROM entries").fetchone()
    assert row == (None, None)
    assert store.search(["p"], unit(1, 0)) == []


def test_overwrite_keeps_created_at_and_telemetry(store: Store, clock: StepClock) -> None:
    """Overwrite replaces text/vector/model/updated_at; created_at and telemetry stay."""
    save(store, "topic", unit(1, 0), branch="dev", confidence=4)
    store.recall(["p"], unit(1, 0))
    clock.advance(hours=1)
    outcome = store.remember("p", "Topic", "# Topic\n\nnew", unit(0, 1), "m2", overwrite=True)
    assert outcome is RememberOutcome.SAVED
    memory = store.show("p", "topic")
    assert memory is not None
    assert (memory.label, memory.content, memory.model) == ("Topic", "# Topic\n\nnew", "m2")
    assert memory.created_at == "2025-03-01T12:00:00.123Z"
    assert memory.updated_at == "2025-03-01T13:00:00.123Z"
    assert (memory.recall_count, memory.last_recalled_at) == (1, "2025-03-01T12:00:00.123Z")
    assert (memory.branch, memory.confidence, memory.archived) == ("dev", 4, False)
    blob = store.conn.execute("SELECT embedding FROM entries").fetchone()[0]
    assert blob == encode(unit(0, 1))


def test_overwrite_takes_given_branch_confidence_archived(store: Store) -> None:
    """Given values replace the old ones; omitted ones are kept."""
    save(store, "t", unit(1, 0), branch="dev", confidence=4)
    save(store, "t", unit(1, 0), overwrite=True, branch="main", confidence=9, archived=True)
    memory = store.show("p", "t")
    assert memory is not None
    assert (memory.branch, memory.confidence, memory.archived) == ("main", 9, True)


def test_archived_guard_blocks_accidental_unarchive(store: Store) -> None:
    """Overwriting an archived memory without `archived` writes nothing."""
    save(store, "old", unit(1, 0), archived=True)
    before = store.show("p", "old")
    outcome = store.remember("p", "old", "# old\n\nchanged", unit(0, 1), "m", overwrite=True)
    assert outcome is RememberOutcome.ARCHIVED_GUARD
    assert store.show("p", "old") == before
    assert save(store, "old", unit(0, 1), overwrite=True, archived=False) is RememberOutcome.SAVED
    memory = store.show("p", "old")
    assert memory is not None and not memory.archived


def test_overwrite_of_missing_label_creates_it(store: Store) -> None:
    """overwrite=True on a new label simply inserts it."""
    assert save(store, "fresh", unit(1, 0), overwrite=True) is RememberOutcome.SAVED
    assert [m.slug for m in store.list("p")] == ["fresh"]


def test_verdicts_cleared_by_overwrite_and_forget(store: Store) -> None:
    """A verdict hides its pair until either memory is overwritten or forgotten."""
    for label in ("a", "b", "c"):
        save(store, label, unit(1, 0.01))
    store.mark_checked("p", "b", "a", "supplement")
    store.mark_checked("p", "c", "a", "unrelated")
    store.mark_checked("p", "b", "c", "duplicate")
    store.mark_checked("other", "a", "b", "duplicate")
    assert store.find_duplicates("p") == []
    save(store, "a", unit(1, 0.02), overwrite=True)
    pairs = [(d.slug_a, d.slug_b) for d in store.find_duplicates("p")]
    assert sorted(pairs) == [("a", "b"), ("a", "c")]
    store.forget("p", "c")
    remaining = store.conn.execute("SELECT store, slug_a, slug_b FROM dedup_pairs").fetchall()
    assert sorted(remaining) == [("other", "a", "b")]


def test_mark_checked_sorts_slugs_and_validates_status(store: Store, clock: StepClock) -> None:
    """Slugs are stored sorted; INSERT OR REPLACE; unknown statuses are refused."""
    store.mark_checked("p", "zeta", "alpha", "duplicate")
    clock.advance(seconds=5)
    store.mark_checked("p", "alpha", "zeta", "contradiction")
    rows = store.conn.execute("SELECT * FROM dedup_pairs").fetchall()
    assert rows == [("p", "alpha", "zeta", "contradiction", "2025-03-01T12:00:05.123Z")]
    with pytest.raises(InvalidInputError, match="unknown verdict"):
        store.mark_checked("p", "a", "b", "maybe")


def test_list_show_forget(store: Store) -> None:
    """list orders by label BINARY (archived included); show by slug; forget returns the row."""
    for label in ("beta", "Alpha", "gamma"):
        save(store, label, unit(1, 0), archived=label == "gamma")
    assert [m.label for m in store.list("p")] == ["Alpha", "beta", "gamma"]
    assert store.show("p", "ALPHA") == store.list("p")[0]
    assert store.show("p", "nope") is None
    gone = store.forget("p", "Beta!")
    assert isinstance(gone, Memory) and gone.slug == "beta"
    assert store.forget("p", "beta") is None
    assert [m.label for m in store.list("p")] == ["Alpha", "gamma"]


def test_stores_are_implicit_and_listed(store: Store) -> None:
    """Stores appear on first write; names sorted; counts include empty stores."""
    save(store, "x", unit(1, 0), name="o/r")
    save(store, "y", None, name="o/r")
    assert store.store_names() == ["global", "o/r"]
    assert store.store_counts() == {"global": 0, "o/r": 2}
    assert store.store_exists("o/r") and store.store_exists("global")
    assert not store.store_exists("nope")
    with pytest.raises(InvalidInputError):
        save(store, "x", unit(1, 0), name="")


def test_search_ranks_by_cosine_with_ties_by_store_then_slug(store: Store) -> None:
    """Descending cosine; equal scores ordered by (store, slug); limit applies last."""
    save(store, "b", unit(1, 0), name="s2")
    save(store, "a", unit(1, 0), name="s2")
    save(store, "z", unit(2, 0), name="s1")
    save(store, "half", unit(1, 1), name="s1")
    save(store, "far", unit(-1, 0), name="s1")
    found = store.search(["s2", "s1"], unit(1, 0), limit=4)
    assert [(m.memory.store, m.memory.slug) for m in found] == [
        ("s1", "z"),
        ("s2", "a"),
        ("s2", "b"),
        ("s1", "half"),
    ]
    assert found[0].score == pytest.approx(1.0, abs=1e-9)
    assert found[3].score == pytest.approx(np.sqrt(0.5), abs=1e-9)
    assert store.search(["s1"], unit(1, 0), limit=0) == []


def test_search_scores_are_exact_float64_cosines(store: Store) -> None:
    """Returned scores equal the float64 cosine of the stored float32 values."""
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(500, 64)).astype(np.float32)
    slugs = bulk_insert(store, "p", vectors)
    query = rng.normal(size=64).astype(np.float32)
    expected = sorted(
        ((cosine(v, query), slug) for slug, v in zip(slugs, vectors, strict=True)),
        key=lambda item: (-item[0], item[1]),
    )[:10]
    found = store.search(["p"], query, limit=10)
    assert [m.memory.slug for m in found] == [slug for _, slug in expected]
    assert [m.score for m in found] == pytest.approx([s for s, _ in expected], abs=1e-12)


def test_branch_filter(store: Store) -> None:
    """With a branch: unscoped and that branch's memories; without: all of them."""
    save(store, "shared", unit(1, 0))
    save(store, "on-dev", unit(1, 0), branch="dev")
    save(store, "on-main", unit(1, 0), branch="main")

    def slugs(branch: str | None) -> list[str]:
        return sorted(m.memory.slug for m in store.search(["p"], unit(1, 0), branch=branch))

    assert slugs("dev") == ["on-dev", "shared"]
    assert slugs("other") == ["shared"]
    assert slugs(None) == ["on-dev", "on-main", "shared"]


def test_dimension_guard_skips_other_dimensions_silently(store: Store) -> None:
    """Rows of 384 and 768 dims coexist; each query only meets its own dimension."""
    rng = np.random.default_rng(1)
    small = rng.normal(size=(5, 384)).astype(np.float32)
    large = rng.normal(size=(5, 768)).astype(np.float32)
    for i in range(5):
        save(store, f"small{i}", small[i])
        save(store, f"large{i}", large[i])
    found = store.search(["p"], small[2], limit=10)
    assert {m.memory.slug for m in found} == {f"small{i}" for i in range(5)}
    assert found[0].memory.slug == "small2" and found[0].memory.dim == 384
    assert {m.memory.slug for m in store.search(["p"], large[0])} == {f"large{i}" for i in range(5)}
    assert store.search(["p"], rng.normal(size=100).astype(np.float32)) == []
    assert [m.memory.slug for m in store.find_similar("p", small[0], threshold=0.99)] == ["small0"]
    assert [m.memory.slug for m in store.find_similar("p", large[1], threshold=0.99)] == ["large1"]


def test_unusable_blobs_are_skipped(store: Store) -> None:
    """A BLOB whose length is not a multiple of 4 is treated like a missing one."""
    save(store, "good", unit(1, 0))
    store.conn.execute(
        "INSERT INTO entries (slug, store, label, content, embedding, created_at, updated_at) "
        "VALUES ('bad', 'p', 'bad', '# bad', X'0000803f00', 't', 't')"
    )
    assert [m.memory.slug for m in store.search(["p"], unit(1, 0))] == ["good"]
    bad = store.show("p", "bad")
    assert bad is not None and bad.dim is None and bad.pending


def test_zero_vectors_score_zero(store: Store) -> None:
    """A zero stored vector or a zero query scores 0, never NaN."""
    save(store, "zero", unit(0, 0))
    save(store, "one", unit(1, 0))
    scores = {m.memory.slug: m.score for m in store.search(["p"], unit(1, 0))}
    assert scores == {"one": pytest.approx(1.0), "zero": 0.0}
    assert {m.score for m in store.search(["p"], unit(0, 0))} == {0.0}


def test_archived_excluded_unless_asked(store: Store, clock: StepClock) -> None:
    """Archived rows skip search, find_similar, duplicates and stale; include_archived shows."""
    save(store, "live", unit(1, 0))
    save(store, "kept", unit(1, 0), archived=True)
    assert [m.memory.slug for m in store.search(["p"], unit(1, 0))] == ["live"]
    found = store.search(["p"], unit(1, 0), include_archived=True)
    assert [m.memory.slug for m in found] == ["kept", "live"]
    assert [m.memory.slug for m in store.find_similar("p", unit(1, 0))] == ["live"]
    assert store.find_duplicates("p") == []
    clock.advance(days=200)
    assert store.stale_count("p") == 1


def test_find_similar_threshold_limit_exclusion(store: Store) -> None:
    """Only its own store, cosine ≥ threshold, excluding a slug, best first, at most limit."""
    save(store, "same", unit(1, 0))
    save(store, "close", unit(1, 0.1))
    save(store, "closer", unit(1, 0.05))
    save(store, "far", unit(0, 1))
    save(store, "elsewhere", unit(1, 0), name="q")
    found = store.find_similar("p", unit(1, 0), exclude_slug="same")
    assert [m.memory.slug for m in found] == ["closer", "close"]
    assert [m.memory.slug for m in store.find_similar("p", unit(1, 0), limit=1)] == ["same"]
    boundary = store.find_similar("p", unit(1, 0), threshold=found[1].score)
    assert "close" in [m.memory.slug for m in boundary]


def test_find_duplicates_orders_and_labels_pairs(store: Store) -> None:
    """Pairs ≥ threshold with the smaller slug first, by score then slugs; none cross-store."""
    save(store, "b", unit(1, 0))
    save(store, "a", unit(1, 0))
    save(store, "c", unit(1, 0.3))
    save(store, "d", unit(0, 1))
    save(store, "x", unit(1, 0), name="q")
    pairs = store.find_duplicates("p")
    assert [(p.slug_a, p.label_a, p.slug_b, p.label_b) for p in pairs] == [
        ("a", "a", "b", "b"),
        ("a", "a", "c", "c"),
        ("b", "b", "c", "c"),
    ]
    assert pairs[0].score == pytest.approx(1.0)
    assert pairs[1].score == pytest.approx(cosine([1, 0], [1, 0.3]))
    assert store.duplicate_count("p") == 3
    assert store.find_duplicates("p", threshold=0.99) == pairs[:1]


def test_find_duplicates_large_store_matches_brute_force(store: Store) -> None:
    """The blocked matrix product finds exactly the brute-force pairs on 1,500 rows."""
    rng = np.random.default_rng(3)
    base = rng.normal(size=(300, 16)).astype(np.float32)
    vectors = np.repeat(base, 5, axis=0) + rng.normal(scale=0.2, size=(1500, 16)).astype(np.float32)
    bulk_insert(store, "p", vectors)
    v64 = vectors.astype(np.float64)
    unit64 = v64 / np.linalg.norm(v64, axis=1, keepdims=True)
    sims = unit64 @ unit64.T
    i, j = np.nonzero(np.triu(sims >= 0.9, k=1))
    expected = {(f"m{a:04d}", f"m{b:04d}") for a, b in zip(i, j, strict=True)}
    found = store.find_duplicates("p", threshold=0.9)
    assert {(p.slug_a, p.slug_b) for p in found} == expected
    assert len(expected) > 100


def test_hygiene_queries(store: Store, clock: StepClock) -> None:
    """stale, branches, branch counts, model mismatch and pending counts per docs/database.md
    §hygiene-queries."""
    save(store, "old", unit(1, 0), branch="gone")
    save(store, "recalled", unit(0, 1), branch="dev")
    save(store, "pending", None, branch="dev")
    save(store, "other-model", unit(1, 1))
    store.conn.execute("UPDATE entries SET model = 'm0' WHERE slug = 'other-model'")
    save(store, "archived", unit(1, 0), archived=True, branch="gone")
    save(store, "elsewhere", None, name="q")
    clock.advance(days=80)
    store.recall(["p"], unit(0, 1), limit=1)
    clock.advance(days=11)
    assert store.stale_count("p") == 3  # old, pending, other-model; recalled was read at day 80
    assert store.stale_count("p", now=START + timedelta(days=90)) == 0
    assert store.branches_in_store("p") == ["dev", "gone"]
    assert store.count_for_branches("p", ["gone"]) == 1
    assert store.count_for_branches("p", ["gone", "dev", "none"]) == 3
    assert store.count_for_branches("p", []) == 0
    assert store.model_mismatch_count("p", "m1") == 1
    assert store.pending_count("p") == 1
    assert store.pending_count() == 2
    assert store.pending_count_in(["p", "q"]) == 2
    assert store.pending_count_in([]) == 0


def test_pending_memories_oldest_first(store: Store, clock: StepClock) -> None:
    """pending_memories lists NULL-embedding rows by updated_at, limited, per store."""
    for label in ("c", "a", "b"):
        save(store, label, None)
        clock.advance(seconds=1)
    save(store, "z", None, name="q")
    save(store, "done", unit(1, 0))
    assert [m.slug for m in store.pending_memories()] == ["c", "a", "b", "z"]
    assert [m.slug for m in store.pending_memories(limit=2)] == ["c", "a"]
    assert [m.slug for m in store.pending_memories(store="q")] == ["z"]


def test_fill_embedding_compare_and_set(store: Store, clock: StepClock) -> None:
    """fill writes only embedding+model; a change between read and fill makes it a no-op."""
    save(store, "p1", None)
    save(store, "p2", None)
    store.recall(["p"], unit(1, 0))
    first, second = store.pending_memories()
    assert store.fill_embedding(first, unit(1, 0), "m9") is True
    filled = store.show("p", "p1")
    assert filled is not None
    assert (filled.dim, filled.model, filled.updated_at) == (2, "m9", first.updated_at)
    assert store.fill_embedding(first, unit(0, 1), "m9") is False  # no longer pending
    clock.advance(seconds=1)
    store.remember("p", "p2", "# p2\n\nnewer", None, None, overwrite=True)
    assert store.fill_embedding(second, unit(1, 0), "m9") is False
    row = store.conn.execute("SELECT embedding, content FROM entries WHERE slug='p2'").fetchone()
    assert row == (None, "# p2\n\nnewer")


def test_fill_skips_an_overwrite_in_the_same_millisecond(store: Store) -> None:
    """Same updated_at but new text (clock did not move): the old text's vector is refused."""
    save(store, "p1", None)
    [read] = store.pending_memories()
    store.remember("p", "p1", "# p1\n\nrewritten", None, None, overwrite=True)
    assert store.show("p", "p1").updated_at == read.updated_at  # type: ignore[union-attr]
    assert store.fill_embedding(read, unit(1, 0), "m9") is False
    assert store.pending_count("p") == 1


def test_reembed_candidates_and_migration_fill(store: Store) -> None:
    """Candidates: pending rows plus other-model rows; fill keeps updated_at and telemetry."""
    save(store, "current", unit(1, 0))
    save(store, "stale-model", unit(1, 0))
    store.conn.execute("UPDATE entries SET model = 'old' WHERE slug = 'stale-model'")
    save(store, "pending", None)
    save(store, "q-old", unit(1, 0), name="q")
    store.conn.execute("UPDATE entries SET model = 'old' WHERE slug = 'q-old'")
    store.recall(["p"], unit(1, 0))
    assert {m.slug for m in store.reembed_candidates("m1")} == {"stale-model", "pending", "q-old"}
    assert [m.slug for m in store.reembed_candidates("m1", missing_only=True)] == ["pending"]
    assert [m.slug for m in store.reembed_candidates("m1", store="q")] == ["q-old"]
    [target] = [m for m in store.reembed_candidates("m1") if m.slug == "stale-model"]
    assert store.fill_embedding(target, unit(0, 1), "m1") is True
    after = store.show("p", "stale-model")
    assert after is not None
    assert (after.model, after.updated_at, after.recall_count) == (
        "m1",
        target.updated_at,
        target.recall_count,
    )
    assert store.model_mismatch_count("p", "m1") == 0


def test_hostile_text_round_trips(store: Store) -> None:
    """Quotes, NULs, SQL and a megabyte of text are stored and shown verbatim."""
    label = "Robert'); DROP TABLE entries;--"
    text = f"# {label}\n\n" + "\x00\u2028'\"" * 10 + "x" * 1_000_000
    assert store.remember("p", label, text, unit(1, 0), "m") is RememberOutcome.SAVED
    memory = store.show("p", label)
    assert memory is not None and memory.content == text and memory.label == label


def test_passed_in_connection_stays_open(tmp_path: Path) -> None:
    """Store(conn) initialises the schema and leaves closing to the caller."""
    conn = sqlite3.connect(tmp_path / "own.db", isolation_level=None)
    try:
        store = Store(conn)
        assert store.path == tmp_path / "own.db"
        store.close()
        assert conn.execute("SELECT name FROM stores").fetchall() == [("global",)]
    finally:
        conn.close()


def test_memories_are_written_durably_and_recall_counts_without_fsync(store: Store) -> None:
    """A memory's commit runs at synchronous FULL; only the recall stamp drops to NORMAL
    (no fsync on every recall), and the connection is FULL again afterwards."""
    statements: list[str] = []
    store.conn.set_trace_callback(statements.append)
    try:
        save(store, "Topic", unit(0, 1))
        assert store.recall(["p"], unit(0, 1), limit=1)[0].memory.label == "Topic"
    finally:
        store.conn.set_trace_callback(None)
    insert = next(i for i, s in enumerate(statements) if s.startswith("INSERT INTO entries"))
    stamp = next(i for i, s in enumerate(statements) if "recall_count = recall_count + 1" in s)
    lowered = [i for i, s in enumerate(statements) if s == "PRAGMA synchronous = NORMAL"]
    assert lowered and insert < lowered[0] < stamp
    (level,) = store.conn.execute("PRAGMA synchronous").fetchone()
    assert level == 2  # FULL
