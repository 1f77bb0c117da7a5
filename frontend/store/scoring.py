"""Ranking over a ``StoreMatrix``: screen in float32, score exactly in float64.

Scores are screened in float32 against the cached unit vectors, then recomputed exactly
in float64 from the stored BLOBs of every row that can reach the result (``SCREEN_MARGIN``
covers float32's error), so caching and float32 never change a result.
"""

from __future__ import annotations

import itertools
import os
import threading

import numpy as np
import numpy.typing as npt

from thatch.frontend.store.matrix import F32, F64, DimGroup, Indices
from thatch.frontend.store.vectors import FLOAT32_LE

__all__ = [
    "PARALLEL_ROWS",
    "SCREEN_MARGIN",
    "candidates_above",
    "exact_scores",
    "fused_candidates",
    "pair_scores",
    "screen_scores",
    "top_candidates",
]

# float32 screening may misjudge a cosine by ~1e-6; anything this close is re-checked in float64.
SCREEN_MARGIN = 1e-4


# Scans of at least this many rows are split across threads (below, starting them costs more).
PARALLEL_ROWS = 32_768


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
    # Row by row (einsum), not ``@``: BLAS's gemv sums a row differently by its place in
    # the batch (rows in blocks of four, the rest alone), so one memory's score would
    # move in the last bit with the candidates beside it, and two paths ranking the same
    # rows (the hub's exact scan and its HNSW screen, the hub and the replica) could tell
    # a tie apart differently.
    dots = np.einsum("ij,j->i", raw64, query64)
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
