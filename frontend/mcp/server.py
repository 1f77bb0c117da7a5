"""``thatch mcp``: the stdio MCP server over the tool layer (docs/tools.md §server).

thatch owns its tools' schemas and argument checks, so it sits on the SDK's low-level
``Server``: ``tools/list`` publishes each registry entry's ``input_schema``, and
``tools/call`` hands the raw JSON arguments to ``Tools.call``, which validates them and
answers with the spec's one-line messages. The first ``tools/call`` result starts with
the setup-check warning. Arguments that are no JSON object reach the handler through the
stdio transport (stdio.py: the SDK would refuse them as a protocol error).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import mcp.types as types
from mcp.server import Server, ServerRequestContext
from mcp_types import RequestId
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from thatch.frontend.mcp.backend import Backend, FirstResultPrefix, Services
from thatch.frontend.mcp.stdio import ARGUMENTS_META_KEY, serve_stdio
from thatch.frontend.tools.after_reply import AfterReply
from thatch.frontend.tools.context import ToolContext
from thatch.frontend.tools.memory_tools import ToolResult, Tools
from thatch.frontend.tools.registry import TOOL_SPECS
from thatch.frontend.tools.spec import ToolSpec
from thatch.frontend.tools.validation import input_schema

if TYPE_CHECKING:
    from thatch.frontend.tools.default_behaviors import DefaultSeeder

__all__ = [
    "FirstResultPrefix",
    "build_server",
    "calling_server",
    "make_server",
    "run_stdio",
    "start_services",
]

TOOL_THREADS = 4


def server_version() -> str:
    from thatch.common.version import thatch_version

    return thatch_version()


def make_server(ctx: ToolContext, after_reply: AfterReply | None = None) -> Server[Any]:
    """An MCP server exposing the phase-1 tools over ``ctx`` (one per host session).

    With ``after_reply``, recalls queue their recall-count stamps there; the transport
    releases them once the answers are written.
    """
    tools = Tools(ctx, after_reply)
    return calling_server(tools.call, FirstResultPrefix(ctx.first_result_prefix), tools.specs)


def calling_server(
    call: Callable[[str, object], ToolResult],
    prefix: FirstResultPrefix,
    specs: Sequence[ToolSpec] = TOOL_SPECS,
) -> Server[Any]:
    """The server for the tools ``specs``, whose ``tools/call`` runs ``call(name,
    arguments)`` (``Tools.call``, or ``Backend.call``) with ``prefix`` before the first
    result."""
    # Tool calls run in worker threads: one waiting for the embedder (up to 20 s) must not
    # hold up tools that need none. The Store serialises its own methods (one lock, one
    # connection), so concurrent calls interleave like separate frontends would.
    limiter = anyio.CapacityLimiter(TOOL_THREADS)

    async def call_tool(
        _ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        arguments = raw_arguments(params)
        result = await anyio.to_thread.run_sync(call, params.name, arguments, limiter=limiter)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=prefix.take() + result.text)],
            is_error=result.is_error,
        )

    return build_server(call_tool, specs)


def build_server(on_call_tool: Any = None, specs: Sequence[ToolSpec] = TOOL_SPECS) -> Server[Any]:
    """The server's listing side for the tools ``specs`` (those served: the features
    switched off are not): everything but ``tools/call`` (``make_server`` adds it), which
    is what the quick start's answer sheet records (setup writes it)."""
    schemas = {spec.name: input_schema(spec.published_params()) for spec in specs}
    listed = [listed_tool(spec) for spec in specs]

    async def list_tools(
        _ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def no_prompts(
        _ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=[])

    async def no_resources(
        _ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[])

    async def no_resource_templates(
        _ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[])

    server: Server[Any] = Server(
        "thatch",
        version=server_version(),
        get_tool_input_schema=schemas.get,
        on_list_tools=list_tools,
        on_call_tool=on_call_tool,
        # Empty lists for hosts that ask whatever the capabilities say (thatch answered
        # them so from the start); serve_stdio advertises tools only.
        on_list_prompts=no_prompts,
        on_list_resources=no_resources,
        on_list_resource_templates=no_resource_templates,
    )

    async def discover(
        _ctx: ServerRequestContext[Any], _params: types.RequestParams | None
    ) -> types.DiscoverResult:
        # The SDK's own answer derives capabilities from the handlers registered, which
        # would advertise the empty prompt and resource lists: tools only, as initialize.
        return types.DiscoverResult(
            supported_versions=list(MODERN_PROTOCOL_VERSIONS),
            capabilities=served_capabilities(server),
            instructions=server.instructions,
        )

    server.add_request_handler("server/discover", types.RequestParams, discover)
    return server


def listing_server(env: Mapping[str, str]) -> Server[Any]:
    """The listing side for the tools ``env`` serves (the switched-off features' are not):
    what setup records in the quick start's answer sheet."""
    from thatch.frontend.switches import features_off
    from thatch.frontend.tools.registry import served_specs

    return build_server(specs=served_specs(features_off(env)))


def served_capabilities(server: Server[Any]) -> types.ServerCapabilities:
    """What thatch advertises, in either era: tools only (the prompt and resource lists
    it answers are empty, for hosts that ask whatever the capabilities say)."""
    capabilities = server.create_initialization_options().capabilities
    extensions = capabilities.extensions or None  # the SDK's discover omits an empty map
    return capabilities.model_copy(
        update={"prompts": None, "resources": None, "extensions": extensions}
    )


def listed_tool(spec: ToolSpec) -> types.Tool:
    return types.Tool(
        name=spec.name,
        description=spec.description,
        input_schema=input_schema(spec.published_params()),
    )


def raw_arguments(params: types.CallToolRequestParams) -> object:
    """The caller's arguments as sent: non-object ones travel in ``_meta`` (stdio.py)."""
    meta: Mapping[str, Any] = params.meta or {}
    return meta.get(ARGUMENTS_META_KEY, params.arguments)


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


def start_embedder_in_background(ctx: ToolContext) -> threading.Thread:
    """Ensure an embedder runs without delaying replies (docs/embedder.md §client)."""

    def run() -> None:
        try:
            ctx.embedder.ensure_started(wait=0)
        except Exception as error:  # tools report the embedder state themselves
            print(f"[thatch] embedder not started: {error}", file=sys.stderr)

    thread = threading.Thread(target=run, name="thatch-embedder-start", daemon=True)
    thread.start()
    return thread


def start_branch_sync(ctx: ToolContext) -> threading.Thread:
    """Branch memory follows git from the server's start too (docs/database.md
    §branch-lifecycle): a host without thatch's hooks still syncs once per session. On its
    own thread, over the server's one connection (its lock serialises the transactions);
    a failure costs only the sync."""

    def run() -> None:
        try:
            import time

            from thatch.frontend.branch_sync import session_sync

            now_ms = time.time_ns() // 10**6
            session_sync(ctx.store, ctx.project_store, ctx.project_dir, ctx.env, now_ms)
        except Exception as error:
            print(f"[thatch] branch sync skipped: {error}", file=sys.stderr)

    thread = threading.Thread(target=run, name="thatch-branch-sync", daemon=True)
    thread.start()
    return thread


def run_stdio(
    env: Mapping[str, str],
    open_context: Callable[[], ToolContext],
    lead: bytes = b"",
    quiet: Sequence[RequestId] = (),
) -> None:
    """Serve on stdin/stdout until EOF or SIGTERM; both end the process with status 0.

    ``open_context`` opens the database (``ToolContext.from_env``); when it raises
    ``StoreError`` the server serves anyway, each tool call answering the error until
    one opens it (backend.py). ``lead`` and ``quiet``: what the quick start read and
    answered (``serve_stdio``)."""
    from thatch.frontend.switches import features_off
    from thatch.frontend.tools.registry import served_specs

    configure_stderr_logging()
    # Recall counts are written after each answer is out, off its path.
    after_reply = AfterReply()
    backend = Backend(open_context, start_services, after_reply)
    backend.report_unopened()
    server = calling_server(backend.call, backend.prefix, served_specs(features_off(env)))
    refresh_answer_sheet(env, server)

    async def serve() -> None:
        async with anyio.create_task_group() as group:

            async def watch_signals() -> None:
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for _ in signals:
                        # The stdin reader sits in a blocking read no cancellation can
                        # interrupt; SQLite transactions make an immediate exit safe.
                        sys.stdout.flush()
                        after_reply.close()  # recall counts still queued are written
                        backend.close_scan()
                        os._exit(0)

            group.start_soon(watch_signals)
            await serve_stdio(server, after_reply.release, lead, quiet)
            group.cancel_scope.cancel()

    try:
        anyio.run(serve)
    finally:
        try:
            after_reply.close()
        finally:
            backend.close()


def start_services(ctx: ToolContext) -> Services:
    """Start what the server runs beside its tool calls over an open database."""
    from thatch.frontend.hooks.scan_service import start_scan_service
    from thatch.frontend.tools.duplicate_check import DuplicateChecker

    start_embedder_in_background(ctx)
    # Pending memories are filled on this thread when a tool call schedules it, never on
    # a request's path; ``ctx.close`` stops it.
    ctx.pending_fill.start()
    # Memories older than an index (schema m009's, on the first open after an upgrade) are
    # indexed on this thread, a short transaction at a time; ``ctx.close`` stops it.
    ctx.backlog_fill.start()
    # The prompt hook's warm recall path (recall_scan.py, scan_service.py); binds in its own thread.
    scan = start_scan_service(ctx)
    start_branch_sync(ctx)
    seeder = start_seeding(ctx)
    # Duplicate candidates for memories no write compared (an upgraded database).
    checker = DuplicateChecker(ctx.store).start()

    def close_scan() -> None:
        if scan is not None:
            scan.close()

    def close() -> None:
        close_scan()
        seeder.close()
        checker.close()

    return Services(ctx, close, close_scan)


def refresh_answer_sheet(env: Mapping[str, str], server: Server[Any]) -> threading.Thread | None:
    """Write the quick start's answers (answer_sheet.py) when they are missing or stale,
    in a thread of its own, off every request's path."""
    from thatch.frontend.mcp.answer_sheet import load_sheet, sheet_key, write_sheet

    if load_sheet(env, sheet_key()) is not None:
        return None

    def run() -> None:
        try:
            write_sheet(env, server)
        except Exception as error:  # the next start is slower, nothing else
            print(f"[thatch] quick-start answers not written: {error}", file=sys.stderr)

    # Not a daemon: a session that ends at once still leaves the answers for the next.
    thread = threading.Thread(target=run, name="thatch-answer-sheet")
    thread.start()
    return thread


def start_seeding(ctx: ToolContext) -> DefaultSeeder:
    """Seed the default behaviors (engines.md §6) off every request's path."""
    from thatch.frontend.tools.default_behaviors import DefaultSeeder

    return DefaultSeeder(ctx.store, ctx.embedder, version=server_version()).start()
