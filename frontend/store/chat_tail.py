"""The chat's tail (docs/chat.md §cli): every message after a point, the last events, for
``thatch chat tail`` and the ui, without marking anything read.

A mixin so that ``ChatStore`` keeps one public surface while each module stays small; it
relies only on ``tx`` of the class it is mixed into (chat_store.py).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from typing import NamedTuple

from thatch.frontend.store.chat_rows import (
    MESSAGE_COLUMNS,
    MESSAGE_FROM,
    READ_ROWS,
    SENT_ROWS,
    ChatMessage,
    TailRead,
    message_from_row,
)
from thatch.frontend.store.schema_lag import has_table
from thatch.frontend.store.transactions import Transactions

__all__ = ["EVENT_CHUNK", "ChatTail", "TailEvent"]

EVENT_CHUNK = 200  # events, and the bodies they need, one step back through the tail reads


class TailEvent(NamedTuple):
    """A message sent (``kind`` 0, at its ``created_at``: the message, body whole) or read
    (1, at its ``read_at``: who read it, no body)."""

    at: str
    kind: int
    message: ChatMessage | TailRead


class _Met(NamedTuple):
    """An event the walk back met and kept, before any body is read."""

    at: str
    kind: int
    id: int
    to_session: str


def _who(
    senders: Sequence[str] | None, recipients: Sequence[str] | None, *, indexed: bool = True
) -> tuple[list[str], list[str]]:
    """SQL terms (and their arguments) keeping messages between these session ids; not
    ``indexed``: a term no index can serve (``+column``), for a query meant to walk
    another index."""
    terms: list[str] = []
    args: list[str] = []
    for column, ids in (("from_session", senders), ("to_session", recipients)):
        if ids is not None:
            term = column if indexed else f"+{column}"
            terms.append(f"{term} IN ({', '.join('?' * len(ids))})")
            args.extend(ids)
    return terms, args


def _events_newest_first(
    since: str | None,
    until: str | None,
    senders: Sequence[str] | None,
    recipients: Sequence[str] | None,
) -> tuple[str, list[str]]:
    """The query of every event's time, kind, message id and ends, newest first: no body.

    Each kind walks its own time index (m028) and SQLite merges the two, sorting only the
    events of one time by id: the query stops where its reader does. The recipient index
    would read one recipient's messages, but then sort them all."""
    who, who_args = _who(senders, recipients, indexed=False)
    branches: list[str] = []
    args: list[str] = []
    for kind, (at, rows) in enumerate((("created_at", SENT_ROWS), ("read_at", READ_ROWS))):
        terms = [rows, *who]
        args.extend(who_args)
        for bound, operator in ((since, ">="), (until, "<=")):
            if bound:
                terms.append(f"{at} {operator} ?")
                args.append(bound)
        branches.append(
            f"SELECT {at} AS at, {kind} AS kind, id, from_session, to_session "
            f"FROM chat_messages WHERE {' AND '.join(terms)}"
        )
    return " UNION ALL ".join(branches) + " ORDER BY at DESC, kind DESC, id DESC", args


