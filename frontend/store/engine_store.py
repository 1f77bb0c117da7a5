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

import sqlite3
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from thatch.frontend.errors import InvalidInputError
from thatch.frontend.store.engine_rows import (
    AUTO_FIRE_THRESHOLD,
    BEHAVIORS,
    CONFIDENCE_FLOOR,
    DEDUP_THRESHOLD,
    DELTAS,
    ITEM_COLUMNS,
    ITEMS_SURFACED,
    LINKED_ITEM_COLUMNS,
    MATCHERS_CONSIDERED,
    NOISE_FLOOR,
    P0,
    PREDICTIONS,
    PROVENANCE_KEPT,
    PROVENANCE_SHOWN,
    PROVENANCE_TRIM,
    W_SOFT,
    Engine,
    Item,
    K,
    Listed,
    Lookup,
    Matcher,
    Provenance,
    Recorded,
    Scored,
    SeedPlan,
    cosines,
    item_from_row,
    marks,
)
from thatch.frontend.store.engine_upkeep import EngineUpkeep
from thatch.frontend.store.rows import store_list, store_name
from thatch.frontend.store.schema_lag import has_table
from thatch.frontend.store.transactions import Transactions
from thatch.frontend.store.vectors import as_vector, encode
from thatch.frontend.thresholds import SIMILAR_FLOOR
from thatch.frontend.timefmt import Clock, utc_now

# The engines' shapes are defined in engine_rows and named here too: callers import the
# store and its rows from one place.
__all__ = [
    "AUTO_FIRE_THRESHOLD",
    "BEHAVIORS",
    "CONFIDENCE_FLOOR",
    "DEDUP_THRESHOLD",
    "P0",
    "PREDICTIONS",
    "PROVENANCE_KEPT",
    "PROVENANCE_TRIM",
    "W_SOFT",
    "Engine",
    "EngineStore",
    "Item",
    "K",
    "Listed",
    "Lookup",
    "Matcher",
    "Provenance",
    "Recorded",
    "Scored",
    "SeedPlan",
]


