"""The hub's memory operations on a real PostgreSQL with pgvector (docs/team.md): conflicts
keep both versions, deletes are tombstones, telemetry is events, the change feed never
skips a row, secrets are refused, and recall ranks exactly as the local SQLite store does.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from tests.support.fake_embedder import bag_vector
from tests.support.hubdb import HubDatabase
from thatch.frontend.errors import InvalidInputError
from thatch.frontend.secret_scan import SecretFound
from thatch.frontend.store.memory_store import Store
from thatch.hub.feed import START, changes_after
from thatch.hub.memories import HubMemories, Outcome, Written
from thatch.hub.session import as_member

DIM = 384


def vec(text: str) -> Any:
    return bag_vector(text, DIM)


def text_of(label: str, body: str) -> str:
    return f"# {label}\n\n{body}"


def save(memories: HubMemories, label: str, body: str, **options: Any) -> Written:
    stored = text_of(label, body)
    return memories.remember("proj", label, stored, vec(stored), "m", **options)


# -- conflicts -----------------------------------------------------------------------------


def test_an_edit_from_the_revision_seen_replaces_and_keeps_the_first_author(
    hub_db: HubDatabase,
) -> None:
    alice, carol = hub_db.memories("A", "alice"), hub_db.memories("A", "carol")
    assert save(alice, "Build", "make") == Written(Outcome.SAVED, "build", 1)
    assert save(carol, "Build", "ninja", base_rev=1) == Written(Outcome.SAVED, "build", 2)
    assert [m.content for m in alice.list("proj")] == [text_of("Build", "ninja")]
    row = hub_db.owner().execute("SELECT author, updated_by, rev FROM memories").fetchone()
    assert row == ("alice", "carol", 2)


def test_concurrent_edits_of_one_memory_keep_both_never_a_silent_overwrite(
    hub_db: HubDatabase,
) -> None:
    alice, carol, dan = (hub_db.memories("A", name) for name in ("alice", "carol", "dan"))
    save(alice, "Build", "make")
    seen = alice.revision("proj", "Build")
    assert seen == 1 and carol.revision("proj", "Build") == 1
    assert save(alice, "Build", "make -j8", base_rev=seen).outcome is Outcome.SAVED
    second = save(carol, "Build", "ninja", base_rev=seen)
    third = save(dan, "Build", "bazel", base_rev=seen)
    assert second == Written(Outcome.CONFLICT, "build-conflict-2", 1)
    assert third == Written(Outcome.CONFLICT, "build-conflict-3", 1)
    shown = alice.show("proj", "Build")
    assert shown is not None and shown.content == text_of("Build", "make -j8")
    assert {m.slug: m.content for m in alice.list("proj")} == {
        "build": text_of("Build", "make -j8"),
        "build-conflict-2": text_of("Build", "ninja"),
        "build-conflict-3": text_of("Build", "bazel"),
    }
    assert sorted(m.label for m in alice.list("proj")) == [
        "Build",
        "Build (conflict 2)",
        "Build (conflict 3)",
    ]
    flagged = (
        hub_db.owner()
        .execute(
            "SELECT slug, conflict_of, author FROM memories "
            "WHERE conflict_of IS NOT NULL ORDER BY slug"
        )
        .fetchall()
    )
    assert flagged == [
        ("build-conflict-2", "build", "carol"),
        ("build-conflict-3", "build", "dan"),
    ]


def test_two_machines_creating_one_label_keep_both(hub_db: HubDatabase) -> None:
    alice, carol = hub_db.memories("A", "alice"), hub_db.memories("A", "carol")
    assert save(alice, "Build", "make").outcome is Outcome.SAVED
    assert save(carol, "Build", "ninja") == Written(Outcome.CONFLICT, "build-conflict-2", 1)
    # A memory saved under the label a conflict version would take is not replaced: the
    # next version takes the next number.
    assert save(alice, "Build (conflict 3)", "x") == Written(Outcome.SAVED, "build-conflict-3", 1)
    assert save(carol, "Build", "bazel") == Written(Outcome.CONFLICT, "build-conflict-4", 1)
    assert alice.show("proj", "Build (conflict 3)").content == text_of(  # type: ignore[union-attr]
        "Build (conflict 3)", "x"
    )


def test_a_conflict_version_is_edited_and_forgotten_by_its_own_label(hub_db: HubDatabase) -> None:
    """The user merges the two versions into one and forgets the other, from any machine:
    the version is addressed by its label like any memory."""
    alice, carol = hub_db.memories("A", "alice"), hub_db.memories("A", "carol")
    save(alice, "Build", "make")
    assert save(carol, "Build", "ninja") == Written(Outcome.CONFLICT, "build-conflict-2", 1)
    assert alice.revision("proj", "Build (conflict 2)") == 1
    assert save(alice, "Build (conflict 2)", "ninja -j8", base_rev=1) == Written(
        Outcome.SAVED, "build-conflict-2", 2
    )
    assert save(alice, "Build", "make or ninja", base_rev=1).outcome is Outcome.SAVED
    forgotten = carol.forget("proj", "Build (conflict 2)")
    assert forgotten is not None and forgotten.content == text_of("Build (conflict 2)", "ninja -j8")
    assert [(m.label, m.content) for m in alice.list("proj")] == [
        ("Build", text_of("Build", "make or ninja"))
    ]
    # Recreated afresh under that label, it is no conflict version any more.
    assert save(carol, "Build (conflict 2)", "y").outcome is Outcome.SAVED
    flagged = (
        hub_db.owner()
        .execute("SELECT conflict_of FROM memories WHERE slug = 'build-conflict-2'")
        .fetchone()
    )
    assert flagged == (None,)


def test_a_write_of_what_the_row_holds_already_is_saved_at_its_revision_not_a_conflict(
    hub_db: HubDatabase,
) -> None:
    """Two machines that hold the same memory both push it (a join, a personal store
    synced from two machines): the second write changes nothing and is no conflict."""
    alice, carol = hub_db.memories("A", "alice"), hub_db.memories("A", "carol")
    assert save(alice, "Build", "make") == Written(Outcome.SAVED, "build", 1)
    cursor = changes_after(alice.conn, alice.who, START).cursor
    assert save(carol, "Build", "make", write_id="c-1") == Written(Outcome.SAVED, "build", 1)
    assert save(carol, "Build", "make", write_id="c-1") == Written(Outcome.SAVED, "build", 1)
    assert save(alice, "Build", "make -j8", base_rev=1) == Written(Outcome.SAVED, "build", 2)
    # A stale base with the row's current text: still nothing to keep aside.
    assert save(carol, "Build", "make -j8", base_rev=1) == Written(Outcome.SAVED, "build", 2)
    assert [(m.slug, m.content) for m in alice.list("proj")] == [
        ("build", text_of("Build", "make -j8"))
    ]
    # Only alice's edit moved the feed: the no-op writes wrote nothing.
    assert [c.rev for c in changes_after(alice.conn, alice.who, cursor).changes] == [2]
    # Another text, or the same text under another label's spelling, is a conflict still.
    assert save(carol, "Build", "make").outcome is Outcome.CONFLICT
    shouted = carol.remember("proj", "BUILD", text_of("Build", "make -j8"), vec("x"), "m")
    assert shouted == Written(Outcome.CONFLICT, "build-conflict-3", 1)


def run_together(calls: list[Callable[[], Written]]) -> list[Written]:
    """Each call on its own thread, released at once; their results in order."""
    barrier = threading.Barrier(len(calls))
    results: list[Written | BaseException | None] = [None] * len(calls)

    def run(index: int) -> None:
        barrier.wait()
        try:
            results[index] = calls[index]()
        except BaseException as error:  # re-raised below, on the test's thread
            results[index] = error

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return [result for result in results if isinstance(result, Written)]


@pytest.mark.parametrize("base_rev", [None, 1])
def test_simultaneous_writes_from_one_base_on_separate_connections_keep_every_version(
    hub_db: HubDatabase, base_rev: int | None
) -> None:
    writers = [hub_db.memories("A", f"member{index}") for index in range(4)]
    if base_rev is not None:
        save(writers[0], "Build", "first")
    results = run_together(
        [
            functools.partial(save, w, "Build", f"version {i}", base_rev=base_rev)
            for i, w in enumerate(writers)
        ]
    )
    outcomes = sorted(result.outcome.value for result in results)
    assert outcomes == ["conflict"] * 3 + ["saved"]
    slugs = sorted(m.slug for m in writers[0].list("proj"))
    assert slugs == ["build", "build-conflict-2", "build-conflict-3", "build-conflict-4"]
    bodies = {m.content for m in writers[0].list("proj")}
    assert {text_of("Build", f"version {i}") for i in range(4)} <= bodies


# -- tombstones ----------------------------------------------------------------------------


def test_forget_leaves_a_tombstone_without_the_text_that_the_feed_carries(
    hub_db: HubDatabase,
) -> None:
    alice = hub_db.memories("A", "alice")
    save(alice, "Build", "make")
    cursor = changes_after(alice.conn, alice.who, START).cursor
    forgotten = alice.forget("proj", "Build")
    assert forgotten is not None and forgotten.content == text_of("Build", "make")
    assert alice.show("proj", "Build") is None
    assert alice.list("proj") == []
    assert alice.search(["proj"], vec(text_of("Build", "make"))) == []
    assert alice.forget("proj", "Build") is None
    row = (
        hub_db.owner()
        .execute(
            "SELECT content, embedding IS NULL, vector IS NULL, deleted_at IS NOT NULL, rev "
            "FROM memories"
        )
        .fetchone()
    )
    assert row == ("", True, True, True, 2)
    (change,) = changes_after(alice.conn, alice.who, cursor).changes
    assert (change.slug, change.memory, change.rev) == ("build", None, 2)


def test_a_label_deleted_then_written_again_lives_and_a_stale_edit_is_kept_aside(
    hub_db: HubDatabase,
) -> None:
    alice, carol = hub_db.memories("A", "alice"), hub_db.memories("A", "carol")
    save(alice, "Build", "make")
    alice.forget("proj", "Build")
    # carol edits from revision 1, which she saw before the delete: kept, not lost.
    assert save(carol, "Build", "ninja", base_rev=1) == Written(
        Outcome.CONFLICT, "build-conflict-2", 1
    )
    # A fresh write of the label (no base) recreates it.
    assert save(alice, "Build", "bazel") == Written(Outcome.SAVED, "build", 3)
    assert [m.slug for m in alice.list("proj")] == ["build", "build-conflict-2"]


def test_tombstones_and_their_events_are_purged_after_the_retention(hub_db: HubDatabase) -> None:
    alice = hub_db.memories("A", "alice")
    for label in ("Old", "Recent", "Alive"):
        save(alice, label, label.lower())
    alice.recall(["proj"], vec("old recent alive"))
    alice.forget("proj", "Old")
    cutoff = hub_db.clock()
    alice.forget("proj", "Recent")
    assert alice.purge_tombstones(cutoff) == 1
    rows = (
        hub_db.owner()
        .execute("SELECT slug, deleted_at IS NOT NULL FROM memories ORDER BY slug")
        .fetchall()
    )
    assert rows == [("alive", False), ("recent", True)]
    events = (
        hub_db.owner().execute("SELECT DISTINCT slug FROM recall_events ORDER BY slug").fetchall()
    )
    assert events == [("alive",), ("recent",)]


# -- telemetry and the feed ----------------------------------------------------------------


def test_recalls_append_events_and_never_update_the_memory(hub_db: HubDatabase) -> None:
    alice, carol = hub_db.memories("A", "alice"), hub_db.memories("A", "carol")
    save(alice, "Build", "make")
    position = hub_db.owner().execute("SELECT rev, txid::text, seq FROM memories").fetchone()
    cursor = changes_after(alice.conn, alice.who, START).cursor
    (match,) = alice.recall(["proj"], vec(text_of("Build", "make")))
    assert match.memory.recall_count == 0
    carol.recall(["proj"], vec(text_of("Build", "make")))
    shown = alice.show("proj", "Build")
    assert shown is not None and shown.recall_count == 2
    assert shown.last_recalled_at is not None
    assert (
        hub_db.owner().execute("SELECT rev, txid::text, seq FROM memories").fetchone() == position
    )
    assert changes_after(alice.conn, alice.who, cursor).changes == []
    members = hub_db.owner().execute("SELECT member FROM recall_events ORDER BY id").fetchall()
    assert members == [("alice",), ("carol",)]


def test_the_feed_holds_back_rows_of_a_transaction_older_than_one_still_running(
    hub_db: HubDatabase,
) -> None:
    """A transaction that began first but commits last must not be skipped by a cursor
    that already moved past the later one's rows."""
    alice, carol = hub_db.memories("A", "alice"), hub_db.memories("A", "carol")
    save(alice, "Seed", "seed")
    cursor = changes_after(alice.conn, alice.who, START).cursor
    slow = hub_db.hub()
    with as_member(slow, carol.who):
        slow.execute(
            "INSERT INTO memories (team, store, slug, label, content, created_at, updated_at) "
            "VALUES ('A', 'proj', 'slow', 'Slow', 'slow', now(), now())"
        )
        save(alice, "Fast", "fast")  # commits while the slow transaction is open
        page = changes_after(alice.conn, alice.who, cursor)
        assert page.changes == [] and page.cursor == cursor
    page = changes_after(alice.conn, alice.who, cursor)
    assert [change.slug for change in page.changes] == ["slow", "fast"]
    assert changes_after(alice.conn, alice.who, page.cursor).changes == []


