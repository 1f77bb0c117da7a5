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
from thatch.frontend.store import db, schema  # noqa: E402
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


def open_timed(path: Path) -> tuple[Holds, float]:
    """Open ``path`` with every transaction of the upgrade timed; (holds, wall seconds)."""
    holds: Holds = []
    label = ["?"]
    modules = [schema]
    try:
        from thatch.frontend.store import backfill

        modules.append(backfill)  # type: ignore[arg-type]
    except ImportError:
        backfill = None  # type: ignore[assignment]
    saved = [(module, module.atomic) for module in modules]
    migrations = list(schema.MIGRATIONS)

    def tagged(name: str, migrate: Callable[..., None]) -> Callable[..., None]:
        def run(conn: object) -> None:
            label[0] = name
            migrate(conn)

        return run

    schema.MIGRATIONS[:] = [(name, tagged(name, step)) for name, step in migrations]
    for module in modules:
        module.atomic = timed_atomic(holds, label)  # type: ignore[attr-defined]
    try:
        start = time.perf_counter()
        label[0] = "?"
        with Store.open(path):
            pass
        wall = time.perf_counter() - start
    finally:
        schema.MIGRATIONS[:] = migrations
        for module, atomic in saved:
            module.atomic = atomic  # type: ignore[attr-defined]
    # Transactions after the last migration are the backfill's chunks.
    names = {name for name, _ in migrations}
    seen_last = False
    relabelled: Holds = []
    for name, seconds in holds:
        if name == migrations[-1][0]:
            if seen_last:
                name = "backfill chunk"
            seen_last = True
        elif name not in names:
            name = "backfill chunk"
        relabelled.append((name, seconds))
    return relabelled, wall


def lock_holds(template: Path, work: Path, repeats: int) -> None:
    per_name: dict[str, list[float]] = {}
    longest: Holds = []
    walls: list[float] = []
    chunks: list[int] = []
    for _ in range(repeats):
        copy = work / "upgrade.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{copy}{suffix}").unlink(missing_ok=True)
        shutil.copy(template, copy)
        holds, wall = open_timed(copy)
        walls.append(wall)
        longest.append(max(holds, key=lambda hold: hold[1]))
        chunk_holds = [s for name, s in holds if name == "backfill chunk"]
        chunks.append(len(chunk_holds))
        for name, seconds in holds:
            if name == "backfill chunk":
                continue
            per_name.setdefault(name, []).append(seconds)
        if chunk_holds:
            per_name.setdefault("backfill chunk (longest)", []).append(max(chunk_holds))
            per_name.setdefault("backfill chunk (median)", []).append(
                statistics.median(chunk_holds)
            )
    print(f"\n## Write-lock holds while opening an earlier-release file (load {loadavg()})\n")
    print("| transaction | median hold over repeats (ms) |")
    print("|---|---|")
    for name, values in per_name.items():
        print(f"| {name} | {statistics.median(values) * 1000:.1f} |")
    print(f"\nlongest hold per repeat (ms): {[(n, round(v * 1000)) for n, v in longest]}")
    print(f"backfill chunks per repeat: {chunks}")
    print(f"open wall time per repeat (s): {[round(v, 2) for v in walls]}")


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


def with_peers(template: Path, work: Path, rows: int) -> None:
    copy = work / "peers.db"
    shutil.copy(template, copy)
    writer = start_peer("writer", str(copy), "5", str(rows))
    reader = start_peer("reader", str(copy), str(rows))
    for peer in (writer, reader):
        assert peer.stdin is not None
        peer.stdin.write("run\n")
        peer.stdin.flush()
    start = time.perf_counter()
    with Store.open(copy):
        pass
    wall = time.perf_counter() - start
    wrote, read = stop_peer(writer), stop_peer(reader)
    print(f"\n## Upgrade with an earlier-release writer and a thatch reader (load {loadavg()})\n")
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
            with_peers(current, work, args.rows)


if __name__ == "__main__":
    main()
