"""Queueing a batch of tool calls (docs/hooks.md §append): what every tool hook does.

Each call of a batch becomes an event (``_event_of``): a record to queue, a drain (a
successful save or ``extraction_done``) or a fetch naming its sub-agent as the snapshot's
holder. ``append_calls`` takes the session's lock, reads its queue and snapshot state
once, lets each event change them (``_Batch``) and writes back only what changed. A hook
whose lock stays busy for its timeout spills its events to a file of its own (``spill``);
whoever next holds the lock replays them first (``replay_spills``), as if the batch had
been appended at its time. ``spill`` is imported only when the session's marker says that
spills wait (``files.spilled``, one ``lstat``) or the hook must write one: tool hooks run
on every call and import lazily (docs/hooks.md §rules).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from thatch.frontend.identifiers import session_id_problem
from thatch.frontend.queue.classify import DRAINING_TOOLS, call_succeeded, classify
from thatch.frontend.queue.files import (
    LockBusy,
    Seen,
    ensure_dir,
    locked,
    queue_paths,
    read_lines,
    read_state,
    record_project,
    seen_of,
    spilled,
    state_path,
    unlink,
    usable_project,
    write_atomic,
    write_records,
)
from thatch.frontend.queue.limits import ACCEPTED_TTL_SECONDS, ID_LIMIT, SPILLS_PER_SESSION
from thatch.frontend.queue.records import Origin, call_time, compact, make_record, seq_of

__all__ = [
    "SPILL_MERGE_WAIT_SECONDS",
    "append_calls",
    "merge_spilled",
    "replay_spills",
]

# Records a batch keeps in hand (the file keeps the newest MAX_RECORDS of them).
_KEPT_IN_BATCH = 1000
# How long the prompt hook waits for the lock to merge spills before it counts the queue:
# the lock was busy a moment ago; the nudge is not worth a hook's 2 s (the next holder
# merges them anyway).
SPILL_MERGE_WAIT_SECONDS = 0.25


def append_calls(
    directory: Path,
    session_id: str,
    calls: Iterable[Mapping[str, Any]],
    *,
    subagent: bool = False,
    agent_id: str = "",
    project: str = "",
) -> None:
    """Queue a batch of tool calls for a session (docs/hooks.md §append).

    A *successful* thatch memory write or ``extraction_done`` in the batch drains: the
    session's own agent's memory write consumes the queue, except the calls that ran beside
    it (the rest of the batch, and records that ended after it started); a sub-agent's
    write (``subagent``: Claude's ``agent_id``, an opencode child) and ``extraction_done``
    complete the handed-out snapshot only. A sub-agent's successful
    ``get_extraction_payload`` names ``agent_id`` as the snapshot's holder (so its stop
    can complete it, ``complete``). thatch's own and meta tools are skipped, as are calls
    whose ``tool_use_id`` is already queued. The newest 20 records are kept; each new one
    gets the next sequence number. ``project`` (the hooks' project directory) is noted
    by a batch that queued a call, the latest winning: the queue's daily pass carries the
    calls there should the session's host die before its ``session-end``
    (``carry.carry_abandoned``). Only a directory ``.project`` may hold is noted
    (``usable_project``), spilled or not: with any other the session's own stays.

    When the lock stays busy for its timeout the batch is spilled (``spill``) and merged
    by the lock's next holder; LockBusy only when SPILLS_PER_SESSION wait already."""
    if session_id_problem(session_id) is not None:
        return  # the tools would refuse this id: a queue for it could never be fetched
    calls = list(calls)
    if not calls:
        return
    jsonl, count, lock = queue_paths(directory, session_id)
    ensure_dir(directory)
    # The snapshot handed out before the hook began, the only one a spilled drain or fetch
    # may act on (``Spill.seen``): read first, so that no clock is asked whether it came
    # before (one stepped back would deny a save its own snapshot). An atomic file: no lock.
    # Only for a batch that may drain or fetch: a normal call reads the state once, under
    # the lock.
    seen = None
    if any(_acts_on_snapshot(call) for call in calls):
        seen = seen_of(read_state(state_path(jsonl)))
    # Before the wait: the hook runs as the calls end, however long the lock is held. The
    # project only when a queue may note it (``usable_project``), whether the hook gets the
    # lock or spills: a relative or huge one would replace the session's own.
    at_ms = time.time_ns() // 1_000_000
    origin = Origin(at_ms, subagent, agent_id[:ID_LIMIT], usable_project(project))
    try:
        with locked(lock):
            batch = _Batch(jsonl)
            batch.replay_spills()
            batch.take(_events_of(session_id, calls, origin.at_ms), origin)
            batch.save(count)
    except LockBusy:
        # The newest events only: a spill keeps the newest 20 records anyway, and a batch
        # of thousands of calls must not be held whole.
        events = list(deque(_events_of(session_id, calls, origin.at_ms), _KEPT_IN_BATCH))
        if not events:
            return  # nothing to queue, drain or name: nothing lost
        from thatch.frontend.queue.spill import Spill, write_spill

        if not write_spill(jsonl, Spill(origin, seen, events)):
            raise LockBusy(
                f"queue lock {lock.name} busy and {SPILLS_PER_SESSION} batches spilled "
                "already; gave up"
            ) from None


def _acts_on_snapshot(call: Mapping[str, Any]) -> bool:
    """Whether ``call`` may be a drain or a fetch (``_event_of``; whether it succeeded
    aside)."""
    tool = call.get("tool_name")
    if not isinstance(tool, str) or not tool.strip():
        return False
    kind, bare = classify(tool, call.get("tool_input"))
    return bare == "get_extraction_payload" or (kind == "thatch" and bare in DRAINING_TOOLS)


def _events_of(
    session_id: str, calls: Iterable[Mapping[str, Any]], at_ms: int
) -> Iterator[dict[str, Any]]:
    """The events of a batch's calls, in order, made as they are taken."""
    for call in calls:
        event = _event_of(session_id, call, at_ms)
        if event is not None:
            yield event


def _event_of(session_id: str, call: Mapping[str, Any], at_ms: int) -> dict[str, Any] | None:
    """What one call does to the queue: ``{"record"}`` to queue, ``{"drain", "started"}``
    (a successful save or ``extraction_done``), ``{"fetch"}`` (a successful
    ``get_extraction_payload``), or None (thatch's other tools, host meta-tools, failed
    saves: never queued). JSON, so a spill keeps it as it is."""
    tool = call.get("tool_name")
    if not isinstance(tool, str) or not tool.strip():
        return None
    kind, bare = classify(tool, call.get("tool_input"))
    if bare == "get_extraction_payload":
        return {"fetch": True} if call_succeeded(call, bare) else None
    if kind == "thatch" and bare in DRAINING_TOOLS:
        if not call_succeeded(call, bare, bare != classify(tool)[1]):
            return None  # a failed save drains nothing (and is not queued)
        return {"drain": bare, "started": call_time(call, "started_at")}
    if kind == "other":
        return {"record": make_record(session_id, call, None, at_ms)}
    return None


def replay_spills(jsonl: Path, *, unmarked: bool = False) -> None:
    """Merge the session's spilled batches into its queue and delete them; one ``lstat``
    when there are none. The caller holds the session's lock: every holder calls this
    first, so what a busy lock spilled is never read around. ``unmarked``: the spills are
    listed even with no marker (the daily pass: nothing of an abandoned session's stays
    behind)."""
    if not unmarked and not spilled(jsonl):
        return
    batch = _Batch(jsonl)
    batch.replay_spills(unmarked=unmarked)
    batch.save(jsonl.with_suffix(".count"))


def merge_spilled(
    directory: Path, session_id: str, *, timeout: float = SPILL_MERGE_WAIT_SECONDS
) -> None:
    """``replay_spills`` for a reader that does not otherwise lock (the prompt hook, before
    it counts the queue for its nudge), waiting at most ``timeout``: a lock still busy
    leaves the spills to its next holder."""
    if session_id_problem(session_id) is not None:
        return
    jsonl, _count, lock = queue_paths(directory, session_id)
    if not spilled(jsonl):
        return
    try:
        with locked(lock, timeout=timeout):
            replay_spills(jsonl)
    except LockBusy:
        pass


class _Batch:
    """The session's queue and snapshot state as read under its lock, changed by batches
    of events (spilled ones first, then the hook's own), then written back once."""

    def __init__(self, jsonl: Path) -> None:
        self.jsonl = jsonl
        self.state_file = state_path(jsonl)
        self.records = read_lines(jsonl)  # the queue as it will be written
        self.state = read_state(self.state_file)
        self.original = [seq_of(record) for record in self.records]
        self.original_state = dict(self.state)
        self.next_seq = max([*self.original, self.state.get("cursor", 0)]) + 1
        self.queued = _use_ids(self.records)
        self.drained = False
        self.project = ""  # the project of the newest batch that queued a call
        self.spills: list[Path] = []  # replayed spill files: deleted once saved
        self.took = False  # the marker was found: removed once saved
        # The batch being taken:
        self.origin = Origin(0)
        self.late = False  # a spilled batch, replayed after others took the lock
        self.seen: Seen | None = None  # a spilled batch's snapshot (``Spill.seen``)
        self.own: list[dict[str, Any]] = []  # its records (kept alive: ``own_ids``)
        self.own_ids: set[int] = set()

    def replay_spills(self, *, unmarked: bool = False) -> None:
        """Take every spilled batch, oldest first, then put the records in the order the
        calls ended (a fresh snapshot's first): a spill's calls ended before those queued
        while it waited, and the 20-record cap must drop the oldest, not the latest."""
        if not unmarked and not spilled(self.jsonl):
            return
        from thatch.frontend.queue.spill import take_spills

        found = take_spills(self.jsonl, unmarked=unmarked)
        if found is None:
            return
        self.took = True
        if not found:
            return
        for path, spill in found:
            self.take(spill.events, spill.origin, late=True, seen=spill.seen)
            self.spills.append(path)
        fresh = "cursor" in self.state and (
            0 <= time.time() - self.state["accepted_at"] < ACCEPTED_TTL_SECONDS
        )
        spent = self.state["cursor"] if fresh else 0
        self.records.sort(key=lambda r: (seq_of(r) > spent, r.get("ended_at", 0), seq_of(r)))

    def take(
        self,
        events: Iterable[Mapping[str, Any]],
        origin: Origin,
        *,
        late: bool = False,
        seen: Seen | None = None,
    ) -> None:
        """One batch's events, in order."""
        self.origin, self.late, self.seen = origin, late, seen
        self.own, self.own_ids = [], set()
        for event in events:
            if "record" in event:
                self._queue(dict(event["record"]))
            elif "drain" in event:
                self._drain(event["drain"], event.get("started"))
            elif "fetch" in event:
                self._fetched()
        if self.own and origin.project:
            self.project = origin.project

    def _same_snapshot(self) -> bool:
        """Whether a drain or fetch of this batch may act on the snapshot now handed out:
        always for a batch taken as it comes; a spilled one's only when it is the snapshot
        handed out as its hook began (``seen``: its cursor and ``accepted_at``, read before
        the hook's time and its wait; its calls had ended by then). One handed out during
        the wait, or since, is another extractor's. Told by the state file, not by
        comparing its ``accepted_at`` with the hook's clock: a clock stepped back would
        deny a save its own snapshot. A spill of the release before read ``accepted_at``
        after its wait, so that release's check stays for it: handed out before the hook's
        time too (else a spill pending across the upgrade completed another extractor's
        snapshot)."""
        if not self.late:
            return True
        if self.seen is None or "cursor" not in self.state:
            return False
        cursor, at = self.state["cursor"], self.state["accepted_at"]
        if self.seen.cursor is None:
            # (``int(at * 1000) <= at_ms`` as that release had it, but no OverflowError for
            # an ``accepted_at`` near the largest float: it would fail every holder.)
            return at == self.seen.accepted_at and at * 1000 < self.origin.at_ms + 1
        return (cursor, at) == self.seen

    def _fetched(self) -> None:
        """A sub-agent fetched the handed-out snapshot: it holds it now (its stop completes
        it, ``snapshot.complete``)."""
        if self.origin.agent_id and "cursor" in self.state and self._same_snapshot():
            self.state["agent_id"] = self.origin.agent_id

    def _drain(self, bare: str, started: int | None) -> None:
        """A successful save or ``extraction_done``: drop the records it dealt with."""
        same = self._same_snapshot()
        if bare == "memory_remember" and not self.origin.subagent:
            self.records = self._unseen_by(started)
            if same:
                self.state = {}
        elif "cursor" in self.state and same:
            self.records = [r for r in self.records if seq_of(r) > self.state["cursor"]]
            self.state = {}
        else:
            return  # no snapshot handed out (or another one since it spilled): nothing
        self.queued = _use_ids(self.records)
        self.drained = True

    def _unseen_by(self, started: int | None) -> list[dict[str, Any]]:
        """The records whose results the agent had not seen when it saved.

        The agent saved what it had learned: the calls it had seen the results of. Calls of
        the same step ran beside the save (this batch, or opencode's siblings that ended
        after the save started): their results were not seen, so they stay queued; so do
        calls that ended after this batch did (queued by hooks that took the lock first)."""
        return [
            r
            for r in self.records
            if id(r) in self.own_ids
            or (started is not None and r.get("ended_at", 0) >= started)
            or r.get("ended_at", 0) > self.origin.at_ms
        ]

    def _queue(self, record: dict[str, Any]) -> None:
        """Append the call's record, unless its ``tool_use_id`` is already queued."""
        use_id = record.get("tool_use_id")
        if isinstance(use_id, str) and use_id in self.queued:
            if self.late:
                # Merged already (a holder died before deleting the spill): still this
                # batch's own call, which a save beside it must not drain.
                self._own(*(r for r in self.records if r.get("tool_use_id") == use_id))
            return
        record["seq"] = self.next_seq
        self.next_seq += 1
        self._own(record)
        self.records.append(record)
        if isinstance(use_id, str):
            self.queued.add(use_id)
        if len(self.records) > 2 * _KEPT_IN_BATCH:
            # Only the newest MAX_RECORDS are written: a batch of thousands of calls must
            # not make each later save's scan, or the memory held, grow with it.
            # (``queued`` keeps the ids cut here: a repeat is still one.)
            self.records = self.records[-_KEPT_IN_BATCH:]

    def _own(self, *records: dict[str, Any]) -> None:
        self.own.extend(records)
        self.own_ids.update(id(record) for record in records)

    def save(self, count: Path) -> None:
        """Write what changed: the queue, the nudge count, the snapshot state and the
        project; then delete the replayed spills and their marker. A failure (or a death)
        before that leaves the marker: the next holder merges the spills again, and skips
        their calls still queued (``tool_use_id``)."""
        self._write(count)
        if self.took:
            from thatch.frontend.queue.spill import forget_spills  # imported by the take

            forget_spills(self.jsonl, self.spills)

    def _write(self, count: Path) -> None:
        # The records before the snapshot state (as ``snapshot.complete`` writes them): a
        # holder dying between leaves a drained snapshot's state with none of its records,
        # which the next holder's replay of the same spilled save completes again. The
        # other way round the state went first, the replayed save no longer matched it, and
        # the snapshot's records were pending again (extracted twice).
        if self.drained or [seq_of(record) for record in self.records] != self.original:
            write_records(self.jsonl, self.records)
        # else nothing changed; leave the file (and its mtime) alone
        if self.drained:
            unlink(count)
        if self.state != self.original_state or (self.drained and not self.state):
            if self.state:
                write_atomic(self.state_file, compact(self.state))
            else:
                unlink(self.state_file)
        if self.project:
            record_project(self.jsonl, self.project)


def _use_ids(records: Iterable[Mapping[str, Any]]) -> set[str]:
    return {
        use_id
        for record in records
        if isinstance(use_id := record.get("tool_use_id"), str) and use_id
    }
