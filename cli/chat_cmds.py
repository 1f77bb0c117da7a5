"""``thatch chat list|tail|send`` and the ``chat-notify`` hook's click face (docs/cli.md §chat).

The CLI reads the chat tables directly (no embedder): ``list`` shows who is here, ``tail``
follows messages and reads as JSON lines, ``send`` lets a person drop a note into a
running session under a person identity (``person-<NNNNN>``).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import click

from thatch.cli.errors import FixableError, translate_errors
from thatch.cli.groups import SuggestingGroup
from thatch.cli.hook_cmds import HOOK_SETTINGS, HookCommand
from thatch.cli.store_access import emit_json
from thatch.common.environment import default_db_path, project_dir_from_env
from thatch.frontend.store.chat_store import ChatMessage, ChatSession, ChatStore, TailRead
from thatch.frontend.untrusted import inline

__all__ = [
    "FileSeen",
    "TailFilter",
    "backlog",
    "chat",
    "chat_notify",
    "follow",
    "poll",
    "read_event",
    "sent_event",
    "watched",
]

POLL_SECONDS = 2.0
BACKLOG = 20


def open_chat() -> ChatStore:
    from thatch.frontend.store import db
    from thatch.frontend.store.memory_store import Store
    from thatch.frontend.timefmt import utc_now

    path = default_db_path(os.environ)
    Store.open(path, clock=utc_now).close()  # the schema, chat tables included
    return ChatStore(db.connect(path), utc_now)


def fail(message: str, fix: str | None = None) -> NoReturn:
    """``Error: <message>`` and its ``Fix:`` line on stderr, exit 1 (docs/cli.md)."""
    raise FixableError(message, fix)


@click.group("chat", cls=SuggestingGroup)
def chat() -> None:
    """Messages between the agent sessions on this machine."""


# -- list --------------------------------------------------------------------------------


def session_row(session: ChatSession, active: bool) -> dict[str, Any]:
    return {
        "name": session.name,
        "status": "active" if active else "stale",
        "host": session.host_kind,
        "project": session.project,
        "last_seen": session.last_seen,
        "topic": session.topic,
        "session_id": session.session_id,
        "worktree": session.worktree,
        "registered_at": session.registered_at,
        "auto": session.auto,
    }


@chat.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of rows.")
def list_cmd(as_json: bool) -> None:
    """Chat sessions: active first, then by name."""
    with translate_errors():
        store = open_chat()
        try:
            now = store.clock()
            sessions = sorted(
                store.sessions(), key=lambda s: (not s.is_active(now), s.name.lower())
            )
            rows = [session_row(s, s.is_active(now)) for s in sessions]
        finally:
            store.conn.close()
    if as_json:
        emit_json(rows)
        return
    header = ("NAME", "STATUS", "HOST", "PROJECT", "LAST SEEN", "TOPIC")
    cells = [
        [inline(str(row[key] or "")) for key in ("name", "status", "host", "project", "last_seen")]
        + [inline(row["topic"] or "")]
        for row in rows
    ]
    widths = [max([len(h), *(len(c[i]) for c in cells)]) for i, h in enumerate(header)]
    tty = sys.stdout.isatty()

    def line(values: list[str], status: str | None = None) -> str:
        text = "  ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip()
        if tty and status == "active":
            return click.style(text, fg="green")
        if tty and status == "stale":
            return click.style(text, dim=True)
        return text

    click.echo(line(list(header)))
    for row, values in zip(rows, cells, strict=True):
        click.echo(line(values, row["status"]))


# -- tail --------------------------------------------------------------------------------


@dataclass
class TailFilter:
    from_name: str | None
    to_name: str | None
    since: str | None
    until: str | None
    patterns: list[re.Pattern[str]]

    def message(self, message: ChatMessage, names: dict[str, str]) -> bool:
        between = self.ends(names)
        return between(message.from_session, message.to_session) and self.body(message.body)

    def ends(self, names: dict[str, str]) -> Callable[[str, str], bool]:
        """Whether a message between these session ids passes --from and --to."""

        def between(from_session: str, to_session: str) -> bool:
            sender = names.get(from_session, "unknown")
            recipient = names.get(to_session, "unknown")
            if self.from_name and sender.lower() != self.from_name.lower():
                return False
            return not (self.to_name and recipient.lower() != self.to_name.lower())

        return between

    def body(self, body: str) -> bool:
        return all(pattern.search(body) for pattern in self.patterns)

    def body_check(self) -> Callable[[str], bool] | None:
        """What a body must pass; None when any does, and the store then reads no body."""
        return self.body if self.patterns else None

    def at(self, at: str) -> bool:
        if self.since and at < self.since:
            return False
        return not (self.until and at > self.until)

    def sessions(self, name: str | None, names: dict[str, str]) -> list[str] | None:
        """The session ids ``name`` can stand for, for the store to read no other: None
        when that is any (no name, or ``unknown``: the sessions that have left)."""
        if not name or name.lower() == "unknown":
            return None
        return [sid for sid, known in names.items() if known.lower() == name.lower()]


def sent_event(message: ChatMessage, names: dict[str, str]) -> dict[str, Any]:
    return {
        "event": "sent",
        "id": message.id,
        "at": message.created_at,
        "from": names.get(message.from_session, message.from_name or "unknown"),
        "to": names.get(message.to_session, "unknown"),
        "broadcast": message.via_broadcast,
        "body": message.body,
    }


def read_event(message: ChatMessage | TailRead, names: dict[str, str]) -> dict[str, Any]:
    return {
        "event": "read",
        "id": message.id,
        "at": message.read_at,
        "by": names.get(message.to_session, "unknown"),
    }


def emit(event: dict[str, Any]) -> None:
    # ASCII JSON: a body's control or bidi characters cannot reach the terminal raw.
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def _event_order(item: tuple[str, int, int, dict[str, Any]]) -> tuple[str, int, int]:
    # Timestamps tie within a millisecond: at one instant a send goes before any read, so a
    # message is never shown read before it was sent (the store orders a backlog alike).
    at, message_id, kind, _ = item
    return at, kind, message_id


def backlog(
    store: ChatStore, rule: TailFilter, limit: int | None
) -> tuple[list[dict[str, Any]], int]:
    """The last ``limit`` events and the highest message id (where following starts).

    The store walks back from the newest event and reads only the bodies it prints and
    those --match checks: a 20-event backlog used to read every body in the table to keep
    the last 20."""
    names = store.names()
    events = store.last_events(
        limit,
        rule.ends(names),
        rule.body_check(),
        since=rule.since,
        until=rule.until,
        senders=rule.sessions(rule.from_name, names),
        recipients=rule.sessions(rule.to_name, names),
    )
    shown = [
        sent_event(event.message, names)
        if isinstance(event.message, ChatMessage)
        else read_event(event.message, names)
        for event in events
    ]
    return shown, store.last_id()


def watched(store: ChatStore, rule: TailFilter) -> set[int]:
    """The unread messages the tail shows, whose reading following reports (their ids:
    the bodies are read only when --match needs them)."""
    names = store.names()
    return store.unread_kept(
        rule.ends(names),
        rule.body_check(),
        senders=rule.sessions(rule.from_name, names),
        recipients=rule.sessions(rule.to_name, names),
    )


@dataclass
class FileSeen:
    """The file's version (``ChatStore.file_version``) when the tail last read it."""

    version: int | None = None


