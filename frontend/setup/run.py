"""``thatch setup``: write every host artifact and report one line per artifact (docs/hooks.md
§setup-output).

Each step is idempotent and independent: a broken instruction file or a conflicting
plugin is reported and the remaining artifacts are still brought up to date, so one
damaged file never leaves a host half-configured.
"""

from __future__ import annotations

import copy
import dataclasses
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from thatch.common.shell_words import shell_quote
from thatch.frontend.setup import (
    block,
    choices,
    git_exclude,
    hooks,
    jsonfiles,
    opencode_plugin,
    permissions,
    skills,
)
from thatch.frontend.setup.claude_servers import UserEntry, runner, same_binary, user_entry
from thatch.frontend.setup.hosts import HOST_NAMES, HostPaths, Scope, host_paths
from thatch.frontend.setup.instructions import BLOCK, POINTER_BLOCK, block_text
from thatch.frontend.setup.own_keys import Replaced, merge_own
from thatch.frontend.setup.switch_entries import entry_off, thatch_entry, with_switches
from thatch.frontend.untrusted import inline

__all__ = [
    "HostReport",
    "Line",
    "SetupRequest",
    "SetupResult",
    "UserEntry",
    "run_setup",
    "user_entry",
]

FAILED_STATUSES = frozenset({"broken", "conflict"})
# Exit 1 when the user must act: a file setup could not update, or a command it printed
# and did not run (until `claude mcp add` runs, Claude Code has no thatch tools, or runs
# another executable).
ATTENTION_STATUSES = FAILED_STATUSES | {"printed"}
CHANGED_STATUSES = frozenset({"written", "created", "backed-up"})
CLAUDE_TIMEOUT_SECONDS = 30


@dataclass(frozen=True)
class Line:
    """One artifact's outcome: ``status`` and the path or command it concerns."""

    status: str
    target: str
    detail: str = ""  # why, for people; printed to stderr
    note: str = ""  # what changed inside the file, printed after the target
    # A JSON file's first key that setup changes, or why no key can be named (missing,
    # empty, unreadable); doctor names it.
    differs: str = ""
    changes: int = 0  # how many places in the file differ (doctor compares spellings by it)


@dataclass
class HostReport:
    host: str
    scope: Scope
    lines: list[Line] = field(default_factory=list)


@dataclass(frozen=True)
class SetupRequest:
    hosts: Sequence[str]
    project_dir: Path
    env: Mapping[str, str]
    bin_path: str
    version: str
    scope: Scope = "local"
    # Claude: buffer tool calls on PostToolUse (True) or PostToolBatch (False); None keeps
    # what the hooks file says (PostToolBatch on a first setup; choices.py).
    post_tool_use: bool | None = None
    # Claude: permissions.allow gets mcp__thatch (False: permissions.ask does, recording the
    # choice); None keeps what the scope's settings record (choices.py).
    allow_tools: bool | None = None
    # With allow_tools None and neither entry in the settings: add the rule (True, setup),
    # or leave the permissions as they are (None, doctor).
    unrecorded_allow: bool | None = True
    # Run `claude mcp get` / `claude mcp add` when claude is on PATH; doctor never does and
    # reads Claude Code's user file instead (PATH stays real: it spells the binary).
    run_claude: bool = True
    # Feature → on (True) or off (False) in thatch's MCP entry; a feature not named keeps
    # what the entry says (docs/tools.md §switches).
    switches: Mapping[str, bool] = field(default_factory=dict)
    dry_run: bool = False
    # Claude Code's user file as already read (doctor reads it once per run: it may be
    # megabytes); None: setup reads it when it needs it.
    claude_user: UserEntry | None = None
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))


@dataclass(frozen=True)
class SetupResult:
    reports: list[HostReport]

    @property
    def exit_code(self) -> int:
        failed = any(line.status in ATTENTION_STATUSES for r in self.reports for line in r.lines)
        return 1 if failed else 0

    def stdout_lines(self) -> list[str]:
        out: list[str] = []
        for report in self.reports:
            name = HOST_NAMES[report.host]
            out.append(f"{name} ({report.scope}):")
            for line in report.lines:
                # A dry run names the first key it would change, as doctor does.
                differs = line.differs if line.status == "would-write" else ""
                said = "; ".join(filter(None, [differs, line.note]))
                note = f"  ({said})" if said else ""
                out.append(f"  {line.status}  {inline(line.target)}{note}")
            if any(line.status in CHANGED_STATUSES for line in report.lines):
                out.append(f"Restart {name} to load the changes.")
        return out

    def details(self) -> list[str]:
        return [line.detail for r in self.reports for line in r.lines if line.detail]


