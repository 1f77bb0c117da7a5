"""Ranking memories by the vectors handed in (docs/database.md §ranking): the Store's
``find_similar``, ``search``, ``recall`` and ``stamp_recalls``.

A mixin so that ``Store`` keeps one public surface while each module stays small; it relies
on ``conn``, ``tx``, ``_lock``, ``_read``, ``_matrix`` and the lexical flags of the class it
is mixed into (memory_store.py). Each call reads its matrix and rows in one read
transaction; scores come from ``scoring`` (float32 screen, exact float64).
"""

from __future__ import annotations

import builtins
import sqlite3
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import numpy.typing as npt

from thatch.frontend.store import backfill, lexical
from thatch.frontend.store.matrix import DimGroup, StoreMatrix
from thatch.frontend.store.memory import DUPLICATE_THRESHOLD, Match, Memory
from thatch.frontend.store.rows import (
    COLUMNS,
    locked,
    memory_from_row,
    store_list,
    store_name,
    threshold_value,
)
from thatch.frontend.store.scoring import (
    candidates_above,
    exact_scores,
    fused_candidates,
    top_candidates,
)
from thatch.frontend.store.transactions import Transactions
from thatch.frontend.store.vectors import as_vector

__all__ = ["FETCH_CHUNK", "SearchQueries"]

# Candidate rows fetched per statement (well under SQLite's bound parameter limit).
FETCH_CHUNK = 256


