"""The hygiene counts of every session start on a store where everything needs tending:
each must cost the same whatever the store's size (prints figures; not a test).

    .venv/bin/python bench/hygiene_counts.py [--rows 100000] [--repeats 9]

One SQLite file, filled by direct inserts: the project store holds ``--rows`` memories,
all neither updated nor recalled in 90+ days, all embedded with another model than the
active one, and each a conflict version team sync kept; the global store holds
``--rows`` memories not embedded yet. For each count, the median ms exact (``up_to``
None: what ``thatch hygiene`` pays) and capped at ``hygiene.COUNTED_UP_TO`` (what the
session start and the UI pay), then the report as the reminder computes it in-process
(``hygiene()``, the git steps left out: the directory is not a checkout), both ways, and
the ``pending_count`` gate the reminder asks before it (every store, any at all), and the
pending count under every ``memory_recall`` answer (the default scope, and the project
store alone; capped at ``operations.PENDING_COUNTED_UP_TO``). Before the cap, these
counts read every index entry they counted: 8-25 ms each at 100k. The project's pending
count (it has none) stepped over global's pending rows, capped or not (7-17 ms), until
m030 gave each store's pending rows an index led by the store (0.01 ms). The conflict
count and listing stay a join, 15-25 ms capped.

The duplicate check's progress ("duplicates: counting (<checked> of <total> checked)")
counted every embedded memory and every checked mark, 6-10 ms at 100k, at every session
start: with m031's table of unchecked memories the session start asks whether any is
unchecked (one row), and only while some are counts them and the embedded memories up
to the cap. Measured with every project memory checked, and with half of them. The
engine counts (``--engine-rows`` predictions embedded with the active model, as many
behaviors with another) read every row of the four engine tables, capped or not (a
healthy row is read to be ruled out): m032 indexes the rows they count. Last, what the
two migrations cost this file once (``BUILDS_INDEXES``: never in a hook).

To measure another checkout (the code before a change), put its package first:
``PYTHONPATH=/tmp/before .venv/bin/python bench/hygiene_counts.py`` where /tmp/before/thatch
is that checkout; a checkout without ``up_to`` prints its exact figures only.
"""

from __future__ import annotations

import argparse
import inspect
import sys
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._common import median_of, print_table  # noqa: E402
from thatch.frontend.store import db  # noqa: E402
from thatch.frontend.store.memory_store import Store  # noqa: E402
from thatch.frontend.tools import hygiene as report  # noqa: E402

PROJECT = "benchproj"
GLOBAL = "global"
ACTIVE = "active/model"
OTHER = "other/model"
OLD = "2024-01-01T00:00:00.000Z"  # long before NOW: every memory is stale
NOW = datetime(2026, 12, 1, tzinfo=UTC)
# Any usable embedding will do (a whole number of float32s): the counts never read it.
VECTOR = bytes(16)


def fill(store: Store, rows: int) -> None:
    """The project store's stale, other-model conflict versions and global's pending rows,
    in one transaction."""
    conn = store.conn
    with db.atomic(conn):
        conn.executemany("INSERT OR IGNORE INTO stores (name) VALUES (?)", [(PROJECT,), (GLOBAL,)])
        conn.executemany(
            "INSERT INTO entries (slug, store, label, content, embedding, model, created_at, "
            "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                (f"m{i}", PROJECT, f"m{i}", f"# m{i}\n\nmemory {i}", VECTOR, OTHER, OLD, OLD)
                for i in range(rows)
            ),
        )
        conn.executemany(
            "INSERT INTO entries (slug, store, label, content, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            ((f"g{i}", GLOBAL, f"g{i}", f"# g{i}\n\npending {i}", OLD, OLD) for i in range(rows)),
        )
        conn.execute(
            "INSERT INTO team_conflict_versions (store, slug, conflict_of) "
            "SELECT store, slug, slug FROM entries WHERE store = ?",
            (PROJECT,),
        )