# Brings one JSON document up to date; records each user value it replaces in the list.
JsonUpdate = Callable[[dict[str, Any], list[Replaced]], dict[str, Any]]


class _Writer:
    """Applies or, in a dry run, only describes file changes."""

    def __init__(self, dry_run: bool, now: Callable[[], datetime]) -> None:
        self.dry_run = dry_run
        self.now = now

    def text(self, path: Path, new: str, old: str | None) -> Line:
        if old == new:
            return Line("unchanged", str(path))
        if self.dry_run:
            return Line("would-write", str(path))
        jsonfiles.write_atomic(path, new.encode("utf-8", "surrogateescape"))
        return Line("created" if old is None else "written", str(path))

    def json(self, path: Path, update: JsonUpdate) -> list[Line]:
        loaded = jsonfiles.load_object(path)
        replaced: list[Replaced] = []
        try:
            updated = update(copy.deepcopy(loaded.data), replaced)
        except hooks.HookFileConflict as error:
            detail = f"{inline(str(path))}: {error}; fix it by hand, then rerun thatch setup"
            return [Line("conflict", str(path), detail)]
        has_content = loaded.text is not None and loaded.text.strip() != ""
        if loaded.problem is None and has_content and jsonfiles.same_document(updated, loaded.data):
            return [Line("unchanged", str(path))]
        new_text = jsonfiles.dump(updated)
        places = _places(loaded, updated)
        differs = places[0] if places else ""
        # A user's value of a key thatch writes is never replaced silently.
        said = "; ".join(r.describe(self.dry_run) for r in replaced)
        replacing = f"{inline(str(path))}: {said}" if said else ""
        if loaded.problem is None:
            line = self.text(path, new_text, loaded.text)
            line = Line(line.status, line.target, replacing, differs=differs, changes=len(places))
            return [line]
        if self.dry_run:
            detail = (
                f"{inline(str(path))} {loaded.problem}; a copy would be saved before rewriting it"
            )
            both = "; ".join(filter(None, [detail, said]))
            return [Line("would-write", str(path), both, differs=differs, changes=len(places))]
        saved = jsonfiles.backup(path, self.now())
        jsonfiles.write_atomic(path, new_text.encode("utf-8"))
        detail = (
            f"{inline(str(path))} {loaded.problem}; the original is saved as {inline(str(saved))}"
        )
        return [Line("backed-up", str(saved), detail), Line("written", str(path), replacing)]


def _places(loaded: jsonfiles.Loaded, updated: dict[str, Any]) -> list[str]:
    """Where setup changes a JSON file; a file with no JSON object has no key to name
    (its ``data`` is a stand-in ``{}``): what is wrong with it instead. A JSONC file
    holding what setup writes changes in its format only."""
    if loaded.text is None:
        return ["missing"]
    if loaded.unreadable:
        return ["unreadable"]
    if not loaded.text.strip():
        return ["empty"]
    return jsonfiles.differences(loaded.data, updated) or ["format"]


def _read_text(path: Path) -> str | None:
    try:
        return path.read_bytes().decode("utf-8", "surrogateescape")
    except FileNotFoundError:
        return None


def _set_key(
    doc: dict[str, Any],
    key: str,
    entry: dict[str, Any],
    replaced: list[Replaced],
    env_key: str = "env",
    flags: Mapping[str, bool] | None = None,
    where: str = "",
) -> dict[str, Any]:
    """thatch's ``entry`` as ``doc[key].thatch``; ``where``: the path of ``doc`` in its file."""
    flags = flags or {}
    servers = doc.setdefault(key, {})
    if not isinstance(servers, dict):
        raise hooks.HookFileConflict(f'"{key}" is not an object')
    # What the user added to the entry stays, the project's feature switches among it;
    # flags change the switches (docs/tools.md §switches).
    prefix = f"{where}{key}.thatch"
    old = servers.get("thatch")
    if "thatch" in servers and not isinstance(old, dict):
        # A string, a list or null holds no key to keep: thatch's entry takes its place, as
        # setup must for thatch to run, but never silently.
        replaced.append(Replaced(prefix, old, entry, named="entry"))
    merged = merge_own(entry, old, lambda name: f"{prefix}.{name}", replaced)
    servers["thatch"] = with_switches(merged, env_key, flags)
    return doc


