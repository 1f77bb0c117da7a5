"""Upgrading an earlier-release file while other processes use it (docs/database.md §backfills).

Real processes on a real file: the upgrade is ``Store.open`` in its own process, with the
lexical index's backfill made to do a few rows per transaction and to wait, between
transactions, for the test's go-ahead (tests/support/upgrade_peers.py ``upgrade``); in each
of those pauses the earlier release's exact statements run in another process with its 5 s
busy timeout, and a thatch reader searches. The same at 100k memories, free-running and
with the real chunk sizes, is bench/migrate.py.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import earlier_release
from tests.support.fts import assert_index_in_step, index_rows
from thatch.frontend.store.backfill import BACKFILLS_TABLE
from thatch.frontend.store.lexical import BACKFILL, DOCS_TABLE
from thatch.frontend.store.memory_store import Store

ROOT = Path(__file__).resolve().parents[1]
ROWS = 600
ROWS_PER_STEP = 25


class Peer:
    """A tests.support.upgrade_peers process, driven line by line."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.upgrade_peers", *args],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def read(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, f"peer ended early (exit {self.process.wait(timeout=60)})"
        return line.strip()

    def ops(self, count: int) -> int:
        """Run ``count`` operations; the reader's answer is its lexical count so far."""
        self.send(f"ops {count}")
        answer = self.read().split()
        assert answer[0] == "done"
        return int(answer[1])

    def stop(self) -> dict[str, object]:
        self.send("stop")
        summary: dict[str, object] = json.loads(self.read())
        assert self.process.wait(timeout=60) == 0
        return summary

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=60)
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def peers() -> Iterator[list[Peer]]:
    started: list[Peer] = []
    yield started
    for peer in started:
        peer.kill()


def start(peers: list[Peer], *args: str) -> Peer:
    peer = Peer(*args)
    peers.append(peer)
    if args[0] != "upgrader":
        assert peer.read() == "ready"
    return peer


def progress(path: Path) -> tuple[int, int, str | None]:
    """(indexed memories, memories, the backfill's recorded position) read by a plain client."""
    conn = sqlite3.connect(path)
    try:
        (indexed,) = conn.execute(f"SELECT count(*) FROM {DOCS_TABLE}").fetchone()
        (rows,) = conn.execute("SELECT count(*) FROM entries").fetchone()
        row = conn.execute(
            f"SELECT after FROM {BACKFILLS_TABLE} WHERE name = ?", (BACKFILL,)
        ).fetchone()
        return indexed, rows, None if row is None else row[0]
    finally:
        conn.close()


def stored(path: Path, slugs: list[str]) -> dict[str, str | None]:
    conn = sqlite3.connect(path)
    try:
        found = dict(
            conn.execute(
                "SELECT slug, content FROM entries WHERE store = 'acme/app' AND slug IN "
                f"({', '.join('?' * len(slugs))})",
                slugs,
            ).fetchall()
        )
    finally:
        conn.close()
    return {slug: found.get(slug) for slug in slugs}


def test_upgrade_lets_earlier_release_writes_and_searches_in_between(
    tmp_path: Path, peers: list[Peer]
) -> None:
    """Between every two transactions of the index backfill the earlier release inserts
    (keys before and after the backfill's position), upserts and deletes without waiting
    out its busy timeout, and a reader's searches answer (by meaning alone until the index
    is complete, then lexically too); a VACUUM mid-way renumbers rowids. Afterwards every
    write is there and the index matches the memories exactly."""
    path = tmp_path / "thatch.db"
    earlier_release.build(path, ROWS, legacy=False)
    writer = start(peers, "writer", str(path), "3", str(ROWS))
    upgrader = start(peers, "upgrader", str(path), str(ROWS_PER_STEP))
    reader: Peer | None = None
    pauses = 0
    partial_seen = False
    while (line := upgrader.read()) == "paused":
        pauses += 1
        indexed, rows, after = progress(path)
        assert after is not None  # progress is recorded with each transaction
        partial_seen |= 0 < indexed < rows
        writer.ops(4)
        if reader is None:  # opened once the index exists (m009 ran), still being filled
            reader = start(peers, "reader", str(path), str(ROWS))
        assert reader.ops(2) == 0  # dense order: the partial index lifts nothing
        if pauses == 5:
            conn = sqlite3.connect(path)
            conn.execute("VACUUM")
            conn.close()
        upgrader.send("go")
    assert line == "opened"
    assert pauses >= ROWS // ROWS_PER_STEP // 2  # the lock was free often mid-upgrade
    assert partial_seen
    assert reader is not None
    assert reader.ops(1) > 0  # the same long-lived reader now ranks lexically too
    wrote, read = writer.stop(), reader.stop()
    upgrader.process.wait(timeout=60)

    assert wrote["errors"] == [] and wrote["ops"] == 4 * pauses
    assert read["errors"] == [] and read["answered"] == read["ops"]
    expected: dict[str, str | None] = wrote["expected"]  # type: ignore[assignment]
    assert stored(path, list(expected)) == expected
    assert progress(path)[2] is None
    with Store.open(path) as store:
        assert_index_in_step(store.conn)
        assert store.conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_killed_upgrade_resumes_where_it_stopped(tmp_path: Path, peers: list[Peer]) -> None:
    """A kill mid-backfill loses at most the transaction under way: the next open goes on
    from the recorded position (rows indexed before keep their index rows) to an exact
    index."""
    path = tmp_path / "thatch.db"
    earlier_release.build(path, ROWS, legacy=False)
    upgrader = start(peers, "upgrader", str(path), str(ROWS_PER_STEP))
    for _ in range(6):
        assert upgrader.read() == "paused"
        upgrader.send("go")
    upgrader.kill()  # during, or right after, its seventh transaction
    indexed, rows, after = progress(path)
    assert after is not None and 6 * ROWS_PER_STEP <= indexed < rows
    conn = sqlite3.connect(path)
    kept = conn.execute(f"SELECT doc, store, slug FROM {DOCS_TABLE} ORDER BY doc").fetchall()
    conn.close()

    with Store.open(path) as store:
        assert_index_in_step(store.conn)
        docs = store.conn.execute(f"SELECT doc, store, slug FROM {DOCS_TABLE} ORDER BY doc")
        assert docs.fetchall()[: len(kept)] == kept  # resumed, not started over
        assert len(index_rows(store.conn)) == rows
    assert progress(path)[2] is None