@pytest.mark.parametrize(
    "statements",
    [
        ["CREATE TABLE batch (n int)", "INSERT INTO batch VALUES (1)"],
        ["SELECT pg_current_xact_id()"],  # an id, and no table touched
    ],
    ids=["writes", "takes-an-id"],
)
def test_a_transaction_in_another_database_of_the_cluster_holds_nothing_back(
    hub_db: HubDatabase, statements: list[str]
) -> None:
    """Transaction ids are the cluster's: with pg_snapshot_xmin alone, another application's
    open transaction on a shared cluster held every pull back while it lasted. A session
    connected to another database cannot write the hub's rows."""
    alice = hub_db.memories("A", "alice")
    cursor = changes_after(alice.conn, alice.who, START).cursor
    with psycopg.connect(hub_db.server.conninfo(hub_db.server.fresh_database())) as elsewhere:
        for statement in statements:  # left open
            elsewhere.execute(statement)
        save(alice, "Fast", "fast")
        page = changes_after(alice.conn, alice.who, cursor)
        assert [change.slug for change in page.changes] == ["fast"]
        elsewhere.rollback()


def test_a_prepared_transaction_holds_the_feed_back_only_in_its_own_database(
    hub_db: HubDatabase,
) -> None:
    """A prepared transaction has no session: pg_prepared_xacts names its database. One
    prepared elsewhere holds nothing back; one prepared here (its rows may still commit)
    holds back every later row until it is committed."""
    alice, carol = hub_db.memories("A", "alice"), hub_db.memories("A", "carol")
    save(alice, "Seed", "seed")
    cursor = changes_after(alice.conn, alice.who, START).cursor
    elsewhere = psycopg.connect(
        hub_db.server.conninfo(hub_db.server.fresh_database()), autocommit=True
    )
    here = psycopg.connect(hub_db.server.conninfo(hub_db.name), autocommit=True)
    try:
        elsewhere.execute("CREATE TABLE batch (n int)")
        elsewhere.execute("BEGIN")
        elsewhere.execute("INSERT INTO batch VALUES (1)")
        elsewhere.execute("PREPARE TRANSACTION 'elsewhere'")
        here.execute("BEGIN")
        here.execute(
            "SELECT set_config('thatch.team', 'A', true), set_config('thatch.member', %s, true)",
            (carol.who.member,),
        )
        here.execute(
            "INSERT INTO memories (team, store, slug, label, content, created_at, updated_at) "
            "VALUES ('A', 'proj', 'slow', 'Slow', 'slow', now(), now())"
        )
        here.execute("PREPARE TRANSACTION 'here'")
        save(alice, "Fast", "fast")
        assert changes_after(alice.conn, alice.who, cursor).changes == []
        here.execute("COMMIT PREPARED 'here'")
        page = changes_after(alice.conn, alice.who, cursor)
        assert [change.slug for change in page.changes] == ["slow", "fast"]
    finally:
        for conn in (here, elsewhere):
            prepared = "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"
            for (gid,) in conn.execute(prepared).fetchall():
                conn.execute(f"ROLLBACK PREPARED '{gid}'")
            conn.close()


