"""The MCP server's setup check: installed, markers-broken, not-installed and the
messages the agent relays (docs/hooks.md §setup-check), plus doctor's verdict."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from thatch.frontend.setup import SetupRequest, run_setup
from thatch.frontend.setup.block import BEGIN, END
from thatch.frontend.setup.check import doctor_status, setup_status, setup_warning

LOCAL_FILE = {"claude": "CLAUDE.md", "cursor": "AGENTS.md", "opencode": "AGENTS.md"}
GIT = shutil.which("git")  # before the env fixture empties PATH


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude-config"))
    monkeypatch.setenv("CURSOR_CONFIG_DIR", str(tmp_path / "cursor-config"))
    monkeypatch.setenv("PATH", str(tmp_path / "nobin"))
    return dict(os.environ)


def register_user_server(env: dict[str, str], bin_path: str) -> None:
    """What `claude mcp add --scope user thatch -- <bin> mcp` writes (setup prints that
    command when `claude` is not on PATH, as in these tests)."""
    entry = {"type": "stdio", "command": bin_path, "args": ["mcp"], "env": {}}
    user_file = Path(env["CLAUDE_CONFIG_DIR"]) / ".claude.json"
    user_file.parent.mkdir(parents=True, exist_ok=True)
    user_file.write_text(json.dumps({"numStartups": 3, "mcpServers": {"thatch": entry}}))


def global_file(tmp_path: Path, host: str) -> Path:
    return {
        "claude": tmp_path / "claude-config" / "CLAUDE.md",
        "cursor": tmp_path / "cursor-config" / "AGENTS.md",
        "opencode": tmp_path / "home" / ".config" / "opencode" / "AGENTS.md",
    }[host]


@pytest.mark.parametrize("host", ["claude", "cursor", "opencode"])
def test_not_installed_message(tmp_path: Path, env: dict[str, str], host: str) -> None:
    """No block anywhere → not-installed naming the local file and the setup command."""
    local = tmp_path / LOCAL_FILE[host]
    local.write_text("# my notes\n")
    assert setup_status(host, tmp_path, env) == ("not-installed", local)
    name = {"claude": "Claude Code", "cursor": "Cursor", "opencode": "opencode"}[host]
    assert setup_warning(host=host, project_dir=tmp_path, env=env) == (
        f"Tell the user: thatch runs as an MCP server but was never set up for {name} "
        f"(instructions missing from {local}); run `thatch setup --{host}`."
    )


@pytest.mark.parametrize("host", ["claude", "cursor", "opencode"])
def test_installed_locally_or_globally(tmp_path: Path, env: dict[str, str], host: str) -> None:
    """A well-formed block in the local or else the global file → installed, no warning."""
    target = global_file(tmp_path, host)
    target.parent.mkdir(parents=True)
    target.write_text(f"x\n{BEGIN}\nbody\n{END}\n")
    assert setup_status(host, tmp_path, env) == ("installed", target)
    assert setup_warning(host=host, project_dir=tmp_path, env=env) is None


@pytest.mark.parametrize("shape", ["fifo", "link to /dev/zero"])
def test_an_instruction_file_that_is_no_file_says_nothing(
    tmp_path: Path, env: dict[str, str], shape: str
) -> None:
    """Every `thatch mcp` start reads these: a FIFO blocked it for good and a committed
    link to /dev/zero read without end. Either is no instruction file: the global one
    decides, at once."""
    local = tmp_path / LOCAL_FILE["claude"]
    if shape == "fifo":
        os.mkfifo(local)
    else:
        local.symlink_to("/dev/zero")
    target = global_file(tmp_path, "claude")
    target.parent.mkdir(parents=True)
    target.write_text(f"x\n{BEGIN}\nbody\n{END}\n")
    assert setup_status("claude", tmp_path, env) == ("installed", target)


def test_legacy_block_counts_as_installed(tmp_path: Path, env: dict[str, str]) -> None:
    """The legacy `# Persistence` block is installed too."""
    (tmp_path / "CLAUDE.md").write_text(
        '# Persistence\nThatch provides persistent memory across sessions.\n"Forget X" ok\n'
    )
    assert setup_status("claude", tmp_path, env)[0] == "installed"


def test_markers_broken_local(tmp_path: Path, env: dict[str, str]) -> None:
    """A damaged local block → markers-broken, fix without --global."""
    local = tmp_path / "CLAUDE.md"
    local.write_text(f"{BEGIN}\nhalf\n")
    assert setup_warning(host="claude", project_dir=tmp_path, env=env) == (
        f"Tell the user: the thatch block in {local} is damaged; remove the partial block, "
        "then run `thatch setup --claude`."
    )


def test_markers_broken_global(tmp_path: Path, env: dict[str, str]) -> None:
    """A damaged global block (local has none) → the fix names --global."""
    target = global_file(tmp_path, "cursor")
    target.parent.mkdir(parents=True)
    target.write_text(f"{END}\n")
    (tmp_path / "AGENTS.md").write_text("no markers\n")
    warning = setup_warning(host="cursor", project_dir=tmp_path, env=env)
    assert warning is not None
    assert f"the thatch block in {target} is damaged" in warning
    assert warning.endswith("run `thatch setup --cursor --global`.")


@pytest.mark.parametrize("host", [None, "vscode", ""])
def test_unknown_host_no_check(tmp_path: Path, env: dict[str, str], host: str | None) -> None:
    """Unknown or missing host → no warning."""
    assert setup_warning(host=host, project_dir=tmp_path, env=env) is None


def test_doctor_status_ok_drifted_and_missing(tmp_path: Path, env: dict[str, str]) -> None:
    """Doctor: warn before setup, ok right after, warn once a hook is removed."""
    status = doctor_status("cursor", tmp_path, env, bin_path="thatch", version="1")
    assert status[0] == "warn" and status[2] == "thatch setup --cursor"
    run_setup(
        SetupRequest(
            hosts=["cursor"], project_dir=tmp_path, env=env, bin_path="thatch", version="1"
        )
    )
    assert doctor_status("cursor", tmp_path, env, bin_path="thatch", version="1")[0] == "ok"
    (tmp_path / ".cursor" / "hooks.json").write_text('{"version": 1}\n')
    state, detail, fix = doctor_status("cursor", tmp_path, env, bin_path="thatch", version="1")
    assert state == "warn" and "hooks.json" in detail and fix == "thatch setup --cursor"


@pytest.mark.parametrize(
    ("file", "change", "key"),
    [
        (
            ".claude/settings.json",
            lambda d: d["hooks"]["UserPromptSubmit"][0]["hooks"][0].update(
                command="thatch flush-tools --json"
            ),
            "hooks.UserPromptSubmit[0].hooks[0].command",
        ),
        (
            ".claude/settings.json",
            lambda d: d["hooks"]["SessionEnd"][0]["hooks"][0].pop("timeout"),
            "hooks.SessionEnd[0].hooks[0].timeout",
        ),
        (".claude/settings.json", lambda d: d["hooks"].pop("Stop"), "hooks.Stop"),
        (".mcp.json", lambda d: d["mcpServers"].update(thatch="x"), "mcpServers.thatch"),
        (
            ".mcp.json",
            lambda d: d["mcpServers"]["thatch"].update(args=["mcp", "--x"]),
            "mcpServers.thatch.args[1]",
        ),
    ],
)
def test_doctor_names_the_key_that_drifted(
    tmp_path: Path, env: dict[str, str], file: str, change: Any, key: str
) -> None:
    """The drift line names the file and the first key in it that differs from what setup
    writes now, the fix line stays the setup command."""
    request = SetupRequest(
        hosts=["claude"], project_dir=tmp_path, env=env, bin_path="thatch", version="1"
    )
    run_setup(request)
    path = tmp_path / file
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1") == (
        "warn",
        f"drifted (local): {path} ({key})",
        "thatch setup --claude",
    )


def test_context_object_accepted(tmp_path: Path, env: dict[str, str]) -> None:
    """An object with host, project_dir and env attributes works like the keywords."""

    class Context:
        host = "opencode"
        project_dir = tmp_path

    Context.env = env  # type: ignore[attr-defined]
    warning = setup_warning(Context())
    assert warning is not None and "never set up for opencode" in warning


def test_opencode_only_project_is_not_reported_as_cursor(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The AGENTS.md block opencode's setup wrote is shared: doctor checks only opencode,
    and Cursor (when its config directory exists) is "not installed", never "drifted"."""
    from thatch.frontend.doctor import hosts_to_check

    run_setup(
        SetupRequest(
            hosts=["opencode"], project_dir=tmp_path, env=env, bin_path="thatch", version="1"
        )
    )
    assert hosts_to_check(tmp_path, env) == ["opencode"]
    assert doctor_status("opencode", tmp_path, env, bin_path="thatch", version="1") == (
        "ok",
        "installed (local)",
        None,
    )
    (tmp_path / "cursor-config").mkdir()
    assert hosts_to_check(tmp_path, env) == ["cursor", "opencode"]
    state, detail, fix = doctor_status("cursor", tmp_path, env, bin_path="thatch", version="1")
    assert state == "warn" and fix == "thatch setup --cursor"
    assert detail == f"not installed (no thatch entry in {tmp_path / '.cursor' / 'mcp.json'})"


