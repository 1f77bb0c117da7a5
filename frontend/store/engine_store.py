"""The engine store (engines.md §1-§4): predictions and behaviors, matched by vectors handed in.

Both engines share one shape, so one class serves both over an ``Engine`` naming its
tables: matchers (situation text + vector), items (statement, rationale, vector,
confidence, counts), edges (matcher ↔ item, weight 1.0) and provenance (one row per
signal). The store never embeds; every write is one short ``BEGIN IMMEDIATE``.

Engines hold tens to hundreds of rows, so vectors are read afresh per call (a lean load of
the scope's matchers, then the edges of the few that match) rather than kept in a
change-logged matrix like the memories': cheap at that size (see bench/engines.py), and a
write from another process is always seen.
"""

from __future__ import annotations

import math
import sqlite3
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from thatch.frontend.errors import InvalidInputError
from thatch.frontend.store.rows import USABLE, store_list, store_name
from thatch.frontend.store.transactions import Transactions
from thatch.frontend.store.vectors import as_vector, decode, encode
from thatch.frontend.timefmt import Clock, utc_now

# engines.md §2
K = 5.0
P0 = 0.5
W_SOFT = 0.25
DEDUP_THRESHOLD = 0.85
AUTO_FIRE_THRESHOLD = 0.60
MATCHERS_CONSIDERED = 5
ITEMS_SURFACED = 5
NOISE_FLOOR = 0.01
CONFIDENCE_FLOOR = 0.35
FLOOR_EVIDENCE = 3
PROVENANCE_SHOWN = 10
PROVENANCE_KEPT = 100  # rows of provenance kept per item (docs/engines.md), newest first
PROVENANCE_TRIM = 500  # older rows deleted per signal at most

# signal → (confirm delta, disconfirm delta); creation signals change no count.
DELTAS: dict[str, tuple[float, float]] = {
    "create": (0.0, 0.0),
    "codify": (0.0, 0.0),
    "confirm": (1.0, 0.0),
    "disconfirm": (0.0, 1.0),
    "soft": (0.0, W_SOFT),
}


@dataclass(frozen=True)
class Engine:
    """The tables of one engine (store.md §3) and the signals it records."""

    name: str  # "prediction" / "behavior"
    matchers: str
    items: str
    edges: str
    provenance: str
    item_column: str
    signals: tuple[str, ...]
    creation_signal: str


PREDICTIONS = Engine(
    "prediction",
    "prediction_matchers",
    "predictions",
    "prediction_edges",
    "prediction_provenance",
    "prediction_id",
    ("create", "confirm", "disconfirm", "soft"),
    "create",
)
BEHAVIORS = Engine(
    "behavior",
    "behavior_matchers",
    "behaviors",
    "behavior_edges",
    "behavior_provenance",
    "behavior_id",
    ("codify", "confirm", "disconfirm"),
    "codify",
)


def confidence_of(confirm: float, disconfirm: float) -> float:
    """``(c + K·P0) / (c + d + K)`` (engines.md §3); the UPDATE computes the same in SQL."""
    return (confirm + K * P0) / (confirm + disconfirm + K)


def evidence_of(confirm: float, disconfirm: float) -> int:
    return math.floor(confirm + disconfirm + 0.5)


@dataclass(frozen=True)
class Item:
    """One prediction or behavior, without its vector."""

    id: str
    store: str
    statement: str
    rationale: str | None
    model: str | None
    confidence: float
    confirm: float
    disconfirm: float
    created_at: str
    updated_at: str
    dim: int | None

    @property
    def evidence(self) -> int:
        return evidence_of(self.confirm, self.disconfirm)

    @property
    def fires(self) -> bool:
        """False under the confidence floor: rejected often enough never to auto-fire."""
        return not (self.confidence < CONFIDENCE_FLOOR and self.evidence >= FLOOR_EVIDENCE)


@dataclass(frozen=True)
class Matcher:
    id: str
    store: str
    description: str


@dataclass(frozen=True)
class Scored:
    """An item reached through ``matcher`` at ``cosine``: score = cosine × weight × confidence."""

    item: Item
    matcher: Matcher
    cosine: float
    score: float


@dataclass(frozen=True)
class Provenance:
    signal: str
    detail: str | None
    created_at: str


