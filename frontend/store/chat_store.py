"""Chat between concurrent agent sessions: sessions, names, messages, wakes (docs/chat.md).

One ``ChatStore`` over a connection, a lock and a clock, all passed in. Every logical write
is one short ``BEGIN IMMEDIATE`` transaction (``db.atomic``): name assignment, a message
with all its parts, reading-and-marking, a wake. Nothing here formats text for agents;
the tools (tools/chat_tools.py) and hooks do that.
"""

from __future__ import annotations

import hashlib
import hmac
import sqlite3
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from thatch.frontend.store.chat_rows import (
    ACTIVE_WINDOW,
    BODY_HAS_NUL,
    MESSAGE_COLUMNS,
    MESSAGE_FROM,
    SESSION_COLUMNS,
    ChatMessage,
    ChatSession,
    Refusal,
    TailRead,
    host_session_key,
    key_hash,
    message_from_row,
    name_word,
    session_columns,
    session_from_row,
)
from thatch.frontend.store.chat_tail import ChatTail
from thatch.frontend.store.migrations.tables import table_columns
from thatch.frontend.store.schema_lag import CHAT_REFUSED, schema_lag
from thatch.frontend.store.transactions import Transactions
from thatch.frontend.timefmt import Clock, format_timestamp

TOMBSTONE_KEPT = timedelta(days=7)
AUTO_ROW_KEPT = timedelta(days=7)
PRUNE_EVERY = timedelta(days=1)
RENUDGE_WINDOW = timedelta(minutes=15)
WAKE_WINDOW = timedelta(hours=1)
WAKES_PER_WINDOW = 6
DUPLICATE_WINDOW = timedelta(seconds=10)
PERSON = "person"  # host_kind and name base of a person's identity (thatch chat send)
KEY_HEX = 16  # a chat key: 64 bits, far beyond guessing through tool calls
READ_BATCH = 200  # more messages than one 20,000-character page can frame
MESSAGE_KEPT = timedelta(days=30)  # retention of chat_messages, read or not
MESSAGES_KEPT = 50_000  # and at most this many rows, the oldest going first
PRUNE_BATCH = 500  # rows one prune step looks at per table: a bounded cost for a hook
REFUSALS_TOLD = 3  # refused messages told at once: more wait for the next telling
REFUSAL_TOLD_KEPT = timedelta(days=7)  # a refused chat mail kept after its sender was told
REFUSAL_KEPT = timedelta(days=30)  # one never told, after its sender was last seen
# A session's refusals not told yet, oldest first (m027's partial index finds them).
UNTOLD = (
    "SELECT id, message_id, to_name, to_peer, refused FROM chat_outbox "
    "WHERE from_session = ? AND refused IS NOT NULL AND told_at IS NULL ORDER BY id LIMIT ?"
)

# The rows are defined in chat_rows and named here too: callers import the store and its
# rows from one place.
__all__ = [
    "ACTIVE_WINDOW",
    "MESSAGES_KEPT",
    "PERSON",
    "ChatMessage",
    "ChatSession",
    "ChatStore",
    "Refusal",
    "TailRead",
    "host_session_key",
    "key_hash",
    "name_word",
]


def _session_columns(conn: sqlite3.Connection) -> str:
    """The columns to select of chat_sessions: where m003 is not recorded (a file this
    process could not migrate) those it adds read as their defaults; once recorded, a
    column lost from the table fails as SQLite's "no such column"."""
    if "m003_add_columns" in schema_lag(conn).migrations:
        return session_columns(table_columns(conn, "chat_sessions"))
    return SESSION_COLUMNS


