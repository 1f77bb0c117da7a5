"""The nudge count of a session, and its once-only warning about unreadable payloads."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

from thatch.frontend.queue.append import replay_spills
from thatch.frontend.queue.files import (
    UNREAD,
    ensure_dir,
    locked,
    queue_paths,
    read_number,
    safe_name,
    write_atomic,
)
from thatch.frontend.queue.limits import LOCK_TIMEOUT_SECONDS

__all__ = [
    "increment_count",
    "read_count",
    "warn_unreadable_once",
]


def read_count(directory: Path, session_id: str) -> int:
    """Extraction nudges printed since the last drain (missing or unparsable = 0)."""
    if not session_id:
        return 0
    _jsonl, count, _lock = queue_paths(directory, session_id)
    return read_number(count)


def increment_count(
    directory: Path, session_id: str, *, timeout: float = LOCK_TIMEOUT_SECONDS
) -> int:
    """Add one to the session's nudge count; returns the count *before* the increment.
    LockBusy when the lock stays taken ``timeout`` seconds."""
    jsonl, count, lock = queue_paths(directory, session_id)
    ensure_dir(directory)
    with locked(lock, timeout):
        replay_spills(jsonl)  # every holder of the lock merges what waited for it
        missed = read_number(count)
        write_atomic(count, f"{missed + 1}\n")
    return missed


def warn_unreadable_once(directory: Path, session_id: str, warn: Callable[[], None]) -> None:
    """Call ``warn`` unless this session's marker exists, then leave the marker (a session
    whose host sends a shape thatch cannot read hears it once, not on every tool call)."""
    marker = directory / f"{safe_name(session_id or 'no-session')}{UNREAD}"
    if marker.exists():
        return
    warn()
    with contextlib.suppress(OSError):
        ensure_dir(directory)
        marker.touch()
