"""Team sync end to end with real processes: one hub (``thatch hub serve`` on the test
PostgreSQL, embedding with the real MiniLM), two simulated machines (two HOMEs, two
SQLite files), each running ``thatch team sync`` and the ordinary CLI. Every wait polls a
machine's replica (or the hub's table) with a deadline; nothing sleeps in place of sync."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.embedder_proc import EmbedderProcess, embedder_process
from tests.support.polling import poll
from tests.support.postgres import HUB_ROLE
from thatch.teamsync.process import is_running, lock_path

STORE = "acme/app"
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
GH_TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
DEADLINE = 120.0  # seconds: a loaded 2-core machine, an embedder on the path
THATCH = [sys.executable, "-m", "thatch.cli"]


@pytest.fixture(scope="module")
def embedder(minilm_dir: Path) -> Iterator[EmbedderProcess]:
    import shutil

    folder = Path(tempfile.mkdtemp(prefix="th-", dir="/tmp"))
    try:
        with embedder_process(str(minilm_dir), socket_dir=folder) as proc:
            yield proc
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class Hub:
    """``thatch hub serve`` on a unix socket, stopped and started again at will."""

    def __init__(self, hub_db, embedder: EmbedderProcess, folder: Path) -> None:
        self.hub_db = hub_db
        self.address = f"unix://{folder / 'hub.sock'}"
        self.env = {
            **os.environ,
            "THATCH_HUB_DATABASE_URL": hub_db.server.conninfo(hub_db.name, user=HUB_ROLE),
        }
        self.embedder = embedder.address
        self.log = folder / "hub.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [*THATCH, "hub", "serve", "--listen", self.address, "--embedder", self.embedder],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        from thatch.hub.client import HubClient

        with HubClient(self.address, "health-only") as client:
            assert poll(lambda: client.health() == "SERVING", DEADLINE), self.log.read_text()

    def stop(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        assert self.process.wait(60) == 0, self.log.read_text()
        self.process = None

    def live_slugs(self) -> list[str]:
        rows = self.hub_db.owner().execute(
            "SELECT slug FROM memories WHERE team = 'acme' AND store = %s "
            "AND deleted_at IS NULL ORDER BY slug",
            (STORE,),
        )
        return [row[0] for row in rows]


class Machine:
    """One HOME and one SQLite file; the CLI and the sync process run as it."""

    def __init__(self, home: Path, embedder: EmbedderProcess, token: str) -> None:
        home.mkdir(parents=True)
        self.home = home
        self.db = home / "thatch.db"
        self.env = {
            **os.environ,
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "THATCH_DB_PATH": str(self.db),
            "THATCH_EMBEDDER_ADDR": embedder.address,
            "THATCH_HUB_TOKEN": token,
            "PYTHONFAULTHANDLER": "1",
        }
        self.log = home / "sync.log"
        self.sync: subprocess.Popen[bytes] | None = None

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*THATCH, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
        )

    def ok(self, *args: str) -> str:
        done = self.run(*args)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def start_sync(self) -> None:
        with self.log.open("ab") as log:
            self.sync = subprocess.Popen(
                [*THATCH, "team", "sync", "--interval", "0.3", "--max-wait", "1"],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )

    def stop_sync(self) -> None:
        if self.sync is not None:
            self.sync.send_signal(signal.SIGTERM)
            try:
                code = self.sync.wait(60)
            except subprocess.TimeoutExpired:
                self.sync.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER: where it hung
                self.sync.wait()
                code = None
            self.sync = None
            assert code == 0, self.log.read_text()

    def rows(self) -> dict[str, tuple[str, bool]]:
        """slug -> (content, has a vector) of the shared store, read from the file."""
        if not self.db.exists():
            return {}
        with closing(sqlite3.connect(self.db)) as conn:
            rows = conn.execute(
                "SELECT slug, content, embedding IS NOT NULL FROM entries WHERE store = ?",
                (STORE,),
            ).fetchall()
        return {slug: (content, bool(vector)) for slug, content, vector in rows}

    def models(self) -> dict[str, str | None]:
        with closing(sqlite3.connect(self.db)) as conn:
            rows = conn.execute("SELECT slug, model FROM entries WHERE store = ?", (STORE,))
            return dict(rows.fetchall())

    def synced_cleanly(self) -> bool:
        """The last pass of every link ended without an error."""
        with closing(sqlite3.connect(self.db)) as conn:
            rows = conn.execute("SELECT last_ok_at, last_error FROM team_links").fetchall()
        return bool(rows) and all(ok is not None and error is None for ok, error in rows)

    def outbox(self) -> int:
        with closing(sqlite3.connect(self.db)) as conn:
            return int(conn.execute("SELECT count(*) FROM team_outbox").fetchone()[0])


@contextmanager
def team(
    hub_db,
    embedder: EmbedderProcess,
    tmp_path: Path,
    second_embedder: EmbedderProcess | None = None,
) -> Iterator[tuple[Hub, Machine, Machine]]:
    """A hub and two machines; machine two's embedder may serve another model."""
    folder = Path(tempfile.mkdtemp(prefix="th-", dir="/tmp"))  # short: a socket lives here
    hub = Hub(hub_db, embedder, folder)
    one = Machine(tmp_path / "m1", embedder, hub_db.add_member("acme", "ann"))
    two = Machine(tmp_path / "m2", second_embedder or embedder, hub_db.add_member("acme", "bob"))
    hub.start()
    try:
        for machine in (one, two):
            out = machine.ok("team", "join", hub.address, "--store", STORE, "--no-start")
            assert "Joined team acme" in out
            machine.start_sync()
        yield hub, one, two
    finally:
        for machine in (one, two):
            machine.stop_sync()
        if hub.process is not None:
            hub.stop()
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


