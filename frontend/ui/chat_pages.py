"""The Chat page of ``thatch ui``: the messages, sending one, and the live stream's events."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from thatch.frontend.store import db
from thatch.frontend.store.chat_store import ChatMessage
from thatch.frontend.store.operations import ChatOperations
from thatch.frontend.tools.chat_tools import PersonSendRefused, person_send, person_session_id
from thatch.frontend.ui.forms import Form
from thatch.frontend.ui.html import (
    attr,
    hidden,
    link,
    stored,
    table,
    text,
)
from thatch.frontend.ui.page_base import (
    PageBase,
    Problem,
    respond,
)
from thatch.frontend.untrusted import body, inline

__all__ = ["ChatPages", "chat_events"]

CHAT_SHOWN = 200
CHAT_REFRESH = 5
CHAT_SCRIPT = "/static/chat.js"


class ChatPages(PageBase):
    # -- Chat --------------------------------------------------------------------------

    def chat(self, request: Request, form: None) -> Response:
        return self._safely(lambda: self._chat(request))

    def _chat(self, request: Request) -> Response:
        chat = self.tools.chat.store
        now = self.store.clock()
        sessions = sorted(chat.sessions(), key=lambda s: s.last_seen, reverse=True)
        rows = [
            [
                text(s.name),
                "active" if s.is_active(now) else '<span class="muted">stale</span>',
                text(s.host_kind),
                text(s.project or "—"),
                text(s.topic or ""),
                text(s.last_seen),
            ]
            for s in sessions
        ]
        messages = chat.messages_after(0, CHAT_SHOWN)
        names = chat.names()
        items = []
        for message in reversed(messages):
            sender = message.from_name or "unknown"
            receiver = names.get(message.to_session, "unknown")
            state = "unread" if message.read_at is None else "read"
            items.append(
                f'<div class="chat-message"><p><b>#{message.id}</b> {text(sender)} → '
                f'{text(receiver)} <span class="muted">{self._moment(message.created_at)} · {state}'
                f"{' · broadcast' if message.via_broadcast else ''}</span></p>"
                + stored(message.body)
                + "</div>"
            )
        newest = messages[-1].id if messages else 0
        me = person_session_id()
        targets = "".join(
            f'<option value="{attr(s.name)}"'
            f"{' selected' if s.name == request.query_params.get('to') else ''}>"
            f"{text(s.name)}</option>"
            for s in sessions
            if s.session_id != me
        )
        reply = (
            f'<form method="post" action="/chat/send">{hidden({"csrf": self.csrf})}'
            f'Send as yourself (a person, not an agent) to <select name="to">{targets}</select>'
            '<textarea name="body" required></textarea><button>Send</button></form>'
            if targets
            else ""
        )
        content = [
            self._done_note(request.query_params),
            reply,
            "<h2>Sessions</h2>",
            table(["name", "state", "host", "project", "topic", "last seen"], rows)
            if rows
            else "<p>No chat sessions.</p>",
            f"<h2>Messages (newest first, last {CHAT_SHOWN})</h2>",
            # The script (static/chat.js, when JavaScript runs) adds what arrives after
            # ``data-after`` at the top of this list.
            '<p id="chat-live" class="muted"></p>',
            f'<div id="chat-messages" data-after="{newest}">',
            "".join(items) or '<p id="chat-empty">No messages.</p>',
            "</div>",
        ]
        follow = request.query_params.get("follow") == "1"
        if follow:
            content.insert(
                0,
                f"<p>Following: this page reloads every {CHAT_REFRESH} s. "
                f"{link('/chat', 'Stop following')}</p>",
            )
        else:
            content.insert(
                0,
                f"<p>{link('/chat', 'Follow new messages', {'follow': 1})} "
                f"(reloads every {CHAT_REFRESH} s; with JavaScript, new messages appear "
                "on their own).</p>",
            )
            content.append(f'<script src="{CHAT_SCRIPT}" defer></script>')
        return respond("Chat", "".join(content), refresh=CHAT_REFRESH if follow else None)

    def chat_send(self, request: Request, form: Form) -> Response:
        """A person's message to a session, as ``thatch chat send`` sends it."""

        def run() -> Response:
            ctx = self.tools.ctx
            try:
                sent = person_send(
                    self.tools.chat.store,
                    form.text("to"),
                    form.text("body"),
                    env=ctx.env,
                    project_dir=str(ctx.project_dir),
                )
            except PersonSendRefused as refused:
                raise Problem(400, "Refused", f"{refused}. {refused.fix}.") from None
            if sent.duplicate:
                return self._back_to("/chat", {}, f"already sent to {sent.recipient} a moment ago")
            return self._back_to("/chat", {}, f"sent to {sent.recipient} as {sent.sender}")

        return self._safely(run)

    def chat_stream_events(self, after: int, limit: int) -> list[dict[str, object]]:
        """The messages after id ``after`` (oldest first, at most ``limit``) as the live
        stream sends them; read leniently like every page."""
        chat = self.tools.chat.store
        return db.read_leniently(
            self.store.conn, lambda: chat_events(chat, chat.messages_after(after, limit))
        )


def chat_events(chat: ChatOperations, messages: list[ChatMessage]) -> list[dict[str, object]]:
    """Messages as plain text fields (invisible characters shown as the CLI shows them, no
    HTML escaping: the page escapes them, the script inserts them as text)."""
    names = chat.names() if messages else {}
    return [
        {
            "id": message.id,
            "from": inline(message.from_name or "unknown"),
            "to": inline(names.get(message.to_session, "unknown")),
            "created_at": inline(message.created_at),
            "state": "unread" if message.read_at is None else "read",
            "broadcast": bool(message.via_broadcast),
            "body": body(message.body),
        }
        for message in messages
    ]
