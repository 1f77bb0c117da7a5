"""Chat across machines, the machine's side (docs/team.md §chat-across-machines).

What the team sync process calls, per team, with the database connection it owns (each
function is one transaction): which local sessions to publish, the team's peers to show as
sessions, the mail waiting in the chat outbox, and the mail pulled from the hub to store
as local messages. The chat tool, hooks and CLI need nothing of this: remote peers are
``chat_sessions`` rows (``host_kind`` ``team``) and a message to one is queued by a
trigger (m018), so local chat works on them unchanged.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import sqlite3
from collections.abc import Collection, Mapping, Sequence
from datetime import timedelta
from typing import NamedTuple

from thatch.frontend.store.schema_lag import CHAT_REFUSED, schema_lag
from thatch.frontend.store.transactions import atomic
from thatch.frontend.timefmt import Clock, format_timestamp, parse_timestamp

__all__ = [
    "DELIVERED_KEPT",
    "MAIL_MAX",
    "OUTBOX_PAGE",
    "PUBLISH_MAX",
    "REMOTE_HOST_KIND",
    "IncomingMail",
    "LocalPeer",
    "QueuedMail",
    "RefusedMail",
    "RemotePeer",
    "apply_peers",
    "deliver_mail",
    "mark_sent",
    "outbox_counts",
    "outgoing_mail",
    "peers_to_publish",
    "refused_mail",
    "remote_session_id",
    "session_key",
]

REMOTE_HOST_KIND = "team"
PUBLISH_MAX = 1_000  # the hub's limit per publish
OUTBOX_PAGE = 100
MAIL_MAX = 20_000  # the hub's maximum body: a longer one is cut, never stored whole
DELIVERED_KEPT = timedelta(days=30)  # a mail id is pulled again only until marked delivered
PUBLISHED_WINDOW = timedelta(days=7)  # sessions unseen this long are not published
TOPIC_MAX = 80
PROJECT_MAX = 200
PRUNE_BATCH = 500
REASON_MAX = 200  # of a hub's refusal kept: what thatch shows of it stays short
REFUSED_LISTED = 20  # refused mail listed by ``thatch team status``

# A refused row as ``RefusedMail`` holds it, its sender's name read from its session.
_REFUSED_SELECT = (
    "SELECT o.id, o.team, o.message_id, s.name, o.to_name, o.to_peer, o.refused, "
    "o.queued_at, o.told_at FROM chat_outbox o "
    "LEFT JOIN chat_sessions s ON s.session_id = o.from_session"
)

_LOCAL_NAME = re.compile(r"[a-z]{1,16}-[0-9]{5,9}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# A name the hub assigns: ``<word>-<NNNNN>@<member>`` (the member id in plain characters),
# maybe ``#<n>``; the ``@`` keeps it apart from every local name. Anything else from a hub
# is not shown as a session.
_REMOTE_NAME = re.compile(r"[a-z]{1,16}-[0-9]{5,9}@[A-Za-z0-9_.-]{1,64}(#[0-9]{1,9})?")


class LocalPeer(NamedTuple):
    """A local session as published to the hub (``hub.chat.PublishedSession``)."""

    key: str
    local_name: str
    topic: str | None
    project: str
    last_seen: str  # thatch timestamp


class RemotePeer(NamedTuple):
    """A team's session as the hub lists it (``hub.chat.Peer``)."""

    id: int
    name: str
    member: str
    machine: str
    key: str
    topic: str | None
    project: str
    last_seen: str  # thatch timestamp


class QueuedMail(NamedTuple):
    """One chat outbox row: a message for a remote peer, waiting for the hub's ack."""

    id: int  # the outbox row: ``<machine id>:<id>`` is the hub's client id
    team: str
    from_session: str
    from_key: str
    to_peer: int
    body: str
    via_broadcast: bool


class RefusedMail(NamedTuple):
    """One chat outbox row the hub refused, as ``thatch team status`` lists it."""

    id: int
    team: str
    message_id: int
    from_name: str | None  # None: the sending session is gone
    to_name: str | None  # None: queued before m027 recorded names
    to_peer: int
    reason: str
    queued_at: str
    told_at: str | None


class IncomingMail(NamedTuple):
    """One mail pulled from the hub (``hub.chat.Mail``)."""

    id: int
    from_peer: int | None
    from_name: str
    from_member: str
    from_machine: str
    from_project: str
    to_key: str
    body: str
    via_broadcast: bool
    created_at: str  # thatch timestamp


