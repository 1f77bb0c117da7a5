"""The chat RPCs of the hub (hub.proto ``PublishSessions``, ``Peers``, ``SendMail``,
``PullMail``, ``MarkDelivered``; docs/team.md §chat-across-machines).

Each is a function of (connection, authenticated member, request, clock) returning the
response, for the hub's servicer to bind: it authenticates the token and hands over a
pooled connection as it does for the memory RPCs. A malformed request raises
``InvalidInputError`` (the servicer answers ``INVALID_ARGUMENT`` with its message); a
single mail's refusal is its ack's ``refused``.
"""

from __future__ import annotations

from psycopg import Connection
from psycopg.rows import TupleRow

from thatch.frontend.errors import InvalidInputError
from thatch.frontend.timefmt import Clock, parse_timestamp
from thatch.hub import chat
from thatch.hub.chat_wire import mail_to_pb, peer_to_pb
from thatch.hub.session import Member
from thatch.hub.v1 import hub_pb2 as pb

__all__ = ["list_peers", "mark_delivered", "publish_sessions", "pull_mail", "send_mail"]


def _session(session: pb.ChatSession) -> chat.PublishedSession:
    try:
        last_seen = parse_timestamp(session.last_seen)
    except ValueError:
        raise InvalidInputError(
            "Invalid arguments: last_seen: not an ISO 8601 UTC timestamp (YYYY-MM-DDTHH:MM:SS.mmmZ)"
        ) from None
    return chat.PublishedSession(
        key=session.key,
        local_name=session.local_name,
        topic=session.topic if session.HasField("topic") else None,
        project=session.project,
        last_seen=last_seen,
    )


def publish_sessions(
    conn: Connection[TupleRow], who: Member, request: pb.PublishSessionsRequest, clock: Clock
) -> pb.PublishSessionsResponse:
    sessions = [_session(session) for session in request.sessions]
    peers = chat.publish(conn, who, request.machine, sessions)
    return pb.PublishSessionsResponse(peers=[peer_to_pb(peer) for peer in peers])


def list_peers(
    conn: Connection[TupleRow], who: Member, request: pb.PeersRequest, clock: Clock
) -> pb.PeersResponse:
    return pb.PeersResponse(peers=[peer_to_pb(peer) for peer in chat.peers(conn, who, clock())])


def send_mail(
    conn: Connection[TupleRow], who: Member, request: pb.SendMailRequest, clock: Clock
) -> pb.SendMailResponse:
    mails = [
        chat.OutgoingMail(
            client_id=mail.client_id,
            from_key=mail.from_key,
            to_peer=mail.to_peer,
            body=mail.body,
            via_broadcast=mail.via_broadcast,
        )
        for mail in request.mails
    ]
    acks = chat.send_mail(conn, who, request.machine, mails, clock())
    return pb.SendMailResponse(
        acks=[
            pb.MailAck(client_id=ack.client_id, id=ack.id or 0, refused=ack.refused or "")
            for ack in acks
        ]
    )


def pull_mail(
    conn: Connection[TupleRow], who: Member, request: pb.PullMailRequest, clock: Clock
) -> pb.PullMailResponse:
    mails = chat.pull_mail(
        conn, who, request.machine, request.after, request.limit or chat.MAIL_PAGE
    )
    return pb.PullMailResponse(mails=[mail_to_pb(mail) for mail in mails])


def mark_delivered(
    conn: Connection[TupleRow], who: Member, request: pb.MarkDeliveredRequest, clock: Clock
) -> pb.MarkDeliveredResponse:
    now = clock()
    marked = chat.mark_delivered(conn, who, request.machine, list(request.ids), now)
    # Retention rides on delivery: each member's machines trim that member's old mail.
    chat.purge_mail(conn, who, now - chat.MAIL_KEPT)
    return pb.MarkDeliveredResponse(marked=marked)