def poll(
    store: ChatStore,
    rule: TailFilter,
    last: int,
    watch: set[int],
    seen: FileSeen | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """The events since the last poll, oldest first, and the new highest message id: the
    messages after ``last`` and the reads of those in ``watch`` (which it updates).

    Only the bodies of the messages shown are read, and those --match needs: a read
    event shows none, so the reads of 50,000 watched messages read no body. With
    ``seen`` (updated), a file no other connection wrote since the last read is not
    read: nothing can have been sent or read. Asking which watched messages were read
    reads them all (19-25 ms a poll at 30,000), so a quiet chat's polls no longer do."""
    with store.snapshot():  # the version and the reads name the same state of the file
        version = None if seen is None else store.file_version()
        if seen is not None and version == seen.version:
            return [], last
        found = _events_since(store, rule, last, watch)
    if seen is not None:
        seen.version = version
    return found


def _events_since(
    store: ChatStore, rule: TailFilter, last: int, watch: set[int]
) -> tuple[list[dict[str, Any]], int]:
    names = store.names()
    events: list[tuple[str, int, int, dict[str, Any]]] = []
    messages, last = store.sent_after(last, rule.ends(names), rule.body_check())
    for message in messages:
        events.append((message.created_at, message.id, 0, sent_event(message, names)))
        if message.read_at:
            events.append((message.read_at, message.id, 1, read_event(message, names)))
        elif message.read_at is None:  # '' is read at no time to show: never reported
            watch.add(message.id)
    for read in store.read_among(sorted(watch)):
        watch.discard(read.id)
        if read.read_at:  # '': as above (the backlog shows no read event for it either)
            events.append((read.read_at, read.id, 1, read_event(read, names)))
    events.sort(key=_event_order)
    return [event for at, _, _, event in events if rule.at(at)], last


def follow(
    store: ChatStore,
    rule: TailFilter,
    last: int,
    watch: set[int],
    interval: float,
    seen: FileSeen | None = None,
) -> Iterator[dict[str, Any]]:
    while True:
        time.sleep(interval)
        events, last = poll(store, rule, last, watch, seen)
        yield from events


def parse_limit(_ctx: click.Context, _param: click.Parameter, value: str) -> int | None:
    """``--limit``: a count ≥ 0 or ``all`` (None); click names the option when refusing."""
    if value == "all":
        return None
    try:
        number = int(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a number or all") from None
    if number < 0:
        raise click.BadParameter(f"{number} is not a number ≥ 0 or all")
    return number


def iso_time(text: str | None, option: str) -> str | None:
    """``text`` as the store's timestamp, for comparing with events' times: an ISO date or
    time, with an offset or in UTC. Events' times compare as text, so a time in another
    form (``yesterday``, a local offset, a space for the ``T``) matched wrongly in silence."""
    if text is None:
        return None
    from datetime import UTC, datetime

    from thatch.frontend.timefmt import format_timestamp

    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not an ISO date or time (2026-12-05, 2026-12-05T16:30, "
            "2026-12-05 16:30+01:00; without an offset, UTC)",
            param_hint=option,
        ) from None
    return format_timestamp(moment if moment.tzinfo else moment.replace(tzinfo=UTC))


@chat.command("tail")
@click.option("--once", is_flag=True, help="Print the backlog and exit.")
@click.option(
    "--limit",
    default=str(BACKLOG),
    show_default=True,
    callback=parse_limit,
    help="Backlog events, or all.",
)
@click.option("--from", "from_name", default=None, help="Only messages from this name.")
@click.option("--to", "to_name", default=None, help="Only messages to this name.")
@click.option("--since", default=None, help="Only events at or after this time (UTC ISO).")
@click.option("--until", default=None, help="Only events at or before this time (UTC ISO).")
@click.option("--match", "patterns", multiple=True, help="Regex the body must match (repeat).")
def tail(
    once: bool,
    limit: int | None,
    from_name: str | None,
    to_name: str | None,
    since: str | None,
    until: str | None,
    patterns: tuple[str, ...],
) -> None:
    """Follow chat messages and reads as JSON lines, oldest first; Ctrl-C stops."""
    compiled: list[re.Pattern[str]] = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern))
        except re.error as error:
            raise click.BadParameter(f"{pattern!r}: {error}", param_hint="--match") from None
    rule = TailFilter(
        from_name, to_name, iso_time(since, "--since"), iso_time(until, "--until"), compiled
    )
    with translate_errors():
        _tail(open_chat(), rule, limit, once)