def _salt(conn: sqlite3.Connection) -> str:
    row = conn.execute("SELECT salt FROM chat_secret WHERE id = 1").fetchone()
    if row is None:  # m011 writes it; a row deleted by hand is made again
        import secrets

        conn.execute(
            "INSERT OR IGNORE INTO chat_secret (id, salt) VALUES (1, ?)", (secrets.token_hex(32),)
        )
        row = conn.execute("SELECT salt FROM chat_secret WHERE id = 1").fetchone()
    return str(row[0])


def session_key(salt: str, session_id: str) -> str:
    """The key a local session is published under: an HMAC of its session id under this
    database's chat secret, so the hub never sees a session or host id, and only this
    file can tell which key is whose."""
    digest = hmac.new(
        salt.encode(), b"chat peer\0" + session_id.encode("utf-8", "surrogatepass"), hashlib.sha256
    )
    return digest.hexdigest()[:32]


def remote_session_id(team: str, peer_id: int) -> str:
    """The local row key of a team's peer: never the form of a local session's id."""
    return "team_" + hashlib.sha256(f"{team}\0{peer_id}".encode()).hexdigest()[:16]


def _local_keys(conn: sqlite3.Connection) -> dict[str, str]:
    """Every local session's key → its session id (remote rows excluded)."""
    salt = _salt(conn)
    rows = conn.execute(
        "SELECT s.session_id FROM chat_sessions s WHERE NOT EXISTS "
        "(SELECT 1 FROM chat_remote_peers r WHERE r.session_id = s.session_id)"
    ).fetchall()
    return {session_key(salt, str(row[0])): str(row[0]) for row in rows}


def _one_line(text: str, limit: int) -> str:
    return _CONTROL.sub(" ", text)[:limit]


def peers_to_publish(
    conn: sqlite3.Connection, team: str, stores: Collection[str], clock: Clock
) -> list[LocalPeer]:
    """The local sessions to publish to ``team``: those of its ``stores`` (the project
    stores linked to it) seen in the last 7 days, and every session with mail queued for
    it (a sender must be published for the hub to take its mail; mail it refused is
    never sent again and keeps nobody published). Names that are not assigned chat names
    (an earlier release's rows) are left out."""
    since = format_timestamp(clock() - PUBLISHED_WINDOW)
    marks = ",".join("?" for _ in stores)
    in_stores = f"s.project IN ({marks})" if stores else "0"
    with atomic(conn):
        # A file without m027 has no refusal column: all its mail waits.
        waiting = "" if CHAT_REFUSED in schema_lag(conn).migrations else " AND refused IS NULL"
        salt = _salt(conn)
        rows = conn.execute(
            "SELECT s.session_id, s.name, s.topic, s.project, s.last_seen FROM chat_sessions s "
            "WHERE NOT EXISTS (SELECT 1 FROM chat_remote_peers r "
            "WHERE r.session_id = s.session_id) "
            f"AND ((s.last_seen >= ? AND {in_stores}) OR s.session_id IN "
            f"(SELECT from_session FROM chat_outbox WHERE team = ?{waiting})) "
            "ORDER BY s.last_seen DESC LIMIT ?",
            (since, *stores, team, PUBLISH_MAX),
        ).fetchall()
    peers: list[LocalPeer] = []
    for session_id, name, topic, project, last_seen in rows:
        try:
            parse_timestamp(str(last_seen))
        except ValueError:
            continue
        if not _LOCAL_NAME.fullmatch(str(name)):
            continue
        peers.append(
            LocalPeer(
                key=session_key(salt, str(session_id)),
                local_name=str(name),
                topic=_one_line(str(topic), TOPIC_MAX) if topic else None,
                project=_one_line(str(project or "unknown"), PROJECT_MAX) or "unknown",
                last_seen=str(last_seen),
            )
        )
    return peers


def _free_name(conn: sqlite3.Connection, session_id: str, name: str, team: str) -> str | None:
    """``name`` if no other session holds it, else ``<name>/<team>``, else None."""
    for candidate in (name, f"{name}/{team}"):
        holder = conn.execute(
            "SELECT session_id FROM chat_sessions WHERE name = ?", (candidate,)
        ).fetchone()
        if holder is None or str(holder[0]) == session_id:
            return candidate
    return None


