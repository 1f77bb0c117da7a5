"""Where each host keeps its configuration, and which command setup writes for thatch.

Everything is a pure function of an environment mapping and the project directory, so
tests pass their own temporary directories (docs/hooks.md §binary, §setup-files); only
Claude Code's managed settings are at a fixed place per system (``CLAUDE_MANAGED_DIR``,
which tests point elsewhere).
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from thatch.common.environment import Env, config_home, env_get, expand_user, home

__all__ = [
    "CLAUDE_MANAGED_DIR",
    "HOST_NAMES",
    "HostPaths",
    "Scope",
    "claude_config_dir",
    "claude_user_file",
    "cursor_config_dir",
    "host_paths",
    "instruction_files",
    "opencode_config_dir",
    "resolve_bin",
]

Scope = Literal["local", "global"]

HOST_NAMES: dict[str, str] = {"claude": "Claude Code", "cursor": "Cursor", "opencode": "opencode"}

# Where Claude Code reads the managed settings an administrator deploys on this system
# (managed-settings.json, then managed-settings.d/*.json), whoever runs it.
CLAUDE_MANAGED_DIR = Path(
    "/Library/Application Support/ClaudeCode"
    if sys.platform == "darwin"
    else "C:\\Program Files\\ClaudeCode"
    if sys.platform == "win32"
    else "/etc/claude-code"
)


def claude_config_dir(env: Env) -> Path:
    value = env_get(env, "CLAUDE_CONFIG_DIR")
    return expand_user(value, env) if value else home(env) / ".claude"


def claude_user_file(env: Env) -> Path:
    """Where Claude Code keeps its user-scope MCP servers (top-level ``mcpServers``), the
    file ``claude mcp add --scope user`` writes: ``.claude.json`` in ``$CLAUDE_CONFIG_DIR``
    when set, else in the home directory (not in ``~/.claude``)."""
    value = env_get(env, "CLAUDE_CONFIG_DIR")
    return (expand_user(value, env) if value else home(env)) / ".claude.json"


def cursor_config_dir(env: Env) -> Path:
    value = env_get(env, "CURSOR_CONFIG_DIR")
    return expand_user(value, env) if value else home(env) / ".cursor"


def opencode_config_dir(env: Env) -> Path:
    return config_home(env) / "opencode"


@dataclass(frozen=True)
class HostPaths:
    """The files setup manages for one host in one scope (``None``: not a file here)."""

    mcp: Path | None  # None: Claude's user-scope MCP entry goes through `claude mcp add`
    instructions: Path
    hooks: Path | None
    plugin: Path | None
    skills: Path
    # Claude's permission rule: settings.local.json in a project (a grant is personal and
    # Claude keeps that file out of git), the user settings file globally.
    permissions: Path | None = None


def _opencode_config_file(directory: Path) -> Path:
    # opencode reads either name; keep using a .jsonc the user already has.
    jsonc = directory / "opencode.jsonc"
    if jsonc.exists() and not (directory / "opencode.json").exists():
        return jsonc
    return directory / "opencode.json"


def host_paths(host: str, scope: Scope, project_dir: Path, env: Env) -> HostPaths:
    local = scope == "local"
    if host == "claude":
        base = claude_config_dir(env)
        return HostPaths(
            mcp=project_dir / ".mcp.json" if local else None,
            instructions=(project_dir if local else base) / "CLAUDE.md",
            hooks=project_dir / ".claude" / "settings.json" if local else base / "settings.json",
            plugin=None,
            skills=base / "skills",
            permissions=project_dir / ".claude" / "settings.local.json"
            if local
            else base / "settings.json",
        )
    if host == "cursor":
        base = cursor_config_dir(env)
        where = project_dir / ".cursor" if local else base
        return HostPaths(
            mcp=where / "mcp.json",
            instructions=(project_dir if local else base) / "AGENTS.md",
            hooks=where / "hooks.json",
            plugin=None,
            skills=base / "skills",
        )
    if host == "opencode":
        base = opencode_config_dir(env)
        return HostPaths(
            mcp=_opencode_config_file(project_dir if local else base),
            instructions=(project_dir if local else base) / "AGENTS.md",
            hooks=None,
            plugin=(project_dir / ".opencode" if local else base) / "plugins" / "thatch.js",
            skills=base / "skills",
        )
    raise ValueError(f"unknown host {host!r}")


def instruction_files(host: str, project_dir: Path, env: Env) -> tuple[Path, Path]:
    """The host's (local, global) instruction files, in the order the setup check reads them."""
    return (
        host_paths(host, "local", project_dir, env).instructions,
        host_paths(host, "global", project_dir, env).instructions,
    )


def resolve_bin(argv0: str, env: Env) -> str:
    """``thatch`` when PATH finds this very entry point, else the script's absolute path."""
    running = os.path.abspath(argv0)
    on_path = shutil.which("thatch", path=env.get("PATH", os.defpath))
    if on_path and os.path.realpath(on_path) == os.path.realpath(running):
        return "thatch"
    return running
