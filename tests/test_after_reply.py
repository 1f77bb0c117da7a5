"""Recall counts are written after the MCP answer, and survive exit.

In-process: the tool layer with an ``AfterReply`` over a real SQLite file; the held work is
released by hand where the server's transport releases it (after the answer's line).
Process: a real ``thatch mcp`` on stdio with the real mock-model embedder.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.support.embedder_proc import EmbedderProcess
from tests.support.fake_embedder import FakeEmbedder, rows, tool_context
from tests.support.polling import poll
from thatch.frontend.tools.after_reply import AfterReply
from thatch.frontend.tools.memory_tools import Tools

THATCH = str(Path(sys.executable).with_name("thatch"))
RECALLED_AT = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
COUNTS = "SELECT slug, recall_count, last_recalled_at FROM entries ORDER BY slug"


def counts(tmp_path: Path) -> list[tuple[str, int, str | None]]:
    return rows(tmp_path / "thatch.db", COUNTS)


def pending_slugs(tmp_path: Path) -> list[tuple[str]]:
    return rows(tmp_path / "thatch.db", "SELECT slug FROM entries WHERE embedding IS NULL")


def test_recall_counts_are_written_after_the_answer_with_its_time(tmp_path: Path) -> None:
    """The answer is the one the CLI's path gives; its counts land once released."""
    with tool_context(tmp_path) as ctx:
        after = AfterReply()
        deferred, direct = Tools(ctx, after), Tools(ctx)
        for label in ("Deploy", "Tabs"):
            direct.call("memory_remember", {"label": label, "content": f"{label} notes"})
        clock = [RECALLED_AT]
        ctx.store.clock = lambda: clock[0]

        answer = deferred.call("memory_recall", {"query": "deploy notes"})
        clock[0] += timedelta(minutes=5)  # the stamp keeps the recall's time, not the write's
        assert not answer.is_error
        assert counts(tmp_path) == [("deploy", 0, None), ("tabs", 0, None)]

        after.release()
        after.wait_idle()
        assert counts(tmp_path) == [
            ("deploy", 1, "2025-03-01T12:00:00.123Z"),
            ("tabs", 1, "2025-03-01T12:00:00.123Z"),
        ]
        assert direct.call("memory_recall", {"query": "deploy notes"}) == answer
        assert counts(tmp_path) == [
            ("deploy", 2, "2025-03-01T12:05:00.123Z"),
            ("tabs", 2, "2025-03-01T12:05:00.123Z"),
        ]
        after.close()


def test_close_writes_held_recall_counts_and_embeds_nothing(tmp_path: Path) -> None:
    """Shutdown before the release: every recall count is written, nothing is embedded."""
    fake = FakeEmbedder()
    with tool_context(tmp_path, fake) as ctx:
        after = AfterReply()
        tools = Tools(ctx, after)
        tools.call("memory_remember", {"label": "Db", "content": "postgres 16 on port 5433"})
        fake.unavailable = "the socket is missing"
        tools.call("memory_remember", {"label": "Port", "content": "api listens on port 8080"})
        fake.unavailable = None
        for _ in range(2):
            assert "# Db" in tools.call("memory_recall", {"query": "postgres port"}).text
        calls_before = len(fake.calls)

        after.close()
        assert [(slug, count) for slug, count, _ in counts(tmp_path)] == [("db", 2), ("port", 0)]
        assert pending_slugs(tmp_path) == [("port",)]
        assert fake.calls[calls_before:] == []
        tools.call("memory_recall", {"query": "postgres port"})  # after close: stamped at once
        assert [(slug, count) for slug, count, _ in counts(tmp_path)] == [("db", 3), ("port", 0)]


def test_a_read_only_database_still_answers_recall(tmp_path: Path) -> None:
    """The deferred stamp fails quietly on a database that refuses writes."""
    with tool_context(tmp_path) as ctx:
        Tools(ctx).call("memory_remember", {"label": "Deploy", "content": "push a tag"})
        ctx.store.conn.execute("PRAGMA query_only = ON")  # every write refused, reads answer
        after = AfterReply()
        answer = Tools(ctx, after).call("memory_recall", {"query": "push a tag"})
        assert not answer.is_error and "# Deploy" in answer.text
        after.release()
        after.wait_idle()
        after.close()
        assert counts(tmp_path) == [("deploy", 0, None)]


def _message(request_id: int, method: str, params: dict[str, object]) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})


def test_mcp_server_stamps_while_serving_and_on_sigterm(
    tmp_path: Path, mock_embedder: EmbedderProcess
) -> None:
    """A real ``thatch mcp``: the counts of an answered recall reach the file while the
    session stays open, and those of the last recall before SIGTERM are not lost."""
    project = tmp_path / "myproject"
    project.mkdir()
    db = tmp_path / "db" / "thatch.db"
    env = {
        **os.environ,
        "THATCH_DB_PATH": str(db),
        "THATCH_EMBEDDER_ADDR": mock_embedder.address,
        "THATCH_PROJECT_DIR": str(project),
    }
    process = subprocess.Popen(
        [THATCH, "mcp"], env=env, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert process.stdin is not None and process.stdout is not None

    def ask(request_id: int, method: str, params: dict[str, object]) -> dict[str, object]:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(_message(request_id, method, params) + "\n")
        process.stdin.flush()
        reply: dict[str, object] = json.loads(process.stdout.readline())
        assert reply["id"] == request_id, reply
        return reply

    try:
        ask(1, "initialize", {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        })  # fmt: skip
        process.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        process.stdin.write("\n")
        content = "# Test command\n\nRun make check before pushing."
        ask(2, "tools/call", {"name": "memory_remember", "arguments": {"content": content}})
        recall: dict[str, object] = {"name": "memory_recall", "arguments": {"query": "make check"}}
        assert "# Test command" in json.dumps(ask(3, "tools/call", recall))
        count = "SELECT recall_count FROM entries"
        assert poll(lambda: rows(db, count) == [(1,)]), rows(db, count)
        assert process.poll() is None  # still serving: written after the answer, not at exit

        ask(4, "tools/call", recall)
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                stream.close()
    assert rows(db, "SELECT slug, recall_count FROM entries") == [("test-command", 2)]