def test_a_session_of_another_database_waiting_for_a_transaction_here_places_nothing(
    hub_db: HubDatabase,
) -> None:
    """A session of another database waiting for this database's open transaction (a
    logical replication slot being created waits for every transaction; here a row lock on
    a shared catalog) lists that transaction's id among its locks: it is still this
    database's, and its rows must not be overtaken (review: pg_locks placed it there)."""
    alice, carol = hub_db.memories("A", "alice"), hub_db.memories("A", "carol")
    save(alice, "Seed", "seed")
    cursor = changes_after(alice.conn, alice.who, START).cursor
    lock_row = "SELECT 1 FROM pg_database WHERE datname = %s FOR UPDATE"
    waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted"
    owner = hub_db.owner()
    other = psycopg.connect(hub_db.server.conninfo(hub_db.server.fresh_database()))
    waiter = threading.Thread(target=other.execute, args=(lock_row, (hub_db.name,)))
    try:
        slow_info = hub_db.server.conninfo(hub_db.name)
        with psycopg.connect(slow_info, autocommit=True) as slow, as_member(slow, carol.who):
            slow.execute(
                "INSERT INTO memories (team, store, slug, label, content, created_at, "
                "updated_at) VALUES ('A', 'proj', 'slow', 'Slow', 'slow', now(), now())"
            )
            slow.execute(lock_row, (hub_db.name,))
            save(alice, "Fast", "fast")
            other.execute("CREATE TABLE batch (n int)")
            waiter.start()
            deadline = time.monotonic() + 120
            while owner.execute(waiting).fetchone() == (0,):
                assert time.monotonic() < deadline, "the other session never waited"
                time.sleep(0.01)  # a poll of the condition above
            assert changes_after(alice.conn, alice.who, cursor).changes == []
    finally:  # the slow transaction has ended either way: the waiter gets its row
        if waiter.is_alive():
            waiter.join()
        other.rollback()
        other.close()
    page = changes_after(alice.conn, alice.who, cursor)
    assert [change.slug for change in page.changes] == ["slow", "fast"]


