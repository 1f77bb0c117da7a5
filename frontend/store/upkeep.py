"""Hygiene counts (docs/database.md §hygiene-queries) and the pending/re-embed queries
(§pending-embeddings) of the Store.

A mixin so that ``Store`` keeps one public surface while each module stays small; it relies
only on ``conn``, ``tx`` and ``_lock`` of the class it is mixed into.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from thatch.frontend.store.memory import STALE_DAYS, Memory
from thatch.frontend.store.migrations.changes import PENDING_INDEX
from thatch.frontend.store.migrations.flat_reads import PENDING_BY_STORE, STALE_KEY
from thatch.frontend.store.rows import (
    COLUMNS,
    MISSING,
    USABLE,
    counted,
    locked,
    memory_from_row,
    store_list,
)
from thatch.frontend.store.schema_lag import has_table
from thatch.frontend.store.transactions import Transactions
from thatch.frontend.store.vectors import encode
from thatch.frontend.timefmt import format_timestamp

__all__ = [
    "UpkeepQueries",
]


class UpkeepQueries:
    """Counts for the hygiene report and the rows ``reembed`` works through."""

    conn: sqlite3.Connection
    tx: Transactions
    _lock: threading.RLock

    # Each count takes ``up_to``: None counts every row; a number stops one row past it
    # (more than ``up_to`` reads as ``up_to + 1``), so the count costs the same whatever
    # the store's size.

    @locked
    def stale_count(
        self, store: str, now: datetime | None = None, *, up_to: int | None = None
    ) -> int:
        cutoff = format_timestamp((now or self.tx.clock()) - timedelta(days=STALE_DAYS))
        # The expression as m022's index has it: the count reads the index, not the table.
        return self._count(
            f"store = ? AND archived = 0 AND {STALE_KEY} < ?", (store, cutoff), up_to
        )

    @locked
    def conflict_versions(
        self, store: str, limit: int = 10, *, up_to: int | None = None
    ) -> tuple[int, list[tuple[str, str]]]:
        """The live conflict versions team sync pulled into ``store`` (m021): their count
        (``up_to`` as for the other counts), and up to ``limit`` of them as (label, the
        original's label; "" when the original is gone), by label: with ``up_to``, the
        first by label of those counted (sorting them all cost 58 ms at 100k). None in a
        file this process could not migrate (read-only)."""
        if not has_table(self.conn, "team_conflict_versions"):
            return 0, []
        joined = (
            "FROM team_conflict_versions c JOIN entries e ON e.store = c.store "
            "AND e.slug = c.slug WHERE c.store = ? AND e.archived = 0"
        )
        count = counted(self.conn, joined, (store,), up_to)
        if not count:
            return 0, []
        rows = self.conn.execute(
            "SELECT label, COALESCE((SELECT o.label FROM entries o WHERE o.store = ? "
            "AND o.slug = conflict_of), '') FROM (SELECT e.label AS label, e.slug AS slug, "
            f"c.conflict_of AS conflict_of {joined} LIMIT ?) ORDER BY label, slug LIMIT ?",
            (store, store, -1 if up_to is None else up_to + 1, limit),
        )
        return count, [(str(label), str(original)) for label, original in rows]

    @locked
    def branches_in_store(self, store: str) -> list[str]:
        rows = self.conn.execute(
            "SELECT DISTINCT branch FROM entries WHERE store = ? AND branch IS NOT NULL "
            "ORDER BY branch",
            (store,),
        )
        return [row[0] for row in rows]

    @locked
    def count_for_branches(self, store: str, branches: Sequence[str]) -> int:
        if not branches:
            return 0
        return self._count(
            "store = ? AND archived = 0 AND branch IN (SELECT value FROM json_each(?))",
            (store, json.dumps(list(branches))),
        )

    @locked
    def live_counts_on(self, store: str, branches: Sequence[str]) -> dict[str, int]:
        """Live memories on each of ``branches`` that has any: one statement over the
        branch index, however many branches the repository deleted (the hygiene report's
        orphans, at every session start), reading only those branches' rows (a store of
        98,000 memories on a live branch costs nothing here)."""
        if not branches:
            return {}
        rows = self.conn.execute(
            "SELECT branch, count(*) FROM entries WHERE store = ? AND archived = 0 "
            "AND branch IN (SELECT value FROM json_each(?)) GROUP BY branch",
            (store, json.dumps(list(branches))),
        )
        return {str(branch): int(count) for branch, count in rows}

    @locked
    def model_mismatch_count(
        self, store: str, active_model: str, *, up_to: int | None = None
    ) -> int:
        return self._count(
            f"store = ? AND archived = 0 AND {USABLE} AND model IS NOT ?",
            (store, active_model),
            up_to,
        )

    @locked
    def pending_count(self, store: str | None = None, *, up_to: int | None = None) -> int:
        """Memories without a usable embedding (archived included); None = every store.
        ``up_to=0`` asks only whether there is any (0 or 1)."""
        if store is None:
            return self._count(MISSING, (), up_to)
        return self.pending_count_in([store], up_to=up_to)

    @locked
    def pending_count_in(self, stores: Sequence[str], *, up_to: int | None = None) -> int:
        names = store_list(stores)
        if not names:
            return 0
        marks = ", ".join("?" for _ in names)
        return self._count(f"store IN ({marks}) AND {MISSING}", tuple(names), up_to)

    def _count(self, where: str, params: tuple[Any, ...], up_to: int | None = None) -> int:
        return counted(self.conn, f"FROM entries WHERE {where}", params, up_to)

    # -- pending embeddings and model migration (docs/database.md §pending-embeddings) -------------

    @locked
    def pending_memories(self, *, limit: int = 32, store: str | None = None) -> list[Memory]:
        """Memories without a usable embedding, oldest ``updated_at`` first."""
        where, params = (MISSING, ()) if store is None else (f"store = ? AND {MISSING}", (store,))
        # Named: without statistics SQLite prefers the index that has one store's rows in
        # updated_at order (m022's, for the UI), then reads every row of the store to find
        # the few pending ones. One store's: m030's index of its pending rows, or m005's of
        # every store's where a hook's open left m030 to the next (it steps over the
        # other stores' pending rows). An earlier release's file opened read-only was
        # never migrated: neither index.
        made = {
            name
            for (name,) in self.conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND name IN (?, ?)",
                (PENDING_BY_STORE, PENDING_INDEX),
            )
        }
        wanted = [PENDING_INDEX] if store is None else [PENDING_BY_STORE, PENDING_INDEX]
        named = next((name for name in wanted if name in made), None)
        hint = f"INDEXED BY {named} " if named else ""
        rows = self.conn.execute(
            f"SELECT {COLUMNS} FROM entries {hint}WHERE {where} "
            "ORDER BY updated_at, store, slug LIMIT ?",
            (*params, max(0, int(limit))),
        )
        return [memory_from_row(row) for row in rows]

    @locked
    def reembed_candidates(
        self, active_model: str, *, store: str | None = None, missing_only: bool = False
    ) -> list[Memory]:
        """Pending memories, plus (unless ``missing_only``) those tagged with another model."""
        condition = MISSING if missing_only else f"({MISSING} OR model IS NOT ?)"
        params: list[Any] = [] if missing_only else [active_model]
        if store is not None:
            condition = f"store = ? AND {condition}"
            params.insert(0, store)
        rows = self.conn.execute(
            f"SELECT {COLUMNS} FROM entries WHERE {condition} ORDER BY updated_at, store, slug",
            params,
        )
        return [memory_from_row(row) for row in rows]

    @locked
    def fill_embedding(self, memory: Memory, vector: Any, model: str) -> bool:
        """Compare-and-set the vector and model tag; False when the row changed meanwhile.

        Only ``embedding`` and ``model`` change: never ``updated_at`` or telemetry. The
        stored text is compared too: ``updated_at`` has millisecond resolution, and an
        overwrite within the same millisecond must not receive the old text's vector.
        """
        blob = encode(vector)
        condition = "slug = ? AND store = ? AND updated_at = ? AND content = ?"
        if memory.pending:
            condition += f" AND {MISSING}"
        with self.tx.write() as conn:
            changed = conn.execute(
                f"UPDATE entries SET embedding = ?, model = ? WHERE {condition}",
                (blob, model, memory.slug, memory.store, memory.updated_at, memory.content),
            ).rowcount
        if changed == 1:
            self._check_written(memory.store, memory.slug)
        return changed == 1

    def _check_written(self, store: str, slug: str) -> None:
        """Compare a memory just given a vector with its store (``Store`` does)."""
