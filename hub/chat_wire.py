"""Chat across machines on the wire (hub.proto): the hub's values to messages, and the
machine's values (``frontend.store.chat_remote``) to requests and back, so the hub's
servicer and the machine's team sync process speak one conversion.

No psycopg here: the sync process imports it (tests/test_proto.py keeps the stubs free of
the hub's driver).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from thatch.frontend.store.chat_remote import IncomingMail, LocalPeer, QueuedMail, RemotePeer
from thatch.frontend.timefmt import format_timestamp
from thatch.hub.v1 import hub_pb2 as pb

if TYPE_CHECKING:
    from thatch.hub.chat import Mail, Peer

__all__ = [
    "incoming_from_pb",
    "mail_to_pb",
    "peer_to_pb",
    "publish_request",
    "refusals",
    "remote_peers_from_pb",
    "send_request",
    "sent_ids",
]


# -- the hub's side


def peer_to_pb(peer: Peer) -> pb.ChatPeer:
    message = pb.ChatPeer(
        id=peer.id,
        name=peer.name,
        member=peer.member,
        machine=peer.machine,
        key=peer.key,
        local_name=peer.local_name,
        project=peer.project,
        last_seen=format_timestamp(peer.last_seen),
    )
    if peer.topic is not None:
        message.topic = peer.topic
    return message


def mail_to_pb(mail: Mail) -> pb.Mail:
    return pb.Mail(
        id=mail.id,
        from_peer=mail.from_peer or 0,
        from_name=mail.from_name,
        from_member=mail.from_member,
        from_machine=mail.from_machine,
        from_project=mail.from_project,
        to_key=mail.to_key,
        to_name=mail.to_name,
        body=mail.body,
        via_broadcast=mail.via_broadcast,
        created_at=format_timestamp(mail.created_at),
    )


# -- the machine's side


def publish_request(machine: str, sessions: Sequence[LocalPeer]) -> pb.PublishSessionsRequest:
    return pb.PublishSessionsRequest(
        machine=machine,
        sessions=[
            pb.ChatSession(
                key=s.key,
                local_name=s.local_name,
                topic=s.topic,
                project=s.project,
                last_seen=s.last_seen,
            )
            for s in sessions
        ],
    )


def remote_peers_from_pb(peers: Sequence[pb.ChatPeer]) -> list[RemotePeer]:
    return [
        RemotePeer(
            id=p.id,
            name=p.name,
            member=p.member,
            machine=p.machine,
            key=p.key,
            topic=p.topic if p.HasField("topic") else None,
            project=p.project,
            last_seen=p.last_seen,
        )
        for p in peers
    ]


def send_request(machine: str, mails: Sequence[QueuedMail]) -> pb.SendMailRequest:
    """Client ids ``<machine>:<outbox id>``: outbox ids are never reused in a database."""
    return pb.SendMailRequest(
        machine=machine,
        mails=[
            pb.OutgoingMail(
                client_id=f"{machine}:{m.id}",
                from_key=m.from_key,
                to_peer=m.to_peer,
                body=m.body,
                via_broadcast=m.via_broadcast,
            )
            for m in mails
        ],
    )


def sent_ids(acks: Sequence[pb.MailAck]) -> list[int]:
    """The outbox ids the hub answered, stored or refused alike (a refusal is final: the
    tool refuses what the hub would, so what is left is a peer gone meanwhile)."""
    return [int(ack.client_id.rpartition(":")[2]) for ack in acks]


def refusals(acks: Sequence[pb.MailAck]) -> dict[int, str]:
    """The outbox ids the hub refused → its reason: kept aside and told to the sender."""
    return {int(ack.client_id.rpartition(":")[2]): ack.refused for ack in acks if ack.refused}


def incoming_from_pb(mails: Sequence[pb.Mail]) -> list[IncomingMail]:
    return [
        IncomingMail(
            id=m.id,
            from_peer=m.from_peer or None,
            from_name=m.from_name,
            from_member=m.from_member,
            from_machine=m.from_machine,
            from_project=m.from_project,
            to_key=m.to_key,
            body=m.body,
            via_broadcast=m.via_broadcast,
            created_at=m.created_at,
        )
        for m in mails
    ]
