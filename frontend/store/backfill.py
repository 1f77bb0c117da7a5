"""Backfills (docs/database.md §backfills): work a migration leaves to do for existing rows.

A migration that must read every row (fill a new index, a new table) changes the schema in
its own short transaction and calls ``schedule``; ``run`` then does the row work in many
short write transactions, so no other writer waits on the lock for long, whatever the size
of the store. Progress is recorded in the database with each transaction (a row of
``_thatch_backfills``, deleted when done), so a crash or kill mid-way loses at most one
transaction's work and any later process resumes; several processes running the same
backfill at once share it, each transaction continuing from where the last one stopped.

A ``Step`` does one bounded piece: ``step(conn, after, rows)`` handles up to ``rows`` rows
whose key comes after ``after`` (``None``: from the start), inside the caller's
transaction, and returns the last key it handled, or ``None`` when none was left. Keys
are JSON values (a list of columns, say); a step should walk a unique key in index order,
not ``rowid`` (VACUUM may renumber rowids). Rows other writers insert, change or delete
meanwhile are the migration's triggers' business: a step must skip rows they already
handled, so that each row ends up handled exactly once.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from thatch.frontend.errors import DatabaseBusyError
from thatch.frontend.store.db import atomic, is_read_only

__all__ = ["BACKFILLS_TABLE", "Step", "pending", "run", "run_one", "schedule"]

BACKFILLS_TABLE = "_thatch_backfills"
Step = Callable[[sqlite3.Connection, Any, int], Any]

# Rows per step call; a transaction calls its step until WORK_S has passed (so each holds
# the lock for about WORK_S plus one step, however loaded the machine), then commits and
# leaves the lock free for PAUSE_S. A waiting writer's busy handler retries every 100 ms
# once it has waited ~0.25 s, so a free window of 100 ms or more is always seen by it:
# a writer with a 5 s busy timeout gets in after at most about one transaction.
STEP_ROWS = 100
WORK_S = 0.1
PAUSE_S = 0.12


def schedule(conn: sqlite3.Connection, name: str) -> None:
    """Record backfill ``name`` as to do from the start (inside the migration's transaction)."""
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {BACKFILLS_TABLE} (name TEXT PRIMARY KEY, after TEXT)"
    )
    conn.execute(
        f"INSERT INTO {BACKFILLS_TABLE} (name, after) VALUES (?, NULL) "
        "ON CONFLICT (name) DO UPDATE SET after = NULL",
        (name,),
    )


def pending(conn: sqlite3.Connection) -> set[str]:
    """The names of the backfills not finished yet (a read: no write lock)."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (BACKFILLS_TABLE,)
    ).fetchone()
    if exists is None:
        return set()
    return {row[0] for row in conn.execute(f"SELECT name FROM {BACKFILLS_TABLE}")}


def run_one(
    conn: sqlite3.Connection,
    name: str,
    step: Step,
    *,
    rows: int = STEP_ROWS,
    work_s: float = WORK_S,
    timer: Callable[[], float] = time.monotonic,
) -> bool:
    """One write transaction of backfill ``name``; True when it is finished (by anyone)."""
    with atomic(conn):
        row = conn.execute(
            f"SELECT after FROM {BACKFILLS_TABLE} WHERE name = ?", (name,)
        ).fetchone()
        if row is None:  # another process finished it
            return True
        after = None if row[0] is None else json.loads(row[0])
        started = timer()
        while True:
            after = step(conn, after, rows)
            if after is None:
                conn.execute(f"DELETE FROM {BACKFILLS_TABLE} WHERE name = ?", (name,))
                return True
            if timer() - started >= work_s:
                break
        conn.execute(
            f"UPDATE {BACKFILLS_TABLE} SET after = ? WHERE name = ?", (json.dumps(after), name)
        )
    return False


def run(
    conn: sqlite3.Connection,
    steps: Mapping[str, Step],
    *,
    rows: int = STEP_ROWS,
    work_s: float = WORK_S,
    pause_s: float = PAUSE_S,
    timer: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
    guard: Callable[[], AbstractContextManager[object]] = nullcontext,
) -> set[str]:
    """Run every pending backfill named in ``steps`` to its end; returns those finished.

    Each transaction runs inside ``guard()`` (a lock serialising the connection's users,
    for a backfill on a thread beside them); between two, ``sleep(pause_s)`` with the lock
    free, and a true result of it stops the run (``threading.Event.wait``: asked to stop).
    Stops early too, leaving the rest for a later open, when the lock is not had within
    the busy timeout or the file cannot be written. Backfills this release does not know
    (a newer one scheduled them) are left alone.
    """
    finished: set[str] = set()
    with guard():
        names = sorted(pending(conn) & steps.keys())
    for name in names:
        try:
            while True:
                with guard():
                    done = run_one(conn, name, steps[name], rows=rows, work_s=work_s, timer=timer)
                if done:
                    break
                if sleep(pause_s):  # the lock stays free meanwhile: waiting writers get in
                    return finished
        except DatabaseBusyError:
            return finished
        except sqlite3.OperationalError as error:
            if is_read_only(error):
                return finished
            raise
        finished.add(name)
    return finished
