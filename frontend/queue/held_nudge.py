"""Cursor's prompt nudge, held for the session's next tool call.

Cursor's ``beforeSubmitPrompt`` can only let a prompt through or block it (its output is
``continue`` and ``user_message``): context reaches Cursor's model only from
``sessionStart`` and ``postToolUse`` (``additional_context``, after the tool's result).
So for Cursor the prompt hook leaves its nudge in ``<safe>.nudge`` and the session's next
``postToolUse`` hands it over, once (docs/hooks.md §cursor).
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from thatch.frontend.queue.files import QueueError, ensure_dir, queue_paths, unlink, write_atomic
from thatch.frontend.regular_files import open_regular

__all__ = ["HELD_BYTES_LIMIT", "NUDGE_SUFFIX", "drop", "hold", "take"]

NUDGE_SUFFIX = ".nudge"
# The nudge is at most NUDGE_BUDGET characters plus the chat line: a file larger than
# this was not written by thatch, and only its start is read.
HELD_BYTES_LIMIT = 64 * 1024


def _path(directory: Path, session: str) -> Path | None:
    """The session's held-nudge file, or None for a session id that gets no queue."""
    try:
        jsonl, _, _ = queue_paths(directory, session)
    except QueueError:
        return None
    return jsonl.with_suffix(NUDGE_SUFFIX)


def hold(directory: Path, session: str, text: str) -> None:
    """Keep ``text`` for the session's next tool call, replacing an earlier prompt's."""
    path = _path(directory, session)
    if path is None:
        return
    ensure_dir(directory)
    write_atomic(path, text)


def drop(directory: Path, session: str) -> None:
    """Forget an earlier prompt's nudge: what it said was about that prompt."""
    path = _path(directory, session)
    if path is not None:
        unlink(path)


def take(directory: Path, session: str) -> str | None:
    """The held nudge, removed; None when there is none. Cursor runs the hooks of a
    turn's parallel tool calls at once: the rename lets exactly one of them have it."""
    path = _path(directory, session)
    if path is None:
        return None
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None  # not thatch's file (a link, a directory): left alone, never read
    except OSError:
        return None  # the common case: no nudge held
    # A .tmp name: the daily pass removes it if this process dies before the unlink.
    claimed = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(6).hex()}.tmp")
    try:
        os.rename(path, claimed)
    except OSError:
        return None  # another tool hook took it first
    try:
        with open_regular(claimed, follow_links=False) as handle:
            data = handle.read(HELD_BYTES_LIMIT)
    except OSError:
        return None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(claimed)
    text = data.decode("utf-8", errors="replace").strip()
    return text or None
