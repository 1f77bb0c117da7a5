"""The stdio transport of ``thatch mcp``, answering lines that are not JSON-RPC.

The SDK's stdio transport hands unparsable lines to the server as exceptions, which it
drops without a reply; a host waiting on that request would hang. spec/tools.md §1 wants
``-32700`` (id null) for them, and a valid-JSON line that is no JSON-RPC message gets
``-32600``.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

import anyio
import mcp_types
from mcp.server import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import ValidationError


def error_reply(error: Exception) -> SessionMessage:
    invalid_json = isinstance(error, ValidationError) and any(
        detail.get("type") == "json_invalid" for detail in error.errors()
    )
    code, message = (
        (mcp_types.PARSE_ERROR, "Parse error")
        if invalid_json
        else (mcp_types.INVALID_REQUEST, "Invalid Request")
    )
    return SessionMessage(
        mcp_types.JSONRPCError(
            jsonrpc="2.0", id=None, error=mcp_types.ErrorData(code=code, message=message)
        )
    )


class RepliesToGarbage:
    """A read stream that answers transport-level parse failures instead of passing them."""

    def __init__(self, inner: Any, write_stream: Any) -> None:
        self._inner = inner
        self._write = write_stream

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage:
        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item  # type: ignore[no-any-return]
            await self._write.send(error_reply(item))

    def __aiter__(self) -> RepliesToGarbage:
        return self

    async def __anext__(self) -> SessionMessage:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> RepliesToGarbage:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


async def serve_stdio(server: MCPServer) -> None:
    """``MCPServer.run_stdio_async`` with parse-error replies and tools-only capabilities."""
    # The SDK keeps its low-level server private; run_stdio_async does exactly this.
    lowlevel = server._lowlevel_server
    options = lowlevel.create_initialization_options()
    # thatch serves tools only; the SDK would also advertise (empty) prompts and resources.
    options.capabilities = options.capabilities.model_copy(
        update={"prompts": None, "resources": None}
    )
    async with stdio_server() as (read_stream, write_stream):
        await lowlevel.run(RepliesToGarbage(read_stream, write_stream), write_stream, options)
