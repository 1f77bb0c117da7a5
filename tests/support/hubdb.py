"""A migrated hub database on the session's PostgreSQL, with teams, members and tokens."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from tests.support.postgres import HUB_ROLE, PostgresServer
from thatch.hub import admin
from thatch.hub.memories import HubMemories
from thatch.hub.schema import migrate
from thatch.hub.session import Member, authenticate

START = datetime(2026, 1, 1, tzinfo=UTC)


class StepClock:
    """Each reading one second after the last."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


@dataclass
class HubDatabase:
    server: PostgresServer
    name: str
    clock: StepClock = field(default_factory=StepClock)
    _stack: ExitStack = field(default_factory=ExitStack)
    _owner: psycopg.Connection[Any] | None = None

    def owner(self) -> psycopg.Connection[Any]:
        """The connection as the owner (the superuser here), closed with the database."""
        if self._owner is None:
            self._owner = self._stack.enter_context(
                psycopg.connect(self.server.conninfo(self.name), autocommit=True)
            )
        return self._owner

    def hub(self) -> psycopg.Connection[Any]:
        """A connection as the hub's restricted role, closed with the database."""
        return self._stack.enter_context(
            psycopg.connect(self.server.conninfo(self.name, user=HUB_ROLE), autocommit=True)
        )

    def add_member(self, team: str, member: str) -> str:
        """The token of a new member (and the team, when new)."""
        conn = self.owner()
        exists = conn.execute("SELECT 1 FROM teams WHERE id = %s", (team,)).fetchone()
        if exists is None:
            admin.add_team(conn, team, f"team {team}", self.clock())
        token = f"token-of-{team}-{member}"
        admin.add_member(conn, team, member, token, self.clock())
        return token

    def memories(self, team: str, member: str) -> HubMemories:
        """A member's HubMemories over its own connection as the hub's role."""
        token = self.add_member(team, member)
        conn = self.hub()
        who = authenticate(conn, token)
        assert who == Member(team, member)
        return HubMemories(conn, who, self.clock)


@contextmanager
def hub_database(server: PostgresServer) -> Iterator[HubDatabase]:
    """A fresh database migrated by the owner, for one test."""
    name = server.fresh_database()
    database = HubDatabase(server, name)
    with database._stack:
        with psycopg.connect(server.conninfo(name), autocommit=True) as conn:
            migrate(conn, HUB_ROLE, START)
        yield database