def test_doctor_keeps_the_users_permission_choice(tmp_path: Path, env: dict[str, str]) -> None:
    """Claude set up with or without the permission rule is "ok" either way: doctor never
    calls the user's choice drift."""
    for allow_tools in (False, True):
        run_setup(
            SetupRequest(
                hosts=["claude"],
                project_dir=tmp_path,
                env=env,
                bin_path="thatch",
                version="1",
                allow_tools=allow_tools,
            )
        )
        status = doctor_status("claude", tmp_path, env, bin_path="thatch", version="1")
        assert status == ("ok", "installed (local)", None)


@pytest.mark.parametrize("scope", ["local", "global"])
@pytest.mark.parametrize("post_tool_use", [False, True])
def test_install_without_the_session_end_hooks_is_drifted(
    tmp_path: Path, env: dict[str, str], scope: str, post_tool_use: bool
) -> None:
    """An install from before SessionEnd/SubagentStop were wired still has thatch hooks,
    but doctor reports it drifted (rerun setup), not ok; the rerun makes it ok."""
    request = SetupRequest(
        hosts=["claude"],
        project_dir=tmp_path,
        env=env,
        bin_path="thatch",
        version="1",
        scope=scope,  # type: ignore[arg-type]
        post_tool_use=post_tool_use,
    )
    run_setup(request)
    register_user_server(env, "thatch")
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1")[0] == "ok"
    settings = (
        tmp_path / ".claude" / "settings.json"
        if scope == "local"
        else tmp_path / "claude-config" / "settings.json"
    )
    fix = "thatch setup --claude" + (" --global" if scope == "global" else "")
    doc = json.loads(settings.read_text())
    del doc["hooks"]["SessionEnd"], doc["hooks"]["SubagentStop"]
    settings.write_text(json.dumps(doc, indent=2) + "\n")
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1") == (
        "warn",
        f"drifted ({scope}): {settings} (hooks.SessionEnd)",
        fix,
    )
    run_setup(request)
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1")[0] == "ok"
    # Only the user's own hook left in one event: drifted too, and the rerun keeps it.
    for event in ("SessionEnd", "SubagentStop"):
        doc = json.loads(settings.read_text())
        doc["hooks"][event] = [{"hooks": [{"type": "command", "command": "my-hook"}]}]
        settings.write_text(json.dumps(doc, indent=2) + "\n")
        assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1") == (
            "warn",
            f"drifted ({scope}): {settings} (hooks.{event}[1])",
            fix,
        )
        run_setup(request)
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1") == (
        "ok",
        f"installed ({scope})",
        None,
    )
    hooks = json.loads(settings.read_text())["hooks"]
    for event, sub in (("SessionEnd", "session-end"), ("SubagentStop", "extraction-complete")):
        assert [g["hooks"][0]["command"] for g in hooks[event]] == ["my-hook", f"thatch {sub}"]
    assert "PostToolUse" in hooks if post_tool_use else "PostToolBatch" in hooks


