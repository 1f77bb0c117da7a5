"""One store's vectors for ranking: ``StoreMatrix`` (per dimension, a ``DimGroup``).

Only what ranking needs: the slugs, one L2-normalised float32 copy of the vectors
(normalised in place, with their float64 norms), the archived flags and branch codes,
grouped by dimension so the dimension guard stays exact. No row text is kept: the rows
that win are read afresh. ``load_matrix`` reads a store whole; ``matrix_cache`` keeps
matrices current from the change log, and ``scoring`` ranks over them.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from thatch.frontend.store.rows import USABLE
from thatch.frontend.store.vector_snapshot import MappedFile
from thatch.frontend.store.vectors import FLOAT32_LE

__all__ = [
    "F32",
    "F64",
    "LOAD_CHUNK_ROWS",
    "NO_BRANCH",
    "DimGroup",
    "Indices",
    "StoreMatrix",
    "load_matrix",
    "usable_count",
]

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
Indices = npt.NDArray[np.intp]

NO_BRANCH = 0

LOAD_CHUNK_ROWS = 2048


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
        """Every row can be touched: no mapped file behind it, or one nobody waits to change."""
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
    count = usable_count(conn, store)
    # Room for a few writes before the arrays grow; untouched pages cost no memory.
    matrix = StoreMatrix(capacity=count + count // 16 + 16)
    cursor = conn.execute(
        f"SELECT slug, archived, branch, embedding FROM entries WHERE store = ? AND {USABLE}",
        (store,),
    )
    while rows := cursor.fetchmany(LOAD_CHUNK_ROWS):
        matrix.add_rows(rows)
    return matrix


def usable_count(conn: sqlite3.Connection, store: str) -> int:
    (count,) = conn.execute(
        f"SELECT count(*) FROM entries WHERE store = ? AND {USABLE}", (store,)
    ).fetchone()
    return int(count)
