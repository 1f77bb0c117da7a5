"""The thatch servers Claude Code keeps in its user file, and what an entry runs
(docs/hooks.md §setup-files).

``claude mcp add --scope user`` writes the top-level ``mcpServers`` of ``~/.claude.json``
(``$CLAUDE_CONFIG_DIR/.claude.json`` when that is set); ``--scope local``, its default,
writes ``projects["<project dir>"].mcpServers`` of the same file, for that directory
only. In that project a local entry wins over the ``.mcp.json`` entry and the user entry.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from thatch.frontend.regular_files import read_regular
from thatch.frontend.setup import jsonfiles
from thatch.frontend.setup.hosts import claude_user_file

__all__ = ["USER_FILE_LIMIT", "UserEntry", "runner", "same_binary", "user_entry"]

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
    # The project's local-scope server (`claude mcp add --scope local`), when asked for.
    local: dict[str, Any] | None = None


def _thatch(servers: object) -> dict[str, Any] | None:
    entry = servers.get("thatch") if isinstance(servers, dict) else None
    return entry if isinstance(entry, dict) else None


def user_entry(env: Mapping[str, str], project_dir: Path | None = None) -> UserEntry:
    """The thatch server in Claude Code's user file, read as ``claude mcp get`` would (it
    writes plain JSON; JSONC is read too, harmlessly); with ``project_dir``, also the
    project's local-scope server, keyed by the directory as given or resolved."""
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
    local = None
    projects = doc.get("projects")
    if project_dir is not None and isinstance(projects, dict):
        keys = [str(project_dir), os.path.abspath(project_dir), os.path.realpath(project_dir)]
        for key in dict.fromkeys(keys):
            project = projects.get(key)
            local = _thatch(project.get("mcpServers")) if isinstance(project, dict) else None
            if local is not None:
                break
    return UserEntry(path, _thatch(doc.get("mcpServers")), local=local)


def same_binary(a: str, b: str, env: Mapping[str, str]) -> bool:
    """``thatch`` found on PATH and its absolute path are the same server command."""

    def where(command: str) -> str:
        found = shutil.which(command, path=env.get("PATH")) if "/" not in command else command
        return os.path.realpath(found or command)

    return a == b or where(a) == where(b)


def runner(command: object, args: object) -> str | None:
    """The package runner through which an MCP entry runs thatch's ``mcp`` (``uvx``,
    ``uv``, ``pipx``), else None. It runs thatch, maybe another version than the one
    setup wrote into the hooks."""
    if not isinstance(command, str) or os.path.basename(command) not in RUNNERS:
        return None
    words = [a for a in args if isinstance(a, str)] if isinstance(args, list) else []
    named = any(w == "thatch" or w.startswith(("thatch==", "thatch@", "thatch[")) for w in words)
    return os.path.basename(command) if named and "mcp" in words else None
