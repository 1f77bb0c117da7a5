"""The operator's changes to teams and members, run as the owner (docs/team.md §roles).

The hub's own role cannot touch ``members`` at all: tokens are added and revoked here, by
whoever runs the migrations (the ``hub member add`` command, next, will call these).
"""

from __future__ import annotations

from datetime import datetime

from psycopg import Connection
from psycopg.rows import TupleRow

from thatch.hub.session import token_digest

__all__ = ["add_member", "add_team", "revoke_member"]


def add_team(conn: Connection[TupleRow], team: str, name: str, at: datetime) -> None:
    with conn.transaction():
        conn.execute(
            "INSERT INTO teams (id, name, created_at) VALUES (%s, %s, %s)", (team, name, at)
        )


def add_member(
    conn: Connection[TupleRow], team: str, member: str, token: str, at: datetime
) -> None:
    """A member of ``team`` holding ``token`` (only its SHA-256 is kept)."""
    with conn.transaction():
        conn.execute(
            "INSERT INTO members (team, id, token_sha256, created_at) VALUES (%s, %s, %s, %s)",
            (team, member, token_digest(token), at),
        )


def revoke_member(conn: Connection[TupleRow], team: str, member: str, at: datetime) -> bool:
    with conn.transaction():
        done = conn.execute(
            "UPDATE members SET revoked_at = %s WHERE team = %s AND id = %s AND revoked_at IS NULL",
            (at, team, member),
        )
        return done.rowcount == 1