def test_cursor_install_without_session_end_is_drifted(tmp_path: Path, env: dict[str, str]) -> None:
    """Cursor likewise: hooks.json with every thatch hook but sessionEnd is drifted."""
    request = SetupRequest(
        hosts=["cursor"], project_dir=tmp_path, env=env, bin_path="thatch", version="1"
    )
    run_setup(request)
    hooks_file = tmp_path / ".cursor" / "hooks.json"
    doc = json.loads(hooks_file.read_text())
    del doc["hooks"]["sessionEnd"]
    hooks_file.write_text(json.dumps(doc, indent=2) + "\n")
    state, detail, _ = doctor_status("cursor", tmp_path, env, bin_path="thatch", version="1")
    assert (state, detail) == ("warn", f"drifted (local): {hooks_file} (hooks.sessionEnd)")


@pytest.mark.parametrize("host", ["claude", "cursor", "opencode"])
@pytest.mark.parametrize("scope", ["local", "global"])
def test_the_same_executable_spelled_otherwise_is_not_drifted(
    tmp_path: Path, env: dict[str, str], host: str, scope: str
) -> None:
    """A setup written while `thatch` was not on PATH (its absolute path) is not drifted
    once it is on PATH, and the reverse; another executable still is (issue 12 §5)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "thatch"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    on_path = {**env, "PATH": str(bin_dir)}
    for written, checked in ((str(exe), "thatch"), ("thatch", str(exe))):
        run_setup(
            SetupRequest(
                hosts=[host],
                project_dir=tmp_path,
                env=env,
                bin_path=written,
                version="1",
                scope=scope,  # type: ignore[arg-type]
            )
        )
        register_user_server(env, written)
        status = doctor_status(host, tmp_path, on_path, bin_path=checked, version="1")
        assert status == ("ok", f"installed ({scope})", None), (written, checked)
    other = tmp_path / "other" / "thatch"
    other.parent.mkdir()
    other.write_text("#!/bin/sh\n")
    other.chmod(0o755)
    status = doctor_status(host, tmp_path, on_path, bin_path=str(other), version="1")
    assert status[0] == "warn" and status[1].startswith(f"drifted ({scope})")


@pytest.mark.parametrize("scope", ["local", "global"])
@pytest.mark.parametrize("written_by_path", [False, True])
def test_drift_is_named_in_the_spelling_the_files_use(
    tmp_path: Path, env: dict[str, str], scope: str, written_by_path: bool
) -> None:
    """A spelling difference is not drift: with one real change, doctor names that file
    and key, not the files and commands that only spell the executable otherwise."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "thatch"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    on_path = {**env, "PATH": str(bin_dir)}
    written, checked = (str(exe), "thatch") if written_by_path else ("thatch", str(exe))
    request = SetupRequest(
        hosts=["claude"],
        project_dir=tmp_path,
        env=env,
        bin_path=written,
        version="1",
        scope=scope,  # type: ignore[arg-type]
    )
    run_setup(request)
    register_user_server(env, written)
    settings = (
        tmp_path / ".claude" / "settings.json"
        if scope == "local"
        else tmp_path / "claude-config" / "settings.json"
    )
    doc = json.loads(settings.read_text())
    doc["hooks"]["SessionEnd"][0]["hooks"][0].pop("timeout")
    settings.write_text(json.dumps(doc, indent=2) + "\n")
    status = doctor_status("claude", tmp_path, on_path, bin_path=checked, version="1")
    assert status[:2] == (
        "warn",
        f"drifted ({scope}): {settings} (hooks.SessionEnd[0].hooks[0].timeout)",
    )


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"{nope", "unreadable"),
        (b"\xff\xfe{}", "unreadable"),
        (b"[1, 2]", "unreadable"),
        (b"", "empty"),
        (None, "missing"),
    ],
)
def test_a_json_file_doctor_cannot_read_names_no_key(
    tmp_path: Path, env: dict[str, str], content: bytes | None, said: str
) -> None:
    """A file that is no JSON object has no key that drifted (its placeholder `{}` named
    `mcpServers` as if that key were missing); a missing or empty file says so."""
    run_setup(
        SetupRequest(
            hosts=["claude"], project_dir=tmp_path, env=env, bin_path="thatch", version="1"
        )
    )
    mcp = tmp_path / ".mcp.json"
    if content is None:
        mcp.unlink()
    else:
        mcp.write_bytes(content)
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1")[:2] == (
        "warn",
        f"drifted (local): {mcp} ({said})",
    )


@pytest.mark.parametrize("host", ["claude", "cursor"])
def test_a_users_hook_after_thatchs_is_no_drift(
    tmp_path: Path, env: dict[str, str], host: str
) -> None:
    """A user's own hook added after thatch's leaves thatch's entry as setup wrote it:
    doctor says ok (it named thatch's unchanged command) and a rerun keeps the order."""
    request = SetupRequest(
        hosts=[host], project_dir=tmp_path, env=env, bin_path="thatch", version="1"
    )
    run_setup(request)
    if host == "claude":
        path, event = tmp_path / ".claude" / "settings.json", "Stop"
        mine: dict[str, Any] = {"hooks": [{"type": "command", "command": "my-stop"}]}
    else:
        path, event, mine = tmp_path / ".cursor" / "hooks.json", "stop", {"command": "my-stop"}
    doc = json.loads(path.read_text())
    doc["hooks"][event].append(mine)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    before = path.read_text()
    status = doctor_status(host, tmp_path, env, bin_path="thatch", version="1")
    assert status == ("ok", "installed (local)", None)
    run_setup(request)
    assert path.read_text() == before


