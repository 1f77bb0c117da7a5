"""Did the user decline thatch's MCP server in Claude Code? (docs/claude-code.md §declined)

Claude Code asks before it starts a server from a project's ``.mcp.json`` and records the
answer in the project's settings: ``disabledMcpjsonServers`` (declined),
``enabledMcpjsonServers`` or ``enableAllProjectMcpServers`` (approved). When thatch's
server was declined its tools do not exist, so the hooks must stop nudging toward them.

Runs on the hook paths: stdlib only, at most two small files read, never raises.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

__all__ = ["MAX_SETTINGS_BYTES", "claude_server_declined"]

SERVER_NAME = "thatch"
MAX_SETTINGS_BYTES = 1 << 20  # settings files are a few KB; never parse something huge

Verdict = Literal["declined", "approved", "silent"]


def _verdict(path: Path) -> Verdict:
    """What one settings file says about thatch's project server."""
    from thatch.frontend.regular_files import open_regular

    try:
        with open_regular(path) as handle:  # a FIFO there would block the hook for good
            raw = handle.read(MAX_SETTINGS_BYTES + 1)
        if len(raw) > MAX_SETTINGS_BYTES:
            return "silent"
        doc = json.loads(raw)
    # Missing, unreadable, not JSON, or nested past the parser's depth (a cloned project
    # ships this file): the file says nothing.
    except (OSError, ValueError, RecursionError):
        return "silent"
    if not isinstance(doc, dict):
        return "silent"
    disabled = doc.get("disabledMcpjsonServers")
    if isinstance(disabled, list) and SERVER_NAME in disabled:
        return "declined"
    enabled = doc.get("enabledMcpjsonServers")
    if doc.get("enableAllProjectMcpServers") is True or (
        isinstance(enabled, list) and SERVER_NAME in enabled
    ):
        return "approved"
    return "silent"


def claude_server_declined(project_dir: Path, env: Mapping[str, str] | None = None) -> bool:
    """True when the project's Claude settings reject thatch's ``.mcp.json`` server.

    ``env`` is accepted for callers that pass their environment and not read: the answer
    lives in the project's files, which ``project_dir`` locates.

    ``.claude/settings.local.json`` (where Claude Code writes the user's answer to its
    "new MCP server" dialog) is read first and decides when it names the server; then
    the shared ``.claude/settings.json``. A rejection in a file takes precedence over an
    approval in the same file, as Claude Code does. No answer anywhere is not a refusal.
    """
    for name in ("settings.local.json", "settings.json"):
        verdict = _verdict(project_dir / ".claude" / name)
        if verdict != "silent":
            return verdict == "declined"
    return False
