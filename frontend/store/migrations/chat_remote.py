"""Chat across machines, the machine's side (m018; docs/team.md §chat-across-machines).

Remote peers (sessions on other machines of a team, as the hub names them) are rows of
``chat_sessions`` like local ones, so every chat action works on them unchanged;
``chat_remote_peers`` says which rows they are and where they live. A message for one is
copied into ``chat_outbox`` by a trigger in the writing transaction, whoever writes it.
``chat_remote_delivered`` keeps the ids of the mail already stored here, so a mail pulled
twice (a lost ``MarkDelivered``) is stored once. m027: a mail the hub refused stays in
``chat_outbox`` with the reason, never sent again; its sender is told once, and the chat
store's daily prune deletes it a week after that, or after 30 days (or once its sender is
gone) if never told. m029: the refused mail told, by when, in an index of its own, which
that prune reads instead of the outbox.
"""

from __future__ import annotations

import sqlite3

from thatch.frontend.store.migrations.tables import table_columns

__all__ = [
    "CHAT_OUTBOX_TRIGGER",
    "CHAT_REFUSED_COLUMNS",
    "CHAT_REMOTE_TABLES",
    "m018_chat_remote",
    "m027_chat_refused",
    "m029_chat_outbox_told",
]

CHAT_REMOTE_TABLES: dict[str, str] = {
    "chat_remote_peers": "CREATE TABLE IF NOT EXISTS chat_remote_peers ("
    "session_id TEXT PRIMARY KEY, team TEXT NOT NULL, peer_id INTEGER NOT NULL, "
    "member TEXT NOT NULL, machine TEXT NOT NULL, UNIQUE (team, peer_id))",
    "chat_outbox": "CREATE TABLE IF NOT EXISTS chat_outbox ("
    "id INTEGER PRIMARY KEY AUTOINCREMENT, message_id INTEGER NOT NULL, team TEXT NOT NULL, "
    "to_peer INTEGER NOT NULL, from_session TEXT NOT NULL, body TEXT NOT NULL, "
    "via_broadcast INTEGER NOT NULL DEFAULT 0, queued_at TEXT NOT NULL)",
    "chat_remote_delivered": "CREATE TABLE IF NOT EXISTS chat_remote_delivered ("
    "team TEXT NOT NULL, mail_id INTEGER NOT NULL, message_id INTEGER, at TEXT NOT NULL, "
    "PRIMARY KEY (team, mail_id))",
}

CHAT_OUTBOX_TRIGGER = "thatch_chat_outbox"


def m018_chat_remote(conn: sqlite3.Connection) -> None:
    """The remote peers, the chat outbox with the trigger filling it, the delivered ids."""
    for ddl in CHAT_REMOTE_TABLES.values():
        conn.execute(ddl)
    conn.execute("CREATE INDEX IF NOT EXISTS thatch_chat_outbox_team ON chat_outbox (team, id)")
    conn.execute(
        "CREATE INDEX IF NOT EXISTS thatch_chat_remote_delivered_at ON chat_remote_delivered (at)"
    )
    # INSERT … SELECT: a message to a remote session is queued for that session's team,
    # in the transaction that stores it; any other message queues nothing.
    conn.execute(
        f"CREATE TRIGGER IF NOT EXISTS {CHAT_OUTBOX_TRIGGER} AFTER INSERT ON chat_messages "
        "BEGIN INSERT INTO chat_outbox (message_id, team, to_peer, from_session, body, "
        "via_broadcast, queued_at) SELECT NEW.id, r.team, r.peer_id, NEW.from_session, "
        "NEW.body, NEW.via_broadcast, NEW.created_at FROM chat_remote_peers r "
        "WHERE r.session_id = NEW.to_session; END"
    )


# m027's columns of chat_outbox: the recipient's name when the mail was queued (the hub
# refuses mail to a peer that left, whose row here is gone by then), the hub's reason
# (NULL: waiting), and when the sending session was told of it (NULL: not yet).
CHAT_REFUSED_COLUMNS = ("to_name", "refused", "told_at")


def m027_chat_refused(conn: sqlite3.Connection) -> None:
    """Refused mail is kept and its sender told once: chat_outbox gains
    ``CHAT_REFUSED_COLUMNS``, the trigger also copies the recipient's name, and a partial
    index finds a session's refusals not yet told (asked by its chat-notify hook every
    turn), another the mail still waiting (the send path walks no refused row)."""
    present = table_columns(conn, "chat_outbox")
    for column in CHAT_REFUSED_COLUMNS:
        if column not in present:
            conn.execute(f"ALTER TABLE chat_outbox ADD COLUMN {column} TEXT")
    conn.execute(f"DROP TRIGGER IF EXISTS {CHAT_OUTBOX_TRIGGER}")
    conn.execute(
        f"CREATE TRIGGER {CHAT_OUTBOX_TRIGGER} AFTER INSERT ON chat_messages "
        "BEGIN INSERT INTO chat_outbox (message_id, team, to_peer, from_session, body, "
        "via_broadcast, queued_at, to_name) SELECT NEW.id, r.team, r.peer_id, "
        "NEW.from_session, NEW.body, NEW.via_broadcast, NEW.created_at, s.name "
        "FROM chat_remote_peers r LEFT JOIN chat_sessions s ON s.session_id = r.session_id "
        "WHERE r.session_id = NEW.to_session; END"
    )
    conn.execute(
        "CREATE INDEX IF NOT EXISTS thatch_chat_outbox_untold ON chat_outbox (from_session) "
        "WHERE refused IS NOT NULL AND told_at IS NULL"
    )
    conn.execute(
        "CREATE INDEX IF NOT EXISTS thatch_chat_outbox_waiting ON chat_outbox (team, id) "
        "WHERE refused IS NULL"
    )


def m029_chat_outbox_told(conn: sqlite3.Connection) -> None:
    """A partial index of the refused mail its sender was told of, by when: the chat's
    daily prune deletes the mail told over a week ago from it. No index held those rows,
    so each step of the day's prune read the whole outbox, waiting mail and its bodies
    included (48–109 ms a step at 100k waiting mails). Building it reads the outbox once."""
    conn.execute(
        "CREATE INDEX IF NOT EXISTS thatch_chat_outbox_told ON chat_outbox (told_at) "
        "WHERE told_at IS NOT NULL"
    )