def test_the_feed_pages_in_order_and_names_each_author(hub_db: HubDatabase) -> None:
    alice, carol = hub_db.memories("A", "alice"), hub_db.memories("A", "carol")
    for index in range(5):
        save(alice if index % 2 == 0 else carol, f"Note {index}", f"body {index}")
    seen: list[tuple[str, str]] = []
    cursor = START
    while page := changes_after(alice.conn, alice.who, cursor, limit=2).changes:
        seen += [(change.slug, change.author) for change in page]
        cursor = changes_after(alice.conn, alice.who, cursor, limit=2).cursor
    assert seen == [(f"note-{i}", "alice" if i % 2 == 0 else "carol") for i in range(5)]


# -- refusals ------------------------------------------------------------------------------


def test_a_memory_holding_a_secret_is_refused_and_nothing_is_written(hub_db: HubDatabase) -> None:
    alice = hub_db.memories("A", "alice")
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    with pytest.raises(SecretFound, match=r"GitHub token \(line 4\).*personal store") as raised:
        save(alice, "CI", f"the CI pushes with\n{token}")
    assert token not in str(raised.value)
    assert hub_db.owner().execute("SELECT count(*) FROM memories").fetchone() == (0,)


@pytest.mark.parametrize("dim", [256, 768])
def test_vectors_of_another_model_are_refused(hub_db: HubDatabase, dim: int) -> None:
    alice = hub_db.memories("A", "alice")
    with pytest.raises(InvalidInputError, match="384-dimensional"):
        alice.remember("proj", "Build", "# Build\n\nmake", bag_vector("make", dim), "m")