class EngineStore(EngineUpkeep):
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
        # A file this process may not write keeps its schema (docs/database.md
        # §compatibility): without the engine's tables (m001) it holds no item to read.
        self.present = all(
            has_table(conn, table)
            for table in (engine.matchers, engine.items, engine.edges, engine.provenance)
        )

    # -- reads -----------------------------------------------------------------------------

    def item(self, item_id: str) -> Item | None:
        if not self.present:
            return None
        with self.tx.lock:
            row = self.conn.execute(
                f"SELECT {ITEM_COLUMNS} FROM {self.engine.items} WHERE id = ?", (item_id,)
            ).fetchone()
        return None if row is None else item_from_row(row)

    def lookup(
        self, stores: Sequence[str] | str, vector: Any, threshold: float = DEDUP_THRESHOLD
    ) -> Lookup:
        """The item of ``stores`` a write by this statement would act on (nearest at cosine
        ≥ threshold), else the nearest below it as a hint: one scan, as the writes do."""
        if not self.present:
            return Lookup(None)
        query = as_vector(vector)
        with self.tx.read() as conn:
            near, hint = self._lookup(conn, store_list(stores), query, threshold)
        return Lookup(None if near is None else near[0], hint)

    def _lookup(
        self, conn: sqlite3.Connection, names: list[str], query: Any, threshold: float
    ) -> tuple[tuple[Item, float] | None, tuple[Item, float] | None]:
        """(the nearest item ≥ threshold, else None; the nearest below it ≥ SIMILAR_FLOOR as
        a hint, else None), from the one scan of the scope."""
        near = self._nearest_item(conn, names, query, min(threshold, SIMILAR_FLOOR))
        if near is None or near[1] >= threshold:
            return near, None
        return None, near

    def _nearest_item(
        self, conn: sqlite3.Connection, names: list[str], query: Any, threshold: float
    ) -> tuple[Item, float] | None:
        rows = conn.execute(
            f"SELECT {ITEM_COLUMNS}, embedding FROM {self.engine.items} "
            f"WHERE store IN ({marks(names)})",
            names,
        ).fetchall()
        best: tuple[Item, float] | None = None
        for row, cosine in zip(rows, cosines([row[-1] for row in rows], query), strict=True):
            if cosine is None or cosine < threshold:
                continue
            item = item_from_row(row)
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
        for row, cosine in zip(rows, cosines([row[3] for row in rows], query), strict=True):
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
        if not self.present:
            return []
        query = as_vector(vector)
        names = store_list(stores)
        with self.tx.read() as conn:
            rows = conn.execute(
                f"SELECT id, store, description, embedding FROM {self.engine.matchers} "
                f"WHERE store IN ({marks(names)})",
                names,
            ).fetchall()
            scored: list[tuple[float, Matcher]] = []
            for row, cosine in zip(rows, cosines([row[3] for row in rows], query), strict=True):
                if cosine is None or cosine < NOISE_FLOOR:
                    continue
                scored.append((round(cosine, 3), Matcher(row[0], row[1], row[2])))
            scored.sort(key=lambda pair: (-pair[0], pair[1].description, pair[1].id))
            chosen = [pair for pair in scored[:MATCHERS_CONSIDERED] if pair[0] >= threshold]
            best: dict[str, Scored] = {}
            for cosine, matcher in chosen:
                linked = conn.execute(
                    f"SELECT {LINKED_ITEM_COLUMNS}, e.weight "
                    f"FROM {self.engine.edges} e JOIN {self.engine.items} i "
                    f"ON i.id = e.{self.engine.item_column} WHERE e.matcher_id = ?",
                    (matcher.id,),
                ).fetchall()
                for row in linked:
                    item = item_from_row(row)
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
        if not self.present:
            return []
        names = store_list(stores)
        engine = self.engine
        out: list[Listed] = []
        with self.tx.read() as conn:
            rows = conn.execute(
                f"SELECT {ITEM_COLUMNS} FROM {engine.items} WHERE store IN ({marks(names)}) "
                "ORDER BY confidence DESC, statement, id",
                names,
            ).fetchall()
            for row in rows:
                item = item_from_row(row)
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
        if not self.present:
            return []
        with self.tx.lock:
            rows = self.conn.execute(
                f"SELECT {ITEM_COLUMNS} FROM {self.engine.items} "
                "WHERE store = ? AND instr(rationale, ?) > 0 ORDER BY created_at, id",
                (store, marker),
            ).fetchall()
        return [item_from_row(row) for row in rows]

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
            f"SELECT {ITEM_COLUMNS} FROM {self.engine.items} WHERE id = ?", (item_id,)
        ).fetchone()
        return item_from_row(row)

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

    def signal_nearest(
        self,
        stores: Sequence[str] | str,
        vector: Any,
        signal: str,
        detail: str | None,
        threshold: float = DEDUP_THRESHOLD,
    ) -> Lookup:
        """Find the nearest item ≥ threshold and apply ``signal`` to it, in one transaction;
        the item after the signal, or none and the nearest below the threshold (untouched)."""
        self._check_signal(signal)
        query = as_vector(vector)
        names = store_list(stores)
        now = self.tx.now()
        with self.tx.write() as conn:
            near, hint = self._lookup(conn, names, query, threshold)
            if near is None:
                return Lookup(None, hint)
            return Lookup(self._apply(conn, near[0].id, signal, detail, now))

    def delete_nearest(
        self,
        stores: Sequence[str] | str,
        vector: Any,
        threshold: float = DEDUP_THRESHOLD,
        *,
        switch_off: Callable[[Item], str | None] | None = None,
    ) -> Lookup:
        """Delete the nearest item ≥ threshold (edges and provenance cascade), then its
        matchers that no edge holds any more; the deleted item, or none and the nearest
        below the threshold (left as it is).

        ``switch_off(item)``: the default's key to record as switched off, in the same
        transaction, so that no seeding in between brings it back (None: not a default).
        """
        query = as_vector(vector)
        names = store_list(stores)
        with self.tx.write() as conn:
            near, hint = self._lookup(conn, names, query, threshold)
            if near is None:
                return Lookup(None, hint)
            return Lookup(self._delete(conn, near[0], switch_off))

    def delete(
        self, item_id: str, *, switch_off: Callable[[Item], str | None] | None = None
    ) -> Item | None:
        with self.tx.write() as conn:
            row = conn.execute(
                f"SELECT {ITEM_COLUMNS} FROM {self.engine.items} WHERE id = ?", (item_id,)
            ).fetchone()
            return None if row is None else self._delete(conn, item_from_row(row), switch_off)

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

    # -- re-embedding and hygiene ---------------------------------------------------------
