"""The engine store (engines.md §1-§4): arithmetic, matching, scoring, deletes, the guard.

Unit tests over a real SQLite file with hand-made vectors; the tools and a real embedder
are tested in tests/test_engine_tools.py.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from thatch.frontend.errors import InvalidInputError
from thatch.frontend.store.engine_store import (
    BEHAVIORS,
    P0,
    PREDICTIONS,
    W_SOFT,
    EngineStore,
    Item,
    K,
    Lookup,
)
from thatch.frontend.store.memory_store import Store


def unit(*values: float) -> np.ndarray:
    vector = np.asarray(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def at_cosine(base: np.ndarray, other: np.ndarray, cosine: float) -> np.ndarray:
    """A unit vector at exactly ``cosine`` to unit ``base`` in the plane of base and other."""
    ortho = other - np.dot(other, base) * base
    ortho = ortho / np.linalg.norm(ortho)
    return (cosine * base + np.sqrt(1 - cosine**2) * ortho).astype(np.float32)


E1, E2, E3, E4 = (unit(*row) for row in np.eye(4))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "thatch.db") as opened:
        yield opened


def engine(store: Store, which: object = PREDICTIONS) -> EngineStore:
    clock = iter(datetime(2025, 3, 4, 5, 6, second, tzinfo=UTC) for second in range(60))
    return EngineStore(store.conn, which, clock=lambda: next(clock), lock=store.lock)  # type: ignore[arg-type]


def record(
    eng: EngineStore,
    signal: str,
    *,
    m: np.ndarray = E1,
    s: np.ndarray = E2,
    text: str = "P",
    store: str = "o/r",
) -> Item:
    return eng.record(
        store,
        matcher="M",
        matcher_vector=m,
        statement=text,
        statement_vector=s,
        model="test/model",
        signal=signal,
        rationale="why",
    ).item


def counts(item: Item) -> tuple[float, float, str]:
    return (item.confirm, item.disconfirm, f"{item.confidence:.3f}")


def test_worked_values_of_section_3(store: Store) -> None:
    """0/0 → 0.500, confirm → 0.583, soft → 0.560, disconfirm → 0.483, via the one UPDATE."""
    eng = engine(store)
    assert counts(record(eng, "create")) == (0, 0, "0.500")
    assert counts(record(eng, "confirm")) == (1, 0, "0.583")
    assert counts(record(eng, "soft")) == (1, 0.25, "0.560")
    assert counts(record(eng, "disconfirm")) == (1, 1.25, "0.483")
    fresh = record(eng, "create", s=E3, text="Q")
    signal(eng, fresh.id, "confirm", None)
    assert counts(signal(eng, fresh.id, "disconfirm", None)) == (1, 1, "0.500")  # type: ignore[arg-type]
    assert len(eng.listing(["o/r", "global"])) == 2


def signal(eng: EngineStore, item_id: str, signal: str, detail: str | None) -> Item:
    """``signal`` applied to one item as the tools apply it: by its statement's vector
    (``signal_nearest``), which must find that item."""
    blob, where = eng.conn.execute(
        f"SELECT embedding, store FROM {eng.engine.items} WHERE id = ?", (item_id,)
    ).fetchone()
    vector = np.frombuffer(blob, dtype="<f4")
    found = eng.signal_nearest([where], vector, signal, detail, threshold=0.999)
    assert found.item is not None and found.item.id == item_id, found
    return found.item


def confidence_of(confirm: float, disconfirm: float) -> float:
    """``(c + K·P0) / (c + d + K)`` (engines.md §3), as the store's UPDATE computes it."""
    return (confirm + K * P0) / (confirm + disconfirm + K)