def fill_engines(store: Store, rows: int) -> None:
    """``rows`` predictions (and their matchers) embedded with the active model, as many
    behaviors (and matchers) with another: what the engine counts read."""
    conn = store.conn
    with db.atomic(conn):
        for table, column, model in (
            ("prediction_matchers", "description", ACTIVE),
            ("predictions", "statement", ACTIVE),
            ("behavior_matchers", "description", OTHER),
            ("behaviors", "statement", OTHER),
        ):
            conn.executemany(
                f"INSERT INTO {table} (id, store, {column}, embedding, model, created_at, "
                "updated_at) VALUES (?, ?, 'x', ?, ?, ?, ?)",
                ((f"{table}-{i}", GLOBAL, VECTOR, model, OLD, OLD) for i in range(rows)),
            )


def check_marks(store: Store, every: int | None) -> None:
    """The project's memories marked checked: each ``every``-th one left unchecked
    (None: all checked)."""
    conn = store.conn
    with db.atomic(conn):
        conn.execute("DELETE FROM _thatch_dup_scanned WHERE store = ?", (PROJECT,))
        keep = "" if every is None else f" AND rowid % {every} != 0"
        conn.execute(
            "INSERT INTO _thatch_dup_scanned (store, slug) SELECT store, slug FROM entries "
            f"WHERE store = ?{keep}",
            (PROJECT,),
        )


def engine_counts(store: Store, up_to: int | None) -> object:
    if "up_to" not in inspect.signature(report.EngineHygiene.of).parameters:
        return report.EngineHygiene.of(store, ACTIVE)
    return report.EngineHygiene.of(store, ACTIVE, up_to)


def progress_counts(store: Store, args: argparse.Namespace, cap: int | None) -> list[list[str]]:
    """The duplicate progress, all checked and half checked, and the engine counts."""
    capped = "up_to" in inspect.signature(Store.duplicate_summary).parameters
    rows = []
    for label, every in (("all checked", None), ("half checked", 2)):
        check_marks(store, every)
        exact = median_of(args.repeats, lambda: store.duplicate_summary(PROJECT, 0.85))
        flat = "-"
        if capped:
            took = median_of(
                args.repeats, partial(store.duplicate_summary, PROJECT, 0.85, up_to=cap)
            )
            flat = f"{took * 1000:.2f}"
        rows.append([f"duplicate progress ({label})", f"{exact * 1000:.2f}", flat])
    exact = median_of(args.repeats, lambda: engine_counts(store, None))
    flat = median_of(args.repeats, lambda: engine_counts(store, cap))
    rows.append(["engine counts (4 tables)", f"{exact * 1000:.2f}", f"{flat * 1000:.2f}"])
    return rows