class ChatTail:
    """Reads of the whole chat: messages after an id, the last events, unread ids, names."""

    tx: Transactions

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """One read transaction around several reads: they see the same messages."""
        with self.tx.read():
            yield

    def file_version(self) -> int:
        """SQLite's ``data_version`` of this connection: it changes whenever another
        connection commits to the file, and only then (this one's own commits leave it).
        Asked first in a ``snapshot``, it names what that snapshot reads: the same number
        later, and the file holds what that snapshot read."""
        with self.tx.read() as conn:
            (version,) = conn.execute("PRAGMA data_version").fetchone()
        return int(version)

    def _has_messages(self) -> bool:
        """Whether there is a chat_messages table to read: not in an earlier release's
        file without it that this process may not migrate (docs/database.md
        §compatibility), where every read of the messages answers none."""
        with self.tx.lock:  # a server's threads share the connection
            return has_table(self.tx.conn, "chat_messages")

    def last_events(
        self,
        count: int | None,
        ends: Callable[[str, str], bool],
        body: Callable[[str], bool] | None,
        *,
        since: str | None = None,
        until: str | None = None,
        senders: Sequence[str] | None = None,
        recipients: Sequence[str] | None = None,
    ) -> list[TailEvent]:
        """The last ``count`` events (every one when None), oldest first, at ``since`` to
        ``until``, of the messages whose sender and recipient ``ends`` accepts and, when
        given, whose body ``body`` accepts; ``senders``/``recipients``, when given, hold
        every session id ``ends`` can accept at that end.

        One query walks the events newest first from ids, times and ends alone (ids do
        not follow time everywhere: a team's mail keeps the hub's time, a read comes any
        time later) until ``count`` are kept. Bodies are read only for ``body`` to check,
        a chunk at a time, and for the sends kept: a read event shows none.
        """
        if count == 0 or not self._has_messages():
            return []
        sql, args = _events_newest_first(since, until, senders, recipients)
        met: list[_Met] = []
        accepted: dict[int, ChatMessage] = {}
        refused: set[int] = set()
        step = min(count or EVENT_CHUNK, EVENT_CHUNK)
        with self.tx.read() as conn, closing(conn.execute(sql, args)) as events:
            while count is None or len(met) < count:
                rows = events.fetchmany(step)
                if not rows:
                    break
                chunk = [
                    _Met(str(at), int(kind), int(message_id), str(to_session))
                    for at, kind, message_id, from_session, to_session in rows
                    if ends(str(from_session), str(to_session))
                ]
                if body is not None:
                    wanted = {event.id for event in chunk} - accepted.keys() - refused
                    for message in _messages(conn, sorted(wanted)):
                        if body(message.body):
                            accepted[message.id] = message
                        else:
                            refused.add(message.id)
                    chunk = [event for event in chunk if event.id not in refused]
                met.extend(chunk)
                step = min(step * 2, EVENT_CHUNK)  # a filter that keeps few: larger steps
            if count is not None:
                del met[count:]
            sends = {event.id for event in met if event.kind == 0} - accepted.keys()
            accepted.update((message.id, message) for message in _chunked(conn, sorted(sends)))
        met.reverse()
        return [
            TailEvent(
                e.at, e.kind, TailRead(e.id, e.to_session, e.at) if e.kind else accepted[e.id]
            )
            for e in met
        ]

    def unread_kept(
        self,
        ends: Callable[[str, str], bool],
        body: Callable[[str], bool] | None,
        *,
        senders: Sequence[str] | None = None,
        recipients: Sequence[str] | None = None,
    ) -> set[int]:
        """The ids of the unread messages whose sender and recipient ``ends`` accepts and,
        when given, whose body ``body`` accepts: only those bodies are read, a chunk at a
        time (a tail watching for reads shows no body)."""
        if not self._has_messages():
            return set()
        who, args = _who(senders, recipients)
        sql = "SELECT id, from_session, to_session FROM chat_messages WHERE " + " AND ".join(
            ["read_at IS NULL", *who]
        )
        found: set[int] = set()
        with self.tx.read() as conn, closing(conn.execute(sql + " ORDER BY id", args)) as unread:
            while chunk := unread.fetchmany(EVENT_CHUNK):
                ids = [int(row[0]) for row in chunk if ends(str(row[1]), str(row[2]))]
                if body is None:
                    found.update(ids)
                else:
                    found.update(
                        message.id for message in _messages(conn, ids) if body(message.body)
                    )
        return found

    def sent_after(
        self, after_id: int, ends: Callable[[str, str], bool], body: Callable[[str], bool] | None
    ) -> tuple[list[ChatMessage], int]:
        """The messages after ``after_id`` that ``ends`` (and ``body``, when given) accept,
        oldest first, and the highest id met (``after_id`` with none). Bodies are read a
        chunk at a time, only for the messages ``ends`` accepts: a tail following one
        sender reads no other's."""
        kept: list[ChatMessage] = []
        last = after_id
        if not self._has_messages():
            return kept, last
        sql = "SELECT id, from_session, to_session FROM chat_messages WHERE id > ? ORDER BY id"
        with self.tx.read() as conn, closing(conn.execute(sql, (after_id,))) as new:
            while chunk := new.fetchmany(EVENT_CHUNK):
                last = int(chunk[-1][0])
                ids = [int(row[0]) for row in chunk if ends(str(row[1]), str(row[2]))]
                messages = sorted(_messages(conn, ids), key=lambda message: message.id)
                kept.extend(m for m in messages if body is None or body(m.body))
        return kept, last

    def last_id(self) -> int:
        """The highest message id (0 with none): where following new messages starts."""
        if not self._has_messages():
            return 0
        with self.tx.read() as conn:
            (last,) = conn.execute("SELECT coalesce(max(id), 0) FROM chat_messages").fetchone()
        return int(last)

    def messages_after(self, after_id: int, limit: int | None = None) -> list[ChatMessage]:
        """Messages with id > ``after_id``, oldest first; with ``limit`` the last ``limit``.
        None in an earlier release's file without the table that this process may not
        migrate (read-only: docs/database.md §compatibility)."""
        if not self._has_messages():
            return []
        with self.tx.read() as conn:
            if limit is None:
                rows = conn.execute(
                    f"SELECT {MESSAGE_COLUMNS} FROM {MESSAGE_FROM} WHERE m.id > ? ORDER BY m.id",
                    (after_id,),
                ).fetchall()
            else:
                rows = conn.execute(
                    f"SELECT {MESSAGE_COLUMNS} FROM {MESSAGE_FROM} WHERE m.id > ? "
                    "ORDER BY m.id DESC LIMIT ?",
                    (after_id, limit),
                ).fetchall()
                rows.reverse()
        return [message_from_row(row) for row in rows]

    def read_among(self, ids: Sequence[int]) -> list[TailRead]:
        """Those of ``ids`` that are read now, in read order (a tail's read events): no
        body, which a read event does not show."""
        found: list[TailRead] = []
        with self.tx.read() as conn:
            for start in range(0, len(ids), 500):
                chunk = list(ids[start : start + 500])
                marks = ", ".join("?" * len(chunk))
                found.extend(
                    TailRead(int(message_id), str(to_session), str(read_at))
                    for message_id, to_session, read_at in conn.execute(
                        "SELECT id, to_session, read_at FROM chat_messages "
                        f"WHERE read_at IS NOT NULL AND id IN ({marks})",
                        chunk,
                    )
                )
        return sorted(found, key=lambda read: (read.read_at, read.id))

    def names(self) -> dict[str, str]:
        """session id → name, for showing message endpoints."""
        with self.tx.read() as conn:
            return {
                str(sid): str(name)
                for sid, name in conn.execute("SELECT session_id, name FROM chat_sessions")
            }


def _messages(conn: sqlite3.Connection, ids: Sequence[int]) -> list[ChatMessage]:
    """The messages of ``ids`` (at most EVENT_CHUNK), bodies whole."""
    if not ids:
        return []
    marks = ", ".join("?" * len(ids))
    rows = conn.execute(
        f"SELECT {MESSAGE_COLUMNS} FROM {MESSAGE_FROM} WHERE m.id IN ({marks})", list(ids)
    ).fetchall()
    return [message_from_row(row) for row in rows]


def _chunked(conn: sqlite3.Connection, ids: Sequence[int]) -> Iterator[ChatMessage]:
    """The messages of ``ids``, read EVENT_CHUNK at a time."""
    for start in range(0, len(ids), EVENT_CHUNK):
        yield from _messages(conn, ids[start : start + EVENT_CHUNK])