def test_floor_arithmetic_spam_and_edges() -> None:
    """0/3 → 0.313 below the floor; 1/4 → 0.350 fires; 1/5 → 0.318 does not."""

    def item(c: float, d: float) -> Item:
        return Item("i", "s", "x", None, None, confidence_of(c, d), c, d, "", "", 4)

    assert (f"{confidence_of(0, 3):.3f}", item(0, 3).fires) == ("0.312", False)
    assert round(confidence_of(0, 3), 4) == 0.3125  # the spec's 0.313 rounds half up
    assert (f"{confidence_of(1, 4):.3f}", item(1, 4).fires) == ("0.350", True)
    assert (f"{confidence_of(1, 5):.3f}", item(1, 5).fires) == ("0.318", False)
    assert item(0, 2).fires and item(0, 2).evidence == 2  # thin evidence still fires
    assert item(1, 1.25).evidence == 2 and item(1, 1.5).evidence == 3


def test_three_spam_signals_through_sql_stop_auto_fire(store: Store) -> None:
    eng = engine(store, BEHAVIORS)
    made = eng.record(
        "global",
        matcher="M",
        matcher_vector=E1,
        statement="B",
        statement_vector=E2,
        model="m",
        signal="codify",
        rationale="r",
    ).item
    assert [s.item.id for s in eng.match(["global"], E1, auto_fire=True)] == [made.id]
    for _ in range(3):
        last = signal(eng, made.id, "disconfirm", "spam: x")
    assert last is not None and (last.disconfirm, last.evidence) == (3, 3)
    assert eng.match(["global"], E1, auto_fire=True) == []
    assert [s.item.id for s in eng.match(["global"], E1)] == [made.id]  # query: no floor


def test_nearest_reuse_at_085_and_new_below(store: Store) -> None:
    """Matchers and items within 0.85 are reused (not only via the same matcher)."""
    eng = engine(store)
    first = eng.record(
        "o/r",
        matcher="M",
        matcher_vector=E1,
        statement="P",
        statement_vector=E2,
        model="m",
        signal="create",
        rationale="r",
    )
    close = eng.record(
        "o/r",
        matcher="M2",
        matcher_vector=at_cosine(E1, E3, 0.86),
        statement="P2",
        statement_vector=at_cosine(E2, E3, 0.86),
        model="m",
        signal="confirm",
        rationale="r",
    )
    assert not close.created and close.item.id == first.item.id
    assert close.matcher.id == first.matcher.id and close.item.statement == "P"
    far_matcher = eng.record(
        "o/r",
        matcher="M3",
        matcher_vector=at_cosine(E1, E3, 0.84),
        statement="P",
        statement_vector=E2,
        model="m",
        signal="soft",
        rationale="r",
    )
    assert far_matcher.matcher.id != first.matcher.id and not far_matcher.created
    assert len(eng.listing("o/r")[0].matchers) == 2  # linked to the new matcher too
    other_store = eng.record(
        "x/y",
        matcher="M",
        matcher_vector=E1,
        statement="P",
        statement_vector=E2,
        model="m",
        signal="create",
        rationale="r",
    )
    assert other_store.created  # dedup is per target store
    rows = store.conn.execute("SELECT count(*), min(model) FROM prediction_matchers").fetchone()
    assert rows == (3, "m")


def test_scoring_steps_of_section_4(store: Store) -> None:
    """Top 5 matchers ≥ 0.01, then ≥ threshold; score = cosine × weight × confidence;
    best row per item; ties by statement."""
    eng = engine(store)
    axes = np.eye(16, dtype=np.float32)
    query = axes[0]
    # Six matchers at falling cosines to the query (pairwise < 0.85), one item each.
    cosines = [0.9, 0.85, 0.8, 0.75, 0.7, 0.65]
    for index, cosine in enumerate(cosines):
        eng.record(
            "o/r",
            matcher=f"m{index}",
            matcher_vector=at_cosine(query, axes[index + 1], cosine),
            statement=f"s{index}",
            statement_vector=axes[index + 8],
            model="m",
            signal="create",
            rationale="r",
        )
    found = eng.match(["o/r"], query, 0.6)
    assert [s.item.statement for s in found] == ["s0", "s1", "s2", "s3", "s4"]  # 6th: not top 5
    assert [round(s.score, 4) for s in found] == [round(c * 0.5, 4) for c in cosines[:5]]
    assert [s.item.statement for s in eng.match(["o/r"], query, 0.85)] == ["s0", "s1"]
    # An item linked to a second matcher keeps its best row.
    eng.record(
        "o/r",
        matcher="m2",
        matcher_vector=at_cosine(query, axes[3], 0.8),
        statement="s0",
        statement_vector=axes[8],
        model="m",
        signal="create",
        rationale="r",
    )
    again = eng.match(["o/r"], query, 0.6)
    assert [s.item.statement for s in again].count("s0") == 1
    assert again[0].matcher.description == "m0"
    # Equal scores: by statement.
    eng.record(
        "o/r",
        matcher="m0",
        matcher_vector=at_cosine(query, axes[1], 0.9),
        statement="a-first",
        statement_vector=axes[15],
        model="m",
        signal="create",
        rationale="r",
    )
    assert [s.item.statement for s in eng.match(["o/r"], query, 0.6)][:2] == ["a-first", "s0"]
    assert eng.match(["elsewhere"], query, 0.0) == []


