"""The engines' own tables (m012; docs/engines.md §default-behaviors)."""

from __future__ import annotations

import sqlite3

__all__ = [
    "m012_defaults_off",
]


def m012_defaults_off(conn: sqlite3.Connection) -> None:
    """The default behaviors a person switched off (docs/engines.md §defaults): seeding
    never brings those back."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS thatch_defaults_off (key TEXT PRIMARY KEY, at TEXT NOT NULL)"
    )
