"""The operator's changes to teams and members, run as the owner (docs/team.md §roles).

The hub's own role cannot touch ``members`` at all: tokens are added and revoked here, by
whoever runs the migrations (``thatch hub migrate``, ``thatch hub team add``, ``thatch hub
member add|revoke``). Mistakes an operator can make (a team that exists, a member of no
team, a role not created, an unreachable database) are ``AdminError`` with the fix.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

import psycopg
from psycopg import Connection
from psycopg.rows import TupleRow

from thatch.common.error_text import first_line
from thatch.common.shell_words import shell_quote
from thatch.hub.schema import migrate, vector_problem
from thatch.hub.session import token_digest

__all__ = [
    "FIX_OWNER_ROLE",
    "AdminError",
    "add_member",
    "add_team",
    "create_role_fix",
    "migrate_database",
    "new_token",
    "new_token_fix",
    "no_team_fix",
    "owner_connection",
    "revoke_member",
    "vector_warning",
]


class AdminError(Exception):
    """An operator's command cannot be done; ``fix`` says what to do."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.fix = fix


def new_token() -> str:
    """A fresh member token: 256 random bits, URL-safe (only its SHA-256 is stored)."""
    return "thatch_" + secrets.token_urlsafe(32)


@contextmanager
def owner_connection(conninfo: str) -> Iterator[Connection[TupleRow]]:
    """An autocommit connection as the owner, closed afterwards."""
    try:
        conn = psycopg.connect(conninfo, autocommit=True)
    except psycopg.Error as error:
        raise AdminError(
            f"cannot connect to the hub's database as its owner ({first_line(error)})",
            "check THATCH_HUB_OWNER_URL (the password in PGPASSWORD or ~/.pgpass)",
        ) from None
    with conn:
        yield conn


FIX_OWNER_ROLE = (
    "set THATCH_HUB_OWNER_URL to the role that owns (or may create) the tables of the hub"
)


def migrate_database(conn: Connection[TupleRow], hub_role: str, at: datetime) -> list[str]:
    """``schema.migrate`` with the usual mistakes named: the migrations applied now."""
    row = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (hub_role,)).fetchone()
    if row is None:
        raise AdminError(f"the hub's role {hub_role!r} does not exist", create_role_fix(hub_role))
    try:
        return migrate(conn, hub_role, at)
    except psycopg.errors.InsufficientPrivilege as error:
        raise AdminError(
            f"the owner's connection may not migrate ({first_line(error)})",
            FIX_OWNER_ROLE,
        ) from None


def vector_warning(conn: Connection[TupleRow]) -> str | None:
    """``schema.vector_problem`` after ``thatch hub migrate``: None also when the check
    cannot run (a database error says nothing of the version; the hub asks again when it
    starts)."""
    try:
        return vector_problem(conn)
    except psycopg.DatabaseError:
        return None


def create_role_fix(hub_role: str) -> str:
    """The SQL that creates the hub's role, the name quoted as the migrations' grants quote
    it (``sql.Identifier``, always double-quoted, a ``"`` doubled): ``Hub`` unquoted would
    create ``hub``, a reserved word (``user``, ``select``) would be a syntax error, and a
    name holding ``;`` would end the statement there."""
    name = '"' + hub_role.replace('"', '""') + '"'
    return (
        f"create it first (docs/team.md §roles): CREATE ROLE {name} LOGIN NOSUPERUSER NOBYPASSRLS"
    )


def add_team(conn: Connection[TupleRow], team: str, name: str, at: datetime) -> None:
    try:
        with conn.transaction():
            conn.execute(
                "INSERT INTO teams (id, name, created_at) VALUES (%s, %s, %s)", (team, name, at)
            )
    except psycopg.errors.UniqueViolation:
        raise AdminError(f"team {team!r} already exists", "choose another team id") from None


def add_member(
    conn: Connection[TupleRow], team: str, member: str, token: str, at: datetime
) -> None:
    """A member of ``team`` holding ``token`` (only its SHA-256 is kept). A revoked member
    is added again with the new token; a live one keeps the token it has."""
    try:
        with conn.transaction():
            added = conn.execute(
                "INSERT INTO members (team, id, token_sha256, created_at) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (team, id) DO UPDATE SET token_sha256 = excluded.token_sha256, "
                "created_at = excluded.created_at, revoked_at = NULL "
                "WHERE members.revoked_at IS NOT NULL RETURNING id",
                (team, member, token_digest(token), at),
            ).fetchone()
    except psycopg.errors.ForeignKeyViolation:
        raise AdminError(f"no team {team!r}", no_team_fix(team)) from None
    if added is None:
        raise AdminError(
            f"{member!r} is already a member of {team!r} with a live token",
            new_token_fix(team, member),
        )


def no_team_fix(team: str) -> str:
    """How to add the team a member was added to; its shown name is the operator's call."""
    return (
        "add it first, with the name it is shown by, NAME: "
        f"thatch hub team add {shell_quote(team)} NAME"
    )


def new_token_fix(team: str, member: str) -> str:
    """How a member with a live token gets a new one: revoke it, then add them again. The
    ids are shell-quoted: each reaches its command as one argument, and runs nothing."""
    team, member = shell_quote(team), shell_quote(member)
    return (
        "to give them a new one, revoke the token and add them again: "
        f"thatch hub member revoke {team} {member} && thatch hub member add {team} {member}"
    )


def revoke_member(conn: Connection[TupleRow], team: str, member: str, at: datetime) -> bool:
    """Revoke the member's token; its chat sessions leave the team's peers at once (they
    could no longer read a mail sent to them, and were listed for a week)."""
    with conn.transaction():
        done = conn.execute(
            "UPDATE members SET revoked_at = %s WHERE team = %s AND id = %s AND revoked_at IS NULL",
            (at, team, member),
        )
        if done.rowcount != 1:
            return False
        # The chat triggers let a member remove only its own sessions: act as it here.
        conn.execute(
            "SELECT set_config('thatch.team', %s, true), set_config('thatch.member', %s, true)",
            (team, member),
        )
        conn.execute("DELETE FROM chat_peers WHERE team = %s AND member = %s", (team, member))
        return True
