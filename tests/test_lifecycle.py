"""ToolContext closes what it opens; CLI commands and ``thatch mcp`` leave nothing open.

Every sqlite3 connection and embedder client made during a command is tracked
(tests/support/leaks.py): a leak fails here on Python 3.11 as it would fail the suite by
ResourceWarning on 3.13.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.embedder_proc import EmbedderProcess
from tests.support.fake_embedder import FakeEmbedder
from tests.support.leaks import is_open, tracking_opens
from thatch.cli.main import cli
from thatch.frontend.store.memory_store import Store
from thatch.frontend.tools.context import ToolContext
from thatch.frontend.tools.memory_tools import Tools


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    project = tmp_path / "proj"
    project.mkdir()
    monkeypatch.setenv("THATCH_DB_PATH", str(tmp_path / "thatch.db"))
    monkeypatch.setenv("THATCH_PROJECT_DIR", str(project))
    return dict(os.environ)


def test_the_tracker_sees_a_store_left_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check can fail: a Store nobody closes is reported, and not once it is closed."""
    with tracking_opens(monkeypatch) as tracker:
        store = Store.open(tmp_path / "leak.db")
        assert tracker.open_connections() == [str(tmp_path / "leak.db")]
        store.close()
        assert tracker.open_connections() == []


def test_tool_context_closes_its_store_and_embedder(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``with ToolContext.from_env(...)`` closes the Store and the embedder, also when the
    block raises; closing twice is harmless."""
    fake = FakeEmbedder()
    with tracking_opens(monkeypatch) as tracker:
        with ToolContext.from_env(env, embedder=fake) as ctx:
            Tools(ctx).call("memory_remember", {"label": "L", "content": "kept"})
            assert len(tracker.open_connections()) == 1
        assert (tracker.open_connections(), fake.closed) == ([], 1)
        ctx.close()
        assert fake.closed == 1

        with pytest.raises(RuntimeError), ToolContext.from_env(env, embedder=fake) as ctx:
            raise RuntimeError("the tool failed")
        assert not is_open(ctx.store.conn) and fake.closed == 2

        with ToolContext.from_env(env, autostart=False) as ctx:
            assert tracker.open_clients() != []  # it made its own client
        assert (tracker.open_connections(), tracker.open_clients()) == ([], [])
    assert tracker.unraisable == []


def test_cli_commands_close_what_they_open(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, mock_embedder: EmbedderProcess
) -> None:
    """Store commands, reembed, hygiene, doctor and failure paths: nothing left open."""
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", mock_embedder.address)
    monkeypatch.setenv("THATCH_MODEL", "mock")  # reembed refuses an embedder of another
    commands = [
        (["remember", "Deploy", "push a tag"], 0),
        (["remember", "Deploy", "again"], 1),  # refused: the label exists
        (["search", "push", "a", "tag"], 0),
        (["list"], 0),
        (["list", "nope"], 1),
        (["show", "Deploy"], 0),
        (["stores", "--json"], 0),
        (["reembed"], 0),
        (["reembed", "--dry-run"], 0),
        (["reembed", "--store", "nope"], 1),
        (["forget", "Deploy"], 0),
        (["hygiene"], 0),
        (["doctor"], None),  # its verdict depends on this machine's setup
    ]
    with tracking_opens(monkeypatch) as tracker:
        for args, code in commands:
            result = CliRunner().invoke(cli, args)
            assert code is None or result.exit_code == code, (args, result.output)
            assert tracker.open_connections() == [], args
            assert tracker.open_clients() == [], args
        opened = len(tracker.connections)
        monkeypatch.setenv("THATCH_EMBEDDER_ADDR", f"unix://{Path(env['HOME'])}/none.sock")
        monkeypatch.delenv("THATCH_MODEL")  # a mock embedder would auto-start there at once
        failed = CliRunner().invoke(cli, ["search", "anything"])
        assert failed.exit_code == 1 and "embedding service unavailable" in failed.stderr
        assert (tracker.open_connections(), tracker.open_clients()) == ([], [])
    assert opened >= len(commands) - 2  # each opened the database (tracking works)
    assert tracker.unraisable == []


# ``thatch mcp`` in its own process, with every connection it opens tracked.
MCP_PROBE = """
import json, sqlite3, sys
opened = []
real = sqlite3.connect
def connect(*args, **kwargs):
    conn = real(*args, **kwargs)
    opened.append(conn)
    return conn
sqlite3.connect = connect
def is_open(conn):
    try:
        conn.total_changes
    except sqlite3.ProgrammingError:
        return False
    return True
from thatch.cli.main import cli
try:
    cli(["mcp"], prog_name="thatch")
except SystemExit as end:
    code = end.code
sys.stderr.write(json.dumps({"code": code, "opened": len(opened),
                             "open": sum(map(is_open, opened))}) + "\\n")
"""


def test_mcp_server_closes_its_context_at_eof(
    env: dict[str, str], mock_embedder: EmbedderProcess
) -> None:
    """After serving calls (the background fill running), stdin EOF closes every connection."""
    requests = [
        '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":'
        '"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}',
        '{"jsonrpc":"2.0","method":"notifications/initialized"}',
        '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"memory_remember",'
        '"arguments":{"label":"A","content":"b"}}}',
        '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"memory_recall",'
        '"arguments":{"query":"b"}}}',
    ]
    done = subprocess.run(
        [sys.executable, "-c", MCP_PROBE],
        input="".join(request + "\n" for request in requests),
        env={**env, "THATCH_EMBEDDER_ADDR": mock_embedder.address},
        capture_output=True,
        text=True,
        timeout=120,
    )
    replies = {reply["id"]: reply for reply in map(json.loads, done.stdout.splitlines())}
    # Calls run concurrently: the recall may or may not see the memory; both are answered.
    assert sorted(replies) == [1, 2, 3], done.stderr
    assert not any(replies[i]["result"].get("isError") for i in (2, 3)), replies
    report = json.loads(done.stderr.splitlines()[-1])
    assert report["code"] in (0, None) and report["opened"] >= 1, done.stderr
    assert report["open"] == 0, done.stderr
