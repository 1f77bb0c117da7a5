"""The tool registry is the one list of tools: the hooks' copy of it, dispatch, tools/list.

The hooks keep a copy of the names because their hot path imports the standard library
only (test_hooks_buffer.test_tool_hooks_import_only_the_queue holds them to that).
"""

from __future__ import annotations

from pathlib import Path

from thatch.frontend.hooks import queue
from thatch.frontend.tools.memory_tools import Tools
from thatch.frontend.tools.registry import (
    LATER_PHASE_TOOLS,
    TOOL_SPECS,
    draining_tool_names,
    hook_tool_names,
)

from tests.support.fake_embedder import tool_context


def test_the_hooks_copy_of_the_tool_names_is_the_registrys() -> None:
    """queue.THATCH_TOOLS / DRAINING_TOOLS hold exactly what the registry says they must."""
    assert hook_tool_names() == queue.THATCH_TOOLS, (
        f"set frontend/hooks/queue.py THATCH_TOOLS = {hook_tool_names()!r}"
    )
    assert draining_tool_names() == queue.DRAINING_TOOLS, (
        f"set frontend/hooks/queue.py DRAINING_TOOLS = {draining_tool_names()!r}"
    )
    assert draining_tool_names() == ("memory_remember", "extraction_done")


def test_every_name_is_registered_once() -> None:
    names = [spec.name for spec in TOOL_SPECS]
    assert len(set(names)) == len(names)
    assert not set(names) & set(LATER_PHASE_TOOLS)
    assert len(set(hook_tool_names())) == len(hook_tool_names())


def test_a_registered_tool_is_served_and_a_later_phase_one_is_not(tmp_path: Path) -> None:
    """Tools.call dispatches every registered name to a handler; reserved names are unknown."""
    tools = Tools(tool_context(tmp_path))
    for spec in TOOL_SPECS:
        result = tools.call(spec.name, {})
        assert not result.text.startswith("Unknown tool"), (spec.name, result.text)
    for name in LATER_PHASE_TOOLS:
        assert tools.call(name, {}).text == f"Unknown tool: {name}"
    assert tools.call("store_list", {}).text == "- global"
    tools.ctx.store.close()