class SearchQueries:
    """Nearest memories, ranked search and recall (with its telemetry stamps)."""

    conn: sqlite3.Connection
    tx: Transactions
    _lock: threading.RLock
    _tracked: bool

    def _read(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def _matrix(self, store: str) -> StoreMatrix:
        raise NotImplementedError

    _lexical: bool
    _lexical_filling: bool
    _lexical_camel: bool

    def _now(self) -> str:
        raise NotImplementedError

    def _scored(
        self, store: str, group: DimGroup, rows: npt.NDArray[np.intp], query: npt.NDArray[Any]
    ) -> list[Match]:
        """The candidate rows' memories read now, with exact float64 scores from their BLOBs.

        Inside the same read transaction as the matrix, so every candidate still exists
        with the vector it was screened by.
        """
        found: list[tuple[Memory, bytes]] = []
        slugs = [group.slugs[row] for row in rows]
        for start in range(0, len(slugs), FETCH_CHUNK):
            chunk = slugs[start : start + FETCH_CHUNK]
            # ``slug IN (…) AND store = ?``: one primary-key search per slug in a single
            # statement (a row-value IN would scan the index). Rows come in key order:
            # callers sort by score and key.
            marks = ", ".join("?" * len(chunk))
            for fetched in self.conn.execute(
                f"SELECT {COLUMNS}, embedding FROM entries WHERE store = ? AND slug IN ({marks})",
                (store, *chunk),
            ):
                found.append((memory_from_row(fetched), fetched[-1]))
        scores = exact_scores([blob for _, blob in found], query)
        return [
            Match(memory, float(score)) for (memory, _), score in zip(found, scores, strict=True)
        ]

    @locked
    def find_similar(
        self,
        store: str,
        vector: Any,
        *,
        threshold: float = DUPLICATE_THRESHOLD,
        limit: int = 3,
        exclude_slug: str | None = None,
    ) -> builtins.list[Match]:
        """Live memories of one store with cosine ≥ threshold, best first. No telemetry."""
        query = as_vector(vector)
        threshold = threshold_value(threshold)
        if limit <= 0:
            return []
        name = store_name(store)
        with self._read():
            matrix = self._matrix(name)
            group = matrix.groups.get(query.size)
            if group is None:
                return []
            mask = ~group.archived
            placed = matrix.where.get(exclude_slug) if exclude_slug is not None else None
            if placed is not None and placed[0] == query.size:
                mask[placed[1]] = False
            found = [
                match
                for match in self._scored(
                    name, group, candidates_above(group, query, mask, threshold), query
                )
                if match.score >= threshold
            ]
            found.sort(key=lambda match: (-match.score, match.memory.slug))
            return found[:limit]

    @locked
    def search(
        self,
        stores: Sequence[str],
        vector: Any,
        *,
        text: str | None = None,
        branch: str | None = None,
        limit: int = 10,
        include_archived: bool = False,
    ) -> builtins.list[Match]:
        """Best matches over the stores, ties by (store, slug). Records no usage.

        With ``text`` (the query the vector embeds) the order also weighs the lexical
        match (docs/database.md §ranking); each match's score stays its cosine.
        """
        query = as_vector(vector)
        names = store_list(stores)
        if limit <= 0:
            return []
        found: list[tuple[float, Match]] = []
        with self._read():
            lifts = self._lexical_lifts(names, text)
            for name in names:
                matrix = self._matrix(name)
                group = matrix.groups.get(query.size)
                if group is None:
                    continue
                mask = np.ones(group.count, dtype=bool)
                if not include_archived:
                    mask &= ~group.archived
                if branch is not None:
                    mask &= matrix.branch_mask(group, branch)
                rows_lifted: dict[int, float] = {}
                for (store, slug), lift in lifts.items():
                    placed = matrix.where.get(slug) if store == name else None
                    if placed is not None and placed[0] == query.size:
                        rows_lifted[placed[1]] = lift
                if rows_lifted:
                    rows = fused_candidates(group, query, mask, limit, rows_lifted)
                else:
                    rows = top_candidates(group, query, mask, limit)
                for match in self._scored(name, group, rows, query):
                    lift = lifts.get((name, match.memory.slug), 0.0)
                    found.append((match.score + lift, match))
            found.sort(key=lambda item: (-item[0], item[1].memory.store, item[1].memory.slug))
            return [match for _, match in found[:limit]]

    def _lexical_lifts(
        self, names: Sequence[str], text: str | None
    ) -> dict[tuple[str, str], float]:
        """(store, slug) → what its lexical match adds to its cosine for ranking; {} without
        text or complete index. Lexical ranking only reorders: any failure leaves the dense
        order. A partly filled index would lift only the memories it has reached (and count
        an identifier as unique that is not), so until its backfill ends (in this process or
        another) the order is the dense one."""
        if not text or not self._lexical:
            return {}
        try:
            if self._lexical_filling:
                self._lexical_filling = bool(lexical.FILLS & backfill.pending(self.conn))
                if self._lexical_filling:
                    return {}
                # The fill that ended may be m017's, run by another process.
                self._lexical_camel = lexical.has_camel(self.conn)
            hits, exact = lexical.evidence(self.conn, names, text, camel=self._lexical_camel)
        except sqlite3.OperationalError:
            return {}
        return lexical.lifts(hits, exact)

    @locked
    def recall(
        self,
        stores: Sequence[str],
        vector: Any,
        *,
        text: str | None = None,
        branch: str | None = None,
        limit: int = 10,
        include_archived: bool = False,
        floor: float | None = None,
    ) -> builtins.list[Match]:
        """``search`` (scores below ``floor`` dropped), then stamp recall_count and
        last_recalled_at on exactly the returned rows.

        The returned memories show the telemetry as it was before this recall.
        """
        matches = self.search(
            stores,
            vector,
            text=text,
            branch=branch,
            limit=limit,
            include_archived=include_archived,
        )
        if floor is not None:
            matches = [match for match in matches if match.score >= floor]
        self.stamp_recalls(matches)
        return matches

    @locked
    def stamp_recalls(self, matches: Sequence[Match], at: str | None = None) -> None:
        """recall_count + 1 and last_recalled_at = ``at`` (default: now) on the matched rows.

        ``recall`` stamps at once; the MCP server stamps after its answer is out (``at`` is
        then the time of the recall). A row deleted meanwhile is simply not stamped.
        """
        if not matches:
            return
        now = self._now() if at is None else at
        with self.tx.write(durable=False) as conn:
            conn.executemany(
                "UPDATE entries SET recall_count = recall_count + 1, last_recalled_at = ? "
                "WHERE slug = ? AND store = ?",
                [(now, match.memory.slug, match.memory.store) for match in matches],
            )
