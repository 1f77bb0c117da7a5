"""hub.wire: the hub's messages carry memories, vectors, feed pages and outcomes unchanged."""

from __future__ import annotations

import numpy as np

from thatch.frontend.store.memory import Match, Memory
from thatch.hub import wire
from thatch.hub.v1 import hub_pb2 as pb
from thatch.hub.values import Change, Cursor, Outcome, Page, Written


def memory(**changes: object) -> Memory:
    values: dict[str, object] = dict(
        slug="deploy-steps",
        store="acme/api",
        label="Deploy steps",
        content="# Deploy steps\n\nrun make deploy",
        model="sentence-transformers/all-MiniLM-L6-v2",
        branch=None,
        confidence=None,
        archived=False,
        created_at="2026-01-01T00:00:01.000Z",
        updated_at="2026-01-01T00:00:02.000Z",
        recall_count=0,
        last_recalled_at=None,
        dim=384,
    )
    values.update(changes)
    return Memory(**values)  # type: ignore[arg-type]


def test_a_change_and_its_vector_come_back_equal() -> None:
    vector = np.linspace(-1, 1, 384, dtype="<f4").tobytes()
    for kept in (memory(), memory(branch="feat", confidence=0, archived=True)):
        change = Change("acme/api", kept.slug, 3, "deploy", "alice", kept, vector)
        sent = pb.Change.FromString(wire.change_to_pb(change).SerializeToString())
        assert wire.change_from_pb(sent) == change


def test_a_tombstone_and_a_pending_row_carry_no_vector() -> None:
    tombstone = Change("acme/api", "gone", 4, None, "bob", None)
    assert wire.change_from_pb(wire.change_to_pb(tombstone)) == tombstone
    pending = memory(model=None, dim=None)
    back, vector = wire.memory_from_pb(wire.memory_to_pb(pending, None))
    assert (back, vector) == (pending, None)


def test_a_page_keeps_its_cursor_and_reset() -> None:
    big = Cursor(2**63 + 5, 2**40)
    page = Page([Change("s", "a", 1, None, "m", None)], big, reset=True)
    assert wire.page_from_pb(wire.page_to_pb(page)) == page
    assert wire.cursor_from_pb(pb.Cursor()) == Cursor(0, 0)


def test_acks_name_the_outcome() -> None:
    saved = wire.ack_written("m:1", Written(Outcome.SAVED, "a", 2))
    conflict = wire.ack_written("m:2", Written(Outcome.CONFLICT, "a-conflict-2", 1))
    assert (saved.outcome, saved.slug, saved.rev) == (pb.Ack.SAVED, "a", 2)
    assert (conflict.outcome, conflict.slug) == (pb.Ack.CONFLICT, "a-conflict-2")
    refused = wire.ack_refused("m:3", "secret (github token)")
    assert (refused.outcome, refused.reason) == (pb.Ack.REFUSED, "secret (github token)")
    assert wire.ack_forgotten("m:4", "a").outcome == pb.Ack.FORGOTTEN


def test_a_match_keeps_its_score() -> None:
    match = wire.match_to_pb(Match(memory(), 0.75))
    assert match.score == 0.75 and match.memory.slug == "deploy-steps"
    assert match.memory.vector == b""