# -- one recall path -----------------------------------------------------------------------

CORPUS = [
    ("proj", "Build", "run make then make test", None, False),
    ("proj", "Build twice", "run make then make test", None, False),  # same vector: a tie
    ("proj", "Test", "pytest runs the suite with make test", None, False),
    ("proj", "Deploy", "deploy with the release script", "main", False),
    ("proj", "Deploy branch", "deploy from the feature branch script", "feature", False),
    ("proj", "Archived build", "old make build steps", None, True),
    ("other", "Make", "make is the build tool here", None, False),
    ("other", "Lint", "ruff checks the style", None, False),
] + [
    ("proj", f"Filler {i}", f"filler words {i} about build {i % 3} things", None, False)
    for i in range(30)
]

QUERIES = ["how do I build", "make test", "deploy script", "style checks", "filler build 1"]


@pytest.mark.parametrize(
    "options",
    [
        {"stores": ["proj"], "limit": 5},
        {"stores": ["proj", "other"], "limit": 3},
        {"stores": ["proj", "other"], "limit": 50},
        {"stores": ["proj"], "limit": 4, "branch": "feature"},
        {"stores": ["proj"], "limit": 4, "include_archived": True},
    ],
)
def test_recall_ranks_exactly_as_the_local_sqlite_store(
    hub_db: HubDatabase, tmp_path: Path, options: dict[str, Any]
) -> None:
    alice = hub_db.memories("A", "alice")
    stores = options.pop("stores")
    with Store.open(tmp_path / "thatch.db") as local:
        for store, label, body, branch, archived in CORPUS:
            stored = text_of(label, body)
            vector = vec(stored)
            local.remember(store, label, stored, vector, "m", branch=branch, archived=archived)
            alice.remember(store, label, stored, vector, "m", branch=branch, archived=archived)
        for query in QUERIES:
            wanted = local.search(stores, vec(query), **options)
            got = alice.search(stores, vec(query), **options)
            assert wanted, query
            assert [(m.memory.store, m.memory.slug, m.score) for m in got] == [
                (m.memory.store, m.memory.slug, m.score) for m in wanted
            ], query


def test_screening_in_half_precision_never_drops_a_row_float64_ranks_in(
    hub_db: HubDatabase, tmp_path: Path
) -> None:
    """Near-ties closer than float16 can tell apart: the limit-th best by exact score is
    still returned, as locally."""
    alice = hub_db.memories("A", "alice")
    rng = np.random.default_rng(7)
    base = rng.standard_normal(DIM)
    base /= np.linalg.norm(base)
    with Store.open(tmp_path / "thatch.db") as local:
        for index in range(40):
            vector = (base + rng.standard_normal(DIM) * 1e-3).astype(np.float32)
            label = f"Near {index}"
            alice.remember("proj", label, text_of(label, "x"), vector, "m")
            local.remember("proj", label, text_of(label, "x"), vector, "m")
        for limit in (1, 3, 10):
            wanted = [(m.memory.slug, m.score) for m in local.search(["proj"], base, limit=limit)]
            got = [(m.memory.slug, m.score) for m in alice.search(["proj"], base, limit=limit)]
            assert got == wanted
    assert alice.screens == {"exact": 3}  # 40 memories: under the threshold, never the index


