"""The snapshot handed to an extractor, and the reads the nudges make.

``accept`` (``get_extraction_payload``) hands the queued records out and records the
snapshot's cursor (their highest sequence number); ``complete`` (``extraction_done``, the
extractor's stop) deletes exactly that snapshot, ``requeue`` (the extractor died) makes it
pending again. A fresh snapshot keeps the extraction nudge quiet (``nudge_records``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from thatch.frontend.identifiers import session_id_problem
from thatch.frontend.queue.append import replay_spills
from thatch.frontend.queue.carry import adopt_carried, release_held
from thatch.frontend.queue.files import (
    locked,
    queue_paths,
    read_lines,
    read_state,
    spilled,
    state_path,
    unlink,
    write_atomic,
    write_records,
)
from thatch.frontend.queue.limits import ACCEPTED_TTL_SECONDS, ID_LIMIT
from thatch.frontend.queue.records import compact, seq_of

__all__ = [
    "accept",
    "complete",
    "consume",
    "nudge_records",
    "peek_records",
    "requeue",
]


def peek_records(directory: Path, session_id: str) -> list[dict[str, Any]]:
    """The queued records, oldest first, without locking or changing anything."""
    if session_id_problem(session_id) is not None:
        return []
    jsonl, _count, _lock = queue_paths(directory, session_id)
    return read_lines(jsonl)


def nudge_records(
    directory: Path, session_id: str, *, now: float | None = None
) -> list[dict[str, Any]]:
    """The records the extraction nudge is about: none while a handed-out snapshot is
    fresh (an extractor is working on it), else every queued record."""
    if session_id_problem(session_id) is not None:
        return []
    jsonl, _count, _lock = queue_paths(directory, session_id)
    records = read_lines(jsonl)
    if not records:
        return []
    state = read_state(state_path(jsonl))
    now = time.time() if now is None else now
    if "cursor" in state and 0 <= now - state["accepted_at"] < ACCEPTED_TTL_SECONDS:
        return []
    return records


def accept(
    directory: Path, session_id: str, *, project: str = "", now: float | None = None
) -> list[dict[str, Any]]:
    """Hand the queued records out (``get_extraction_payload``): returns them and records
    the snapshot's cursor (their highest sequence number), which quiets the nudge until
    ``complete``, ``requeue`` or ACCEPTED_TTL_SECONDS. Records stay queued.

    With ``project``, the project's carried-over records are adopted first, as the prompt
    hook does: a nudge names this session, and a ``session-end`` that ran between the
    nudge and the fetch (a late one, ``/clear`` beside a background extractor, another
    process of the session) has moved what it announced to the project's carry file.
    Only a session the queue knows (its lock file exists: it queued calls, was nudged or
    ended) adopts: an id no nudge named (a child session's own) would strand them."""
    if session_id_problem(session_id) is not None:
        return []
    now = time.time() if now is None else now
    jsonl, _count, lock = queue_paths(directory, session_id)
    if project and lock.exists():
        adopt_carried(directory, session_id, project, now=now)
    if not jsonl.exists() and not spilled(jsonl):
        return []
    with locked(lock):
        replay_spills(jsonl)
        records = read_lines(jsonl)
        if records:
            cursor = max(seq_of(record) for record in records)
            write_atomic(state_path(jsonl), compact({"cursor": cursor, "accepted_at": now}))
    return records


def complete(directory: Path, session_id: str, agent_id: str = "", project: str = "") -> int:
    """The extractor finished (``extraction_done``): delete exactly the handed-out snapshot
    (records up to its cursor) and the nudge count; records queued since survive. Without
    a snapshot nothing is deleted; with ``agent_id`` (a Claude sub-agent stopped) only the
    snapshot that agent fetched is completed. With ``project``, the snapshot's records a
    ``session-end`` carried over while they were held (``carry_over``) are deleted from
    the project's carry file too. Returns the number of records deleted."""
    if session_id_problem(session_id) is not None or not directory.is_dir():
        return 0
    jsonl, count, lock = queue_paths(directory, session_id)
    state_file = state_path(jsonl)
    with locked(lock):
        replay_spills(jsonl)
        carried = release_held(directory, session_id, project, agent_id, delete=True)
        state = read_state(state_file)
        if "cursor" not in state:
            unlink(state_file)  # a damaged state file hands nothing out
            return carried
        if agent_id and state.get("agent_id") != agent_id[:ID_LIMIT]:
            return carried  # another sub-agent stopped; the extractor may still be working
        records = read_lines(jsonl)
        kept = [record for record in records if seq_of(record) > state["cursor"]]
        if len(kept) != len(records):
            write_records(jsonl, kept)
        unlink(count)
        unlink(state_file)
    return carried + len(records) - len(kept)


def requeue(directory: Path, session_id: str, project: str = "") -> bool:
    """The extractor died: the snapshot's records are pending again (the nudge resumes),
    those a ``session-end`` carried over while held included (with ``project``). Returns
    whether a snapshot was handed out."""
    if session_id_problem(session_id) is not None or not directory.is_dir():
        return False
    jsonl, _count, lock = queue_paths(directory, session_id)
    state_file = state_path(jsonl)
    with locked(lock):
        replay_spills(jsonl)
        released = release_held(directory, session_id, project, "", delete=False)
        had = state_file.exists()
        unlink(state_file)
    return had or released > 0


def consume(directory: Path, session_id: str) -> None:
    """Delete the session's records, nudge count and snapshot state."""
    if not session_id:
        return
    jsonl, count, lock = queue_paths(directory, session_id)
    if not directory.is_dir():
        return
    with locked(lock):
        replay_spills(jsonl)  # what the session queued before it saved goes too
        unlink(jsonl)
        unlink(count)
        unlink(state_path(jsonl))
