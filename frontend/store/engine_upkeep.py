"""The engine store's seeding, switched-off defaults and re-embedding (engines.md §6).

A mixin so that ``EngineStore`` keeps one public surface while each module stays small; it
relies on ``conn``, ``engine``, ``tx``, ``present`` and the row helpers (``_nearest_matcher``,
``_new_matcher``, ``_link``, ``_apply``) of the class it is mixed into (engine_store.py).
"""

from __future__ import annotations

import sqlite3
import uuid
from typing import Any

from thatch.frontend.errors import InvalidInputError
from thatch.frontend.store.engine_rows import (
    DEDUP_THRESHOLD,
    P0,
    Engine,
    Item,
    Matcher,
    SeedPlan,
)
from thatch.frontend.store.migrations.engines import engine_model_index, engine_pending_index
from thatch.frontend.store.rows import MISSING, USABLE, counted, store_name
from thatch.frontend.store.schema_lag import has_table
from thatch.frontend.store.transactions import Transactions
from thatch.frontend.store.vectors import as_vector, encode

__all__ = ["EngineUpkeep"]


class EngineUpkeep:
    """Defaults written and upgraded in one transaction each; rows to re-embed."""

    conn: sqlite3.Connection
    engine: Engine
    tx: Transactions
    present: bool  # the engine's tables exist (not in a read-only file left unmigrated)

    def _nearest_matcher(
        self, conn: sqlite3.Connection, store: str, query: Any, threshold: float
    ) -> tuple[Matcher, float] | None:
        raise NotImplementedError

    def _new_matcher(
        self, conn: sqlite3.Connection, store: str, text: str, blob: bytes, model: str, now: str
    ) -> Matcher:
        raise NotImplementedError

    def _link(self, conn: sqlite3.Connection, matcher_id: str, item_id: str, now: str) -> None:
        raise NotImplementedError

    def _apply(
        self, conn: sqlite3.Connection, item_id: str, signal: str, detail: str | None, now: str
    ) -> Item:
        raise NotImplementedError

    def defaults_off(self) -> set[str]:
        """The keys of the defaults switched off (none before m012, in a read-only file)."""
        if not has_table(self.conn, "thatch_defaults_off"):
            return set()
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

    def embedding_counts(self, active_model: str, *, up_to: int | None = None) -> tuple[int, int]:
        """(rows embedded with another model, rows not embedded) over matchers and items.

        ``up_to``: each count stops one row past it (more reads as ``up_to + 1``), reading
        m032's indexes: only the rows it counts (the session start's). Without them (a
        hook's open leaves m032 to the next MCP server or CLI command) or without
        ``up_to``, every row is read."""
        other = pending = 0
        if not self.present:
            return other, pending
        tables = (self.engine.matchers, self.engine.items)
        with self.tx.lock:
            if up_to is not None and self._indexed(tables):
                for table in tables:
                    other += self._capped_other(table, active_model, up_to)
                    pending += counted(
                        self.conn,
                        f"FROM {table} INDEXED BY {engine_pending_index(table)} WHERE {MISSING}",
                        (),
                        up_to,
                    )
                return min(other, up_to + 1), min(pending, up_to + 1)
            for table in tables:
                row = self.conn.execute(
                    f"SELECT count(*) FILTER (WHERE {USABLE} AND model IS NOT ?), "
                    f"count(*) FILTER (WHERE NOT {USABLE}) FROM {table}",
                    (active_model,),
                ).fetchone()
                other += int(row[0])
                pending += int(row[1])
        return other, pending

    def _indexed(self, tables: tuple[str, ...]) -> bool:
        names = [name(t) for t in tables for name in (engine_model_index, engine_pending_index)]
        (made,) = self.conn.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'index' "
            f"AND name IN ({', '.join('?' * len(names))})",
            names,
        ).fetchone()
        return int(made) == len(names)

    def _capped_other(self, table: str, active_model: str, up_to: int) -> int:
        """Embedded rows of ``table`` of another model than ``active_model``, up to
        ``up_to + 1``: the ranges below and above it in m032's index, and no model."""
        rows = f"FROM {table} INDEXED BY {engine_model_index(table)} WHERE {USABLE} AND "
        found = 0
        for where, params in (
            ("model IS NULL", ()),
            ("model < ?", (active_model,)),
            ("model > ?", (active_model,)),
        ):
            found += counted(self.conn, rows + where, params, up_to - found)
            if found > up_to:
                break
        return found

    def reembed_candidates(
        self, active_model: str, *, missing_only: bool = False, store: str | None = None
    ) -> list[tuple[str, str, str]]:
        """(table, id, text) of rows to re-embed: not embedded, or (unless ``missing_only``)
        embedded with another model."""
        out: list[tuple[str, str, str]] = []
        if not self.present:
            return out
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