def _upsert_remote(
    conn: sqlite3.Connection,
    team: str,
    peer_id: int,
    *,
    name: str,
    member: str,
    machine: str,
    topic: str | None,
    project: str | None,
    last_seen: str,
    now: str,
) -> str | None:
    """The local row of a team's peer, made or refreshed; None when its name is not one
    the hub assigns or no free form of it is left."""
    session_id = remote_session_id(team, peer_id)
    if not _REMOTE_NAME.fullmatch(name):
        return None
    shown = _free_name(conn, session_id, name, team)
    if shown is None:
        return None
    conn.execute(
        "INSERT INTO chat_sessions (session_id, name, topic, project, host_kind, "
        "registered_at, last_seen, auto, worktree) VALUES (?, ?, ?, ?, ?, ?, ?, 1, '') "
        "ON CONFLICT(session_id) DO UPDATE SET name = excluded.name, topic = excluded.topic, "
        "project = excluded.project, last_seen = excluded.last_seen",
        (
            session_id,
            shown,
            _one_line(topic, TOPIC_MAX) if topic else None,
            _one_line(project, PROJECT_MAX) if project else None,
            REMOTE_HOST_KIND,
            now,
            last_seen,
        ),
    )
    conn.execute(
        "INSERT INTO chat_remote_peers (session_id, team, peer_id, member, machine) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT(session_id) DO UPDATE SET "
        "member = excluded.member, machine = excluded.machine",
        (session_id, team, peer_id, member, machine),
    )
    return session_id


def apply_peers(
    conn: sqlite3.Connection, team: str, peers: Sequence[RemotePeer], clock: Clock
) -> int:
    """Make ``peers`` (the hub's list for ``team``) the team's sessions here: new ones
    appear under their hub-assigned names, known ones are refreshed, the team's others
    are removed (their messages stay, their sender shown as ``unknown``). This
    machine's own published sessions are skipped. How many are shown."""
    now = format_timestamp(clock())
    with atomic(conn):
        mine = _local_keys(conn)
        shown: set[str] = set()
        for peer in peers:
            if peer.key in mine:
                continue
            try:
                parse_timestamp(peer.last_seen)
            except ValueError:
                continue
            session_id = _upsert_remote(
                conn,
                team,
                peer.id,
                name=peer.name,
                member=peer.member,
                machine=peer.machine,
                topic=peer.topic,
                project=peer.project,
                last_seen=peer.last_seen,
                now=now,
            )
            if session_id is not None:
                shown.add(session_id)
        gone = [
            str(row[0])
            for row in conn.execute(
                "SELECT session_id FROM chat_remote_peers WHERE team = ?", (team,)
            )
            if str(row[0]) not in shown
        ]
        conn.executemany("DELETE FROM chat_sessions WHERE session_id = ?", [(sid,) for sid in gone])
        conn.executemany(
            "DELETE FROM chat_remote_peers WHERE session_id = ?", [(sid,) for sid in gone]
        )
    return len(shown)


def outgoing_mail(
    conn: sqlite3.Connection, team: str, limit: int = OUTBOX_PAGE
) -> list[QueuedMail]:
    """The oldest messages queued for ``team``'s peers, at most ``limit``; they stay
    queued until ``mark_sent`` (a refused one is kept aside, never sent again)."""
    with atomic(conn):
        salt = _salt(conn)
        rows = conn.execute(
            "SELECT id, team, from_session, to_peer, body, via_broadcast FROM chat_outbox "
            "WHERE team = ? AND refused IS NULL ORDER BY id LIMIT ?",
            (team, limit),
        ).fetchall()
    return [
        QueuedMail(
            id=int(row[0]),
            team=str(row[1]),
            from_session=str(row[2]),
            from_key=session_key(salt, str(row[2])),
            to_peer=int(row[3]),
            body=str(row[4]),
            via_broadcast=bool(row[5]),
        )
        for row in rows
    ]


