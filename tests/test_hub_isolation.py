"""Isolation between teams is enforced by PostgreSQL, not by the hub's code (docs/team.md
§roles): a member of team A tries every operation and raw SQL against team B's rows.

Real PostgreSQL with pgvector (tests/support/postgres.py), connected as the hub's
restricted role; no mocks.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from tests.support.fake_embedder import bag_vector
from tests.support.hubdb import HubDatabase
from tests.support.postgres import HUB_ROLE
from thatch.hub.feed import START, changes_after
from thatch.hub.memories import HubMemories, Outcome
from thatch.hub.schema import HubRoleError, check_role
from thatch.hub.session import Member, UnknownToken, as_member, authenticate

DIM = 384
B_TEXT = "# Deploy keys\n\nthe deploy key of team B lives in its vault"


def vec(text: str) -> Any:
    return bag_vector(text, DIM)


@pytest.fixture
def teams(hub_db: HubDatabase) -> tuple[HubMemories, HubMemories]:
    """(alice of team A, bob of team B); B holds one memory in store ``shared`` and the
    tombstone of another."""
    alice = hub_db.memories("A", "alice")
    bob = hub_db.memories("B", "bob")
    assert bob.remember("shared", "Deploy keys", B_TEXT, vec(B_TEXT), "m").outcome is Outcome.SAVED
    bob.remember("shared", "Old", "# Old\n\nold", vec("old"), "m", write_id="bob-1")
    assert bob.forget("shared", "Old") is not None
    return alice, bob


def b_rows(hub_db: HubDatabase) -> list[tuple[Any, ...]]:
    """Team B's memory rows as the owner sees them (the owner bypasses row security)."""
    return (
        hub_db.owner()
        .execute(
            "SELECT store, slug, content, rev, deleted_at, author FROM memories "
            "WHERE team = 'B' ORDER BY store, slug"
        )
        .fetchall()
    )


def test_a_member_of_another_team_sees_nothing_through_any_operation(
    hub_db: HubDatabase, teams: tuple[HubMemories, HubMemories]
) -> None:
    alice, _bob = teams
    before = b_rows(hub_db)
    assert alice.store_names() == []
    assert alice.store_counts() == {}
    assert not alice.store_exists("shared")
    assert alice.list("shared") == []
    assert alice.show("shared", "Deploy keys") is None
    assert alice.revision("shared", "Deploy keys") is None
    assert alice.search(["shared"], vec(B_TEXT)) == []
    assert alice.recall(["shared"], vec(B_TEXT), include_archived=True) == []
    assert changes_after(alice.conn, alice.who, START).changes == []
    assert alice.forget("shared", "Deploy keys") is None
    assert alice.purge_tombstones(datetime(2100, 1, 1, tzinfo=UTC)) == 0
    assert b_rows(hub_db) == before
    assert hub_db.owner().execute("SELECT count(*) FROM recall_events").fetchone() == (0,)


def test_writing_onto_another_teams_slug_writes_a_row_of_ones_own_team(
    hub_db: HubDatabase, teams: tuple[HubMemories, HubMemories]
) -> None:
    """Same store name, same label, even B's revision as base: A gets its own row."""
    alice, bob = teams
    before = b_rows(hub_db)
    written = alice.remember(
        "shared", "Deploy keys", "# Deploy keys\n\nA's", vec("a"), "m", base_rev=1
    )
    assert written.outcome is Outcome.SAVED and written.slug == "deploy-keys"
    assert b_rows(hub_db) == before
    assert [m.content for m in bob.list("shared")] == [B_TEXT]
    assert [m.content for m in alice.list("shared")] == ["# Deploy keys\n\nA's"]