def migration_costs(store: Store, args: argparse.Namespace) -> list[list[str]]:
    """m031's fill and m032's indexes on this file, each in a transaction rolled back."""
    from thatch.frontend.store.migrations import duplicates as dup_migration
    from thatch.frontend.store.migrations import engines as engine_migration

    rows = []
    conn = store.conn
    for name, owner, drop in (
        ("m031_duplicate_unchecked", dup_migration, "DROP TABLE IF EXISTS _thatch_dup_unchecked"),
        ("m032_engine_embeddings", engine_migration, None),
    ):
        step = getattr(owner, name, None)
        if step is None:
            continue

        def once(step: Callable[..., None] = step, drop: str | None = drop) -> None:
            conn.execute("BEGIN")
            try:
                if drop:
                    conn.execute(drop)
                else:
                    for (index,) in conn.execute(
                        "SELECT name FROM sqlite_master WHERE type = 'index' "
                        "AND name LIKE 'thatch\\_%\\_embedded\\_model' ESCAPE '\\' "
                        "OR name IN ('thatch_prediction_matchers_pending', "
                        "'thatch_predictions_pending', 'thatch_behavior_matchers_pending', "
                        "'thatch_behaviors_pending')"
                    ).fetchall():
                        conn.execute(f"DROP INDEX {index}")
                step(conn)
            finally:
                conn.execute("ROLLBACK")

        took = median_of(max(3, args.repeats // 3), once)
        rows.append([f"{name} (once)", f"{took * 1000:.1f}", "-"])
    return rows


def counts(store: Store) -> dict[str, Callable[[int | None], object]]:
    """Each count the report takes, given its ``up_to``."""
    return {
        "stale (project)": lambda up_to: store.stale_count(PROJECT, NOW, up_to=up_to),
        "other model (project)": lambda up_to: store.model_mismatch_count(
            PROJECT, ACTIVE, up_to=up_to
        ),
        "pending (global)": lambda up_to: store.pending_count(GLOBAL, up_to=up_to),
        "pending (project: none)": lambda up_to: store.pending_count(PROJECT, up_to=up_to),
        "conflicts (project)": lambda up_to: store.conflict_versions(
            PROJECT, report.CONFLICTS_NAMED, up_to=up_to
        ),
        "pending gate (every store)": lambda up_to: store.pending_count(
            up_to=None if up_to is None else 0
        ),
        # memory_recall's "(<n> memories are not indexed yet …)", the default scope.
        "recall pending (project+global)": lambda up_to: store.pending_count_in(
            [PROJECT, GLOBAL], up_to=up_to
        ),
        "recall pending (project only)": lambda up_to: store.pending_count_in(
            [PROJECT], up_to=up_to
        ),
    }


def exact_counts(store: Store) -> dict[str, Callable[[], object]]:
    """The same counts through the calls a checkout before ``up_to`` has."""
    return {
        "stale (project)": lambda: store.stale_count(PROJECT, NOW),
        "other model (project)": lambda: store.model_mismatch_count(PROJECT, ACTIVE),
        "pending (global)": lambda: store.pending_count(GLOBAL),
        "pending (project: none)": lambda: store.pending_count(PROJECT),
        "conflicts (project)": lambda: store.conflict_versions(PROJECT, report.CONFLICTS_NAMED),
        "pending gate (every store)": lambda: store.pending_count(),
        "recall pending (project+global)": lambda: store.pending_count_in([PROJECT, GLOBAL]),
        "recall pending (project only)": lambda: store.pending_count_in([PROJECT]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--engine-rows", type=int, default=100_000)
    args = parser.parse_args()
    capped = "up_to" in inspect.signature(Store.stale_count).parameters
    cap = getattr(report, "COUNTED_UP_TO", None)
    with tempfile.TemporaryDirectory() as scratch:
        store = Store.open(Path(scratch) / "thatch.db")
        try:
            fill(store, args.rows)
            fill_engines(store, args.engine_rows)
            check_marks(store, None)
            directory = Path(scratch) / "project"  # not a checkout: no git steps
            directory.mkdir()

            def whole(**kw: object) -> object:
                return report.hygiene(
                    store,
                    PROJECT,
                    directory,
                    ACTIVE,
                    now=NOW,
                    list_branches=lambda _dir: [],
                    env={},
                    refresh=report.AnchorRefresh(renames=False),
                    **kw,  # type: ignore[arg-type]
                )

            rows = []
            if capped:
                for name, count in counts(store).items():
                    exact = median_of(args.repeats, lambda c=count: c(None))
                    flat = median_of(args.repeats, lambda c=count: c(cap))
                    rows.append([name, f"{exact * 1000:.2f}", f"{flat * 1000:.2f}"])
                exact = median_of(args.repeats, lambda: whole(up_to=None))
                flat = median_of(args.repeats, lambda: whole())
                rows.append(["hygiene() in-process", f"{exact * 1000:.1f}", f"{flat * 1000:.1f}"])
                print(f"report at the cap: {whole().report}")
            else:
                for name, call in exact_counts(store).items():
                    rows.append([name, f"{median_of(args.repeats, call) * 1000:.2f}", "-"])
                took = median_of(args.repeats, whole)
                rows.append(["hygiene() in-process", f"{took * 1000:.1f}", "-"])
            rows += progress_counts(store, args, cap)
            rows += migration_costs(store, args)
        finally:
            store.close()
    print_table(
        f"{args.rows:,} stale other-model conflict versions (all checked for duplicates), "
        f"{args.rows:,} pending in global, {args.engine_rows:,} rows in each engine table: "
        f"median ms (cap {cap})",
        ["count", "exact", "capped"],
        rows,
    )


if __name__ == "__main__":
    main()