@pytest.mark.parametrize("jsonc", [False, True])
def test_a_dry_run_names_the_first_key_it_would_change_as_doctor_does(
    tmp_path: Path, env: dict[str, str], jsonc: bool
) -> None:
    """`setup --dry-run` names in each would-write line the first key setup would change,
    the one doctor names; a JSONC file holding thatch's entries already differs in its
    format only, and says so."""
    request = SetupRequest(
        hosts=["claude"], project_dir=tmp_path, env=env, bin_path="thatch", version="1"
    )
    run_setup(request)
    mcp = tmp_path / ".mcp.json"
    if jsonc:  # what setup wrote, behind a comment
        mcp.write_text("// mine\n" + mcp.read_text())
        said = "format"
    else:
        mcp.write_text('{"mcpServers": {"thatch": {"command": "mine"}}}')
        said = "mcpServers.thatch.command"
    lines = run_setup(dataclasses.replace(request, dry_run=True)).stdout_lines()
    assert f"  would-write  {mcp}  ({said})" in lines, lines
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1")[:2] == (
        "warn",
        f"drifted (local): {mcp} ({said})",
    )


def test_a_global_claude_setup_without_its_user_server_is_not_ok(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """`claude` not on PATH: setup only prints `claude mcp add …`. Until it has run (the
    server in Claude Code's user file), doctor warns with that command as the fix; a
    server running another executable names the commands that replace it."""
    request = SetupRequest(
        hosts=["claude"],
        project_dir=tmp_path,
        env=env,
        bin_path="thatch",
        version="1",
        scope="global",
    )
    run_setup(request)
    user_file = tmp_path / "claude-config" / ".claude.json"
    add = "claude mcp add --scope user thatch -- thatch mcp"
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1") == (
        "warn",
        f"MCP server not registered (global): no thatch server in {user_file}",
        add,
    )
    user_file.write_text('{"numStartups": 3, "mcpServers": {"other": {"command": "x"}}}')
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1")[0] == "warn"
    register_user_server(env, "/old/thatch")
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1") == (
        "warn",
        f"drifted (global): the thatch server in {user_file} runs another executable",
        f"claude mcp remove --scope user thatch && {add}",
    )
    # The server registered, and a hook drifted too: both named, both fixed.
    register_user_server(env, "thatch")
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1") == (
        "ok",
        "installed (global)",
        None,
    )
    user_file.unlink()
    settings = tmp_path / "claude-config" / "settings.json"
    doc = json.loads(settings.read_text())
    del doc["hooks"]["Stop"]
    settings.write_text(json.dumps(doc, indent=2) + "\n")
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1") == (
        "warn",
        f"MCP server not registered (global): no thatch server in {user_file}; "
        f"drifted: {settings} (hooks.Stop)",
        f"{add}; then thatch setup --claude --global",
    )


def test_a_user_server_run_through_uvx_is_not_called_another_executable(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """`uvx --from thatch thatch mcp` runs thatch, maybe another version than the hooks:
    doctor says that, with the commands that make the server run the hooks' thatch."""
    run_setup(
        SetupRequest(
            hosts=["claude"],
            project_dir=tmp_path,
            env=env,
            bin_path="thatch",
            version="1",
            scope="global",
        )
    )
    user_file = tmp_path / "claude-config" / ".claude.json"
    entry = {"type": "stdio", "command": "uvx", "args": ["--from", "thatch", "thatch", "mcp"]}
    user_file.write_text(json.dumps({"mcpServers": {"thatch": entry}}))
    add = "claude mcp add --scope user thatch -- thatch mcp"
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1") == (
        "warn",
        f"drifted (global): the thatch server in {user_file} runs thatch through uvx, "
        "maybe another version than the hooks'",
        f"claude mcp remove --scope user thatch && {add}",
    )


def register_local_server(
    user_file: Path, project: Path, command: str, args: list[str] | None = None
) -> None:
    """What `claude mcp add thatch -- <command> mcp` (local scope, its default) writes when
    run in ``project``: the server under that directory's entry of Claude Code's user file."""
    entry = {"type": "stdio", "command": command, "args": args or ["mcp"], "env": {}}
    user_file.parent.mkdir(parents=True, exist_ok=True)
    doc = {"numStartups": 3, "projects": {str(project): {"mcpServers": {"thatch": entry}}}}
    user_file.write_text(json.dumps(doc))


@pytest.mark.parametrize("config_dir", [True, False])
def test_a_local_scope_server_registers_thatch_for_a_global_setup(
    tmp_path: Path, env: dict[str, str], config_dir: bool
) -> None:
    """A global setup without the user-level server, but with `claude mcp add`'s local
    scope entry for this project (keyed by its resolved path): thatch is registered here,
    and doctor says it is, for this project only. Another project, or an entry running
    another executable, is still not registered."""
    if not config_dir:
        del env["CLAUDE_CONFIG_DIR"]
    user_file = (tmp_path / "claude-config" if config_dir else Path(env["HOME"])) / ".claude.json"
    real = tmp_path / "real-project"
    real.mkdir()
    project = tmp_path / "project"
    project.symlink_to(real)
    request = SetupRequest(
        hosts=["claude"],
        project_dir=project,
        env=env,
        bin_path="thatch",
        version="1",
        scope="global",
    )
    run_setup(request)
    add = "claude mcp add --scope user thatch -- thatch mcp"
    missing = ("warn", f"MCP server not registered (global): no thatch server in {user_file}", add)
    assert doctor_status("claude", project, env, bin_path="thatch", version="1") == missing
    register_local_server(user_file, real, "thatch")
    assert doctor_status("claude", project, env, bin_path="thatch", version="1") == (
        "ok",
        f"installed (global; the MCP server for this project only, in {user_file})",
        None,
    )
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1") == missing
    register_local_server(user_file, real, "/old/thatch")
    assert doctor_status("claude", project, env, bin_path="thatch", version="1") == (
        "warn",
        f"{shadowed('global', user_file, 'runs another executable')}; {missing[1]}",
        f"{REMOVE_LOCAL}; then {add}",
    )


REMOVE_LOCAL = "remove it from inside the project directory: claude mcp remove --scope local thatch"


