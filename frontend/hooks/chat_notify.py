"""``thatch chat-notify``: the post-turn hook that tells a session it has mail (docs/chat.md §6).

Claude Code's ``Stop`` hook and Cursor's ``stop`` hook run it after every turn. When a wake
is due it prints a pointer (who wrote, which tool reads it), never a body, after a line
per message of the session's that a team's hub refused (each told once): Claude
``{"hookSpecificOutput": {"hookEventName": "Stop", "additionalContext": …}}``, Cursor
``{"followup_message": …}``, the opencode plugin ``{"decision": "block", "reason": …}``. Otherwise
Claude gets nothing and Cursor ``{}``, also for empty, malformed or huge stdin. It always
exits 0, and stays off the database unless the payload names a session.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from thatch.frontend.hooks import hookio
from thatch.frontend.hooks.hookio import hook_options, print_line, report_failure

if TYPE_CHECKING:
    from thatch.frontend.store.chat_rows import Refusal

__all__ = ["pointer", "run_chat_notify"]

COMMAND = "chat-notify"


def pointer(unread: int, senders: list[str], name: str, key: str, host: str = "claude") -> str:
    """The wake: who wrote and the call that reads it (with this session's own key), and
    for a host that may defer the chat tool, the hint that loads exactly it."""
    from thatch.frontend.hooks.chat_anchor import credential
    from thatch.frontend.hooks.nudges import host_names
    from thatch.frontend.untrusted import quoted, token

    who = ", ".join(token(sender) for sender in senders)
    text = (
        f"{hookio.CHAT_WAKE_START} {unread} unread chat message(s) "
        f"from {who}. Read them with chat "
        f'{{"action": "read", "as": {quoted(credential(name, key))}}}. '
        "Reply only if it matters to your current work; otherwise carry on."
    )
    load = host_names(host).load("chat")  # Claude Code may defer it
    return f"{text} {load}" if load else text


def told(refused: list[Refusal]) -> list[str]:
    """A line per refused message, in the wake's own opening (the prompt hook knows it)."""
    if not refused:
        return []
    from thatch.frontend.tools.chat_refusals import refusal_line  # only then: 4 ms of imports

    return [refusal_line(refusal, hookio.CHAT_WAKE_START) for refusal in refused]


def notify_text(payload: Mapping[str, Any], env: Mapping[str, str], host: str) -> str | None:
    """For the payload's session: a line per message of its that a team's hub refused,
    not told yet, then the pointer when a wake is due; None when neither."""
    from thatch.frontend.hooks.chat_anchor import open_chat
    from thatch.frontend.switches import is_on

    session = hookio.host_session(payload, host)
    if not session or not is_on(env, "chat"):  # THATCH_CHAT=off (docs/tools.md §switches)
        return None
    from thatch.frontend.store.chat_store import host_session_key

    key = host_session_key(session)
    chat = open_chat(env)
    try:
        me = chat.get(key)
        if me is None:
            return None
        if host == "cursor" and payload.get("status") != "completed":
            chat.touch(key)  # every run is a sign of life, woken or not
            return None
        if host != "cursor" and payload.get("stop_hook_active") is True:
            chat.touch(key)  # Claude's own loop guard: this turn already continued for a hook
            return None
        secret = chat.host_key(session)  # before the wake: a wake taken is a wake spent
        # Refusals are told once (the sender waits for no reply), stamped in the wake's
        # transaction: a wake that fails prints nothing and spends nothing.
        refused, woken = chat.wake_telling(key)  # refreshes last_seen too
        lines = told(refused)
        if woken is not None:
            unread, senders = woken
            lines.append(pointer(unread, senders, me.name, secret, host))
        return "\n".join(lines) or None
    finally:
        chat.conn.close()


def output(text: str | None, host: str) -> str:
    if host == "cursor":
        return json.dumps({"followup_message": text} if text else {}, ensure_ascii=False)
    if not text:
        return ""
    if host == "claude":
        # additionalContext, not {"decision": "block"}: Claude Code 2.1.332 hands a block's
        # reason to the model twice ("Stop hook feedback" and a "Stop hook blocking
        # error"); the context reaches it once and continues the turn on 2.1.197 too.
        context = {"hookEventName": "Stop", "additionalContext": text}
        return json.dumps({"hookSpecificOutput": context}, ensure_ascii=False)
    # The opencode plugin reads this form and sends the reason as a new message.
    return json.dumps({"decision": "block", "reason": text}, ensure_ascii=False)


def run_chat_notify(args: list[str]) -> None:
    options = hook_options(COMMAND, args)
    host = "claude"
    text = None
    try:
        host = hookio.resolve_host(options["host"], os.environ, COMMAND)
        payload = hookio.read_payload(COMMAND)
        text = notify_text(payload, os.environ, host)
    except sqlite3.OperationalError as error:
        if "no such table" not in str(error):  # an older file: nobody has mail yet
            report_failure(COMMAND, error)
    except Exception as error:  # a hook must never fail its host's turn
        report_failure(COMMAND, error)
    line = output(text, host)
    if not line:
        return
    print_line(line)
