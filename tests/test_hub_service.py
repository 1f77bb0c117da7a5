"""The hub as a service (docs/team.md §hub-rpcs): a real ``thatch hub serve`` process over
TLS, a real PostgreSQL with pgvector, the real MiniLM embedder, machines as ``HubClient``s.

Most tests share one hub and one database; each uses teams of its own, so they never see
one another's rows (which is what the isolation test checks on purpose).
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import psycopg
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support.embedder_proc import EmbedderProcess, embedder_process
from tests.support.hub_proc import HubProcess, hub_command, hub_process
from tests.support.hubdb import HubDatabase, hub_database
from tests.support.postgres import HUB_ROLE, PostgresServer
from tests.support.thread_signal import signal_a_worker_thread
from tests.support.tls_certs import make_certs
from thatch.embedder.client.embedder_client import EmbedderClient
from thatch.embedder.client.kind import Kind
from thatch.hub import wire
from thatch.hub.client import HubClient, HubRefused, HubUnavailable
from thatch.hub.servicer import PINNED_MODEL
from thatch.hub.v1 import hub_pb2 as pb
from thatch.hub.v1 import hub_pb2_grpc as pb_grpc

AWS_KEY = "AKIA" + "QW3RT5YU7IO9PL2K"  # built here so no scanner flags this file
_teams = itertools.count()


def remember(
    write_id: str, store: str, label: str, body: str, base_rev: int | None = None
) -> pb.Write:
    write = pb.Write(
        write_id=write_id,
        op=pb.Write.REMEMBER,
        store=store,
        label=label,
        stored_text=f"# {label}\n\n{body}",
    )
    if base_rev is not None:
        write.base_rev = base_rev
    return write


def forget(store: str, label: str) -> pb.Write:
    return pb.Write(op=pb.Write.FORGET, store=store, label=label)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("hub-certs"))


@pytest.fixture(scope="module")
def minilm(minilm_dir: Path) -> Iterator[EmbedderProcess]:
    """The real embedder serving the imported all-MiniLM-L6-v2, the hub's pinned model."""
    socket_dir = Path(tempfile.mkdtemp(prefix="th-", dir="/tmp"))
    try:
        with embedder_process(str(minilm_dir), socket_dir=socket_dir) as proc:
            assert proc.info().model_id == PINNED_MODEL
            yield proc
    finally:
        shutil.rmtree(socket_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def database(postgres: PostgresServer) -> Iterator[HubDatabase]:
    with hub_database(postgres) as db:
        yield db


def hub_url(db: HubDatabase) -> str:
    return db.server.conninfo(db.name, user=HUB_ROLE)


@pytest.fixture(scope="module")
def hub(
    database: HubDatabase,
    minilm: EmbedderProcess,
    certs: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[HubProcess]:
    directory = tmp_path_factory.mktemp("hub")
    with hub_process(hub_url(database), minilm.address, directory, certs=certs) as proc:
        yield proc


def team(database: HubDatabase, hub: HubProcess, *members: str) -> list[HubClient]:
    """Clients of new members of a new team, in order."""
    name = f"t{next(_teams)}"
    return [hub.client(database.add_member(name, member)) for member in members]


def test_a_push_comes_back_on_pull_with_the_embedders_vector(
    database: HubDatabase, hub: HubProcess, minilm: EmbedderProcess
) -> None:
    """REMEMBER is embedded by the hub with the pinned model; the feed carries that exact
    vector, so a replica ranks as the hub does."""
    (alice,) = team(database, hub, "alice")
    write = remember("m1:1", "acme/api", "Deploy steps", "run make deploy from main")
    (ack,) = alice.push([write])
    assert (ack.write_id, ack.outcome, ack.slug, ack.rev) == (
        "m1:1",
        pb.Ack.SAVED,
        "deploy-steps",
        1,
    )
    page = wire.page_from_pb(alice.pull())
    assert not page.reset
    (change,) = page.changes
    assert change.memory is not None and change.vector is not None
    assert (change.store, change.slug, change.rev, change.author) == (
        "acme/api",
        "deploy-steps",
        1,
        "alice",
    )
    assert change.memory.content == write.stored_text
    assert change.memory.model == PINNED_MODEL and change.memory.dim == 384
    with EmbedderClient(minilm.address, autostart=False) as embedder:
        expected = embedder.embed([write.stored_text], Kind.PASSAGE).vectors[0]
    np.testing.assert_allclose(np.frombuffer(change.vector, dtype="<f4"), expected, atol=1e-5)
    assert wire.page_from_pb(alice.pull(page.cursor)).changes == []
    stores = alice.stores()
    assert [(s.name, s.count) for s in stores.stores] == [("acme/api", 1)]
    assert (stores.member, stores.model, stores.dim) == ("alice", PINNED_MODEL, 384)
    found = alice.recall(["acme/api"], "how do I deploy?").matches
    assert [match.memory.slug for match in found] == ["deploy-steps"]
    assert found[0].score > 0.3


def test_branch_confidence_and_archived_travel_and_an_edit_keeps_them(
    database: HubDatabase, hub: HubProcess
) -> None:
    (alice,) = team(database, hub, "alice")
    write = remember("m:1", "s", "Flag", "the beta flag is on")
    write.branch, write.confidence, write.archived = "feat-x", 2, True
    alice.push([write])
    alice.push([remember("m:2", "s", "Flag", "the beta flag is off", base_rev=1)])
    (change,) = wire.page_from_pb(alice.pull()).changes
    assert change.memory is not None and change.rev == 2
    assert (change.memory.branch, change.memory.confidence, change.memory.archived) == (
        "feat-x",
        2,
        True,
    )
    assert change.memory.content.endswith("the beta flag is off")


def test_two_edits_from_the_same_revision_keep_both(database: HubDatabase, hub: HubProcess) -> None:
    alice, bob = team(database, hub, "alice", "bob")
    alice.push([remember("a:1", "s", "Port", "the api listens on 8080")])
    (first,) = alice.push([remember("a:2", "s", "Port", "the api listens on 9090", base_rev=1)])
    (second,) = bob.push([remember("b:1", "s", "Port", "the api listens on 7070", base_rev=1)])
    assert (first.outcome, first.slug, first.rev) == (pb.Ack.SAVED, "port", 2)
    assert (second.outcome, second.slug) == (pb.Ack.CONFLICT, "port-conflict-2")
    changes = wire.page_from_pb(bob.pull()).changes
    kept = {change.slug: change for change in changes}
    assert kept["port"].memory is not None and "9090" in kept["port"].memory.content
    assert kept["port-conflict-2"].conflict_of == "port"
    assert kept["port-conflict-2"].author == "bob"


def test_a_retried_push_is_applied_once(database: HubDatabase, hub: HubProcess) -> None:
    (alice,) = team(database, hub, "alice")
    batch = [
        remember("m:1", "s", "Build", "make build"),
        remember("m:2", "s", "Build", "make all", base_rev=1),
    ]
    first = alice.push(batch)
    again = alice.push(batch)  # the first reply was lost
    assert [(a.outcome, a.slug, a.rev) for a in first] == [
        (pb.Ack.SAVED, "build", 1),
        (pb.Ack.SAVED, "build", 2),
    ]
    assert list(again) == list(first)
    changes = wire.page_from_pb(alice.pull()).changes
    assert [(c.slug, c.rev) for c in changes] == [("build", 2)]


def test_a_retry_of_applied_writes_needs_no_embedder(
    database: HubDatabase, hub: HubProcess, certs: Path, tmp_path: Path
) -> None:
    """A push whose reply was lost is answered from the recorded outcomes before anything
    is embedded: a retry that reaches a replica whose embedder is down by then is
    acknowledged, not failed; a write it has not applied still needs the embedder."""
    token = database.add_member(f"t{next(_teams)}", "alice")
    batch = [remember("m:1", "s", "Build", "make build"), remember("m:2", "s", "Lint", "ruff")]
    first = hub.client(token).push(batch)
    nowhere = f"unix://{tmp_path}/none.sock"
    with hub_process(hub_url(database), nowhere, tmp_path, certs=certs) as down:
        replica = down.client(token)
        assert list(replica.push(batch)) == list(first)
        with pytest.raises(HubUnavailable, match="the hub's embedder is unavailable"):
            replica.push([*batch, remember("m:3", "s", "Test", "pytest")])
    changes = wire.page_from_pb(hub.client(token).pull()).changes
    assert sorted((c.slug, c.rev) for c in changes) == [("build", 1), ("lint", 1)]


def test_a_write_id_another_member_pushed_first_does_not_cancel_the_owners_write(
    database: HubDatabase, hub: HubProcess
) -> None:
    """Write ids are `<machine>:<outbox row>`, and the chat shows every machine's id to
    the team: bob pushed alice's next id first, her write came back "already applied",
    and her machine dropped it from its outbox."""
    alice, bob = team(database, hub, "alice", "bob")
    (squatted,) = bob.push([remember("alice-machine:1", "s", "Squat", "taken first")])
    assert (squatted.outcome, squatted.slug) == (pb.Ack.SAVED, "squat")
    (own,) = alice.push([remember("alice-machine:1", "s", "Decision", "we ship on fridays")])
    assert (own.outcome, own.slug, own.rev) == (pb.Ack.SAVED, "decision", 1)
    again = bob.push([remember("alice-machine:1", "s", "Squat", "taken first")])
    assert list(again) == [squatted]  # bob's own retry is still applied once
    changes = wire.page_from_pb(alice.pull()).changes
    assert sorted(c.slug for c in changes) == ["decision", "squat"]


def test_a_secret_is_refused_and_nothing_is_stored(database: HubDatabase, hub: HubProcess) -> None:
    (alice,) = team(database, hub, "alice")
    acks = alice.push(
        [
            remember("m:1", "s", "AWS", f"the key is {AWS_KEY}"),
            remember("m:2", "s", "Region", "we deploy to eu-west-1"),
        ]
    )
    assert [a.outcome for a in acks] == [pb.Ack.REFUSED, pb.Ack.SAVED]
    assert acks[0].reason.startswith("secret (an AWS access key id)")
    assert AWS_KEY not in acks[0].reason and AWS_KEY[4:] not in acks[0].reason
    changes = wire.page_from_pb(alice.pull()).changes
    assert [c.slug for c in changes] == ["region"]


def test_a_confidence_outside_the_tools_range_is_kept_within_it(
    database: HubDatabase, hub: HubProcess
) -> None:
    """2147483647 was kept and copied to every machine (`c:2147483647` in their lists);
    refusing it would set aside every later edit of a memory that holds one already."""
    (alice,) = team(database, hub, "alice")
    writes = [remember(f"m:{n}", "s", f"C{n}", "text") for n in range(4)]
    for write, confidence in zip(writes, (0, 11, 2147483647, 7), strict=True):
        write.confidence = confidence
    acks = alice.push(writes)
    assert [a.outcome for a in acks] == [pb.Ack.SAVED] * 4
    pulled = {c.slug: c.memory for c in wire.page_from_pb(alice.pull()).changes}
    assert [pulled[f"c{n}"].confidence for n in range(4)] == [1, 10, 10, 7]  # type: ignore[union-attr]


def test_forget_leaves_a_tombstone_on_the_feed(database: HubDatabase, hub: HubProcess) -> None:
    (alice,) = team(database, hub, "alice")
    alice.push([remember("m:1", "s", "Old", "to go")])
    (ack,) = alice.push([forget("s", "Old")])
    assert (ack.outcome, ack.slug) == (pb.Ack.FORGOTTEN, "old")
    (change,) = wire.page_from_pb(alice.pull()).changes
    assert (change.slug, change.memory, change.vector) == ("old", None, None)
    assert alice.stores().stores[0].count == 0


def test_a_label_saved_again_on_the_tombstone_it_saw_is_recreated(
    database: HubDatabase, hub: HubProcess
) -> None:
    """The machine saw the forget (its base is the tombstone's rev): the label used to
    become a conflict version of the tombstone, and again at every later edit."""
    (alice,) = team(database, hub, "alice")
    (first,) = alice.push([remember("m:1", "s", "Again", "first text")])
    (gone,) = alice.push([forget("s", "Again")])
    assert (first.rev, gone.outcome, gone.rev) == (1, pb.Ack.FORGOTTEN, 2)
    (back,) = alice.push([remember("m:2", "s", "Again", "second text", base_rev=2)])
    assert (back.outcome, back.slug, back.rev) == (pb.Ack.SAVED, "again", 3)
    (edit,) = alice.push([remember("m:3", "s", "Again", "third text", base_rev=3)])
    assert (edit.outcome, edit.slug, edit.rev) == (pb.Ack.SAVED, "again", 4)
    (gone,) = alice.push([forget("s", "Again")])
    (replayed,) = alice.push([forget("s", "Again")])  # a forget carries no write id
    assert replayed.rev == gone.rev == 5  # the same ack as the first (it said 0)
    # An edit of rev 4 that did not see the forget (rev 5) still keeps both.
    (late,) = alice.push([remember("m:4", "s", "Again", "edit of rev 4", base_rev=4)])
    assert (gone.rev, late.outcome, late.slug) == (5, pb.Ack.CONFLICT, "again-conflict-2")


def test_without_a_live_token_every_call_is_unauthenticated(
    database: HubDatabase, hub: HubProcess, certs: Path
) -> None:
    name = f"t{next(_teams)}"
    token = database.add_member(name, "carol")
    carol = hub.client(token)
    carol.push([remember("m:1", "s", "Note", "a note")])
    credentials = grpc.ssl_channel_credentials((certs / "ca.pem").read_bytes())
    with grpc.secure_channel(hub.address, credentials) as channel:
        stub = pb_grpc.HubStub(channel)
        calls = [
            (stub.Push, pb.PushRequest(writes=[remember("x:1", "s", "Note", "mine now")])),
            (stub.Pull, pb.PullRequest()),
            (stub.Recall, pb.RecallRequest(stores=["s"], text="note")),
            (stub.RecordRecalls, pb.RecordRecallsRequest()),
            (stub.Stores, pb.StoresRequest()),
        ]
        for metadata in ((), (("authorization", "Basic abc"),), (("authorization", "Bearer"),)):
            for method, request in calls:
                with pytest.raises(grpc.RpcError) as raised:
                    method(request, metadata=metadata, timeout=30)
                assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED
                assert "Bearer <token>" in (raised.value.details() or "")
    wrong = hub.client(token + "x")
    with pytest.raises(HubRefused) as refused:
        wrong.pull()
    assert refused.value.kind == "auth" and "unknown or revoked team token" in str(refused.value)
    assert "thatch hub member add" in str(refused.value)
    done = subprocess.run(
        hub_command("member", "revoke", name, "carol"),
        env={**_env(), "THATCH_HUB_OWNER_URL": database.server.conninfo(database.name)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for call in (carol.pull, carol.stores, lambda: carol.push([forget("s", "Note")])):
        with pytest.raises(HubRefused) as refused:
            call()
        assert refused.value.kind == "auth"
        assert "unknown or revoked team token" in str(refused.value)
    rows = database.owner().execute(
        "SELECT count(*) FROM memories WHERE team = %s AND deleted_at IS NULL", (name,)
    )
    assert rows.fetchone() == (1,)


def _env() -> dict[str, str]:
    return dict(os.environ)


def test_another_teams_member_sees_and_changes_nothing(
    database: HubDatabase, hub: HubProcess
) -> None:
    """Bob (team B) names team A's store and memory in every RPC; A's rows stay as they
    were and nothing of them reaches him."""
    (alice,) = team(database, hub, "alice")
    (bob,) = team(database, hub, "bob")
    alice.push([remember("a:1", "acme/api", "Deploy steps", "run make deploy from main")])
    a_team = alice.stores().team
    (gone,) = bob.push([forget("acme/api", "Deploy steps")])
    assert gone.outcome == pb.Ack.FORGOTTEN
    assert bob.recall(["acme/api"], "how do I deploy?").matches == []
    event = pb.RecallEvent(store="acme/api", slug="deploy-steps", at="2026-01-01T00:00:00.000Z")
    assert bob.record_recalls([event]) == 0
    assert wire.page_from_pb(bob.pull()).changes == []
    assert list(bob.stores().stores) == []
    (mine,) = bob.push([remember("b:1", "acme/api", "Deploy steps", "bob's own", base_rev=1)])
    assert (mine.outcome, mine.slug, mine.rev) == (pb.Ack.SAVED, "deploy-steps", 1)  # B's own
    (change,) = wire.page_from_pb(alice.pull()).changes
    assert change.memory is not None and (change.rev, change.author) == (1, "alice")
    assert "run make deploy from main" in change.memory.content
    assert [(s.name, s.count) for s in alice.stores().stores] == [("acme/api", 1)]
    events = database.owner().execute(
        "SELECT count(*) FROM recall_events WHERE team = %s", (a_team,)
    )
    assert events.fetchone() == (0,)


def test_recall_events_count_live_memories_only(database: HubDatabase, hub: HubProcess) -> None:
    (alice,) = team(database, hub, "alice")
    alice.push([remember("m:1", "s", "Tabs", "we indent with tabs")])
    at = "2026-02-01T10:00:00.000Z"
    events = [
        pb.RecallEvent(store="s", slug="tabs", at=at),
        pb.RecallEvent(store="s", slug="tabs", at=at),
        pb.RecallEvent(store="s", slug="nothing-here", at=at),
        pb.RecallEvent(store="elsewhere", slug="tabs", at=at),
    ]
    assert alice.record_recalls(events) == 2
    with pytest.raises(HubRefused) as refused:
        alice.record_recalls([pb.RecallEvent(store="s", slug="tabs", at="yesterday")])
    assert refused.value.kind == "request" and "YYYY-MM-DD" in str(refused.value)


def test_hostile_input_gets_clear_refusals(database: HubDatabase, hub: HubProcess) -> None:
    (alice,) = team(database, hub, "alice")
    with pytest.raises(HubRefused) as empty:
        alice.push([])
    assert empty.value.kind == "request" and "empty push" in str(empty.value)
    with pytest.raises(HubRefused) as many:
        alice.push([remember(f"m:{n}", "s", f"L{n}", "x") for n in range(101)])
    assert "101 writes in one push (maximum 100)" in str(many.value)
    acks = alice.push(
        [
            remember("m:1", "s", "Huge", "x" * 40_000),
            remember("", "s", "No id", "text"),
            remember("bad id with spaces", "s", "Spaces", "text"),
            remember("m:4", "s\n", "Control", "text"),
            remember("m:5", "", "No store", "text"),
            remember("m:6", "s", "Nul", "a\x00b"),
            remember("m:7", "s", "Zero rev", "text", base_rev=0),
            pb.Write(write_id="m:8", op=pb.Write.OP_UNSPECIFIED, store="s", label="Op"),
            remember("m:9", "s", "Fine", "this one is kept"),
        ]
    )
    reasons = [(a.outcome, a.reason) for a in acks]
    assert [outcome for outcome, _ in reasons] == [pb.Ack.REFUSED] * 8 + [pb.Ack.SAVED]
    expected = [
        "stored text too long: 40008 characters (maximum 32000)",
        "no write id",
        "malformed write id",
        "store name holds a control character",
        "store name is empty",
        "stored text holds a NUL character",
        "base_rev 0 is not a revision",
        "unknown op",
    ]
    for (_, reason), needle in zip(reasons, expected, strict=False):
        assert needle in reason
    assert [c.slug for c in wire.page_from_pb(alice.pull()).changes] == ["fine"]
    assert alice.recall(["no-such-store"], "anything").matches == []
    for bad in (
        lambda: alice.recall([], "anything"),
        lambda: alice.recall(["s"], ""),
        lambda: alice.recall(["s"], "q" * 10_001),
        lambda: alice.recall(["s"], "anything", limit=101),
        lambda: alice.pull(limit=501),
    ):
        with pytest.raises(HubRefused) as refused:
            bad()
        assert refused.value.kind == "request"


def test_two_replicas_serve_one_database(
    database: HubDatabase,
    hub: HubProcess,
    minilm: EmbedderProcess,
    certs: Path,
    tmp_path: Path,
) -> None:
    """Stateless replicas: a write through one is pulled through the other, and a retry
    sent to the other replica is still applied once."""
    name = f"t{next(_teams)}"
    token = database.add_member(name, "alice")
    with hub_process(
        hub_url(database), minilm.address, tmp_path, certs=certs, name="second"
    ) as second:
        one, two = hub.client(token), second.client(token)
        write = remember("m:1", "s", "Cache", "redis holds sessions")
        (ack,) = one.push([write])
        assert list(two.push([write])) == [ack]
        (change,) = wire.page_from_pb(two.pull()).changes
        assert (change.slug, change.rev, change.author) == ("cache", 1, "alice")
        assert two.stores().team == name
        # Eight machines' retries of one new batch race through both replicas at once.
        batch = [remember("m:2", "s", "Queue", "jobs go to sqs"), forget("s", "Cache")]
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda n: [one, two][n % 2].push(batch), range(8)))
        assert all(list(answer) == list(answers[0]) for answer in answers)
        assert [a.outcome for a in answers[0]] == [pb.Ack.SAVED, pb.Ack.FORGOTTEN]
        changes = wire.page_from_pb(one.pull()).changes  # each row as it stands now
        assert sorted((c.slug, c.rev, c.memory is None) for c in changes) == [
            ("cache", 2, True),
            ("queue", 1, False),
        ]


def test_sigterm_stops_the_hub_cleanly(
    database: HubDatabase, minilm: EmbedderProcess, certs: Path, tmp_path: Path
) -> None:
    with hub_process(hub_url(database), minilm.address, tmp_path, certs=certs) as proc:
        token = database.add_member(f"t{next(_teams)}", "alice")
        client = proc.client(token)
        assert client.health() == "SERVING"
        client.push([remember("m:1", "s", "Before stop", "kept")])
        assert proc.stop(signal.SIGTERM) == 0
        assert "received SIGTERM: shutting down" in proc.stderr()
        assert "hub stopped" in proc.stderr()
        assert "Traceback" not in proc.stderr()
        with pytest.raises(HubUnavailable) as down:
            client.stores()
        assert "nothing was lost" in str(down.value)


def test_a_sigterm_taken_by_any_thread_of_the_hub_stops_it(
    database: HubDatabase, minilm: EmbedderProcess, certs: Path, tmp_path: Path
) -> None:
    """The kernel gives a process's signal to whichever thread it likes; grpc and the pool
    run many. Python runs the handler on the main thread, which must wake to do so."""
    with hub_process(hub_url(database), minilm.address, tmp_path, certs=certs) as proc:
        client = proc.client(database.add_member(f"t{next(_teams)}", "alice"))
        assert client.health() == "SERVING"
        signal_a_worker_thread(proc.process.pid, signal.SIGTERM)
        assert proc.process.wait(60) == 0
        assert "received SIGTERM: shutting down" in proc.stderr()
        assert "hub stopped" in proc.stderr()


def test_an_unreachable_embedder_fails_the_push_and_stores_nothing(
    database: HubDatabase, certs: Path, tmp_path: Path
) -> None:
    """The machine keeps its outbox: the push fails UNAVAILABLE before writing anything;
    reading calls still work."""
    nowhere = f"unix://{tmp_path}/none.sock"
    with hub_process(hub_url(database), nowhere, tmp_path, certs=certs) as proc:
        name = f"t{next(_teams)}"
        client = proc.client(database.add_member(name, "alice"))
        with pytest.raises(HubUnavailable) as down:
            client.push([remember("m:1", "s", "Lost?", "never")])
        assert "the hub's embedder is unavailable" in str(down.value)
        assert (client.push([forget("s", "Lost?")])[0]).outcome == pb.Ack.FORGOTTEN
        assert wire.page_from_pb(client.pull()).changes == []
        claimed = database.owner().execute(
            "SELECT count(*) FROM applied_writes WHERE team = %s", (name,)
        )
        assert claimed.fetchone() == (0,)


def test_the_hub_waits_for_its_migrations_and_refuses_the_owner(
    postgres: PostgresServer, database: HubDatabase, minilm: EmbedderProcess, tmp_path: Path
) -> None:
    """Health stays NOT_SERVING (and the log says why) until `thatch hub migrate` has run;
    a role that row-level security does not bind stops the hub at once."""
    empty = postgres.fresh_database()
    with hub_process(
        postgres.conninfo(empty, user=HUB_ROLE), minilm.address, tmp_path, wait=False
    ) as proc:
        assert proc.wait_for("lacks migrations m001_tables"), proc.stderr()
        assert "run thatch hub migrate" in proc.stderr()
        port = re.search(r"listening at 127\.0\.0\.1:(\d+)", proc.stderr())
        assert port is not None, proc.stderr()
        with grpc.insecure_channel(f"127.0.0.1:{port.group(1)}") as channel:
            health: Any = health_pb2_grpc.HealthStub(channel)
            answer = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=30)
            assert answer.status == health_pb2.HealthCheckResponse.NOT_SERVING
            early = pb_grpc.HubStub(channel)
            with pytest.raises(grpc.RpcError) as refused:
                early.Stores(pb.StoresRequest(), metadata=(("authorization", "Bearer x"),))
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        migrated = subprocess.run(
            hub_command("migrate"),
            env={**_env(), "THATCH_HUB_OWNER_URL": postgres.conninfo(empty)},
            capture_output=True,
            text=True,
            check=False,
        )
        assert migrated.returncode == 0, migrated.stderr
        proc.wait_serving()
        assert proc.client("x").health() == "SERVING"
    with hub_process(
        database.server.conninfo(database.name), minilm.address, tmp_path, wait=False, name="o"
    ) as proc:
        assert proc.process.wait(120) == 1
        assert "superuser" in proc.stderr()


def test_plaintext_is_refused_off_loopback(tmp_path: Path) -> None:
    done = subprocess.run(
        hub_command("serve", "--listen", "0.0.0.0:0"),
        env={**_env(), "THATCH_HUB_DATABASE_URL": "host=/nonexistent dbname=x"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "refusing to serve team tokens in plaintext on 0.0.0.0:0" in done.stderr
    assert "--tls-cert" in done.stderr


@pytest.mark.parametrize("url", ["nonsense", "postgresql://%%%"])
def test_a_malformed_database_url_is_one_error_line(url: str) -> None:
    """It ended `thatch hub serve` with a traceback from the readiness loop."""
    done = subprocess.run(
        hub_command("serve", "--listen", "127.0.0.1:0"),
        env={**_env(), "THATCH_HUB_DATABASE_URL": url},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "Error: THATCH_HUB_DATABASE_URL is not a PostgreSQL connection string (" in done.stderr


def test_tls_files_that_are_no_pem_pair_are_named(tmp_path: Path, certs: Path) -> None:
    """gRPC reports them only as "cannot listen on …: Failed to bind"."""
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    for cert, key in [(junk, junk), (certs / "server.pem", certs / "ca.key")]:
        done = subprocess.run(
            hub_command(
                "serve", "--listen", "127.0.0.1:0", "--tls-cert", str(cert), "--tls-key", str(key)
            ),
            env={**_env(), "THATCH_HUB_DATABASE_URL": "host=/nonexistent dbname=x"},
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert done.returncode == 1, done.stderr
        assert (
            f"Error: --tls-cert {cert} and --tls-key {key} are not a PEM certificate and its "
            "unencrypted private key (" in done.stderr
        ), done.stderr


def test_the_commands_set_up_a_team_from_scratch(
    postgres: PostgresServer, minilm: EmbedderProcess, tmp_path: Path
) -> None:
    """migrate, team add, member add (the token printed once), then a plaintext hub on
    loopback serves that token."""
    name = postgres.fresh_database()
    env = {**_env(), "THATCH_HUB_OWNER_URL": postgres.conninfo(name)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            hub_command(*args), env=env, capture_output=True, text=True, check=False
        )

    first, again = run("migrate"), run("migrate")
    assert first.returncode == 0 and "Applied: m001_tables" in first.stdout, first.stderr
    assert again.returncode == 0 and "Up to date" in again.stdout
    assert run("team", "add", "core", "Core team").returncode == 0
    duplicate = run("team", "add", "core", "Core again")
    assert duplicate.returncode == 1 and "team 'core' already exists" in duplicate.stderr
    orphan = run("member", "add", "nope", "dana")
    assert orphan.returncode == 1 and "thatch hub team add nope NAME" in orphan.stderr
    added = run("member", "add", "core", "dana")
    assert added.returncode == 0, added.stderr
    token = added.stdout.strip()
    assert token.startswith("thatch_") and len(token) > 40
    assert "not shown again" in added.stderr
    with psycopg.connect(postgres.conninfo(name)) as conn:
        digest = conn.execute("SELECT token_sha256 FROM members WHERE id = 'dana'").fetchone()
    assert digest == (hashlib.sha256(token.encode()).digest(),)
    with hub_process(postgres.conninfo(name, user=HUB_ROLE), minilm.address, tmp_path) as proc:
        assert "serving without TLS on 127.0.0.1:0" in proc.stderr()
        assert proc.client(token).stores().member == "dana"


def test_an_embedder_of_another_model_is_refused(
    database: HubDatabase, mock_embedder: EmbedderProcess, certs: Path, tmp_path: Path
) -> None:
    """Members' vectors compare only when one model made them all."""
    with hub_process(hub_url(database), mock_embedder.address, tmp_path, certs=certs) as proc:
        client = proc.client(database.add_member(f"t{next(_teams)}", "alice"))
        with pytest.raises(HubUnavailable) as wrong:
            client.push([remember("m:1", "s", "Mock", "a vector of another model")])
        assert f"not the team's pinned {PINNED_MODEL}" in str(wrong.value)
        with pytest.raises(HubUnavailable):
            client.recall(["s"], "anything")
        assert wire.page_from_pb(client.pull()).changes == []


def test_the_client_says_how_to_trust_the_hub(
    database: HubDatabase, hub: HubProcess, certs: Path
) -> None:
    token = database.add_member(f"t{next(_teams)}", "alice")
    untrusting = HubClient(hub.address, token, env={}, timeout=20)  # the system's roots
    with untrusting, pytest.raises(HubUnavailable) as untrusted:
        untrusting.stores()
    assert "THATCH_HUB_CA" in str(untrusted.value)
    by_env = HubClient(hub.address, token, env={"THATCH_HUB_CA": str(certs / "ca.pem")})
    with by_env:
        assert by_env.stores().member == "alice"
    with pytest.raises(HubRefused) as plaintext:
        HubClient("hub.example.com:443", token, plaintext=True)
    assert "without TLS" in str(plaintext.value)
    with pytest.raises(HubUnavailable) as unreadable:
        HubClient(hub.address, token, ca_file="/nonexistent/ca.pem")
    assert "cannot read the hub's CA file" in str(unreadable.value)


def test_hub_probe_says_serving_over_tls_and_why_not_otherwise(
    hub: HubProcess, certs: Path, tmp_path: Path
) -> None:
    """``thatch hub probe`` (the hub's readiness probe) as a process: exit 0 and SERVING
    when it trusts the hub's CA; exit 1 and why with the system's roots, or with no hub
    at the address. No token needed."""
    probe = [str(Path(sys.executable).parent / "thatch"), "hub", "probe", "--addr"]
    env = {key: value for key, value in os.environ.items() if key != "THATCH_HUB_CA"}

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*probe, *argv], env=env, capture_output=True, text=True, timeout=120)

    serving = run(hub.address, "--ca", str(certs / "ca.pem"))
    assert (serving.returncode, serving.stdout, serving.stderr) == (0, "SERVING\n", "")
    untrusted = run(hub.address, "--timeout", "20")
    assert untrusted.returncode == 1 and untrusted.stdout == ""
    assert "over TLS" in untrusted.stderr and "THATCH_HUB_CA" in untrusted.stderr
    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{spare.getsockname()[1]}"
    nobody = run(closed, "--plaintext", "--timeout", "2")
    assert nobody.returncode == 1
    assert nobody.stderr.startswith(f"Error: the hub at {closed} does not answer")


def test_hub_commands_need_the_team_extra_and_help_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from click.testing import CliRunner

    from thatch.cli.main import cli
    from thatch.hub.extra import INSTALL_TEAM

    code = (
        "import sys; from thatch.cli.main import cli\n"
        "try:\n    cli(['hub', 'serve', '--help'])\nexcept SystemExit:\n    pass\n"
        "assert 'psycopg' not in sys.modules and 'thatch.hub.servicer' not in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and "--tls-cert" in done.stdout, done.stderr
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if the team extra were absent
    monkeypatch.setenv("THATCH_HUB_OWNER_URL", "host=/nonexistent dbname=x")
    result = CliRunner().invoke(cli, ["hub", "migrate"])
    assert result.exit_code == 1
    assert "the team extra is not installed (psycopg missing)" in result.output
    assert f"Fix: {INSTALL_TEAM}\n" in result.output


def test_chat_mail_travels_through_the_hub_between_members_only(
    database: HubDatabase, hub: HubProcess
) -> None:
    """The chat RPCs bound into the real hub: two members publish a session each from
    their machines, one mails the other's hub-named peer, the recipient's machine pulls it
    once; a member of another team sees no peer and cannot address one; bad input is
    INVALID_ARGUMENT."""
    alice, bob = team(database, hub, "alice", "bob")
    (eve,) = team(database, hub, "eve")
    # The hub lists peers seen lately by its own clock: the sessions were seen just now.
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")

    def publish(client: HubClient, machine: str, key: str, name: str) -> pb.ChatPeer:
        session = pb.ChatSession(key=key, local_name=name, project="acme/api", last_seen=now)
        request = pb.PublishSessionsRequest(machine=machine, sessions=[session])
        (peer,) = client.publish_sessions(request).peers
        return peer

    to_alice = publish(alice, "laptop", "a" * 32, "otter-00001")
    publish(bob, "desk", "b" * 32, "otter-00001")
    assert to_alice.name == "otter-00001@alice"
    assert sorted(p.name for p in bob.peers().peers) == ["otter-00001@alice", "otter-00001@bob"]
    assert list(eve.peers().peers) == []

    mail = pb.OutgoingMail(client_id="desk:1", from_key="b" * 32, to_peer=to_alice.id, body="hi")
    (ack,) = bob.send_mail(pb.SendMailRequest(machine="desk", mails=[mail])).acks
    assert ack.id > 0 and ack.refused == ""
    (eve_ack,) = eve.send_mail(
        pb.SendMailRequest(
            machine="x",
            mails=[
                pb.OutgoingMail(
                    client_id="x:1", from_key="e" * 32, to_peer=to_alice.id, body="let me in"
                )
            ],
        )
    ).acks
    assert eve_ack.id == 0 and eve_ack.refused

    (got,) = alice.pull_mail("laptop").mails
    assert (got.from_name, got.from_member, got.to_key, got.body) == (
        "otter-00001@bob",
        "bob",
        "a" * 32,
        "hi",
    )
    assert list(eve.pull_mail("laptop").mails) == []
    assert alice.mark_delivered("laptop", [got.id]) == 1
    assert list(alice.pull_mail("laptop").mails) == []
    with pytest.raises(HubRefused) as refused:
        alice.publish_sessions(pb.PublishSessionsRequest(machine="bad machine id!"))
    assert refused.value.kind == "request"


def test_a_call_crossing_a_hub_goaway_fails_at_once() -> None:
    """A hub replica going away as the sync process's call goes out: an outage now, not
    a wait for the call's whole deadline (gRPC's transparent retries sent it back onto the
    dying connection until then, 5 runs in 6 with this server)."""
    from tests.support.goaway_server import going_away
    from thatch.hub.client import HubClient, HubUnavailable

    for _ in range(8):
        with going_away("--settings-first") as port:
            address = f"127.0.0.1:{port}"
            client = HubClient(address, "thatch_" + "t" * 43, plaintext=True, env={}, timeout=60)
            try:
                with pytest.raises(HubUnavailable) as caught:
                    client.stores()
            finally:
                client.close()
        assert "did not answer within" not in str(caught.value), caught.value
