"""``thatch mcp``: the stdio MCP server over the tool layer (spec/tools.md §1).

The SDK handles the protocol; thatch keeps argument checking to itself so that hosts get
the spec's one-line messages: each tool is registered with the JSON Schema of its
``Param`` list and a pass-through argument model, and ``Tools.call`` validates the raw
values. A middleware answers non-object ``arguments`` (which the SDK would reject as a
protocol error) and prepends the setup-check warning to the first ``tools/call`` result.
"""

from __future__ import annotations

import inspect
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import anyio
import mcp.types as types
from mcp.server import MCPServer
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver.tools import Tool
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import PlainValidator
from thatch.frontend.after_reply import AfterReply
from thatch.frontend.context import ToolContext
from thatch.frontend.mcp_stdio import serve_stdio
from thatch.frontend.tool_specs import TOOL_SPECS, ToolSpec
from thatch.frontend.tools import Tools
from thatch.frontend.validation import NOT_AN_OBJECT, input_schema

# Annotated as ``str`` so the SDK does not JSON-decode string values; the validator hands
# the raw JSON value through untouched for the tool layer to check.
RawArgument = Annotated[str, PlainValidator(lambda value: value)]
TOOL_THREADS = 4


def server_version() -> str:
    from thatch.cli.main import thatch_version

    return thatch_version()


def make_server(ctx: ToolContext, after_reply: AfterReply | None = None) -> MCPServer:
    """An MCP server exposing the phase-1 tools over ``ctx`` (one per host session).

    With ``after_reply``, the tools queue their after-the-answer work there (recall counts,
    pending fills); the transport releases it once answers are written.
    """
    tools = Tools(ctx, after_reply)
    # Tool calls run in worker threads: one waiting for the embedder (up to 20 s) must not
    # hold up tools that need none. The Store serialises its own methods (one lock, one
    # connection), so concurrent calls interleave like separate frontends would.
    limiter = anyio.CapacityLimiter(TOOL_THREADS)

    def make_tool(spec: ToolSpec) -> Tool:
        async def run_tool(**arguments: Any) -> types.CallToolResult:
            raw = {key: value for key, value in arguments.items() if value is not None}
            result = await anyio.to_thread.run_sync(tools.call, spec.name, raw, limiter=limiter)
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=result.text)],
                is_error=result.is_error,
            )

        run_tool.__name__ = spec.name
        run_tool.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [
                inspect.Parameter(
                    param.name,
                    inspect.Parameter.KEYWORD_ONLY,
                    default=None,
                    annotation=RawArgument,
                )
                for param in spec.params
            ],
            return_annotation=types.CallToolResult,
        )
        tool = Tool.from_function(
            run_tool, name=spec.name, description=spec.description, structured_output=False
        )
        tool.parameters = input_schema(spec.params)
        return tool

    return MCPServer(
        name="thatch",
        version=server_version(),
        tools=[make_tool(spec) for spec in TOOL_SPECS],
        middleware=[FirstCallMiddleware(ctx.first_result_prefix)],
        log_level="WARNING",
        # No list-changed notifications: the tool set is fixed for the process.
        subscriptions=False,
    )


@dataclass
class FirstCallMiddleware:
    """Answers non-object arguments and prefixes the first tools/call result (once)."""

    prefix: str | None

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method != "tools/call":
            return await call_next(ctx)
        params = ctx.params or {}
        arguments = params.get("arguments")
        result: HandlerResult
        if arguments is not None and not isinstance(arguments, dict):
            result = types.CallToolResult(
                content=[types.TextContent(type="text", text=NOT_AN_OBJECT)], is_error=True
            ).model_dump(by_alias=True, mode="json", exclude_none=True)
            if ctx.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS:
                result.pop("resultType", None)  # a 2026-era field older clients don't know
        else:
            result = await call_next(ctx)
        return self._prefixed(result)

    def _prefixed(self, result: HandlerResult) -> HandlerResult:
        prefix, self.prefix = self.prefix, None
        if not prefix or not isinstance(result, dict):
            return result
        content = result.get("content")
        if isinstance(content, list) and content and content[0].get("type") == "text":
            first = dict(content[0])
            first["text"] = prefix + str(first.get("text", ""))
            result = {**result, "content": [first, *content[1:]]}
        return result


# -- stdio process ----------------------------------------------------------------------


class _StderrPrefix(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return "[thatch] " + " ".join(super().format(record).split())


def configure_stderr_logging() -> None:
    """SDK diagnostics go to stderr as one ``[thatch]`` line each, warnings and up."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_StderrPrefix("%(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)


def start_embedder_in_background(ctx: ToolContext) -> threading.Thread | None:
    """Ensure an embedder runs without delaying replies (embedder.md §7)."""
    ensure: Callable[..., object] | None = getattr(ctx.embedder, "ensure_started", None)
    if ensure is None:
        return None

    def run() -> None:
        try:
            ensure(wait=0)
        except Exception as error:  # tools report the embedder state themselves
            print(f"[thatch] embedder not started: {error}", file=sys.stderr)

    thread = threading.Thread(target=run, name="thatch-embedder-start", daemon=True)
    thread.start()
    return thread


def run_stdio(ctx: ToolContext) -> None:
    """Serve on stdin/stdout until EOF or SIGTERM; both end the process with status 0."""
    from thatch.frontend.recall_scan import start_scan_service

    configure_stderr_logging()
    # Recall counts and pending fills run after each answer is written, off its path.
    after_reply = AfterReply()
    server = make_server(ctx, after_reply)
    start_embedder_in_background(ctx)
    # The prompt hook's warm recall path (recall_scan.py); binds in its own thread.
    scan = start_scan_service(ctx)

    async def serve() -> None:
        async with anyio.create_task_group() as group:

            async def watch_signals() -> None:
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for _ in signals:
                        # The stdin reader sits in a blocking read no cancellation can
                        # interrupt; SQLite transactions make an immediate exit safe.
                        sys.stdout.flush()
                        after_reply.close()  # recall counts still queued are written
                        if scan is not None:
                            scan.close()
                        os._exit(0)

            group.start_soon(watch_signals)
            await serve_stdio(server, after_reply.release)
            group.cancel_scope.cancel()

    try:
        anyio.run(serve)
    finally:
        after_reply.close()
        if scan is not None:
            scan.close()
