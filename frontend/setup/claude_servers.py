"""The thatch server Claude Code keeps in its user file, and what an entry runs
(docs/hooks.md §setup-files).

``claude mcp add --scope user`` writes the top-level ``mcpServers`` of ``~/.claude.json``
(``$CLAUDE_CONFIG_DIR/.claude.json`` when that is set).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from thatch.frontend.regular_files import read_regular
from thatch.frontend.setup import jsonfiles
from thatch.frontend.setup.hosts import claude_user_file

__all__ = ["USER_FILE_LIMIT", "UserEntry", "runner", "user_entry"]

# Claude Code's user file also holds its session state: large, but never this large.
USER_FILE_LIMIT = 64 << 20

# Package runners that fetch and run a package's command: `uvx thatch mcp`,
# `uvx --from thatch thatch mcp`, `uv tool run thatch mcp`, `pipx run thatch mcp`.
RUNNERS = ("uvx", "uv", "pipx")


@dataclass(frozen=True)
class UserEntry:
    """Claude Code's user file and the thatch server in its ``mcpServers``."""

    path: Path
    entry: dict[str, Any] | None  # None: no server, no file, or a file that cannot be read
    problem: str = ""  # why the file cannot be read ("": it can, or there is none)


def _thatch(servers: object) -> dict[str, Any] | None:
    entry = servers.get("thatch") if isinstance(servers, dict) else None
    return entry if isinstance(entry, dict) else None


def user_entry(env: Mapping[str, str]) -> UserEntry:
    """The thatch server in Claude Code's user file, read as ``claude mcp get`` would (it
    writes plain JSON; JSONC is read too, harmlessly)."""
    path = claude_user_file(env)
    try:
        raw = read_regular(path, USER_FILE_LIMIT)
    except FileNotFoundError:
        return UserEntry(path, None)
    except OSError as error:  # a directory, a FIFO, larger than the limit, unreadable
        why = error.strerror or str(error)
        return UserEntry(path, None, f"cannot be read ({why})")
    try:
        text = raw.decode("utf-8")
        try:
            doc = json.loads(text)
        except ValueError:
            doc = jsonfiles.parse_jsonc(text)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return UserEntry(path, None, "cannot be read (not JSON)")
    if not isinstance(doc, dict):
        return UserEntry(path, None, "cannot be read (no JSON object)")
    return UserEntry(path, _thatch(doc.get("mcpServers")))


def runner(command: object, args: object) -> str | None:
    """The package runner through which an MCP entry runs thatch's ``mcp`` (``uvx``,
    ``uv``, ``pipx``), else None. It runs thatch, maybe another version than the one
    setup wrote into the hooks."""
    if not isinstance(command, str) or os.path.basename(command) not in RUNNERS:
        return None
    words = [a for a in args if isinstance(a, str)] if isinstance(args, list) else []
    named = any(w == "thatch" or w.startswith(("thatch==", "thatch@", "thatch[")) for w in words)
    return os.path.basename(command) if named and "mcp" in words else None
