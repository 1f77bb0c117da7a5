"""Chat across machines on the hub (docs/team.md §chat-across-machines).

Each machine's team sync process publishes its chat sessions as the team's peers, reads
the team's peers, sends its sessions' mail to peers and pulls the mail addressed to its
own sessions. Every call is one transaction as the authenticated member
(``session.as_member``): row-level security confines it to the member's team, and the
triggers of m007 stamp who speaks (a peer's member and display name, a mail's sender and
recipient), so nothing a request says can make a session pass as another.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from psycopg import Connection
from psycopg.rows import TupleRow

from thatch.frontend.errors import InvalidInputError
from thatch.hub.migrations import CHAT_MAX_BODY
from thatch.hub.session import Member, as_member

__all__ = [
    "BATCH_MAX",
    "CHAT_MAX_BODY",
    "MAIL_KEPT",
    "MAIL_PAGE",
    "PEERS_MAX",
    "PEER_KEPT",
    "PUBLISH_MAX",
    "TOPIC_MAX",
    "Mail",
    "MailAck",
    "OutgoingMail",
    "Peer",
    "PublishedSession",
    "mark_delivered",
    "peers",
    "publish",
    "pull_mail",
    "purge_mail",
    "send_mail",
]

PEER_KEPT = timedelta(days=7)  # a peer unseen this long is no longer listed (docs/chat.md §6)
PUBLISH_MAX = 1_000  # sessions one machine publishes at once
PEERS_MAX = 5_000  # peers one listing returns at most: a bounded reply, the most recent kept
MAIL_PAGE = 200  # mails one pull returns at most
BATCH_MAX = 1_000  # mails one send, or ids one mark, carries at most
MAIL_KEPT = timedelta(days=30)  # as local chat keeps its messages (docs/chat.md §retention)
TOPIC_MAX = 80
PROJECT_MAX = 200

_MACHINE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
_KEY = re.compile(r"[0-9a-f]{16,64}")
_LOCAL_NAME = re.compile(r"[a-z]{1,16}-[0-9]{5,9}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class PublishedSession:
    """One local session as its machine publishes it: ``key`` is derived on the machine
    (never the host's session id), ``local_name`` its assigned local chat name."""

    key: str
    local_name: str
    topic: str | None
    project: str
    last_seen: datetime


@dataclass(frozen=True)
class Peer:
    id: int
    name: str  # assigned by the hub: ``<local name>@<member>`` (``#<n>`` on a collision)
    member: str
    machine: str
    key: str
    local_name: str
    topic: str | None
    project: str
    last_seen: datetime


@dataclass(frozen=True)
class OutgoingMail:
    client_id: str  # the machine's id for the mail: a retried send is stored once
    from_key: str  # the sending session (published by this member on this machine)
    to_peer: int
    body: str
    via_broadcast: bool = False


@dataclass(frozen=True)
class MailAck:
    client_id: str
    id: int | None  # the hub's mail id; None when refused
    refused: str | None = None  # why, as the chat tool words it (docs/chat.md §3)


@dataclass(frozen=True)
class Mail:
    id: int
    from_peer: int | None
    from_name: str
    from_member: str
    from_machine: str
    from_key: str
    from_project: str  # the sender's project store ('' once the sender is gone)
    to_key: str
    to_name: str
    body: str
    via_broadcast: bool
    created_at: datetime


_PEER_COLUMNS = (
    "id, display_name, member, machine, session_key, local_name, topic, project, last_seen"
)


def _peer(row: Sequence[object]) -> Peer:
    last_seen = row[8]
    assert isinstance(last_seen, datetime)
    return Peer(
        id=int(str(row[0])),
        name=str(row[1]),
        member=str(row[2]),
        machine=str(row[3]),
        key=str(row[4]),
        local_name=str(row[5]),
        topic=None if row[6] is None else str(row[6]),
        project=str(row[7]),
        last_seen=last_seen,
    )


def _check_machine(machine: str) -> None:
    if not _MACHINE.fullmatch(machine):
        raise InvalidInputError(
            f"Invalid arguments: machine: {machine[:80]!r} is not a machine id "
            "(1-64 of A-Z a-z 0-9 _ . : -)"
        )


def _check_batch(what: str, count: int) -> None:
    if count > BATCH_MAX:
        raise InvalidInputError(f"Invalid arguments: {what}: {count} (at most {BATCH_MAX} at once)")


def _check_session(session: PublishedSession) -> None:
    if not _KEY.fullmatch(session.key):
        raise InvalidInputError(
            "Invalid arguments: key: a session key is 16-64 lowercase hex digits"
        )
    if not _LOCAL_NAME.fullmatch(session.local_name):
        raise InvalidInputError(
            f"Invalid arguments: local_name: {session.local_name[:80]!r} is not an assigned "
            "chat name (<word>-<NNNNN>)"
        )
    if session.topic is not None and (
        len(session.topic) > TOPIC_MAX or _CONTROL.search(session.topic)
    ):
        raise InvalidInputError(
            f"Invalid arguments: topic: one line of at most {TOPIC_MAX} characters"
        )
    if not 0 < len(session.project) <= PROJECT_MAX or _CONTROL.search(session.project):
        raise InvalidInputError(
            f"Invalid arguments: project: one line of 1-{PROJECT_MAX} characters"
        )


def publish(
    conn: Connection[TupleRow],
    who: Member,
    machine: str,
    sessions: Sequence[PublishedSession],
) -> list[Peer]:
    """Make ``sessions`` this machine's whole set of published sessions: new ones get a
    name assigned, known ones a fresh topic, project and ``last_seen``, and this member's
    sessions of this machine that are not listed are removed. The published peers, with
    their assigned names. InvalidInputError (nothing written) on a malformed session."""
    _check_machine(machine)
    if len(sessions) > PUBLISH_MAX:
        raise InvalidInputError(
            f"Invalid arguments: sessions: {len(sessions)} (at most {PUBLISH_MAX} at once)"
        )
    for session in sessions:
        _check_session(session)
    keys = [session.key for session in sessions]
    with as_member(conn, who):
        conn.execute(
            "DELETE FROM chat_peers WHERE team = thatch_team() AND member = thatch_member() "
            "AND machine = %s AND NOT (session_key = ANY(%s))",
            (machine, keys),
        )
        for session in sessions:
            conn.execute(
                "INSERT INTO chat_peers (team, machine, session_key, local_name, topic, "
                "project, last_seen) VALUES (thatch_team(), %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (team, member, machine, session_key) DO UPDATE SET "
                "topic = excluded.topic, project = excluded.project, "
                "last_seen = excluded.last_seen",
                (
                    machine,
                    session.key,
                    session.local_name,
                    session.topic,
                    session.project,
                    session.last_seen,
                ),
            )
        rows = conn.execute(
            f"SELECT {_PEER_COLUMNS} FROM chat_peers WHERE team = thatch_team() "
            "AND member = thatch_member() AND machine = %s ORDER BY display_name",
            (machine,),
        ).fetchall()
    return [_peer(row) for row in rows]


def peers(conn: Connection[TupleRow], who: Member, now: datetime) -> list[Peer]:
    """The team's published sessions seen within ``PEER_KEPT`` (the ``PEERS_MAX`` seen
    last), by name."""
    with as_member(conn, who):
        rows = conn.execute(
            f"SELECT {_PEER_COLUMNS} FROM (SELECT * FROM chat_peers "
            "WHERE team = thatch_team() AND last_seen >= %s ORDER BY last_seen DESC LIMIT %s) "
            "AS recent ORDER BY lower(display_name)",
            (now - PEER_KEPT, PEERS_MAX),
        ).fetchall()
    return [_peer(row) for row in rows]


def _refusal(conn: Connection[TupleRow], machine: str, mail: OutgoingMail) -> str | None:
    # PostgreSQL's text cannot hold NUL: such a mail failed its whole batch on every retry,
    # and every later mail of the machine queued behind it for good. Worded as local chat
    # refuses it (frontend/tools/chat_tools.py), so a session reads one refusal either way.
    for field, value in (("body", mail.body), ("client_id", mail.client_id)):
        if "\x00" in value:
            return f"Invalid arguments: {field}: must not contain NUL"
    if not _KEY.fullmatch(mail.from_key):
        return "Invalid arguments: from_key: a session key is 16-64 lowercase hex digits"
    if not mail.body.strip():
        return "Invalid arguments: body: must not be empty"
    if len(mail.body) > CHAT_MAX_BODY:
        return f"Message too long: {len(mail.body)} characters (maximum {CHAT_MAX_BODY})."
    if not 0 < len(mail.client_id) <= 200:
        return "Invalid arguments: client_id: 1-200 characters"
    sender = conn.execute(
        "SELECT 1 FROM chat_peers WHERE team = thatch_team() AND member = thatch_member() "
        "AND machine = %s AND session_key = %s",
        (machine, mail.from_key),
    ).fetchone()
    if sender is None:
        return "The sending session is not published by this machine: publish it first."
    recipient = conn.execute(
        "SELECT 1 FROM chat_peers WHERE team = thatch_team() AND id = %s", (mail.to_peer,)
    ).fetchone()
    if recipient is None:
        return f"No chat session #{mail.to_peer} in this team."
    return None


def send_mail(
    conn: Connection[TupleRow],
    who: Member,
    machine: str,
    mails: Sequence[OutgoingMail],
    now: datetime,
) -> list[MailAck]:
    """Store each mail for its recipient, in one transaction; one ack per mail, in order.

    A mail is refused (not stored, the reason in its ack) when its body is empty or
    longer than ``CHAT_MAX_BODY``, its sender is not a session this member published on
    this machine, or its recipient is no peer of the team. A ``client_id`` already stored
    by this member acks the first copy's id: a send retried after a lost reply is stored
    once.
    """
    _check_machine(machine)
    _check_batch("mails", len(mails))
    acks: list[MailAck] = []
    with as_member(conn, who):
        for mail in mails:
            refused = _refusal(conn, machine, mail)
            if refused is not None:
                acks.append(MailAck(mail.client_id, None, refused))
                continue
            row = conn.execute(
                "INSERT INTO chat_mail (team, client_id, from_machine, from_key, to_peer, "
                "body, via_broadcast, created_at) "
                "VALUES (thatch_team(), %s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (team, from_member, client_id) DO NOTHING RETURNING id",
                (
                    mail.client_id,
                    machine,
                    mail.from_key,
                    mail.to_peer,
                    mail.body,
                    mail.via_broadcast,
                    now,
                ),
            ).fetchone()
            if row is None:
                row = conn.execute(
                    "SELECT id FROM chat_mail WHERE team = thatch_team() "
                    "AND from_member = thatch_member() AND client_id = %s",
                    (mail.client_id,),
                ).fetchone()
                assert row is not None  # the conflicting row is this member's own
            acks.append(MailAck(mail.client_id, int(row[0])))
    return acks


def pull_mail(
    conn: Connection[TupleRow],
    who: Member,
    machine: str,
    after: int = 0,
    limit: int = MAIL_PAGE,
) -> list[Mail]:
    """The undelivered mail to this member's sessions on ``machine`` with ids above
    ``after``, oldest first, at most ``limit``. Mail stays undelivered (and is pulled
    again) until ``mark_delivered``: a machine that crashed before storing it loses none."""
    _check_machine(machine)
    limit = max(1, min(limit, MAIL_PAGE))
    with as_member(conn, who):
        rows = conn.execute(
            "SELECT m.id, m.from_peer, m.from_name, m.from_member, m.from_machine, "
            "m.from_key, coalesce(p.project, ''), m.to_key, m.to_name, m.body, "
            "m.via_broadcast, m.created_at FROM chat_mail m "
            "LEFT JOIN chat_peers p ON p.id = m.from_peer AND p.team = m.team "
            "WHERE m.team = thatch_team() AND m.to_member = thatch_member() "
            "AND m.to_machine = %s AND m.delivered_at IS NULL AND m.id > %s "
            "ORDER BY m.id LIMIT %s",
            (machine, after, limit),
        ).fetchall()
    mails: list[Mail] = []
    for row in rows:
        created = row[11]
        assert isinstance(created, datetime)
        mails.append(
            Mail(
                id=int(row[0]),
                from_peer=None if row[1] is None else int(row[1]),
                from_name=str(row[2]),
                from_member=str(row[3]),
                from_machine=str(row[4]),
                from_key=str(row[5]),
                from_project=str(row[6]),
                to_key=str(row[7]),
                to_name=str(row[8]),
                body=str(row[9]),
                via_broadcast=bool(row[10]),
                created_at=created,
            )
        )
    return mails


def mark_delivered(
    conn: Connection[TupleRow], who: Member, machine: str, ids: Sequence[int], now: datetime
) -> int:
    """Mark this member's mail to ``machine`` among ``ids`` delivered; how many were
    marked now (ids of other mail, or already marked, change nothing)."""
    _check_machine(machine)
    _check_batch("ids", len(ids))
    if not ids:
        return 0
    with as_member(conn, who):
        marked = conn.execute(
            "UPDATE chat_mail SET delivered_at = %s WHERE team = thatch_team() "
            "AND to_member = thatch_member() AND to_machine = %s AND id = ANY(%s) "
            "AND delivered_at IS NULL",
            (now, machine, list(ids)),
        ).rowcount
    return marked


def purge_mail(conn: Connection[TupleRow], who: Member, before: datetime) -> int:
    """Delete the mail to or from this member created before ``before`` (delivered or
    not: a machine gone that long will not pull it), as the sync process does with
    ``now - MAIL_KEPT``; how many. Row security leaves every other member's mail alone."""
    with as_member(conn, who):
        return conn.execute(
            "DELETE FROM chat_mail WHERE team = thatch_team() AND (to_member = thatch_member() "
            "OR from_member = thatch_member()) AND created_at < %s",
            (before,),
        ).rowcount