def shadowed(scope: str, user_file: Path, runs: str) -> str:
    return (
        f"drifted ({scope}): the thatch server registered for this project in {user_file} "
        f"(local scope, which Claude Code prefers here) {runs}"
    )


@pytest.mark.parametrize(
    ("command", "args", "runs"),
    [
        ("/old/thatch", ["mcp"], "runs another executable"),
        ("thatch", ["reminder"], "runs thatch reminder instead of thatch's MCP server"),
        ("thatch", [], "runs thatch instead of thatch's MCP server"),
        (
            "uvx",
            ["thatch", "mcp"],
            "runs thatch through uvx, maybe another version than the hooks'",
        ),
    ],
)
def test_a_local_scope_server_that_is_not_this_thatchs_server_is_drift(
    tmp_path: Path, env: dict[str, str], command: str, args: list[str], runs: str
) -> None:
    """A global setup whose user-level server is right, but the project's local-scope
    entry runs another executable, or thatch without `mcp` (a hook command), or thatch
    through uvx: Claude Code runs that entry in this project, so doctor warns, naming the
    file and how to remove the entry."""
    register_user_server(env, "thatch")
    run_setup(
        SetupRequest(
            hosts=["claude"],
            project_dir=tmp_path,
            env=env,
            bin_path="thatch",
            version="1",
            scope="global",
        )
    )
    ok = ("ok", "installed (global)", None)
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1") == ok
    user_file = tmp_path / "claude-config" / ".claude.json"
    doc = json.loads(user_file.read_text())
    entry = {"type": "stdio", "command": command, "args": args}
    doc["projects"] = {str(tmp_path): {"mcpServers": {"thatch": entry}}}
    user_file.write_text(json.dumps(doc))
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1") == (
        "warn",
        shadowed("global", user_file, runs),
        REMOVE_LOCAL,
    )


def test_the_local_scope_note_shows_only_when_the_local_server_stands_in(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A global setup whose user-level server is right, with a right local-scope server
    as well: plainly installed, no note; the note names the local server only when it is
    what registers thatch in the project (the user-level one missing)."""
    run_setup(
        SetupRequest(
            hosts=["claude"],
            project_dir=tmp_path,
            env=env,
            bin_path="thatch",
            version="1",
            scope="global",
        )
    )
    user_file = tmp_path / "claude-config" / ".claude.json"
    register_local_server(user_file, tmp_path, "thatch")
    only = f"installed (global; the MCP server for this project only, in {user_file})"
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1") == (
        "ok",
        only,
        None,
    )
    doc = json.loads(user_file.read_text())
    doc["mcpServers"] = {"thatch": {"type": "stdio", "command": "thatch", "args": ["mcp"]}}
    user_file.write_text(json.dumps(doc))
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1") == (
        "ok",
        "installed (global)",
        None,
    )


def git(cwd: Path, *args: str) -> None:
    assert GIT is not None
    identity = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com"}
    identity |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    subprocess.run([GIT, *args], cwd=cwd, env={**os.environ, **identity}, check=True)


def test_the_local_scope_key_is_the_main_checkouts_top(tmp_path: Path) -> None:
    """Claude Code keys a project's local-scope servers by the top of the repository's
    main checkout, from a subdirectory or a linked worktree too; outside git (or in a
    checkout whose .git file is no worktree's, a submodule's) by the directory itself."""
    from thatch.frontend.setup.claude_servers import project_key

    repo = tmp_path / "repo"
    (repo / "pkg" / "sub").mkdir(parents=True)
    git(repo, "init", "-q")
    git(repo, "commit", "-q", "--allow-empty", "-m", "first")
    git(repo, "worktree", "add", "-q", str(tmp_path / "wt"), "-b", "topic")
    (tmp_path / "wt" / "deep").mkdir()
    (tmp_path / "link").symlink_to(repo / "pkg")
    for inside in (repo, repo / "pkg" / "sub", tmp_path / "wt", tmp_path / "wt" / "deep"):
        assert project_key(inside) == str(repo)
    assert project_key(tmp_path / "link") == str(repo)  # its real path is in the repo
    plain = tmp_path / "plain" / "dir"
    plain.mkdir(parents=True)
    assert project_key(plain) == str(plain)
    submodule = tmp_path / "plain" / "sub"
    submodule.mkdir()
    (submodule / ".git").write_text("gitdir: ../../repo/.git/modules/sub\n")
    assert project_key(submodule / ".") == str(submodule)


@pytest.mark.parametrize("where", ["subdirectory", "worktree"])
def test_a_local_scope_server_of_the_repository_counts_in_its_worktrees(
    tmp_path: Path, env: dict[str, str], where: str
) -> None:
    """`claude mcp add thatch -- thatch mcp` run in a repository registers it under the
    main checkout's top: a global setup checked from a subdirectory or a linked worktree
    is ok there; an entry under the subdirectory's own path is not Claude Code's."""
    repo = tmp_path / "repo"
    (repo / "sub").mkdir(parents=True)
    git(repo, "init", "-q")
    git(repo, "commit", "-q", "--allow-empty", "-m", "first")
    git(repo, "worktree", "add", "-q", str(tmp_path / "wt"))
    project = repo / "sub" if where == "subdirectory" else tmp_path / "wt"
    run_setup(
        SetupRequest(
            hosts=["claude"],
            project_dir=project,
            env=env,
            bin_path="thatch",
            version="1",
            scope="global",
        )
    )
    user_file = tmp_path / "claude-config" / ".claude.json"
    register_local_server(user_file, project, "thatch")
    state, said, _ = doctor_status("claude", project, env, bin_path="thatch", version="1")
    assert (state, said) == (
        "warn",
        f"MCP server not registered (global): no thatch server in {user_file}",
    )
    register_local_server(user_file, repo, "thatch")
    assert doctor_status("claude", project, env, bin_path="thatch", version="1") == (
        "ok",
        f"installed (global; the MCP server for this project only, in {user_file})",
        None,
    )


def test_a_local_scope_server_stands_in_for_the_projects_mcp_json(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Set up locally, then the .mcp.json entry left out (kept private with `claude mcp
    add`, local scope): not drift. A .mcp.json entry that drifted still is (teammates run
    it). A local server running another executable is what Claude Code runs here: doctor
    names it and how to remove it, and the missing .mcp.json entry too."""
    request = SetupRequest(
        hosts=["claude"], project_dir=tmp_path, env=env, bin_path="thatch", version="1"
    )
    run_setup(request)
    mcp = tmp_path / ".mcp.json"
    mcp.unlink()
    user_file = tmp_path / "claude-config" / ".claude.json"
    register_local_server(user_file, tmp_path, "thatch")
    ok = ("ok", "installed (local)", None)
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1") == ok
    mcp.write_text('{"mcpServers": {"other": {"command": "x"}}}')
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1") == ok
    old = {"type": "stdio", "command": "/old/thatch", "args": ["mcp"]}
    mcp.write_text(json.dumps({"mcpServers": {"thatch": old}}))
    state, said, _ = doctor_status("claude", tmp_path, env, bin_path="thatch", version="1")
    assert (state, said) == ("warn", f"drifted (local): {mcp} (mcpServers.thatch.command)")
    mcp.unlink()
    register_local_server(user_file, tmp_path, "/old/thatch")
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1") == (
        "warn",
        f"{shadowed('local', user_file, 'runs another executable')}; "
        f"drifted (local): {mcp} (missing)",
        f"{REMOVE_LOCAL}; then thatch setup --claude",
    )


