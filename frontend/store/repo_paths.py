"""The repo identity cache, ``repo_paths`` (docs/chat.md §8): which store a worktree named.

Written whenever store detection succeeds by git, read when the directory is gone (a
deleted worktree), so its hooks keep naming the real store instead of ``unknown``. Each
call is one short statement on its own connection; a database that cannot be read or
written is simply no cache (detection must never fail because of it).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Mapping
from pathlib import Path

from thatch.common.environment import default_db_path

__all__ = [
    "LOOKUP",
    "UPSERT",
    "RepoPaths",
    "normalized",
    "now_ms",
]

# Also the code anchors' own reads and writes of the cache (``anchor_queries``), on the
# store's connection.
LOOKUP = "SELECT main_path, repo_slug FROM repo_paths WHERE worktree_path = ?"
UPSERT = (
    "INSERT INTO repo_paths (worktree_path, main_path, repo_slug, resolved_at) "
    "VALUES (?, ?, ?, ?) ON CONFLICT(worktree_path) DO UPDATE SET "
    "main_path = excluded.main_path, repo_slug = excluded.repo_slug, "
    "resolved_at = excluded.resolved_at"
)


def now_ms() -> int:
    """A row's ``resolved_at``: epoch milliseconds."""
    return int(time.time() * 1000)


class RepoPaths:
    """The cache over one connection (closed by ``close``)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RepoPaths | None:
        """The cache in ``env``'s database, or None while that file does not exist."""
        from thatch.frontend.store import db

        path = default_db_path(env)
        if not path.is_file():
            return None
        return cls(db.connect(path))

    def close(self) -> None:
        self.conn.close()

    def lookup(self, worktree_path: str) -> tuple[str, str] | None:
        """``(main_path, repo_slug)`` cached for the path, or None."""
        row = self.conn.execute(LOOKUP, (worktree_path,)).fetchone()
        return None if row is None else (str(row[0]), str(row[1]))

    def remember(self, worktree_path: str, main_path: str, repo_slug: str) -> None:
        """Upsert the row; no write at all when it already says the same."""
        if self.lookup(worktree_path) == (main_path, repo_slug):
            return
        # One statement in autocommit mode: its own short write transaction.
        self.conn.execute(UPSERT, (worktree_path, main_path, repo_slug, now_ms()))

    def evict(self, worktree_path: str) -> None:
        self.conn.execute("DELETE FROM repo_paths WHERE worktree_path = ?", (worktree_path,))


def normalized(directory: Path | str) -> str:
    """The key a directory is looked up by: absolute, normalized, symlinks of what exists
    resolved (the realpath written while it existed)."""
    return os.path.realpath(os.path.abspath(directory))
