"""Queueing a batch of tool calls (docs/hooks.md §append): what every tool hook does.

``append_calls`` takes the session's lock, reads its queue and snapshot state once, lets
each call of the batch change them (``_Batch.take``: queue it, drain on a save, or name a
fetch's sub-agent as the snapshot's holder) and writes back only what changed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from thatch.frontend.identifiers import session_id_problem
from thatch.frontend.queue.classify import DRAINING_TOOLS, call_succeeded, classify
from thatch.frontend.queue.files import (
    ensure_dir,
    locked,
    queue_paths,
    read_lines,
    read_state,
    record_project,
    state_path,
    unlink,
    write_atomic,
    write_records,
)
from thatch.frontend.queue.limits import ID_LIMIT
from thatch.frontend.queue.records import call_time, compact, make_record, seq_of

__all__ = [
    "append_calls",
]

# Records a batch keeps in hand (the file keeps the newest MAX_RECORDS of them).
_KEPT_IN_BATCH = 1000


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
    (``carry.carry_abandoned``)."""
    if session_id_problem(session_id) is not None:
        return  # the tools would refuse this id: a queue for it could never be fetched
    calls = list(calls)
    if not calls:
        return
    jsonl, count, lock = queue_paths(directory, session_id)
    ensure_dir(directory)
    with locked(lock):
        batch = _Batch(jsonl, session_id, subagent=subagent, agent_id=agent_id)
        for call in calls:
            batch.take(call)
        batch.save(count)
        if project and batch.appended:
            record_project(jsonl, project)


class _Batch:
    """One ``append_calls`` under the session's lock: the queue and the snapshot state as
    read, changed call by call, then written back once."""

    def __init__(self, jsonl: Path, session_id: str, *, subagent: bool, agent_id: str) -> None:
        self.jsonl = jsonl
        self.state_file = state_path(jsonl)
        self.session_id = session_id
        self.subagent = subagent
        self.agent_id = agent_id
        self.records = read_lines(jsonl)  # the queue as it will be written
        self.state = read_state(self.state_file)
        self.original = [seq_of(record) for record in self.records]
        self.next_seq = max([*self.original, self.state.get("cursor", 0)]) + 1
        self.now_ms = time.time_ns() // 1_000_000  # the end time of calls the host gave none
        self.appended: list[dict[str, Any]] = []  # the records this batch queued
        self.appended_ids: set[int] = set()  # their id()s: kept alive by ``appended``
        self.queued = _use_ids(self.records)
        self.drained = False
        self.holder = False  # the state names a new holder of the snapshot

    def take(self, call: Mapping[str, Any]) -> None:
        """One call of the batch: a fetch, a draining save, or a call to queue."""
        tool = call.get("tool_name")
        if not isinstance(tool, str) or not tool.strip():
            return
        kind, bare = classify(tool, call.get("tool_input"))
        if bare == "get_extraction_payload":
            self._fetched(call)
        elif kind == "thatch" and bare in DRAINING_TOOLS:
            self._drain(call, bare, aggregated=bare != classify(tool)[1])
        elif kind == "other":
            self._queue(call)
        # thatch's other tools and host meta-tools are never queued

    def _fetched(self, call: Mapping[str, Any]) -> None:
        """A sub-agent fetched the handed-out snapshot: it holds it now (its stop completes
        it, ``snapshot.complete``)."""
        if (
            self.agent_id
            and "cursor" in self.state
            and call_succeeded(call, "get_extraction_payload")
        ):
            self.state["agent_id"] = self.agent_id[:ID_LIMIT]
            self.holder = True

    def _drain(self, call: Mapping[str, Any], bare: str, *, aggregated: bool) -> None:
        """A successful save or ``extraction_done``: drop the records it dealt with."""
        if not call_succeeded(call, bare, aggregated):
            return  # a failed save drains nothing (and is not queued)
        if bare == "memory_remember" and not self.subagent:
            self.records = self._unseen_by(call)
        elif "cursor" in self.state:
            self.records = [r for r in self.records if seq_of(r) > self.state["cursor"]]
        else:
            return  # no snapshot handed out: nothing to complete
        self.queued = _use_ids(self.records)
        self.state = {}
        self.drained = True

    def _unseen_by(self, save: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The records whose results the agent had not seen when it saved.

        The agent saved what it had learned: the calls it had seen the results of. Calls of
        the same step ran beside the save (this batch, or opencode's siblings that ended
        after the save started): their results were not seen, so they stay queued."""
        started = call_time(save, "started_at")
        return [
            r
            for r in self.records
            if id(r) in self.appended_ids
            or (started is not None and r.get("ended_at", 0) >= started)
        ]

    def _queue(self, call: Mapping[str, Any]) -> None:
        """Append the call's record, unless its ``tool_use_id`` is already queued."""
        use_id = call.get("tool_use_id")
        use_id = use_id[:ID_LIMIT] if isinstance(use_id, str) else use_id
        if isinstance(use_id, str) and use_id in self.queued:
            return
        record = make_record(self.session_id, call, self.next_seq, self.now_ms)
        self.appended.append(record)
        self.appended_ids.add(id(record))
        self.records.append(record)
        if isinstance(record.get("tool_use_id"), str):
            self.queued.add(record["tool_use_id"])
        self.next_seq += 1
        if len(self.records) > 2 * _KEPT_IN_BATCH:
            # Only the newest MAX_RECORDS are written: a batch of thousands of calls must
            # not make each later save's scan, or the memory held, grow with it.
            # (``queued`` keeps the ids cut here: a repeat is still one.)
            self.records = self.records[-_KEPT_IN_BATCH:]

    def save(self, count: Path) -> None:
        """Write what changed: the queue, the nudge count and the snapshot state."""
        if self.drained:
            unlink(count)
            unlink(self.state_file)
        elif self.holder:
            write_atomic(self.state_file, compact(self.state))
        if not self.drained and [seq_of(record) for record in self.records] == self.original:
            return  # nothing changed; leave the file (and its mtime) alone
        write_records(self.jsonl, self.records)


def _use_ids(records: Iterable[Mapping[str, Any]]) -> set[str]:
    return {
        use_id
        for record in records
        if isinstance(use_id := record.get("tool_use_id"), str) and use_id
    }
