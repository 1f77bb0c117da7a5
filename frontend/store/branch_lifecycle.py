"""The store's side of branch memory that follows git (docs/database.md §branch-lifecycle):
the refs snapshot, promoting and archiving a branch's memories, and undoing an archive.

Each change runs in one write transaction that re-reads the rows it changes under the
write lock, so two processes syncing the same repository at once do the work once.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from thatch.frontend.store.migrations.branches import (
    BRANCH_EVENTS_TABLE,
    BRANCH_REFS_TABLE,
    BRANCH_RENAMES_TABLE,
)
from thatch.frontend.store.schema_lag import has_table
from thatch.frontend.store.transactions import Transactions

__all__ = ["BranchChange", "BranchRecords", "Restored", "opened_records"]

PROMOTED = "promoted"
ARCHIVED = "archived"
RENAMED = "renamed"


class BranchChange(NamedTuple):  # not a dataclass: the prompt hook imports this module
    """What a sync decided for one gone branch: ``promoted`` (merged), ``archived``, or
    ``renamed`` to ``new_branch`` (the branch that appeared at its tip)."""

    branch: str
    action: str
    commit: str | None
    new_branch: str | None = None


class Restored(NamedTuple):
    """What ``restore`` did: memories unarchived, and those left as they were (unarchived,
    rescoped or written since the archive)."""

    restored: int
    left: int


class BranchRecords:
    """Snapshots and branch events over one connection (the Store's ``tx``)."""

    def __init__(self, tx: Transactions) -> None:
        self.tx = tx
        self.conn: sqlite3.Connection = tx.conn

    def present(self) -> bool:
        """Whether m013's and m023's tables exist: not in a file this process could not
        migrate (read-only), where there is nothing to sync against and no write to do."""
        return has_table(self.conn, BRANCH_REFS_TABLE) and has_table(
            self.conn, BRANCH_RENAMES_TABLE
        )

    def snapshot(self, store: str, repo: str) -> dict[str, str]:
        """The refs seen at the last sync of ``repo`` for ``store`` ({}: never synced)."""
        # In a transaction of the connection's lock: a server shares its one connection.
        with self.tx.read() as conn:
            rows = conn.execute(
                f"SELECT ref, commit_id FROM {BRANCH_REFS_TABLE} WHERE store = ? AND repo = ?",
                (store, repo),
            ).fetchall()
        return {str(ref): str(commit) for ref, commit in rows}

    def live_branches(self, store: str, among: Sequence[str]) -> list[str]:
        """Those of ``among`` that still scope unarchived memories of ``store``."""
        with self.tx.read() as conn:
            rows = conn.execute(
                "SELECT DISTINCT branch FROM entries WHERE store = ? AND branch IS NOT NULL "
                "AND archived = 0 AND branch IN (SELECT value FROM json_each(?)) ORDER BY branch",
                (store, json.dumps(list(among))),
            ).fetchall()
        return [str(row[0]) for row in rows]

    def apply(
        self,
        store: str,
        repo: str,
        refs: Mapping[str, str],
        changes: Sequence[BranchChange],
        now_ms: int,
    ) -> dict[str, int]:
        """Promote or archive each change's memories and replace the snapshot, in one
        transaction; the number of memories changed per branch."""
        counts: dict[str, int] = {}
        # No fsync of its own (~7 ms a sync under load): a power cut loses the changes
        # with the snapshot that records them, so the next sync (every session start runs
        # one) decides the same branches again from git.
        with self.tx.write(durable=False) as conn:
            for change in changes:
                counts[change.branch] = self._change(conn, store, change, now_ms)
            # Only the refs that changed are written: a sync after a commit is one row.
            stored = self.snapshot(store, repo)
            conn.executemany(
                f"DELETE FROM {BRANCH_REFS_TABLE} WHERE store = ? AND repo = ? AND ref = ?",
                [(store, repo, ref) for ref in sorted(stored.keys() - refs.keys())],
            )
            conn.executemany(
                f"INSERT OR REPLACE INTO {BRANCH_REFS_TABLE} "
                "(store, repo, ref, commit_id, seen_ms) VALUES (?, ?, ?, ?, ?)",
                [
                    (store, repo, ref, commit, now_ms)
                    for ref, commit in sorted(refs.items())
                    if stored.get(ref) != commit
                ],
            )
        return counts

    def _change(
        self, conn: sqlite3.Connection, store: str, change: BranchChange, now_ms: int
    ) -> int:
        slugs = [
            str(row[0])
            for row in conn.execute(
                "SELECT slug FROM entries WHERE store = ? AND branch = ? AND archived = 0",
                (store, change.branch),
            )
        ]
        if not slugs:
            return 0
        if change.action == RENAMED:
            return self._rename(conn, store, change, slugs, now_ms)
        if change.action == PROMOTED:
            conn.execute(
                "UPDATE entries SET branch = NULL WHERE store = ? AND branch = ? AND archived = 0",
                (store, change.branch),
            )
        else:
            conn.execute(
                "UPDATE entries SET archived = 1 WHERE store = ? AND branch = ? AND archived = 0",
                (store, change.branch),
            )
        conn.executemany(
            f"INSERT INTO {BRANCH_EVENTS_TABLE} "
            "(store, slug, origin_branch, action, commit_id, at_ms) VALUES (?, ?, ?, ?, ?, ?)",
            [(store, slug, change.branch, change.action, change.commit, now_ms) for slug in slugs],
        )
        return len(slugs)

    def _rename(
        self,
        conn: sqlite3.Connection,
        store: str,
        change: BranchChange,
        slugs: Sequence[str],
        now_ms: int,
    ) -> int:
        conn.execute(
            "UPDATE entries SET branch = ? WHERE store = ? AND branch = ? AND archived = 0",
            (change.new_branch, store, change.branch),
        )
        conn.executemany(
            f"INSERT INTO {BRANCH_RENAMES_TABLE} "
            "(store, slug, old_branch, new_branch, commit_id, at_ms) VALUES (?, ?, ?, ?, ?, ?)",
            [
                (store, slug, change.branch, change.new_branch, change.commit, now_ms)
                for slug in slugs
            ],
        )
        return len(slugs)

    def restore(self, store: str, branch: str, now_ms: int) -> Restored:
        """Unarchive the memories a sync archived for ``branch`` (and not restored since).
        A memory archived or rescoped again by anyone else stays as it is: one written
        since the archive (``updated_at`` later than the event) is left alone."""
        with self.tx.write() as conn:
            events = conn.execute(
                f"SELECT id, slug, at_ms FROM {BRANCH_EVENTS_TABLE} WHERE store = ? AND "
                "origin_branch = ? AND action = ? AND undone_ms IS NULL",
                (store, branch, ARCHIVED),
            ).fetchall()
            restored = 0
            for event_id, slug, at_ms in events:
                restored += conn.execute(
                    "UPDATE entries SET archived = 0 WHERE store = ? AND slug = ? "
                    "AND branch = ? AND archived = 1 AND updated_at <= ?",
                    (store, slug, branch, _timestamp(int(at_ms))),
                ).rowcount
                conn.execute(
                    f"UPDATE {BRANCH_EVENTS_TABLE} SET undone_ms = ? WHERE id = ?",
                    (now_ms, event_id),
                )
        return Restored(restored, len(events) - restored)

    def archived_branches(self, store: str) -> list[str]:
        """Branches with memories archived by a sync and not restored, for error messages."""
        rows = self.conn.execute(
            f"SELECT DISTINCT origin_branch FROM {BRANCH_EVENTS_TABLE} WHERE store = ? "
            "AND action = ? AND undone_ms IS NULL ORDER BY origin_branch",
            (store, ARCHIVED),
        )
        return [str(row[0]) for row in rows]

    def origin_branch(self, store: str, slug: str) -> str | None:
        """The branch a promoted memory was scoped to (its latest promotion), or None; also
        None in a file this process could not migrate (read-only, no m013 tables)."""
        try:
            row = self.conn.execute(
                f"SELECT origin_branch FROM {BRANCH_EVENTS_TABLE} WHERE store = ? "
                "AND slug = ? AND action = ? ORDER BY id DESC LIMIT 1",
                (store, slug, PROMOTED),
            ).fetchone()
        except sqlite3.OperationalError as error:
            if "no such table" not in str(error):
                raise
            return None
        return None if row is None else str(row[0])


def _timestamp(ms: int) -> str:
    """``ms`` since the epoch as the store writes ``updated_at`` (format_timestamp)."""
    from datetime import UTC, datetime

    from thatch.frontend.timefmt import format_timestamp

    moment = datetime.fromtimestamp(ms // 1000, UTC).replace(microsecond=ms % 1000 * 1000)
    return format_timestamp(moment)


@contextmanager
def opened_records(path: Path) -> Iterator[BranchRecords | None]:
    """Branch records over a connection of their own (``db.connect``), for the prompt
    hook: none of the memory Store's imports (~60 ms) or migrations. None while the file
    does not exist or lacks m013's or m023's tables (the next ``Store.open`` migrates it)."""
    from thatch.frontend.store import db

    if not path.is_file():
        yield None
        return
    conn = db.connect(path)
    try:
        # Only hooks use this: a sync the lock keeps from running is done by the next one.
        conn.execute(f"PRAGMA busy_timeout = {db.HOOK_BUSY_TIMEOUT_MS}")
        records = BranchRecords(Transactions(conn))
        yield records if records.present() else None
    finally:
        conn.close()