def test_dimension_guard_and_bad_vectors(store: Store) -> None:
    """Vectors of another dimension never compare; malformed vectors write nothing."""
    eng = engine(store)
    record(eng, "create")
    assert eng.match(["o/r"], unit(1, 0, 0), 0.0) == []
    assert eng.lookup(["o/r"], unit(1, 0, 0, 0, 0)) == Lookup(None)
    made = eng.record(
        "o/r",
        matcher="M",
        matcher_vector=unit(1, 0, 0),
        statement="P",
        statement_vector=unit(0, 1, 0),
        model="other",
        signal="create",
        rationale="r",
    )
    assert made.created  # a 3-d row beside the 4-d one, not merged with it
    before = store.conn.execute("SELECT count(*) FROM predictions").fetchone()
    for bad in ([], [float("nan"), 1.0], [[1.0, 2.0]]):
        with pytest.raises(InvalidInputError):
            eng.record(
                "o/r",
                matcher="M",
                matcher_vector=bad,
                statement="P",
                statement_vector=E2,
                model="m",
                signal="create",
                rationale="r",
            )
    with pytest.raises(InvalidInputError):
        eng.record(
            "o/r",
            matcher=" ",
            matcher_vector=E1,
            statement="P",
            statement_vector=E2,
            model="m",
            signal="create",
            rationale="r",
        )
    with pytest.raises(InvalidInputError):
        engine(store, BEHAVIORS).record(
            "o/r",
            matcher="M",
            matcher_vector=E1,
            statement="P",
            statement_vector=E2,
            model="m",
            signal="soft",
            rationale="r",
        )
    assert store.conn.execute("SELECT count(*) FROM predictions").fetchone() == before
    assert store.conn.execute("SELECT count(*) FROM behaviors").fetchone() == (0,)


def test_delete_cascades_and_removes_orphaned_matchers(store: Store) -> None:
    eng = engine(store)
    shared = record(eng, "create")  # matcher M (E1) → P
    other = eng.record(
        "o/r",
        matcher="M",
        matcher_vector=E1,
        statement="Q",
        statement_vector=E3,
        model="m",
        signal="confirm",
        rationale="r",
    ).item
    eng.record(
        "o/r",
        matcher="lonely",
        matcher_vector=E4,
        statement="P",
        statement_vector=E2,
        model="m",
        signal="confirm",
        rationale="r",
    )
    deleted = eng.delete_nearest(["o/r", "global"], at_cosine(E2, E4, 0.9)).item
    assert deleted is not None and deleted.id == shared.id
    conn = store.conn
    assert conn.execute("SELECT description FROM prediction_matchers").fetchall() == [("M",)]
    assert conn.execute("SELECT prediction_id FROM prediction_edges").fetchall() == [(other.id,)]
    assert conn.execute(
        "SELECT count(*) FROM prediction_provenance WHERE prediction_id = ?", (shared.id,)
    ).fetchone() == (0,)
    assert eng.delete_nearest(["o/r"], E2).item is None
    assert eng.delete(other.id) is not None
    assert conn.execute("SELECT count(*) FROM prediction_matchers").fetchone() == (0,)


