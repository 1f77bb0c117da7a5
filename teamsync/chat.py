"""The sync process's chat round (docs/team.md §chat-across-machines): per team, each pass,
publish this machine's sessions, show the team's peers, send the chat outbox, pull the
mail addressed here, store it and mark it delivered.

Every step is one call to the hub and one transaction on the machine's SQLite
(``frontend.store.chat_remote``), ordered so that a failure at any point loses nothing:
a queued mail leaves the outbox only once the hub acknowledged it (a retry carries the
same client id, so the hub stores it once), one the hub refused stays there with the
reason, never sent again, for its sender to be told; and a pulled mail is marked
delivered only after it is stored here (one pulled again is skipped by its id).
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from thatch.frontend.store import chat_remote
from thatch.frontend.timefmt import Clock
from thatch.hub import chat_wire
from thatch.hub.v1 import hub_pb2

__all__ = ["MAIL_PAGES", "REFRESH", "ChatHub", "ChatMemo", "ChatOutcome", "chat_round"]

MAIL_PAGES = 10  # outbox pages sent, and mail pages pulled, per pass at most: a bounded pass
# An unchanged set of sessions is published again, and an unchanged list of peers applied
# again, after this long: a pass every few seconds then costs the hub no name assignment
# and this file no write, and a hub restored from a backup still learns the sessions.
REFRESH = timedelta(seconds=60)


class ChatHub(Protocol):
    """The chat RPCs as ``hub.client.HubClient`` calls them."""

    def publish_sessions(
        self, request: hub_pb2.PublishSessionsRequest
    ) -> hub_pb2.PublishSessionsResponse: ...
    def peers(self) -> hub_pb2.PeersResponse: ...
    def send_mail(self, request: hub_pb2.SendMailRequest) -> hub_pb2.SendMailResponse: ...
    def pull_mail(
        self, machine: str, after: int = 0, limit: int = 0
    ) -> hub_pb2.PullMailResponse: ...
    def mark_delivered(self, machine: str, ids: Sequence[int]) -> int: ...


@dataclass
class ChatMemo:
    """What the last rounds published and applied, per team (held by the sync process)."""

    seen: dict[tuple[str, str], tuple[bytes, datetime]] = field(default_factory=dict)

    def unchanged(self, team: str, what: str, payload: bytes, now: datetime) -> bool:
        held = self.seen.get((team, what))
        digest = hashlib.sha256(payload).digest()
        return held is not None and held[0] == digest and now - held[1] < REFRESH

    def note(self, team: str, what: str, payload: bytes, now: datetime) -> None:
        self.seen[(team, what)] = (hashlib.sha256(payload).digest(), now)


@dataclass
class ChatOutcome:
    team: str
    published: int = 0
    peers: int = 0
    sent: int = 0
    refused: int = 0  # kept aside in the chat outbox, the sender told (m027)
    delivered: int = 0
    # The mail refused, as kept: the sync process logs each (the reason, never the body).
    refusals: list[chat_remote.RefusedMail] = field(default_factory=list)


def chat_round(
    conn: sqlite3.Connection,
    hub: ChatHub,
    *,
    team: str,
    stores: Collection[str],
    machine: str,
    clock: Clock,
    stop: threading.Event | None = None,
    memo: ChatMemo | None = None,
    outcome: ChatOutcome | None = None,
) -> ChatOutcome:
    """One chat round for ``team`` (its linked ``stores`` say which sessions to publish).
    Raises what the hub client or the store raise; the caller makes it the link's error.
    With ``memo``, what is unchanged since the last round (within ``REFRESH``) is not
    published or applied again. ``outcome`` is filled as the round goes, so a round that
    fails after the hub refused mail still says so (returned; a new one when None)."""
    memo = memo if memo is not None else ChatMemo()
    done = outcome if outcome is not None else ChatOutcome(team)
    now = clock()
    published = chat_remote.peers_to_publish(conn, team, stores, clock)
    request = chat_wire.publish_request(machine, published)
    payload = request.SerializeToString(deterministic=True)
    if not memo.unchanged(team, "publish", payload, now):
        hub.publish_sessions(request)
        memo.note(team, "publish", payload, now)
        done.published = len(published)
    listed = hub.peers()
    payload = listed.SerializeToString(deterministic=True)
    if not memo.unchanged(team, "peers", payload, now):
        done.peers = chat_remote.apply_peers(
            conn, team, chat_wire.remote_peers_from_pb(listed.peers), clock
        )
        memo.note(team, "peers", payload, now)
    for _ in range(MAIL_PAGES):
        queued = chat_remote.outgoing_mail(conn, team)
        if not queued:
            break
        answer = hub.send_mail(chat_wire.send_request(machine, queued))
        acked = chat_wire.sent_ids(answer.acks)
        refused = chat_wire.refusals(answer.acks)
        done.refusals += chat_remote.mark_sent(conn, acked, refused)
        done.sent += len(acked) - len(refused)
        done.refused += len(refused)
        if len(queued) < chat_remote.OUTBOX_PAGE or not acked:
            break
        if stop is not None and stop.is_set():
            break
    after = 0
    for _ in range(MAIL_PAGES):
        pulled = hub.pull_mail(machine, after=after)
        if not pulled.mails:
            break
        handled = chat_remote.deliver_mail(
            conn, team, chat_wire.incoming_from_pb(pulled.mails), clock
        )
        hub.mark_delivered(machine, handled)
        done.delivered += len(handled)
        after = max(mail.id for mail in pulled.mails)
        if stop is not None and stop.is_set():
            break
    return done
