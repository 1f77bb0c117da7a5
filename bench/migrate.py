"""Upgrade benchmark (issue 21 §4): how long opening an earlier-release file holds the write lock.

    python bench/migrate.py [--rows 100000] [--repeats 3] [--skip-peers]

Builds an earlier-release database (tests/support/earlier_release.py: its oldest
``entries`` layout, ``--rows`` memories over four stores, ~90 words each, one fixed
384-dim vector), then, on a fresh copy per repeat, opens it with this thatch
(``Store.open``, as ``thatch mcp`` does) and times every write transaction of the open
from ``BEGIN IMMEDIATE`` obtained to ``COMMIT`` returned: each migration's, and the index
backfill's chunks. Prints each one's median over the repeats and the longest hold.
Then (unless ``--skip-peers``) upgrades one more copy while two other processes use it: the
earlier release's INSERT/upsert/DELETE statements in a loop with its 5 s busy timeout, and
a thatch reader searching by vector and text. Prints the writer's slowest statement, both
peers' operations and errors, and checks every write survived and the index is exact.
Other processes may share the machine: the load average is printed beside the figures.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import earlier_release  # noqa: E402
from tests.support.fts import assert_index_in_step  # noqa: E402
from thatch.frontend.store import backfill, db, lexical, schema  # noqa: E402
from thatch.frontend.store.memory_store import Store  # noqa: E402

Holds = list[tuple[str, float]]


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def timed_atomic(holds: Holds, label: list[str]) -> Callable[..., AbstractContextManager[object]]:
    """``db.atomic``, recording (label, seconds from lock obtained to commit returned)."""

    @contextmanager
    def atomic(conn: object, immediate: bool = True) -> Iterator[object]:
        nested = conn.in_transaction  # type: ignore[attr-defined]
        with db.atomic(conn, immediate) as inner:  # type: ignore[arg-type]
            start = time.perf_counter()
            yield inner
        if not nested:
            holds.append((label[0], time.perf_counter() - start))

    return atomic


def one_transaction_m009(conn: sqlite3.Connection) -> None:
    """m009 as it was before its backfill (the baseline): every memory indexed inside the
    migration's own transaction, with FTS5's ``'rebuild'``."""
    schema.m009_fts(conn)
    conn.execute(
        f"INSERT INTO {lexical.DOCS_TABLE} (store, slug, body) "
        "SELECT store, slug, label || char(10) || content FROM entries"
    )
    conn.execute(f"INSERT INTO {lexical.FTS_TABLE} ({lexical.FTS_TABLE}) VALUES ('rebuild')")
    conn.execute(f"DELETE FROM {backfill.BACKFILLS_TABLE}")


@contextmanager
def baseline_m009(active: bool) -> Iterator[None]:
    """The upgrade as before this change (``active``): m009 in one transaction, and
    migrations reading the file without a memory map."""
    saved, mapped = list(schema.MIGRATIONS), schema.MIGRATION_MMAP_BYTES
    if active:
        at = [name for name, _ in schema.MIGRATIONS].index("m009_fts")
        schema.MIGRATIONS[at] = ("m009_fts", one_transaction_m009)
        schema.MIGRATION_MMAP_BYTES = 0
    try:
        yield
    finally:
        schema.MIGRATIONS[:] = saved
        schema.MIGRATION_MMAP_BYTES = mapped


def open_timed(path: Path, *, fill_now: bool = True) -> tuple[Holds, float]:
    """Open ``path`` with every transaction of the upgrade timed; (holds, wall seconds)."""
    holds: Holds = []
    label = ["?"]
    migrations = list(schema.MIGRATIONS)

    def tagged(name: str, migrate: Callable[..., None]) -> Callable[..., None]:
        def run(conn: object) -> None:
            label[0] = name
            migrate(conn)

        return run

    schema.MIGRATIONS[:] = [(name, tagged(name, step)) for name, step in migrations]
    schema.atomic = backfill.atomic = timed_atomic(holds, label)  # type: ignore[assignment]
    try:
        start = time.perf_counter()
        with Store.open(path, fill_now=fill_now):
            wall = time.perf_counter() - start
    finally:
        schema.MIGRATIONS[:] = migrations
        schema.atomic = backfill.atomic = db.atomic
    # Transactions after the last migration are the backfill's.
    last = migrations[-1][0]
    relabelled: Holds = []
    seen_last = False
    for name, seconds in holds:
        if name == last and seen_last:
            name = "backfill transaction"
        seen_last |= name == last
        relabelled.append((name, seconds))
    return relabelled, wall


def fresh_copy(template: Path, copy: Path) -> Path:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{copy}{suffix}").unlink(missing_ok=True)
    shutil.copy(template, copy)
    return copy


def lock_holds(template: Path, work: Path, repeats: int) -> None:
    """Baseline and now alternately, ``repeats`` times each, plus the server's open."""
    kinds = ("before (one-transaction m009)", "now", "now, thatch mcp's open")
    per_name: dict[str, dict[str, list[float]]] = {kind: {} for kind in kinds}
    longest: dict[str, Holds] = {kind: [] for kind in kinds}
    walls: dict[str, list[float]] = {kind: [] for kind in kinds}
    for _ in range(repeats):
        for kind in kinds:
            copy = fresh_copy(template, work / "upgrade.db")
            with baseline_m009(kind.startswith("before")):
                holds, wall = open_timed(copy, fill_now=not kind.endswith("open"))
            walls[kind].append(wall)
            longest[kind].append(max(holds, key=lambda hold: hold[1]))
            chunks = [s for name, s in holds if name == "backfill transaction"]
            named = per_name[kind]
            for name, seconds in holds:
                if name != "backfill transaction":
                    named.setdefault(name, []).append(seconds)
            if chunks:
                named.setdefault("backfill transactions (count)", []).append(len(chunks))
                named.setdefault("backfill transaction (longest)", []).append(max(chunks))
                named.setdefault("backfill transaction (median)", []).append(
                    statistics.median(chunks)
                )
    print(f"\n## Write-lock holds while opening an earlier-release file (load {loadavg()})\n")
    print("medians over the repeats, ms (count: transactions)\n")
    print("| transaction | " + " | ".join(kinds) + " |")
    print("|---|" + "---|" * len(kinds))
    names = list(dict.fromkeys(name for kind in kinds for name in per_name[kind]))
    for name in names:
        cells = []
        for kind in kinds:
            values = per_name[kind].get(name)
            scale = 1 if name.endswith("(count)") else 1000
            cells.append("—" if not values else f"{statistics.median(values) * scale:.0f}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    for kind in kinds:
        print(f"\n{kind}:")
        print(f"  longest hold per repeat (ms): {[(n, round(v * 1000)) for n, v in longest[kind]]}")
        print(f"  open wall time per repeat (s): {[round(v, 2) for v in walls[kind]]}")
    print(f"load after: {loadavg()}")


def start_peer(*args: str) -> subprocess.Popen[str]:
    peer = subprocess.Popen(
        [sys.executable, "-m", "tests.support.upgrade_peers", *args],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert peer.stdout is not None and peer.stdout.readline().strip() == "ready"
    return peer


def stop_peer(peer: subprocess.Popen[str]) -> dict[str, object]:
    assert peer.stdin is not None and peer.stdout is not None
    peer.stdin.write("stop\n")
    peer.stdin.flush()
    summary: dict[str, object] = json.loads(peer.stdout.readline())
    peer.wait(timeout=60)
    return summary


def with_peers(template: Path, work: Path, rows: int, *, before: bool) -> None:
    copy = fresh_copy(template, work / "peers.db")
    writer = start_peer("writer", str(copy), "5", str(rows))
    reader = start_peer("reader", str(copy), str(rows))
    for peer in (writer, reader):
        assert peer.stdin is not None
        peer.stdin.write("run\n")
        peer.stdin.flush()
    start = time.perf_counter()
    with baseline_m009(before), Store.open(copy):
        wall = time.perf_counter() - start
    wrote, read = stop_peer(writer), stop_peer(reader)
    kind = "before (one-transaction m009)" if before else "now"
    print(f"\n## {kind}: upgrade beside the earlier release writing, a reader (load {loadavg()})\n")
    print(f"upgrade open: {wall:.2f} s")
    print(
        f"writer: {wrote['ops']} statements, slowest {wrote['slowest_ms']} ms, "
        f"errors {wrote['errors'][:3]}"  # type: ignore[index]
    )
    errors: list[str] = read["errors"]  # type: ignore[assignment]
    print(f"reader: {read['ops']} searches, {read['answered']} answered, errors {errors[:3]}")
    with Store.open(copy) as store:
        expected: dict[str, str | None] = wrote["expected"]  # type: ignore[assignment]
        lost = [
            slug
            for slug, content in expected.items()
            if store.conn.execute(
                "SELECT content FROM entries WHERE store = 'acme/app' AND slug = ?", (slug,)
            ).fetchone()
            != (None if content is None else (content,))
        ]
        assert_index_in_step(store.conn)
    print(f"writes checked: {len(expected)}, lost: {len(lost)}; index exact: yes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-peers", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        legacy, current = work / "legacy.db", work / "current.db"
        start = time.perf_counter()
        earlier_release.build(legacy, args.rows)
        print(f"built {args.rows} earlier-release memories in {time.perf_counter() - start:.1f} s")
        lock_holds(legacy, work, args.repeats)
        if not args.skip_peers:
            earlier_release.build(current, args.rows, legacy=False)
            with_peers(current, work, args.rows, before=True)
            with_peers(current, work, args.rows, before=False)


if __name__ == "__main__":
    main()
