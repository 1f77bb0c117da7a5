"""Per-store vector matrices for ranking, kept current row by row from the change log.

A long-lived frontend (the MCP server) searches the same store many times while other
processes write to it. ``MatrixCache`` keeps, per store, only what ranking needs: the
slugs, one L2-normalised float32 copy of the vectors (normalised in place, with their
float64 norms), the archived flags and branch codes, grouped by dimension so the
dimension guard stays exact. No row text is kept: the rows that win are read afresh.

The cache follows the database through the change log the entry triggers keep (schema
``m007``): a store whose counter moved reads the slugs logged since its cached sequence
number and re-reads just those rows, so one write anywhere costs a few primary-key
lookups, never a reload. A full load happens on first use, when the log no longer reaches
back to the cached state (pruned), or when so many rows changed that reloading is cheaper.
This process's own writes need not even that: ``apply_own`` puts the rows a committed
write left straight into the matrix when nobody else wrote the store in between.
The matrix itself is ``matrix.StoreMatrix``; ranking over it is ``scoring`` (screened in
float32, then recomputed exactly in float64 from the stored BLOBs of every row that can
reach the result, so caching and float32 never change a result).

Given a ``SnapshotPlace``, a store's first use in a process maps the shared snapshot other
processes wrote (``vector_snapshot``) and catches up from the log from its sequence number
on; a full load, or a catch-up far past the snapshot, queues a fresh one for the store.
Before each use of a mapped matrix the cache checks that nobody waits to shorten or write
its file (touching a page past the end would kill the process with SIGBUS; the file's read
lease shows the wait) and reloads if somebody does: the writer proceeds once no call
holds the old matrix any more.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from thatch.frontend.store.changelog import (
    CHANGES_KEPT,
    LogPosition,
    changed_slugs,
    log_bounds,
    store_version,
)
from thatch.frontend.store.matrix import DimGroup, StoreMatrix, usable_count
from thatch.frontend.store.vector_snapshot import (
    DatabaseIdentity,
    Fingerprint,
    fingerprint,
    fingerprint_holds,
    peek_seq,
    read_snapshot,
    snapshot_path,
    write_snapshot,
)

__all__ = [
    "MatrixCache",
    "SnapshotPlace",
    "WrittenRow",
]

# Past this share of a store's rows changed since the cached state, one load is cheaper.
INCREMENTAL_SHARE = 8
INCREMENTAL_MIN = 512
# Smaller stores load in a few milliseconds: a shared snapshot would only be clutter.
SNAPSHOT_MIN_ROWS = 1000


# A row as a write left it: (slug, embedding BLOB or None when gone, archived, branch).
WrittenRow = tuple[str, bytes | None, object, str | None]


@dataclass(frozen=True)
class SnapshotPlace:
    """Where this database's shared snapshots live, and which file they must belong to."""

    directory: Path
    identity: DatabaseIdentity


