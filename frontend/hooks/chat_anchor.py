"""Chat anchoring by the prompt hooks (docs/chat.md §2, §6): who this session is in chat.

``reminder`` and ``flush-tools`` register their host session (``auto = 1``) if it is
missing, bind it to the session's key and refresh its ``last_seen`` (``flush-tools`` at
most once a minute: a session seen since, in the same project and worktree, is only
read); ``reminder`` always says the session's name and ``as`` (name and key: only this
session's hooks can derive the key), ``flush-tools`` only when mail waits, and
``reminder`` takes one bounded step of pruning (at most daily).
On the hot path: one connection, no numpy, no git for a session already registered
(its project is kept from when it was anchored), and the schema migrated only when a
chat table is missing. Every failure returns None: the nudge still prints.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thatch.common.environment import default_db_path
from thatch.frontend.hooks import hookio
from thatch.frontend.hooks.hookio import Failures

if TYPE_CHECKING:
    from thatch.frontend.store.chat_store import ChatStore

__all__ = ["chat_line", "credential", "open_chat", "with_chat_line"]


def open_chat(env: Mapping[str, str]) -> ChatStore:
    """A ChatStore over its own connection to the database (closed by ``close_chat``)."""
    from thatch.frontend.store import db
    from thatch.frontend.store.chat_store import ChatStore
    from thatch.frontend.timefmt import utc_now

    conn = db.connect(default_db_path(env))
    # Heartbeats, wakes and auto rows only: a power cut may lose the last of them (the
    # next hook writes them again), never corrupt the file (WAL); saves an fsync a prompt.
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute(f"PRAGMA busy_timeout = {db.HOOK_BUSY_TIMEOUT_MS}")
    return ChatStore(conn, utc_now)


def _migrated(env: Mapping[str, str]) -> None:
    """Bring the schema up to date (a database an older thatch made lacks chat tables)."""
    from thatch.frontend.store.memory_store import Store
    from thatch.frontend.timefmt import utc_now

    Store.open(default_db_path(env), clock=utc_now, build_indexes=False).close()


def chat_line(
    command: str,
    payload: Mapping[str, Any],
    env: Mapping[str, str],
    host: str,
    *,
    always: bool,
    project: str | None = None,
    directory: Path | None = None,
    failures: Failures | None = None,
) -> str | None:
    """``[thatch] chat: you are NAME (n unread)`` for the payload's session, anchoring it.

    ``always`` (reminder): printed whatever n is, and old rows pruned; else only when
    n > 0. None without a session id, for a session that left (tombstone), or on failure
    (reported to ``failures``: the hook's other steps may have said it already).
    """
    from thatch.frontend.switches import is_on

    session = hookio.host_session(payload, host)
    if not session or not is_on(env, "chat"):  # THATCH_CHAT=off (docs/tools.md §switches)
        return None
    try:
        try:
            return _anchor(session, payload, env, host, always, project, directory)
        except sqlite3.OperationalError as error:
            if "no such table" not in str(error):
                raise
            _migrated(env)
            return _anchor(session, payload, env, host, always, project, directory)
    except Exception as error:  # chat must never cost the host its nudge
        (failures or Failures(command)).report(error)
        return None


def _anchor(
    session: str,
    payload: Mapping[str, Any],
    env: Mapping[str, str],
    host: str,
    always: bool,
    project: str | None,
    directory: Path | None,
) -> str | None:
    from thatch.frontend.store.chat_store import host_session_key

    key = host_session_key(session)
    chat = open_chat(env)
    try:
        known = chat.get(key)
        if directory is None:
            directory = hookio.project_dir(env, payload)
        if project is None:
            if known is not None and known.project:
                project = known.project
            else:
                from thatch.frontend.project import project_store

                project = project_store(directory, env)
        secret = chat.host_key(session)
        worktree = os.path.realpath(directory)
        anchored = known
        if (
            always
            or known is None
            or not chat.anchored_since(
                known, project=project, worktree=worktree, key=secret, within=SEEN_REFRESH
            )
        ):
            anchored = chat.anchor(
                key, project=project, host_kind=host, worktree=worktree, key=secret
            )
        if anchored is None:
            return None
        unread = chat.unread_count(key)
        if always:
            chat.prune()
        elif unread == 0:
            _told_before(env, key)  # a marker left by the reminder is spent either way
            return None
        line = identity_line(anchored.name, unread, secret)
        if always:
            if unread and host != "opencode":
                _tell_once(env, key, line)
            return line
        return None if _told_before(env, key) == line else line
    finally:
        chat.conn.close()


# A prompt hook refreshes ``last_seen`` at most this often (docs/chat.md §liveness): a
# session seen within it, unchanged, is only read (active means seen within 30 minutes);
# the reminder always writes.
SEEN_REFRESH = timedelta(seconds=60)

# A session that starts (or resumes) with mail hears "(n unread)" from the reminder; the
# host then runs the prompt hook for the same request, which would say it again. The
# reminder leaves the line it printed here and the session's next prompt hook takes it:
# the same line is not repeated, anything new is. opencode's plugin runs both hooks at
# once (no order), and its sessions cannot hold mail before their first anchoring.
TOLD_DIR = "chat-told"
TOLD_STALE_SECONDS = 86400


def _told_path(env: Mapping[str, str], key: str) -> Path:
    from thatch.common.environment import thatch_cache_dir

    return thatch_cache_dir(env) / TOLD_DIR / key


def _tell_once(env: Mapping[str, str], key: str, line: str) -> None:
    """Leave ``line`` for the session's next prompt hook (and drop markers nobody took)."""
    import time

    path = _told_path(env, key)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        cutoff = time.time() - TOLD_STALE_SECONDS
        for entry in os.scandir(path.parent):
            if entry.is_file(follow_symlinks=False) and entry.stat().st_mtime < cutoff:
                os.unlink(entry.path)
        temp = path.with_suffix(f".{os.getpid()}.tmp")
        temp.write_text(line, encoding="utf-8")
        os.replace(temp, path)
    except OSError:
        pass  # the line is then said twice, as before: never worse


def _told_before(env: Mapping[str, str], key: str) -> str | None:
    """The line the reminder left for this session, taken (deleted), or None."""
    from thatch.frontend.regular_files import read_regular

    path = _told_path(env, key)
    try:
        line = read_regular(path, 64 * 1024, follow_links=False).decode("utf-8")  # a FIFO: no wait
        path.unlink()
    except (OSError, UnicodeDecodeError):
        return None
    return line


def credential(name: str, key: str) -> str:
    """What the chat tool takes as ``as``: the name and the session's own key."""
    return f"{name}:{key}"


def identity_line(name: str, unread: int, key: str) -> str:
    """The chat line: the name (public) and the ``as`` only this session is handed."""
    from thatch.frontend.untrusted import quoted, token

    return (
        f"[thatch] chat: you are {token(name)} ({unread} unread). Pass "
        f'"as": {quoted(credential(name, key))} to the chat tool; the part after the '
        "colon is your key: never write it anywhere else."
    )


def with_chat_line(text: str | None, line: str | None) -> str | None:
    """``text`` with the chat line appended as its own paragraph."""
    if not line:
        return text
    return f"{text}\n\n{line}" if text else line
