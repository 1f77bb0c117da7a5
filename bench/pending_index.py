"""What m030 (the index of each store's pending rows) costs to build on open, and what a
store's pending count costs beside another store's backlog (prints figures; not a test).

    .venv/bin/python bench/pending_index.py [--rows 100000] [--repeats 5]

Two earlier-release files (tests/support/earlier_release.py: v0.1.30's ``entries``
layout, ``--rows`` memories of ~90 words over four stores): one whose memories were
never embedded (all pending), one whose memories all are (none pending). Each is opened
once with ``Store.open`` (every migration), then, per repeat, m030's index is dropped and
its record deleted, and the open's migration (``schema.init_schema``: one ``BEGIN
IMMEDIATE`` transaction, the memory map on, the ``CREATE INDEX``, the record, the
commit) is timed: the write lock a process opening that file holds for m030. The file
is warm in the page cache (it was just written and read). Then, on the all-pending file,
the pending count of a store with none (an empty project store) and of one store with a
quarter of the backlog, capped at 10,000 as the session start and recall count, with
the index and with it dropped (the plan SQLite picks without it, m005's index).
Other processes may share the machine: the load average is printed beside the figures.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._common import median_of, print_table  # noqa: E402
from tests.support import earlier_release  # noqa: E402
from thatch.frontend.store import db, schema  # noqa: E402
from thatch.frontend.store.memory_store import Store  # noqa: E402
from thatch.frontend.store.migrations.flat_reads import PENDING_BY_STORE  # noqa: E402

MIGRATION = "m030_pending_by_store"
EMPTY = "benchproj"  # a project store with no memory, hence none pending
CAP = 10_000


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def earlier_file(path: Path, rows: int, *, pending: bool) -> None:
    earlier_release.build(path, rows, legacy=False)
    if pending:
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE entries SET embedding = NULL, model = NULL")
        conn.close()
    Store.open(path).close()  # every migration and backfill, m030 included


def unmake(conn: sqlite3.Connection) -> None:
    with db.atomic(conn):
        conn.execute(f"DROP INDEX IF EXISTS {PENDING_BY_STORE}")
        conn.execute(f"DELETE FROM {schema.MIGRATIONS_TABLE} WHERE name = ?", (MIGRATION,))


def build_times(path: Path, repeats: int) -> tuple[list[float], int]:
    """m030's transaction, seconds per repeat; and the pages its index takes (SQLite's
    ``dbstat`` table)."""
    conn = db.connect(path)
    try:
        took = []
        for _ in range(repeats):
            unmake(conn)
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            start = time.perf_counter()
            done = schema.init_schema(conn, "2026-12-06T00:00:00.000Z")
            took.append(time.perf_counter() - start)
            assert done == [MIGRATION], done
        (pages,) = conn.execute(
            "SELECT count(*) FROM dbstat WHERE name = ?", (PENDING_BY_STORE,)
        ).fetchone()
        return took, int(pages)
    finally:
        conn.close()


def counts(path: Path, repeats: int) -> list[list[str]]:
    store = Store.open(path)
    try:
        busy = earlier_release.STORES[1]
        asked = {
            f"pending ({EMPTY}: none), capped": lambda: store.pending_count(EMPTY, up_to=CAP),
            f"pending ({EMPTY}: none), exact": lambda: store.pending_count(EMPTY),
            f"recall pending ([{EMPTY}]), capped": lambda: store.pending_count_in(
                [EMPTY], up_to=CAP
            ),
            f"pending ({busy}: a quarter), capped": lambda: store.pending_count(busy, up_to=CAP),
            f"pending_memories(store={EMPTY})": lambda: store.pending_memories(store=EMPTY),
        }
        with_index = {name: median_of(repeats, call) for name, call in asked.items()}
        store.conn.execute(f"DROP INDEX {PENDING_BY_STORE}")
        without = {name: median_of(repeats, call) for name, call in asked.items()}
        return [
            [name, f"{without[name] * 1000:.2f}", f"{with_index[name] * 1000:.2f}"]
            for name in asked
        ]
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for pending in (True, False):
            path = Path(scratch) / f"{'pending' if pending else 'embedded'}.db"
            earlier_file(path, args.rows, pending=pending)
            took, pages = build_times(path, args.repeats)
            size = path.stat().st_size / 1e6
            rows.append(
                [
                    f"{args.rows:,} {'pending' if pending else 'embedded (none pending)'}",
                    f"{size:.0f} MB",
                    f"{min(took) * 1000:.0f}",
                    f"{sorted(took)[len(took) // 2] * 1000:.0f}",
                    f"{max(took) * 1000:.0f}",
                    f"{pages:,}",
                ]
            )
        print_table(
            f"m030's transaction on open (warm page cache; load {loadavg()})",
            ["file", "size", "min ms", "median ms", "max ms", "index pages"],
            rows,
        )
        counted = counts(Path(scratch) / "pending.db", args.repeats * 2 + 1)
    print_table(
        f"{args.rows:,} pending over four stores: median ms (load {loadavg()})",
        ["count", "m005's index only", "with m030's"],
        counted,
    )


if __name__ == "__main__":
    main()