def test_the_user_file_is_in_the_config_dir_or_home(tmp_path: Path) -> None:
    """Claude Code keeps user-scope servers in `~/.claude.json`, or in
    `$CLAUDE_CONFIG_DIR/.claude.json` when that is set."""
    from thatch.frontend.setup.hosts import claude_user_file

    home = str(tmp_path / "home")
    assert claude_user_file({"HOME": home}) == tmp_path / "home" / ".claude.json"
    config = {"HOME": home, "CLAUDE_CONFIG_DIR": str(tmp_path / "c")}
    assert claude_user_file(config) == tmp_path / "c" / ".claude.json"


@pytest.mark.parametrize("scope", ["local", "global"])
def test_rerunning_setup_keeps_post_tool_use_and_no_allow_tools(
    tmp_path: Path, env: dict[str, str], scope: str
) -> None:
    """Set up with --post-tool-use --no-allow-tools, then drifted: doctor's fix (setup
    without those flags) brings back only the missing hook, never PostToolBatch nor the
    permission rule (permissions.ask records --no-allow-tools)."""
    import shutil
    import subprocess

    git = shutil.which("git", path=os.defpath)  # the fixture's PATH finds nothing
    assert git is not None
    subprocess.run([git, "init", "-q", str(tmp_path)], check=True, env={"PATH": os.defpath})
    register_user_server(env, "thatch")
    first = SetupRequest(
        hosts=["claude"],
        project_dir=tmp_path,
        env=env,
        bin_path="thatch",
        version="1",
        scope=scope,  # type: ignore[arg-type]
        post_tool_use=True,
        allow_tools=False,
    )
    run_setup(first)
    status = doctor_status("claude", tmp_path, env, bin_path="thatch", version="1")
    assert status == ("ok", f"installed ({scope})", None)
    settings = (
        tmp_path / ".claude" / "settings.json"
        if scope == "local"
        else tmp_path / "claude-config" / "settings.json"
    )
    doc = json.loads(settings.read_text())
    del doc["hooks"]["Stop"]
    settings.write_text(json.dumps(doc, indent=2) + "\n")
    fix = "thatch setup --claude" + (" --global" if scope == "global" else "")
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1") == (
        "warn",
        f"drifted ({scope}): {settings} (hooks.Stop)",
        fix,
    )
    rerun = dataclasses.replace(first, post_tool_use=None, allow_tools=None)
    changed = [
        line
        for line in run_setup(dataclasses.replace(rerun, dry_run=True)).reports[0].lines
        if line.status not in ("unchanged", "printed")
    ]
    assert [(line.status, line.target, line.differs) for line in changed] == [
        ("would-write", str(settings), "hooks.Stop")
    ]
    run_setup(rerun)
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1")[0] == "ok"
    doc = json.loads(settings.read_text())
    assert "PostToolUse" in doc["hooks"] and "PostToolBatch" not in doc["hooks"]
    allow_file = tmp_path / ".claude" / "settings.local.json" if scope == "local" else settings
    assert json.loads(allow_file.read_text())["permissions"] == {"ask": ["mcp__thatch"]}
    if scope == "local":
        assert "permissions" not in doc


@pytest.mark.parametrize("scope", ["local", "global"])
def test_doctor_takes_an_ask_entry_as_the_users_and_warns_of_neither(
    tmp_path: Path, env: dict[str, str], scope: str
) -> None:
    """--no-allow-tools's permissions.ask entry is the user's choice, not drift; settings
    with neither entry are no drift either, but nothing decides thatch's tool calls though
    nobody chose that: a warning whose fix offers both. Doctor writes nothing."""
    register_user_server(env, "thatch")
    request = SetupRequest(
        hosts=["claude"],
        project_dir=tmp_path,
        env=env,
        bin_path="thatch",
        version="1",
        scope=scope,  # type: ignore[arg-type]
        allow_tools=False,
    )
    run_setup(request)
    allow_file = (
        tmp_path / ".claude" / "settings.local.json"
        if scope == "local"
        else tmp_path / "claude-config" / "settings.json"
    )
    assert json.loads(allow_file.read_text())["permissions"] == {"ask": ["mcp__thatch"]}
    ok = ("ok", f"installed ({scope})", None)
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1") == ok
    doc = json.loads(allow_file.read_text())
    del doc["permissions"]
    allow_file.write_text(json.dumps(doc, indent=2) + "\n")
    setup = "thatch setup --claude" + (" --global" if scope == "global" else "")
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1") == (
        "warn",
        f"installed ({scope}), but no settings file allows, asks for or denies thatch's "
        f"tools (mcp__thatch); setup writes the rule to {allow_file}",
        f"allow the tools: {setup}; or have Claude Code ask: {setup} --no-allow-tools",
    )
    assert "permissions" not in json.loads(allow_file.read_text())


