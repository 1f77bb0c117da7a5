"""Recall never fills pending memories itself: it schedules a fill that runs later.

In a CLI process the scheduled pass runs when the ToolContext closes; in ``thatch mcp``
on the background thread (``PendingFill.start``).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.support.embedder_proc import EmbedderProcess
from tests.support.fake_embedder import FakeEmbedder, FakeResult, rows, tool_context
from thatch.embedder.client.kind import Kind
from thatch.frontend.tools.memory_tools import Tools

DOWN = "nothing is listening at unix:///x.sock"
UNINDEXED = "SELECT count(*) FROM entries WHERE embedding IS NULL"


def save_pending(tools: Tools, fake: FakeEmbedder) -> None:
    fake.unavailable = DOWN
    for label, content in [("Port", "the api listens on port 8080"), ("Db", "postgres 16")]:
        assert not tools.call("memory_remember", {"label": label, "content": content}).is_error
    fake.unavailable = None
    fake.calls.clear()


def test_recall_with_pending_rows_returns_without_filling(tmp_path: Path) -> None:
    """The recall embeds its query only; the scheduled pass fills the rows when it runs."""
    fake = FakeEmbedder()
    with tool_context(tmp_path, fake) as ctx:
        tools = Tools(ctx)
        save_pending(tools, fake)
        text = tools.call("memory_recall", {"query": "which port does the api use"}).text
        assert text == (
            "No matching memories found.\n\n(2 memories are not indexed yet and were not searched.)"
        )
        assert [(kind, texts) for texts, kind, _ in fake.calls] == [
            (Kind.QUERY, ["which port does the api use"])
        ]
        assert rows(tmp_path / "thatch.db", UNINDEXED) == [(2,)]
        assert ctx.pending_fill.run_scheduled() == 2
        assert [kind for _, kind, _ in fake.calls] == [Kind.QUERY, Kind.PASSAGE]
        found = tools.call("memory_recall", {"query": "which port does the api use"}).text
        assert "# Port" in found and "not indexed" not in found


def test_a_cli_context_fills_when_it_closes(tmp_path: Path) -> None:
    """Without a background thread, closing the context runs the pass a recall scheduled."""
    fake = FakeEmbedder()
    with tool_context(tmp_path, fake) as ctx:
        tools = Tools(ctx)
        save_pending(tools, fake)
        tools.call("memory_recall", {"query": "port"})
        assert rows(tmp_path / "thatch.db", UNINDEXED) == [(2,)]
    assert rows(tmp_path / "thatch.db", UNINDEXED) == [(0,)]
    assert fake.closed == 1


class GatedEmbedder(FakeEmbedder):
    """Passage calls wait for ``gate``; each records the thread it ran on."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.passage_threads: list[str] = []

    def embed(
        self, texts: Sequence[str], kind: Kind, *, timeout: float = 30.0, start_wait: float = 20.0
    ) -> FakeResult:
        if kind is Kind.PASSAGE and self.unavailable is None:
            self.passage_threads.append(threading.current_thread().name)
            self.entered.set()
            assert self.gate.wait(60), "the test never opened the gate"
        return super().embed(texts, kind, timeout=timeout, start_wait=start_wait)


def test_background_thread_fills_while_recalls_answer(tmp_path: Path) -> None:
    """With the server's background thread, a recall schedules the fill and answers; other
    recalls answer while the fill waits on the embedder; then the rows are found."""
    fake = GatedEmbedder()
    with tool_context(tmp_path, fake) as ctx:
        tools = Tools(ctx)
        save_pending(tools, fake)
        ctx.pending_fill.start()
        first = tools.call("memory_recall", {"query": "which port does the api use"}).text
        assert first.endswith("(2 memories are not indexed yet and were not searched.)")
        assert fake.entered.wait(60)  # the fill is now inside its embed call, gated
        during = tools.call("memory_recall", {"query": "which port does the api use"}).text
        assert during.endswith("(2 memories are not indexed yet and were not searched.)")
        fake.gate.set()
        assert ctx.pending_fill.wait_idle(60)
        assert rows(tmp_path / "thatch.db", UNINDEXED) == [(0,)]
        assert set(fake.passage_threads) == {"thatch-pending-fill"}
        after = tools.call("memory_recall", {"query": "which port does the api use"}).text
        assert "# Port" in after and "not indexed" not in after


def test_close_stops_the_background_thread(tmp_path: Path) -> None:
    """Closing a serving context ends its fill thread (after the pass in flight)."""
    with tool_context(tmp_path) as ctx:
        ctx.pending_fill.start()
        fill_threads = [t for t in threading.enumerate() if t.name == "thatch-pending-fill"]
        assert len(fill_threads) == 1
    fill_threads[0].join(60)
    assert not fill_threads[0].is_alive()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_mcp_server_fills_pending_memories_in_the_background(
    tmp_path: Path, mock_embedder: EmbedderProcess
) -> None:
    """A real ``thatch mcp``: one recall with the embedder up, and the memory saved while it
    was down gets its vector without any further call."""
    import anyio
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters

    from tests.support.polling import poll
    from thatch.frontend.store.memory_store import Store

    project = tmp_path / "proj"
    project.mkdir()
    db = tmp_path / "thatch.db"
    with Store.open(db) as store:
        store.remember("proj", "Port", "# Port\n\nthe api listens on 8080", None, None)
    env = {
        **os.environ,
        "THATCH_DB_PATH": str(db),
        "THATCH_PROJECT_DIR": str(project),
        "THATCH_EMBEDDER_ADDR": mock_embedder.address,
    }
    thatch = str(Path(sys.executable).with_name("thatch"))
    params = StdioServerParameters(command=thatch, args=["mcp"], env=env)
    async with Client(params, mode="legacy") as client:
        recalled = await client.call_tool("memory_recall", {"query": "which port"})
        assert not recalled.is_error
        filled = await anyio.to_thread.run_sync(
            lambda: poll(lambda: rows(db, UNINDEXED) == [(0,)], timeout=60)
        )
        assert filled
