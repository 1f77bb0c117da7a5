"""Recall telemetry of shared stores travels to the hub as events (m020, teamsync.recalls;
docs/team.md §sync-protocol): queued by trigger whoever stamps, sent by the sync process
as ``RecordRecalls``, deleted once answered, never an update of the hub's row."""

from __future__ import annotations

from pathlib import Path

from tests.support.polling import poll
from tests.test_team_outbox import NOW, SHARED, ScriptedHub, link, store
from tests.test_team_sync import DEADLINE, STORE, embedder, team
from thatch.frontend.store.memory_store import Store
from thatch.hub.client import HubRefused, HubUnavailable
from thatch.hub.v1 import hub_pb2
from thatch.teamsync import recalls
from thatch.teamsync.engine import SyncEngine
from thatch.teamsync.links import remove_link

__all__ = ["embedder", "store"]  # fixtures shared with test_team_sync / test_team_outbox

# The earlier release's recall stamp, by its exact SQL.
EARLIER_STAMP = (
    "UPDATE entries SET recall_count = recall_count + 1, last_recalled_at = ? "
    "WHERE slug = ? AND store = ?"
)


class RecordingHub(ScriptedHub):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[hub_pb2.RecallEvent] = []
        self.refuse = False

    def record_recalls(self, events):
        if self.down:
            raise HubUnavailable("hub unreachable", "retry later")
        if self.refuse:
            raise HubRefused("malformed", "no", "request")
        self.events.extend(events)
        return len(events)


def test_recalls_of_a_shared_store_are_sent_as_events_once(store: Store) -> None:
    store.remember("global", "mine", "# mine\n\npersonal", None, None)
    store.remember(SHARED, "Build", "# Build\n\nmake", None, None)
    link(store)
    stamped = "2026-12-04T17:30:00.000Z"
    store.conn.execute(EARLIER_STAMP, (stamped, "build", SHARED))
    store.conn.execute(EARLIER_STAMP, (stamped, "build", SHARED))
    store.conn.execute(EARLIER_STAMP, (stamped, "mine", "global"))  # not shared: no event
    store.conn.execute(EARLIER_STAMP, ("not a time", "build", SHARED))  # dropped at send
    assert recalls.waiting(store.conn, SHARED) == 3
    hub = RecordingHub()
    engine = SyncEngine(store.conn, lambda _: hub, local_model=None)
    hub.down = True
    [failed] = engine.sync_all()
    assert failed.error is not None and recalls.waiting(store.conn, SHARED) == 3  # kept
    hub.down = False
    [done] = engine.sync_all()
    assert done.error is None and done.recalls == 2
    assert [(e.store, e.slug, e.at) for e in hub.events] == [(SHARED, "build", stamped)] * 2
    assert recalls.waiting(store.conn, SHARED) == 0
    engine.sync_all()
    assert len(hub.events) == 2  # sent once
    # A batch the hub refuses as malformed is dropped, not retried forever.
    store.conn.execute(EARLIER_STAMP, (NOW, "build", SHARED))
    hub.refuse = True
    [refused] = engine.sync_all()
    assert refused.error is None and recalls.waiting(store.conn, SHARED) == 0
    # Leaving drops the store's events with the link.
    store.conn.execute(EARLIER_STAMP, (NOW, "build", SHARED))
    remove_link(store.conn, SHARED)
    assert recalls.waiting(store.conn, SHARED) == 0


def test_batches_follow_the_hubs_limit(store: Store) -> None:
    link(store)
    for index in range(5):
        store.remember(SHARED, f"n{index}", f"# n{index}\n\nx", None, None)
        store.conn.execute(EARLIER_STAMP, (NOW, f"n{index}", SHARED))
    hub = RecordingHub()
    sizes: list[int] = []

    class Counting:
        def record_recalls(self, events):
            sizes.append(len(events))
            return hub.record_recalls(events)

    assert recalls.send_recalls(store.conn, Counting(), SHARED, batch=2) == 5
    assert sizes == [2, 2, 1]


def test_a_recall_on_one_machine_is_an_event_on_the_hub(hub_db, embedder, tmp_path: Path) -> None:
    with team(hub_db, embedder, tmp_path) as (_, one, two):
        one.ok(
            "remember", "Deploy steps", "Run make deploy from the release branch.", "--store", STORE
        )
        assert poll(lambda: two.rows().get("deploy-steps", ("", False))[1], DEADLINE)
        owner = hub_db.owner()
        before = owner.execute(
            "SELECT rev, txid, seq FROM memories WHERE slug = 'deploy-steps'"
        ).fetchone()
        # An agent's recall on machine two (the MCP tool stamps what it returned).
        from thatch.frontend.tools.context import ToolContext
        from thatch.frontend.tools.memory_tools import Tools

        with ToolContext.from_env(two.env) as ctx:
            result = Tools(ctx).call("memory_recall", {"query": "how do we deploy", "store": STORE})
        assert not result.is_error and "Deploy steps" in result.text, result.text

        def events() -> list[tuple[str, str]]:
            rows = owner.execute(
                "SELECT slug, member FROM recall_events WHERE team = 'acme' ORDER BY id"
            )
            return [(str(slug), str(member)) for slug, member in rows]

        assert poll(lambda: events() == [("deploy-steps", "bob")], DEADLINE), two.log.read_text()
        after = owner.execute(
            "SELECT rev, txid, seq FROM memories WHERE slug = 'deploy-steps'"
        ).fetchone()
        assert after == before  # an event, never an update of the hub's row