@pytest.mark.parametrize(
    "holder", ["settings.local.json", "settings.json", "user settings.json", "user ask"]
)
def test_a_teammates_clone_without_the_rule_is_warned_of(
    tmp_path: Path, env: dict[str, str], holder: str
) -> None:
    """A clone holds the committed hooks, block and .mcp.json but not the personal
    settings.local.json with the rule: nothing decides thatch's tool calls, and doctor
    says so. The rule (or an ask entry) counts in any settings file Claude Code reads: the
    project's personal or committed one, or the user's."""
    run_setup(
        SetupRequest(
            hosts=["claude"], project_dir=tmp_path, env=env, bin_path="thatch", version="1"
        )
    )
    personal = tmp_path / ".claude" / "settings.local.json"
    personal.unlink()  # what a clone of the committed files has
    state, said, fix = doctor_status("claude", tmp_path, env, bin_path="thatch", version="1")
    assert state == "warn" and "no settings file allows, asks for or denies" in said
    assert fix == (
        "allow the tools: thatch setup --claude; "
        "or have Claude Code ask: thatch setup --claude --no-allow-tools"
    )
    committed = tmp_path / ".claude" / "settings.json"
    user = tmp_path / "claude-config" / "settings.json"
    user.parent.mkdir(exist_ok=True)
    target, entry = {
        "settings.local.json": (personal, "allow"),
        "settings.json": (committed, "allow"),
        "user settings.json": (user, "allow"),
        "user ask": (user, "ask"),
    }[holder]
    doc = json.loads(target.read_text()) if target.exists() else {}
    doc["permissions"] = {entry: ["Bash(ls)", "mcp__thatch"]}
    target.write_text(json.dumps(doc, indent=2) + "\n")
    status = doctor_status("claude", tmp_path, env, bin_path="thatch", version="1")
    assert status == ("ok", "installed (local)", None)


@pytest.mark.parametrize(
    ("holder", "settings"),
    [
        ("personal", {"permissions": {"allow": ["mcp__thatch__*"]}}),
        ("personal", {"permissions": {"allow": ["Bash(ls)", "mcp__thatch__memory_recall"]}}),
        ("committed", {"permissions": {"deny": ["mcp__thatch"]}}),
        ("committed", {"permissions": {"ask": ["mcp__thatch__memory_store"]}}),
        ("committed", {"permissions": {"deny": ["mcp__*"]}}),
        ("user", {"permissions": {"defaultMode": "bypassPermissions"}}),
        ("user", {"permissions": {"defaultMode": "dontAsk"}}),
        ("user", {"permissions": {"defaultMode": "auto"}}),
        ("personal", {"permissions": {"defaultMode": "plan"}}),
        ("managed", {"permissions": {"allow": ["mcp__thatch"]}}),
        ("drop-in", {"permissions": {"allow": ["mcp__thatch__*"]}}),
        ("managed", {"allowManagedPermissionRulesOnly": True}),
    ],
)
def test_the_users_decisions_on_thatchs_tools_are_no_warning(
    tmp_path: Path,
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    holder: str,
    settings: dict[str, Any],
) -> None:
    """What decides thatch's tool calls besides setup's rule: a server wildcard, one
    tool's rule ("Yes, and don't ask again"), a deny or ask entry, a permission mode that
    decides for the prompt, a rule in the system's managed settings (their file or a
    drop-in), or managed settings that take no permission rule from the project at all.
    Each is the user's (or the administrator's) decision: doctor says installed."""
    from thatch.frontend.setup import hosts

    managed = tmp_path / "managed"
    monkeypatch.setattr(hosts, "CLAUDE_MANAGED_DIR", managed)
    run_setup(
        SetupRequest(
            hosts=["claude"], project_dir=tmp_path, env=env, bin_path="thatch", version="1"
        )
    )
    (tmp_path / ".claude" / "settings.local.json").unlink()
    target = {
        "personal": tmp_path / ".claude" / "settings.local.json",
        "committed": tmp_path / ".claude" / "settings.json",
        "user": tmp_path / "claude-config" / "settings.json",
        "managed": managed / "managed-settings.json",
        "drop-in": managed / "managed-settings.d" / "20-tools.json",
    }[holder]
    target.parent.mkdir(parents=True, exist_ok=True)
    doc = json.loads(target.read_text()) if target.exists() else {}
    target.write_text(json.dumps({**doc, **settings}, indent=2) + "\n")
    status = doctor_status("claude", tmp_path, env, bin_path="thatch", version="1")
    assert status == ("ok", "installed (local)", None)


@pytest.mark.parametrize("case", ["acceptEdits", "jsonc", "managed without the rule"])
def test_what_decides_nothing_for_thatchs_tools_is_warned_of(
    tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """acceptEdits decides only edits and file commands; a settings file with a comment (the
    user's, which a local setup does not rewrite) is one Claude Code ignores whole (doctor
    names it), whatever rule it shows; managed settings without a rule for thatch leave it
    undecided too."""
    from thatch.frontend.setup import hosts

    managed = tmp_path / "managed"
    monkeypatch.setattr(hosts, "CLAUDE_MANAGED_DIR", managed)
    run_setup(
        SetupRequest(
            hosts=["claude"], project_dir=tmp_path, env=env, bin_path="thatch", version="1"
        )
    )
    personal = tmp_path / ".claude" / "settings.local.json"
    said = (
        "installed (local), but no settings file allows, asks for or denies thatch's tools "
        f"(mcp__thatch); setup writes the rule to {personal}"
    )
    if case == "acceptEdits":
        personal.write_text('{"permissions": {"defaultMode": "acceptEdits"}}')
    elif case == "jsonc":
        personal.unlink()
        user = tmp_path / "claude-config" / "settings.json"
        user.parent.mkdir(exist_ok=True)
        user.write_text('{\n  // mine\n  "permissions": {"allow": ["mcp__thatch"]}\n}\n')
        said += f"; Claude Code ignores {user} (not JSON)"
    else:
        personal.unlink()
        managed.mkdir()
        (managed / "managed-settings.json").write_text('{"permissions": {"deny": ["Bash"]}}')
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1")[:2] == (
        "warn",
        said,
    )


