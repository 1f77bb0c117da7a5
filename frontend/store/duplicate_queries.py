"""Duplicate candidates of the Store (docs/database.md §duplicate-candidates): the check
of a memory just written, the backfill for the rest, and the summaries and pages read
from the stored candidates.

A mixin so that ``Store`` keeps one public surface while each module stays small; it relies
on ``conn``, ``tx``, ``_lock``, ``_read``, ``_matrix`` and ``_tracked`` of the class it is
mixed into (memory_store.py). The SQL lives in ``duplicates``.
"""

from __future__ import annotations

import builtins
import contextlib
import sqlite3
import threading
from contextlib import AbstractContextManager

from thatch.frontend.errors import InvalidInputError
from thatch.frontend.store import duplicates
from thatch.frontend.store.matrix import StoreMatrix
from thatch.frontend.store.memory import DUPLICATE_THRESHOLD, DuplicatePair
from thatch.frontend.store.migrations.duplicates import DUP_UNCHECKED_TABLE
from thatch.frontend.store.rows import locked, store_name, threshold_value
from thatch.frontend.store.schema_lag import has_table
from thatch.frontend.store.transactions import Transactions

__all__ = ["DuplicateQueries"]


class DuplicateQueries:
    """Duplicate candidates: checked at write time, backfilled in chunks, read as pages."""

    conn: sqlite3.Connection
    tx: Transactions
    _lock: threading.RLock
    _tracked: bool

    def _read(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def _matrix(self, store: str) -> StoreMatrix:
        raise NotImplementedError

    def _check_written(self, store: str, slug: str) -> None:
        """Compare a memory just written with its store and keep its candidates.

        A cache: on any failure (a busy database, a matrix that cannot load) the memory
        stays unchecked and the backfill compares it later; the write itself stands.
        Inside a caller's transaction (which may roll back) it is left to the backfill too.
        """
        if not self._tracked or self.conn.in_transaction:
            return
        with contextlib.suppress(Exception):
            self._check_slugs(store_name(store), [slug])

    def _check_slugs(self, name: str, slugs: builtins.list[str]) -> int:
        """Compare ``slugs`` with their store; how many were marked checked."""
        if not slugs:
            return 0
        with self._read():
            matrix = self._matrix(name)
            seq = matrix.seq
            candidates = duplicates.screen(matrix, slugs)
        with self.tx.write(durable=False) as conn:
            return duplicates.record(conn, name, seq, slugs, candidates)

    @locked
    def check_duplicates(
        self, store: str, limit: int = duplicates.CHUNK_ROWS, after: int = 0
    ) -> tuple[int, int]:
        """Compare up to ``limit`` unchecked memories of ``store`` (from rowid ``after``
        on) with it, in one short write transaction; returns (memories marked checked, the
        rowid to continue from; 0 when none were left there). The backfill for memories no
        write-time check covered (written before schema m010, by the earlier release, or
        while a check failed)."""
        name = store_name(store)
        if not self._tracked:
            return 0, 0
        with self._read() as conn:
            slugs, last = duplicates.unchecked(conn, name, limit, after)
        if not slugs:
            return 0, 0
        return self._check_slugs(name, slugs), last

    def check_all_duplicates(
        self, store: str, *, deadline: float | None = None, up_to: int | None = None
    ) -> duplicates.DuplicateProgress:
        """``check_duplicates`` chunk after chunk until the store is checked (or
        ``deadline``, a ``time.monotonic()`` value, passes); returns the progress then,
        counted as ``duplicate_progress`` counts it with ``up_to``.

        Each chunk is its own transaction: writers wait at most one chunk's write. A
        memory that changed under its chunk is left for the next round (at most two
        rounds per call, so rows changing all the time cannot keep it busy). A store
        already checked costs, with ``up_to``, one row read (m031's table; without it, two
        index-only counts): the search for unchecked rows reads every row of the store."""
        import time

        progress = self.duplicate_progress(store, up_to=up_to)
        if progress.complete:
            return progress
        for _ in range(2):
            after = 0
            while deadline is None or time.monotonic() < deadline:
                _, after = self.check_duplicates(store, after=after)
                if after == 0:
                    break
            progress = self.duplicate_progress(store, up_to=up_to)
            if progress.complete:
                break
        return progress

    @locked
    def last_entry_rowid(self) -> int:
        """The highest rowid of ``entries`` (where a backfill cursor can start from)."""
        (last,) = self.conn.execute("SELECT coalesce(max(rowid), 0) FROM entries").fetchone()
        return int(last)

    @locked
    def duplicate_progress(
        self, store: str, *, up_to: int | None = None
    ) -> duplicates.DuplicateProgress:
        """How many embedded memories of ``store`` (archived included) were compared with
        it: every one and every checked mark counted (``up_to`` None), or only whether any
        is unchecked, then those up to ``up_to`` (``DuplicateProgress``)."""
        if not self._tracked:
            return duplicates.DuplicateProgress(0, 0)
        with self._read() as conn:
            return _progress(conn, store_name(store), up_to)

    @locked
    def duplicate_summary(
        self, store: str, threshold: float = DUPLICATE_THRESHOLD, *, up_to: int | None = None
    ) -> duplicates.DuplicateSummary:
        """Memories with an unreviewed candidate at ``threshold`` and the check's progress:
        read from stored candidates, never computed here (the session-start path). The
        progress counts every embedded memory and checked mark (``up_to`` None), or, with
        ``up_to``, only whether any is unchecked, then those up to it (``DuplicateSummary``)."""
        threshold = threshold_value(threshold)
        name = store_name(store)
        if not self._tracked:
            return duplicates.DuplicateSummary(0, 0, 0)
        cap = duplicates.COUNTED_UP_TO
        with self._read() as conn:
            count = duplicates.memories_with_candidates(conn, name, threshold)
            progress = _progress(conn, name, up_to)
        return duplicates.DuplicateSummary(
            min(count, cap),
            progress.checked,
            progress.total,
            count > cap,
            progress.total_more,
            progress.unchecked_more,
        )

    @locked
    def duplicate_page(
        self,
        store: str,
        threshold: float = DUPLICATE_THRESHOLD,
        *,
        offset: int = 0,
        clusters: int = duplicates.PAGE_CLUSTERS,
        pairs_per_cluster: int = duplicates.CLUSTER_PAIRS,
        up_to: int | None = None,
    ) -> duplicates.DuplicatePage:
        """Clusters of unreviewed candidates from ``offset`` (0-based), at most
        ``clusters`` of them, each with its best ``pairs_per_cluster`` pairs, and the
        check's progress counted as ``duplicate_progress`` counts it with ``up_to``."""
        threshold = threshold_value(threshold)
        name = store_name(store)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidInputError("offset must be a whole number ≥ 0")
        if not self._tracked:
            return duplicates.DuplicatePage([], offset, 0, 0, 0)
        with self._read() as conn:
            found, total_clusters, partial = duplicates.page(
                conn, name, threshold, offset, clusters, pairs_per_cluster
            )
            names = duplicates.labels(
                conn, name, (slug for _, pairs, _ in found for a, b, _ in pairs for slug in (a, b))
            )
            progress = _progress(conn, name, up_to)
        pages = [
            duplicates.ClusterPage(
                size,
                [DuplicatePair(a, names.get(a, a), b, names.get(b, b), s) for a, b, s in pairs],
                more,
            )
            for size, pairs, more in found
        ]
        return duplicates.DuplicatePage(
            pages,
            offset,
            total_clusters,
            progress.checked,
            progress.total,
            partial,
            progress.total_more,
            progress.unchecked_more,
        )

    @locked
    def find_duplicates(
        self, store: str, threshold: float = DUPLICATE_THRESHOLD
    ) -> builtins.list[DuplicatePair]:
        """Unreviewed candidate pairs ≥ threshold, best first, after checking every
        memory not checked yet (the backfill, however long). Each memory keeps its
        ``NEIGHBOURS`` nearest: in a cluster larger than that, not every pair is listed."""
        threshold = threshold_value(threshold)
        name = store_name(store)
        if not self._tracked:
            return []
        self.check_all_duplicates(name)
        with self._read() as conn:
            found = builtins.list(duplicates.edges(conn, name, threshold))
            names = duplicates.labels(conn, name, (s for a, b, _ in found for s in (a, b)))
        return [DuplicatePair(a, names.get(a, a), b, names.get(b, b), s) for a, b, s in found]

    @locked
    def duplicate_count(self, store: str, threshold: float = DUPLICATE_THRESHOLD) -> int:
        """Memories with an unreviewed duplicate candidate (docs/database.md
        §hygiene-queries); the caller passes the model's duplicate threshold."""
        return self.duplicate_summary(store, threshold).memories


def _progress(
    conn: sqlite3.Connection, name: str, up_to: int | None
) -> duplicates.DuplicateProgress:
    """Counted up to ``up_to`` from m031's table (``progress_up_to``); exactly when
    ``up_to`` is None or m031 has not run here (a hook's open, a read-only file)."""
    if up_to is not None and has_table(conn, DUP_UNCHECKED_TABLE):
        return duplicates.progress_up_to(conn, name, up_to)
    return duplicates.DuplicateProgress(*duplicates.progress(conn, name))
