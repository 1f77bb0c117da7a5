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
Scores are screened in float32, then recomputed exactly in float64 from the stored BLOBs
of every row that can reach the result, so caching and float32 never change a result.

Given a ``SnapshotPlace``, a store's first use in a process maps the shared snapshot other
processes wrote (``vector_snapshot``) and catches up from the log from its sequence number
on; a full load, or a catch-up far past the snapshot, queues a fresh one for the store.
Before each use of a mapped matrix the cache checks that its file was not shortened
(touching a page past the end would kill the process with SIGBUS) and reloads if it was.
"""

from __future__ import annotations

import itertools
import os
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from thatch.frontend.store.changelog import (
    CHANGES_KEPT,
    LogPosition,
    changed_slugs,
    log_bounds,
    store_version,
)
from thatch.frontend.store.rows import USABLE
from thatch.frontend.store.vector_snapshot import (
    DatabaseIdentity,
    Fingerprint,
    MappedFile,
    fingerprint,
    fingerprint_holds,
    peek_seq,
    read_snapshot,
    snapshot_path,
    write_snapshot,
)
from thatch.frontend.store.vectors import FLOAT32_LE

# float32 screening may misjudge a cosine by ~1e-6; anything this close is re-checked in float64.
SCREEN_MARGIN = 1e-4
DUPLICATE_BLOCK_ROWS = 1024
# Scans of at least this many rows are split across threads (below, starting them costs more).
PARALLEL_ROWS = 32_768
LOAD_CHUNK_ROWS = 2048
# Past this share of a store's rows changed since the cached state, one load is cheaper.
INCREMENTAL_SHARE = 8
INCREMENTAL_MIN = 512
NO_BRANCH = 0
# Smaller stores load in a few milliseconds: a shared snapshot would only be clutter.
SNAPSHOT_MIN_ROWS = 1000

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
Indices = npt.NDArray[np.intp]


class DimGroup:
    """The rows of one store whose vectors have one dimension, in preallocated arrays.

    Rows ``[0, count)`` are live; removal moves the last row into the hole, so positions
    change: callers map rows back to slugs through ``slugs`` right after a query.
    """

    def __init__(self, dim: int, capacity: int) -> None:
        self.dim = dim
        self.count = 0
        self.unit: F32 = np.empty((max(capacity, 1), dim), dtype=np.float32)
        self.norms: F64 = np.empty(max(capacity, 1), dtype=np.float64)
        self.archived_flags = np.empty(max(capacity, 1), dtype=bool)
        self.branch_codes = np.empty(max(capacity, 1), dtype=np.int32)
        self.slugs: list[str] = []

    @classmethod
    def over(
        cls,
        dim: int,
        count: int,
        unit: F32,
        norms: F64,
        archived: npt.NDArray[np.bool_],
        codes: npt.NDArray[np.int32],
        slugs: list[str],
    ) -> DimGroup:
        """A group over arrays it does not allocate (a mapped snapshot's, ``capacity`` rows)."""
        group = cls.__new__(cls)
        group.dim, group.count = dim, count
        group.unit, group.norms = unit, norms
        group.archived_flags, group.branch_codes = archived, codes
        group.slugs = slugs
        return group

    @property
    def vectors(self) -> F32:
        return self.unit[: self.count]

    @property
    def archived(self) -> npt.NDArray[np.bool_]:
        return self.archived_flags[: self.count]

    @property
    def branches(self) -> npt.NDArray[np.int32]:
        return self.branch_codes[: self.count]

    def _reserve(self, extra: int) -> None:
        needed = self.count + extra
        capacity = len(self.norms)
        if needed <= capacity:
            return
        capacity = max(needed, capacity + capacity // 2 + 16)
        for name in ("unit", "norms", "archived_flags", "branch_codes"):
            old = getattr(self, name)
            new = np.empty((capacity, *old.shape[1:]), dtype=old.dtype)
            new[: self.count] = old[: self.count]
            setattr(self, name, new)

    def append(self, slugs: list[str], raw: F32, archived: list[object], codes: list[int]) -> int:
        """Add rows (raw float32 vectors, as stored); returns the first new row's index."""
        start = self.count
        size = len(slugs)
        self._reserve(size)
        stop = start + size
        self._write(start, stop, raw)
        self.archived_flags[start:stop] = [bool(flag) for flag in archived]  # any SQLite value
        self.branch_codes[start:stop] = codes
        self.slugs.extend(slugs)
        self.count = stop
        return start

    def replace(self, row: int, raw: F32, archived: object, code: int) -> None:
        self._write(row, row + 1, raw.reshape(1, -1))
        self.archived_flags[row] = bool(archived)
        self.branch_codes[row] = code

    def remove(self, row: int) -> str | None:
        """Drop ``row``; returns the slug moved into its place (None if it was the last)."""
        last = self.count - 1
        moved = None
        if row != last:
            self.unit[row] = self.unit[last]
            self.norms[row] = self.norms[last]
            self.archived_flags[row] = self.archived_flags[last]
            self.branch_codes[row] = self.branch_codes[last]
            moved = self.slugs[row] = self.slugs[last]
        self.slugs.pop()
        self.count = last
        return moved

    def _write(self, start: int, stop: int, raw: F32) -> None:
        """Normalise ``raw`` into rows [start, stop): zero rows for zero or non-finite ones.

        A float64 sum of float32 squares cannot overflow, so the norm is finite exactly
        when every value is: one pass finds both.
        """
        with np.errstate(all="ignore"):  # a stored signalling NaN must not warn
            norms = np.sqrt(np.einsum("ij,ij->i", raw, raw, dtype=np.float64))
            usable = np.isfinite(norms) & (norms > 0)
            norms[~usable] = 0.0
            self.norms[start:stop] = norms
            target = self.unit[start:stop]
            # Divided in float64 (a tiny norm's reciprocal overflows float32), stored float32.
            np.divide(raw, np.where(usable, norms, 1.0)[:, None], out=target, casting="unsafe")
            target[~usable] = 0.0


@dataclass
class StoreMatrix:
    """What ranking one store needs, valid for the log sequence and counter it was read at."""

    groups: dict[int, DimGroup] = field(default_factory=dict)
    branch_names: dict[str | None, int] = field(default_factory=lambda: {None: NO_BRANCH})
    seq: int = 0
    version: int = 0
    capacity: int = 0
    # The change-log sequence number of the shared snapshot this matrix came from or wrote.
    snapshot_seq: int | None = None
    # The mapped snapshot file this matrix's arrays may still view.
    backing: MappedFile | None = None
    _where: dict[str, tuple[int, int]] | None = None

    @property
    def where(self) -> dict[str, tuple[int, int]]:
        """slug → (dim, row); built on first need (a store that is only searched never does)."""
        if self._where is None:
            self._where = {
                slug: (dim, row)
                for dim, group in self.groups.items()
                for row, slug in enumerate(group.slugs)
            }
        return self._where

    @property
    def size(self) -> int:
        return sum(group.count for group in self.groups.values())

    def intact(self) -> bool:
        """Every row can be touched: no mapped file behind it, or one still of its size."""
        return self.backing is None or self.backing.intact()

    def code(self, branch: str | None) -> int:
        found = self.branch_names.get(branch)
        if found is None:
            found = self.branch_names[branch] = len(self.branch_names)
        return found

    def branch_mask(self, group: DimGroup, branch: str) -> npt.NDArray[np.bool_]:
        """Rows without a branch or on ``branch``."""
        codes = group.branches
        code = self.branch_names.get(branch)
        mask = codes == NO_BRANCH
        return mask if code is None else mask | (codes == code)

    def group_for(self, dim: int, capacity: int = 0) -> DimGroup:
        group = self.groups.get(dim)
        if group is None:
            group = self.groups[dim] = DimGroup(dim, capacity)
        return group

    def put(self, slug: str, blob: object, archived: object, branch: str | None) -> None:
        """The row as it is now: added, replaced or (unusable BLOB) dropped."""
        vector = _usable(blob)
        if vector is None:
            self.drop(slug)
            return
        dim = vector.size
        placed = self.where.get(slug)
        if placed is not None and placed[0] == dim:
            self.groups[dim].replace(placed[1], vector, archived, self.code(branch))
            return
        if placed is not None:
            self.drop(slug)
        group = self.group_for(dim, capacity=16)
        row = group.append([slug], vector.reshape(1, -1), [archived], [self.code(branch)])
        self.where[slug] = (dim, row)

    def drop(self, slug: str) -> None:
        placed = self.where.pop(slug, None)
        if placed is None:
            return
        dim, row = placed
        moved = self.groups[dim].remove(row)
        if moved is not None:
            self.where[moved] = (dim, row)

    def add_rows(self, rows: list[tuple[str, object, str | None, bytes]]) -> None:
        """Bulk add ``(slug, archived, branch, blob)`` rows of usable BLOBs (a load chunk)."""
        by_dim: dict[int, list[tuple[str, object, str | None, bytes]]] = {}
        for row in rows:
            by_dim.setdefault(len(row[3]) // 4, []).append(row)
        for dim, same in by_dim.items():
            slugs, flags, branches, blobs = zip(*same, strict=True)
            raw = np.frombuffer(b"".join(blobs), dtype=FLOAT32_LE).reshape(len(same), dim)
            group = self.group_for(dim, capacity=self.capacity)
            group.append(
                list(slugs), raw.astype(np.float32, copy=False), list(flags),
                [self.code(branch) for branch in branches],
            )  # fmt: skip
        self._where = None


def _usable(blob: object) -> F32 | None:
    if not isinstance(blob, bytes) or len(blob) == 0 or len(blob) % 4 != 0:
        return None
    return np.frombuffer(blob, dtype=FLOAT32_LE).astype(np.float32)


def load_matrix(conn: sqlite3.Connection, store: str) -> StoreMatrix:
    """Every usable row of the store, streamed in chunks into preallocated arrays.

    Only ranking columns are read, and never more than one chunk of BLOBs is alive, so a
    load peaks at one copy of the vectors plus a chunk.
    """
    count = _usable_count(conn, store)
    # Room for a few writes before the arrays grow; untouched pages cost no memory.
    matrix = StoreMatrix(capacity=count + count // 16 + 16)
    cursor = conn.execute(
        f"SELECT slug, archived, branch, embedding FROM entries WHERE store = ? AND {USABLE}",
        (store,),
    )
    while rows := cursor.fetchmany(LOAD_CHUNK_ROWS):
        matrix.add_rows(rows)
    return matrix


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
        if cached is not None and _catch_up(conn, cached, store, low, high):
            cached.version = version
            self._note_drift(conn, store, cached)
            return cached
        if cached is None and self._snapshots is not None:
            mapped = self._mapped(conn, store, version, high)
            # The row count is one more check that snapshot + log equal this database.
            if (
                mapped is not None
                and _catch_up(conn, mapped, store, low, high)
                and mapped.size == _usable_count(conn, store)
            ):
                mapped.version = version
                self._matrices[store] = mapped
                self._note_drift(conn, store, mapped)
                return mapped
            self._unusable.add(store)  # replace it, whatever its header claims
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
        """Drop a matrix whose mapped file was shortened, unread: the next use reloads it,
        and the snapshot at the path is replaced whatever its header says."""
        del self._matrices[store]
        self._to_write.pop(store, None)
        self._unusable.add(store)

    def clear(self) -> None:
        with self._guard:
            self._matrices.clear()
            self._to_write.clear()


def _usable_count(conn: sqlite3.Connection, store: str) -> int:
    (count,) = conn.execute(
        f"SELECT count(*) FROM entries WHERE store = ? AND {USABLE}", (store,)
    ).fetchone()
    return int(count)


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


# -- scoring ---------------------------------------------------------------------------


def _decode64(blobs: list[bytes], dim: int) -> F64:
    """Stored BLOBs as float64 rows; rows with a non-finite value become zero rows."""
    raw = np.frombuffer(b"".join(blobs), dtype=FLOAT32_LE).reshape(len(blobs), dim)
    finite = np.all(np.isfinite(raw), axis=1)
    clean = np.where(finite[:, None], raw, np.float32(0.0))  # before any arithmetic
    return clean.astype(np.float64)


def exact_scores(blobs: list[bytes], query: F32) -> F64:
    """float64 cosine of the query against stored BLOBs of its dimension; 0 where a norm is 0."""
    query64 = query.astype(np.float64)
    query_norm = float(np.linalg.norm(query64))
    if query_norm == 0.0 or not blobs:
        return np.zeros(len(blobs), dtype=np.float64)
    raw64 = _decode64(blobs, query.size)
    norms = np.sqrt(np.einsum("ij,ij->i", raw64, raw64)) * query_norm
    dots = raw64 @ query64
    return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)


def screen_scores(group: DimGroup, query: F32) -> F32:
    """float32 cosine of the query against every row of the group (screening only)."""
    query64 = query.astype(np.float64)
    query_norm = float(np.linalg.norm(query64))
    if query_norm == 0.0:
        return np.zeros(group.count, dtype=np.float32)
    unit_query = (query64 / query_norm).astype(np.float32)
    # Row dot products (``_scan``), not ``@``: BLAS's threaded gemv waits for a second
    # core, and with several agents busy it took 15 ms where one core takes 2 (10k rows).
    # A float32 sum over 384 unit terms errs by < 384·2⁻²⁴ ≈ 2.3e-5, inside SCREEN_MARGIN.
    vectors = group.vectors
    scores: F32 = np.empty(len(vectors), dtype=np.float32)
    chunks = _scan_chunks(len(vectors))
    # A big scan is memory-bound on one core (100k rows: 17 ms); einsum releases the GIL,
    # so plain threads split it (9-11 ms on 2 cores) and, unlike BLAS's pool, never spin
    # waiting for a busy core: the worst case is the one-core time.
    threads = [
        threading.Thread(target=_scan, args=(vectors[a:b], unit_query, scores[a:b]))
        for a, b in chunks[1:]
    ]
    for thread in threads:
        thread.start()
    first, stop = chunks[0]
    _scan(vectors[first:stop], unit_query, scores[first:stop])
    for thread in threads:
        thread.join()
    return scores


def _scan(vectors: F32, query: F32, out: F32) -> None:
    # numpy >= 2 runs one single-threaded BLAS sdot per row: memory-bound like einsum
    # but with less arithmetic per byte (100k rows on one AVX2 core: ~12 ms, einsum ~14.5).
    if _VECDOT is not None:
        _VECDOT(vectors, query, out=out)
    else:
        np.einsum("ij,j->i", vectors, query, out=out)


_VECDOT = getattr(np, "vecdot", None)


def _scan_chunks(rows: int) -> list[tuple[int, int]]:
    """Row ranges for one scan: one below PARALLEL_ROWS, else one per usable CPU (<= 4)."""
    if rows < PARALLEL_ROWS:
        return [(0, rows)]
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    bounds = np.linspace(0, rows, min(cpus, 4) + 1).astype(int)
    return [(int(a), int(b)) for a, b in itertools.pairwise(bounds.tolist())]


def top_candidates(group: DimGroup, query: F32, mask: npt.NDArray[np.bool_], limit: int) -> Indices:
    """Rows (of the group) that may be among the best ``limit`` by exact score."""
    if limit <= 0:
        return np.zeros(0, dtype=np.intp)
    # Unscoped recalls (the common case) skip two gathers over the whole group.
    eligible = None if group.count > limit and mask.all() else np.flatnonzero(mask)
    if eligible is not None and eligible.size <= limit:
        return eligible
    scores = screen_scores(group, query)
    screened = scores if eligible is None else scores[eligible]
    above = screened >= _kth_largest(screened, limit) - SCREEN_MARGIN
    result: Indices = np.flatnonzero(above) if eligible is None else eligible[above]
    return result


def fused_candidates(
    group: DimGroup,
    query: F32,
    mask: npt.NDArray[np.bool_],
    limit: int,
    lifts: dict[int, float],
) -> Indices:
    """Rows that may be among the best ``limit`` by exact score plus their lift (row → a
    lexical bonus ≥ 0, docs/database.md §ranking); rows without a lift rank by score."""
    if limit <= 0:
        return np.zeros(0, dtype=np.intp)
    # Unscoped recalls (the common case) skip two gathers over the whole group.
    eligible = None if group.count > limit and mask.all() else np.flatnonzero(mask)
    if eligible is not None and eligible.size <= limit:
        return eligible
    fused = screen_scores(group, query)
    rows = np.fromiter(lifts.keys(), dtype=np.intp, count=len(lifts))
    fused[rows] += np.fromiter(lifts.values(), dtype=np.float32, count=len(lifts))
    screened = fused if eligible is None else fused[eligible]
    above = screened >= _kth_largest(screened, limit) - SCREEN_MARGIN
    result: Indices = np.flatnonzero(above) if eligible is None else eligible[above]
    return result


def _kth_largest(values: F32, k: int) -> float:
    """The ``k``-th largest of ``values`` (1 <= k < size).

    The ``k``-th largest of a prefix bounds it from below, so one comparison pass leaves a
    few hundred values to select from instead of the whole group (100k rows: 0.6 -> 0.1 ms).
    """
    prefix = values[: max(64 * k, 4096)]
    if prefix.size < values.size:
        bound = np.partition(prefix, prefix.size - k)[prefix.size - k]
        values = values[values >= bound]
    return float(np.partition(values, values.size - k)[values.size - k])


def candidates_above(
    group: DimGroup, query: F32, mask: npt.NDArray[np.bool_], threshold: float
) -> Indices:
    """Masked rows whose exact cosine may reach ``threshold``."""
    eligible = np.flatnonzero(mask)
    if eligible.size == 0:
        return eligible
    screened = screen_scores(group, query)[eligible]
    result: Indices = eligible[screened >= threshold - SCREEN_MARGIN]
    return result


def candidate_pairs(
    group: DimGroup, mask: npt.NDArray[np.bool_], threshold: float
) -> tuple[Indices, Indices]:
    """Pairs ``(i, j)`` of masked group rows, i < j, whose exact cosine may reach threshold.

    One matrix product over the store, computed in row blocks so 5,000+ rows never need a
    full n×n float32 matrix at once.
    """
    rows = np.flatnonzero(mask)
    count = rows.size
    empty = np.zeros(0, dtype=np.intp)
    if count < 2:
        return empty, empty
    unit = group.vectors[rows]
    found_i: list[Indices] = []
    found_j: list[Indices] = []
    for start in range(0, count, DUPLICATE_BLOCK_ROWS):
        stop = min(start + DUPLICATE_BLOCK_ROWS, count)
        # Only columns from ``start`` on: pairs (i, j) with i < j, so half the product.
        block = unit[start:stop] @ unit[start:].T
        local_i, local_j = np.nonzero(block >= threshold - SCREEN_MARGIN)
        absolute_i = local_i + start
        absolute_j = local_j + start
        upper = absolute_j > absolute_i
        found_i.append(absolute_i[upper])
        found_j.append(absolute_j[upper])
    return rows[np.concatenate(found_i)], rows[np.concatenate(found_j)]


def pair_scores(first: list[bytes], second: list[bytes], dim: int) -> F64:
    """Exact float64 cosines of BLOB pairs (same dimension); 0 where a norm is 0."""
    if not first:
        return np.zeros(0, dtype=np.float64)

    left, right = _decode64(first, dim), _decode64(second, dim)
    dots = np.einsum("ij,ij->i", left, right)
    norms = np.sqrt(np.einsum("ij,ij->i", left, left)) * np.sqrt(
        np.einsum("ij,ij->i", right, right)
    )
    return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)