def hygiene(machine: Machine) -> dict[str, Any]:
    """``thatch hygiene --json`` run in a checkout whose project store is the shared one."""
    repo = machine.home / "app"
    if not repo.exists():
        repo.mkdir()
        for args in (["init", "-q"], ["remote", "add", "origin", f"https://github.com/{STORE}"]):
            subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)
    machine.env["THATCH_PROJECT_DIR"] = str(repo)
    found: dict[str, Any] = json.loads(machine.ok("hygiene", "--json"))
    assert found["store"] == STORE, found
    return found


def remember(machine: Machine, label: str, text: str, *extra: str) -> None:
    machine.ok("remember", label, text, "--store", STORE, *extra)


def test_a_save_on_one_machine_is_recalled_on_the_other(hub_db, embedder, tmp_path) -> None:
    with team(hub_db, embedder, tmp_path) as (hub, one, two):
        remember(one, "Deploy steps", "Run make deploy from the release branch, never main.")
        assert poll(lambda: two.rows().get("deploy-steps", ("", False))[1], DEADLINE), (
            two.log.read_text()
        )
        found = json.loads(
            two.ok("search", "how", "do", "we", "deploy", "--store", STORE, "--json")
        )
        assert "deploy-steps" in json.dumps(found)

        # A secret is refused at save, naming its kind and never the value; nothing saved.
        refused = one.run("remember", "AWS", f"the key is {AWS_KEY}", "--store", STORE)
        assert refused.returncode == 1
        assert "an AWS access key id" in refused.stderr and AWS_KEY not in refused.stderr
        assert "aws" not in one.rows() and one.outbox() == 0

        # A forget travels as a tombstone.
        one.ok("forget", "Deploy steps", "--store", STORE, "--yes")
        assert poll(lambda: "deploy-steps" not in two.rows(), DEADLINE), two.log.read_text()
        assert hub.live_slugs() == []

        # Saved again and edited after the forget: the label is recreated, where it used
        # to become a new conflict version at every edit while the machines drifted apart.
        remember(one, "Deploy steps", "Tag a release, then run make deploy.")
        remember(one, "Deploy steps", "Tag, push the tag, then run make deploy.", "--overwrite")
        final = "# Deploy steps\n\nTag, push the tag, then run make deploy."
        assert poll(
            lambda: one.outbox() == 0 and two.rows().get("deploy-steps", ("", False))[0] == final,
            DEADLINE,
        ), (one.log.read_text(), two.rows())
        assert hub.live_slugs() == ["deploy-steps"] and list(two.rows()) == ["deploy-steps"]
        one.ok("forget", "Deploy steps", "--store", STORE, "--yes")
        assert poll(lambda: "deploy-steps" not in two.rows(), DEADLINE), two.log.read_text()
        printed = two.ok("team", "status", "--json")
        assert printed.count("\n") == 1  # one line, as every --json (docs/cli.md)
        status = json.loads(printed)
        [link] = status["links"]
        assert link["store"] == STORE and link["member"] == "bob" and link["outbox"] == 0
        assert status["sync_process"] is True

        # The MCP tool refuses a secret too, in the tool's one-line error.
        from thatch.frontend.tools.context import ToolContext
        from thatch.frontend.tools.memory_tools import Tools

        with ToolContext.from_env(one.env) as ctx:
            result = Tools(ctx).call(
                "memory_remember", {"label": "CI", "content": f"use {GH_TOKEN}", "store": STORE}
            )
        assert result.is_error and "a GitHub token" in result.text
        assert GH_TOKEN not in result.text and "ci" not in one.rows()

        # The token is in a 0600 file, never in the database.
        [token_file] = (two.home / ".config" / "thatch" / "team-tokens").iterdir()
        assert token_file.stat().st_mode & 0o777 == 0o600
        assert two.env["THATCH_HUB_TOKEN"].encode() not in two.db.read_bytes()

        # One sync process per database; clear errors for a bad token, an unreachable hub
        # and a store that is not shared, with nothing recorded.
        second = two.run("team", "sync", "--once")
        assert second.returncode == 1 and "already runs" in second.stderr
        three = Machine(tmp_path / "m3", embedder, "not-a-token")
        bad = three.run("team", "join", hub.address, "--store", STORE, "--no-start")
        assert bad.returncode == 1 and "refused the token" in bad.stderr, bad.stderr
        away = three.run("team", "join", "unix:///nonexistent/hub.sock", "--store", STORE)
        assert away.returncode == 1 and "check the address" in away.stderr, away.stderr
        assert "No store is shared" in three.ok("team", "status")
        missing = three.run("team", "leave", "--store", STORE)
        assert missing.returncode == 1 and "is not shared" in missing.stderr

        # `thatch mcp` on a machine with a shared store starts the sync process.
        two.stop_sync()
        lock = lock_path(two.env)
        assert not is_running(lock)
        server = subprocess.run(
            [*THATCH, "mcp"],
            env=two.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=300,
        )
        assert server.returncode == 0, server.stderr
        # Running, and its pid written (just after it took the lock).
        assert poll(lambda: is_running(lock) and lock.read_text().strip(), DEADLINE), server.stderr
        pid = int(lock.read_text())
        os.kill(pid, signal.SIGTERM)  # the process the server started, by its id
        assert poll(lambda: not is_running(lock), DEADLINE)


