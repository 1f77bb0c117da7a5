"""The team sync process wakes for a local write instead of sleeping out its interval
(teamsync/process.py ``run_loop``'s ``wake``, ``OutboxWatch``), and never for one while
a hub fails (its backoff stands)."""

from __future__ import annotations

import shutil
import signal
import sqlite3
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from tests.support.embedder_proc import EmbedderProcess, embedder_process
from tests.support.polling import poll
from tests.test_team_sync import DEADLINE, STORE, THATCH, Machine, remember, team
from thatch.frontend.store.memory_store import Store
from thatch.teamsync import process
from thatch.teamsync.engine import LinkOutcome
from thatch.teamsync.links import add_link
from thatch.teamsync.process import OutboxWatch, run_loop


class Passes:
    """A stand-in engine: each pass returns ``outcome`` and counts itself."""

    def __init__(self, outcome: LinkOutcome) -> None:
        self.outcome = outcome
        self.count = 0

    def sync_all(self) -> list[LinkOutcome]:
        self.count += 1
        return [self.outcome]


class Waits(threading.Event):
    """A stop event that records each wait and is set after ``limit`` waits: the loop's
    waiting, observed without a clock."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.timeouts: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.timeouts.append(timeout)
        if len(self.timeouts) >= self.limit:
            self.set()
        return self.is_set()


def test_a_wake_ends_a_clean_wait_early() -> None:
    engine = Passes(LinkOutcome(STORE))
    stop = Waits(limit=1000)
    woken: list[int] = []

    def wake() -> bool:
        woken.append(engine.count)
        if engine.count >= 3:
            stop.set()
        return True

    passes = run_loop(engine, interval=3600, stop=stop, report=lambda _: None, wake=wake)  # type: ignore[arg-type]
    # Each wait of an hour ended at its first look at the outbox.
    assert passes == 3 and woken == [1, 2, 3]
    assert all(timeout is not None and timeout < 1 for timeout in stop.timeouts)


def test_a_failing_hub_keeps_its_backoff_whatever_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = Passes(LinkOutcome(STORE, error="the hub is down"))
    stop = Waits(limit=3)
    looked: list[int] = []
    # The backoff as asked, not the slices the wait takes to see a signal.
    monkeypatch.setattr(process, "wait_for_stop", lambda event, seconds=None: event.wait(seconds))

    def wake() -> bool:
        looked.append(engine.count)
        return True

    run_loop(
        engine,  # type: ignore[arg-type]
        interval=1,
        stop=stop,
        report=lambda _: None,
        wake=wake,
        max_wait=60,
    )
    assert looked == [] and stop.timeouts == [2, 4, 8]


def test_the_outbox_watch_sees_rows_queued_since_the_pass_began(tmp_path: Path) -> None:
    with Store.open(tmp_path / "thatch.db") as store:
        add_link(
            store.conn,
            store=STORE,
            hub_url="hub.example.com:7470",
            team="acme",
            member="ann",
            hub_model="m",
            now="2026-01-01T00:00:00.000Z",
        )
        watch = OutboxWatch(store.conn)
        watch.before_pass()
        assert not watch()
        store.conn.execute(
            "INSERT INTO entries (slug, store, label, content, created_at, updated_at) "
            "VALUES ('a', ?, 'a', '# a\n\nx', '2026', '2026')",
            (STORE,),
        )
        assert watch()
        watch.before_pass()  # the pass that pushes it
        store.conn.execute("DELETE FROM team_outbox")  # acked
        assert not watch()
        store.conn.execute(
            "UPDATE entries SET content = '# a\n\ny' WHERE slug = 'a' AND store = ?", (STORE,)
        )
        assert watch()


def synced_at(machine: Machine) -> str | None:
    """When the machine's link last ended a pass cleanly."""
    with closing(sqlite3.connect(machine.db)) as conn:
        row = conn.execute("SELECT last_ok_at FROM team_links").fetchone()
    return None if row is None else row[0]


@pytest.fixture(scope="module")
def embedder(minilm_dir: Path) -> Iterator[EmbedderProcess]:
    folder = Path(tempfile.mkdtemp(prefix="th-", dir="/tmp"))
    try:
        with embedder_process(str(minilm_dir), socket_dir=folder) as proc:
            yield proc
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_save_is_pushed_without_waiting_out_the_interval(hub_db, embedder, tmp_path) -> None:
    """A sync process at an hour's interval still pushes a save within seconds."""
    with team(hub_db, embedder, tmp_path) as (hub, one, _two):
        one.stop_sync()
        before = synced_at(one)
        with one.log.open("ab") as log:
            one.sync = subprocess.Popen(
                [*THATCH, "team", "sync", "--interval", "3600"],
                env=one.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        # Its first pass is done: the next one is an hour away unless a write wakes it.
        assert poll(lambda: synced_at(one) != before, DEADLINE), one.log.read_text()
        remember(one, "Release day", "Releases go out on Tuesdays after the standup.")
        assert poll(lambda: "release-day" in hub.live_slugs(), DEADLINE), one.log.read_text()
        assert one.sync.poll() is None
        one.sync.send_signal(signal.SIGTERM)
        assert one.sync.wait(60) == 0
        one.sync = None
