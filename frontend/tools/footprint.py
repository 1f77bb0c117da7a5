"""What thatch's tool definitions cost a host's context (docs/tools.md §footprint).

Hosts send every tool's ``{name, description, inputSchema}`` with every model request;
its size in characters, serialized compactly (no spaces, non-ASCII as is, as hosts send
JSON), is what a tool costs. The registry's figures here; tests measure a live
``tools/list`` with ``definition_chars``; bench/footprint.py reports them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from thatch.frontend.tools.spec import ToolSpec
from thatch.frontend.tools.validation import input_schema

__all__ = [
    "BUDGET",
    "definition_chars",
    "tool_definition",
    "tool_definitions_chars",
]

BUDGET = 6_000  # characters of all tool definitions together, every feature on


def tool_definition(spec: ToolSpec) -> dict[str, Any]:
    """What ``tools/list`` says of ``spec`` that a host passes to its model."""
    return {
        "name": spec.name,
        "description": spec.description,
        "inputSchema": input_schema(spec.published_params()),
    }


def definition_chars(tool: Mapping[str, Any]) -> int:
    """Characters of one tool definition (a ``tools/list`` entry or ``tool_definition``):
    its name, description and input schema, serialized compactly."""
    wanted = {key: tool[key] for key in ("name", "description", "inputSchema") if key in tool}
    return len(json.dumps(wanted, ensure_ascii=False, separators=(",", ":")))


def tool_definitions_chars(specs: Sequence[ToolSpec]) -> dict[str, int]:
    """Characters of each tool's definition, by name, in ``specs`` order."""
    return {spec.name: definition_chars(tool_definition(spec)) for spec in specs}