class MatrixCache:
    """Per-store matrices, each brought up to date from the change log before use.

    With a ``SnapshotPlace``, a store's first use maps its shared snapshot (see
    ``vector_snapshot``) instead of loading, and full loads or long catch-ups leave a
    fresh snapshot to write once the read is over (``write_snapshots``).
    """

    def __init__(self, snapshots: SnapshotPlace | None = None) -> None:
        self._matrices: dict[str, StoreMatrix] = {}
        self._snapshots = snapshots
        self._to_write: dict[str, tuple[StoreMatrix, int, Fingerprint]] = {}
        self._unusable: set[str] = set()
        # Held while a matrix may change or is being written out: a snapshot writer thread
        # then never sees half a catch-up, and only a call that needs a matrix waits for it.
        self._guard = threading.Lock()

    def get(
        self, conn: sqlite3.Connection, store: str, load: Callable[[str], StoreMatrix]
    ) -> StoreMatrix:
        """The store's matrix as of the caller's read transaction (``load`` reads it whole)."""
        with self._guard:
            return self._get(conn, store, load)

    def _get(
        self, conn: sqlite3.Connection, store: str, load: Callable[[str], StoreMatrix]
    ) -> StoreMatrix:
        version = store_version(conn, store)
        cached = self._matrices.get(store)
        if cached is not None and not cached.intact():
            self._forget(store)
            cached = None
        if cached is not None and cached.version == version:
            return cached
        low, last = log_bounds(conn)
        high = int(last or 0)
        if cached is not None:
            if _catch_up(conn, cached, store, low, high):
                cached.version = version
                self._note_drift(conn, store, cached)
                return cached
            # Too far behind: let go of it (and of any file it maps) before the load.
            del self._matrices[store]
            self._to_write.pop(store, None)
            cached = None
        elif self._snapshots is not None:
            mapped = self._mapped(conn, store, version, high)
            # The row count is one more check that snapshot + log equal this database.
            if (
                mapped is not None
                and _catch_up(conn, mapped, store, low, high)
                and mapped.size == usable_count(conn, store)
            ):
                mapped.version = version
                self._matrices[store] = mapped
                self._note_drift(conn, store, mapped)
                return mapped
            self._unusable.add(store)  # replace it, whatever its header claims
            mapped = None  # let go of the file (and its lease) before the load
        matrix = load(store)
        matrix.seq, matrix.version = high, version
        self._matrices[store] = matrix
        if self._snapshots is not None and matrix.size >= SNAPSHOT_MIN_ROWS:
            self._to_write[store] = (matrix, high, fingerprint(conn, high))
        return matrix

    def _mapped(
        self, conn: sqlite3.Connection, store: str, version: int, high: int
    ) -> StoreMatrix | None:
        """The store's snapshot as a matrix at its own sequence number, if it is this file's."""
        assert self._snapshots is not None
        place = self._snapshots
        snapshot = read_snapshot(
            snapshot_path(place.directory, place.identity, store), place.identity, store
        )
        if snapshot is None or snapshot.seq > high or snapshot.version > version:
            return None
        if snapshot.seq == high and snapshot.version != version:
            return None
        if not fingerprint_holds(conn, snapshot.seq, snapshot.fingerprint):
            return None  # another history at this path, or the log was pruned past it
        matrix = StoreMatrix(seq=snapshot.seq, version=snapshot.version)
        matrix.snapshot_seq = snapshot.seq
        matrix.backing = snapshot.file
        matrix.branch_names = {name: code for code, name in enumerate(snapshot.branches)}
        if len(matrix.branch_names) != len(snapshot.branches):
            return None
        for mapped in snapshot.groups:
            if mapped.dim in matrix.groups:
                return None
            codes = mapped.codes[: mapped.count]
            if mapped.count and (codes.min() < 0 or codes.max() >= len(snapshot.branches)):
                return None
            matrix.groups[mapped.dim] = DimGroup.over(
                mapped.dim, mapped.count, mapped.unit, mapped.norms, mapped.archived,
                mapped.codes, mapped.slugs,
            )  # fmt: skip
        return matrix

    def _note_drift(self, conn: sqlite3.Connection, store: str, matrix: StoreMatrix) -> None:
        """Queue a fresh snapshot once the log since the last one nears what catch-up allows."""
        if self._drifted(matrix, matrix.seq):
            self._to_write[store] = (matrix, matrix.seq, fingerprint(conn, matrix.seq))

    def _drifted(self, matrix: StoreMatrix, seq: int) -> bool:
        if self._snapshots is None or matrix.size < SNAPSHOT_MIN_ROWS:
            return False
        since = seq - (matrix.snapshot_seq if matrix.snapshot_seq is not None else 0)
        allowed = min(CHANGES_KEPT, max(INCREMENTAL_MIN, matrix.size // INCREMENTAL_SHARE))
        return matrix.snapshot_seq is None or since > allowed // 2

    def holds(self, store: str) -> bool:
        """A matrix of ``store`` is cached (so a write may bring it current: ``apply_own``)."""
        return store in self._matrices

    def apply_own(
        self, store: str, before: LogPosition, after: LogPosition, rows: list[WrittenRow]
    ) -> bool:
        """Bring the store's matrix past this process's own committed write, without reading.

        ``before`` and ``after`` are the store's counter and the log's last sequence number
        read inside the write transaction, before and after its statements; ``rows`` are
        the rows it wrote, as they now are (``None`` BLOB: deleted or pending). Holding the
        write lock, nothing else changed in between, so when the matrix was current for
        this store at ``before`` (same counter), it is current at ``after`` once the rows
        are put: the next read finds the counter unchanged and reads no log. Otherwise
        (another process wrote this store first, or a fresh snapshot is due, which needs
        the read path's fingerprint) nothing changes and the next read catches up as usual.
        Call only after the commit succeeded.
        """
        with self._guard:
            matrix = self._matrices.get(store)
            if matrix is not None and not matrix.intact():
                self._forget(store)
                return False
            if (
                matrix is None
                or matrix.version != before.version
                or not matrix.seq <= before.seq < after.seq
                or self._drifted(matrix, after.seq)
            ):
                return False
            try:
                for slug, blob, archived, branch in rows:
                    matrix.put(slug, blob, archived, branch)
            except Exception:  # the write is committed: a cache must never fail it
                del self._matrices[store]  # possibly half updated: the next read loads
                return False
            matrix.version, matrix.seq = after.version, after.seq
            return True

    def snapshots_queued(self) -> bool:
        return bool(self._to_write)

    def write_snapshots(self) -> None:
        """Write the queued snapshots (after the read: never while it holds the file)."""
        with self._guard:
            self._write_queued()

    def _write_queued(self) -> None:
        queued, self._to_write = self._to_write, {}
        if self._snapshots is None:
            return
        place = self._snapshots
        for store, (matrix, seq, log_fingerprint) in queued.items():
            if self._matrices.get(store) is not matrix or matrix.seq != seq:
                continue  # changed or dropped since it was queued
            if not matrix.intact():
                self._forget(store)
                continue
            path = snapshot_path(place.directory, place.identity, store)
            current = None if store in self._unusable else peek_seq(path, place.identity, store)
            self._unusable.discard(store)
            # Marked whatever happens next: a failed write is retried only after more drift.
            matrix.snapshot_seq = seq
            if current is not None and current >= seq:
                continue  # another process wrote one at least as new
            names = sorted(matrix.branch_names.items(), key=lambda item: item[1])
            groups = [
                (g.dim, g.count, g.unit, g.norms, g.archived_flags, g.branch_codes, g.slugs)
                for g in matrix.groups.values()
            ]
            write_snapshot(
                path, place.identity, store, seq, matrix.version, log_fingerprint,
                [name for name, _ in names], groups,
            )  # fmt: skip

    def _forget(self, store: str) -> None:
        """Drop a matrix whose mapped file someone waits to change, unread: the next use
        reloads it, and the snapshot at the path is replaced whatever its header says."""
        del self._matrices[store]
        self._to_write.pop(store, None)
        self._unusable.add(store)

    def clear(self) -> None:
        with self._guard:
            self._matrices.clear()
            self._to_write.clear()


def _catch_up(
    conn: sqlite3.Connection, matrix: StoreMatrix, store: str, low: int | None, high: int
) -> bool:
    """Apply the logged changes since ``matrix.seq``; False when a full load is needed."""
    if high < matrix.seq:
        return False  # the log went backwards: not the file this matrix was read from
    if high > matrix.seq and (low is None or low > matrix.seq + 1):
        return False  # entries after matrix.seq were pruned
    slugs = changed_slugs(conn, store, matrix.seq)
    if len(slugs) > max(INCREMENTAL_MIN, matrix.size // INCREMENTAL_SHARE):
        return False
    for slug in slugs:
        row = conn.execute(
            "SELECT archived, branch, embedding FROM entries WHERE slug = ? AND store = ?",
            (slug, store),
        ).fetchone()
        if row is None:
            matrix.drop(slug)
        else:
            matrix.put(slug, row[2], row[0], row[1])
    matrix.seq = high
    return True
