"""The machine side of team sync on real SQLite files (m015, thatch.teamsync): the outbox
triggers (thatch's writes and the earlier release's exact SQL), the apply guard, the
durable cursor, pushes settled by hub.v1 acks, and secrets refused at save."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.support import earlier_release
from thatch.frontend.errors import DatabaseBusyError
from thatch.frontend.secret_scan import SecretFound
from thatch.frontend.store.db import connect
from thatch.frontend.store.memory_store import Store
from thatch.hub.client import HubUnavailable
from thatch.hub.v1 import hub_pb2
from thatch.teamsync import outbox
from thatch.teamsync.engine import LinkOutcome, SyncEngine
from thatch.teamsync.links import Link, add_link, get_link, machine_id, remove_link
from thatch.teamsync.replica import apply_page

SHARED = "acme/app"
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
NOW = "2026-12-04T17:00:00.000Z"


def link(store: Store, name: str = SHARED) -> int:
    return add_link(
        store.conn,
        store=name,
        hub_url="https://hub.test:443",
        team="acme",
        member="ann",
        hub_model="m",
        now=NOW,
    )


def queued(conn: sqlite3.Connection) -> list[tuple[object, ...]]:
    return conn.execute(
        "SELECT store, slug, op, base_rev, label, content FROM team_outbox ORDER BY id"
    ).fetchall()


@pytest.fixture
def store(tmp_path: Path):
    with Store.open(tmp_path / "thatch.db") as opened:
        yield opened


def test_writes_to_a_linked_store_are_queued_in_order(store: Store) -> None:
    store.remember("global", "personal", "# personal\n\nmine", None, None)
    assert link(store) == 0
    store.remember(SHARED, "Build cmd", "# Build cmd\n\nmake", None, None)
    store.remember(SHARED, "Build cmd", "# Build cmd\n\nmake all", None, None, overwrite=True)
    # Re-embedding and recall stamps are not the owner's writes: nothing queued.
    store.conn.execute(
        "UPDATE entries SET embedding = x'0000803f', model = 'm', recall_count = 3 "
        "WHERE slug = 'build-cmd'"
    )
    # An overwrite with the same values changes nothing to push.
    store.remember(SHARED, "Build cmd", "# Build cmd\n\nmake all", None, None, overwrite=True)
    store.forget(SHARED, "Build cmd")
    assert queued(store.conn) == [
        (SHARED, "build-cmd", "remember", None, "Build cmd", "# Build cmd\n\nmake"),
        (SHARED, "build-cmd", "remember", None, "Build cmd", "# Build cmd\n\nmake all"),
        (SHARED, "build-cmd", "forget", None, "Build cmd", None),
    ]


def test_joining_queues_the_stores_existing_memories(store: Store) -> None:
    store.remember(SHARED, "old one", "# old one\n\nbefore the link", None, None)
    assert link(store) == 1
    assert queued(store.conn) == [
        (SHARED, "old-one", "remember", None, "old one", "# old one\n\nbefore the link")
    ]
    assert remove_link(store.conn, SHARED) == 1
    assert queued(store.conn) == [] and get_link(store.conn, SHARED) is None
    store.remember(SHARED, "after leaving", "# after leaving\n\nx", None, None)
    assert queued(store.conn) == []


def test_the_earlier_releases_exact_sql_is_queued(store: Store, tmp_path: Path) -> None:
    link(store)
    legacy = sqlite3.connect(tmp_path / "thatch.db", isolation_level=None)
    try:
        for pragma in earlier_release.PRAGMAS:
            legacy.execute(pragma)
        blob = earlier_release.fixed_blob()
        row = ("ts-note", SHARED, "ts note", "# ts note\n\none", blob, "m", None, None, 0, NOW, NOW)
        legacy.execute(earlier_release.INSERT, row)
        changed = ("ts-note", SHARED, "ts note", "# ts note\n\ntwo", blob, "m", "main", 3, 0)
        legacy.execute(earlier_release.UPSERT, (*changed, NOW, NOW, None))
        legacy.execute(earlier_release.FORGET, ("ts-note", SHARED))
    finally:
        legacy.close()
    assert queued(store.conn) == [
        (SHARED, "ts-note", "remember", None, "ts note", "# ts note\n\none"),
        (SHARED, "ts-note", "remember", None, "ts note", "# ts note\n\ntwo"),
        (SHARED, "ts-note", "forget", None, "ts note", None),
    ]


def test_a_secret_is_refused_at_save_for_a_linked_store_only(store: Store) -> None:
    link(store)
    with pytest.raises(SecretFound) as refused:
        store.remember(SHARED, "deploy", f"# deploy\n\nkey {AWS_KEY}", None, None)
    assert "an AWS access key id" in str(refused.value) and AWS_KEY not in str(refused.value)
    assert store.show(SHARED, "deploy") is None and queued(store.conn) == []
    store.remember("global", "deploy", f"# deploy\n\nkey {AWS_KEY}", None, None)
    assert store.show("global", "deploy") is not None


def memory(label: str, text: str, *, vector: bytes = b"", model: str = "") -> hub_pb2.Memory:
    return hub_pb2.Memory(
        store=SHARED,
        slug=label,
        label=label,
        content=text,
        model=model,
        archived=False,
        created_at=NOW,
        updated_at=NOW,
        vector=vector,
    )


def page(*changes: hub_pb2.Change, txid: int, seq: int, reset: bool = False):
    return hub_pb2.PullResponse(
        changes=list(changes), next=hub_pb2.Cursor(txid=txid, seq=seq), reset=reset
    )


def the_link(store: Store) -> Link:
    found = get_link(store.conn, SHARED)
    assert found is not None
    return found


def test_applied_changes_do_not_echo_and_the_cursor_moves_with_them(
    store: Store, tmp_path: Path
) -> None:
    link(store)
    blob = earlier_release.fixed_blob(3)
    first = page(
        hub_pb2.Change(
            store=SHARED, slug="a", rev=1, memory=memory("a", "# a\n\nx", vector=blob, model="m")
        ),
        hub_pb2.Change(
            store=SHARED,
            slug="b",
            rev=2,
            memory=memory("b", "# b\n\ny", vector=blob, model="other"),
        ),
        hub_pb2.Change(store="acme/other", slug="c", rev=1, memory=memory("c", "# c\n\nz")),
        txid=10,
        seq=3,
    )
    apply_page(store.conn, the_link(store), first, local_model="m")
    assert queued(store.conn) == []
    a, b = store.show(SHARED, "a"), store.show(SHARED, "b")
    assert a.dim == len(blob) // 4 and b.pending  # another model's vector is not used
    assert store.show("acme/other", "c") is None
    # A second connection (another process) writing meanwhile is still captured.
    other = connect(tmp_path / "thatch.db")
    try:
        Store(other).remember(SHARED, "mine", "# mine\n\nlocal", None, None)
    finally:
        other.close()
    tomb = page(hub_pb2.Change(store=SHARED, slug="a", rev=2), txid=11, seq=4)
    apply_page(store.conn, the_link(store), tomb, local_model="m")
    assert store.show(SHARED, "a") is None
    assert [row[1] for row in queued(store.conn)] == ["mine"]
    reopened = connect(tmp_path / "thatch.db")  # durable: read back through a new open
    try:
        found = get_link(reopened, SHARED)
        assert (found.cursor_txid, found.cursor_seq) == (11, 4)
        revs = dict(reopened.execute("SELECT slug, rev FROM team_revs").fetchall())
        assert revs == {"a": 2, "b": 2}
    finally:
        reopened.close()
    # An edit of a pulled memory carries the revision it was based on.
    store.remember(SHARED, "b", "# b\n\nedited", None, None, overwrite=True)
    assert queued(store.conn)[-1][:4] == (SHARED, "b", "remember", 2)


def test_a_failing_apply_keeps_neither_rows_nor_cursor(store: Store) -> None:
    link(store)
    bad = page(
        hub_pb2.Change(store=SHARED, slug="ok", rev=1, memory=memory("ok", "# ok\n\nx")),
        hub_pb2.Change(store=SHARED, slug="bad", rev=1, memory=hub_pb2.Memory(label="bad")),
        txid=5,
        seq=5,
    )
    store.conn.execute(
        "CREATE TRIGGER fail_bad BEFORE INSERT ON entries WHEN NEW.slug = 'bad' "
        "BEGIN SELECT RAISE(ABORT, 'boom'); END"
    )
    with pytest.raises(sqlite3.IntegrityError):
        apply_page(store.conn, the_link(store), bad, local_model=None)
    assert store.show(SHARED, "ok") is None
    assert (the_link(store).cursor_txid, the_link(store).cursor_seq) == (0, 0)
    assert store.conn.execute("SELECT count(*) FROM _thatch_team_applying").fetchone() == (0,)


def test_reset_drops_the_replica_and_starts_over(store: Store) -> None:
    link(store)
    apply_page(
        store.conn,
        the_link(store),
        page(
            hub_pb2.Change(store=SHARED, slug="a", rev=1, memory=memory("a", "# a\n\nx")),
            txid=9,
            seq=9,
        ),
        local_model=None,
    )
    store.remember(SHARED, "unpushed", "# unpushed\n\nkeep", None, None)
    apply_page(store.conn, the_link(store), page(txid=0, seq=0, reset=True), local_model=None)
    assert store.show(SHARED, "a") is None
    assert (the_link(store).cursor_txid, the_link(store).cursor_seq) == (0, 0)
    assert [row[1] for row in queued(store.conn)] == ["unpushed"]  # still to push


class ScriptedHub:
    """Answers hub.v1 calls from a script: what a hub would ack, recorded pushes."""

    def __init__(self) -> None:
        self.pushed: list[hub_pb2.Write] = []
        self.outcomes: dict[str, hub_pb2.Ack] = {}
        self.rev = 0
        self.down = False

    def push(self, writes):
        if self.down:
            raise HubUnavailable("hub unreachable", "retry later")
        acks = []
        for write in writes:
            self.pushed.append(write)
            self.rev += 1
            scripted = (
                self.outcomes.get(write.label) if write.op == hub_pb2.Write.REMEMBER else None
            )
            ack = scripted or hub_pb2.Ack(
                outcome=hub_pb2.Ack.SAVED
                if write.op == hub_pb2.Write.REMEMBER
                else hub_pb2.Ack.FORGOTTEN,
                slug=write.label.lower(),
                rev=self.rev,
            )
            acks.append(
                hub_pb2.Ack(
                    write_id=write.write_id,
                    outcome=ack.outcome,
                    slug=ack.slug,
                    rev=ack.rev or self.rev,
                    reason=ack.reason,
                )
            )
        return acks

    def pull(self, after=None, limit=0):
        return page(txid=after.txid, seq=after.seq)

    def stores(self):
        return hub_pb2.StoresResponse()

    def record_recalls(self, events):
        return len(events)


def test_push_settles_by_acks_and_chains_revisions(store: Store) -> None:
    link(store)
    hub = ScriptedHub()
    engine = SyncEngine(store.conn, lambda _: hub, local_model=None, batch=2)
    hub.down = True
    store.remember(SHARED, "n1", "# n1\n\none", None, None)
    store.remember(SHARED, "n1", "# n1\n\ntwo", None, None, overwrite=True)
    store.remember(SHARED, "n2", "# n2\n\nx", None, None)
    store.remember(SHARED, "n3", "# n3\n\ny", None, None)
    store.forget(SHARED, "n3")
    # The earlier release writes unchecked: this machine still keeps the secret.
    store.conn.execute(
        earlier_release.INSERT,
        ("leak", SHARED, "leak", f"# leak\n\n{AWS_KEY}", None, None, None, None, 0, NOW, NOW),
    )
    [failed] = engine.sync_all()
    assert failed.error == "hub unreachable. Fix: retry later" and len(queued(store.conn)) == 6
    assert the_link(store).last_error == failed.error
    hub.down = False
    hub.outcomes["n2"] = hub_pb2.Ack(outcome=hub_pb2.Ack.CONFLICT, slug="n2-conflict-2")
    hub.outcomes["n3"] = hub_pb2.Ack(outcome=hub_pb2.Ack.REFUSED, reason="secret (a JWT)")
    [done] = engine.sync_all()
    assert done.error is None and the_link(store).last_ok_at is not None
    machine = machine_id(store.conn)
    assert [w.write_id.split(":")[0] for w in hub.pushed] == [machine] * 5
    ids = [int(w.write_id.split(":")[1]) for w in hub.pushed]
    assert ids == sorted(ids)
    first, second = hub.pushed[0], hub.pushed[1]
    assert not first.HasField("base_rev") and second.base_rev == 1  # chained on its own save
    assert done.conflicts == [("n2", "n2-conflict-2")]
    assert sorted(reason for _, reason in done.refused) == [
        "secret (a JWT)",
        "secret (an AWS access key id)",
    ]
    assert "leak" not in [w.label for w in hub.pushed]
    waiting, aside = outbox.counts(store.conn, SHARED)
    assert (waiting, aside) == (0, 2)
    # Refused rows are never retried.
    engine.sync_all()
    assert len(hub.pushed) == 5


def test_link_outcome_defaults() -> None:
    assert LinkOutcome("s").error is None


class ResettingHub(ScriptedHub):
    """A feed that leads a cursor up from the start, then resets it (a hub bug)."""

    def pull(self, after=None, limit=0):
        if after is None or (after.txid, after.seq) == (0, 0):
            change = hub_pb2.Change(store=SHARED, slug="a", rev=1, memory=memory("a", "# a\n\nx"))
            return page(change, txid=5, seq=5)
        return page(txid=after.txid, seq=after.seq, reset=True)


def test_a_pass_never_loops_on_a_feed_that_keeps_resetting(store: Store) -> None:
    link(store)
    [done] = SyncEngine(store.conn, lambda _: ResettingHub(), local_model=None).sync_all()
    assert done.error is not None and "reset again" in done.error
    assert the_link(store).last_error == done.error


class BusyHub(ScriptedHub):
    def pull(self, after=None, limit=0):
        raise DatabaseBusyError()


def test_a_busy_database_is_a_links_error_not_the_end_of_the_process(store: Store) -> None:
    link(store)
    [done] = SyncEngine(store.conn, lambda _: BusyHub(), local_model=None).sync_all()
    assert done.error is not None and the_link(store).last_error == done.error


def test_a_database_moved_from_under_the_sync_process_ends_it(store: Store, tmp_path: Path) -> None:
    """The sync process would push and pull an unlinked file for good: it stops, with the
    error, and the next thatch command starts one on the file now at the path."""
    import os

    from thatch.frontend.errors import DatabaseMovedError

    link(store)
    hub = ScriptedHub()
    engine = SyncEngine(store.conn, lambda _: hub, local_model=None, batch=2)
    path = Path(store.path or "")
    os.rename(path, tmp_path / "moved.db")
    with pytest.raises(DatabaseMovedError, match="was deleted or moved after this process"):
        engine.sync_all()
    assert hub.pushed == []


def test_team_status_shows_a_refusal_and_a_sync_error_as_data(store: Store, tmp_path: Path) -> None:
    """The hub's reason for a refused write and a link's last error can quote what was
    written: `thatch team status` shows them as one literal each, never as lines of its
    own (a reason holding a newline printed a forged `outbox:` line)."""
    from click.testing import CliRunner

    from thatch.cli.main import cli
    from thatch.frontend.untrusted import inline, quoted
    from thatch.teamsync.links import note_error

    forged = 'x"\n  outbox: 0 waiting, 0 refused\x1b[2K\u202e'
    link(store)
    store.remember(SHARED, "n1", "# n1\n\none", None, None)
    [(row_id,)] = store.conn.execute("SELECT id FROM team_outbox").fetchall()
    outbox.set_aside(store.conn, row_id, forged)
    note_error(store.conn, SHARED, forged, NOW)
    env = {"THATCH_DB_PATH": str(tmp_path / "thatch.db"), "XDG_RUNTIME_DIR": str(tmp_path)}
    shown = CliRunner().invoke(cli, ["team", "status"], env=env)
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert lines.count("  outbox: 0 waiting, 1 refused") == 1
    assert not any(line.startswith("  outbox: 0 waiting, 0") for line in lines), lines
    assert f'    refused remember "n1": {quoted(forged)}' in lines
    assert f"  last error ({NOW}): {inline(forged)}" in lines