def test_raw_sql_as_the_hubs_role_without_a_team_reads_and_writes_nothing(
    hub_db: HubDatabase, teams: tuple[HubMemories, HubMemories]
) -> None:
    conn = hub_db.hub()
    for table in ("teams", "stores", "memories", "recall_events", "applied_writes"):
        assert conn.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), table
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SELECT count(*) FROM members")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):  # row security: no team
        conn.execute("INSERT INTO stores (team, name) VALUES ('B', 'mine')")
    assert (
        conn.execute("UPDATE memories SET content = 'x' WHERE team = 'B' RETURNING slug").fetchall()
        == []
    )
    assert conn.execute("DELETE FROM memories RETURNING slug").fetchall() == []
    assert [row[2] for row in b_rows(hub_db)] == [B_TEXT, ""]


def test_raw_sql_with_team_a_set_cannot_touch_team_b(
    hub_db: HubDatabase, teams: tuple[HubMemories, HubMemories]
) -> None:
    alice, _bob = teams
    conn = hub_db.hub()
    before = b_rows(hub_db)
    with as_member(conn, alice.who):
        assert conn.execute("SELECT id FROM teams").fetchall() == [("A",)]
        assert conn.execute("SELECT count(*) FROM memories WHERE team = 'B'").fetchone() == (0,)
        assert conn.execute("UPDATE memories SET content = 'x' RETURNING slug").fetchall() == []
        assert conn.execute("DELETE FROM memories RETURNING slug").fetchall() == []
    for statement in (
        "INSERT INTO stores (team, name) VALUES ('B', 'planted')",
        "INSERT INTO memories (team, store, slug, label, content, created_at, updated_at) "
        "VALUES ('B', 'shared', 'planted', 'planted', 'x', now(), now())",
        "INSERT INTO recall_events (team, store, slug, at) "
        "VALUES ('B', 'shared', 'deploy-keys', now())",
    ):
        with pytest.raises(psycopg.errors.InsufficientPrivilege), as_member(conn, alice.who):
            conn.execute(statement)
    # Moving one's own row into team B is refused too (WITH CHECK on the new row).
    alice.remember("mine", "Note", "# Note\n\nmine", vec("note"), "m")
    with pytest.raises(psycopg.errors.InsufficientPrivilege), as_member(conn, alice.who):
        conn.execute("UPDATE memories SET team = 'B' WHERE slug = 'note'")
    assert b_rows(hub_db) == before


def test_the_team_does_not_outlive_its_transaction_on_a_pooled_connection(
    hub_db: HubDatabase, teams: tuple[HubMemories, HubMemories]
) -> None:
    """set_config(..., true): once the transaction ends the connection holds no team, so
    the next client a pooler hands it to sees nothing."""
    alice, _bob = teams
    alice.remember("mine", "Note", "# Note\n\nmine", vec("note"), "m")
    conn = alice.conn
    assert conn.execute("SELECT count(*) FROM memories").fetchone() == (0,)
    assert conn.execute("SELECT current_setting('thatch.team', true)").fetchone() in {
        ("",),
        (None,),
    }


def test_the_author_is_stamped_by_the_database_never_by_the_client(
    hub_db: HubDatabase, teams: tuple[HubMemories, HubMemories]
) -> None:
    alice, _bob = teams
    conn = hub_db.hub()
    with as_member(conn, alice.who):
        conn.execute("INSERT INTO stores (team, name) VALUES ('A', 'mine')")
        conn.execute(
            "INSERT INTO memories (team, store, slug, label, content, author, updated_by, "
            "created_at, updated_at) VALUES ('A', 'mine', 'forged', 'forged', 'x', 'bob', "
            "'bob', now(), now())"
        )
    with as_member(conn, Member("A", "carol")):
        conn.execute("UPDATE memories SET author = 'bob', content = 'y' WHERE slug = 'forged'")
    row = (
        hub_db.owner()
        .execute("SELECT author, updated_by FROM memories WHERE slug = 'forged'")
        .fetchone()
    )
    assert row == ("alice", "carol")
    # Without a member set no write gets through at all.
    with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
        conn.execute("SELECT set_config('thatch.team', 'A', true)")
        conn.execute("UPDATE memories SET content = 'z' WHERE slug = 'forged'")


