"""Duplicate candidates kept at write time (docs/database.md §duplicate-candidates).

Each memory, once compared with its store (at its write, or by the backfill for memories
written before schema m010 or by another release), stores its ``NEIGHBOURS`` nearest live
memories with cosine ≥ ``FLOOR`` in ``_thatch_dup_pairs`` (sorted slugs, exact float64
score). Readers filter by the threshold in force and by the verdicts in ``dedup_pairs``,
so a threshold or model change never needs a recomputation. Triggers (schema m010) clear
a memory's pairs and its checked mark whenever its vector, archived flag or key changes,
whoever writes. The cap bounds a cluster of thousands of near-copies to ``NEIGHBOURS``
rows per memory instead of n²/2 pairs: the count is of memories with a candidate, and of
clusters, never of pairs.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from thatch.frontend.store.changelog import changed_slugs, log_bounds
from thatch.frontend.store.matrix import StoreMatrix
from thatch.frontend.store.memory import DuplicatePair
from thatch.frontend.store.migrations.duplicates import (
    DUP_PAIRS_TABLE,
    DUP_SCANNED_TABLE,
    DUP_UNCHECKED_TABLE,
)
from thatch.frontend.store.rows import USABLE, counted
from thatch.frontend.store.scoring import SCREEN_MARGIN, pair_scores

__all__ = [
    "CHUNK_ROWS",
    "COUNTED_UP_TO",
    "FLOOR",
    "NEIGHBOURS",
    "PAIRS_GROUPED",
    "ClusterPage",
    "DuplicatePage",
    "DuplicateProgress",
    "DuplicateSummary",
]

# Pairs below this cosine are not kept: no registered model's duplicate threshold is lower
# (all-MiniLM-L6-v2: 0.66); a lower threshold asked for is read as this one.
FLOOR = 0.5
# Nearest neighbours kept per compared memory.
NEIGHBOURS = 20
# Memories compared per backfill chunk: 64 rows × 100k memories × 384 dims is ~50 ms of
# matrix product outside any lock, and a write transaction of at most 64 × 20 rows.
CHUNK_ROWS = 64
# A page of find_duplicates: clusters per page, pairs shown per cluster.
PAGE_CLUSTERS = 20
CLUSTER_PAIRS = 20
# Memories with candidates the hygiene report counts exactly; past it, "more than".
COUNTED_UP_TO = 1000
# Candidate pairs a page of clusters is made from, the best first: a store of 100k
# near-copies holds 2M pairs, and grouping them all took 9 s for every page.
PAIRS_GROUPED = 10_000


@dataclass(frozen=True)
class DuplicateProgress:
    """``checked`` of ``total`` embedded memories compared with their store so far
    (archived included: checking one only marks it).

    Counted exactly, or up to a cap (``progress_up_to``, as the session start and the UI
    count): with every memory checked, nothing is counted (0 of 0); else ``total`` stops
    past the cap (then ``total_more``: more than ``total``) and so does ``total -
    checked``, the unchecked ones (then ``unchecked_more``)."""

    checked: int
    total: int
    total_more: bool = False
    unchecked_more: bool = False

    @property
    def complete(self) -> bool:
        return self.checked >= self.total


@dataclass(frozen=True)
class DuplicateSummary:
    """``memories``: live memories with at least one unreviewed candidate at the threshold;
    ``checked`` of ``total`` live embedded memories compared with their store so far;
    ``more``: more than ``memories`` (which is then ``COUNTED_UP_TO``).

    Counted up to a cap (``progress_up_to``, the session start's): with every memory
    checked, nothing is counted (0 of 0); else ``total`` stops past the cap (then
    ``total_more``: more than ``total``) and so does ``total - checked``, the unchecked
    ones (then ``unchecked_more``)."""

    memories: int
    checked: int
    total: int
    more: bool = False
    total_more: bool = False
    unchecked_more: bool = False

    @property
    def complete(self) -> bool:
        return self.checked >= self.total


@dataclass(frozen=True)
class ClusterPage:
    """One cluster: its size (distinct memories), its best pairs, how many more it has."""

    size: int
    pairs: list[DuplicatePair]
    more_pairs: int = 0


@dataclass(frozen=True)
class DuplicatePage:
    """Clusters ``offset`` … ``offset + len(clusters)`` of ``total_clusters``, and the
    check's progress (``checked`` … ``unchecked_more``, as ``DuplicateProgress``)."""

    clusters: list[ClusterPage]
    offset: int
    total_clusters: int
    checked: int
    total: int
    # More unreviewed pairs than ``PAIRS_GROUPED``: the clusters are those of the best
    # ones, and reviewing them brings up the rest.
    partial: bool = False
    total_more: bool = False
    unchecked_more: bool = False

    @property
    def progress(self) -> DuplicateProgress:
        return DuplicateProgress(self.checked, self.total, self.total_more, self.unchecked_more)

    @property
    def next_offset(self) -> int | None:
        end = self.offset + len(self.clusters)
        return end if end < self.total_clusters else None

    @property
    def complete(self) -> bool:
        return self.checked >= self.total


def _usable(alias: str = "") -> str:
    prefix = f"{alias}." if alias else ""
    usable = USABLE.replace("embedding", prefix + "embedding")
    return f"{prefix}store = ? AND {usable}"


def _live(alias: str = "") -> str:
    prefix = f"{alias}." if alias else ""
    usable = USABLE.replace("embedding", prefix + "embedding")
    return f"{prefix}store = ? AND {prefix}archived = 0 AND {usable}"


def unchecked(
    conn: sqlite3.Connection, store: str, limit: int, after: int = 0
) -> tuple[list[str], int]:
    """Up to ``limit`` embedded memories of ``store`` not checked yet, from rowid
    ``after`` on, and the rowid to continue from (a backfill never rescans what it did)."""
    rows = conn.execute(
        f"SELECT e.rowid, e.slug FROM entries e WHERE {_usable('e')} AND e.rowid > ? "
        f"AND NOT EXISTS (SELECT 1 FROM {DUP_SCANNED_TABLE} s "
        "WHERE s.store = e.store AND s.slug = e.slug) ORDER BY e.rowid LIMIT ?",
        (store, after, limit),
    ).fetchall()
    return [row[1] for row in rows], (int(rows[-1][0]) if rows else after)


def progress(conn: sqlite3.Connection, store: str) -> tuple[int, int]:
    """(checked, total) embedded memories of ``store``, archived included (checking an
    archived one only marks it): two index-only counts, no pass over the rows, because
    the triggers keep every checked mark on a row that is embedded as it was checked."""
    (total,) = conn.execute(
        f"SELECT count(*) FROM entries WHERE store = ? AND {USABLE}", (store,)
    ).fetchone()
    (checked,) = conn.execute(
        f"SELECT count(*) FROM {DUP_SCANNED_TABLE} WHERE store = ?", (store,)
    ).fetchone()
    return int(checked), int(total)


def progress_up_to(conn: sqlite3.Connection, store: str, up_to: int) -> DuplicateProgress:
    """The progress counted up to ``up_to`` (``DuplicateProgress``), from m031's table of
    unchecked memories: one row says whether any is unchecked (every session start of a
    store the check finished, every load of the UI's Duplicates page), and only then are
    they counted, and the embedded memories, each stopping past ``up_to``.
    Needs m031's table: where m031 has not run (a hook's open leaves it, a file opened
    read-only) the caller counts exactly instead (``progress``; ``duplicate_progress``)."""
    if (
        conn.execute(
            f"SELECT 1 FROM {DUP_UNCHECKED_TABLE} WHERE store = ? LIMIT 1", (store,)
        ).fetchone()
        is None
    ):
        return DuplicateProgress(0, 0)
    unchecked = counted(conn, f"FROM {DUP_UNCHECKED_TABLE} WHERE store = ?", (store,), up_to)
    total = counted(conn, f"FROM entries WHERE store = ? AND {USABLE}", (store,), up_to)
    total_more, unchecked_more = total > up_to, unchecked > up_to
    total, unchecked = min(total, up_to), min(unchecked, up_to)
    return DuplicateProgress(total - unchecked, total, total_more, unchecked_more)


def screen(matrix: StoreMatrix, slugs: Sequence[str]) -> dict[str, list[str]]:
    """Each slug's candidate neighbours in ``matrix`` (live rows of its dimension whose
    float32 cosine may reach ``FLOOR``), at most ``2 * NEIGHBOURS``, best first; slugs the
    matrix lacks or holds archived are left out (the caller leaves them unchecked)."""
    by_dim: dict[int, list[tuple[str, int]]] = {}
    for slug in slugs:
        placed = matrix.where.get(slug)
        if placed is not None:
            by_dim.setdefault(placed[0], []).append((slug, placed[1]))
    found: dict[str, list[str]] = {}
    keep = 2 * NEIGHBOURS
    for dim, members in by_dim.items():
        group = matrix.groups[dim]
        count = group.count
        live = ~group.archived
        rows = np.array([row for _, row in members], dtype=np.intp)
        block = group.unit[rows] @ group.unit[:count].T
        block[:, ~live] = -np.inf
        for k, (slug, row) in enumerate(members):
            if not live[row]:
                continue
            scores = block[k]
            scores[row] = -np.inf
            hits = np.flatnonzero(scores >= FLOOR - SCREEN_MARGIN)
            if hits.size > keep:
                hits = hits[np.argpartition(-scores[hits], keep - 1)[:keep]]
            hits = hits[np.argsort(-scores[hits], kind="stable")]
            found[slug] = [group.slugs[int(i)] for i in hits]
    return found


def _blobs(conn: sqlite3.Connection, store: str, slugs: Iterable[str]) -> dict[str, bytes]:
    """Current embedding of each live embedded slug (absent: gone, archived or pending)."""
    wanted = sorted(set(slugs))
    out: dict[str, bytes] = {}
    for start in range(0, len(wanted), 256):
        chunk = wanted[start : start + 256]
        marks = ", ".join("?" * len(chunk))
        for slug, blob in conn.execute(
            f"SELECT slug, embedding FROM entries WHERE {_live()} AND slug IN ({marks})",
            (store, *chunk),
        ):
            out[slug] = blob
    return out


def record(
    conn: sqlite3.Connection,
    store: str,
    seq: int,
    slugs: Sequence[str],
    candidates: dict[str, list[str]],
) -> int:
    """Inside a write transaction: store the pairs of ``slugs`` from their ``candidates``
    (screened on a matrix read at change-log position ``seq``) and mark them checked (an
    archived one just marked); returns how many memories were marked checked.

    Rows changed since ``seq`` (by any process) are read now: a changed memory being
    checked is left for later, a changed neighbour is scored from its current vector. So
    of two memories written at once, whichever is checked second sees the first.
    """
    low, high = log_bounds(conn)
    if high is not None and high > seq and (low is None or low > seq + 1):
        return 0  # the log no longer reaches back to the matrix: screen again later
    changed = set(changed_slugs(conn, store, seq))
    todo = [slug for slug in slugs if slug not in changed]
    if not todo:
        return 0
    done = {
        row[0]
        for chunk in _chunks(todo)
        for row in conn.execute(
            f"SELECT slug FROM {DUP_SCANNED_TABLE} WHERE store = ? "
            f"AND slug IN ({', '.join('?' * len(chunk))})",
            (store, *chunk),
        )
    }
    todo = [slug for slug in todo if slug not in done]
    involved = set(todo) | changed
    for slug in todo:
        involved.update(candidates.get(slug, ()))
    blobs = _blobs(conn, store, involved)
    archived = _archived(conn, store, [slug for slug in todo if slug not in blobs])
    pairs: list[tuple[str, str, str, float]] = []
    checked: list[str] = []
    for slug in todo:
        own = blobs.get(slug)
        if own is None or slug not in candidates:
            if slug in archived:  # nothing to compare, but no longer unchecked
                checked.append(slug)
            continue  # gone or pending (or missing from the matrix): not checkable now
        checked.append(slug)
        others = [o for o in candidates[slug] if o not in changed]
        others += [o for o in changed if o != slug]
        others = [o for o in others if o in blobs and len(blobs[o]) == len(own)]
        scored: list[tuple[float, str]] = []
        if others:
            dim = len(own) // 4
            scores = pair_scores([own] * len(others), [blobs[o] for o in others], dim)
            scored = [(float(s), o) for s, o in zip(scores, others, strict=True) if s >= FLOOR]
        scored.sort(key=lambda item: (-item[0], item[1]))
        for score, other in scored[:NEIGHBOURS]:
            first, second = sorted((slug, other))
            pairs.append((store, first, second, score))
    conn.executemany(
        f"INSERT OR REPLACE INTO {DUP_PAIRS_TABLE} (store, slug_a, slug_b, score) "
        "VALUES (?, ?, ?, ?)",
        pairs,
    )
    conn.executemany(
        f"INSERT OR IGNORE INTO {DUP_SCANNED_TABLE} (store, slug) VALUES (?, ?)",
        [(store, slug) for slug in checked],
    )
    return len(checked)


def _archived(conn: sqlite3.Connection, store: str, slugs: Sequence[str]) -> set[str]:
    """Which of ``slugs`` are archived embedded memories of ``store``."""
    found: set[str] = set()
    for chunk in _chunks(slugs):
        marks = ", ".join("?" * len(chunk))
        found.update(
            row[0]
            for row in conn.execute(
                f"SELECT slug FROM entries WHERE {_usable()} AND archived = 1 "
                f"AND slug IN ({marks})",
                (store, *chunk),
            )
        )
    return found


def _chunks(items: Sequence[str], size: int = 256) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


_EDGES = (
    f"FROM {DUP_PAIRS_TABLE} p WHERE p.store = ? AND p.score >= ? AND NOT EXISTS "
    "(SELECT 1 FROM dedup_pairs d WHERE d.store = p.store AND d.slug_a = p.slug_a "
    "AND d.slug_b = p.slug_b)"
)


def memories_with_candidates(
    conn: sqlite3.Connection, store: str, threshold: float, up_to: int = COUNTED_UP_TO
) -> int:
    """Live memories with at least one unreviewed candidate ≥ threshold, counted up to
    ``up_to``: more than that reads as ``up_to + 1``.

    Every pair read before the count passes ``up_to`` joins two memories already counted,
    and a check stores at most ``NEIGHBOURS`` pairs per memory: so at most
    ``NEIGHBOURS * up_to`` pairs are read, however many the store holds (counting them
    all took 3 s at every session start in a store of 100k near-copies)."""
    threshold = max(threshold, FLOOR)
    counted: set[str] = set()
    rows = conn.execute(f"SELECT p.slug_a, p.slug_b {_EDGES}", (store, threshold))
    try:
        for pair in rows:
            counted.update(pair)
            if len(counted) > up_to:
                return up_to + 1
    finally:
        rows.close()
    return len(counted)


def edges(
    conn: sqlite3.Connection, store: str, threshold: float, limit: int = -1
) -> Iterator[tuple[str, str, float]]:
    """Unreviewed candidate pairs ≥ threshold, by score descending, ties by slugs; the
    first ``limit`` (-1: all) read from the score index, not sorted whole."""
    threshold = max(threshold, FLOOR)
    yield from conn.execute(
        f"SELECT p.slug_a, p.slug_b, p.score {_EDGES} "
        "ORDER BY p.score DESC, p.slug_a, p.slug_b LIMIT ?",
        (store, threshold, limit),
    )


class _Components:
    """Union-find over slugs (memory: one entry per memory in a candidate pair)."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, slug: str) -> str:
        parent = self.parent.setdefault(slug, slug)
        root = slug
        while parent != root:
            root, parent = parent, self.parent[parent]
        while slug != root:  # path compression
            self.parent[slug], slug = root, self.parent[slug]
        return root

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def page(
    conn: sqlite3.Connection,
    store: str,
    threshold: float,
    offset: int,
    clusters: int = PAGE_CLUSTERS,
    pairs_per_cluster: int = CLUSTER_PAIRS,
    grouped: int = PAIRS_GROUPED,
) -> tuple[list[tuple[int, list[tuple[str, str, float]], int]], int, bool]:
    """Clusters ``offset``… (at most ``clusters``) as (size, best pairs, pairs not shown),
    the number of clusters, and whether pairs were left out: the clusters are those of
    the best ``grouped`` pairs. Clusters rank by their best pair, as one pass over the
    pairs in score order finds them."""
    best = list(edges(conn, store, threshold, grouped + 1))
    partial = len(best) > grouped
    del best[grouped:]
    components = _Components()
    for a, b, _ in best:
        components.union(a, b)
    sizes: dict[str, int] = {}
    for slug in list(components.parent):
        root = components.find(slug)
        sizes[root] = sizes.get(root, 0) + 1
    rank: dict[str, int] = {}
    shown: dict[str, list[tuple[str, str, float]]] = {}
    hidden: dict[str, int] = {}
    for a, b, score in best:
        root = components.find(a)
        position = rank.setdefault(root, len(rank))
        if not offset <= position < offset + clusters:
            continue
        kept = shown.setdefault(root, [])
        if len(kept) < pairs_per_cluster:
            kept.append((a, b, float(score)))
        else:
            hidden[root] = hidden.get(root, 0) + 1
    ordered = sorted(shown, key=lambda root: rank[root])
    found = [(sizes[root], shown[root], hidden.get(root, 0)) for root in ordered]
    return found, len(sizes), partial


def labels(conn: sqlite3.Connection, store: str, slugs: Iterable[str]) -> dict[str, str]:
    wanted = sorted(set(slugs))
    out: dict[str, str] = {}
    for chunk in _chunks(wanted):
        marks = ", ".join("?" * len(chunk))
        for slug, label in conn.execute(
            f"SELECT slug, label FROM entries WHERE store = ? AND slug IN ({marks})",
            (store, *chunk),
        ):
            out[slug] = label
    return out