def _tail(store: ChatStore, rule: TailFilter, count: int | None, once: bool) -> None:
    try:
        # One snapshot: a message sent or read meanwhile is followed, neither lost nor shown twice.
        with store.snapshot():
            seen = FileSeen(store.file_version())
            shown, last = backlog(store, rule, count)
            watch = set() if once else watched(store, rule)
        for event in shown:
            emit(event)
        if once:
            return
        for event in follow(store, rule, last, watch, POLL_SECONDS, seen):
            emit(event)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        # The reader went away (| head): nothing more to say, and nothing to flush.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    finally:
        store.conn.close()


# -- send --------------------------------------------------------------------------------


@chat.command("send")
@click.argument("to")
@click.argument("body")
def send(to: str, body: str) -> None:
    """Send BODY to the session named TO, as yourself (a person, not an agent)."""
    from thatch.frontend.tools.chat_tools import PersonSendRefused, person_send

    directory = project_dir_from_env(os.environ) or Path.cwd()
    with translate_errors():
        store = open_chat()
        try:
            sent = person_send(store, to, body, env=os.environ, project_dir=str(directory))
        except PersonSendRefused as refused:
            fail(str(refused), refused.fix)
        finally:
            store.conn.close()
    if sent.duplicate:
        click.echo(f"[sent] → {sent.recipient} (duplicate suppressed)")
        return
    suffix = f" (SENT AS {sent.parts} PARTS)" if sent.parts > 1 else ""
    click.echo(f"[sent] → {sent.recipient}{suffix} as {sent.sender}")


# -- the hook ----------------------------------------------------------------------------


@click.command("chat-notify", cls=HookCommand, context_settings=HOOK_SETTINGS)
@click.option("--host", default=None, help="claude (Stop hook) or cursor (stop hook).")
def chat_notify(host: str | None) -> None:
    """Post-turn hook: point the session at its unread chat messages (never a body)."""
    from thatch.frontend.hooks.chat_notify import run_chat_notify

    run_chat_notify(["--host", host] if host else [])
