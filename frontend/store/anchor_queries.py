"""The Store's code-anchor rows (docs/database.md §code-anchors): written with a memory,
read for the memories a recall returns, updated by the re-check and rename passes.

A mixin, as ``UpkeepQueries``: it relies only on ``conn``, ``tx`` and ``_lock``.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from thatch.frontend.store.migrations.anchors import ANCHORS_TABLE, GONE_CHECKOUTS_TABLE
from thatch.frontend.store.migrations.links import LINKS_TABLE
from thatch.frontend.store.rows import locked
from thatch.frontend.store.transactions import Transactions

__all__ = ["Anchor", "AnchorQueries", "Key"]

Key = tuple[str, str]  # (store, slug)

# How many anchored memories a hygiene pass reads at most: it checks them under a deadline.
HYGIENE_ROWS = 5000

_FIELDS = (
    "store, slug, seq, root, path, symbol, line_start, line_end, blob, span_hash, "
    "commit_id, mtime_ns, size"
)
# Read back: what was captured, then the last stored verdict and the stat it saw.
_READ = _FIELDS + ", status, checked_mtime_ns, checked_size"
_QUALIFIED = ", ".join("a." + field.strip() for field in _READ.split(","))


@dataclass(frozen=True)
class Anchor:
    """One anchor as captured at save. ``root``: the git top level ("" outside git, then
    ``path`` is absolute); ``status`` is the last stored verdict of a re-check pass, and
    ``checked_mtime_ns``/``checked_size`` the file's stat that verdict was reached on
    (None: no stat, or none stored)."""

    store: str
    slug: str
    seq: int
    root: str
    path: str
    symbol: str | None
    line_start: int | None
    line_end: int | None
    blob: str
    span_hash: str | None
    commit_id: str | None
    mtime_ns: int | None
    size: int | None
    status: str = "fresh"
    checked_mtime_ns: int | None = None
    checked_size: int | None = None


class AnchorQueries:
    conn: sqlite3.Connection
    tx: Transactions
    _lock: threading.RLock

    def _write_anchors(
        self, conn: sqlite3.Connection, store: str, slug: str, anchors: Sequence[Anchor]
    ) -> None:
        """Replace the memory's anchors inside the caller's write transaction."""
        conn.execute(f"DELETE FROM {ANCHORS_TABLE} WHERE store = ? AND slug = ?", (store, slug))
        _reopen_asked(conn, {a.root for a in anchors if a.root})
        conn.executemany(
            f"INSERT INTO {ANCHORS_TABLE} ({_FIELDS}) VALUES "
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    store,
                    slug,
                    seq,
                    a.root,
                    a.path,
                    a.symbol,
                    a.line_start,
                    a.line_end,
                    a.blob,
                    a.span_hash,
                    a.commit_id,
                    a.mtime_ns,
                    a.size,
                )
                for seq, a in enumerate(anchors)
            ],
        )

    @locked
    def anchors_of(self, keys: Iterable[Key]) -> dict[Key, list[Anchor]]:
        """The anchors of these memories (none: absent), by key, in saved order."""
        found: dict[Key, list[Anchor]] = {}
        for store, slug in dict.fromkeys(keys):
            rows = self.conn.execute(
                f"SELECT {_READ} FROM {ANCHORS_TABLE} WHERE store = ? AND slug = ? ORDER BY seq",
                (store, slug),
            ).fetchall()
            if rows:
                found[(store, slug)] = [Anchor(*row) for row in rows]
        return found

    @locked
    def supplements_of(self, keys: Iterable[Key]) -> dict[Key, list[tuple[str, str]]]:
        """Per memory, the (slug, label) of the memories of its store it was judged to
        supplement (dedup verdict "supplement"), in either order of the pair."""
        found: dict[Key, list[tuple[str, str]]] = {}
        for store, slug in dict.fromkeys(keys):
            rows = self.conn.execute(
                "SELECT e.slug, e.label FROM dedup_pairs d JOIN entries e ON e.store = d.store "
                "AND e.slug = CASE WHEN d.slug_a = ? THEN d.slug_b ELSE d.slug_a END "
                "WHERE d.store = ? AND d.status = 'supplement' AND (d.slug_a = ? OR d.slug_b = ?) "
                "ORDER BY e.slug",
                (slug, store, slug, slug),
            ).fetchall()
            if rows:
                found[(store, slug)] = [(row[0], row[1]) for row in rows]
        return found

    def _write_links(
        self, conn: sqlite3.Connection, store: str, slug: str, targets: Sequence[str]
    ) -> None:
        """Replace the memory's links (the slugs it depends on) inside the caller's write
        transaction; a target no longer there (forgotten meanwhile) is no link."""
        conn.execute(f"DELETE FROM {LINKS_TABLE} WHERE store = ? AND slug = ?", (store, slug))
        conn.executemany(
            f"INSERT OR IGNORE INTO {LINKS_TABLE} (store, slug, target) "
            "SELECT store, ?, slug FROM entries WHERE store = ? AND slug = ? AND slug != ?",
            [(slug, store, target, slug) for target in dict.fromkeys(targets)],
        )

    @locked
    def related_of(self, keys: Iterable[Key]) -> dict[Key, list[tuple[str, str]]]:
        """Per memory, the (slug, label) of the memories of its store it depends on
        (``memory_remember``'s ``related``)."""
        found: dict[Key, list[tuple[str, str]]] = {}
        for store, slug in dict.fromkeys(keys):
            rows = self.conn.execute(
                f"SELECT e.slug, e.label FROM {LINKS_TABLE} l JOIN entries e "
                "ON e.store = l.store AND e.slug = l.target "
                "WHERE l.store = ? AND l.slug = ? ORDER BY e.slug",
                (store, slug),
            ).fetchall()
            if rows:
                found[(store, slug)] = [(row[0], row[1]) for row in rows]
        return found

    @locked
    def dependents_of(
        self, store: str, slugs: Iterable[str], limit: int = HYGIENE_ROWS
    ) -> list[str]:
        """The live memories of ``store`` that depend on any of ``slugs`` (a ``related``
        link to it, or a "supplement" verdict with it), at most ``limit``, by slug."""
        targets = set(slugs)
        found: set[str] = set()
        for target in sorted(targets):
            rows = self.conn.execute(
                f"SELECT slug FROM {LINKS_TABLE} WHERE store = ? AND target = ?", (store, target)
            )
            found.update(row[0] for row in rows)
        # Verdicts are an agent's reviews, few per store: one pass over them, not one each.
        rows = self.conn.execute(
            "SELECT slug_a, slug_b FROM dedup_pairs WHERE store = ? AND status = 'supplement'",
            (store,),
        )
        for slug_a, slug_b in rows:
            if slug_b in targets:
                found.add(slug_a)
            if slug_a in targets:
                found.add(slug_b)
        live = []
        for slug in sorted(found - targets):
            row = self.conn.execute(
                "SELECT 1 FROM entries WHERE store = ? AND slug = ? AND archived = 0",
                (store, slug),
            ).fetchone()
            if row is not None:
                live.append(slug)
                if len(live) == limit:
                    break
        return live

    @locked
    def stores_holding(self, slug: str) -> list[str]:
        """Up to 3 stores with a memory of this slug (a ``related`` label's whereabouts)."""
        rows = self.conn.execute(
            "SELECT store FROM entries WHERE slug = ? ORDER BY store LIMIT 3", (slug,)
        )
        return [row[0] for row in rows]

    @locked
    def anchored_in(self, store: str, limit: int = HYGIENE_ROWS) -> dict[str, list[Anchor]]:
        """The anchors of the store's live memories (at most ``limit`` rows), by slug."""
        rows = self.conn.execute(
            f"SELECT {_QUALIFIED} FROM {ANCHORS_TABLE} a JOIN entries e "
            "ON e.store = a.store AND e.slug = a.slug "
            "WHERE a.store = ? AND e.archived = 0 ORDER BY a.slug, a.seq LIMIT ?",
            (store, limit),
        ).fetchall()
        found: dict[str, list[Anchor]] = {}
        for row in rows:
            found.setdefault(row[1], []).append(Anchor(*row))
        return found

    @locked
    def anchors_under(self, root: str, limit: int = HYGIENE_ROWS) -> list[Anchor]:
        """The anchors of live memories in the checkout at ``root`` (at most ``limit``)."""
        rows = self.conn.execute(
            f"SELECT {_QUALIFIED} FROM {ANCHORS_TABLE} a JOIN entries e "
            "ON e.store = a.store AND e.slug = a.slug "
            "WHERE a.root = ? AND e.archived = 0 ORDER BY a.path, a.store, a.slug LIMIT ?",
            (root, limit),
        )
        return [Anchor(*row) for row in rows]

    @locked
    def set_anchor_status(self, verdicts: Sequence[tuple[Anchor, str]]) -> None:
        """Record re-check verdicts (``fresh``, ``changed``, ``unverifiable``) with the
        stat each anchor carries (``AnchorCheck.recheck`` sets it), or ``recheck``: git
        changed the file, no pass has checked it since (no stat)."""
        if not verdicts:
            return
        at = self.tx.now()
        with self.tx.write() as conn:
            conn.executemany(
                f"UPDATE {ANCHORS_TABLE} SET status = ?, checked_at = ?, checked_mtime_ns = ?, "
                "checked_size = ? WHERE store = ? AND slug = ? AND seq = ? AND path = ?",
                [
                    (
                        status,
                        at,
                        *(
                            (a.checked_mtime_ns, a.checked_size)
                            if status != "recheck"
                            else (None, None)
                        ),
                        a.store,
                        a.slug,
                        a.seq,
                        a.path,
                    )
                    for a, status in verdicts
                ],
            )

    @locked
    def anchor_commits(self) -> list[tuple[str, str]]:
        """The distinct (git top level, captured commit) pairs, for the rename pass."""
        rows = self.conn.execute(
            f"SELECT DISTINCT root, commit_id FROM {ANCHORS_TABLE} "
            "WHERE root != '' AND commit_id IS NOT NULL ORDER BY root, commit_id"
        )
        return [(row[0], row[1]) for row in rows]

    @locked
    def remember_worktree(self, root: str, main: str, store: str) -> None:
        """Record in the repo identity cache that the checkout ``root`` is a linked
        worktree of the main checkout ``main``: once it is removed, only that checkout
        may take its anchors over (``worktree_mains``)."""
        from thatch.frontend.store.repo_paths import UPSERT, now_ms

        with self.tx.write() as conn:
            conn.execute(UPSERT, (root, main, store, now_ms()))

    @locked
    def worktree_mains(self, roots: Iterable[str]) -> dict[str, str]:
        """The main checkout the repo identity cache (``repo_paths``) names for each of
        ``roots`` it knows: written while each still was a checkout."""
        from thatch.frontend.store.repo_paths import LOOKUP

        found: dict[str, str] = {}
        for root in roots:
            row = self.conn.execute(LOOKUP, (root,)).fetchone()
            if row is not None:
                found[root] = str(row[0])
        return found

    @locked
    def gone_asked(self, top: str, head: str) -> set[str]:
        """The roots of gone checkouts the checkout at ``top`` was already asked about at
        its HEAD ``head`` (``reroot_anchors``)."""
        rows = self.conn.execute(
            f"SELECT root FROM {GONE_CHECKOUTS_TABLE} WHERE top = ? AND head = ?", (top, head)
        )
        return {row[0] for row in rows}

    @locked
    def anchor_files(self, taken: Mapping[str, Sequence[str]]) -> list[tuple[str, str, str, str]]:
        """The distinct (root, commit, path, blob) of the anchors under each root of
        ``taken`` captured at one of its commits (``reroot_anchors``)."""
        found: list[tuple[str, str, str, str]] = []
        for root, commits in taken.items():
            for commit in commits:
                found.extend(
                    self.conn.execute(
                        f"SELECT DISTINCT root, commit_id, path, blob FROM {ANCHORS_TABLE} "
                        "WHERE root = ? AND commit_id = ? ORDER BY path, blob",
                        (root, commit),
                    )
                )
        return found

    @locked
    def reroot_anchors(
        self,
        files: Sequence[tuple[str, str, str, str]],
        top: str,
        head: str,
        asked: Iterable[str],
        strangers: Iterable[str] = (),
    ) -> int:
        """Move to the checkout at ``top`` the anchors of each (root, commit, path, blob)
        of ``files`` (gone checkouts' files, committed in ``top``'s HEAD ``head``), paths
        and commits kept; their stored verdicts were on the files gone with them, so they
        are ``recheck`` until a pass checks them there. The gone roots ``asked`` and the
        ``strangers`` (roots that were no worktree of ``top``'s, living checkouts of other
        projects among them) are remembered as asked at ``head``; a root left with no
        anchor is forgotten, and so is what a gone root (never a stranger: it may be a
        checkout asking in turn) was asked as a checkout."""
        asked = list(asked)
        remembered = [*asked, *strangers]
        with self.tx.write() as conn:
            moved = sum(
                conn.execute(
                    f"UPDATE {ANCHORS_TABLE} SET root = ?, status = 'recheck', "
                    "checked_mtime_ns = NULL, checked_size = NULL "
                    "WHERE root = ? AND commit_id = ? AND path = ? AND blob = ?",
                    (top, *file),
                ).rowcount
                for file in files
            )
            _reopen_asked(conn, {top})
            conn.executemany(
                f"INSERT INTO {GONE_CHECKOUTS_TABLE} (root, top, head) VALUES (?, ?, ?) "
                "ON CONFLICT(root, top) DO UPDATE SET head = excluded.head",
                [(root, top, head) for root in remembered],
            )
            conn.executemany(
                f"DELETE FROM {GONE_CHECKOUTS_TABLE} WHERE top = ?", [(root,) for root in asked]
            )
            conn.execute(
                f"DELETE FROM {GONE_CHECKOUTS_TABLE} WHERE root NOT IN "
                f"(SELECT root FROM {ANCHORS_TABLE})"
            )
            return moved

    @locked
    def move_anchors(
        self,
        root: str,
        head: str,
        committed: Mapping[str, Sequence[tuple[str, str]]],
        staged: Sequence[tuple[str, str]] | None,
    ) -> int:
        """Follow git's renames for the anchors under ``root``. ``committed``: per captured
        commit, each (old, new) renamed between it and ``head``; those anchors move and
        are re-based on ``head`` (their next diff starts there). ``staged``: each (old, new)
        renamed between ``head`` and the working tree (None: git could not say, the staged
        moves stay as they are); those anchors move and keep their path in ``head`` as
        ``base_path``, so an undone rename moves them back. Returns the anchors moved."""
        if not committed and not staged and not self._holds_staged_moves(root, head, staged):
            return 0  # the usual pass: no write transaction for nothing
        moved = 0
        with self.tx.write() as conn:
            if committed:
                _reopen_asked(conn, {root})  # re-based: at commits not asked about yet
            for commit, renames in committed.items():
                moved += _rebase(conn, root, commit, renames, head)
            if staged is not None:
                moved += _move_staged(conn, root, head, staged)
        return moved

    def _holds_staged_moves(
        self, root: str, head: str, staged: Sequence[tuple[str, str]] | None
    ) -> bool:
        """Whether anchors under ``root`` hold a staged move a pass may have to undo."""
        if staged is None:
            return False  # git could not say: they stay as they are
        row = self.conn.execute(
            f"SELECT 1 FROM {ANCHORS_TABLE} "
            "WHERE root = ? AND commit_id = ? AND base_path IS NOT NULL LIMIT 1",
            (root, head),
        ).fetchone()
        return row is not None


def _reopen_asked(conn: sqlite3.Connection, roots: set[str]) -> None:
    """Anchors written under ``roots`` at commits of their own: a checkout there is live
    again (a worktree path reused), so what checkouts were asked about it no longer
    holds."""
    conn.executemany(
        f"DELETE FROM {GONE_CHECKOUTS_TABLE} WHERE root = ?", [(root,) for root in roots]
    )


def _rebase(
    conn: sqlite3.Connection,
    root: str,
    commit: str,
    renames: Sequence[tuple[str, str]],
    head: str,
) -> int:
    # Back to their path in ``commit`` first: the only path its diff can name.
    conn.execute(
        f"UPDATE {ANCHORS_TABLE} SET path = base_path, base_path = NULL "
        "WHERE root = ? AND commit_id = ? AND base_path IS NOT NULL",
        (root, commit),
    )
    moved = 0
    for old, new in renames:
        # Re-based as it moves, so a later rename of the same diff (a swap) cannot move
        # it again.
        moved += conn.execute(
            f"UPDATE {ANCHORS_TABLE} SET path = ?, commit_id = ? "
            "WHERE root = ? AND commit_id = ? AND path = ?",
            (new, head, root, commit, old),
        ).rowcount
    conn.execute(
        f"UPDATE {ANCHORS_TABLE} SET commit_id = ? WHERE root = ? AND commit_id = ?",
        (head, root, commit),
    )
    return moved


def _move_staged(
    conn: sqlite3.Connection, root: str, head: str, staged: Sequence[tuple[str, str]]
) -> int:
    targets = dict(staged)
    moved = 0
    held = conn.execute(
        f"SELECT DISTINCT base_path, path FROM {ANCHORS_TABLE} "
        "WHERE root = ? AND commit_id = ? AND base_path IS NOT NULL",
        (root, head),
    ).fetchall()
    for base, path in held:
        # Where the staged rename now puts it; its path in ``head`` once that is undone.
        target = targets.get(base, base)
        if target != path:
            moved += conn.execute(
                f"UPDATE {ANCHORS_TABLE} SET path = ?, base_path = ? "
                "WHERE root = ? AND commit_id = ? AND base_path = ? AND path = ?",
                (target, None if target == base else base, root, head, base, path),
            ).rowcount
    for old, new in staged:
        # Only anchors not moved yet: one a rename above placed holds its base_path.
        moved += conn.execute(
            f"UPDATE {ANCHORS_TABLE} SET path = ?, base_path = ? "
            "WHERE root = ? AND commit_id = ? AND path = ? AND base_path IS NULL",
            (new, old, root, head, old),
        ).rowcount
    return moved
