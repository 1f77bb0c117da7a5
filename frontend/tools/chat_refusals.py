"""The notice a session reads when a team's hub refused a message it sent (docs/chat.md
§across-machines): thatch's own words, one line, in the chat tool's ``read`` and the
chat-notify hook, told once.

Light on purpose (the chat-notify hook imports it on its path): no store, no numpy.
"""

from __future__ import annotations

from thatch.frontend.store.chat_rows import Refusal
from thatch.frontend.untrusted import quoted, token

__all__ = ["REASON_SHOWN", "refusal_line"]

REASON_SHOWN = 120  # characters of the hub's reason shown: the notice stays one short line


def refusal_line(refusal: Refusal, start: str = "[thatch]") -> str:
    """One line saying the message was not delivered, to whom and why. The recipient's
    name is a ``token`` and the hub's reason a JSON literal, so neither can end the line,
    open another, or pass for thatch's words; the body is never shown."""
    to = token(refusal.to_name) if refusal.to_name else f"team peer #{refusal.to_peer}"
    reason = quoted(refusal.reason[:REASON_SHOWN])
    return (
        f"{start} Not delivered: your chat message #{refusal.message_id} to {to} was "
        f"refused by the team hub ({reason}); it will not be retried."
    )
