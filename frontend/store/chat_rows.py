"""Chat rows (docs/chat.md §tables): sessions and messages as the chat store reads them,
and the keys, hashes and name words derived from session ids.

NamedTuples and hashlib only: the prompt hooks import this module on every prompt.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import NamedTuple

from thatch.frontend.store.chat_words import WORDS
from thatch.frontend.timefmt import parse_timestamp

__all__ = [
    "ACTIVE_WINDOW",
    "BODY_HAS_NUL",
    "MESSAGE_COLUMNS",
    "MESSAGE_FROM",
    "READ_ROWS",
    "SENT_ROWS",
    "SESSION_COLUMNS",
    "ChatMessage",
    "ChatSession",
    "Refusal",
    "TailRead",
    "host_session_key",
    "key_hash",
    "message_from_row",
    "name_word",
    "session_columns",
    "session_from_row",
]

ACTIVE_WINDOW = timedelta(minutes=30)

SESSION_FIELDS = (
    "session_id",
    "name",
    "topic",
    "project",
    "host_kind",
    "registered_at",
    "last_seen",
    "auto",
    "worktree",
)
SESSION_COLUMNS = ", ".join(SESSION_FIELDS)
# What the columns m003 added read as where the table lacks them: an earlier release's
# file this process may not write keeps its own schema (docs/database.md §compatibility).
_SESSION_DEFAULTS = {
    "topic": "NULL",
    "project": "NULL",
    "host_kind": "'opencode'",
    "auto": "0",
    "worktree": "''",
}
# SQLite's length() and substr() stop at a text's first NUL. A body holding one (sends
# refuse it, but the earlier release or another writer may have stored one) is read whole
# and measured in Python: its length column is NULL.
BODY_HAS_NUL = "instr(CAST(m.body AS BLOB), x'00') > 0"
MESSAGE_COLUMNS = (
    "m.id, m.from_session, m.to_session, m.body, m.created_at, m.delivered_at, m.read_at, "
    f"m.via_broadcast, s.name, CASE WHEN {BODY_HAS_NUL} THEN NULL ELSE length(m.body) END"
)
MESSAGE_FROM = "chat_messages m LEFT JOIN chat_sessions s ON s.session_id = m.from_session"
# The conditions of m028's partial indexes of the tail's events, stated in the queries
# meant to use them so that only those can. Every message has a send time (a NOT NULL
# text is >= ''); only a read with a time has a read event: NULL is unread, and '' (left
# by another writer) is no time to show.
SENT_ROWS = "created_at >= ''"
READ_ROWS = "read_at > ''"


def session_columns(present: Collection[str]) -> str:
    """SESSION_COLUMNS as a chat_sessions table with only the ``present`` columns answers
    them (the earlier release's lacks those of m003)."""
    return ", ".join(
        name if name in present else _SESSION_DEFAULTS.get(name, name) for name in SESSION_FIELDS
    )


# NamedTuples, not dataclasses: the prompt hooks import this module, and dataclasses
# (with inspect) would cost them ~6 ms a prompt.
class ChatSession(NamedTuple):
    session_id: str
    name: str
    topic: str | None
    project: str | None
    host_kind: str
    registered_at: str
    last_seen: str
    auto: bool
    worktree: str

    def is_active(self, now: datetime) -> bool:
        try:
            seen = parse_timestamp(self.last_seen)
        except ValueError:  # written by something else: not a sign of life
            return False
        return now - seen <= ACTIVE_WINDOW


class ChatMessage(NamedTuple):
    id: int
    from_session: str
    to_session: str
    body: str
    created_at: str
    delivered_at: str | None
    read_at: str | None
    via_broadcast: bool
    from_name: str | None  # None: the sender has left (shown as "unknown")
    length: int  # of the whole body; ``body`` may be a prefix of it (a read page)


class TailRead(NamedTuple):
    """A message's read as a tail reports it: who read it and when, not its body."""

    id: int
    to_session: str
    read_at: str


class Refusal(NamedTuple):
    """A message of the session's that a team's hub refused (m027 ``chat_outbox``)."""

    message_id: int
    to_name: str | None  # None: queued before m027 recorded the recipient's name
    to_peer: int  # the hub's id of the recipient
    reason: str  # the hub's words


def host_session_key(host_session: str) -> str:
    """The row key of a host session (Claude session_id, Cursor conversation_id, ...)."""
    return "mcp_" + hashlib.sha256(host_session.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def key_hash(key: str) -> str:
    """What the database keeps of a chat key: never the key itself."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def name_word(session_id: str) -> str:
    """The word a session's name starts with: fixed by its row key."""
    digest = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()
    return WORDS[int(digest, 16) % len(WORDS)]


def session_from_row(row: Sequence[object]) -> ChatSession:
    return ChatSession(
        session_id=str(row[0]),
        name=str(row[1]),
        topic=None if row[2] is None else str(row[2]),
        project=None if row[3] is None else str(row[3]),
        host_kind=str(row[4]),
        registered_at=str(row[5]),
        last_seen=str(row[6]),
        auto=bool(row[7]),
        worktree=str(row[8] or ""),
    )


def message_from_row(row: Sequence[object]) -> ChatMessage:
    body = str(row[3])
    return ChatMessage(
        id=int(row[0]),  # type: ignore[call-overload]
        from_session=str(row[1]),
        to_session=str(row[2]),
        body=body,
        created_at=str(row[4]),
        delivered_at=None if row[5] is None else str(row[5]),
        read_at=None if row[6] is None else str(row[6]),
        via_broadcast=bool(row[7]),
        from_name=None if row[8] is None else str(row[8]),
        length=len(body) if row[9] is None else int(row[9]),  # type: ignore[call-overload]
    )
