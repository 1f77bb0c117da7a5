"""Recall telemetry of a linked store, sent to the hub as events (docs/team.md §telemetry).

The m020 trigger queues an event in ``team_recalls`` each time a recall stamps a row of a
linked store; the sync process sends them with ``RecordRecalls`` in batches of the hub's
maximum and deletes a batch once the hub answered it. The hub appends them to
``recall_events`` (never an update of its row), so two machines recalling one memory at
once never conflict. Telemetry is not the memory: an event the hub cannot take (a
malformed time or name, from an earlier release's row) is dropped, never retried forever.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Sequence
from typing import Protocol

from thatch.frontend.store.db import atomic
from thatch.frontend.store.migrations.team import RECALLS_TABLE
from thatch.frontend.timefmt import format_timestamp, parse_timestamp
from thatch.hub.client import HubRefused
from thatch.hub.v1 import hub_pb2

__all__ = ["EVENTS_MAX", "RecallSink", "send_recalls", "waiting"]

EVENTS_MAX = 1_000  # the hub's limit per RecordRecalls (hub.servicer.HubLimits)
NAME_MAX = 200  # the hub's limit on a store name or slug
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class RecallSink(Protocol):
    def record_recalls(self, events: Sequence[hub_pb2.RecallEvent]) -> int: ...


def waiting(conn: sqlite3.Connection, store: str) -> int:
    with atomic(conn, immediate=False):
        row = conn.execute(f"SELECT count(*) FROM {RECALLS_TABLE} WHERE store = ?", (store,))
        return int(row.fetchone()[0])


def _event(store: str, slug: str, at: str) -> hub_pb2.RecallEvent | None:
    """The event as the hub takes it, or None when it would refuse it."""
    if not slug or len(slug) > NAME_MAX or _CONTROL.search(slug):
        return None
    try:
        when = format_timestamp(parse_timestamp(at))
    except ValueError:
        return None
    return hub_pb2.RecallEvent(store=store, slug=slug, at=when)


def send_recalls(
    conn: sqlite3.Connection,
    hub: RecallSink,
    store: str,
    *,
    batch: int = EVENTS_MAX,
    stop: threading.Event | None = None,
) -> int:
    """Send ``store``'s queued recall events, oldest first; how many were sent. A batch is
    deleted only after the hub answered it (a lost answer sends it again: a recall
    counted twice, never lost); one the hub refuses as malformed is dropped."""
    sent = 0
    while stop is None or not stop.is_set():
        with atomic(conn, immediate=False):
            rows = conn.execute(
                f"SELECT id, slug, at FROM {RECALLS_TABLE} WHERE store = ? ORDER BY id LIMIT ?",
                (store, batch),
            ).fetchall()
        if not rows:
            break
        events = [e for e in (_event(store, str(r[1]), str(r[2])) for r in rows) if e is not None]
        try:
            if events:
                hub.record_recalls(events)
                sent += len(events)
        except HubRefused as error:
            if error.kind != "request":
                raise
        with atomic(conn):
            conn.execute(
                f"DELETE FROM {RECALLS_TABLE} WHERE store = ? AND id <= ?",
                (store, int(rows[-1][0])),
            )
        if len(rows) < batch:
            break
    return sent
