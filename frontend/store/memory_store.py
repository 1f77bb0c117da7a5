"""The memory store (docs/database.md §queries): memories in SQLite, searched by vectors handed in.

The store never embeds text. It stores BLOBs, compares the vectors the tool layer gives
it, and keeps one decoded matrix per store between calls (``matrix_cache``). Every write is
one short ``BEGIN IMMEDIATE`` transaction with nothing but SQLite inside it.
"""

from __future__ import annotations

import builtins
import contextlib
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import numpy.typing as npt

from thatch.frontend.errors import DatabaseBusyError, InvalidInputError
from thatch.frontend.store import backfill, db, duplicates, lexical
from thatch.frontend.store.changelog import LogPosition, log_position
from thatch.frontend.store.matrix import DimGroup, StoreMatrix, load_matrix
from thatch.frontend.store.matrix_cache import MatrixCache, SnapshotPlace, WrittenRow
from thatch.frontend.store.memory import (
    DUPLICATE_THRESHOLD,
    VERDICTS,
    DuplicatePair,
    Match,
    Memory,
    RememberOutcome,
)
from thatch.frontend.store.rows import (
    COLUMNS,
    locked,
    memory_from_row,
    store_list,
    store_name,
    threshold_value,
)
from thatch.frontend.store.schema import init_schema, run_backfills
from thatch.frontend.store.scoring import (
    candidates_above,
    exact_scores,
    fused_candidates,
    top_candidates,
)
from thatch.frontend.store.slugs import slugify
from thatch.frontend.store.transactions import Transactions
from thatch.frontend.store.upkeep import UpkeepQueries
from thatch.frontend.store.vector_snapshot import DatabaseIdentity
from thatch.frontend.store.vectors import as_vector, encode
from thatch.frontend.timefmt import Clock, utc_now

__all__ = ["DuplicatePair", "Match", "Memory", "RememberOutcome", "Store"]


# Candidate rows fetched per statement (well under SQLite's bound parameter limit).
FETCH_CHUNK = 256

INSERT_ENTRY = (
    "INSERT INTO entries (slug, store, label, content, embedding, model, branch, confidence, "
    "archived, created_at, updated_at, recall_count, last_recalled_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, NULL)"
)


class OwnWrite:
    """One write transaction's connection and the rows it wrote (see ``Store._own_write``)."""

    def __init__(self, conn: sqlite3.Connection, before: LogPosition | None) -> None:
        self.conn = conn
        self.before = before
        self.rows: list[WrittenRow] = []

    def wrote(self, slug: str, blob: bytes | None, archived: object, branch: str | None) -> None:
        """``slug`` now holds ``blob`` (None: deleted or pending), ``archived``, ``branch``."""
        self.rows.append((slug, blob, archived, branch))