def mark_sent(
    conn: sqlite3.Connection, ids: Sequence[int], refused: Mapping[int, str] | None = None
) -> list[RefusedMail]:
    """Settle the outbox rows the hub answered, in one transaction: a stored one is
    dropped, a ``refused`` one (row id → the hub's reason) kept aside with its reason,
    never sent again, for its sender to be told once (``ChatStore._take_refusals``).
    Returns the rows refused now, as kept (for the sync process to log them)."""
    refused = refused or {}
    with atomic(conn):
        conn.executemany(
            "DELETE FROM chat_outbox WHERE id = ?", [(int(i),) for i in ids if i not in refused]
        )
        conn.executemany(
            "UPDATE chat_outbox SET refused = ? WHERE id = ?",
            [(reason[:REASON_MAX] or "refused", int(i)) for i, reason in refused.items()],
        )
        if not refused:
            return []
        # A send carries at most OUTBOX_PAGE rows: one statement's arguments.
        marks = ", ".join("?" * len(refused))
        rows = conn.execute(
            f"{_REFUSED_SELECT} WHERE o.id IN ({marks}) AND o.refused IS NOT NULL ORDER BY o.id",
            [int(i) for i in refused],
        ).fetchall()
    return [RefusedMail(*row) for row in rows]


def outbox_counts(conn: sqlite3.Connection) -> tuple[int, int]:
    """(waiting, refused) rows of the chat outbox, every team's."""
    waiting, refused = conn.execute(
        "SELECT count(*) FILTER (WHERE refused IS NULL), "
        "count(*) FILTER (WHERE refused IS NOT NULL) FROM chat_outbox"
    ).fetchone()
    return int(waiting or 0), int(refused or 0)


def refused_mail(conn: sqlite3.Connection, limit: int = REFUSED_LISTED) -> list[RefusedMail]:
    """The newest refused mail, told or not, at most ``limit``, newest first."""
    rows = conn.execute(
        f"{_REFUSED_SELECT} WHERE o.refused IS NOT NULL ORDER BY o.id DESC LIMIT ?", (limit,)
    ).fetchall()
    return [RefusedMail(*row) for row in rows]


def deliver_mail(
    conn: sqlite3.Connection, team: str, mails: Sequence[IncomingMail], clock: Clock
) -> list[int]:
    """Store each mail as a local message from its sender's remote session to the local
    session it is addressed to, in one transaction, so unread counts, wakes and pointers
    fire as for local mail; the hub ids handled (to mark delivered on the hub).

    A mail already stored (pulled again after a lost ``MarkDelivered``) is not stored
    again; a mail for a session that has left is dropped; a sender not yet listed here is
    added from the mail (so the recipient can reply at once).
    """
    now = format_timestamp(clock())
    handled: list[int] = []
    with atomic(conn):
        local = _local_keys(conn)
        for mail in mails:
            seen = conn.execute(
                "SELECT 1 FROM chat_remote_delivered WHERE team = ? AND mail_id = ?",
                (team, mail.id),
            ).fetchone()
            if seen is not None:
                handled.append(mail.id)
                continue
            to_session = local.get(mail.to_key)
            message_id: int | None = None
            if to_session is not None and mail.body:
                sender = remote_session_id(team, mail.from_peer or 0)
                if mail.from_peer is not None:
                    known = conn.execute(
                        "SELECT 1 FROM chat_sessions WHERE session_id = ?", (sender,)
                    ).fetchone()
                    if known is None:
                        _upsert_remote(
                            conn,
                            team,
                            mail.from_peer,
                            name=mail.from_name,
                            member=mail.from_member,
                            machine=mail.from_machine,
                            topic=None,
                            project=mail.from_project or None,
                            last_seen=mail.created_at,
                            now=now,
                        )
                try:
                    at = format_timestamp(parse_timestamp(mail.created_at))
                except ValueError:
                    at = now
                cursor = conn.execute(
                    "INSERT INTO chat_messages (from_session, to_session, body, created_at, "
                    "via_broadcast) VALUES (?, ?, ?, ?, ?)",
                    (sender, to_session, mail.body[:MAIL_MAX], at, int(mail.via_broadcast)),
                )
                message_id = cursor.lastrowid
            conn.execute(
                "INSERT INTO chat_remote_delivered (team, mail_id, message_id, at) "
                "VALUES (?, ?, ?, ?)",
                (team, mail.id, message_id, now),
            )
            handled.append(mail.id)
        conn.execute(
            "DELETE FROM chat_remote_delivered WHERE rowid IN (SELECT rowid "
            "FROM chat_remote_delivered WHERE at < ? LIMIT ?)",
            (format_timestamp(clock() - DELIVERED_KEPT), PRUNE_BATCH),
        )
    return handled