def test_listing_orders_and_shows_provenance(store: Store) -> None:
    eng = engine(store)
    low = eng.record(
        "o/r",
        matcher="M",
        matcher_vector=E1,
        statement="b low",
        statement_vector=E2,
        model="m",
        signal="disconfirm",
        rationale="r",
    ).item
    high = eng.record(
        "global",
        matcher="N",
        matcher_vector=E3,
        statement="a high",
        statement_vector=E4,
        model="m",
        signal="confirm",
        rationale="r2",
    ).item
    for index in range(12):
        signal(eng, high.id, "confirm", f"n{index}")
    listed = eng.listing(["o/r", "global"])
    assert [entry.item.id for entry in listed] == [high.id, low.id]
    assert listed[0].matchers == [("N", 1.0)]
    assert [p.detail for p in listed[0].provenance] == [f"n{i}" for i in range(11, 1, -1)]
    assert listed[1].provenance[0].signal == "disconfirm"
    assert eng.listing(["nowhere"]) == []


def test_connection_without_the_lock_is_serialised_by_one(tmp_path: Path) -> None:
    """A plain EngineStore on its own connection works (the CLI's shape)."""
    conn = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    Store(conn)  # schema
    eng = EngineStore(conn, PREDICTIONS)
    record(eng, "create")
    assert len(eng.listing(["o/r"])) == 1 and eng.listing(["global"]) == []
    conn.close()


def test_provenance_keeps_the_newest_rows_per_item_and_trims_in_steps(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each signal keeps PROVENANCE_KEPT rows of its item (newest first) and deletes at
    most PROVENANCE_TRIM older ones, so a file another writer grew shrinks in steps;
    another item's rows are never touched. Counts keep every signal."""
    from thatch.frontend.store import engine_store

    monkeypatch.setattr(engine_store, "PROVENANCE_KEPT", 5)
    monkeypatch.setattr(engine_store, "PROVENANCE_TRIM", 3)
    clock = iter(datetime(2025, 3, 4, 5, minute, tzinfo=UTC) for minute in range(60))
    eng = EngineStore(store.conn, PREDICTIONS, clock=lambda: next(clock), lock=store.lock)
    item = record(eng, "create")
    other = record(eng, "create", m=E3, s=E4, text="Q")

    def details(item_id: str) -> list[str | None]:
        return [
            row[0]
            for row in store.conn.execute(
                "SELECT detail FROM prediction_provenance WHERE prediction_id = ? "
                "ORDER BY created_at DESC, rowid DESC",
                (item_id,),
            )
        ]

    for index in range(4):
        signal(eng, item.id, "confirm", f"c{index}")
    assert details(item.id) == ["c3", "c2", "c1", "c0", "why"]  # five: nothing trimmed yet
    signal(eng, item.id, "confirm", "c4")
    assert details(item.id) == ["c4", "c3", "c2", "c1", "c0"]  # the oldest went
    # The earlier release (its exact insert) adds ten rows; a signal trims three at a time.
    for index in range(10):
        store.conn.execute(
            "INSERT INTO prediction_provenance (id, prediction_id, signal, detail, created_at) "
            "VALUES (?, ?, 'confirm', ?, '2025-03-04T04:00:00.000Z')",
            (f"old{index}", item.id, f"old{index}"),
        )
    store.conn.commit()
    signal(eng, item.id, "soft", "s0")
    assert len(details(item.id)) == 16 - 3
    for index in range(1, 4):
        signal(eng, item.id, "soft", f"s{index}")
    assert len(details(item.id)) == 7  # 16 rows, one more and three fewer per signal
    signal(eng, item.id, "soft", "s4")
    assert details(item.id) == ["s4", "s3", "s2", "s1", "s0"]
    assert len(details(other.id)) == 1
    final = eng.item(item.id)
    assert final is not None and final.confirm == 5 and final.disconfirm == 5 * W_SOFT