@dataclass(frozen=True)
class Listed:
    item: Item
    matchers: list[tuple[str, float]]  # (description, weight)
    provenance: list[Provenance]  # newest first, at most PROVENANCE_SHOWN


@dataclass(frozen=True)
class Recorded:
    """What ``record`` did: ``created`` a new item or reused one; the item after the write."""

    item: Item
    created: bool
    matcher: Matcher


@dataclass
class SeedPlan:
    """One default to write (engines.md §6): ``existing`` None creates it, else upgrades."""

    statement: str
    rationale: str
    situation: str
    statement_vector: Any
    situation_vector: Any
    model: str
    existing: Item | None = None
    detail: str = ""
    stamp_check: str = ""  # the rationale the existing row must still hold (re-checked)
    key: str | None = None  # the default's key: a create re-checks it is not switched off


def _item_columns(prefix: str = "") -> str:
    names = [
        "id",
        "store",
        "statement",
        "rationale",
        "model",
        "confidence",
        "confirm_count",
        "disconfirm_count",
        "created_at",
        "updated_at",
    ]
    usable = USABLE.replace("embedding", f"{prefix}embedding")
    return ", ".join(prefix + name for name in names) + (
        f", CASE WHEN {usable} THEN length({prefix}embedding) / 4 END"
    )


_ITEM_COLUMNS = _item_columns()
_LINKED_ITEM_COLUMNS = _item_columns("i.")


def _item(row: Sequence[Any]) -> Item:
    return Item(
        id=row[0],
        store=row[1],
        statement=row[2],
        rationale=row[3],
        model=row[4],
        confidence=float(row[5]),
        confirm=float(row[6]),
        disconfirm=float(row[7]),
        created_at=row[8],
        updated_at=row[9],
        dim=row[10],
    )


def _cosines(blobs: Sequence[object], query: Any) -> list[float | None]:
    """float64 cosine of each BLOB to ``query``; None for a missing or other-dimension vector
    (the dimension guard: vectors of another model never compare)."""
    q = np.asarray(query, dtype=np.float64)
    q_norm = float(np.linalg.norm(q))
    out: list[float | None] = []
    for blob in blobs:
        vector = decode(blob)
        if vector is None or vector.shape != q.shape:
            out.append(None)
            continue
        v = vector.astype(np.float64)
        norms = float(np.linalg.norm(v)) * q_norm
        out.append(float(np.dot(v, q) / norms) if norms else 0.0)
    return out


def _in(names: Sequence[str]) -> str:
    return ", ".join("?" for _ in names)