def test_a_cursor_older_than_a_purged_tombstone_is_told_to_pull_again(
    hub_db: HubDatabase,
) -> None:
    alice = hub_db.memories("A", "alice")
    save(alice, "Old", "old")
    before_delete = changes_after(alice.conn, alice.who, START).cursor
    alice.forget("proj", "Old")
    save(alice, "New", "new")
    current = changes_after(alice.conn, alice.who, START).cursor
    assert not changes_after(alice.conn, alice.who, before_delete).reset
    assert alice.purge_tombstones(hub_db.clock()) == 1
    stale = changes_after(alice.conn, alice.who, before_delete)
    assert stale.reset and stale.changes == []
    assert not changes_after(alice.conn, alice.who, current).reset
    fresh = changes_after(alice.conn, alice.who, START)
    assert not fresh.reset and [change.slug for change in fresh.changes] == ["new"]
    # Another team's purge horizon is its own.
    bob = hub_db.memories("B", "bob")
    assert not changes_after(bob.conn, bob.who, before_delete).reset


def test_a_pull_from_the_start_after_a_purge_is_not_reset_again(hub_db: HubDatabase) -> None:
    """The newest change was a purged tombstone: a machine pulling from the start ends at
    the horizon, not below it (else its every later pull is reset, for ever)."""
    alice = hub_db.memories("A", "alice")
    save(alice, "Kept", "kept")
    save(alice, "Gone", "gone")
    alice.forget("proj", "Gone")
    assert alice.purge_tombstones(hub_db.clock()) == 1
    fresh = changes_after(alice.conn, alice.who, START)
    assert [change.slug for change in fresh.changes] == ["kept"]
    after = changes_after(alice.conn, alice.who, fresh.cursor)
    assert not after.reset and after.changes == []
    # A page that is not the last keeps its own cursor: the rest is still to come.
    save(alice, "Later", "later")
    first = changes_after(alice.conn, alice.who, START, limit=1)
    rest = changes_after(alice.conn, alice.who, first.cursor)
    assert [change.slug for change in first.changes + rest.changes] == ["kept", "later"]


def test_an_edit_keeps_the_branch_confidence_and_archived_flag_it_does_not_set(
    hub_db: HubDatabase,
) -> None:
    """As the local store's overwrite: an edit of an archived memory stays archived."""
    alice = hub_db.memories("A", "alice")
    save(alice, "Build", "make", branch="main", confidence=3, archived=True)
    save(alice, "Build", "ninja", base_rev=1)
    shown = alice.show("proj", "Build")
    assert shown is not None
    assert (shown.content, shown.branch, shown.confidence, shown.archived) == (
        text_of("Build", "ninja"),
        "main",
        3,
        True,
    )
    save(alice, "Build", "bazel", base_rev=2, archived=False, branch="dev")
    shown = alice.show("proj", "Build")
    assert shown is not None and (shown.branch, shown.archived) == ("dev", False)
    # A label recreated after a delete starts afresh.
    alice.forget("proj", "Build")
    save(alice, "Build", "cmake")
    shown = alice.show("proj", "Build")
    assert shown is not None
    assert (shown.branch, shown.confidence, shown.archived) == (None, None, False)


def test_a_memory_saved_without_a_vector_is_pending_and_never_ranked(
    hub_db: HubDatabase,
) -> None:
    alice = hub_db.memories("A", "alice")
    stored = text_of("Build", "make")
    assert alice.remember("proj", "Build", stored, None, "m").outcome is Outcome.SAVED
    shown = alice.show("proj", "Build")
    assert shown is not None and shown.pending and shown.model is None
    assert alice.search(["proj"], vec(stored)) == []
    alice.remember("proj", "Build", stored, vec(stored), "m", base_rev=1)
    (match,) = alice.search(["proj"], vec(stored))
    assert match.memory.dim == DIM and match.score == pytest.approx(1.0)


def test_a_retried_push_gets_its_first_outcome_and_writes_nothing_again(
    hub_db: HubDatabase,
) -> None:
    """The acknowledgement of a push may be lost; the machine pushes the same outbox row
    again, which must not become a conflict version of itself."""
    alice, carol = hub_db.memories("A", "alice"), hub_db.memories("A", "carol")
    first = save(alice, "Build", "make", write_id="alice-1")
    edit = save(alice, "Build", "ninja", base_rev=1, write_id="alice-2")
    assert save(alice, "Build", "ninja", base_rev=1, write_id="alice-2") == edit
    assert save(alice, "Build", "make", write_id="alice-1") == first
    conflict = save(carol, "Build", "bazel", base_rev=1, write_id="carol-1")
    assert conflict.outcome is Outcome.CONFLICT
    assert save(carol, "Build", "bazel", base_rev=1, write_id="carol-1") == conflict
    assert sorted(m.slug for m in alice.list("proj")) == ["build", "build-conflict-2"]
    assert hub_db.owner().execute("SELECT max(rev) FROM memories").fetchone() == (2,)
    # The ids are per team: team B's "alice-1" is a write of its own.
    bob = hub_db.memories("B", "bob")
    assert save(bob, "Build", "cargo", write_id="alice-1") == Written(Outcome.SAVED, "build", 1)