def _stdio_entry(bin_path: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "stdio", "command": bin_path, "args": ["mcp"]}
    if env is not None:
        entry["env"] = env
    return entry


def _opencode_mcp(
    doc: dict[str, Any], bin_path: str, flags: Mapping[str, bool], replaced: list[Replaced]
) -> dict[str, Any]:
    if not isinstance(doc.setdefault("mcp", {}), dict):
        raise hooks.HookFileConflict('"mcp" is not an object')
    entry: dict[str, Any] = {"type": "local", "command": [bin_path, "mcp"]}
    if "servers" in doc["mcp"]:
        entry["environment"] = {"THATCH_HOST": "opencode"}
        _set_key(doc["mcp"], "servers", entry, replaced, "environment", flags, where="mcp.")
        return doc
    entry["enabled"] = True
    entry["environment"] = {"THATCH_HOST": "opencode"}
    return _set_key(doc, "mcp", entry, replaced, "environment", flags)


# A printed command is one setup did not run: the user must, or the hooks and the
# instruction block point at tools Claude Code does not have.
RUN_IT = "not run: run it yourself; Claude Code has no thatch tools until then"
# A printed remove-and-add: the registered server still runs, another executable.
RUN_IT_AGAIN = "not run: run it yourself; until then Claude Code runs the other executable"
# A printed remove-and-add for a server that runs thatch through a package runner (uvx),
# which the user may have chosen: setup cannot tell, so it says how to keep it.
RUN_THROUGH = (
    "not run: run it yourself; until then Claude Code runs thatch through {runner}, "
    "maybe another version than the hooks'; to keep that, leave it: each setup run then "
    "prints this and exits 1"
)


def _claude_user_mcp(request: SetupRequest) -> Line:
    line = _user_mcp_line(request)
    if line.status != "printed" or line.note:
        return line
    again = line.target.startswith("claude mcp remove")
    return dataclasses.replace(line, note=RUN_IT_AGAIN if again else RUN_IT)


def _user_mcp_line(request: SetupRequest) -> Line:
    add = ["claude", "mcp", "add", "--scope", "user", "thatch", "--", request.bin_path, "mcp"]
    # Pasted by the user: a path with a tab or an escape must come back as it is.
    shown = " ".join(map(shell_quote, add))
    claude = shutil.which("claude", path=request.env.get("PATH")) if request.run_claude else None
    if claude is None:
        # What `claude mcp get` would read: the user file (doctor always asks it here).
        user = request.claude_user or user_entry(request.env)
        if user.entry is None:
            where = inline(str(user.path))
            has = f"{where} {user.problem}" if user.problem else f"{where} has no thatch server"
            said = f"claude is not on PATH and {has}" if request.run_claude else has
            return Line("printed", shown, f"{said}; run this yourself: {inline(shown)}")
        command = user.entry.get("command")
        args = user.entry.get("args")
        return _registered(
            command if isinstance(command, str) else None,
            args if isinstance(args, list) else [],
            request,
            shown,
        )
    # `claude mcp get` also finds the project's .mcp.json and local-scope entries of the
    # directory it runs in: asked from the project, a local setup hid a missing user entry.
    # From an empty directory only user-scope (and managed) servers answer.
    with tempfile.TemporaryDirectory(prefix="thatch-setup-") as neutral:
        try:
            known = _run([claude, "mcp", "get", "thatch"], request.env, neutral)
        except (OSError, subprocess.SubprocessError) as error:
            failed = f"claude mcp get thatch failed ({inline(str(error))}); run: {inline(shown)}"
            return Line("printed", shown, failed)
        if known.returncode == 0:
            return _registered(*_listed(known.stdout), request, shown)
        if request.dry_run:
            return Line("would-write", shown)
        try:
            added = _run([claude, *add[1:]], request.env, neutral)
        except (OSError, subprocess.SubprocessError) as error:
            failed = f"claude mcp add failed ({inline(str(error))}); run: {inline(shown)}"
            return Line("printed", shown, failed)
    if added.returncode != 0:
        output = (added.stderr or added.stdout).strip().splitlines()
        why = output[-1] if output else f"exit status {added.returncode}"
        return Line(
            "printed", shown, f"claude mcp add failed ({inline(why)}); run: {inline(shown)}"
        )
    return Line("written", shown)