def test_server_fills_the_index_on_a_thread_beside_its_own_calls(tmp_path: Path) -> None:
    """``thatch mcp`` opens with ``fill_now=False`` and runs ``fill_backlog`` on a thread:
    the open returns with the backfill pending (recall ranks by vectors alone), calls on the
    same Store go on meanwhile, and once it ends the same Store ranks lexically too."""
    import threading

    import numpy as np

    path = tmp_path / "thatch.db"
    earlier_release.build(path, ROWS, legacy=False)
    vector = np.frombuffer(earlier_release.fixed_blob(1), dtype="<f4")
    first = earlier_release.slug_of(0)  # memory 0, in 'global'
    with Store.open(path, fill_now=False) as store:
        assert progress(path)[2] is None and progress(path)[0] == 0  # scheduled, not begun
        scope = ["acme/app", "global"]
        assert store.search(scope, vector, text="mark_0", limit=1)[0].memory.slug != first
        stop = threading.Event()
        filler = threading.Thread(target=store.fill_backlog, args=(stop,))
        filler.start()
        store.remember("acme/app", "during", "# during\n\nduring_fill", vector, "m")
        assert store.show("acme/app", "during") is not None
        filler.join(timeout=600)
        assert not filler.is_alive()
        assert store.search(scope, vector, text="mark_0", limit=1)[0].memory.slug == first
        assert store.search(scope, vector, text="during_fill", limit=1)[0].memory.slug == "during"
        assert_index_in_step(store.conn)
    conn = sqlite3.connect(path)
    assert conn.execute(f"SELECT count(*) FROM {BACKFILLS_TABLE}").fetchone() == (0,)
    conn.close()


def test_reminder_hooks_pending_fill_leaves_the_index_to_a_later_open(tmp_path: Path) -> None:
    """The session-start hook fills pending memories through a ToolContext: that open, a
    hook's, must not run m009 nor its backfill either."""
    import os

    from thatch.frontend.hooks.prompt_hooks import fill_pending

    path = tmp_path / "thatch.db"
    earlier_release.build(path, 20, legacy=False)
    fill_pending({**os.environ, "THATCH_DB_PATH": str(path)})
    conn = sqlite3.connect(path)
    names = {row[0] for row in conn.execute("SELECT name FROM _thatch_migrations")}
    conn.close()
    assert names and BACKFILL not in names


def test_an_unmigrated_read_only_file_lists_its_pending_memories(tmp_path: Path) -> None:
    """A file of the earlier release that this process may not write keeps its schema:
    naming thatch's pending index there failed with "no such index"."""
    from urllib.parse import quote

    from thatch.frontend.store.memory_store import Store

    path = tmp_path / "earlier.db"
    earlier_release.build(path, 30, legacy=False)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE entries SET embedding = NULL WHERE rowid <= 3")
    conn.close()
    reader = sqlite3.connect(
        f"file:{quote(str(path))}?mode=ro&immutable=1", uri=True, isolation_level=None
    )
    store = Store(reader)
    assert len(store.pending_memories()) == 3
    assert len(store.pending_memories(store=earlier_release.STORES[0])) <= 3
    reader.close()


def test_a_stores_pending_memories_read_the_index_the_file_has(tmp_path: Path) -> None:
    """m030's index of each store's pending rows reads every memory to build, so a hook's
    open leaves it: there, and in that file read-only, a store's pending memories come
    through m005's index of every store's (naming m030's would fail: "no such index");
    the next open that builds indexes makes m030's, and they come through it."""
    import re
    from urllib.parse import quote

    path = tmp_path / "earlier.db"
    earlier_release.build(path, 30, legacy=False)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE entries SET embedding = NULL WHERE rowid <= 12")
    conn.close()
    store = earlier_release.STORES[1]
    expected = sorted(earlier_release.slug_of(i) for i in range(12) if i % 4 == 1)

    def named(opened: Store) -> list[str]:
        statements: list[str] = []
        opened.conn.set_trace_callback(statements.append)
        slugs = [memory.slug for memory in opened.pending_memories(store=store)]
        opened.conn.set_trace_callback(None)
        assert slugs == expected
        assert opened.pending_count(store, up_to=10) == len(expected)
        return re.findall(r"INDEXED BY (\w+)", " ".join(statements))

    with Store.open(path, build_indexes=False) as hook:
        assert named(hook) == ["thatch_entries_pending"]
    reader = sqlite3.connect(
        f"file:{quote(str(path))}?mode=ro&immutable=1", uri=True, isolation_level=None
    )
    try:
        assert named(Store(reader)) == ["thatch_entries_pending"]
    finally:
        reader.close()
    with Store.open(path) as server:
        assert named(server) == ["thatch_entries_pending_store"]
