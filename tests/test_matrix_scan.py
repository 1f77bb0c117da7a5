"""The screening scan: split across threads for big groups, the same scores as one pass."""

from __future__ import annotations

import itertools
import os

import numpy as np

from thatch.frontend.store import scoring
from thatch.frontend.store.matrix import DimGroup
from thatch.frontend.store.scoring import PARALLEL_ROWS, screen_scores


def group_of(rows: int, dim: int = 24) -> DimGroup:
    rng = np.random.default_rng(rows)
    unit = rng.normal(size=(rows, dim)).astype(np.float32)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    return DimGroup.over(
        dim,
        rows,
        unit,
        np.ones(rows),
        np.zeros(rows, dtype=bool),
        np.zeros(rows, dtype=np.int32),
        [f"m{i}" for i in range(rows)],
    )


def test_chunks_cover_every_row_once() -> None:
    for rows in (0, 1, PARALLEL_ROWS - 1, PARALLEL_ROWS, 100_003):
        chunks = scoring._scan_chunks(rows)
        assert chunks[0][0] == 0 and chunks[-1][1] == rows
        assert all(a[1] == b[0] for a, b in itertools.pairwise(chunks))
        assert len(chunks) == 1 or rows >= PARALLEL_ROWS


def test_split_scan_equals_one_pass() -> None:
    group = group_of(PARALLEL_ROWS + 1_001)
    assert len(scoring._scan_chunks(group.count)) == min(len(os.sched_getaffinity(0)), 4)
    query = np.random.default_rng(1).normal(size=group.dim).astype(np.float32)
    unit_query = (query / np.linalg.norm(query.astype(np.float64))).astype(np.float32)
    expected = np.empty(group.count, dtype=np.float32)
    scoring._scan(group.vectors, unit_query, expected)  # one pass over every row
    np.testing.assert_array_equal(screen_scores(group, query), expected)
