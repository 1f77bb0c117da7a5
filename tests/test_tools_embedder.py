"""Embedder use by the tools: unavailable → pending save or isError; real server round trips."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from tests.support.embedder_proc import EmbedderProcess, embedder_process
from tests.support.fake_embedder import FakeEmbedder, rows, tool_context
from thatch.embedder.client.embedder_client import EmbedderClient
from thatch.embedder.client.kind import Kind
from thatch.frontend.tools.memory_tools import Tools
from thatch.frontend.tools.operations import PENDING_COUNTED_UP_TO

CAUSE = "nothing is listening at unix:///tmp/x/embedder.sock (auto-start failed: no model)"


def test_remember_without_embedder_saves_pending(tmp_path: Path) -> None:
    """Unavailable embedder: the memory is saved with NULL embedding and the pending notice."""
    with tool_context(tmp_path, FakeEmbedder(unavailable=CAUSE)) as ctx:
        tools = Tools(ctx)
        result = tools.call("memory_remember", {"label": "Port", "content": "api on 8080"})
        assert not result.is_error
        assert result.text == (
            "[saved] o/r :: Port\n\n"
            f"Embedding pending: the embedding service is unreachable ({CAUSE}), so this memory "
            "is saved but not searchable yet. It is indexed automatically when the service is "
            "back; to fix it: run thatch embedder start"
        )
        assert rows(tmp_path / "thatch.db", "SELECT slug, embedding, model FROM entries") == [
            ("port", None, None)
        ]
        listed = tools.call("memory_list", {}).text
        assert listed.startswith("[o/r] Port (unindexed) (")
        assert " unindexed created:" in tools.call("memory_show", {"label": "port"}).text


def test_recall_without_embedder_is_an_error(tmp_path: Path) -> None:
    """Recall needs a query vector: isError with cause and fix; tools wait 20 s by default."""
    fake = FakeEmbedder(unavailable=CAUSE)
    with tool_context(tmp_path, fake) as ctx:
        result = Tools(ctx).call("memory_recall", {"query": "port"})
    assert (result.is_error, result.text) == (
        True,
        f"Embedding service unavailable: {CAUSE}. Fix: run thatch embedder start",
    )
    assert fake.calls[0][2] == 20.0


def test_pending_memories_fill_after_the_service_returns(tmp_path: Path) -> None:
    """Pending memories are indexed after the next successful Embed and then found; the
    recall that scheduled the fill answers first, counting them as not indexed."""
    fake = FakeEmbedder(unavailable=CAUSE)
    with tool_context(tmp_path, fake) as ctx:
        tools = Tools(ctx)
        tools.call("memory_remember", {"label": "Port", "content": "api listens on port 8080"})
        tools.call("memory_remember", {"label": "Db", "content": "postgres 16", "store": "global"})
        fake.unavailable = None
        query = {"query": "which port does the api use"}
        first = tools.call("memory_recall", query).text
        assert first.endswith("(2 memories are not indexed yet and were not searched.)")
        assert ctx.pending_fill.run_scheduled() == 2
        text = tools.call("memory_recall", query).text
        assert "# Port" in text and "not indexed" not in text
    unindexed = "SELECT count(*) FROM entries WHERE embedding IS NULL"
    assert rows(tmp_path / "thatch.db", unindexed) == [(0,)]


def test_recall_reports_unindexed_memories(tmp_path: Path) -> None:
    """A pending memory the fill could not index is counted under the results."""
    fake = FakeEmbedder(unavailable=CAUSE)
    with tool_context(tmp_path, fake) as ctx:
        tools = Tools(ctx)
        tools.call("memory_remember", {"label": "A", "content": "alpha"})
        tools.call("memory_remember", {"label": "B", "content": "beta"})

        class QueryOnly(FakeEmbedder):
            def embed(self, texts, kind, **kwargs):  # type: ignore[no-untyped-def,override]
                if kind is Kind.PASSAGE:
                    raise RuntimeError("passages fail")
                return super().embed(texts, kind, **kwargs)

        tools.ctx.embedder = QueryOnly()
        assert tools.call("memory_recall", {"query": "alpha"}).text == (
            "No matching memories found.\n\n(2 memories are not indexed yet and were not searched.)"
        )
        tools.call("memory_forget", {"label": "B"})
        assert tools.call("memory_recall", {"query": "alpha"}).text.endswith(
            "(1 memory is not indexed yet and was not searched.)"
        )


def test_recall_counts_unindexed_memories_up_to_a_cap(tmp_path: Path) -> None:
    """Every recall counts the memories its scope holds not indexed yet: exactly up to
    10,000, then "more than 10000" (one row past the cap read), where the exact count read
    every pending row of the scope at every recall (8-19 ms at 100k)."""
    with tool_context(tmp_path, FakeEmbedder()) as ctx:
        tools = Tools(ctx)

        def pending(first: int, last: int) -> None:
            with contextlib.closing(sqlite3.connect(tmp_path / "thatch.db")) as conn, conn:
                conn.executemany(
                    "INSERT INTO entries (slug, store, label, content, created_at, updated_at) "
                    "VALUES (?1, 'o/r', ?1, 'x', 't', 't')",
                    [(f"m{i}",) for i in range(first, last)],
                )

        pending(0, PENDING_COUNTED_UP_TO)
        assert tools.call("memory_recall", {"query": "alpha"}).text == (
            "No matching memories found.\n\n"
            f"({PENDING_COUNTED_UP_TO} memories are not indexed yet and were not searched.)"
        )
        pending(PENDING_COUNTED_UP_TO, PENDING_COUNTED_UP_TO + 2)
        assert tools.call("memory_recall", {"query": "alpha"}).text == (
            "No matching memories found.\n\n"
            f"(more than {PENDING_COUNTED_UP_TO} memories are not indexed yet and were not "
            "searched.)"
        )
        report = tools.recall(query="alpha", stamp=False)  # thatch search, the UI's search box
        assert (report.pending, report.pending_more) == (PENDING_COUNTED_UP_TO, True)


def test_real_client_with_nothing_listening(tmp_path: Path, short_tmp: Path) -> None:
    """The real client without a server: recall is an isError naming the socket; remember
    still saves."""
    client = EmbedderClient(f"unix://{short_tmp}/none.sock", autostart=False)
    with tool_context(tmp_path, client) as ctx:
        tools = Tools(ctx)
        recall = tools.call("memory_recall", {"query": "x"})
        assert recall.is_error
        assert recall.text.startswith("Embedding service unavailable: ")
        assert "none.sock" in recall.text and "Fix: " in recall.text
        saved = tools.call("memory_remember", {"label": "Kept", "content": "never lost"})
        assert not saved.is_error and "Embedding pending" in saved.text
        assert rows(tmp_path / "thatch.db") == [("o/r", "kept", "Kept")]


def test_round_trip_with_real_mock_embedder(tmp_path: Path, mock_embedder: EmbedderProcess) -> None:
    """Against a real embedder process: remember tags the model, recall finds it first."""
    client = EmbedderClient(mock_embedder.address, autostart=False)
    with tool_context(tmp_path, client) as ctx:
        tools = Tools(ctx)
        tools.call(
            "memory_remember", {"label": "Tests", "content": "run the tests with make check"}
        )
        tools.call("memory_remember", {"label": "Editor", "content": "the user prefers vim keys"})
        text = tools.call("memory_recall", {"query": "run the tests"}).text
        assert text.split("\n")[3] == "# Tests"
        models = rows(tmp_path / "thatch.db", "SELECT DISTINCT model FROM entries")
        assert len(models) == 1 and models[0][0]


def test_meaning_level_recall_with_minilm(
    tmp_path: Path, minilm_dir: Path, short_tmp: Path
) -> None:
    """With the real MiniLM model, a paraphrased question finds the right memory."""
    with (
        embedder_process(str(minilm_dir), socket_dir=short_tmp) as proc,
        tool_context(tmp_path, EmbedderClient(proc.address, autostart=False)) as ctx,
    ):
        tools = Tools(ctx)
        for label, content in [
            ("Deployment", "Production is deployed by pushing a git tag; CI ships it to Fly.io."),
            ("Editor", "The user prefers tabs over spaces in every language."),
            ("Database", "The service stores its data in PostgreSQL 16."),
        ]:
            assert not tools.call("memory_remember", {"label": label, "content": content}).is_error
        text = tools.call("memory_recall", {"query": "how do we release to prod?"}).text
        assert text.split("\n")[3] == "# Deployment"
        text = tools.call("memory_recall", {"query": "indentation style", "limit": 1}).text
        assert text.split("\n")[3] == "# Editor"


def test_a_text_the_embedder_refuses_does_not_block_the_others(tmp_path: Path) -> None:
    """find_duplicates fills what it can; a refused legacy row stays pending, no error."""
    from thatch.embedder.client.errors import EmbedRequestError

    class Picky(FakeEmbedder):
        def embed(self, texts, kind, *, timeout=30.0, start_wait=20.0):  # type: ignore[no-untyped-def]
            if any("REFUSED" in text for text in texts):
                raise EmbedRequestError("texts[0] is too long: 100001 characters (max 100000)")
            return super().embed(texts, kind, timeout=timeout, start_wait=start_wait)

    with tool_context(tmp_path, Picky()) as ctx:
        ctx.store.remember("o/r", "legacy", "# legacy\n\nREFUSED", None, None)
        ctx.store.remember("o/r", "fine", "# fine\n\nport 8080", None, None)
        result = Tools(ctx).call("find_duplicates", {})
        assert (result.is_error, result.text) == (
            False,
            'No duplicate candidates found in "o/r" above threshold 0.85.',
        )
        pending = rows(tmp_path / "thatch.db", "SELECT slug FROM entries WHERE embedding IS NULL")
        assert pending == [("legacy",)]
