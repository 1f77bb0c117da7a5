"""Decoded, L2-normalised vector matrices, one per store, reused until the database changes.

A long-lived frontend (the MCP server) searches the same store many times; decoding every
BLOB per search is the slow part. ``MatrixCache`` keeps, per store, the usable rows grouped
by dimension (so the dimension guard stays exact: a query only meets rows of its own
length) and is reloaded when its key changes. The key is chosen by the caller: the
store's change counter, which triggers move on every change except recall telemetry.
Scores are screened in float32, then recomputed exactly in float64 for every
row that can reach the result, so caching and float32 never change a result.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from thatch.frontend.memory import Memory
from thatch.frontend.store_rows import memory_from_row
from thatch.frontend.vectors import FLOAT32_LE

# float32 screening may misjudge a cosine by ~1e-6; anything this close is re-checked in float64.
SCREEN_MARGIN = 1e-4
DUPLICATE_BLOCK_ROWS = 1024

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]


@dataclass
class DimGroup:
    """The rows of one store whose vectors have one dimension."""

    positions: list[int]  # indices into StoreMatrix.rows
    raw: F32  # (n, dim) as stored (non-finite rows zeroed)
    norms: F64  # (n,) float64 norms; 0 for zero or non-finite rows
    unit: F32  # (n, dim) raw / norm, zero rows where norm is 0
    archived: npt.NDArray[np.bool_]
    branches: list[str | None]


@dataclass
class StoreMatrix:
    """Every row of a store with a usable embedding: its columns plus the vector groups.

    ``rows`` are raw ``SELECT {COLUMNS}`` tuples; Memory objects are built only for the rows
    a query returns (building thousands per reload would cost more than the vectors).
    """

    rows: list[tuple[Any, ...]]
    slugs: list[str]
    groups: dict[int, DimGroup] = field(default_factory=dict)
    _memories: dict[int, Memory] = field(default_factory=dict)

    def memory(self, position: int) -> Memory:
        found = self._memories.get(position)
        if found is None:
            found = self._memories[position] = memory_from_row(self.rows[position])
        return found


def build_matrix(rows: list[tuple[Any, ...]]) -> StoreMatrix:
    """From ``(*columns, embedding)`` rows (slug first, archived 8th, branch 6th).

    Unusable BLOBs are skipped; rows are grouped by dimension, and each group is decoded
    with one ``frombuffer`` over the concatenated BLOBs.
    """
    matrix = StoreMatrix(rows=[], slugs=[])
    by_dim: dict[int, list[int]] = {}
    blobs: list[bytes] = []
    for row in rows:
        blob = row[-1]
        if not isinstance(blob, bytes) or len(blob) == 0 or len(blob) % 4 != 0:
            continue
        position = len(matrix.rows)
        matrix.rows.append(row[:-1])
        matrix.slugs.append(row[0])
        blobs.append(blob)
        by_dim.setdefault(len(blob) // 4, []).append(position)
    for dim, positions in by_dim.items():
        joined = b"".join(blobs[position] for position in positions)
        raw = np.frombuffer(joined, dtype=FLOAT32_LE).reshape(len(positions), dim)
        raw = raw.astype(np.float32)  # native-order, writable copy
        finite = np.all(np.isfinite(raw), axis=1)
        raw[~finite] = 0.0
        norms = np.sqrt(np.einsum("ij,ij->i", raw, raw, dtype=np.float64))
        safe = np.where(norms > 0, norms, 1.0)
        unit = (raw / safe[:, None]).astype(np.float32)
        matrix.groups[dim] = DimGroup(
            positions=positions,
            raw=raw,
            norms=norms,
            unit=unit,
            archived=np.array([bool(matrix.rows[p][7]) for p in positions], dtype=bool),
            branches=[matrix.rows[p][5] for p in positions],
        )
    return matrix


class MatrixCache:
    """Per-store matrices, each valid for the key it was loaded under."""

    def __init__(self) -> None:
        self._matrices: dict[str, tuple[Hashable, StoreMatrix]] = {}

    def get(self, store: str, key: Hashable, load: Callable[[str], StoreMatrix]) -> StoreMatrix:
        cached = self._matrices.get(store)
        if cached is not None and cached[0] == key:
            return cached[1]
        matrix = load(store)
        self._matrices[store] = (key, matrix)
        return matrix

    def clear(self) -> None:
        self._matrices.clear()


def exact_scores(group: DimGroup, rows: npt.NDArray[np.intp], query: F32) -> F64:
    """float64 cosine of the query against the given group rows; 0 where a norm is 0."""
    query64 = query.astype(np.float64)
    query_norm = float(np.linalg.norm(query64))
    if query_norm == 0.0 or rows.size == 0:
        return np.zeros(rows.size, dtype=np.float64)
    dots = group.raw[rows].astype(np.float64) @ query64
    norms = group.norms[rows] * query_norm
    return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)


def screen_scores(group: DimGroup, query: F32) -> F32:
    """float32 cosine of the query against every row of the group (screening only)."""
    query64 = query.astype(np.float64)
    query_norm = float(np.linalg.norm(query64))
    if query_norm == 0.0:
        return np.zeros(len(group.positions), dtype=np.float32)
    unit_query = (query64 / query_norm).astype(np.float32)
    scores: F32 = group.unit @ unit_query
    return scores


def top_rows(
    group: DimGroup, query: F32, mask: npt.NDArray[np.bool_], limit: int
) -> tuple[npt.NDArray[np.intp], F64]:
    """Rows (of the group) that may be among the best ``limit``, with exact scores."""
    eligible = np.flatnonzero(mask)
    if eligible.size == 0 or limit <= 0:
        return eligible, np.zeros(0, dtype=np.float64)
    if eligible.size > limit:
        screened = screen_scores(group, query)[eligible]
        kth = np.argpartition(-screened, limit - 1)[:limit]
        floor = float(screened[kth].min()) - SCREEN_MARGIN
        eligible = eligible[screened >= floor]
    return eligible, exact_scores(group, eligible, query)


def rows_above(
    group: DimGroup, query: F32, mask: npt.NDArray[np.bool_], threshold: float
) -> tuple[npt.NDArray[np.intp], F64]:
    """Rows with exact cosine ≥ threshold among the masked rows, with their scores."""
    eligible = np.flatnonzero(mask)
    if eligible.size == 0:
        return eligible, np.zeros(0, dtype=np.float64)
    screened = screen_scores(group, query)[eligible]
    eligible = eligible[screened >= threshold - SCREEN_MARGIN]
    scores = exact_scores(group, eligible, query)
    keep = scores >= threshold
    return eligible[keep], scores[keep]


def pairs_above(
    group: DimGroup, mask: npt.NDArray[np.bool_], threshold: float
) -> list[tuple[int, int, float]]:
    """Pairs ``(i, j)`` of masked group rows, i < j, with exact cosine ≥ threshold.

    One matrix product over the store, computed in row blocks so 5,000+ rows never need a
    full n×n float32 matrix at once.
    """
    rows = np.flatnonzero(mask)
    count = rows.size
    if count < 2:
        return []
    unit = group.unit[rows]
    found_i: list[npt.NDArray[np.intp]] = []
    found_j: list[npt.NDArray[np.intp]] = []
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
    first = rows[np.concatenate(found_i)]
    second = rows[np.concatenate(found_j)]
    if first.size == 0:
        return []
    dots = np.einsum(
        "ij,ij->i", group.raw[first].astype(np.float64), group.raw[second].astype(np.float64)
    )
    norms = group.norms[first] * group.norms[second]
    scores = np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)
    keep = scores >= threshold
    return [
        (int(i), int(j), float(score))
        for i, j, score in zip(first[keep], second[keep], scores[keep], strict=True)
    ]