def test_the_same_push_arriving_twice_at_once_is_applied_once(hub_db: HubDatabase) -> None:
    pushes = [hub_db.memories("A", f"alice{index}") for index in range(2)]
    save(pushes[0], "Build", "make")
    results = run_together(
        [
            functools.partial(save, p, "Build", "ninja", base_rev=1, write_id="machine-7")
            for p in pushes
        ]
    )
    assert results[0] == results[1] == Written(Outcome.SAVED, "build", 2)
    assert [m.slug for m in pushes[0].list("proj")] == ["build"]


# -- the HNSW screen above the exact-scan threshold ----------------------------------------

CENTRES = 16


def clustered(rng: np.random.Generator, centres: Any, count: int, noise: float) -> Any:
    """Unit vectors around ``centres`` (a stand-in for related notes)."""
    points = centres[rng.integers(0, len(centres), count)]
    points = points + rng.standard_normal((count, DIM)) * noise
    return (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)


def copy_memories(hub_db: HubDatabase, team: str, store: str, vectors: Any) -> None:
    """COPY one row per vector into ``store`` as the owner (writes one at a time through
    ``remember`` would make a store over the threshold slow to set up)."""
    conn = hub_db.owner()
    with conn.transaction():
        conn.execute("SELECT set_config('thatch.member', 'loader', true)")
        conn.execute(
            "INSERT INTO stores (team, name) VALUES (%s, %s) ON CONFLICT DO NOTHING",
            (team, store),
        )
        with conn.cursor().copy(
            "COPY memories (team, store, slug, label, content, embedding, vector, model, "
            "created_at, updated_at) FROM STDIN"
        ) as copy:
            for index, vector in enumerate(vectors):
                label = f"{store} note {index}"
                copy.write_row(
                    (
                        team,
                        store,
                        f"{store}-note-{index}",
                        label,
                        text_of(label, "x"),
                        "[" + ",".join(repr(float(value)) for value in vector) + "]",
                        vector.astype("<f4").tobytes(),
                        "m",
                        "2026-01-01T00:00:00Z",
                        "2026-01-01T00:00:00Z",
                    )
                )
    conn.execute("ANALYZE memories")


def answer(matches: list[Any]) -> list[tuple[str, str, float]]:
    return [(m.memory.store, m.memory.slug, m.score) for m in matches]


@pytest.fixture
def clustered_stores(hub_db: HubDatabase) -> tuple[Any, Any]:
    """Team A's "proj" (3,000 memories) and "other" (1,000) around the same centres; the
    centres and the generator for queries."""
    hub_db.add_member("A", "loader")
    rng = np.random.default_rng(25)
    centres = rng.standard_normal((CENTRES, DIM))
    copy_memories(hub_db, "A", "proj", clustered(rng, centres, 3000, 0.3))
    copy_memories(hub_db, "A", "other", clustered(rng, centres, 1000, 0.3))
    return centres, rng


def test_above_the_threshold_the_hnsw_index_screens_with_exact_scores_near_ties_aside(
    hub_db: HubDatabase, clustered_stores: tuple[Any, Any]
) -> None:
    """With the threshold under the store's size the index screens (the plan walks it,
    the counter says so) and the answer is what docs/team.md promises above the threshold:
    rows of the stores with their exact scores, in the local order; complete but for
    near-ties of the k-th the graph walk may miss (the index is approximate: its graph is
    built with random levels, so one run in many missed one such row of the 240 here)."""
    from thatch.hub.memories import HNSW_SCREEN, HNSW_SETTINGS, _halfvec

    centres, rng = clustered_stores
    exact = hub_db.memories("A", "alice")
    screened = HubMemories(exact.conn, exact.who, hub_db.clock, exact_scan_max=2000)
    queries = clustered(rng, centres, 12, 0.3)
    missed = 0
    for stores in (["proj"], ["proj", "other"]):
        for query in queries:
            wanted = answer(exact.search(stores, query))
            assert len(wanted) == 10
            got = answer(screened.search(stores, query))
            exact_score = {(store, slug): score for store, slug, score in wanted}
            exact_score.update(
                ((store, slug), score)
                for store, slug, score in answer(exact.search(stores, query, limit=100))
                if (store, slug) not in exact_score
            )
            assert len(got) == 10
            assert got == sorted(got, key=lambda row: (-row[2], row[0], row[1]))
            assert all(exact_score.get((store, slug)) == score for store, slug, score in got)
            assert got[-1][2] >= wanted[-1][2] - 2e-3  # a near-tie at worst
            missed += len(set(wanted) - set(got))
    assert missed <= 5  # of 240: recall@10 at least 0.98 (1.000 in most runs)
    assert exact.screens == {"exact": 48}
    assert screened.screens == {"hnsw": 24}
    # 3,000 live memories in "proj" is over 2,000; "other"'s 1,000 alone is not.
    screened.search(["other"], queries[0])
    assert screened.screens["exact"] == 1

    with as_member(exact.conn, exact.who) as conn:
        conn.execute(HNSW_SETTINGS, ("200",))
        plan = conn.execute(
            "EXPLAIN " + HNSW_SCREEN,
            {
                "q": _halfvec(queries[0].astype(np.float64)),
                "stores": ["proj"],
                "archived": False,
                "branch": None,
                "rows": 30,
            },
        ).fetchall()
    assert any("memories_embedding_hnsw" in line for (line,) in plan), plan


