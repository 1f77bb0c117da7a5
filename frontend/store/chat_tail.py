"""The chat's tail (docs/chat.md §cli): every message after a point, for ``thatch chat
tail`` and the ui, without marking anything read.

A mixin so that ``ChatStore`` keeps one public surface while each module stays small; it
relies only on ``tx`` of the class it is mixed into (chat_store.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from thatch.frontend.store.chat_rows import (
    MESSAGE_COLUMNS,
    MESSAGE_FROM,
    ChatMessage,
    message_from_row,
)
from thatch.frontend.store.transactions import Transactions

__all__ = ["ChatTail"]


class ChatTail:
    """Reads of the whole chat: messages after an id, unread ids, names."""

    tx: Transactions

    def messages_after(self, after_id: int, limit: int | None = None) -> list[ChatMessage]:
        """Messages with id > ``after_id``, oldest first; with ``limit`` the last ``limit``."""
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

    def unread_ids(self) -> set[int]:
        with self.tx.read() as conn:
            return {
                int(row[0])
                for row in conn.execute("SELECT id FROM chat_messages WHERE read_at IS NULL")
            }

    def read_among(self, ids: Sequence[int]) -> list[ChatMessage]:
        """Those of ``ids`` that are read now, in read order (a tail's read events)."""
        found: list[ChatMessage] = []
        with self.tx.read() as conn:
            for start in range(0, len(ids), 500):
                chunk = list(ids[start : start + 500])
                marks = ", ".join("?" * len(chunk))
                found.extend(
                    message_from_row(row)
                    for row in conn.execute(
                        f"SELECT {MESSAGE_COLUMNS} FROM {MESSAGE_FROM} "
                        f"WHERE m.read_at IS NOT NULL AND m.id IN ({marks})",
                        chunk,
                    )
                )
        return sorted(found, key=lambda message: (message.read_at or "", message.id))

    def names(self) -> dict[str, str]:
        """session id → name, for showing message endpoints."""
        with self.tx.read() as conn:
            return {
                str(sid): str(name)
                for sid, name in conn.execute("SELECT session_id, name FROM chat_sessions")
            }