def test_offline_writes_on_both_sides_all_arrive_once(hub_db, embedder, tmp_path) -> None:
    with team(hub_db, embedder, tmp_path) as (hub, one, two):
        remember(one, "Port", "The dev server listens on 8080.")
        assert poll(lambda: "port" in two.rows(), DEADLINE), two.log.read_text()
        hub.stop()
        remember(one, "From ann 1", "First offline note of ann.")
        remember(one, "From ann 2", "Second offline note of ann.")
        remember(two, "From bob 1", "First offline note of bob.")
        remember(two, "From bob 2", "Second offline note of bob.")
        # A concurrent edit of the same memory on both machines.
        remember(one, "Port", "The dev server listens on 9090 (ann).", "--overwrite")
        remember(two, "Port", "The dev server listens on 7070 (bob).", "--overwrite")
        assert one.outbox() == 3 and two.outbox() == 3  # waiting, nothing lost
        hub.start()
        expected = {
            "from-ann-1",
            "from-ann-2",
            "from-bob-1",
            "from-bob-2",
            "port",
            "port-conflict-2",
        }

        def settled() -> bool:
            return all(
                set(m.rows()) == expected
                and all(vector for _, vector in m.rows().values())
                and m.outbox() == 0
                for m in (one, two)
            )

        assert poll(settled, DEADLINE), (one.log.read_text(), two.log.read_text())
        assert hub.live_slugs() == sorted(expected)  # none lost, none doubled
        texts = {one.rows()["port"][0], one.rows()["port-conflict-2"][0]}
        assert any("9090" in text for text in texts) and any("7070" in text for text in texts)
        assert one.rows() == two.rows()
        # The machine whose edit came second was told where the hub kept it.
        kept = [
            json.loads(m.ok("team", "status", "--json"))["links"][0]["conflicts"]
            for m in (one, two)
        ]
        assert sorted(kept) == [0, 1]
        shown = one.ok("team", "status")
        assert "outbox: 0 waiting, 0 refused" in shown and "sync process: running" in shown
        # Both machines' hygiene names the second version; forgotten by its own label on
        # one machine (the user merged them), it is gone on the other too.
        for machine in (one, two):
            found = hygiene(machine)
            assert found["conflicts"] == 1, found
            assert found["conflict_versions"] == [{"label": "Port (conflict 2)", "of": "Port"}]
            assert "1 conflict version from team sync" in found["report"]
        one.ok("forget", "Port (conflict 2)", "--store", STORE, "--yes")
        assert poll(lambda: "port-conflict-2" not in two.rows(), DEADLINE), two.log.read_text()
        assert poll(lambda: one.outbox() == 0, DEADLINE), one.log.read_text()
        assert hub.live_slugs() == sorted(expected - {"port-conflict-2"})
        for machine in (one, two):
            assert hygiene(machine)["conflicts"] == 0


