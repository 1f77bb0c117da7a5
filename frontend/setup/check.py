"""Is thatch set up for the host that started this MCP server? (docs/hooks.md §setup-check,
docs/cli.md §doctor)

The MCP server calls ``setup_warning`` once at start and shows the message to the agent
so it can tell the user; the server never rewrites setup files itself. ``doctor_status``
gives ``thatch doctor`` its ``setup:<host>`` verdict by dry-running setup.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from thatch.common.environment import HOSTS
from thatch.frontend.setup import block
from thatch.frontend.setup.hosts import HOST_NAMES, Scope, host_paths, instruction_files
from thatch.frontend.setup.installed import has_own_entry, read_text

if TYPE_CHECKING:
    from thatch.frontend.setup.run import Line

__all__ = ["doctor_status", "has_own_entry", "setup_status", "setup_warning"]

Status = Literal["installed", "markers-broken", "not-installed"]
# Doctor's fix for a damaged block, before its setup command: prose that names no program
# ("the partial thatch block, then thatch setup" gave the first `thatch` the prose).
REMOVE_PARTIAL = "remove the partial block, then rerun setup"


def setup_status(host: str, project_dir: Path, env: Mapping[str, str]) -> tuple[Status, Path]:
    """The host's setup state and the instruction file it concerns.

    Installed when the local or the global instruction file holds a well-formed block;
    else markers-broken naming the first file with a damaged block; else not-installed
    naming the local file.
    """
    files = instruction_files(host, project_dir, env)
    broken: Path | None = None
    for path in files:
        text = read_text(path)
        if text is None:
            continue
        kind = block.analyse(text).kind
        if kind in ("sentinel", "legacy"):
            return "installed", path
        if kind == "broken" and broken is None:
            broken = path
    if broken is not None:
        return "markers-broken", broken
    return "not-installed", files[0]


def _scope_flag(host: str, path: Path, project_dir: Path, env: Mapping[str, str]) -> str:
    _, global_file = instruction_files(host, project_dir, env)
    return f"thatch setup --{host} --global" if path == global_file else f"thatch setup --{host}"


def setup_warning(
    context: object | None = None,
    /,
    *,
    host: str | None = None,
    project_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> str | None:
    """The message for the agent, without the ``[thatch] `` prefix; None when all is well.

    Pass ``host``, ``project_dir`` and ``env`` by keyword, or one object carrying them as
    attributes (the MCP server's ToolContext); this module does not import that class.
    """
    if context is not None:
        host = getattr(context, "host", None)
        project_dir = getattr(context, "project_dir", None)
        env = getattr(context, "env", None)
    if host not in HOSTS or project_dir is None:
        return None
    assert host is not None
    env = {} if env is None else env
    status, path = setup_status(host, project_dir, env)
    if status == "installed":
        return None
    if status == "markers-broken":
        command = _scope_flag(host, path, project_dir, env)
        return (
            f"Tell the user: the thatch block in {path} is damaged; remove the partial block, "
            f"then run `{command}`."
        )
    return (
        f"Tell the user: thatch runs as an MCP server but was never set up for "
        f"{HOST_NAMES[host]} (instructions missing from {path}); run `thatch setup --{host}`."
    )


def doctor_status(
    host: str, project_dir: Path, env: Mapping[str, str], *, bin_path: str, version: str
) -> tuple[Literal["ok", "warn", "FAIL"], str, str | None]:
    """(status, detail, fix) for doctor's ``setup:<host>`` check; changes nothing.

    The scope checked is the first (local, then global) holding an entry of the host's
    own; an instruction block another host wrote does not make this host installed.
    """
    from thatch.frontend.setup.run import SetupRequest, run_setup, user_entry
    from thatch.frontend.untrusted import inline

    scopes: list[Scope] = ["local", "global"]
    scope = next((s for s in scopes if has_own_entry(host, s, project_dir, env)), None)
    if scope is None:
        status, path = setup_status(host, project_dir, env)
        if status == "markers-broken":
            flag = _scope_flag(host, path, project_dir, env)
            fix = f"{REMOVE_PARTIAL}: {flag}"
            return "FAIL", f"damaged thatch block in {inline(str(path))}", fix
        if status == "installed":  # the shared AGENTS.md, written for another host
            mcp = host_paths(host, "local", project_dir, env).mcp
            return (
                "warn",
                f"not installed (no thatch entry in {inline(str(mcp))})",
                f"thatch setup --{host}",
            )
        return (
            "warn",
            f"not installed (instructions missing from {inline(str(path))})",
            f"thatch setup --{host}",
        )
    path = host_paths(host, scope, project_dir, env).instructions
    text = read_text(path)
    fix = _scope_flag(host, path, project_dir, env)
    if text is not None and block.analyse(text).kind == "broken":
        fix = f"{REMOVE_PARTIAL}: {fix}"
        return "FAIL", f"damaged thatch block in {inline(str(path))}", fix
    drifts: list[list[Line]] = []
    # The same executable may be spelled `thatch` (found on PATH) or by its path, depending
    # on PATH when setup ran: compare what the entries run, not how they spell it.
    for spelling in same_executable(bin_path, env):
        request = SetupRequest(
            hosts=[host],
            project_dir=project_dir,
            env=env,
            bin_path=spelling,
            version=version,
            scope=scope,
            # None: the user's earlier choices, as a rerun of setup keeps them (choices.py);
            # settings recording neither permission entry are left as they are.
            post_tool_use=None,
            allow_tools=None,
            unrecorded_allow=None,
            run_claude=False,  # doctor never runs `claude mcp get`: it reads the user file
            dry_run=True,
        )
        lines = run_setup(request).reports[0].lines
        failed = [line.target for line in lines if line.status in ("broken", "conflict")]
        if failed:
            return "FAIL", f"cannot update {', '.join(map(inline, failed))}", fix
        # A printed command is one setup could not run (doctor never runs `claude`): the
        # user-level MCP entry is missing, or runs another executable.
        found = [line for line in lines if line.status in ("would-write", "printed")]
        if not found:
            return "ok", f"installed ({scope})", None
        drifts.append(found)
    # Compared in another spelling than the files', every command differs: the spelling
    # with the fewest changes is the files' own, and its lines name only real drift.
    drifted = min(drifts, key=_changes)  # the first of equals: bin_path's
    printed = [line for line in drifted if line.status == "printed"]
    if not printed:
        return "warn", f"drifted ({scope}): {', '.join(map(_drift, drifted))}", fix
    # What `claude mcp add` would have written: the hooks and the block tell every
    # session to call tools that do not exist until the user runs the command.
    command = printed[0].target
    user = user_entry(env)
    user_file = inline(str(user.path))
    if command.startswith("claude mcp remove"):
        said = f"drifted ({scope}): the thatch server in {user_file} runs another executable"
    elif user.problem:
        said = f"MCP server unknown ({scope}): {user_file} {user.problem}"
    else:
        said = f"MCP server not registered ({scope}): no thatch server in {user_file}"
    rest = [line for line in drifted if line.status != "printed"]
    if rest:
        said += f"; drifted: {', '.join(map(_drift, rest))}"
        command += f", then {fix}"
    return "warn", said, command


def _changes(lines: list[Line]) -> int:
    return sum(max(line.changes, 1) for line in lines)  # a text file: one change


def _drift(line: Line) -> str:
    """A file doctor calls drifted, with the first key in it setup would change."""
    from thatch.frontend.untrusted import inline

    # The target is a path (the project's directory may be any name); the key is shown
    # escaped already (jsonfiles._key_path).
    target = inline(line.target)
    return f"{target} ({line.differs})" if line.differs else target


def same_executable(bin_path: str, env: Mapping[str, str]) -> list[str]:
    """``bin_path`` first, then the other spellings that run the same file: ``thatch`` when
    PATH finds it, the path PATH finds, and the resolved (symlink-free) paths."""
    import os
    import shutil

    on_path = shutil.which("thatch", path=env.get("PATH", os.defpath))
    running = on_path if bin_path == "thatch" else bin_path
    if not running:
        return [bin_path]
    target = os.path.realpath(running)
    candidates = [bin_path, os.path.abspath(running), target]
    if on_path and os.path.realpath(on_path) == target:
        candidates += ["thatch", os.path.abspath(on_path)]
    return list(dict.fromkeys(candidates))