class EngineStore:
    """The queries of one engine over a connection (shared with the memory Store).

    ``lock`` serialises use of the connection with whoever else uses it (the memory
    Store's, in a server whose worker threads share one connection).
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        engine: Engine,
        *,
        clock: Clock = utc_now,
        lock: threading.RLock | None = None,
    ) -> None:
        self.conn = conn
        self.engine = engine
        self.tx = Transactions(conn, clock=clock, lock=lock)

    # -- reads -----------------------------------------------------------------------------

    def item(self, item_id: str) -> Item | None:
        with self.tx.lock:
            row = self.conn.execute(
                f"SELECT {_ITEM_COLUMNS} FROM {self.engine.items} WHERE id = ?", (item_id,)
            ).fetchone()
        return None if row is None else _item(row)

    def count(self, stores: Sequence[str] | None = None) -> int:
        with self.tx.lock:
            if stores is None:
                return int(
                    self.conn.execute(f"SELECT count(*) FROM {self.engine.items}").fetchone()[0]
                )
            names = store_list(stores)
            return int(
                self.conn.execute(
                    f"SELECT count(*) FROM {self.engine.items} WHERE store IN ({_in(names)})",
                    names,
                ).fetchone()[0]
            )

    def nearest_item(
        self, stores: Sequence[str] | str, vector: Any, threshold: float = DEDUP_THRESHOLD
    ) -> tuple[Item, float] | None:
        """The item of ``stores`` most similar to ``vector`` at cosine ≥ threshold, or None."""
        query = as_vector(vector)
        with self.tx.read() as conn:
            return self._nearest_item(conn, store_list(stores), query, threshold)

    def _nearest_item(
        self, conn: sqlite3.Connection, names: list[str], query: Any, threshold: float
    ) -> tuple[Item, float] | None:
        rows = conn.execute(
            f"SELECT {_ITEM_COLUMNS}, embedding FROM {self.engine.items} "
            f"WHERE store IN ({_in(names)})",
            names,
        ).fetchall()
        best: tuple[Item, float] | None = None
        for row, cosine in zip(rows, _cosines([row[-1] for row in rows], query), strict=True):
            if cosine is None or cosine < threshold:
                continue
            item = _item(row)
            if best is None or (cosine, best[0].statement) > (best[1], item.statement):
                best = (item, cosine)
        return best

    def _nearest_matcher(
        self, conn: sqlite3.Connection, store: str, query: Any, threshold: float
    ) -> tuple[Matcher, float] | None:
        rows = conn.execute(
            f"SELECT id, store, description, embedding FROM {self.engine.matchers} WHERE store = ?",
            (store,),
        ).fetchall()
        best: tuple[Matcher, float] | None = None
        for row, cosine in zip(rows, _cosines([row[3] for row in rows], query), strict=True):
            if cosine is None or cosine < threshold:
                continue
            if best is None or cosine > best[1]:
                best = (Matcher(row[0], row[1], row[2]), cosine)
        return best

    def match(
        self,
        stores: Sequence[str] | str,
        vector: Any,
        threshold: float = AUTO_FIRE_THRESHOLD,
        *,
        auto_fire: bool = False,
    ) -> list[Scored]:
        """engines.md §4: the items the query vector reaches, best first.

        Steps 1-2 always; ``auto_fire`` adds step 3 (confidence floor, at most 5).
        """
        query = as_vector(vector)
        names = store_list(stores)
        with self.tx.read() as conn:
            rows = conn.execute(
                f"SELECT id, store, description, embedding FROM {self.engine.matchers} "
                f"WHERE store IN ({_in(names)})",
                names,
            ).fetchall()
            scored: list[tuple[float, Matcher]] = []
            for row, cosine in zip(rows, _cosines([row[3] for row in rows], query), strict=True):
                if cosine is None or cosine < NOISE_FLOOR:
                    continue
                scored.append((round(cosine, 3), Matcher(row[0], row[1], row[2])))
            scored.sort(key=lambda pair: (-pair[0], pair[1].description, pair[1].id))
            chosen = [pair for pair in scored[:MATCHERS_CONSIDERED] if pair[0] >= threshold]
            best: dict[str, Scored] = {}
            for cosine, matcher in chosen:
                linked = conn.execute(
                    f"SELECT {_LINKED_ITEM_COLUMNS}, e.weight "
                    f"FROM {self.engine.edges} e JOIN {self.engine.items} i "
                    f"ON i.id = e.{self.engine.item_column} WHERE e.matcher_id = ?",
                    (matcher.id,),
                ).fetchall()
                for row in linked:
                    item = _item(row)
                    found = Scored(item, matcher, cosine, cosine * float(row[-1]) * item.confidence)
                    held = best.get(item.id)
                    if held is None or found.score > held.score:
                        best[item.id] = found
        ranked = sorted(best.values(), key=lambda s: (-s.score, s.item.statement, s.item.id))
        if auto_fire:
            ranked = [s for s in ranked if s.item.fires][:ITEMS_SURFACED]
        return ranked

    def listing(self, stores: Sequence[str] | str) -> list[Listed]:
        """Items of ``stores`` by confidence descending, then statement, with their matchers
        and newest provenance rows."""
        names = store_list(stores)
        engine = self.engine
        out: list[Listed] = []
        with self.tx.read() as conn:
            rows = conn.execute(
                f"SELECT {_ITEM_COLUMNS} FROM {engine.items} WHERE store IN ({_in(names)}) "
                "ORDER BY confidence DESC, statement, id",
                names,
            ).fetchall()
            for row in rows:
                item = _item(row)
                matchers = conn.execute(
                    f"SELECT m.description, e.weight FROM {engine.edges} e "
                    f"JOIN {engine.matchers} m ON m.id = e.matcher_id "
                    f"WHERE e.{engine.item_column} = ? ORDER BY e.created_at, m.description",
                    (item.id,),
                ).fetchall()
                provenance = conn.execute(
                    f"SELECT signal, detail, created_at FROM {engine.provenance} "
                    f"WHERE {engine.item_column} = ? ORDER BY created_at DESC, rowid DESC "
                    "LIMIT ?",
                    (item.id, PROVENANCE_SHOWN),
                ).fetchall()
                out.append(
                    Listed(
                        item,
                        [(m[0], float(m[1])) for m in matchers],
                        [Provenance(p[0], p[1], p[2]) for p in provenance],
                    )
                )
        return out

    def stamped(self, store: str, marker: str) -> list[Item]:
        """Items of ``store`` whose rationale contains ``marker`` (the seed stamps)."""
        with self.tx.lock:
            rows = self.conn.execute(
                f"SELECT {_ITEM_COLUMNS} FROM {self.engine.items} "
                "WHERE store = ? AND instr(rationale, ?) > 0 ORDER BY created_at, id",
                (store, marker),
            ).fetchall()
        return [_item(row) for row in rows]

    # -- writes ----------------------------------------------------------------------------

    def _check_signal(self, signal: str) -> tuple[float, float]:
        if signal not in self.engine.signals:
            raise InvalidInputError(
                f"unknown {self.engine.name} signal {signal!r}; expected one of: "
                + ", ".join(self.engine.signals)
            )
        return DELTAS[signal]

    def _apply(
        self, conn: sqlite3.Connection, item_id: str, signal: str, detail: str | None, now: str
    ) -> Item:
        """The signal's deltas and the new confidence in one UPDATE, plus its provenance row."""
        d_confirm, d_disconfirm = DELTAS[signal]
        if d_confirm or d_disconfirm:
            # Right-hand sides read the old row: counts and confidence move together.
            conn.execute(
                f"UPDATE {self.engine.items} SET "
                "confirm_count = confirm_count + :c, "
                "disconfirm_count = disconfirm_count + :d, "
                "confidence = (confirm_count + :c + :kp) "
                "/ (confirm_count + :c + disconfirm_count + :d + :k), "
                "updated_at = :now WHERE id = :id",
                {
                    "c": d_confirm,
                    "d": d_disconfirm,
                    "kp": K * P0,
                    "k": K,
                    "now": now,
                    "id": item_id,
                },
            )
        conn.execute(
            f"INSERT INTO {self.engine.provenance} (id, {self.engine.item_column}, signal, "
            "detail, created_at) VALUES (?, ?, ?, ?, ?)",
            (str(uuid.uuid4()), item_id, signal, detail, now),
        )
        # Retention: the newest PROVENANCE_KEPT rows of an item; at most PROVENANCE_TRIM
        # older ones go per signal, so a file an older release grew is trimmed in steps.
        conn.execute(
            f"DELETE FROM {self.engine.provenance} WHERE rowid IN (SELECT rowid FROM "
            f"{self.engine.provenance} WHERE {self.engine.item_column} = ? "
            "ORDER BY created_at DESC, rowid DESC LIMIT ? OFFSET ?)",
            (item_id, PROVENANCE_TRIM, PROVENANCE_KEPT),
        )
        row = conn.execute(
            f"SELECT {_ITEM_COLUMNS} FROM {self.engine.items} WHERE id = ?", (item_id,)
        ).fetchone()
        return _item(row)

    def _link(self, conn: sqlite3.Connection, matcher_id: str, item_id: str, now: str) -> None:
        conn.execute(
            f"INSERT OR IGNORE INTO {self.engine.edges} (matcher_id, {self.engine.item_column}, "
            "weight, created_at) VALUES (?, ?, 1.0, ?)",
            (matcher_id, item_id, now),
        )

    def _new_matcher(
        self, conn: sqlite3.Connection, store: str, text: str, blob: bytes, model: str, now: str
    ) -> Matcher:
        matcher = Matcher(str(uuid.uuid4()), store, text)
        conn.execute(
            f"INSERT INTO {self.engine.matchers} (id, store, description, embedding, model, "
            "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (matcher.id, store, text, blob, model, now, now),
        )
        return matcher

    def record(
        self,
        store: str,
        *,
        matcher: str,
        matcher_vector: Any,
        statement: str,
        statement_vector: Any,
        model: str,
        signal: str,
        rationale: str | None,
        detail: str | None = None,
    ) -> Recorded:
        """``prediction_update`` / ``behavior_codify`` (engines.md §5) in one transaction.

        Nearest matcher ≥ 0.85 in ``store`` else a new one; nearest item ≥ 0.85 in ``store``
        else a new one (with ``rationale``); the edge; then ``signal`` (a creation signal
        changes no count). Provenance detail: ``detail``, else the rationale.
        """
        store = store_name(store)
        self._check_signal(signal)
        for text in (matcher, statement):
            if not isinstance(text, str) or not text.strip():
                raise InvalidInputError(f"{self.engine.name} texts must be non-empty strings")
        m_blob, s_blob = encode(matcher_vector), encode(statement_vector)
        m_query, s_query = as_vector(matcher_vector), as_vector(statement_vector)
        now = self.tx.now()
        with self.tx.write() as conn:
            conn.execute("INSERT OR IGNORE INTO stores (name) VALUES (?)", (store,))
            near = self._nearest_matcher(conn, store, m_query, DEDUP_THRESHOLD)
            found = near[0] if near else self._new_matcher(conn, store, matcher, m_blob, model, now)
            existing = self._nearest_item(conn, [store], s_query, DEDUP_THRESHOLD)
            if existing is None:
                item_id = str(uuid.uuid4())
                conn.execute(
                    f"INSERT INTO {self.engine.items} (id, store, statement, rationale, "
                    "embedding, model, confidence, confirm_count, disconfirm_count, "
                    "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, 0, 0, ?, ?)",
                    (item_id, store, statement, rationale, s_blob, model, P0, now, now),
                )
            else:
                item_id = existing[0].id
            self._link(conn, found.id, item_id, now)
            item = self._apply(conn, item_id, signal, rationale if detail is None else detail, now)
        return Recorded(item, existing is None, found)

    def signal(self, item_id: str, signal: str, detail: str | None) -> Item | None:
        """Apply ``signal`` to one item (its counts, confidence and a provenance row) in one
        transaction; None when the item is gone."""
        self._check_signal(signal)
        now = self.tx.now()
        with self.tx.write() as conn:
            if (
                conn.execute(
                    f"SELECT 1 FROM {self.engine.items} WHERE id = ?", (item_id,)
                ).fetchone()
                is None
            ):
                return None
            return self._apply(conn, item_id, signal, detail, now)

    def signal_nearest(
        self,
        stores: Sequence[str] | str,
        vector: Any,
        signal: str,
        detail: str | None,
        threshold: float = DEDUP_THRESHOLD,
    ) -> Item | None:
        """Find the nearest item ≥ threshold and apply ``signal`` to it, in one transaction;
        the item after the signal, or None when nothing is near enough."""
        self._check_signal(signal)
        query = as_vector(vector)
        names = store_list(stores)
        now = self.tx.now()
        with self.tx.write() as conn:
            near = self._nearest_item(conn, names, query, threshold)
            if near is None:
                return None
            return self._apply(conn, near[0].id, signal, detail, now)

    def delete_nearest(
        self,
        stores: Sequence[str] | str,
        vector: Any,
        threshold: float = DEDUP_THRESHOLD,
        *,
        switch_off: Callable[[Item], str | None] | None = None,
    ) -> Item | None:
        """Delete the nearest item ≥ threshold (edges and provenance cascade), then its
        matchers that no edge holds any more; the deleted item, or None.

        ``switch_off(item)``: the default's key to record as switched off, in the same
        transaction, so that no seeding in between brings it back (None: not a default).
        """
        query = as_vector(vector)
        names = store_list(stores)
        with self.tx.write() as conn:
            near = self._nearest_item(conn, names, query, threshold)
            if near is None:
                return None
            return self._delete(conn, near[0], switch_off)

    def delete(
        self, item_id: str, *, switch_off: Callable[[Item], str | None] | None = None
    ) -> Item | None:
        with self.tx.write() as conn:
            row = conn.execute(
                f"SELECT {_ITEM_COLUMNS} FROM {self.engine.items} WHERE id = ?", (item_id,)
            ).fetchone()
            return None if row is None else self._delete(conn, _item(row), switch_off)

    def defaults_off(self) -> set[str]:
        """The keys of the defaults switched off."""
        with self.tx.lock:
            rows = self.conn.execute("SELECT key FROM thatch_defaults_off").fetchall()
        return {str(row[0]) for row in rows}

    def switch_default(self, key: str, *, on: bool) -> bool:
        """Record the default ``key`` as switched on or off; True when that changed."""
        with self.tx.write() as conn:
            if on:
                return (
                    conn.execute("DELETE FROM thatch_defaults_off WHERE key = ?", (key,)).rowcount
                    > 0
                )
            return (
                conn.execute(
                    "INSERT OR IGNORE INTO thatch_defaults_off (key, at) VALUES (?, ?)",
                    (key, self.tx.now()),
                ).rowcount
                > 0
            )

    def _delete(
        self,
        conn: sqlite3.Connection,
        item: Item,
        switch_off: Callable[[Item], str | None] | None = None,
    ) -> Item:
        engine = self.engine
        key = switch_off(item) if switch_off is not None else None
        if key is not None:
            conn.execute(
                "INSERT OR IGNORE INTO thatch_defaults_off (key, at) VALUES (?, ?)",
                (key, self.tx.now()),
            )
        linked = [
            row[0]
            for row in conn.execute(
                f"SELECT matcher_id FROM {engine.edges} WHERE {engine.item_column} = ?",
                (item.id,),
            )
        ]
        conn.execute(f"DELETE FROM {engine.items} WHERE id = ?", (item.id,))
        # Foreign keys cascade edges and provenance; said explicitly too, so a connection
        # without foreign_keys (an old tool's) leaves nothing dangling either.
        conn.execute(f"DELETE FROM {engine.edges} WHERE {engine.item_column} = ?", (item.id,))
        conn.execute(f"DELETE FROM {engine.provenance} WHERE {engine.item_column} = ?", (item.id,))
        for matcher_id in linked:
            conn.execute(
                f"DELETE FROM {engine.matchers} WHERE id = ? AND NOT EXISTS "
                f"(SELECT 1 FROM {engine.edges} WHERE matcher_id = ?)",
                (matcher_id, matcher_id),
            )
        return item

    def seed(self, store: str, plan: SeedPlan, marker: str) -> bool:
        """Write one default (engines.md §6) in one transaction, re-checking the stamps inside
        it: a create happens only if no item of ``store`` carries ``marker``; an upgrade only
        if the item still holds ``plan.stamp_check``. False when another process did it."""
        store = store_name(store)
        s_blob, m_blob = encode(plan.statement_vector), encode(plan.situation_vector)
        m_query = as_vector(plan.situation_vector)
        engine = self.engine
        now = self.tx.now()
        with self.tx.write() as conn:
            conn.execute("INSERT OR IGNORE INTO stores (name) VALUES (?)", (store,))
            if plan.existing is None:
                if (
                    plan.key is not None
                    and conn.execute(
                        "SELECT 1 FROM thatch_defaults_off WHERE key = ?", (plan.key,)
                    ).fetchone()
                ):
                    return False  # switched off meanwhile: a person's choice stands
                taken = conn.execute(
                    f"SELECT 1 FROM {engine.items} WHERE store = ? AND instr(rationale, ?) > 0",
                    (store, marker),
                ).fetchone()
                if taken is not None:
                    return False
                near = self._nearest_matcher(conn, store, m_query, DEDUP_THRESHOLD)
                matcher = (
                    near[0]
                    if near
                    else self._new_matcher(conn, store, plan.situation, m_blob, plan.model, now)
                )
                item_id = str(uuid.uuid4())
                conn.execute(
                    f"INSERT INTO {engine.items} (id, store, statement, rationale, embedding, "
                    "model, confidence, confirm_count, disconfirm_count, created_at, updated_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, 0, 0, ?, ?)",
                    (
                        item_id,
                        store,
                        plan.statement,
                        plan.rationale,
                        s_blob,
                        plan.model,
                        P0,
                        now,
                        now,
                    ),
                )
                self._link(conn, matcher.id, item_id, now)
                self._apply(conn, item_id, engine.creation_signal, plan.rationale, now)
                return True
            item_id = plan.existing.id
            held = conn.execute(
                f"SELECT rationale FROM {engine.items} WHERE id = ?", (item_id,)
            ).fetchone()
            if held is None or held[0] != plan.stamp_check:
                return False
            conn.execute(
                f"UPDATE {engine.items} SET statement = ?, rationale = ?, embedding = ?, "
                "model = ?, updated_at = ? WHERE id = ?",
                (plan.statement, plan.rationale, s_blob, plan.model, now, item_id),
            )
            self._resituate(conn, item_id, plan, m_blob, now)
            self._apply(conn, item_id, engine.creation_signal, plan.detail, now)
            return True

    def _resituate(
        self, conn: sqlite3.Connection, item_id: str, plan: SeedPlan, m_blob: bytes, now: str
    ) -> None:
        """An upgraded default's situation: unchanged → nothing; its own matcher → rewritten;
        a matcher shared with other items → a new one (or the nearest ≥ 0.85) linked."""
        engine = self.engine
        linked = conn.execute(
            f"SELECT m.id, m.description, m.store, (SELECT count(*) FROM {engine.edges} o "
            "WHERE o.matcher_id = m.id) FROM "
            f"{engine.edges} e JOIN {engine.matchers} m ON m.id = e.matcher_id "
            f"WHERE e.{engine.item_column} = ? ORDER BY e.created_at LIMIT 1",
            (item_id,),
        ).fetchone()
        if linked is not None and linked[1] == plan.situation:
            return
        if linked is not None and int(linked[3]) == 1:
            conn.execute(
                f"UPDATE {engine.matchers} SET description = ?, embedding = ?, model = ?, "
                "updated_at = ? WHERE id = ?",
                (plan.situation, m_blob, plan.model, now, linked[0]),
            )
            return
        store = linked[2] if linked is not None else "global"
        near = self._nearest_matcher(conn, store, as_vector(plan.situation_vector), DEDUP_THRESHOLD)
        matcher = (
            near[0]
            if near
            else self._new_matcher(conn, store, plan.situation, m_blob, plan.model, now)
        )
        self._link(conn, matcher.id, item_id, now)

    # -- re-embedding and hygiene ---------------------------------------------------------

    def embedding_counts(self, active_model: str) -> tuple[int, int]:
        """(rows embedded with another model, rows not embedded) over matchers and items."""
        other = pending = 0
        with self.tx.lock:
            for table in (self.engine.matchers, self.engine.items):
                row = self.conn.execute(
                    f"SELECT count(*) FILTER (WHERE {USABLE} AND model IS NOT ?), "
                    f"count(*) FILTER (WHERE NOT {USABLE}) FROM {table}",
                    (active_model,),
                ).fetchone()
                other += int(row[0])
                pending += int(row[1])
        return other, pending

    def reembed_candidates(
        self, active_model: str, *, missing_only: bool = False, store: str | None = None
    ) -> list[tuple[str, str, str]]:
        """(table, id, text) of rows to re-embed: not embedded, or (unless ``missing_only``)
        embedded with another model."""
        out: list[tuple[str, str, str]] = []
        where = f"(NOT {USABLE})" if missing_only else f"(NOT {USABLE} OR model IS NOT ?)"
        for table, column in (
            (self.engine.matchers, "description"),
            (self.engine.items, "statement"),
        ):
            params: list[Any] = [] if missing_only else [active_model]
            clause = where
            if store is not None:
                clause += " AND store = ?"
                params.append(store)
            with self.tx.lock:
                rows = self.conn.execute(
                    f"SELECT id, {column} FROM {table} WHERE {clause} ORDER BY id", params
                ).fetchall()
            out += [(table, row[0], row[1]) for row in rows]
        return out

    def set_vector(self, table: str, row_id: str, text: str, vector: Any, model: str) -> bool:
        """Store a re-embedded vector unless the row's text changed meanwhile."""
        if table not in (self.engine.matchers, self.engine.items):
            raise InvalidInputError(f"not a table of the {self.engine.name} engine: {table}")
        column = "description" if table == self.engine.matchers else "statement"
        blob = encode(vector)
        with self.tx.write() as conn:
            changed = conn.execute(
                f"UPDATE {table} SET embedding = ?, model = ? WHERE id = ? AND {column} = ?",
                (blob, model, row_id, text),
            ).rowcount
        return changed == 1
