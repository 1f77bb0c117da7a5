"""The tool registry: every MCP tool of this release, in tools/list order (docs/tools.md
§tool-order): the memory tools, then ``engine``, then ``chat``.

A ``ToolSpec`` (spec.py) is the whole of a tool: its name, description and parameters
(published by the MCP server as ``tools/list``, checked by ``Tools.call``), its handler or
actions, its role in the extraction queue and the switch that turns it off per project.
Adding a tool is one entry here.

The tool hooks cannot import this module (their hot path imports the standard library
only), so ``queue/classify.py`` keeps a copy of the names (``SERVED_TOOLS``) and of the
draining ones (``DRAINING_TOOLS``); tests/test_tool_registry.py fails when they differ.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from thatch.frontend.tools.chat_specs import CHAT_SPEC
from thatch.frontend.tools.engine_specs import ENGINE_SPEC
from thatch.frontend.tools.memory_specs import MEMORY_SPECS
from thatch.frontend.tools.spec import ToolSpec
from thatch.frontend.tools.validation import Param

__all__ = [
    "SPECS_BY_NAME",
    "TOOL_SPECS",
    "declared_params",
    "served_specs",
    "specs_named",
]

TOOL_SPECS: tuple[ToolSpec, ...] = (*MEMORY_SPECS, ENGINE_SPEC, CHAT_SPEC)

SPECS_BY_NAME: dict[str, ToolSpec] = {spec.name: spec for spec in TOOL_SPECS}


def served_specs(off: Collection[str] = ()) -> tuple[ToolSpec, ...]:
    """The tools served when the features in ``off`` are switched off (switches.py)."""
    return tuple(spec for spec in TOOL_SPECS if spec.feature is None or spec.feature not in off)


def specs_named(specs: Sequence[ToolSpec]) -> dict[str, ToolSpec]:
    return {spec.name: spec for spec in specs}


def declared_params(name: str) -> tuple[Param, ...]:
    """The parameters of tool ``name``, or of the action ``name`` of an action tool (the
    CLI checks its arguments by them: same limits, same messages)."""
    if name in SPECS_BY_NAME:
        return SPECS_BY_NAME[name].params
    for spec in TOOL_SPECS:
        for action in spec.actions:
            if action.name == name:
                return action.params
    raise KeyError(name)
