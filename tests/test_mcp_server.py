"""The MCP server in-process: tools/list contract, results, isError, first-result prefix."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client
from mcp_types import JSONRPCRequest

from tests.support.fake_embedder import FakeEmbedder, rows, tool_context
from thatch.frontend.mcp.server import make_server
from thatch.frontend.mcp.stdio import ARGUMENTS_META_KEY, with_arguments_set_aside
from thatch.frontend.tools.footprint import BUDGET, definition_chars
from thatch.frontend.tools.validation import NOT_AN_OBJECT

pytestmark = pytest.mark.anyio

ORDER = [
    "memory_remember",
    "memory_recall",
    "memory_list",
    "memory_show",
    "memory_forget",
    "store_list",
    "find_duplicates",
    "dedup_mark_checked",
    "extraction_done",
    "get_extraction_payload",
    "engine",
    "chat",
]


@pytest.fixture
def closing() -> Iterator[ExitStack]:
    """Closes the ToolContexts a test opens (with ``closing.enter_context``) when it ends."""
    with ExitStack() as stack:
        yield stack


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_initialize_and_tools_list(tmp_path: Path, closing: ExitStack) -> None:
    """serverInfo is thatch + version; tools come in spec order with their input schemas."""
    async with Client(
        make_server(closing.enter_context(tool_context(tmp_path))), mode="legacy"
    ) as client:
        assert client.server_info is not None and client.server_info.name == "thatch"
        assert client.server_info.version
        assert client.server_capabilities.tools is not None
        assert not client.server_capabilities.tools.list_changed
        listed = (await client.list_tools()).tools
    assert [tool.name for tool in listed] == ORDER
    recall = listed[1].input_schema
    assert recall["type"] == "object" and recall["required"] == ["query"]
    assert recall["properties"]["limit"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 20,
        "default": 10,
    }
    assert all(tool.description for tool in listed)


async def test_all_tool_definitions_fit_the_budget(tmp_path: Path, closing: ExitStack) -> None:
    """What a host sends with every request for thatch's tools (name, description, input
    schema of each, every feature on) stays within 6,000 characters (issue 22 §2), with
    the longest prefix a host puts on the names (Claude Code's ``mcp__thatch__``)."""
    async with Client(
        make_server(closing.enter_context(tool_context(tmp_path))), mode="legacy"
    ) as client:
        listed = (await client.list_tools()).tools
    sizes = {
        tool.name: definition_chars(tool.model_dump(by_alias=True, exclude_none=True))
        for tool in listed
    }
    assert "engine" in sizes and "chat" in sizes
    prefixed = sum(sizes.values()) + len(sizes) * len("mcp__thatch__")
    assert prefixed <= BUDGET == 6_000, sizes


@pytest.mark.parametrize(
    ("env", "absent"),
    [
        ({"THATCH_ENGINES": "off"}, {"engine"}),
        ({"THATCH_CHAT": "off"}, {"chat"}),
        ({"THATCH_ENGINES": "0", "THATCH_CHAT": "false"}, {"engine", "chat"}),
        ({"THATCH_CHAT": "on"}, set()),
    ],
)
async def test_a_feature_switched_off_leaves_tools_list(
    tmp_path: Path, closing: ExitStack, env: dict[str, str], absent: set[str]
) -> None:
    """THATCH_ENGINES=off / THATCH_CHAT=off: the tool is not listed and a call says why;
    the memory tools stay."""
    ctx = closing.enter_context(tool_context(tmp_path))
    ctx.env = env
    async with Client(make_server(ctx), mode="legacy") as client:
        listed = [tool.name for tool in (await client.list_tools()).tools]
        called = {name: await client.call_tool(name, {"action": "status"}) for name in absent}
    assert listed == [name for name in ORDER if name not in absent]
    for name, result in called.items():
        assert result.is_error
        assert result.content[0].text.startswith(f"Tool {name} is switched off for this project")


async def test_calls_return_text_and_is_error(tmp_path: Path, closing: ExitStack) -> None:
    """Results are one text block; refusals, bad arguments and unknown tools set isError."""
    ctx = closing.enter_context(tool_context(tmp_path, FakeEmbedder()))
    async with Client(make_server(ctx), mode="legacy") as client:
        saved = await client.call_tool("memory_remember", {"label": "L", "content": "[1, 2]"})
        assert (saved.is_error, saved.content[0].text) == (False, "[saved] o/r :: L")
        again = await client.call_tool("memory_remember", {"label": "l", "content": "x"})
        assert again.is_error and again.content[0].text.startswith('A memory with label "L"')
        bad = await client.call_tool("memory_recall", {"query": 3, "limit": "0"})
        assert bad.is_error
        assert bad.content[0].text == (
            "Invalid arguments: query: must be a string; limit: must be an integer from 1 to 20"
        )
        unknown = await client.call_tool("nope", {})
        assert (unknown.is_error, unknown.content[0].text) == (True, "Unknown tool: nope")
        empty = await client.call_tool("memory_list", None)
        assert empty.content[0].text.startswith("[o/r] L (")
    assert rows(tmp_path / "thatch.db", "SELECT content FROM entries") == [("# L\n\n[1, 2]",)]


async def test_setup_warning_prefixes_only_the_first_result(
    tmp_path: Path, closing: ExitStack
) -> None:
    """The first tools/call result (even an error) starts with the warning; later ones don't."""
    ctx = closing.enter_context(tool_context(tmp_path))
    ctx.first_result_prefix = "[thatch] run thatch setup --claude\n\n"
    async with Client(make_server(ctx), mode="legacy") as client:
        first = await client.call_tool("nope", {})
        second = await client.call_tool("store_list", {})
    assert first.content[0].text == "[thatch] run thatch setup --claude\n\nUnknown tool: nope"
    assert second.content[0].text == "- global"


async def test_modern_in_process_mode_works_too(tmp_path: Path, closing: ExitStack) -> None:
    """The SDK's direct (non-handshake) in-process path serves the same tools."""
    async with Client(make_server(closing.enter_context(tool_context(tmp_path)))) as client:
        result = await client.call_tool("store_list", {})
    assert result.content[0].text == "- global"


async def test_non_object_arguments_answer_as_tool_error(tmp_path: Path) -> None:
    """Non-object arguments (which the stdio transport sets aside under ``_meta``, as the
    SDK would refuse them) become an isError result, not a protocol error."""
    message = JSONRPCRequest(
        jsonrpc="2.0",
        id=1,
        method="tools/call",
        params={"name": "memory_recall", "arguments": ["q"], "_meta": {"progressToken": 3}},
    )
    assert with_arguments_set_aside(message).params == {
        "name": "memory_recall",
        "_meta": {"progressToken": 3, ARGUMENTS_META_KEY: ["q"]},
    }
    text = 'Invalid arguments: expected an object of named arguments, e.g. {"query": "…"}'
    async with Client(make_server(tool_context(tmp_path)), mode="legacy") as client:
        for arguments in (["q"], "q", 5):
            for name in ("memory_recall", "nope"):
                meta: Any = {ARGUMENTS_META_KEY: arguments}
                result = await client.call_tool(name, meta=meta)
                assert (result.is_error, result.content[0].text) == (True, text)


async def test_a_call_waiting_for_the_embedder_does_not_block_other_tools(
    tmp_path: Path, closing: ExitStack
) -> None:
    """memory_list answers while a memory_recall is still waiting on a slow embedder."""
    import threading

    import anyio

    release = threading.Event()
    entered = threading.Event()

    class SlowEmbedder(FakeEmbedder):
        def embed(self, texts, kind, *, timeout=30.0, start_wait=20.0):  # type: ignore[no-untyped-def]
            entered.set()
            assert release.wait(30)
            return super().embed(texts, kind, timeout=timeout, start_wait=start_wait)

    ctx = closing.enter_context(tool_context(tmp_path, SlowEmbedder()))
    async with Client(make_server(ctx), mode="legacy") as client:
        recalled: list[str] = []

        async def recall() -> None:
            result = await client.call_tool("memory_recall", {"query": "anything at all"})
            recalled.append(result.content[0].text)

        async with anyio.create_task_group() as group:
            group.start_soon(recall)
            await anyio.to_thread.run_sync(entered.wait, 30)
            listed = await client.call_tool("memory_list", {})
            assert listed.content[0].text == 'No memories in "o/r".'
            assert recalled == []  # still waiting on the embedder
            release.set()
    assert recalled == ["No matching memories found."]


def test_the_backend_answers_the_open_error_until_the_database_opens(tmp_path: Path) -> None:
    """Until ``open_context`` stops raising, each call answers its error with the Fix and
    nothing starts; the call after opens once, starts the services once, carries the
    setup warning, and closing stops the services before the context (backend.py)."""
    from thatch.frontend.errors import DatabaseOpenError
    from thatch.frontend.mcp.backend import Backend, Services
    from thatch.frontend.tools.context import ToolContext

    bad = tmp_path / "dir.db"
    refusing = [DatabaseOpenError(bad, "is a directory")] * 2
    events: list[str] = []

    def open_context() -> ToolContext:
        events.append("open")
        if refusing:
            raise refusing.pop()
        ctx = tool_context(tmp_path)
        ctx.first_result_prefix = "[thatch] set me up\n\n"
        return ctx

    def start(ctx: ToolContext) -> Services:
        events.append("start")

        def close() -> None:
            try:  # a closed connection refuses every statement
                ctx.store.conn.execute("SELECT 1")
                events.append("stop (store open: True)")
            except sqlite3.ProgrammingError:
                events.append("stop (store open: False)")

        return Services(ctx, close, lambda: None)

    backend = Backend(open_context, start)
    line = (
        f"cannot open database at {bad}: is a directory. "
        f"Fix: set THATCH_DB_PATH to a file, e.g. {bad / 'thatch.db'}"
    )
    for _ in range(2):
        result = backend.call("store_list", {})
        assert (result.is_error, result.text) == (True, line)
        assert backend.prefix.take() == ""
    # What no database could change answers as ever, without trying to open one.
    unknown = backend.call("no_such_tool", {})
    assert (unknown.is_error, unknown.text) == (True, "Unknown tool: no_such_tool")
    assert backend.call("store_list", [1]).text == NOT_AN_OBJECT
    listed = backend.call("store_list", {})
    assert not listed.is_error, listed.text
    assert backend.prefix.take() == "[thatch] set me up\n\n"
    assert not backend.call("store_list", {}).is_error
    assert events == ["open", "open", "open", "start"]
    backend.close()
    assert events[-1] == "stop (store open: True)"
    closed = backend.call("store_list", {})
    assert (closed.is_error, closed.text) == (True, "thatch mcp is shutting down")