def test_without_index_walks_every_search_scans_exactly(
    hub_db: HubDatabase, clustered_stores: tuple[Any, Any]
) -> None:
    """What the hub serves with when the server's pgvector has no iterative index scans
    (0.7: ``hnsw.iterative_scan`` is unknown, and the screen failed every recall over a
    large store): the exact answer from the exact scan, however large the stores."""
    centres, rng = clustered_stores
    exact = hub_db.memories("A", "alice")
    unwalked = HubMemories(exact.conn, exact.who, hub_db.clock, exact_scan_max=None)
    walked = HubMemories(exact.conn, exact.who, hub_db.clock, exact_scan_max=2000)
    for query in clustered(rng, centres, 3, 0.3):
        assert answer(unwalked.search(["proj", "other"], query)) == answer(
            exact.search(["proj", "other"], query)
        )
        walked.search(["proj", "other"], query)
    assert unwalked.screens == {"exact": 3}
    assert walked.screens == {"hnsw": 3}  # the same stores are past a threshold of 2,000


def test_the_guard_scans_exactly_when_the_index_walk_gives_up(
    hub_db: HubDatabase, clustered_stores: tuple[Any, Any]
) -> None:
    """A query whose neighbourhood is all another store's: with the walk capped (the
    server's ``hnsw.max_scan_tuples``) the index returns too few of the store asked,
    and the search falls back to the exact scan: the same answer, slower."""
    centres, rng = clustered_stores
    away = clustered(rng, centres[:1], 1, 0.05)[0]
    # 600 near-copies of the query (cosine ~0.999) in "crowd", nearer than any of "proj"
    # (~0.95): the walk meets them first, and gives up before it reaches "proj".
    copy_memories(hub_db, "A", "crowd", clustered(rng, away[None, :], 600, 0.002))
    hub_db.owner().execute(f'ALTER DATABASE "{hub_db.name}" SET hnsw.max_scan_tuples = 1')
    exact = hub_db.memories("A", "alice")  # a new connection: it has the setting
    screened = HubMemories(exact.conn, exact.who, hub_db.clock, exact_scan_max=2000)
    wanted = answer(exact.search(["proj"], away))
    assert len(wanted) == 10
    assert answer(screened.search(["proj"], away)) == wanted
    assert screened.screens == {"hnsw fell back": 1}


def test_the_guard_refuses_candidates_from_a_missed_neighbourhood(
    hub_db: HubDatabase, clustered_stores: tuple[Any, Any]
) -> None:
    """The index's answer when it converges on the wrong cluster (constructed: the
    candidates are the store's rows farthest from the query): a row of the fixed sample
    beats them, so the guard refuses it; the true candidates pass."""
    from thatch.hub.memories import HALF_MARGIN, _halfvec

    centres, rng = clustered_stores
    alice = hub_db.memories("A", "alice")
    query = clustered(rng, centres, 1, 0.3)[0]
    params = {
        "q": _halfvec(query.astype(np.float64)),
        "stores": ["proj"],
        "archived": False,
        "branch": None,
        "margin": HALF_MARGIN,
    }
    with as_member(alice.conn, alice.who) as conn:
        rows = conn.execute(
            "SELECT store, slug, vector FROM memories WHERE team = 'A' AND store = 'proj' "
            "ORDER BY embedding <#> %(q)s::halfvec, slug",
            params,
        ).fetchall()
        missed = alice._guarded(conn, params, query, 10, rows[-30:])
        found = alice._guarded(conn, params, query, 10, rows[:30])
    assert missed is None
    assert found is not None
    assert answer(found) == answer(alice.search(["proj"], query))
