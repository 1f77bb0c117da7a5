"""Which stores are shared with a team (m015): what the frontend itself asks of team sync.

Hooks and MCP servers never talk to the hub (docs/team.md §data-flow); they only refuse,
at save, a memory for a shared store that holds what looks like a secret, so it is never
queued for upload. The team sync process (``thatch.teamsync``) does everything else.
"""

from __future__ import annotations

import sqlite3

from thatch.frontend.store.migrations.team import LINKS_TABLE

__all__ = ["any_linked", "is_linked", "refuse_team_secrets"]


def is_linked(conn: sqlite3.Connection, store: str) -> bool:
    """Whether ``store`` is shared with a team (False in a file without m015)."""
    try:
        row = conn.execute(f"SELECT 1 FROM {LINKS_TABLE} WHERE store = ?", (store,)).fetchone()
    except sqlite3.OperationalError as error:
        if "no such table" in str(error):
            return False
        raise
    return row is not None


def any_linked(conn: sqlite3.Connection) -> bool:
    """Whether any store is shared (then ``thatch mcp`` makes sure the sync process runs)."""
    try:
        return conn.execute(f"SELECT 1 FROM {LINKS_TABLE} LIMIT 1").fetchone() is not None
    except sqlite3.OperationalError as error:
        if "no such table" in str(error):
            return False
        raise


def refuse_team_secrets(conn: sqlite3.Connection, store: str, label: str, text: str) -> None:
    """``SecretFound`` (naming the kind, never the value) when ``store`` is shared and the
    label or text holds what looks like a secret; call inside the saving transaction."""
    if is_linked(conn, store):
        from thatch.frontend.secret_scan import refuse_secrets

        refuse_secrets(store, label, text)
