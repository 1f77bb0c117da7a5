"""Spilled batches: a tool hook's calls kept when the session's lock stayed busy.

A tool hook that waited out LOCK_TIMEOUT_SECONDS for its session's lock (another process
of the session holds it: a ``session-end`` or an extractor's completion waiting on a carry
file, a stopped process, plain contention) does not drop its batch: it writes it to a
file of its own beside the queue, ``<safe>.<ms>-<pid>-<random>.spill`` (a temp file
renamed into place, so a reader sees it whole or not at all), then touches the session's
marker ``<safe>.spilled``. Whoever next holds the session's lock merges every spill into
the queue (``append.replay_spills``) and deletes it. One writer creates each file, so no
lock guards it; the marker spares every lock holder a listing of the directory.

The marker goes only once the merge is written (``forget_spills``): the merged spills are
deleted, then the marker, then the directory is listed again and the marker rewritten if
a spill is left (one renamed after the first listing: its writer's marker may predate the
unlink). A holder that fails or dies before that leaves the marker, and the next holder
merges the spills again (their calls still queued are skipped by ``tool_use_id``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from thatch.frontend.queue.classify import DRAINING_TOOLS
from thatch.frontend.queue.files import (
    MARKER_SUFFIX,
    SPILL_SUFFIX,
    Seen,
    spill_marker,
    spilled,
    usable_project,
    write_atomic,
)
from thatch.frontend.queue.limits import (
    ID_LIMIT,
    MAX_RECORDS,
    SPILL_BYTES_LIMIT,
    SPILLS_PER_SESSION,
)
from thatch.frontend.queue.records import Origin, call_time, capped
from thatch.frontend.regular_files import NotRegularFile, read_regular

__all__ = [
    "MARKER_SUFFIX",
    "SPILL_SUFFIX",
    "Origin",
    "Spill",
    "forget_spills",
    "mark_spilled",
    "spill_marker",
    "spill_paths",
    "spilled",
    "take_spills",
    "write_spill",
]

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class Spill(NamedTuple):
    origin: Origin
    # The snapshot handed out as the hook began, read before its time and its wait (None:
    # none): a replayed drain or fetch acts on that snapshot only, never on one handed out
    # since. Written as ``"snapshot": {"cursor", "accepted_at"}``; a spill of the release
    # before has ``"seen": <accepted_at>`` instead, read after its wait (``Seen``).
    seen: Seen | None
    events: list[dict[str, Any]]


def spill_paths(jsonl: Path) -> list[Path]:
    """The session's spill files, marked or not (regular files only: a link is nobody's
    spill): one listing of the queue directory."""
    return _spill_paths(jsonl)


def _spill_paths(jsonl: Path) -> list[Path]:
    prefix = jsonl.stem + "."  # a session's stem holds no ".": no other session's prefix
    found = []
    with os.scandir(jsonl.parent) as entries:
        for entry in entries:
            ours = entry.name.startswith(prefix) and entry.name.endswith(SPILL_SUFFIX)
            if ours and entry.is_file(follow_symlinks=False):
                found.append(Path(entry.path))
    return found


def write_spill(jsonl: Path, spill: Spill) -> bool:
    """Keep a batch beside the session's queue; False when SPILLS_PER_SESSION wait already
    (a lock held for good must not let a runaway session fill the disk; hooks that spill
    at once each count before any renames, so they may pass it by their number)."""
    if len(_spill_paths(jsonl)) >= SPILLS_PER_SESSION:
        return False
    text = _spill_text(spill)
    name = f"{jsonl.stem}.{spill.origin.at_ms}-{os.getpid()}-{os.urandom(6).hex()}{SPILL_SUFFIX}"
    write_atomic(jsonl.with_name(name), text)
    # After the rename: a holder that removed the marker before its listing sees this
    # file, or finds the marker again.
    mark_spilled(jsonl)
    return True


def mark_spilled(jsonl: Path) -> None:
    """Tell the session's next lock holder that spills wait (a writer's last step, and a
    holder's that found a spill left after its merge). A marker that cannot be written
    (a directory at its path, a full disk) fails no hook: what is at the path still makes
    holders list the spills, and the daily pass lists them anyway."""
    with contextlib.suppress(OSError):
        write_atomic(spill_marker(jsonl), "")


def _remove(path: Path) -> None:
    """Delete a spill or the marker, if a regular file (a directory at the path is left),
    and fail no lock holder when it cannot: a spill left is merged again (its calls still
    queued are skipped), a marker left costs the next holder a listing."""
    with contextlib.suppress(OSError):
        if stat.S_ISREG(os.lstat(path).st_mode):
            os.unlink(path)


def _spill_text(spill: Spill) -> str:
    """The spill as one line of ASCII JSON (a project directory that is no UTF-8 survives),
    within SPILL_BYTES_LIMIT (room for MAX_RECORDS records of any script, escaped): the
    newest MAX_RECORDS records, as the queue keeps, and the newest MAX_RECORDS drains and
    fetches; then the oldest records go until it fits."""
    events = _newest(spill.events, MAX_RECORDS)
    while True:
        text = json.dumps(
            {
                "at": spill.origin.at_ms,
                "subagent": spill.origin.subagent,
                "agent_id": spill.origin.agent_id[:ID_LIMIT],
                # Only one a holder would note: a 16 MiB cwd made the spill too large.
                "project": usable_project(spill.origin.project),
                # Not ``seen``, the release before's key: it would read this spill's
                # snapshot as one seen after the wait; it reads none here (its calls are
                # still merged).
                "snapshot": None if spill.seen is None else spill.seen._asdict(),
                "events": events,
            },
            separators=(",", ":"),
            default=str,
        )
        records = [i for i, event in enumerate(events) if "record" in event]
        if len(text) <= SPILL_BYTES_LIMIT or not records:
            return text
        del events[records[0]]


def _newest(events: list[dict[str, Any]], keep: int) -> list[dict[str, Any]]:
    """``events`` in order, but only the newest ``keep`` records and ``keep`` others."""
    records = [i for i, event in enumerate(events) if "record" in event][-keep:]
    others = [i for i, event in enumerate(events) if "record" not in event][-keep:]
    return [events[i] for i in sorted({*records, *others})]


def take_spills(jsonl: Path, *, unmarked: bool = False) -> list[tuple[Path, Spill]] | None:
    """The session's spills, oldest first (None: no marker, and not ``unmarked``: the daily
    pass lists the spills of a session whose marker went missing too); the caller holds
    the session's lock, merges them, writes the queue and then calls ``forget_spills``. A
    file that is no spill (damaged, foreign, too large) is deleted here."""
    if not unmarked and not spilled(jsonl):
        return None
    found = []
    for path in _spill_paths(jsonl):
        try:
            spill = _read_spill(path)
        except OSError:
            continue  # unreadable for now (out of file descriptors, say): the next holder's
        if spill is None:
            _remove(path)
        else:
            found.append((path, spill))
    found.sort(key=lambda item: (item[1].origin.at_ms, item[0].name))
    return found


def forget_spills(jsonl: Path, paths: list[Path]) -> None:
    """After the merge was written: delete the merged spills, then, unless one is still
    there (renamed after ``take_spills`` listed them, or left unread), the marker; and list
    once more after it, since such a spill's writer may have marked before the unlink. A
    holder dying anywhere here leaves the marker, or no spill that needs it."""
    for path in paths:
        _remove(path)
    if _spill_paths(jsonl):
        return
    _remove(spill_marker(jsonl))
    if _spill_paths(jsonl):
        mark_spilled(jsonl)


def _read_spill(path: Path) -> Spill | None:
    """The spill at ``path``, or None for one to delete (gone meanwhile, no regular file,
    too large, damaged, or hostile: a spill this raised on would fail every later holder
    of the session's lock, and their batches with it). OSError when it could not be read
    for now (no file descriptor left, say): a good spill is never deleted for that."""
    try:
        data = read_regular(path, SPILL_BYTES_LIMIT, follow_links=False)
    except NotRegularFile:
        return None
    except OSError as error:
        if error.errno in (errno.ENOENT, errno.EFBIG):
            return None
        raise
    try:
        return _parse_spill(json.loads(data))
    except (ValueError, TypeError, OverflowError, RecursionError):
        return None


def _parse_spill(value: object) -> Spill | None:
    if not isinstance(value, dict):
        return None
    at = value.get("at")
    if not isinstance(at, int) or call_time(value, "at") != at:  # bounded as a call's times
        return None
    agent, project = value.get("agent_id"), value.get("project")
    events = value.get("events")
    if not isinstance(agent, str) or not isinstance(project, str) or not isinstance(events, list):
        return None
    # The agent id lands in the UTF-8 state file: a lone surrogate there is made "?" too.
    agent = _LONE_SURROGATE.sub("\ufffd", agent[:ID_LIMIT])
    # The project is noted as the session's (``files.record_project``): one that names no
    # directory (relative, a NUL, a lone surrogate, too long) notes none, and the session's
    # own stays (the daily pass would carry its calls nowhere).
    origin = Origin(at, value.get("subagent") is True, agent, usable_project(project))
    # A hook writes at most MAX_RECORDS records and MAX_RECORDS others (``_newest``): the
    # thousands of events a foreign file may hold are not read, nor the lock held for them.
    newest = events[-2 * MAX_RECORDS :]
    kept = [event for item in newest if (event := _event(item)) is not None]
    return Spill(origin, _seen(value), kept)


def _seen(value: dict[str, Any]) -> Seen | None:
    """A spill's snapshot: ``snapshot``, or an earlier release's ``seen`` (its
    ``accepted_at`` alone, read after the hook's wait: cursor None); None when there is
    none or it is unusable (its drains and fetches then act on no snapshot, and its calls
    are still merged: the whole spill was deleted, calls and all, for a NaN a damaged
    ``.state`` handed its hook)."""
    if "snapshot" not in value:
        legacy = _finite(value.get("seen"))
        return None if legacy is None else Seen(None, legacy)
    snapshot = value["snapshot"]
    if not isinstance(snapshot, dict):
        return None
    cursor, at = snapshot.get("cursor"), _finite(snapshot.get("accepted_at"))
    if isinstance(cursor, bool) or not isinstance(cursor, int) or cursor < 0 or at is None:
        return None
    return Seen(cursor, at)


def _finite(value: object) -> float | None:
    """``value`` as a finite float, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # a 400-digit integer
        return None
    return number if math.isfinite(number) else None


def _encodable(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with each lone surrogate made U+FFFD, as the hooks make those of a
    payload (``hookio``): JSON may say ``"\\ud800"``, the UTF-8 queue cannot hold it, and
    a spill that cannot be merged would fail every later holder of the session's lock."""
    text = json.dumps(record, ensure_ascii=False)  # a pair is one character by now
    value: dict[str, Any] = json.loads(_LONE_SURROGATE.sub("\ufffd", text))
    return value


def _event(value: object) -> dict[str, Any] | None:
    """One event of a spill as read back, bounded (``append._event_of`` made it)."""
    if not isinstance(value, Mapping):
        return None
    record = value.get("record")
    if isinstance(record, dict):
        bounded = _encodable(capped(record))
        for field in ("seq", "held_by", "held_until", "held_agent"):
            bounded.pop(field, None)  # numbered when merged; a session's call is held by none
        return {"record": bounded}
    drain = value.get("drain")
    if isinstance(drain, str) and drain in DRAINING_TOOLS:
        return {"drain": drain, "started": call_time(value, "started")}
    if value.get("fetch") is True:
        return {"fetch": True}
    return None
