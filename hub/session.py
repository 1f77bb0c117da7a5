"""One hub transaction on behalf of one member of one team (docs/team.md §row-level-security).

The team and the member are set with ``set_config(..., true)``: local to the transaction,
so a pooled connection (or one a PgBouncer in transaction mode hands to another client)
carries neither once the transaction ends. Row-level security reads the team; the
triggers stamp the member as author. Neither ever comes from a request's body: the hub
takes them from the member's token (``authenticate``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from psycopg import Connection
from psycopg.rows import TupleRow

__all__ = ["Member", "UnknownToken", "as_member", "authenticate", "token_digest"]


@dataclass(frozen=True)
class Member:
    team: str
    member: str


class UnknownToken(Exception):
    """No live member holds the token."""

    def __init__(self) -> None:
        super().__init__("unknown or revoked team token: ask the team's admin for a new one")


def token_digest(token: str) -> bytes:
    """What the database keeps of a token: its SHA-256 (a leaked table leaks no token)."""
    return hashlib.sha256(token.encode()).digest()


def authenticate(conn: Connection[TupleRow], token: str) -> Member:
    """The member holding ``token`` (through the one SECURITY DEFINER function that may
    read tokens before a team is set)."""
    with conn.transaction():
        row = conn.execute(
            "SELECT team, member FROM thatch_authenticate(%s)", (token_digest(token),)
        ).fetchone()
    if row is None:
        raise UnknownToken()
    return Member(str(row[0]), str(row[1]))


@contextmanager
def as_member(conn: Connection[TupleRow], who: Member) -> Iterator[Connection[TupleRow]]:
    """A transaction in which row-level security shows ``who.team`` only and the
    triggers stamp ``who.member``."""
    with conn.transaction():
        conn.execute(
            "SELECT set_config('thatch.team', %s, true), set_config('thatch.member', %s, true)",
            (who.team, who.member),
        )
        yield conn
