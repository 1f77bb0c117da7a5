"""What thatch's setup files hold: the text and JSON setup reads back, and whether a host
has an artifact of its own in a scope (docs/cli.md §doctor).

Read by the setup check each ``thatch mcp`` start, by doctor, and by setup itself for the
choices a rerun keeps (``choices.py``); it imports no module that runs a setup step (JSON
is read through ``jsonfiles.load_object``, as the writer reads it: JSONC too).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from thatch.frontend.setup import block
from thatch.frontend.setup.hosts import Scope, host_paths

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["MAX_INSTRUCTIONS_BYTES", "has_own_entry", "json_object", "read_text"]

# An instruction file past this is no instruction file thatch wrote a block into.
MAX_INSTRUCTIONS_BYTES = 16 << 20


def read_text(path: Path) -> str | None:
    """The text of the regular file at ``path``; None when there is none to rely on."""
    from thatch.frontend.regular_files import read_regular

    try:
        # Regular files only: every `thatch mcp` start reads these, and a project can ship
        # a CLAUDE.md that is a link to /dev/zero (or a FIFO) whose read never ends.
        return read_regular(path, MAX_INSTRUCTIONS_BYTES).decode("utf-8", "surrogateescape")
    except OSError:  # missing, unreadable, not a file, huge: nothing thatch can rely on
        return None


def json_object(path: Path | None) -> dict[str, object]:
    """The JSON object in ``path``, read as setup's writer reads it (JSONC too); ``{}``
    when there is none (missing, unreadable, not JSON, nested past what Python parses)."""
    from thatch.frontend.setup.jsonfiles import load_object

    if path is None:
        return {}
    try:
        return load_object(path).data
    except OSError:
        return {}


def _has_thatch_hook(doc: dict[str, object]) -> bool:
    """Any thatch command in a Claude (grouped) or Cursor (flat) hooks map."""
    from thatch.frontend.setup.hooks import is_thatch_command

    events = doc.get("hooks")
    if not isinstance(events, dict):
        return False
    for entries in events.values():
        for entry in entries if isinstance(entries, list) else []:
            inner = entry.get("hooks") if isinstance(entry, dict) else None
            for hook in [entry, *(inner if isinstance(inner, list) else [])]:
                if isinstance(hook, dict) and is_thatch_command(hook.get("command")):
                    return True
    return False


def has_own_entry(host: str, scope: Scope, project_dir: Path, env: Mapping[str, str]) -> bool:
    """Whether ``host`` has an artifact of its own in ``scope``.

    Cursor and opencode share a project's AGENTS.md, so its block proves neither: only
    their MCP entry, hooks or plugin do. CLAUDE.md is Claude's alone and counts.
    """
    from thatch.frontend.setup.opencode_plugin import is_generated

    paths = host_paths(host, scope, project_dir, env)
    if host == "claude":
        text = read_text(paths.instructions)
        if text is not None and block.has_marker(text):
            return True
    mcp = json_object(paths.mcp)
    servers = mcp.get("mcp" if host == "opencode" else "mcpServers")
    if isinstance(servers, dict):
        nested = servers.get("servers")
        if "thatch" in servers or (isinstance(nested, dict) and "thatch" in nested):
            return True
    if _has_thatch_hook(json_object(paths.hooks)):
        return True
    plugin = read_text(paths.plugin) if paths.plugin is not None else None
    return plugin is not None and is_generated(plugin)