def _registered(command: str | None, args: list[Any], request: SetupRequest, shown: str) -> Line:
    """The user-level thatch server runs ``command`` (None: it names none, taken as current)."""
    if command is None or same_binary(command, request.bin_path, request.env):
        return Line("unchanged", shown)
    remove = "claude mcp remove --scope user thatch"
    run = f"run: {remove} && {inline(shown)}"
    through = runner(command, args)
    if through is None:
        detail = (
            f"the user-level thatch server runs {inline(command)}, not "
            f"{inline(request.bin_path)}; {run}"
        )
        return Line("printed", f"{remove} && {shown}", detail)
    # It runs thatch, fetched by the runner: maybe not the version the hooks run.
    detail = (
        f"the user-level thatch server runs thatch through {through}, maybe another version "
        f"than the hooks' {inline(request.bin_path)}; {run} (or, to keep it, leave it: "
        "setup exits 1 while it runs thatch that way)"
    )
    note = RUN_THROUGH.format(runner=through)
    return Line("printed", f"{remove} && {shown}", detail, note=note)


def _listed(listing: str) -> tuple[str | None, list[Any]]:
    """The ``Command:`` value of ``claude mcp get``'s listing (None when it shows none) and
    its ``Args:`` words."""
    command, args = None, []
    for line in listing.splitlines():
        key, _, value = line.strip().partition(":")
        if key == "Command" and value.strip():
            command = value.strip()
        elif key == "Args":
            args = value.split()
    return command, args


def _run(argv: list[str], env: Mapping[str, str], cwd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=CLAUDE_TIMEOUT_SECONDS,
        check=False,
    )


def _instructions(writer: _Writer, path: Path, text: str = BLOCK) -> Line:
    old = _read_text(path)
    new, outcome, reason = block.install(old, text)
    if new is None:
        detail = (
            f"{inline(str(path))}: damaged thatch block ({reason}); "
            "remove the partial block, then rerun"
        )
        return Line(outcome, str(path), detail)
    return writer.text(path, new, old)


def _plugin(writer: _Writer, path: Path, request: SetupRequest) -> Line:
    old = _read_text(path)
    if old is not None and not opencode_plugin.is_generated(old):
        detail = f"{inline(str(path))} was not written by thatch setup; move it away, then rerun"
        return Line("conflict", str(path), detail)
    off = entry_off("opencode", _mcp_file(request, "opencode"), request.switches)
    return writer.text(path, opencode_plugin.render(request.version, request.bin_path, off), old)


def _mcp_file(request: SetupRequest, host: str) -> Path | None:
    return host_paths(host, request.scope, request.project_dir, request.env).mcp


def _has_block(path: Path) -> bool:
    text = _read_text(path)
    return text is not None and block.analyse(text).kind in ("sentinel", "legacy")


def _claude_block(request: SetupRequest) -> str:
    """The local CLAUDE.md block: a pointer when the user-level file already has the block.

    Claude Code loads both files, so a full local block would put the text in context twice.
    """
    user_file = host_paths("claude", "global", request.project_dir, request.env).instructions
    if _has_block(user_file):
        return POINTER_BLOCK
    return _block(
        request, "claude", host_paths("claude", "local", request.project_dir, request.env)
    )


def _block_step(request: SetupRequest, host: str, paths: HostPaths, writer: _Writer) -> Line:
    return _instructions(writer, paths.instructions, _block(request, host, paths))


