"""The reference answer for store searches: every usable row read now, scored in float64."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from thatch.frontend.store.vectors import cosine


def brute_force(
    path: Path, stores: list[str], query: np.ndarray, **options: object
) -> list[tuple[str, str, float]]:
    """(store, slug, score) of the best rows, as any search with ``options`` must return."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT store, slug, embedding, archived, branch FROM entries"
        ).fetchall()
    finally:
        conn.close()
    branch = options.get("branch")
    scored = []
    for store, slug, blob, archived, row_branch in rows:
        if store not in stores or not isinstance(blob, bytes) or len(blob) != 4 * query.size:
            continue
        if archived and not options.get("include_archived"):
            continue
        if branch is not None and row_branch is not None and row_branch != branch:
            continue
        vector = np.frombuffer(blob, dtype="<f4")
        score = cosine(vector, query) if np.all(np.isfinite(vector)) else 0.0
        scored.append((-score, store, slug))
    scored.sort()
    limit = int(options.get("limit", 10))  # type: ignore[call-overload]
    return [(store, slug, -neg) for neg, store, slug in scored[:limit]]
