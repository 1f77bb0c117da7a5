"""Cursor's prompt nudge, held for the session's next tool call.

Cursor's ``beforeSubmitPrompt`` can only let a prompt through or block it (its output is
``continue`` and ``user_message``): context reaches Cursor's model only from
``sessionStart`` and ``postToolUse`` (``additional_context``, after the tool's result).
So for Cursor the prompt hook leaves its nudge in ``<safe>.nudge`` and the session's next
``postToolUse`` hands it over, once (docs/hooks.md §cursors-prompt-nudge).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path

from thatch.frontend.queue.files import QueueError, ensure_dir, queue_paths, unlink, write_atomic
from thatch.frontend.regular_files import open_regular

__all__ = ["HELD_BYTES_LIMIT", "NUDGE_SUFFIX", "drop", "hold", "take"]

NUDGE_SUFFIX = ".nudge"
# The nudge is at most NUDGE_BUDGET characters plus the chat line: a file larger than
# this was not written by thatch (and is not read past this).
HELD_BYTES_LIMIT = 64 * 1024


def _path(directory: Path, session: str) -> Path | None:
    """The session's held-nudge file, or None for a session id that gets no queue."""
    try:
        jsonl, _, _ = queue_paths(directory, session)
    except QueueError:
        return None
    return jsonl.with_suffix(NUDGE_SUFFIX)


def hold(directory: Path, session: str, extraction: str | None, rest: str | None) -> None:
    """Keep a prompt's nudge for the session's next tool call, replacing an earlier
    prompt's: its extraction nudge apart from the rest (recall, engine blocks, the chat
    line), since the queue may be drained before the nudge is handed over."""
    path = _path(directory, session)
    if path is None:
        return
    ensure_dir(directory)
    write_atomic(path, json.dumps({"extraction": extraction or "", "rest": rest or ""}))


def drop(directory: Path, session: str) -> None:
    """Forget an earlier prompt's nudge: what it said was about that prompt. Anything at
    the path that thatch did not write (a directory, a FIFO) is left alone."""
    path = _path(directory, session)
    if path is None:
        return
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        unlink(path)


def take(directory: Path, session: str) -> tuple[str, str] | None:
    """The held nudge's extraction part and the rest ("" for a part it lacks), removed;
    None when none is held or the file is not thatch's. Cursor runs the hooks of a turn's
    parallel tool calls at once: the rename lets exactly one of them have it."""
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
            data = handle.read(HELD_BYTES_LIMIT + 1)
    except OSError:
        return None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(claimed)
    return _parts(data)


def _parts(data: bytes) -> tuple[str, str] | None:
    """The two texts ``hold`` wrote; None for anything else (too large, not its JSON)."""
    if len(data) > HELD_BYTES_LIMIT:
        return None
    try:
        held = json.loads(data)
    except ValueError:  # also undecodable bytes
        return None
    if not isinstance(held, dict):
        return None
    extraction, rest = held.get("extraction"), held.get("rest")
    if not isinstance(extraction, str) or not isinstance(rest, str):
        return None
    return extraction, rest
