"""Is thatch set up for the host that started this MCP server? (docs/hooks.md §setup-check,
docs/cli.md §doctor)

The MCP server calls ``setup_warning`` once at start and shows the message to the agent
so it can tell the user; the server never rewrites setup files itself. ``doctor_status``
gives ``thatch doctor`` its ``setup:<host>`` verdict by dry-running setup.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from thatch.common.environment import HOSTS
from thatch.frontend.setup import block
from thatch.frontend.setup.hosts import HOST_NAMES, Scope, host_paths, instruction_files
from thatch.frontend.setup.installed import has_own_entry, read_text

if TYPE_CHECKING:
    from thatch.frontend.setup.choices import ToolsPermission
    from thatch.frontend.setup.claude_servers import UserEntry
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


Verdict = tuple[Literal["ok", "warn", "FAIL"], str, str | None]
# Claude Code runs a project's local-scope server instead of the others of that name.
REMOVE_LOCAL = "remove it from inside the project directory: claude mcp remove --scope local thatch"


def doctor_status(
    host: str, project_dir: Path, env: Mapping[str, str], *, bin_path: str, version: str
) -> Verdict:
    """(status, detail, fix) for doctor's ``setup:<host>`` check; changes nothing.

    The scope checked is the first (local, then global) holding an entry of the host's
    own; an instruction block another host wrote does not make this host installed.
    """
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
    if host != "claude":
        return _verdict(host, scope, project_dir, env, bin_path, version, fix, None, False)
    from thatch.frontend.setup.claude_servers import user_entry

    user = user_entry(env, project_dir)  # the one read of Claude Code's user file
    shadow = _shadowing(user.local, bin_path, env) if user.local is not None else None
    here = user.local is not None and shadow is None
    verdict = _verdict(host, scope, project_dir, env, bin_path, version, fix, user, here)
    if shadow is None or verdict[0] == "FAIL":
        return verdict
    # Claude Code runs the local-scope entry here, whatever the others say.
    said = (
        f"drifted ({scope}): the thatch server registered for this project in "
        f"{inline(str(user.path))} (local scope, which Claude Code prefers here) {shadow}"
    )
    if verdict[0] == "ok":
        return "warn", said, REMOVE_LOCAL
    return "warn", f"{said}; {verdict[1]}", f"{REMOVE_LOCAL}; then {verdict[2]}"


def _verdict(
    host: str,
    scope: Scope,
    project_dir: Path,
    env: Mapping[str, str],
    bin_path: str,
    version: str,
    fix: str,
    user: UserEntry | None,
    here: bool,
) -> Verdict:
    """The verdict on the scope's files, as a dry run of setup finds them. ``user``:
    Claude Code's user file as read (Claude Code only); ``here``: it holds a local-scope
    server for the project running this thatch's MCP server, which stands in for the
    entries it hides."""
    from thatch.frontend.setup.choices import tools_permission
    from thatch.frontend.setup.claude_servers import runner
    from thatch.frontend.setup.run import SetupRequest, run_setup
    from thatch.frontend.untrusted import inline

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
            claude_user=user,
        )
        lines = run_setup(request).reports[0].lines
        failed = [line.target for line in lines if line.status in ("broken", "conflict")]
        if failed:
            return "FAIL", f"cannot update {', '.join(map(inline, failed))}", fix
        # A printed command is one setup could not run (doctor never runs `claude`): the
        # user-level MCP entry is missing, or runs another executable.
        found = [line for line in lines if line.status in ("would-write", "printed")]
        hidden: list[Line] = []
        if here:
            hidden = [line for line in found if _registered_here(line, scope, project_dir, env)]
            found = [line for line in found if line not in hidden]
        if not found:
            if host == "claude":
                permission = tools_permission(project_dir, env)
                if not permission.decided:
                    return _no_permission_rule(scope, project_dir, env, fix, permission)
            # Said only when the local-scope server is what registers thatch here.
            if user is not None and scope == "global" and hidden:
                only = f"the MCP server for this project only, in {inline(str(user.path))}"
                return "ok", f"installed (global; {only})", None
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
    assert user is not None  # only Claude Code's setup prints a command
    user_file = inline(str(user.path))
    through = runner(user.entry.get("command"), user.entry.get("args")) if user.entry else None
    if through is not None:
        said = (
            f"drifted ({scope}): the thatch server in {user_file} runs thatch through "
            f"{through}, maybe another version than the hooks'"
        )
    elif command.startswith("claude mcp remove"):
        said = f"drifted ({scope}): the thatch server in {user_file} runs another executable"
    elif user.problem:
        said = f"MCP server unknown ({scope}): {user_file} {user.problem}"
    else:
        said = f"MCP server not registered ({scope}): no thatch server in {user_file}"
    rest = [line for line in drifted if line.status != "printed"]
    if rest:
        said += f"; drifted: {', '.join(map(_drift, rest))}"
        command += f"; then {fix}"
    return "warn", said, command


def _shadowing(local: dict[str, Any], bin_path: str, env: Mapping[str, str]) -> str | None:
    """What the project's local-scope thatch entry runs when that is not this thatch's
    MCP server (``<bin> mcp``, any spelling of ``<bin>``): Claude Code runs it in the
    project instead of the .mcp.json entry and the user-level one. None when it is."""
    from thatch.common.shell_words import shell_quote
    from thatch.frontend.setup.claude_servers import runner, same_binary
    from thatch.frontend.untrusted import inline

    command, args = local.get("command"), local.get("args")
    words = [a for a in args if isinstance(a, str)] if isinstance(args, list) else []
    if not isinstance(command, str):
        return "runs no command"  # a remote server (`url`), or no server at all
    if not same_binary(command, bin_path, env):
        through = runner(command, args)
        if through is not None:
            return f"runs thatch through {through}, maybe another version than the hooks'"
        return "runs another executable"
    if words[:1] == ["mcp"] and isinstance(args, list) and len(words) == len(args):
        return None
    shown = " ".join(map(shell_quote, [command, *words]))
    return f"runs {inline(shown)} instead of thatch's MCP server"


def _registered_here(line: Line, scope: Scope, project_dir: Path, env: Mapping[str, str]) -> bool:
    """Whether ``line`` is only about the MCP entry a local-scope server stands in for: the
    user-level server a global setup prints, or a project's .mcp.json without a thatch
    entry (one that drifted still runs for teammates, and an unreadable file stays
    reported)."""
    from thatch.frontend.setup.switch_entries import thatch_entry

    if scope == "global":
        return line.status == "printed"
    mcp = host_paths("claude", scope, project_dir, env).mcp
    if mcp is None or line.target != str(mcp) or line.differs == "unreadable":
        return False
    return thatch_entry("claude", mcp) is None


def _no_permission_rule(
    scope: Scope,
    project_dir: Path,
    env: Mapping[str, str],
    setup: str,
    permission: ToolsPermission,
) -> tuple[Literal["warn"], str, str]:
    """Installed, but no settings file decides thatch's tool calls: no rule for them, no
    permission mode that decides, though nobody chose that (the personal
    settings.local.json is not in a teammate's clone). Only that is said: what Claude Code
    then does depends on the mode it runs in."""
    from thatch.frontend.setup.permissions import RULE
    from thatch.frontend.untrusted import inline

    where = host_paths("claude", scope, project_dir, env).permissions
    said = (
        f"installed ({scope}), but no settings file allows, asks for or denies thatch's "
        f"tools ({RULE}); setup writes the rule to {inline(str(where))}"
    )
    for path, why in permission.ignored:
        said += f"; Claude Code ignores {inline(str(path))} ({why})"
    fix = f"allow the tools: {setup}; or have Claude Code ask: {setup} --no-allow-tools"
    return "warn", said, fix


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
