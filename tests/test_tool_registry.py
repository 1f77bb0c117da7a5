"""The tool registry is the one list of tools: the hooks' copy of it, dispatch.

The hooks keep a copy of the names because their hot path imports the standard library
only (test_hooks_buffer.test_tool_hooks_import_only_the_queue holds them to that).
"""

from __future__ import annotations

from pathlib import Path

from tests.support.fake_embedder import tool_context
from thatch.frontend import queue
from thatch.frontend.tools.memory_tools import Tools
from thatch.frontend.tools.registry import TOOL_SPECS

NAMES = tuple(spec.name for spec in TOOL_SPECS)
DRAINING = tuple(spec.name for spec in TOOL_SPECS if spec.drains_queue)


def test_the_hooks_copy_of_the_tool_names_is_the_registrys() -> None:
    """queue.SERVED_TOOLS / DRAINING_TOOLS hold exactly the registry's names, in its order."""
    assert NAMES == queue.SERVED_TOOLS, f"set queue/classify.py SERVED_TOOLS = {NAMES!r}"
    assert DRAINING == queue.DRAINING_TOOLS, f"set queue/classify.py DRAINING_TOOLS = {DRAINING!r}"
    assert DRAINING == ("memory_remember", "extraction_done")


def test_every_name_is_registered_once() -> None:
    assert len(set(NAMES)) == len(NAMES)


def test_every_registered_tool_is_served(tmp_path: Path) -> None:
    """Tools.call dispatches every registered name to a handler; other names are unknown."""
    tools = Tools(tool_context(tmp_path))
    for name in NAMES:
        result = tools.call(name, {})
        assert not result.text.startswith("Unknown tool"), (name, result.text)
    assert tools.call("memory_search", {}).text == "Unknown tool: memory_search"
    assert tools.call("store_list", {}).text == "- global"
    tools.ctx.store.close()