def _block(request: SetupRequest, host: str, paths: HostPaths) -> str:
    """The full block, without the engines' sections where the host's entry turns them off.

    Cursor and opencode read one AGENTS.md: the sections stay while either host set up
    there has the engines on, or setting up the two with different switches would rewrite
    the block back and forth (and take the engines' instructions from the host using them).
    """
    if "engines" not in entry_off(host, paths.mcp, request.switches):
        return block_text(engines=True)
    for other in ("cursor", "opencode"):
        if other == host:
            continue
        theirs = host_paths(other, request.scope, request.project_dir, request.env)
        if theirs.instructions != paths.instructions:
            continue
        if other in request.hosts:
            off = entry_off(other, theirs.mcp, request.switches)
        elif thatch_entry(other, theirs.mcp) is not None:
            off = entry_off(other, theirs.mcp, {})
        else:
            continue  # not set up here: its switches are nobody's
        if "engines" not in off:
            return block_text(engines=True)
    return block_text(engines=False)


def _permission_note(before: dict[str, Any], allow: bool | None) -> str:
    if allow is None:
        return ""
    rule = permissions.RULE
    if allow:
        said = [] if permissions.has_rule(before) else [f"permissions.allow += {rule}"]
        said += [f"permissions.ask -= {rule}"] if permissions.asks(before) else []
        return "; ".join(said) + ": thatch's tools run without asking" if said else ""
    said = [f"permissions.allow -= {rule}"] if permissions.has_rule(before) else []
    said += [] if permissions.asks(before) else [f"permissions.ask += {rule}"]
    return "; ".join(said) + ": Claude asks before each thatch tool call" if said else ""


def _claude_settings(
    writer: _Writer,
    path: Path,
    request: SetupRequest,
    update: JsonUpdate | None,
) -> list[Line]:
    """Write one Claude settings file: the hooks (``update``) and/or the permission rule."""
    allow = request.allow_tools  # choices.remembered decided it (None: as it is)
    if update is None and allow is None:
        return []  # doctor, and the settings record no choice: nothing to compare
    before = jsonfiles.load_object(path).data

    def both(doc: dict[str, Any], replaced: list[Replaced]) -> dict[str, Any]:
        doc = update(doc, replaced) if update is not None else doc
        return permissions.apply(doc, allow)

    lines = writer.json(path, both)
    note = _permission_note(before, allow)
    if not note:
        return lines
    return [
        dataclasses.replace(line, note=note)
        if line.target == str(path) and line.status in (*CHANGED_STATUSES, "would-write")
        else line
        for line in lines
    ]


Step = tuple[Path, Callable[[], list[Line]]]


def _claude_steps(request: SetupRequest, paths: HostPaths, writer: _Writer) -> list[Step]:
    claude_hooks, allow_file, post = paths.hooks, paths.permissions, request.post_tool_use
    assert claude_hooks is not None and allow_file is not None
    assert post is not None  # choices.remembered decided it
    bin_path, bin_word = request.bin_path, shlex.quote(request.bin_path)
    switches = request.switches
    steps: list[Step] = []
    if paths.mcp is None:
        steps.append((Path("claude"), lambda: [_claude_user_mcp(request)]))
    else:
        project_mcp, stdio = paths.mcp, _stdio_entry(bin_path)
        steps.append(
            (
                project_mcp,
                lambda: writer.json(
                    project_mcp,
                    lambda d, r: _set_key(d, "mcpServers", stdio, r, flags=request.switches),
                ),
            )
        )
    if request.scope == "local":
        steps.append(
            (
                paths.instructions,
                lambda: [_instructions(writer, paths.instructions, _claude_block(request))],
            )
        )
    else:
        steps.append((paths.instructions, lambda: [_instructions(writer, paths.instructions)]))
        # A project set up locally now gets its block from the user-level file: shorten the
        # project's copy (only the block; the rest of its CLAUDE.md is untouched).
        project_file = host_paths("claude", "local", request.project_dir, request.env).instructions
        if project_file != paths.instructions and _has_block(project_file):
            steps.append(
                (project_file, lambda: [_instructions(writer, project_file, POINTER_BLOCK)])
            )

    def merge_hooks(doc: dict[str, Any], replaced: list[Replaced]) -> dict[str, Any]:
        off = entry_off("claude", paths.mcp, switches)
        return hooks.merge_claude(doc, bin_word, post, off, replaced)

    if allow_file == claude_hooks:
        steps.append(
            (claude_hooks, lambda: _claude_settings(writer, claude_hooks, request, merge_hooks))
        )
    else:
        steps.append((claude_hooks, lambda: writer.json(claude_hooks, merge_hooks)))
        steps.append((allow_file, lambda: _claude_settings(writer, allow_file, request, None)))
    if request.scope == "local":
        steps.append((allow_file, lambda: _excluded_from_git(allow_file, request)))
    return steps