def test_tokens_name_their_member_and_a_revoked_or_unknown_token_gets_nothing(
    hub_db: HubDatabase,
) -> None:
    from thatch.hub import admin

    token = hub_db.add_member("A", "alice")
    conn = hub_db.hub()
    assert authenticate(conn, token) == Member("A", "alice")
    with pytest.raises(UnknownToken):
        authenticate(conn, token + "x")
    assert admin.revoke_member(hub_db.owner(), "A", "alice", hub_db.clock())
    with pytest.raises(UnknownToken):
        authenticate(conn, token)


def test_the_hub_refuses_to_serve_as_a_role_row_security_does_not_bind(
    hub_db: HubDatabase,
) -> None:
    check_role(hub_db.hub())
    with pytest.raises(HubRoleError, match="superuser"):
        check_role(hub_db.owner())
    owner = hub_db.owner()
    bypass, table_owner = f"{hub_db.name}_bypass", f"{hub_db.name}_owner"  # roles: per cluster
    owner.execute(f"CREATE ROLE {bypass} LOGIN BYPASSRLS")
    owner.execute(f"CREATE ROLE {table_owner} LOGIN")
    owner.execute(f"ALTER TABLE memories OWNER TO {table_owner}")
    for role, reason in ((bypass, "BYPASSRLS"), (table_owner, "owner of memories")):
        with (
            psycopg.connect(hub_db.server.conninfo(hub_db.name, user=role)) as conn,
            pytest.raises(HubRoleError, match=reason),
        ):
            check_role(conn)


def test_one_pooled_connection_serves_two_teams_in_turn_and_each_sees_its_own(
    hub_db: HubDatabase, teams: tuple[HubMemories, HubMemories]
) -> None:
    """A pool of one connection (the worst case of a pooler): team A's transaction, then
    team B's, then one with no team, all on the same server session."""
    from thatch.hub.pool import open_pool

    alice, bob = teams
    pool = open_pool(hub_db.server.conninfo(hub_db.name, user=HUB_ROLE), max_size=1)
    try:
        pids = set()
        for who, expected in ((alice.who, []), (bob.who, ["deploy-keys"]), (alice.who, [])):
            with pool.connection() as conn:
                pids.add(conn.info.backend_pid)
                assert [m.slug for m in HubMemories(conn, who, hub_db.clock).list("shared")] == (
                    expected
                )
        with pool.connection() as conn:
            assert conn.execute("SELECT count(*) FROM memories").fetchone() == (0,)
        assert len(pids) == 1
    finally:
        pool.close()


def test_the_pool_refuses_a_role_row_security_does_not_bind(hub_db: HubDatabase) -> None:
    from thatch.hub.pool import open_pool

    with pytest.raises(HubRoleError, match="superuser"):
        open_pool(hub_db.server.conninfo(hub_db.name), max_size=1).close()


@pytest.mark.parametrize("prepare", [True, False])
def test_the_pool_prepares_statements_unless_told_not_to(
    hub_db: HubDatabase, teams: tuple[HubMemories, HubMemories], prepare: bool
) -> None:
    """psycopg prepares a statement run often on its connection, which a PgBouncer older
    than 1.21 in transaction mode cannot carry; ``prepare=False`` (``thatch hub serve
    --no-prepare``) leaves the server session with none, and the calls work the same."""
    from thatch.hub.pool import open_pool

    alice, _bob = teams
    pool = open_pool(
        hub_db.server.conninfo(hub_db.name, user=HUB_ROLE), max_size=1, prepare=prepare
    )
    try:
        with pool.connection() as conn:
            for _ in range(8):  # past psycopg's prepare_threshold (5)
                assert HubMemories(conn, alice.who, hub_db.clock).list("shared") == []
            prepared = conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
    finally:
        pool.close()
    assert prepared is not None and (prepared[0] > 0) is prepare


def test_serve_takes_no_prepare_from_its_flag_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from thatch.cli.hub_cmds import NO_PREPARE, serve

    assert serve.make_context("serve", []).params["no_prepare"] is False
    assert serve.make_context("serve", ["--no-prepare"]).params["no_prepare"] is True
    monkeypatch.setenv(NO_PREPARE, "1")
    assert serve.make_context("serve", []).params["no_prepare"] is True