class Store(UpkeepQueries):
    """All memory queries over one connection (see docs/database.md §queries)."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        clock: Clock = utc_now,
        snapshot_dir: Path | None = None,
        write_snapshots: bool = True,
        build_indexes: bool = True,
        fill_now: bool = True,
    ) -> None:
        """``snapshot_dir``: where to share vector snapshots with other processes (none: off);
        ``write_snapshots=False`` only maps them (a hook must not wait for a write);
        ``build_indexes=False`` leaves migrations that index every memory, and every
        pending backfill, to a later open (a hook must not wait for those either: schema
        ``BUILDS_INDEXES``); ``fill_now=False`` leaves pending backfills to ``fill_backlog``
        (``thatch mcp`` runs it on a thread, so that its first answer does not wait)."""
        self.conn = conn
        self.tx = Transactions(conn, clock=clock)
        self._writes_snapshots = write_snapshots
        self._lock = self.tx.lock
        self._snapshot_writer: threading.Thread | None = None
        self._owns_conn = False
        db.configure(conn)
        self._tracked = True  # the change counters and log of m004/m007 exist
        try:
            init_schema(conn, self._now(), build_indexes=build_indexes, fill_now=fill_now)
        except sqlite3.OperationalError as error:
            if not db.is_read_only(error):
                raise
            # A file this process may not write, left unmigrated by the earlier release:
            # read it in its own schema, without the change log (so without caching).
            self._tracked = False
        # The lexical index exists once m009 ran (not in a file this process may not migrate,
        # nor with a SQLite that lacks FTS5): recall then ranks by vectors alone. So it does
        # while m009's backfill is still indexing the memories that predate it.
        self._lexical = lexical.index_present(conn)
        self._lexical_filling = self._lexical and lexical.BACKFILL in backfill.pending(conn)
        self.path = self._file_path()
        identity = DatabaseIdentity.of(self.path) if snapshot_dir and self.path else None
        self._cache = MatrixCache(
            SnapshotPlace(snapshot_dir, identity) if snapshot_dir and identity else None
        )

    @classmethod
    def open(
        cls,
        path: Path | str,
        *,
        clock: Clock = utc_now,
        snapshot_dir: Path | None = None,
        write_snapshots: bool = True,
        build_indexes: bool = True,
        fill_now: bool = True,
    ) -> Store:
        """Connect to ``path`` (created if missing), initialise the schema, own the connection."""
        conn = db.connect(path)
        try:
            store = cls(
                conn,
                clock=clock,
                snapshot_dir=snapshot_dir,
                write_snapshots=write_snapshots,
                build_indexes=build_indexes,
                fill_now=fill_now,
            )
        except sqlite3.DatabaseError as error:
            conn.close()
            if db.is_busy(error):
                raise DatabaseBusyError() from None
            raise db.open_error(error, path) from None
        except BaseException:
            conn.close()
            raise
        store._owns_conn = True
        return store

    def close(self) -> None:
        """Close the connection if ``open`` made it; a passed-in connection stays the caller's."""
        if self._snapshot_writer is not None:
            self._snapshot_writer.join()  # a half-written snapshot is only a temp file, but
            self._snapshot_writer = None  # a finished one saves the next process its load
        self._cache.clear()
        if self._owns_conn:
            self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def fill_backlog(self, stop: threading.Event) -> None:
        """Run the pending backfills (schema ``run_backfills``) beside this store's other
        users: each transaction under the store's lock, the pauses between without it.
        Returns when they are done, or soon after ``stop`` is set (for a thread)."""
        run_backfills(self.conn, guard=lambda: self._lock, sleep=stop.wait)

    # -- plumbing ------------------------------------------------------------------------

    @property
    def lock(self) -> threading.RLock:
        """The lock serialising this connection's users (the engine and chat stores share it)."""
        return self.tx.lock

    @property
    def clock(self) -> Clock:
        return self.tx.clock

    @clock.setter
    def clock(self, clock: Clock) -> None:
        self.tx.clock = clock

    def _now(self) -> str:
        return self.tx.now()

    def _file_path(self) -> Path | None:
        for row in self.conn.execute("PRAGMA database_list"):
            if row[1] == "main":
                return Path(row[2]) if row[2] else None
        return None

    @contextmanager
    def _own_write(self, store: str) -> Iterator[OwnWrite]:
        """``tx.write`` for changes to entries of ``store`` that this process's cache may take
        in directly once committed (``MatrixCache.apply_own``): the recall that follows a
        remember then reads no change log. Rows the block reports with ``wrote`` are put
        into the cached matrix after the commit; without a cached matrix, inside a caller's
        transaction (which may still roll back) or untracked, it is a plain ``tx.write``."""
        direct = (
            self._tracked
            and isinstance(store, str)  # forget takes names unchecked: SQLite refuses others
            and not self.conn.in_transaction
            and self._cache.holds(store)
        )
        with self.tx.write() as conn:
            own = OwnWrite(conn, log_position(conn, store) if direct else None)
            yield own
            after = log_position(conn, store) if own.rows and own.before is not None else None
        if after is not None and own.before is not None:
            self._cache.apply_own(store, own.before, after, own.rows)

    def _matrix(self, store: str) -> StoreMatrix:
        """The store's ranking matrix; call inside a read transaction (one snapshot).

        Brought up to date from the change log (schema ``m007``): recall stamps and writes
        to other stores cost nothing, a change to a few rows (from any process) re-reads
        those rows only.
        """
        if not self._tracked:
            return self._load_matrix(store)
        return self._cache.get(self.conn, store, self._load_matrix)

    def _load_matrix(self, store: str) -> StoreMatrix:
        return load_matrix(self.conn, store)

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

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: one consistent snapshot for the cache key and the rows."""
        # Inside a caller's transaction the rows may hold uncommitted writes that could be
        # rolled back: use them, but never keep them in the cache.
        nested = self.conn.in_transaction
        if nested:
            self._cache.clear()
        try:
            with self.tx.read() as conn:
                conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
                yield conn
            if not nested:
                self._write_snapshots_later()
        finally:
            if nested:
                self._cache.clear()

    def _write_snapshots_later(self) -> None:
        """Write queued snapshots in a thread: off the answer's path.

        Writing 100k vectors takes 0.1–0.3 s; the call that loaded them returns first, and
        only a call that needs a matrix meanwhile waits (on the cache's guard, not our lock).
        """
        if not self._writes_snapshots or not self._cache.snapshots_queued():
            return
        if self._snapshot_writer is not None and self._snapshot_writer.is_alive():
            return  # still writing: the queue waits for a later read
        self._snapshot_writer = threading.Thread(
            target=self._write_snapshots, name="thatch-snapshot-writer"
        )
        self._snapshot_writer.start()

    def _write_snapshots(self) -> None:
        # A cache never fails a call nor prints: on any error the next process just loads.
        with contextlib.suppress(Exception):
            self._cache.write_snapshots()

    # -- stores --------------------------------------------------------------------------

    @locked
    def store_names(self) -> list[str]:
        rows = self.conn.execute(
            "SELECT name FROM stores UNION SELECT DISTINCT store FROM entries ORDER BY 1"
        )
        return [row[0] for row in rows]

    @locked
    def store_counts(self) -> dict[str, int]:
        counts = dict.fromkeys(self.store_names(), 0)
        for name, count in self.conn.execute("SELECT store, count(*) FROM entries GROUP BY store"):
            counts[name] = count
        return counts

    @locked
    def store_exists(self, name: str) -> bool:
        row = self.conn.execute(
            "SELECT EXISTS (SELECT 1 FROM stores WHERE name = ?) "
            "OR EXISTS (SELECT 1 FROM entries WHERE store = ?)",
            (name, name),
        ).fetchone()
        return bool(row[0])

    # -- writes --------------------------------------------------------------------------

    @locked
    def remember(
        self,
        store: str,
        label: str,
        stored_text: str,
        vector: Any | None,
        model: str | None,
        *,
        branch: str | None = None,
        confidence: int | None = None,
        overwrite: bool = False,
        archived: bool | None = None,
    ) -> RememberOutcome:
        """Save one memory (docs/database.md §memory-operations remember); a None vector saves it
        pending (NULL embedding)."""
        store = store_name(store)
        if not isinstance(label, str) or not isinstance(stored_text, str):
            raise InvalidInputError("label and stored text must be strings")
        blob = None if vector is None else encode(vector)
        model = None if blob is None else model
        slug = slugify(label)
        now = self._now()
        with self._own_write(store) as own:
            conn = own.conn
            conn.execute("INSERT OR IGNORE INTO stores (name) VALUES (?)", (store,))
            flag = int(bool(archived))
            row = (slug, store, label, stored_text, blob, model, branch, confidence, flag, now, now)
            if not overwrite:
                inserted = conn.execute(
                    f"{INSERT_ENTRY} ON CONFLICT (slug, store) DO NOTHING", row
                ).rowcount
                if inserted != 1:
                    return RememberOutcome.EXISTS
                own.wrote(slug, blob, flag, branch)
            else:
                if self._overwrite(own, row, archived, branch, confidence) is not None:
                    return RememberOutcome.ARCHIVED_GUARD
        if blob is not None:
            self._check_written(store, slug)
        return RememberOutcome.SAVED

    def _overwrite(
        self,
        own: OwnWrite,
        row: tuple[Any, ...],
        archived: bool | None,
        branch: str | None,
        confidence: int | None,
    ) -> RememberOutcome | None:
        """The overwrite half of ``remember`` inside its transaction; the guard's refusal,
        or None when written."""
        conn = own.conn
        slug, store, label, stored_text, blob, model, _, _, flag, now, _ = row
        old = conn.execute(
            "SELECT archived, branch, confidence FROM entries WHERE slug = ? AND store = ?",
            (slug, store),
        ).fetchone()
        if old is None:
            conn.execute(INSERT_ENTRY, row)
            own.wrote(slug, blob, flag, branch)
        else:
            if old[0] and archived is None:
                return RememberOutcome.ARCHIVED_GUARD
            own.wrote(
                slug,
                blob,
                old[0] if archived is None else int(archived),
                old[1] if branch is None else branch,
            )
            conn.execute(
                "UPDATE entries SET label = ?, content = ?, embedding = ?, model = ?, "
                "updated_at = ?, branch = ?, confidence = ?, archived = ? "
                "WHERE slug = ? AND store = ?",
                (
                    label,
                    stored_text,
                    blob,
                    model,
                    now,
                    old[1] if branch is None else branch,
                    old[2] if confidence is None else confidence,
                    old[0] if archived is None else int(archived),
                    slug,
                    store,
                ),
            )
        conn.execute(
            "DELETE FROM dedup_pairs WHERE store = ? AND (slug_a = ? OR slug_b = ?)",
            (store, slug, slug),
        )
        return None

    @locked
    def forget(self, store: str, label: str) -> Memory | None:
        """Delete the memory and its dedup verdicts; the deleted row, or None."""
        slug = slugify(label)
        with self._own_write(store) as own:
            conn = own.conn
            row = conn.execute(
                f"SELECT {COLUMNS} FROM entries WHERE slug = ? AND store = ?", (slug, store)
            ).fetchone()
            if row is None:
                return None
            conn.execute("DELETE FROM entries WHERE slug = ? AND store = ?", (slug, store))
            own.wrote(slug, None, 0, None)
            conn.execute(
                "DELETE FROM dedup_pairs WHERE store = ? AND (slug_a = ? OR slug_b = ?)",
                (store, slug, slug),
            )
        return memory_from_row(row)

    @locked
    def mark_checked(self, store: str, slug_a: str, slug_b: str, status: str) -> None:
        """Record a verdict for the (sorted) slug pair; it hides the pair from duplicates."""
        store = store_name(store)
        if status not in VERDICTS:
            raise InvalidInputError(
                f"unknown verdict {status!r}; expected one of: {', '.join(VERDICTS)}"
            )
        first, second = sorted((slug_a, slug_b))
        with self.tx.write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO dedup_pairs (store, slug_a, slug_b, status, checked_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (store, first, second, status, self._now()),
            )

    # -- reads ---------------------------------------------------------------------------

    @locked
    def list(self, store: str) -> list[Memory]:
        """Every memory of the store, archived included, by label (BINARY collation)."""
        rows = self.conn.execute(
            f"SELECT {COLUMNS} FROM entries WHERE store = ? ORDER BY label, slug", (store,)
        )
        return [memory_from_row(row) for row in rows]

    @locked
    def show(self, store: str, label: str) -> Memory | None:
        row = self.conn.execute(
            f"SELECT {COLUMNS} FROM entries WHERE slug = ? AND store = ?", (slugify(label), store)
        ).fetchone()
        return None if row is None else memory_from_row(row)

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
                self._lexical_filling = lexical.BACKFILL in backfill.pending(self.conn)
                if self._lexical_filling:
                    return {}
            hits, exact = lexical.evidence(self.conn, names, text)
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

    # -- duplicate candidates (docs/database.md §duplicate-candidates) -------------------

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

    def check_all_duplicates(self, store: str, *, deadline: float | None = None) -> tuple[int, int]:
        """``check_duplicates`` chunk after chunk until the store is checked (or
        ``deadline``, a ``time.monotonic()`` value, passes); returns (checked, total).

        Each chunk is its own transaction: writers wait at most one chunk's write. A
        memory that changed under its chunk is left for the next round (at most two
        rounds per call, so rows changing all the time cannot keep it busy)."""
        import time

        for _ in range(2):
            after = 0
            while deadline is None or time.monotonic() < deadline:
                _, after = self.check_duplicates(store, after=after)
                if after == 0:
                    break
            checked, total = self.duplicate_progress(store)
            if checked >= total:
                break
        return checked, total

    @locked
    def last_entry_rowid(self) -> int:
        """The highest rowid of ``entries`` (where a backfill cursor can start from)."""
        (last,) = self.conn.execute("SELECT coalesce(max(rowid), 0) FROM entries").fetchone()
        return int(last)

    @locked
    def duplicate_progress(self, store: str) -> tuple[int, int]:
        """(checked, total) embedded memories of ``store`` (archived included)."""
        if not self._tracked:
            return 0, 0
        with self._read() as conn:
            return duplicates.progress(conn, store_name(store))

    @locked
    def duplicate_summary(
        self, store: str, threshold: float = DUPLICATE_THRESHOLD
    ) -> duplicates.DuplicateSummary:
        """Memories with an unreviewed candidate at ``threshold`` and the check's progress:
        read from stored candidates, never computed here (the session-start path)."""
        threshold = threshold_value(threshold)
        name = store_name(store)
        if not self._tracked:
            return duplicates.DuplicateSummary(0, 0, 0)
        with self._read() as conn:
            checked, total = duplicates.progress(conn, name)
            count = duplicates.memories_with_candidates(conn, name, threshold)
        return duplicates.DuplicateSummary(count, checked, total)

    @locked
    def duplicate_page(
        self,
        store: str,
        threshold: float = DUPLICATE_THRESHOLD,
        *,
        offset: int = 0,
        clusters: int = duplicates.PAGE_CLUSTERS,
        pairs_per_cluster: int = duplicates.CLUSTER_PAIRS,
    ) -> duplicates.DuplicatePage:
        """Clusters of unreviewed candidates from ``offset`` (0-based), at most
        ``clusters`` of them, each with its best ``pairs_per_cluster`` pairs."""
        threshold = threshold_value(threshold)
        name = store_name(store)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidInputError("offset must be a whole number ≥ 0")
        if not self._tracked:
            return duplicates.DuplicatePage([], offset, 0, 0, 0)
        with self._read() as conn:
            found, total_clusters = duplicates.page(
                conn, name, threshold, offset, clusters, pairs_per_cluster
            )
            names = duplicates.labels(
                conn, name, (slug for _, pairs, _ in found for a, b, _ in pairs for slug in (a, b))
            )
            checked, total = duplicates.progress(conn, name)
        pages = [
            duplicates.ClusterPage(
                size,
                [DuplicatePair(a, names.get(a, a), b, names.get(b, b), s) for a, b, s in pairs],
                more,
            )
            for size, pairs, more in found
        ]
        return duplicates.DuplicatePage(pages, offset, total_clusters, checked, total)

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
