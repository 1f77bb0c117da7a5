"""The tool layer shared by the MCP server and the CLI (docs/tools.md §common-rules, §tools).

``Tools(ctx).call(name, arguments)`` looks the tool up among those served (registry.py,
less the features switched off for the project: switches.py), validates raw JSON
arguments, runs its handler and returns a ``ToolResult``; it never raises. The typed
operations (``remember``, ``recall`` …) are ``operations.Operations``'s.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from thatch.embedder.client.errors import EmbedderUnavailable
from thatch.frontend.errors import DatabaseMovedError, StoreError
from thatch.frontend.store import db
from thatch.frontend.switches import features_off, variable
from thatch.frontend.tools.after_reply import AfterReply
from thatch.frontend.tools.chat_tools import ChatRefused
from thatch.frontend.tools.context import ToolContext
from thatch.frontend.tools.operations import Operations, embedder_error, one_line
from thatch.frontend.tools.operations import Refused as Refused
from thatch.frontend.tools.registry import SPECS_BY_NAME, served_specs, specs_named
from thatch.frontend.tools.validation import NOT_AN_OBJECT, ArgumentError
from thatch.frontend.untrusted import token

__all__ = [
    "ToolResult",
    "Tools",
    "call_tool",
]


@dataclass(frozen=True)
class ToolResult:
    text: str
    is_error: bool = False


class Tools(Operations):
    """The tools over one ``ToolContext``: the typed operations and dispatch by name."""

    def __init__(self, ctx: ToolContext, after_reply: AfterReply | None = None) -> None:
        super().__init__(ctx, after_reply)
        self.specs = served_specs(features_off(ctx.env))
        self._by_name = specs_named(self.specs)

    def call(self, name: str, arguments: object) -> ToolResult:
        """Run tool ``name`` with raw JSON ``arguments``; every failure is an isError result."""
        if arguments is not None and not isinstance(arguments, Mapping):
            return ToolResult(NOT_AN_OBJECT, True)  # whatever the name, as MCP answered it
        spec = self._by_name.get(name)
        if spec is None:
            if name in SPECS_BY_NAME:
                switch = variable(SPECS_BY_NAME[name].feature or "") + "=off"
                return ToolResult(f"Tool {name} is switched off for this project ({switch}).", True)
            return ToolResult(f"Unknown tool: {token(name)}", True)
        try:
            run, values = spec.arguments(arguments)
            db.refuse_moved(self.ctx.store.conn)
            # Reads fail before any write, so a retry with lenient decoding is safe.
            text = db.read_leniently(self.ctx.store.conn, lambda: run(self, values))
            return ToolResult(text)
        except sqlite3.Error as error:
            return ToolResult(str(db.store_error(error, self.ctx.store.path)), True)
        except DatabaseMovedError as error:  # only the user can act: the agent must say so
            return ToolResult(f"{error}. Fix: {error.fix}", True)
        except (ArgumentError, Refused, ChatRefused, StoreError) as error:
            return ToolResult(str(error), True)
        except EmbedderUnavailable as error:
            return ToolResult(embedder_error(error), True)
        except Exception as error:  # the agent gets one line, never a traceback
            if os.environ.get("THATCH_DEBUG") == "1":
                traceback.print_exc(file=sys.stderr)
            return ToolResult(f"Tool error: {one_line(error)}", True)


def call_tool(ctx: ToolContext, name: str, arguments: Mapping[str, Any] | object) -> ToolResult:
    """Convenience for one-off calls: ``Tools(ctx).call(name, arguments)``."""
    return Tools(ctx).call(name, arguments)