def test_doctor_compares_the_user_server_with_the_real_path(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The same executable spelled `thatch` in the hooks and by its path in Claude Code's
    user file (or the reverse) is not drift: doctor once blanked PATH to keep `claude`
    from running, and then no spelling matched. `claude` on PATH is still never run."""
    bin_dir = tmp_path / "nobin"
    bin_dir.mkdir()
    thatch = bin_dir / "thatch"
    thatch.write_text("#!/bin/sh\n")
    thatch.chmod(0o755)
    ran = tmp_path / "claude-ran"
    claude = bin_dir / "claude"
    claude.write_text(f"#!/bin/sh\n: > {ran}\nexit 1\n")
    claude.chmod(0o755)
    ok = ("ok", "installed (global)", None)
    for hooks_say, user_file_says in (("thatch", str(thatch)), (str(thatch), "thatch")):
        request = SetupRequest(
            hosts=["claude"],
            project_dir=tmp_path,
            env=env,
            bin_path=hooks_say,
            version="1",
            scope="global",
            run_claude=False,
        )
        run_setup(request)
        register_user_server(env, user_file_says)
        for checked in ("thatch", str(thatch)):
            assert doctor_status("claude", tmp_path, env, bin_path=checked, version="1") == ok
    assert not ran.exists()


def test_a_json_host_file_nested_too_deep_is_unreadable_not_a_crash(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Arrays nested 200000 deep (Python's parser recurses) in Claude Code's user file or
    the project's .mcp.json: setup and doctor say the file cannot be read."""
    deep = '{"a": ' + "[" * 200_000 + "]" * 200_000 + "}"
    request = SetupRequest(
        hosts=["claude"], project_dir=tmp_path, env=env, bin_path="thatch", version="1"
    )
    run_setup(dataclasses.replace(request, scope="global"))
    user_file = tmp_path / "claude-config" / ".claude.json"
    user_file.write_text(deep)
    result = run_setup(dataclasses.replace(request, scope="global"))
    assert any(f"{user_file} cannot be read (not JSON)" in d for d in result.details())
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1") == (
        "warn",
        f"MCP server unknown (global): {user_file} cannot be read (not JSON)",
        "claude mcp add --scope user thatch -- thatch mcp",
    )
    run_setup(request)
    mcp = tmp_path / ".mcp.json"
    mcp.write_text(deep)
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1")[:2] == (
        "warn",
        f"drifted (local): {mcp} (unreadable)",
    )
    lines = run_setup(request).stdout_lines()
    assert f"  written  {mcp}" in lines
    assert json.loads(mcp.read_text())["mcpServers"]["thatch"]["command"] == "thatch"


def test_doctor_reads_claude_codes_user_file_once(
    tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user file holds Claude Code's session history (tens of megabytes): one doctor
    verdict reads it once, however many things it asks of it (the local-scope server, the
    user-level one, what the missing one is called). A byte order mark is no problem."""
    from thatch.frontend.regular_files import read_regular
    from thatch.frontend.setup import claude_servers

    run_setup(
        SetupRequest(
            hosts=["claude"],
            project_dir=tmp_path,
            env=env,
            bin_path="thatch",
            version="1",
            scope="global",
        )
    )
    user_file = tmp_path / "claude-config" / ".claude.json"
    history = {"history": [{"display": "x" * 100}] * 1000}
    user_file.write_text("\ufeff" + json.dumps({"projects": {"/elsewhere": history}}))
    reads: list[str] = []

    def counting(path: str | Path, limit: int) -> bytes:
        reads.append(str(path))
        return read_regular(path, limit)

    monkeypatch.setattr(claude_servers, "read_regular", counting)
    assert doctor_status("claude", tmp_path, env, bin_path="thatch", version="1")[:2] == (
        "warn",
        f"MCP server not registered (global): no thatch server in {user_file}",
    )
    assert reads.count(str(user_file)) == 1


@pytest.mark.parametrize("kind", ["jsonc", "malformed", "huge", "fifo", "directory"])
def test_a_user_file_that_cannot_be_read_is_not_called_empty(
    tmp_path: Path, env: dict[str, str], kind: str
) -> None:
    """Claude Code's user file that cannot be read is reported as such, not as holding no
    thatch server; a JSONC one too, as Claude Code parses the file as strict JSON."""
    request = SetupRequest(
        hosts=["claude"],
        project_dir=tmp_path,
        env=env,
        bin_path="thatch",
        version="1",
        scope="global",
    )
    run_setup(request)
    user_file = tmp_path / "claude-config" / ".claude.json"
    entry = '{"type": "stdio", "command": "thatch", "args": ["mcp"]}'
    if kind == "jsonc":
        user_file.write_text(f'{{\n  // mine\n  "mcpServers": {{"thatch": {entry},}},\n}}\n')
    elif kind == "malformed":
        user_file.write_text(f'{{"mcpServers": {{"thatch": {entry}}}')
    elif kind == "huge":
        with user_file.open("wb") as handle:
            handle.truncate((64 << 20) + 1)
    elif kind == "fifo":
        os.mkfifo(user_file)
    else:
        user_file.mkdir()
    status, said, _ = doctor_status("claude", tmp_path, env, bin_path="thatch", version="1")
    assert status == "warn"
    if kind in ("jsonc", "malformed"):
        assert said == f"MCP server unknown (global): {user_file} cannot be read (not JSON)"
    assert said.startswith(f"MCP server unknown (global): {user_file} cannot be read (")
    assert "no thatch server" not in said
    details = run_setup(request).details()
    assert any(f"{user_file} cannot be read (" in d for d in details), details
