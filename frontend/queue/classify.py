"""Which tool a call is, seen from the queue: thatch's own, a host meta-tool, or other.

Only "other" calls are queued; a successful thatch memory write or ``extraction_done``
drains, and a fetch names the snapshot's holder (``append``). The rules are docs/hooks.md
§classification.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping
from typing import Any

from thatch.frontend.queue.records import compact, response_text

__all__ = [
    "DRAINING_TOOLS",
    "META_WORDS",
    "SERVED_TOOLS",
    "SUCCESS_MARKERS",
    "THATCH_PREFIXES",
    "call_succeeded",
    "classify",
    "is_meta_tool",
]

# Bare names of thatch's MCP tools, used to recognise thatch's own calls however a host
# prefixes them. SERVED_TOOLS and DRAINING_TOOLS (the tools whose call drains the queue)
# are copies of what the tool registry (tools/registry.py) says; this hot path imports the
# standard library only, and tests/test_tool_registry.py fails when a copy differs.
SERVED_TOOLS = (
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
)
DRAINING_TOOLS = ("memory_remember", "extraction_done")
THATCH_PREFIXES = ("mcp__thatch__", "mcp_thatch_", "thatch_", "thatch:", "thatch.")
# Host meta-tools: queueing them would feed extraction back into itself (an extraction
# sub-agent's dispatch, a skill load) or queue a host's own plumbing (Claude Code's
# ToolSearch loads deferred tool schemas, ListAgents and TaskOutput watch sub-agents).
# Hosts add such tools in every release, so they are known by a rule, not a list: a
# built-in (no server prefix) one of whose words is one of these (or its plural).
META_WORDS = frozenset({"skill", "task", "agent", "tool", "todo"})
# Words of a built-in tool name: runs split at case changes, digits, "_", "-" and spaces.
_NAME_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+")
# A name from some MCP server or namespace, never a host built-in.
_NAMESPACED = re.compile(r"__|[:./]")
# The first words of a successful call's answer (tools/formatting.py, build_payload): the
# hooks drain (or name a snapshot's holder) only on this evidence, never on a failed or
# unknown call.
SUCCESS_MARKERS = {
    "memory_remember": "[saved]",
    "extraction_done": "[acknowledged]",
    "get_extraction_payload": '{"interactions"',
}
_LAST_SEGMENT = re.compile(r"(?:__|[:./])")
# A pattern string, not a compiled object: only aggregator calls need it, and compiling it
# costs more than the rest of a tool hook's work (re caches it after the first use).
_TOOL_WORDS = r"\b(" + "|".join(name for name in SERVED_TOOLS if "_" in name) + r")\b"


def classify(tool_name: str, tool_input: Any = None) -> tuple[str, str | None]:
    """``("thatch", bare)``, ``("meta", None)`` or ``("other", None)`` per docs/hooks.md
    §classification."""
    name = tool_name.strip().lower()
    for prefix in THATCH_PREFIXES:
        if name.startswith(prefix):
            return "thatch", name[len(prefix) :]
    if name.startswith("mcp:") and name[4:] in SERVED_TOOLS:
        return "thatch", name[4:]
    if name in SERVED_TOOLS:
        return "thatch", name
    if is_meta_tool(tool_name):
        return "meta", None
    if _LAST_SEGMENT.split(name)[-1] == "execute":
        found = re.findall(_TOOL_WORDS, compact(tool_input if tool_input is not None else {}))
        if found:
            if any(word in DRAINING_TOOLS for word in found):
                return "thatch", "memory_remember"
            return "thatch", found[0]
    return "other", None


def is_meta_tool(tool_name: str) -> bool:
    """A host built-in about agents, tasks, skills, todos or tools (docs/hooks.md
    §classification): ``Agent``, ``ListAgents``, ``TaskOutput``, ``ToolSearch``, ``skill``."""
    name = tool_name.strip()
    if _NAMESPACED.search(name):
        return False
    for word in _NAME_WORDS.findall(name):
        word = word.lower()
        if word in META_WORDS or (word.endswith("s") and word[:-1] in META_WORDS):
            return True
    return False


def call_succeeded(call: Mapping[str, Any], bare: str, aggregated: bool = False) -> bool:
    """Whether a draining call (``memory_remember``, ``extraction_done``) visibly succeeded:
    its answer starts with the tool's success marker and no error flag is set. A missing,
    failed or unknown answer (``Invalid arguments: …``, a tool the host does not have) is
    not a success, so it drains nothing."""
    marker = SUCCESS_MARKERS.get(bare)
    if marker is None or call.get("isError") is True:
        return False
    response = call.get("tool_response")
    if isinstance(response, str) and response.lstrip()[:1] in ("{", "["):
        # A host that passes the MCP result as JSON text (Cursor's tool_output).
        with contextlib.suppress(ValueError, RecursionError):
            response = json.loads(response)
    text, error = response_text(response)
    if error:
        return False
    if aggregated:  # an aggregator's answer wraps the thatch tool's somewhere inside
        return marker in text
    return text.lstrip().startswith(marker)
