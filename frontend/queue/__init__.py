"""The extraction queue: one JSONL file of recent tool calls per agent session.

Tool hooks append here on every tool call, so this package imports only the standard
library and ``thatch.frontend.identifiers`` (docs/hooks.md §rules), and sits below the
tools and the hooks (tests/test_layers.py). Its modules, lowest first:

- ``limits``: the bounds of everything stored (hosts pass names, ids and values as they
  come) and the queue's times;
- ``records``: the record made from a host's call, bounded when written and when read;
- ``files``: where a session's files are, the lock, and every read and write of them
  (atomic replaces: readers, which never lock, see the old file or the new one), and the
  deletion of week-old files;
- ``classify``: which tool a call is (thatch's own, a host meta-tool, other) and whether
  a draining call succeeded;
- ``spill``: the files of batches whose hook found the session's lock busy;
- ``append``: a batch of tool calls queued, step by step, and the spilled ones merged by
  the lock's next holder (every module below calls ``replay_spills`` first);
- ``counts``: the nudge count and the once-only unreadable-payload warning;
- ``carry``: a session's last calls carried to the project's next session, and the daily
  pass (``cleanup``) that carries those of sessions whose host died before their end;
- ``snapshot``: the records handed to an extractor (accept, complete, requeue);
- ``payload``: the ``get_extraction_payload`` answer;
- ``held_nudge``: Cursor's prompt nudge, kept for the session's next tool call.

A session id the extraction tools would refuse (``session_id_problem``) gets no queue at
all, hence no nudge. Callers use the names below; the modules import one another, never
this package.
"""

from __future__ import annotations

from thatch.frontend.identifiers import session_id_problem
from thatch.frontend.queue.append import append_calls, merge_spilled
from thatch.frontend.queue.carry import adopt_carried, carry_over, cleanup, project_key
from thatch.frontend.queue.classify import (
    DRAINING_TOOLS,
    SERVED_TOOLS,
    call_succeeded,
    classify,
)
from thatch.frontend.queue.counts import increment_count, read_count, warn_unreadable_once
from thatch.frontend.queue.files import LockBusy, QueueError, queue_paths, safe_name
from thatch.frontend.queue.limits import (
    ACCEPTED_TTL_SECONDS,
    ID_LIMIT,
    KEY_LIMIT,
    MAX_RECORDS,
    OUTPUT_LIMIT,
    QUEUE_BYTES_LIMIT,
    RECORD_CHARS_LIMIT,
    TITLE_LIMIT,
    TOOL_NAME_LIMIT,
)
from thatch.frontend.queue.payload import build_payload
from thatch.frontend.queue.records import make_record, response_text
from thatch.frontend.queue.snapshot import (
    accept,
    complete,
    consume,
    nudge_records,
    peek_records,
    requeue,
)

__all__ = [
    "ACCEPTED_TTL_SECONDS",
    "DRAINING_TOOLS",
    "ID_LIMIT",
    "KEY_LIMIT",
    "MAX_RECORDS",
    "OUTPUT_LIMIT",
    "QUEUE_BYTES_LIMIT",
    "RECORD_CHARS_LIMIT",
    "SERVED_TOOLS",
    "TITLE_LIMIT",
    "TOOL_NAME_LIMIT",
    "LockBusy",
    "QueueError",
    "accept",
    "adopt_carried",
    "append_calls",
    "build_payload",
    "call_succeeded",
    "carry_over",
    "classify",
    "cleanup",
    "complete",
    "consume",
    "increment_count",
    "make_record",
    "merge_spilled",
    "nudge_records",
    "peek_records",
    "project_key",
    "queue_paths",
    "read_count",
    "requeue",
    "response_text",
    "safe_name",
    "session_id_problem",
    "warn_unreadable_once",
]