def test_a_machine_behind_the_purge_horizon_is_reset(hub_db, embedder, tmp_path) -> None:
    from datetime import UTC, datetime, timedelta

    with team(hub_db, embedder, tmp_path) as (hub, one, two):
        remember(one, "Gone soon", "A note forgotten while machine two is away.")
        remember(one, "Stays", "A note that outlives the purge.")
        assert poll(lambda: {"gone-soon", "stays"} <= set(two.rows()), DEADLINE)
        two.stop_sync()
        one.ok("forget", "Gone soon", "--store", STORE, "--yes")
        assert poll(lambda: hub.live_slugs() == ["stays"], DEADLINE)
        purger = hub_db.memories("acme", "carol")
        assert purger.purge_tombstones(datetime.now(UTC) + timedelta(days=1)) == 1
        # Machine two's cursor is older than the purged tombstone: the hub answers reset,
        # the replica is dropped and pulled again, and the forgotten memory is gone.
        two.start_sync()
        assert poll(lambda: set(two.rows()) == {"stays"} and two.synced_cleanly(), DEADLINE), (
            two.log.read_text(),
            hub.log.read_text()[-3000:],
        )
        assert two.outbox() == 0


def test_pulled_memories_of_another_model_are_embedded_locally(
    hub_db, embedder, mock_embedder, tmp_path
) -> None:
    """Machine two's embedder serves another model than the hub's pinned one: the hub's
    vectors are not used there; the sync process embeds what it pulled with its own."""
    local = mock_embedder.info().model_id
    with team(hub_db, embedder, tmp_path, second_embedder=mock_embedder) as (_, one, two):
        remember(one, "Lint", "Run ruff check before every commit.")
        assert poll(lambda: two.rows().get("lint", ("", False))[1], DEADLINE), two.log.read_text()
        assert two.models()["lint"] == local != one.models()["lint"]
        assert two.outbox() == 0  # embedding a pulled memory is not a write to push