def _excluded_from_git(path: Path, request: SetupRequest) -> list[Line]:
    """The personal settings file kept out of git (docs/claude-code.md §Tool permission)."""
    if not path.exists() and not (request.dry_run and request.allow_tools is not None):
        return []  # no file to keep out (a dry run's rule or ask entry would create it)
    changed = git_exclude.ensure_excluded(path, dry_run=request.dry_run)
    if changed is None:
        return []
    status = "would-write" if request.dry_run else "written"
    return [Line(status, str(changed), note=f"git ignores {path.name} in this clone")]


def _steps(request: SetupRequest, host: str, writer: _Writer) -> list[Step]:
    """(file, action) per artifact, in output order."""
    paths = host_paths(host, request.scope, request.project_dir, request.env)
    bin_path, bin_word = request.bin_path, shlex.quote(request.bin_path)
    steps: list[Step] = []
    if host == "claude":
        steps += _claude_steps(request, paths, writer)
    elif host == "cursor":
        assert paths.mcp is not None and paths.hooks is not None
        env = {"THATCH_PROJECT_DIR": "${workspaceFolder}", "THATCH_HOST": "cursor"}
        entry = _stdio_entry(bin_path, env)
        mcp, hook_file = paths.mcp, paths.hooks
        steps.append(
            (
                mcp,
                lambda: writer.json(
                    mcp, lambda d, r: _set_key(d, "mcpServers", entry, r, flags=request.switches)
                ),
            )
        )
        steps.append((paths.instructions, lambda: [_block_step(request, host, paths, writer)]))
        steps.append(
            (
                hook_file,
                lambda: writer.json(
                    hook_file,
                    lambda d, r: hooks.merge_cursor(
                        d, bin_word, entry_off(host, mcp, request.switches), r
                    ),
                ),
            )
        )
    else:
        assert paths.mcp is not None and paths.plugin is not None
        mcp, plugin = paths.mcp, paths.plugin
        flags = request.switches
        steps.append(
            (mcp, lambda: writer.json(mcp, lambda d, r: _opencode_mcp(d, bin_path, flags, r)))
        )
        steps.append((paths.instructions, lambda: [_block_step(request, host, paths, writer)]))
        steps.append((plugin, lambda: [_plugin(writer, plugin, request)]))
    for path, text in skills.skill_files(paths.skills):

        def write_skill(p: Path = path, t: str = text) -> list[Line]:
            return [writer.text(p, t, _read_text(p))]

        steps.append((path, write_skill))
    return steps


def _host(request: SetupRequest, host: str, writer: _Writer) -> HostReport:
    report = HostReport(host, request.scope)
    for path, action in _steps(request, host, writer):
        try:
            report.lines += action()
        except OSError as error:  # one unreadable file must not stop the other steps
            why = error.strerror or str(error)
            detail = f"{inline(str(path))}: {why}; check the file and its directory, then rerun"
            report.lines.append(Line("conflict", str(path), detail))
    return report


def run_setup(request: SetupRequest) -> SetupResult:
    unknown = [h for h in request.hosts if h not in HOST_NAMES]
    if unknown:
        raise ValueError(f"unknown host {unknown[0]!r}")
    if "claude" in request.hosts:  # decided before any step writes a file it reads
        post, allow = choices.remembered(
            request.post_tool_use,
            request.allow_tools,
            request.scope,
            request.project_dir,
            request.env,
            request.unrecorded_allow,
        )
        request = dataclasses.replace(request, post_tool_use=post, allow_tools=allow)
    writer = _Writer(request.dry_run, request.now)
    return SetupResult([_host(request, host, writer) for host in request.hosts])