class ChatStore(ChatTail):
    """Chat queries over one connection; ``lock`` serialises threads sharing it."""

    def __init__(
        self, conn: sqlite3.Connection, clock: Clock, lock: threading.RLock | None = None
    ) -> None:
        self.conn = conn
        self.tx = Transactions(conn, clock=clock, lock=lock)
        with self.tx.lock:  # a server's threads share the connection
            self._session_columns = _session_columns(conn)

    # -- plumbing ------------------------------------------------------------------------

    @property
    def clock(self) -> Clock:
        return self.tx.clock

    def _at(self, delta: timedelta = timedelta(0)) -> str:
        return format_timestamp(self.clock() - delta)

    # -- sessions ------------------------------------------------------------------------

    def get(self, session_id: str) -> ChatSession | None:
        with self.tx.read() as conn:
            row = conn.execute(
                f"SELECT {self._session_columns} FROM chat_sessions WHERE session_id = ?",
                (session_id,),
            ).fetchone()
        return None if row is None else session_from_row(row)

    def by_name(self, name: str) -> ChatSession | None:
        """The session called ``name``, case-insensitively (the column is NOCASE)."""
        with self.tx.read() as conn:
            row = conn.execute(
                f"SELECT {self._session_columns} FROM chat_sessions WHERE name = ?", (name,)
            ).fetchone()
        return None if row is None else session_from_row(row)

    def sessions(self) -> list[ChatSession]:
        with self.tx.read() as conn:
            rows = conn.execute(f"SELECT {self._session_columns} FROM chat_sessions").fetchall()
        return [session_from_row(row) for row in rows]

    def _assign_name(self, conn: sqlite3.Connection, session_id: str, word: str | None) -> str:
        word = word or name_word(session_id)
        conn.execute(
            "INSERT INTO chat_name_counters (base, next) VALUES (?, 1) "
            "ON CONFLICT(base) DO NOTHING",
            (word,),
        )
        while True:
            (number,) = conn.execute(
                "SELECT next FROM chat_name_counters WHERE base = ?", (word,)
            ).fetchone()
            conn.execute("UPDATE chat_name_counters SET next = next + 1 WHERE base = ?", (word,))
            name = f"{word}-{int(number):05d}"
            # A row of the earlier release may hold the name already: never reuse it.
            taken = conn.execute("SELECT 1 FROM chat_sessions WHERE name = ?", (name,)).fetchone()
            if taken is None:
                return name

    def _insert(
        self,
        conn: sqlite3.Connection,
        session_id: str,
        *,
        project: str,
        host_kind: str,
        worktree: str,
        auto: bool,
        word: str | None = None,
    ) -> None:
        now = self._at()
        conn.execute(
            "INSERT INTO chat_sessions (session_id, name, topic, project, host_kind, "
            "registered_at, last_seen, auto, worktree) VALUES (?, ?, NULL, ?, ?, ?, ?, ?, ?)",
            (
                session_id,
                self._assign_name(conn, session_id, word),
                project,
                host_kind,
                now,
                now,
                int(auto),
                worktree,
            ),
        )

    def anchor(
        self,
        session_id: str,
        *,
        project: str,
        host_kind: str,
        worktree: str,
        key: str | None = None,
    ) -> ChatSession | None:
        """Ensure a hook's session is registered (``auto = 1``) and refresh ``last_seen``.

        None when the session left less than 7 days ago (its tombstone keeps it out).
        An existing row keeps its name; project and worktree follow the session. ``key``
        (``host_key``) binds the identity: the tools accept it only with that key.
        """
        with self.tx.write() as conn:
            left = conn.execute(
                "SELECT left_at FROM chat_leave_tombstones WHERE session_id = ?", (session_id,)
            ).fetchone()
            if left is not None and str(left[0]) > self._at(TOMBSTONE_KEPT):
                return None
            updated = conn.execute(
                "UPDATE chat_sessions SET last_seen = ?, project = ?, worktree = ? "
                "WHERE session_id = ?",
                (self._at(), project, worktree, session_id),
            ).rowcount
            if not updated:
                self._insert(
                    conn,
                    session_id,
                    project=project,
                    host_kind=host_kind,
                    worktree=worktree,
                    auto=True,
                )
            if key is not None:
                self._bind(conn, session_id, key)
            row = conn.execute(
                f"SELECT {self._session_columns} FROM chat_sessions WHERE session_id = ?",
                (session_id,),
            ).fetchone()
        return session_from_row(row)

    def anchored_since(
        self, session: ChatSession, *, project: str, worktree: str, key: str, within: timedelta
    ) -> bool:
        """Whether ``anchor`` would change nothing a reader relies on: ``session`` (its
        row as just read) seen within ``within``, with this project and worktree, bound to
        ``key``, no tombstone. Reads only: a prompt hook then skips the write."""
        if session.project != project or session.worktree != worktree:
            return False
        if session.last_seen <= self._at(within):
            return False
        with self.tx.read() as conn:
            left = conn.execute(
                "SELECT 1 FROM chat_leave_tombstones WHERE session_id = ?", (session.session_id,)
            ).fetchone()
            bound = conn.execute(
                "SELECT key_hash FROM chat_keys WHERE session_id = ?", (session.session_id,)
            ).fetchone()
        return (
            left is None and bound is not None and hmac.compare_digest(str(bound[0]), key_hash(key))
        )

    def register_server(
        self, *, project: str, host_kind: str, worktree: str, key: str | None = None
    ) -> ChatSession:
        """A new identity for one server process (``srv_`` + uuid4, ``auto = 0``), bound
        to ``key`` (which that process keeps in memory) when given."""
        import uuid  # ~3 ms: only servers need it, never a hook

        session_id = "srv_" + str(uuid.uuid4())
        with self.tx.write() as conn:
            self._insert(
                conn,
                session_id,
                project=project,
                host_kind=host_kind,
                worktree=worktree,
                auto=False,
            )
            if key is not None:
                self._bind(conn, session_id, key)
            row = conn.execute(
                f"SELECT {self._session_columns} FROM chat_sessions WHERE session_id = ?",
                (session_id,),
            ).fetchone()
        return session_from_row(row)

    def ensure_person(self, session_id: str, *, project: str, worktree: str) -> ChatSession:
        """The identity a person sends under from the CLI: ``person-<NNNNN>`` (a base
        outside the 64 words, so no agent's name can look like it), ``host_kind`` person."""
        with self.tx.write() as conn:
            updated = conn.execute(
                "UPDATE chat_sessions SET last_seen = ? WHERE session_id = ?",
                (self._at(), session_id),
            ).rowcount
            if not updated:
                self._insert(
                    conn,
                    session_id,
                    project=project,
                    host_kind=PERSON,
                    worktree=worktree,
                    auto=False,
                    word=PERSON,
                )
            row = conn.execute(
                f"SELECT {self._session_columns} FROM chat_sessions WHERE session_id = ?",
                (session_id,),
            ).fetchone()
        return session_from_row(row)

    # -- binding (docs/chat.md §binding) ---------------------------------------------------

    def host_key(self, host_session: str) -> str:
        """The chat key of a host session: HMAC of its host id under this database's
        secret. Only the session's own hooks are handed its host id, so only they can
        print the key; the database keeps a hash of it, never the key."""
        with self.tx.read() as conn:
            row = conn.execute("SELECT salt FROM chat_secret WHERE id = 1").fetchone()
        if row is None:  # the migration writes it; a row deleted by hand is made again
            import secrets

            with self.tx.write() as conn:
                conn.execute(
                    "INSERT OR IGNORE INTO chat_secret (id, salt) VALUES (1, ?)",
                    (secrets.token_hex(32),),
                )
                row = conn.execute("SELECT salt FROM chat_secret WHERE id = 1").fetchone()
        digest = hmac.new(
            str(row[0]).encode(), host_session.encode("utf-8", "surrogatepass"), hashlib.sha256
        )
        return digest.hexdigest()[:KEY_HEX]

    def _bind(self, conn: sqlite3.Connection, session_id: str, key: str) -> None:
        conn.execute(
            "INSERT INTO chat_keys (session_id, key_hash) VALUES (?, ?) "
            "ON CONFLICT(session_id) DO UPDATE SET key_hash = excluded.key_hash "
            "WHERE key_hash IS NOT excluded.key_hash",
            (session_id, key_hash(key)),
        )

    def holds(self, session_id: str, key: str) -> bool:
        """Whether ``key`` is the key ``session_id`` is bound to (none bound: never)."""
        with self.tx.read() as conn:
            row = conn.execute(
                "SELECT key_hash FROM chat_keys WHERE session_id = ?", (session_id,)
            ).fetchone()
        return row is not None and hmac.compare_digest(str(row[0]), key_hash(key))

    def touch(self, session_id: str) -> None:
        with self.tx.write() as conn:
            conn.execute(
                "UPDATE chat_sessions SET last_seen = ? WHERE session_id = ?",
                (self._at(), session_id),
            )

    def set_topic(self, session_id: str, topic: str | None) -> None:
        with self.tx.write() as conn:
            conn.execute(
                "UPDATE chat_sessions SET topic = ?, last_seen = ? WHERE session_id = ?",
                (topic, self._at(), session_id),
            )

    def unregister(self, session_id: str) -> None:
        """Delete the row and leave a tombstone; its messages stay."""
        with self.tx.write() as conn:
            conn.execute("DELETE FROM chat_sessions WHERE session_id = ?", (session_id,))
            conn.execute("DELETE FROM chat_keys WHERE session_id = ?", (session_id,))
            conn.execute(
                "INSERT INTO chat_leave_tombstones (session_id, left_at) VALUES (?, ?) "
                "ON CONFLICT(session_id) DO UPDATE SET left_at = excluded.left_at",
                (session_id, self._at()),
            )

    def prune(self, *, task: str = "prune") -> bool:
        """One bounded step of the daily upkeep (docs/chat.md §retention); whether it ran.

        Deletes auto rows unseen for 7 days and the keys of rows gone, tombstones older
        than 7 days, wakes older than an hour, messages older than 30 days (read or
        not) or beyond the newest 50,000, and refused chat mail told over 7 days ago or
        untold whose sender is gone or unseen for 30 days. Every delete looks at most at
        ``PRUNE_BATCH`` rows, or (the refused mail's) at the refused rows of one partial
        index, never at the mail waiting to be sent, so a step costs a hook little;
        the once-a-day stamp is written (in the same transaction, so concurrent reminders
        share the work) only by the step that finds nothing more to delete.
        """
        with self.tx.write() as conn:
            last = conn.execute("SELECT at FROM chat_upkeep WHERE task = ?", (task,)).fetchone()
            if last is not None and str(last[0]) > self._at(PRUNE_EVERY):
                return False
            deleted = 0
            for sql, args in (
                (
                    "DELETE FROM chat_sessions WHERE session_id IN (SELECT session_id "
                    "FROM chat_sessions WHERE auto = 1 AND last_seen < ? LIMIT ?)",
                    (self._at(AUTO_ROW_KEPT), PRUNE_BATCH),
                ),
                (
                    "DELETE FROM chat_keys WHERE session_id IN (SELECT k.session_id "
                    "FROM chat_keys k LEFT JOIN chat_sessions s ON s.session_id = k.session_id "
                    "WHERE s.session_id IS NULL LIMIT ?)",
                    (PRUNE_BATCH,),
                ),
                (
                    "DELETE FROM chat_leave_tombstones WHERE session_id IN (SELECT session_id "
                    "FROM chat_leave_tombstones WHERE left_at < ? LIMIT ?)",
                    (self._at(TOMBSTONE_KEPT), PRUNE_BATCH),
                ),
                (
                    "DELETE FROM chat_wakes WHERE rowid IN (SELECT rowid FROM chat_wakes "
                    "WHERE at < ? LIMIT ?)",
                    (self._at(WAKE_WINDOW), PRUNE_BATCH),
                ),
                # The oldest rows by id only: ids follow time, so the batch is where old
                # messages are, and the step never scans the table.
                (
                    "DELETE FROM chat_messages WHERE id IN (SELECT id FROM chat_messages "
                    "ORDER BY id LIMIT ?) AND created_at < ?",
                    (PRUNE_BATCH, self._at(MESSAGE_KEPT)),
                ),
                (
                    "DELETE FROM chat_messages WHERE id IN (SELECT id FROM chat_messages "
                    "WHERE id <= (SELECT id FROM chat_messages ORDER BY id DESC "
                    "LIMIT 1 OFFSET ?) ORDER BY id LIMIT ?)",
                    (MESSAGES_KEPT, PRUNE_BATCH),
                ),
                *self._refused_prune(conn),
            ):
                deleted = max(deleted, conn.execute(sql, args).rowcount)
            if deleted < PRUNE_BATCH:
                conn.execute(
                    "INSERT INTO chat_upkeep (task, at) VALUES (?, ?) "
                    "ON CONFLICT(task) DO UPDATE SET at = excluded.at",
                    (task, self._at()),
                )
        return True

    def _refused_prune(self, conn: sqlite3.Connection) -> list[tuple[str, tuple[object, ...]]]:
        """The prune's deletes of refused chat mail (m027; none in a file without it):
        told over a week ago, or never told and its sender gone or unseen for a month
        (nobody is left to tell). Not by the mail's age: mail waits in the outbox as long
        as the hub is unreachable, and a refusal of old mail is told like any other.

        One delete per kind, each reading its partial index (m029's of the mail told,
        m027's of the refusals untold), never the outbox: mail waits there, bodies and
        all, while the hub is unreachable, and one delete of both kinds read every row
        (48–109 ms a step at 100k waiting mails). Each condition is stated as its index's."""
        if CHAT_REFUSED in schema_lag(conn).migrations:
            return []
        return [
            (
                "DELETE FROM chat_outbox WHERE id IN (SELECT id FROM chat_outbox "
                "WHERE told_at IS NOT NULL AND told_at < ? AND refused IS NOT NULL LIMIT ?)",
                (self._at(REFUSAL_TOLD_KEPT), PRUNE_BATCH),
            ),
            (
                "DELETE FROM chat_outbox WHERE id IN (SELECT o.id FROM chat_outbox o "
                "LEFT JOIN chat_sessions s ON s.session_id = o.from_session "
                "WHERE o.refused IS NOT NULL AND o.told_at IS NULL "
                "AND (s.session_id IS NULL OR s.last_seen < ?) LIMIT ?)",
                (self._at(REFUSAL_KEPT), PRUNE_BATCH),
            ),
        ]

    # -- messages ------------------------------------------------------------------------

    def send(self, from_session: str, to_session: str, parts: Sequence[str]) -> bool:
        """Store ``parts`` as consecutive messages in one transaction; False when an
        identical unread copy to the same recipient is under 10 s old (a retry)."""
        with self.tx.write() as conn:
            duplicate = all(
                conn.execute(
                    "SELECT 1 FROM chat_messages WHERE from_session = ? AND to_session = ? "
                    "AND body = ? AND read_at IS NULL AND created_at >= ? LIMIT 1",
                    (from_session, to_session, part, self._at(DUPLICATE_WINDOW)),
                ).fetchone()
                is not None
                for part in parts
            )
            if duplicate:
                conn.execute(
                    "UPDATE chat_sessions SET last_seen = ? WHERE session_id = ?",
                    (self._at(), from_session),
                )
                return False
            self._insert_parts(conn, from_session, to_session, parts, broadcast=False)
        return True

    def broadcast(
        self, from_session: str, to_sessions: Sequence[str], parts: Sequence[str]
    ) -> None:
        with self.tx.write() as conn:
            for to_session in to_sessions:
                self._insert_parts(conn, from_session, to_session, parts, broadcast=True)

    def _insert_parts(
        self,
        conn: sqlite3.Connection,
        from_session: str,
        to_session: str,
        parts: Sequence[str],
        *,
        broadcast: bool,
    ) -> None:
        now = self._at()
        conn.executemany(
            "INSERT INTO chat_messages (from_session, to_session, body, created_at, "
            "via_broadcast) VALUES (?, ?, ?, ?, ?)",
            [(from_session, to_session, part, now, int(broadcast)) for part in parts],
        )
        conn.execute(
            "UPDATE chat_sessions SET last_seen = ? WHERE session_id = ?", (now, from_session)
        )

    def unread_count(self, session_id: str) -> int:
        with self.tx.read() as conn:
            (count,) = conn.execute(
                "SELECT count(*) FROM chat_messages WHERE to_session = ? AND read_at IS NULL",
                (session_id,),
            ).fetchone()
        return int(count)

    def read_unread(
        self,
        session_id: str,
        take: Callable[[Sequence[ChatMessage]], int] | None = None,
        prefix: int | None = None,
        tell: Callable[[list[Refusal]], None] | None = None,
    ) -> tuple[list[ChatMessage], int]:
        """One page of the session's unread messages, oldest first, marked read, and how
        many stay unread, in one transaction; ``tell`` is handed the session's refusals
        not told yet (``_take_refusals``), stamped told in it, before ``take`` is asked.

        The oldest ``READ_BATCH`` unread messages are fetched (bodies cut to ``prefix``
        characters, ``length`` keeping the whole size; one holding NUL is cut here, not
        by SQLite, whose substr() stops at it); ``take`` says how many of them
        form the page (at least one is always taken). Only those are marked read.
        """
        cut = "m.body"
        if prefix is not None:
            cut = f"CASE WHEN {BODY_HAS_NUL} THEN m.body ELSE substr(m.body, 1, ?) END"
        columns = MESSAGE_COLUMNS.replace("m.body,", f"{cut},", 1)
        args: tuple[object, ...] = (session_id, READ_BATCH)
        if prefix is not None:
            args = (prefix, *args)
        with self.tx.write() as conn:
            if tell is not None:
                tell(self._take_refusals(conn, session_id))
            rows = conn.execute(
                f"SELECT {columns} FROM {MESSAGE_FROM} "
                "WHERE m.to_session = ? AND m.read_at IS NULL ORDER BY m.id LIMIT ?",
                args,
            ).fetchall()
            found = [message_from_row(row) for row in rows]
            if prefix is not None:  # a body holding NUL came whole
                found = [message._replace(body=message.body[:prefix]) for message in found]
            page = found[: max(1, take(found))] if take is not None and found else found
            now = self._at()
            conn.executemany(
                "UPDATE chat_messages SET read_at = ? WHERE id = ? AND read_at IS NULL",
                [(now, message.id) for message in page],
            )
            conn.execute(
                "UPDATE chat_sessions SET last_seen = ? WHERE session_id = ?", (now, session_id)
            )
            (left,) = conn.execute(
                "SELECT count(*) FROM chat_messages WHERE to_session = ? AND read_at IS NULL",
                (session_id,),
            ).fetchone()
        return page, int(left)

    def message(self, message_id: int) -> ChatMessage | None:
        with self.tx.read() as conn:
            row = conn.execute(
                f"SELECT {MESSAGE_COLUMNS} FROM {MESSAGE_FROM} WHERE m.id = ?", (message_id,)
            ).fetchone()
        return None if row is None else message_from_row(row)

    def mark_read(self, message_id: int) -> None:
        with self.tx.write() as conn:
            conn.execute(
                "UPDATE chat_messages SET read_at = ? WHERE id = ? AND read_at IS NULL",
                (self._at(), message_id),
            )

    # -- delivery ------------------------------------------------------------------------

    def wake_telling(self, session_id: str) -> tuple[list[Refusal], tuple[int, list[str]] | None]:
        """The session's refusals not told yet, stamped told (as ``_take_refusals`` takes
        them), and a wake if one is due (docs/chat.md §6), else None: the number of unread
        messages and their senders' names (``unknown`` for departed ones), in order of
        each sender's first unread message. One transaction: the chat-notify hook prints
        both, or neither is spent.

        Due: unread messages not delivered in the last 15 minutes, and fewer than 6 wakes
        in the last hour. Stamps those messages' ``delivered_at`` and records the wake.
        """
        with self.tx.write() as conn:
            refused: list[Refusal] = []
            woken = self._wake(conn, session_id, refused)
        return refused, woken

    def _wake(
        self, conn: sqlite3.Connection, session_id: str, refused: list[Refusal]
    ) -> tuple[int, list[str]] | None:
        """``wake_telling`` in ``conn``'s transaction; refusals are taken into ``refused``.

        The unread mail and the refusals are read by one statement: the hook runs it at
        every Stop, and telling refusals costs that no statement more than before m027."""
        now = self._at()
        conn.execute(
            "UPDATE chat_sessions SET last_seen = ? WHERE session_id = ?", (now, session_id)
        )
        unread = (
            "SELECT 0, m.id, s.name, m.delivered_at, NULL, NULL FROM chat_messages m "
            "LEFT JOIN chat_sessions s ON s.session_id = m.from_session "
            "WHERE m.to_session = ? AND m.read_at IS NULL"
        )
        args: tuple[object, ...] = (session_id,)
        if CHAT_REFUSED not in schema_lag(conn).migrations:
            unread += f" UNION ALL SELECT 1, * FROM ({UNTOLD})"
            args = (session_id, session_id, REFUSALS_TOLD)
        found = conn.execute(f"{unread} ORDER BY 1, 2", args).fetchall()
        rows = [row[1:4] for row in found if row[0] == 0]
        refused.extend(self._stamp_told(conn, [row[1:] for row in found if row[0] == 1]))
        renudge = self._at(RENUDGE_WINDOW)
        due = [row[0] for row in rows if row[2] is None or str(row[2]) < renudge]
        if not due:
            return None
        (wakes,) = conn.execute(
            "SELECT count(*) FROM chat_wakes WHERE session_id = ? AND at >= ?",
            (session_id, self._at(WAKE_WINDOW)),
        ).fetchone()
        if wakes >= WAKES_PER_WINDOW:
            return None
        conn.executemany(
            "UPDATE chat_messages SET delivered_at = ? WHERE id = ?",
            [(now, message_id) for message_id in due],
        )
        conn.execute("INSERT INTO chat_wakes (session_id, at) VALUES (?, ?)", (session_id, now))
        senders = [str(row[1]) if row[1] is not None else "unknown" for row in rows]
        return len(rows), list(dict.fromkeys(senders))

    def _take_refusals(self, conn: sqlite3.Connection, session_id: str) -> list[Refusal]:
        """The session's messages a team's hub refused that it was not told of yet, oldest
        first, at most ``REFUSALS_TOLD``, stamped told in ``conn``'s transaction: the one
        that produces the output carrying the notice, so that each is told once, to its
        sender alone, and none is lost to a failure. None in a file without m027 (its
        outbox keeps no refusal); a session with none to tell costs one indexed read."""
        if CHAT_REFUSED in schema_lag(conn).migrations:
            return []
        rows = conn.execute(UNTOLD, (session_id, REFUSALS_TOLD)).fetchall()
        return self._stamp_told(conn, rows)

    def _stamp_told(self, conn: sqlite3.Connection, rows: Sequence[Sequence[Any]]) -> list[Refusal]:
        """Rows of ``UNTOLD`` stamped told, as Refusals."""
        if not rows:  # nothing prepared: a file without m027 has no told_at
            return []
        conn.executemany(
            "UPDATE chat_outbox SET told_at = ? WHERE id = ?",
            [(self._at(), row[0]) for row in rows],
        )
        return [Refusal(int(row[1]), row[2], int(row[3]), str(row[4])) for row in rows]
