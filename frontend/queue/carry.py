"""Carry-over: a session's last calls go to the project's next session.

When a session ends (Claude's SessionEnd, Cursor's sessionEnd) its queued records move to
the project's carry file (``~carry-<key>.jsonl``), which the project's next prompting
session, or a fetch (``snapshot.accept``), adopts. A session whose host died before its
session-end is carried over late, by the queue's daily pass (``cleanup``), to the project
its queue recorded. Locks are always taken in one order: the session's first, then the
carry file's.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from thatch.frontend.identifiers import SESSION_ID_MAX, session_id_problem
from thatch.frontend.queue.append import replay_spills
from thatch.frontend.queue.files import (
    MARKER_SUFFIX,
    SPILL_SUFFIX,
    LockBusy,
    QueueError,
    cleanup_again,
    cleanup_due,
    locked,
    project_path,
    queue_paths,
    read_lines,
    read_project,
    read_state,
    record_project,
    remove_stale,
    safe_name,
    state_path,
    unlink,
    usable_project,
    write_records,
)
from thatch.frontend.queue.limits import (
    ABANDONED_PER_PASS,
    ABANDONED_SECONDS,
    ACCEPTED_TTL_SECONDS,
    ID_LIMIT,
    MAX_RECORDS,
)
from thatch.frontend.queue.records import seq_of

__all__ = [
    "CARRY_PREFIX",
    "AbandonedPass",
    "adopt_carried",
    "carry_abandoned",
    "carry_over",
    "checkout_root",
    "cleanup",
    "project_key",
    "release_held",
]

# Stem of a project's carried-over queue: "~" never occurs in a session's safe name.
CARRY_PREFIX = "~carry-"
# A session's stem (``files.safe_name``): what the daily pass may carry over.
_SESSION_STEM = re.compile(r"[A-Za-z0-9_-]+")
# How long adoption waits for a carry file's lock while it holds the session's. A carry
# lock is held for one merge of at most 20 records (milliseconds); waiting the full lock
# timeout there kept the session's own tool hooks waiting on its lock, and a hook that
# waits out its 2 s drops its call. A busy carry file is adopted at a later prompt.
ADOPT_CARRY_WAIT_SECONDS = 0.25


def project_key(project: str) -> str:
    """Stem of a project's carried-over queue: FNV-1a (64 bit) of its directory (hashlib
    would load OpenSSL on every prompt)."""
    value = 0xCBF29CE484222325
    for byte in project.encode("utf-8", "surrogatepass"):
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{CARRY_PREFIX}{value:016x}"


def checkout_root(project: str) -> str:
    """The top of the checkout holding ``project`` (the nearest directory with a ``.git``,
    where git's ``--show-toplevel`` stops), else ``project``; symlinks resolved.

    A session in ``proj/src`` and one at ``proj`` are sessions of one project: the carry
    file must be the checkout's, not the exact directory's. Stat calls only, no git: the
    queue commands run on every session end and prompt."""
    # The hooks name the project as the host does (CLAUDE_PROJECT_DIR, the payload's cwd),
    # the MCP server by its working directory, where symlinks are resolved: one key for both.
    real = os.path.realpath(project)
    # os.path's checks answer False for any path the system refuses (too long, no access).
    if not os.path.isdir(real):
        return real  # a deleted worktree: nothing above it speaks for it
    path = real
    while not os.path.lexists(os.path.join(path, ".git")):
        parent = os.path.dirname(path)
        if parent == path:
            return real
        path = parent
    return path


def _carry_paths(directory: Path, project: str) -> tuple[Path, Path]:
    stem = project_key(checkout_root(project))
    return directory / f"{stem}.jsonl", directory / f"{stem}.lock"


def _carry_paths_read(directory: Path, project: str) -> list[tuple[Path, Path]]:
    """The carry files that may hold ``project``'s calls: the checkout's, and the one named
    by the exact directory, as releases before checkout keys wrote it (read until the
    queue's 7-day cleanup takes it)."""
    current = _carry_paths(directory, project)
    stem = project_key(os.path.realpath(project))
    legacy = (directory / f"{stem}.jsonl", directory / f"{stem}.lock")
    return [current] if legacy == current else [current, legacy]


def _held(record: Mapping[str, Any], now: float) -> bool:
    """A carried record of a snapshot whose extractor may still be working on it."""
    return "held_by" in record and 0 <= record["held_until"] - now <= ACCEPTED_TTL_SECONDS


def _fresh(state: Mapping[str, Any], now: float) -> bool:
    """A snapshot handed out less than ACCEPTED_TTL_SECONDS ago: its extractor may be at it."""
    return "cursor" in state and 0 <= now - state["accepted_at"] < ACCEPTED_TTL_SECONDS


def _unheld(record: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in ("held_by", "held_until", "held_agent")}


def release_held(
    directory: Path, session_id: str, project: str, agent_id: str, *, delete: bool
) -> int:
    """Delete (``complete``) or release (``requeue``) the carried records ``session_id``'s
    snapshot holds; with ``agent_id`` only those that agent fetched. The caller holds the
    session's lock; the carry lock is taken second, the order every carry operation uses."""
    if not project:
        return 0
    agent = agent_id[:ID_LIMIT]

    def mine(record: Mapping[str, Any]) -> bool:
        if record.get("held_by") != session_id[:SESSION_ID_MAX]:
            return False
        return not agent or record.get("held_agent") == agent

    released = 0
    for carry, carry_lock in _carry_paths_read(directory, project):
        if not carry.exists():
            continue
        with locked(carry_lock):
            carried = read_lines(carry)
            ours = [record for record in carried if mine(record)]
            if ours:
                if delete:
                    write_records(carry, [r for r in carried if not mine(r)])
                else:
                    write_records(carry, [_unheld(r) if mine(r) else r for r in carried])
        released += len(ours)
    return released


def _merged(
    records: list[dict[str, Any]],
    incoming: list[dict[str, Any]],
    first_seq: int,
    now: float,
    cursor: int = 0,
    *,
    stems: tuple[str, str],
) -> list[dict[str, Any]]:
    """``incoming`` added to ``records`` (new sequence numbers, queued ids skipped): first
    the records already handed out (``seq`` up to the session's snapshot ``cursor``) or
    held by another session's extractor (a hold run out is pending again), then the rest
    in the order the calls ended (``_ended``; ``stems`` names the files the two lists were
    read from). The 20-record cap then drops what an extractor already has before any call
    waiting for one, and of those the oldest, whichever queue they came from (a day-old
    abandoned queue carried after a session-end's fresh calls pushed those out)."""
    seen = {r.get("tool_use_id") for r in records if r.get("tool_use_id")}
    out = list(records)
    added = []
    for record in incoming:
        use_id = record.get("tool_use_id")
        if use_id and use_id in seen:
            continue
        added.append({**record, "seq": first_seq})
        first_seq += 1
    out += added
    ended = {**_ended(records, stems[0]), **_ended(added, stems[1])}
    return sorted(out, key=lambda record: _call_order(record, cursor, now, ended))


def _ended(records: list[dict[str, Any]], stem: str) -> dict[int, float]:
    """When each of one file's records ended (ms), by ``id``: its ``ended_at``. A record of
    an earlier release has none: in the queue of the session that queued it (``stem``, the
    file's, is its ``sessionID``'s) it ended just before the next call in the file that
    has a time, else at the last one before it; anywhere else it is the oldest (0). A
    session's hooks append its own calls as they end, so they precede its next timed call
    (taken as the oldest, its recent calls were the first a merge dropped). Calls carried
    by an earlier release were not in that order (its merge appended day-old carried calls
    after a session's own) and carry files append whole queues: their place says nothing.
    Not the file's mtime: a carry file's is its last merge, which would make its calls
    newer than every queue carried to it next."""
    ended: dict[int, float] = {}
    owners: dict[Any, bool] = {}

    def own(record: Mapping[str, Any]) -> bool:
        owner = record.get("sessionID")
        if owner not in owners:
            owners[owner] = isinstance(owner, str) and bool(owner) and safe_name(owner) == stem
        return owners[owner]

    later: float | None = None
    for record in reversed(records):
        at = record.get("ended_at")
        if at is not None:
            later = ended[id(record)] = at
        elif later is not None and own(record):
            ended[id(record)] = later - 0.5  # before the next call (times are whole ms)
    earlier = 0.0
    for record in records:
        if "ended_at" in record:
            earlier = ended[id(record)]
        elif own(record):
            ended.setdefault(id(record), earlier)
        else:
            ended[id(record)] = 0.0
    return ended


def _call_order(
    record: Mapping[str, Any], cursor: int, now: float, ended: Mapping[int, float]
) -> tuple[bool, float, int]:
    """Waiting for an extractor last; then when the call ended (``_ended``), then
    ``seq``."""
    waiting = seq_of(record) > cursor and not _held(record, now)
    return waiting, ended[id(record)], seq_of(record)


def _kept_from(merged: list[dict[str, Any]], first_seq: int) -> int:
    """How many of the records a merge numbered from ``first_seq`` on the cap keeps."""
    return sum(seq_of(record) >= first_seq for record in merged[-MAX_RECORDS:])


def carry_over(
    directory: Path,
    session_id: str,
    project: str,
    *,
    hold: bool = False,
    now: float | None = None,
) -> int:
    """The session ended (Claude's SessionEnd, Cursor's sessionEnd): move its queued records
    to the project's carry-over queue, which the project's next prompting session (or
    fetch, ``accept``) adopts. Returns the records the carry file kept (its 20-record cap
    keeps the newest calls).

    A handed-out snapshot's extractor normally ended with the session, so its records are
    pending again. With ``hold`` (the host process lives on: Claude Code's ``/clear`` and
    ``/resume``, whose background sub-agents keep running), a fresh snapshot's records are
    carried *held* (``held_by`` the session, ``held_agent`` its fetcher, ``held_until``
    the snapshot's expiry): the extractor completes them with its ``extraction_done`` or
    stop, and nobody adopts them before then or the expiry, so they are extracted once."""
    if session_id_problem(session_id) is not None or not project or not directory.is_dir():
        return 0
    now = time.time() if now is None else now
    jsonl, _count, lock = queue_paths(directory, session_id)
    with locked(lock):
        # A batch that found the lock busy goes with the rest, marked or not: the session
        # ends, and a spill left without its marker would wait for the daily pass.
        replay_spills(jsonl, unmarked=True)
        records = read_lines(jsonl)
        state = read_state(state_path(jsonl))
        if hold and _fresh(state, now):
            holder: dict[str, Any] = {
                "held_by": session_id[:SESSION_ID_MAX],
                "held_until": state["accepted_at"] + ACCEPTED_TTL_SECONDS,
            }
            if state.get("agent_id"):
                holder["held_agent"] = state["agent_id"]
            records = [
                {**r, **holder} if seq_of(r) <= state["cursor"] else _unheld(r) for r in records
            ]
        else:
            records = [_unheld(r) for r in records]
        return _move_queue(directory, jsonl, project, records, now)


def _move_queue(
    directory: Path, jsonl: Path, project: str, records: list[dict[str, Any]], now: float
) -> int:
    """Append ``records`` to ``project``'s carry file, then delete the session's queue
    (``.jsonl``, ``.count``, ``.state``, ``.project``). The caller holds the session's lock.
    Returns the records the carry file kept (the cap drops the oldest calls)."""
    kept = 0
    if records:
        carry, carry_lock = _carry_paths(directory, project)
        # Session lock first, then the carry lock: the order adopt_carried takes too.
        # The destination is written before the source goes, so a crash between
        # the two duplicates records (tool_use_ids dedupe them) and loses none.
        with locked(carry_lock):
            carried = read_lines(carry)
            first = max([0, *(seq_of(r) for r in carried)]) + 1
            merged = _merged(carried, records, first, now, stems=(carry.stem, jsonl.stem))
            write_records(carry, merged)
            kept = _kept_from(merged, first)
    for path in (jsonl, jsonl.with_suffix(".count"), state_path(jsonl), project_path(jsonl)):
        unlink(path)
    return kept


def cleanup(directory: Path, *, now: float | None = None, force: bool = False) -> int:
    """The queue's daily pass, at most once a day: abandoned sessions carried over
    (``carry_abandoned``), then files untouched for 7 days deleted (``files.remove_stale``):
    in this order, a queue stranded longer (the machine was off) is carried, not deleted.
    Returns the files deleted."""
    now = time.time() if now is None else now
    if not cleanup_due(directory, now, force=force):
        return 0
    done = carry_abandoned(directory, now)
    if done.carried >= ABANDONED_PER_PASS:
        # More may be waiting: the next hook's pass goes on, not tomorrow's.
        cleanup_again(directory)
    # Queues a pass that stopped early never tried are the next pass's, not deleted.
    return remove_stale(directory, now, spare=done.untried)


class AbandonedPass(NamedTuple):
    carried: int  # sessions carried over
    # The stems of the abandoned queues a pass that stopped early (the limit, a busy lock)
    # did not get to; not those that failed (they go at 7 days, or they would jam it).
    untried: frozenset[str]


def carry_abandoned(directory: Path, now: float, limit: int = ABANDONED_PER_PASS) -> AbandonedPass:
    """Carry over, as their ``session-end`` would have, the queues of sessions whose host
    died first (killed, crashed, SessionEnd's timeout): untouched for ABANDONED_SECONDS,
    no fresh snapshot handed out, none of their records held. Each goes to the project its
    queue recorded (``files.record_project``); a queue that recorded none (an earlier
    release's) is left to the 7-day cleanup. At most ``limit`` sessions, oldest first,
    each queue that failed counted among them; the first lock busy past its timeout ends
    the pass (the rest wait for the next one), so a hung lock holder costs the prompt one
    wait, not one a queue. Returns the sessions carried (``limit`` only when none failed)
    and the queues it stopped before.

    Only on the daily pass: a prompt must not read every queue file. Sessions are found
    by their files' names, never by an id a record claims."""
    found: list[tuple[float, Path]] = []
    for stem, spilled_at in _queued_stems(directory).items():
        jsonl = directory / f"{stem}.jsonl"
        touched = _last_touched(jsonl, with_lock=True, spilled_at=spilled_at)
        if touched is not None and now - touched >= ABANDONED_SECONDS:
            found.append((touched, jsonl))
    carried = tried = 0
    queues = [jsonl for _touched, jsonl in sorted(found)]
    for at, jsonl in enumerate(queues):
        if tried >= limit:
            return AbandonedPass(carried, frozenset(q.stem for q in queues[at:]))
        try:
            moved = _carry_if_abandoned(directory, jsonl, now)
        except LockBusy:
            return AbandonedPass(carried, frozenset(q.stem for q in queues[at:]))
        except (QueueError, ValueError, OSError):
            # No regular lock file, a carry file that cannot be written: this queue stays,
            # the others still go.
            tried += 1
            continue
        carried += moved
        tried += moved
    return AbandonedPass(carried, frozenset())


def _queued_stems(directory: Path) -> dict[str, float]:
    """The stems of the sessions with a queue, a spill marker or a spill (a batch that
    found the lock busy as the session ended, its marker lost or not), each with its
    newest spill's time (0: none). Carry files ("~"), temp files ("."), foreign names, and
    links or FIFOs (nothing of a session's) are left out."""
    stems: dict[str, float] = {}
    for entry in os.scandir(directory):
        stem, dot, suffix = entry.name.rpartition(".")
        is_spill = dot + suffix == SPILL_SUFFIX
        if is_spill:
            stem = entry.name.split(".", 1)[0]
        elif dot + suffix not in (".jsonl", MARKER_SUFFIX):
            continue
        if not _SESSION_STEM.fullmatch(stem) or not entry.is_file(follow_symlinks=False):
            continue
        try:
            changed = entry.stat(follow_symlinks=False).st_mtime if is_spill else 0.0
        except FileNotFoundError:
            continue  # merged meanwhile
        stems[stem] = max(stems.get(stem, 0.0), changed)
    return stems


def _spilled_at(jsonl: Path) -> float:
    """When the session's newest spill was written (0: none waits)."""
    from thatch.frontend.queue.spill import spill_paths  # the daily pass only: hooks import lazily

    newest = 0.0
    for path in spill_paths(jsonl):
        with contextlib.suppress(FileNotFoundError):
            newest = max(newest, os.lstat(path).st_mtime)
    return newest


def _carry_if_abandoned(directory: Path, jsonl: Path, now: float) -> bool:
    project = read_project(project_path(jsonl))
    if not project and not _spilled_at(jsonl):
        return False  # (a spill names the project its hook ran in)
    lock = jsonl.with_suffix(".lock")
    had_lock = os.path.lexists(lock)  # else taking it creates it: no step of the session's
    with locked(lock) as lock_touched:
        # Again under the lock: the session may have come back meanwhile (a step that
        # touched only the lock, taken just before this pass took it, included), or
        # another prompt's pass moved its queue already.
        touched = _last_touched(jsonl, with_lock=False, spilled_at=_spilled_at(jsonl))
        if touched is None:
            return False
        if had_lock:
            touched = max(touched, lock_touched)
        if now - touched < ABANDONED_SECONDS:
            return False
        replay_spills(jsonl, unmarked=True)  # a spill whose marker went missing goes too
        # Read before the lock only to skip a queue that noted none: a step just before
        # the lock may have noted another, and a file system's coarse times hide it.
        project = read_project(project_path(jsonl))
        if not project:
            return False
        records = read_lines(jsonl)
        if not records or _fresh(read_state(state_path(jsonl)), now):
            return False  # nothing readable (a file this user may not read stays)
        if any(_held(record, now) for record in records):
            return False
        _move_queue(directory, jsonl, project, [_unheld(r) for r in records], now)
    return True


def _last_touched(jsonl: Path, *, with_lock: bool, spilled_at: float = 0.0) -> float | None:
    """When the session's queue files last changed (None: no ``.jsonl`` and no spills;
    ``spilled_at``: when its newest spill was written, 0 for none). Every tool call, nudge
    and fetch of a live session touches one, its ``.lock`` at least; a spill touches the
    marker ``.spilled``."""
    queued = (".jsonl", MARKER_SUFFIX)
    suffixes = (*queued, ".count", ".state", ".project", *((".lock",) if with_lock else ()))
    newest = spilled_at or None
    found = bool(spilled_at)
    for suffix in suffixes:
        try:
            changed = os.lstat(jsonl.with_suffix(suffix)).st_mtime
        except FileNotFoundError:
            continue
        found = found or suffix in queued
        newest = changed if newest is None else max(newest, changed)
    return newest if found else None


def adopt_carried(
    directory: Path, session_id: str, project: str, *, now: float | None = None
) -> int:
    """Move the project's carried-over records into this session's queue (before its
    extraction nudge, and before a fetch), except those a live snapshot holds
    (``carry_over``). Both locks are held, so of two sessions adopting at once exactly one
    gets each record. Returns the carried records the session's queue kept (its 20-record
    cap keeps the newest calls; a call queued already is not counted again), from both
    carry files the project may have: counted once at the end, as a later file's calls
    may push out an earlier one's. Stat calls only when there are none."""
    if session_id_problem(session_id) is not None or not project:
        return 0
    now = time.time() if now is None else now
    carries = [paths for paths in _carry_paths_read(directory, project) if paths[0].exists()]
    if not carries:
        return 0
    jsonl, _count, lock = queue_paths(directory, session_id)
    with locked(lock):
        replay_spills(jsonl)
        # Every record numbered above what the queue held or handed out is one adopted here.
        first = max([0, *(seq_of(r) for r in read_lines(jsonl))])
        first = max(first, read_state(state_path(jsonl)).get("cursor", 0)) + 1
        queued = None
        for carry, carry_lock in carries:
            try:
                written = _adopt_from(jsonl, project, carry, carry_lock, now)
            except LockBusy:
                continue  # its calls wait in the carry file for the next adoption
            if written is not None:
                queued = written
        # The calls this added: not those queued already, nor those the cap dropped (they
        # leave the carry file all the same: older than all it kept).
        return 0 if queued is None else _kept_from(queued, first)


def _adopt_from(
    jsonl: Path, project: str, carry: Path, carry_lock: Path, now: float
) -> list[dict[str, Any]] | None:
    """``adopt_carried`` for one carry file: the session's queue as written, None when
    nothing was taken. The caller holds the session's lock; LockBusy when the carry file's
    stays taken for ADOPT_CARRY_WAIT_SECONDS."""
    with locked(carry_lock, timeout=ADOPT_CARRY_WAIT_SECONDS):
        carried = read_lines(carry)
        held = [record for record in carried if _held(record, now)]
        taken = [_unheld(record) for record in carried if not _held(record, now)]
        merged = None
        if taken:
            records = read_lines(jsonl)
            state = read_state(state_path(jsonl))
            cursor = state.get("cursor", 0)
            first = max([0, cursor, *(seq_of(r) for r in records)]) + 1
            # A fresh snapshot's records are its extractor's: the cap drops them first.
            spent = cursor if _fresh(state, now) else 0
            merged = _merged(records, taken, first, now, spent, stems=(jsonl.stem, carry.stem))
            write_records(jsonl, merged)
            # Should this session die before its session-end too, the calls go on; a
            # relative directory (a host's cwd may be one) would name no place later.
            if usable_project(project):
                record_project(jsonl, project)
        if len(held) != len(carried) or not carried:
            write_records(carry, held)  # none held: the file goes
    return merged
