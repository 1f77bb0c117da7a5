"""What ``thatch mcp``'s tool calls run on: the database, once it opens (docs/tools.md §errors).

A server whose database cannot be opened (not a database, damaged, a directory, a place
this user cannot create it) still serves: initialize and tools/list answer as ever, and
every tools/call answers with the open error and its Fix as an ``isError`` result. Each
call tries opening again first, so the call after the user fixed the file (restored a
backup, moved it aside, set THATCH_DB_PATH for a new session) works without restarting
the agent. Once the database is open, what the server runs beside its tools starts
(``Services``) and the calls go to ``Tools`` over that ``ToolContext`` from then on.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from thatch.frontend.errors import StoreError
from thatch.frontend.tools.after_reply import AfterReply
from thatch.frontend.tools.context import ToolContext
from thatch.frontend.tools.memory_tools import ToolResult, Tools
from thatch.frontend.tools.operations import one_line
from thatch.frontend.tools.registry import SPECS_BY_NAME
from thatch.frontend.tools.validation import NOT_AN_OBJECT
from thatch.frontend.untrusted import token

__all__ = ["Backend", "FirstResultPrefix", "Services", "unopened"]


class FirstResultPrefix:
    """The setup-check warning, handed out once: to the first tools/call result after
    the database opened (``give`` sets it from the thread that opened it)."""

    def __init__(self, prefix: str | None = None) -> None:
        self._prefix = prefix or ""
        self._lock = threading.Lock()

    def give(self, prefix: str | None) -> None:
        with self._lock:
            self._prefix = prefix or ""

    def take(self) -> str:
        with self._lock:
            prefix, self._prefix = self._prefix, ""
        return prefix


def unopened(error: StoreError) -> str:
    """A tool's answer while the database does not open: the line and what fixes it."""
    return f"{error}. Fix: {error.fix}" if error.fix else str(error)


@dataclass
class Services:
    """What a server runs beside its tool calls over an open database, and stops at exit."""

    ctx: ToolContext
    close: Callable[[], None]  # stops the threads and services (not the ctx)
    close_scan: Callable[[], None]  # the prompt hook's socket, at a signal


class Backend:
    """The server's tools over ``open_context()``'s ``ToolContext``, opened on first need.

    ``open_context`` opens the database and whatever goes with it, raising ``StoreError``
    when it cannot; ``start`` starts what the server runs over an open one. ``close``
    stops those, then closes the context; after it nothing opens again.
    """

    def __init__(
        self,
        open_context: Callable[[], ToolContext],
        start: Callable[[ToolContext], Services],
        after_reply: AfterReply | None = None,
        prefix: FirstResultPrefix | None = None,
    ) -> None:
        self._open_context = open_context
        self._start = start
        self._after_reply = after_reply
        self.prefix = prefix or FirstResultPrefix()
        self._lock = threading.Lock()  # one opening at a time, and none after close
        self._tools: Tools | None = None
        self._services: Services | None = None
        self._closed = False

    def open_database(self) -> StoreError | None:
        """Open the database unless it is open; the error when it does not open."""
        with self._lock:
            if self._tools is not None:
                return None
            if self._closed:
                return StoreError("thatch mcp is shutting down")
            try:
                ctx = self._open_context()
            except StoreError as error:
                return error
            try:
                tools = Tools(ctx, self._after_reply)
                self._services = self._start(ctx)
            except BaseException:
                ctx.close()
                raise
            self.prefix.give(ctx.first_result_prefix)  # before another call can see tools
            self._tools = tools
            return None

    def call(self, name: str, arguments: object) -> ToolResult:
        """``Tools.call`` once the database is open; until then, the error opening it."""
        tools = self._tools
        if tools is None:
            # What no database could change is answered as Tools.call answers it.
            if arguments is not None and not isinstance(arguments, Mapping):
                return ToolResult(NOT_AN_OBJECT, True)
            if name not in SPECS_BY_NAME:
                return ToolResult(f"Unknown tool: {token(name)}", True)
            try:
                error = self.open_database()
            except Exception as failure:  # as Tools.call: one line, never a traceback
                return ToolResult(f"Tool error: {one_line(failure)}", True)
            if error is not None:
                return ToolResult(unopened(error), True)
            tools = self._tools
            assert tools is not None
        return tools.call(name, arguments)

    def report_unopened(self) -> None:
        """Try opening now (the server's start); say on stderr when it does not open."""
        error = self.open_database()
        if error is not None:
            line = unopened(error)
            print(
                f"[thatch] {line} (serving anyway: each tool call answers this until the "
                "database opens)",
                file=sys.stderr,
            )

    def close_scan(self) -> None:
        """At a signal: close the prompt hook's socket, if the server got that far."""
        services = self._services
        if services is not None:
            services.close_scan()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            services, self._services, self._tools = self._services, None, None
        if services is None:
            return
        try:
            services.close()
        finally:
            services.ctx.close()
