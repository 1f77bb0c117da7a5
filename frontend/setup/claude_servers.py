"""The thatch servers Claude Code keeps in its user file, and what an entry runs
(docs/hooks.md §setup-files).

``claude mcp add --scope user`` writes the top-level ``mcpServers`` of ``~/.claude.json``
(``$CLAUDE_CONFIG_DIR/.claude.json`` when that is set); ``--scope local``, its default,
writes ``projects["<key>"].mcpServers`` of the same file, for that project only. The key
is Claude Code's (``project_key``): the top of the repository's main checkout, from any
directory or linked worktree of it; outside git, the directory itself. In that project a
local entry wins over the ``.mcp.json`` entry and the user entry.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from thatch.frontend.regular_files import read_regular
from thatch.frontend.setup.hosts import claude_user_file

__all__ = [
    "USER_FILE_LIMIT",
    "UserEntry",
    "project_key",
    "runner",
    "same_binary",
    "user_entry",
]

# Claude Code's user file also holds its session state: large, but never this large.
USER_FILE_LIMIT = 64 << 20

# A `.git` file, `commondir` and `gitdir` are one line each.
_GIT_FILE_LIMIT = 1 << 16

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
    """The thatch server in Claude Code's user file, read as Claude Code reads it: strict
    JSON (``JSON.parse``, a byte order mark dropped), so a file it cannot parse holds no
    server for it, however plain its entry looks; with ``project_dir``, also the project's
    local-scope server, under the key Claude Code looks it up by. The file also holds
    Claude Code's session history, often megabytes: read it once per doctor run."""
    path = claude_user_file(env)
    try:
        raw = read_regular(path, USER_FILE_LIMIT)
    except FileNotFoundError:
        return UserEntry(path, None)
    except OSError as error:  # a directory, a FIFO, larger than the limit, unreadable
        why = error.strerror or str(error)
        return UserEntry(path, None, f"cannot be read ({why})")
    try:
        doc = json.loads(raw.decode("utf-8").removeprefix("\ufeff"))
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return UserEntry(path, None, "cannot be read (not JSON)")
    if not isinstance(doc, dict):
        return UserEntry(path, None, "cannot be read (no JSON object)")
    local = None
    projects = doc.get("projects")
    if project_dir is not None and isinstance(projects, dict):
        project = projects.get(project_key(project_dir))
        local = _thatch(project.get("mcpServers")) if isinstance(project, dict) else None
    return UserEntry(path, _thatch(doc.get("mcpServers")), local=local)


def project_key(project_dir: Path) -> str:
    """The key of ``projects`` in Claude Code's user file for a session started in
    ``project_dir``, as Claude Code computes it (its ``getProjectPathForConfig``): the
    directory's real path; in git, the top of the checkout holding it (the nearest
    directory with a ``.git``), and for a linked worktree the main checkout's top, which
    its ``.git`` file names through the worktree's ``commondir``. So every subdirectory
    and worktree of a repository shares one entry; outside git each directory has its
    own. Files only, no git process."""
    start = unicodedata.normalize("NFC", os.path.realpath(project_dir))
    top = _git_root(start)
    key = start if top is None else _canonical_root(top)
    return os.path.normpath(key).replace("\\", "/")  # Claude's keys use forward slashes


def _git_root(start: str) -> str | None:
    """The nearest directory from ``start`` up holding a ``.git`` directory or file."""
    current = start
    while True:
        try:
            mode = os.stat(os.path.join(current, ".git")).st_mode
        except OSError:
            mode = 0
        if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def _canonical_root(top: str) -> str:
    """``top`` (a checkout's top), or for a linked worktree its main checkout's top: the
    parent of the common git dir its git dir's ``commondir`` names (the common dir itself
    when not named ``.git``, a bare repository's). Claude Code takes the worktree only as
    ``git worktree add`` makes it: its git dir directly under ``<common>/worktrees/``, and
    that git dir's ``gitdir`` file naming this checkout's ``.git``; anything else (a
    submodule, whose git dir has no ``commondir``) is its own project."""

    def line(path: str) -> str:
        return read_regular(path, _GIT_FILE_LIMIT).decode("utf-8").strip()

    try:
        pointer = line(os.path.join(top, ".git"))  # a directory: not a worktree
        if not pointer.startswith("gitdir:"):
            return top
        git_dir = os.path.normpath(os.path.join(top, pointer.removeprefix("gitdir:").strip()))
        common = os.path.normpath(os.path.join(git_dir, line(os.path.join(git_dir, "commondir"))))
        if os.path.dirname(git_dir) != os.path.join(common, "worktrees"):
            return top
        back = os.path.realpath(line(os.path.join(git_dir, "gitdir")), strict=True)
        if back != os.path.join(os.path.realpath(top), ".git"):
            return top
    except (OSError, UnicodeDecodeError):
        return top
    if os.path.basename(common) != ".git":
        return unicodedata.normalize("NFC", common)
    return unicodedata.normalize("NFC", os.path.dirname(common))


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
