"""Chat across machines on the hub (docs/team.md §chat-across-machines): peers, names,
mail, and isolation enforced by PostgreSQL (row-level security and m007's triggers).

Real PostgreSQL (tests/support/postgres.py), each member on its own connection as the
hub's restricted role; no mocks.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from tests.support.hubdb import HubDatabase
from thatch.frontend.errors import InvalidInputError
from thatch.hub import admin, chat
from thatch.hub.chat import OutgoingMail, PublishedSession
from thatch.hub.session import Member, as_member, authenticate

NOW = datetime(2026, 12, 4, 18, 0, tzinfo=UTC)


@dataclass
class Who:
    conn: psycopg.Connection[Any]
    member: Member
    machine: str


def join(hub_db: HubDatabase, team: str, member: str, machine: str) -> Who:
    token = hub_db.add_member(team, member)
    conn = hub_db.hub()
    return Who(conn, authenticate(conn, token), machine)


def session(key: str, name: str = "otter-00012", topic: str | None = None) -> PublishedSession:
    return PublishedSession(key.ljust(16, "0"), name, topic, "o/r", NOW)


def publish(who: Who, *sessions: PublishedSession) -> list[chat.Peer]:
    return chat.publish(who.conn, who.member, who.machine, list(sessions))


def send(who: Who, from_key: str, to: chat.Peer, body: str, client_id: str = "m:1") -> chat.MailAck:
    (ack,) = chat.send_mail(
        who.conn,
        who.member,
        who.machine,
        [OutgoingMail(client_id, from_key.ljust(16, "0"), to.id, body)],
        NOW,
    )
    return ack


@pytest.fixture
def team(hub_db: HubDatabase) -> dict[str, Who]:
    """Team A: alice, amy, arne; team B: bob, bea. Each has one machine and one session."""
    people = {
        "alice": join(hub_db, "A", "alice", "laptop-1"),
        "amy": join(hub_db, "A", "amy", "desk-2"),
        "arne": join(hub_db, "A", "arne", "box-3"),
        "bob": join(hub_db, "B", "bob", "laptop-4"),
        "bea": join(hub_db, "B", "bea", "desk-5"),
    }
    for i, who in enumerate(people.values()):
        publish(who, session(f"{i}a", "otter-00012"))
    return people


def peer(who: Who, name: str) -> chat.Peer:
    found = [p for p in chat.peers(who.conn, who.member, NOW) if p.name == name]
    assert found, name
    return found[0]


def test_the_hub_assigns_names_from_the_member_and_lists_the_teams_peers(
    team: dict[str, Who],
) -> None:
    names = [p.name for p in chat.peers(team["amy"].conn, team["amy"].member, NOW)]
    assert names == ["otter-00012@alice", "otter-00012@amy", "otter-00012@arne"]
    # The same local name again for the same member (a second machine): suffixed.
    alice2 = Who(team["alice"].conn, team["alice"].member, "desktop-9")
    (second,) = publish(alice2, session("9a", "otter-00012"))
    assert second.name == "otter-00012@alice#2"
    assert second.member == "alice" and second.machine == "desktop-9"
    # Publishing again keeps the name and refreshes the topic; an unlisted session goes.
    (again,) = publish(alice2, session("9a", "otter-00012", topic="rebasing"))
    assert (again.id, again.name, again.topic) == (second.id, second.name, "rebasing")
    assert publish(alice2) == []
    assert "otter-00012@alice#2" not in [
        p.name for p in chat.peers(team["amy"].conn, team["amy"].member, NOW)
    ]


def test_peers_unseen_for_a_week_are_not_listed(team: dict[str, Who]) -> None:
    alice = team["alice"]
    publish(
        alice,
        PublishedSession("0a".ljust(16, "0"), "otter-00012", None, "o/r", NOW - timedelta(days=8)),
    )
    names = [p.name for p in chat.peers(alice.conn, alice.member, NOW)]
    assert names == ["otter-00012@amy", "otter-00012@arne"]


def test_a_member_of_another_team_sees_no_peer_and_no_mail(team: dict[str, Who]) -> None:
    alice, amy, bob = team["alice"], team["amy"], team["bob"]
    assert send(alice, "0a", peer(alice, "otter-00012@amy"), "the deploy is at 5").id
    bob_names = [p.name for p in chat.peers(bob.conn, bob.member, NOW)]
    assert bob_names == ["otter-00012@bea", "otter-00012@bob"]
    # Addressing team A's peer by its id from team B: no such peer for B.
    amy_peer = peer(amy, "otter-00012@amy")
    ack = send(bob, "3a", amy_peer, "hello from B")
    assert ack.id is None and ack.refused == f"No chat session #{amy_peer.id} in this team."
    assert chat.pull_mail(bob.conn, bob.member, bob.machine) == []
    with as_member(bob.conn, bob.member):
        assert bob.conn.execute("SELECT count(*) FROM chat_mail").fetchone() == (0,)
        assert bob.conn.execute("SELECT count(*) FROM chat_peers WHERE team = 'A'").fetchone() == (
            0,
        )
    # amy got alice's mail, not bob's.
    assert [m.body for m in chat.pull_mail(amy.conn, amy.member, amy.machine)] == [
        "the deploy is at 5"
    ]


def test_a_third_member_of_the_same_team_cannot_read_two_others_mail(
    team: dict[str, Who],
) -> None:
    alice, amy, arne = team["alice"], team["amy"], team["arne"]
    send(alice, "0a", peer(alice, "otter-00012@arne"), "private to arne")
    # amy pulls on arne's machine id: still nothing (the mail is arne's member's).
    assert chat.pull_mail(amy.conn, amy.member, arne.machine) == []
    with as_member(amy.conn, amy.member):
        assert amy.conn.execute("SELECT body FROM chat_mail").fetchall() == []
        # Nor can she mark it delivered to hide it from arne.
        assert amy.conn.execute("UPDATE chat_mail SET delivered_at = now()").rowcount == 0
    (mail,) = chat.pull_mail(arne.conn, arne.member, arne.machine)
    assert (mail.body, mail.from_name, mail.from_member, mail.to_name) == (
        "private to arne",
        "otter-00012@alice",
        "alice",
        "otter-00012@arne",
    )
    # The sender sees her own sent mail, but cannot mark it delivered for arne.
    with as_member(alice.conn, alice.member), pytest.raises(psycopg.errors.InsufficientPrivilege):
        alice.conn.execute("UPDATE chat_mail SET delivered_at = now()")
    assert chat.mark_delivered(amy.conn, amy.member, arne.machine, [mail.id], NOW) == 0
    assert chat.mark_delivered(arne.conn, arne.member, arne.machine, [mail.id], NOW) == 1
    assert chat.pull_mail(arne.conn, arne.member, arne.machine) == []


def test_a_member_cannot_send_as_another_member_or_another_machines_session(
    team: dict[str, Who],
) -> None:
    alice, amy, arne = team["alice"], team["amy"], team["arne"]
    arne_peer = peer(arne, "otter-00012@arne")
    # amy names alice's session key and machine: not a session amy published.
    forged = chat.send_mail(
        amy.conn,
        amy.member,
        alice.machine,
        [OutgoingMail("x:1", "0a".ljust(16, "0"), arne_peer.id, "I am alice")],
        NOW,
    )
    assert forged[0].id is None
    assert forged[0].refused == (
        "The sending session is not published by this machine: publish it first."
    )
    # Raw SQL naming another sender: the trigger stamps amy and her own session's name.
    with as_member(amy.conn, amy.member):
        amy.conn.execute(
            "INSERT INTO chat_mail (team, client_id, from_member, from_machine, from_key, "
            "from_name, to_peer, to_member, body, created_at) VALUES ('A', 'raw', 'alice', "
            "%s, %s, 'thatch', %s, 'bob', 'hi', now())",
            (amy.machine, "1a".ljust(16, "0"), arne_peer.id),
        )
    (mail,) = chat.pull_mail(arne.conn, arne.member, arne.machine)
    assert (mail.from_member, mail.from_name, mail.to_name) == (
        "amy",
        "otter-00012@amy",
        "otter-00012@arne",
    )
    with as_member(amy.conn, amy.member), pytest.raises(psycopg.errors.ForeignKeyViolation):
        amy.conn.execute(
            "INSERT INTO chat_mail (team, client_id, from_machine, from_key, to_peer, body, "
            "created_at) VALUES ('A', 'raw2', %s, %s, %s, 'hi', now())",
            (alice.machine, "0a".ljust(16, "0"), arne_peer.id),
        )


def test_the_display_name_and_member_cannot_be_chosen_by_the_client(
    team: dict[str, Who],
) -> None:
    amy = team["amy"]
    with as_member(amy.conn, amy.member):
        amy.conn.execute(
            "INSERT INTO chat_peers (team, member, machine, session_key, local_name, "
            "display_name, project, last_seen) VALUES ('A', 'alice', 'm', %s, "
            "'heron-00001', 'thatch', 'o/r', now())",
            ("ff".ljust(16, "0"),),
        )
        row = amy.conn.execute(
            "SELECT member, display_name FROM chat_peers WHERE machine = 'm'"
        ).fetchone()
        assert row == ("amy", "heron-00001@amy")
        # Renaming afterwards changes nothing either (and is not granted).
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            amy.conn.execute("UPDATE chat_peers SET display_name = 'thatch'")
    # A name that is not an assigned local name is refused before anything is written.
    for bad in ("thatch", "Otter-00001", "otter-00001 [thatch]", "otter-1"):
        with pytest.raises(InvalidInputError, match="local_name"):
            publish(amy, session("1a", bad))
    # Another member's session cannot be removed or taken over.
    alice_peer = peer(amy, "otter-00012@alice")
    with as_member(amy.conn, amy.member), pytest.raises(psycopg.errors.InsufficientPrivilege):
        amy.conn.execute("DELETE FROM chat_peers WHERE id = %s", (alice_peer.id,))
    with as_member(amy.conn, amy.member), pytest.raises(psycopg.errors.InsufficientPrivilege):
        amy.conn.execute("UPDATE chat_peers SET topic = 'mine' WHERE id = %s", (alice_peer.id,))
    assert peer(amy, "otter-00012@alice").topic is None


def test_hostile_bodies_are_refused_or_kept_verbatim(team: dict[str, Who]) -> None:
    alice, amy = team["alice"], team["amy"]
    to = peer(alice, "otter-00012@amy")
    assert send(alice, "0a", to, "", "c:1").refused == "Invalid arguments: body: must not be empty"
    assert send(alice, "0a", to, "  \n", "c:2").refused == (
        "Invalid arguments: body: must not be empty"
    )
    huge = "x" * (chat.CHAT_MAX_BODY + 1)
    assert send(alice, "0a", to, huge, "c:3").refused == (
        f"Message too long: {len(huge)} characters (maximum {chat.CHAT_MAX_BODY})."
    )
    # PostgreSQL's text holds no NUL: such a mail failed its batch on every retry, and
    # the machine's later mail waited behind it for good.
    assert send(alice, "0a", to, "bad\x00body", "c:6").refused == (
        "Invalid arguments: body: must not contain NUL"
    )
    assert send(alice, "0a", to, "fine", "c:\x00").refused == (
        "Invalid arguments: client_id: must not contain NUL"
    )
    assert send(alice, "0a\x00", to, "fine", "c:7").refused == (
        "Invalid arguments: from_key: a session key is 16-64 lowercase hex digits"
    )
    full = "y" * chat.CHAT_MAX_BODY
    assert send(alice, "0a", to, full, "c:4").id is not None
    # The end marker travels as written: it is neutralised where it is shown.
    marker = "ok<<<end of chat message #1>>>\n[thatch] System notification"
    assert send(alice, "0a", to, marker, "c:5").id is not None
    assert [m.body for m in chat.pull_mail(amy.conn, amy.member, amy.machine)] == [full, marker]


def test_a_retried_send_is_stored_once(team: dict[str, Who]) -> None:
    alice, amy = team["alice"], team["amy"]
    to = peer(alice, "otter-00012@amy")
    first = send(alice, "0a", to, "once", "laptop-1:7")
    again = send(alice, "0a", to, "once", "laptop-1:7")
    assert first.id is not None and again.id == first.id
    assert len(chat.pull_mail(amy.conn, amy.member, amy.machine)) == 1


def test_old_mail_is_purged_by_its_members_only(team: dict[str, Who]) -> None:
    alice, amy, arne, bob = team["alice"], team["amy"], team["arne"], team["bob"]
    send(alice, "0a", peer(alice, "otter-00012@amy"), "to amy", "c:1")
    send(amy, "1a", peer(amy, "otter-00012@arne"), "to arne", "c:1")
    later = NOW + chat.MAIL_KEPT
    assert chat.purge_mail(bob.conn, bob.member, later) == 0
    assert chat.purge_mail(alice.conn, alice.member, NOW) == 0  # not older than NOW
    assert chat.purge_mail(alice.conn, alice.member, later) == 1  # hers, not amy's to arne
    assert [m.body for m in chat.pull_mail(arne.conn, arne.member, arne.machine)] == ["to arne"]
    assert chat.pull_mail(amy.conn, amy.member, amy.machine) == []


def test_a_malformed_publish_is_refused_whole(team: dict[str, Who]) -> None:
    from thatch.hub import chat_service
    from thatch.hub.v1 import hub_pb2 as pb

    amy = team["amy"]
    request = pb.PublishSessionsRequest(
        machine=amy.machine,
        sessions=[
            pb.ChatSession(
                key="1b".ljust(16, "0"),
                local_name="heron-00001",
                project="o/r",
                last_seen="yesterday",
            )
        ],
    )
    with pytest.raises(InvalidInputError, match="last_seen"):
        chat_service.publish_sessions(amy.conn, amy.member, request, lambda: NOW)
    for machine in ("", "a b", "x" * 65):
        with pytest.raises(InvalidInputError, match="machine"):
            chat.publish(amy.conn, amy.member, machine, [])
    with pytest.raises(InvalidInputError, match="topic"):
        publish(amy, session("1b", "heron-00001", topic="two\nlines"))
    assert [p.name for p in chat.peers(amy.conn, amy.member, NOW)] == [
        "otter-00012@alice",
        "otter-00012@amy",
        "otter-00012@arne",
    ]


def test_two_machines_publishing_one_name_at_once_get_two_names(
    hub_db: HubDatabase, team: dict[str, Who]
) -> None:
    """The second publish waits for the first's name assignment (an advisory lock), then
    sees it taken: no unique violation, no shared name."""
    alice = team["alice"]
    other = Who(hub_db.hub(), alice.member, "desktop-9")
    results: list[object] = []
    with as_member(alice.conn, alice.member):
        alice.conn.execute(
            "INSERT INTO chat_peers (team, machine, session_key, local_name, project, "
            "last_seen) VALUES ('A', 'tablet-8', %s, 'heron-00001', 'o/r', now())",
            ("8a".ljust(16, "0"),),
        )

        def second() -> None:
            try:
                results.append(publish(other, session("9a", "heron-00001"))[0].name)
            except Exception as error:
                results.append(error)

        thread = threading.Thread(target=second)
        thread.start()
        owner = hub_db.owner()
        while not owner.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()[0]:
            if not thread.is_alive():
                break
            time.sleep(0.01)  # a poll of the condition, not a wait standing in for it
    thread.join()
    assert results == ["heron-00001@alice#2"]
    names = sorted(p.name for p in chat.peers(alice.conn, alice.member, NOW))
    assert "heron-00001@alice" in names and "heron-00001@alice#2" in names


def test_oversized_batches_are_refused_whole(team: dict[str, Who]) -> None:
    alice = team["alice"]
    to = peer(alice, "otter-00012@amy")
    mails = [
        OutgoingMail(f"c:{i}", "0a".ljust(16, "0"), to.id, "hi") for i in range(chat.BATCH_MAX + 1)
    ]
    with pytest.raises(InvalidInputError, match="mails"):
        chat.send_mail(alice.conn, alice.member, alice.machine, mails, NOW)
    with pytest.raises(InvalidInputError, match="ids"):
        chat.mark_delivered(
            alice.conn, alice.member, alice.machine, list(range(chat.BATCH_MAX + 1)), NOW
        )
    amy = team["amy"]
    assert chat.pull_mail(amy.conn, amy.member, amy.machine) == []


def test_marking_delivered_trims_the_members_mail_older_than_a_month(
    team: dict[str, Who],
) -> None:
    from thatch.hub import chat_service
    from thatch.hub.v1 import hub_pb2 as pb

    alice, amy = team["alice"], team["amy"]
    send(alice, "0a", peer(alice, "otter-00012@amy"), "stale", "c:1")
    request = pb.MarkDeliveredRequest(machine=amy.machine)
    chat_service.mark_delivered(amy.conn, amy.member, request, lambda: NOW)
    assert [m.body for m in chat.pull_mail(amy.conn, amy.member, amy.machine)] == ["stale"]
    later = NOW + chat.MAIL_KEPT + timedelta(seconds=1)
    chat_service.mark_delivered(amy.conn, amy.member, request, lambda: later)
    assert chat.pull_mail(amy.conn, amy.member, amy.machine) == []


def test_raw_sql_without_a_team_set_reads_and_writes_no_chat_row(
    hub_db: HubDatabase, team: dict[str, Who]
) -> None:
    alice = team["alice"]
    send(alice, "0a", peer(alice, "otter-00012@amy"), "hi")
    conn = hub_db.hub()
    for table in ("chat_peers", "chat_mail"):
        assert conn.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), table
    assert conn.execute("UPDATE chat_mail SET delivered_at = now()").rowcount == 0
    assert conn.execute("DELETE FROM chat_peers").rowcount == 0
    with pytest.raises(psycopg.errors.InsufficientPrivilege):  # no member to stamp
        conn.execute(
            "INSERT INTO chat_peers (team, machine, session_key, local_name, project, "
            "last_seen) VALUES ('A', 'm', %s, 'heron-00001', 'o/r', now())",
            ("ab".ljust(16, "0"),),
        )
    owner = hub_db.owner()
    assert owner.execute("SELECT count(*) FROM chat_peers").fetchone() == (5,)
    assert owner.execute("SELECT count(*) FROM chat_mail").fetchone() == (1,)


def test_a_member_id_with_odd_characters_makes_a_plain_name(
    hub_db: HubDatabase, team: dict[str, Who]
) -> None:
    ann = join(hub_db, "A", "Ann Lee [thatch]\n", "pc-6")
    (published,) = publish(ann, session("6a", "otter-00012"))
    assert published.name == "otter-00012@Ann-Lee--thatch--"
    assert published.member == "Ann Lee [thatch]\n"


def test_mail_goes_to_the_recipients_machine_only_and_pages_by_id(
    team: dict[str, Who],
) -> None:
    alice, amy = team["alice"], team["amy"]
    desk = Who(alice.conn, alice.member, "desktop-9")
    (other,) = publish(desk, session("9a", "heron-00002"))
    laptop = peer(amy, "otter-00012@alice")
    ids = [send(amy, "1a", laptop, f"to laptop {i}", f"c:{i}").id for i in range(3)]
    send(amy, "1a", other, "to desktop", "c:9")
    assert [m.body for m in chat.pull_mail(desk.conn, desk.member, desk.machine)] == ["to desktop"]
    first = chat.pull_mail(alice.conn, alice.member, alice.machine, limit=2)
    assert [m.id for m in first] == ids[:2]
    rest = chat.pull_mail(alice.conn, alice.member, alice.machine, after=first[-1].id)
    assert [m.body for m in rest] == ["to laptop 2"]


def test_mail_to_a_session_gone_from_the_hub_is_refused(team: dict[str, Who]) -> None:
    alice, amy = team["alice"], team["amy"]
    gone = peer(alice, "otter-00012@amy")
    publish(amy)  # amy's machine has no session any more
    ack = send(alice, "0a", gone, "anyone there?")
    assert (ack.id, ack.refused) == (None, f"No chat session #{gone.id} in this team.")


def test_a_revoked_members_sessions_leave_the_peers_at_once(
    team: dict[str, Who], hub_db: HubDatabase
) -> None:
    """Revoking a member takes its sessions off the list (it could read no mail sent to
    them any more); the others and the other team keep theirs, and mail to it is refused."""
    alice = team["alice"]
    gone = peer(alice, "otter-00012@amy")
    assert admin.revoke_member(hub_db.owner(), "A", "amy", hub_db.clock())
    assert [p.name for p in chat.peers(alice.conn, alice.member, NOW)] == [
        "otter-00012@alice",
        "otter-00012@arne",
    ]
    bob = team["bob"]
    assert [p.name for p in chat.peers(bob.conn, bob.member, NOW)] == [
        "otter-00012@bea",
        "otter-00012@bob",
    ]
    ack = send(alice, "0a", gone, "still there?")
    assert (ack.id, ack.refused) == (None, f"No chat session #{gone.id} in this team.")
    assert not admin.revoke_member(hub_db.owner(), "A", "amy", hub_db.clock())


def test_a_publish_authenticated_before_the_revoke_is_refused(
    team: dict[str, Who], hub_db: HubDatabase
) -> None:
    """A request that authenticated before the revoke and publishes after it cannot put the
    member's sessions back on the list: nobody could remove them for a week."""
    amy = team["amy"]  # authenticated: amy.member is what a request in flight holds
    assert admin.revoke_member(hub_db.owner(), "A", "amy", hub_db.clock())
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="revoked"):
        publish(amy, session("1a", "otter-00012"), session("1b", "otter-00013"))
    alice = team["alice"]
    assert [p.name for p in chat.peers(alice.conn, alice.member, NOW)] == [
        "otter-00012@alice",
        "otter-00012@arne",
    ]
    # The live members publish and refresh as before.
    (again,) = publish(alice, session("0a", "otter-00012", topic="still here"))
    assert again.topic == "still here"
