"""Claude Code setup with both scopes: the user-level MCP entry, one instruction block in
context, the permission rule and its removal, and the restart line (docs/claude-code.md)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from thatch.cli.main import cli
from thatch.frontend.setup import SetupRequest, SetupResult, run_setup
from thatch.frontend.setup.block import BEGIN, END
from thatch.frontend.setup.instructions import BLOCK, POINTER_BLOCK
from thatch.frontend.setup.run import RUN_IT, RUN_IT_AGAIN, RUN_THROUGH

BIN = "/opt/thatch/bin/thatch"


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude-config"))
    monkeypatch.setenv("CURSOR_CONFIG_DIR", str(tmp_path / "cursor-config"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    return dict(os.environ)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "proj"
    path.mkdir()
    return path


def run(project: Path, env: dict[str, str], **options: Any) -> SetupResult:
    request = SetupRequest(
        hosts=["claude"], project_dir=project, env=env, bin_path=BIN, version="1", **options
    )
    return run_setup(request)


def fake_claude(tmp_path: Path, project: Path) -> Path:
    """A `claude` whose `mcp get thatch` finds the project's .mcp.json entry when run from
    the project (as the real one does), and a user entry once `mcp add --scope user` ran.
    Shell builtins only: PATH holds nothing but this script."""
    log = tmp_path / "claude.log"
    user_entry = tmp_path / "user-entry"
    script = tmp_path / "bin" / "claude"
    script.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\t%s\\n" "$PWD" "$*" >> "{log}"\n'
        'if [ "$2" = "get" ]; then\n'
        f'  [ -f "{user_entry}" ] && exit 0\n'
        "  [ -f .mcp.json ] && exit 0\n"
        "  exit 1\n"
        "fi\n"
        f'if [ "$2" = "add" ]; then : > "{user_entry}"; fi\n'
        "exit 0\n"
    )
    script.chmod(0o755)
    return log


def test_global_inside_a_locally_set_up_project_adds_the_user_entry(
    tmp_path: Path, project: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The project's .mcp.json entry does not count as the user entry: it is added, outside
    the project, and a rerun then finds it and reports it unchanged."""
    log = fake_claude(tmp_path, project)
    run(project, env)
    monkeypatch.chdir(project)
    result = run(project, env, scope="global")
    calls = [line.split("\t") for line in log.read_text().splitlines()]
    assert [c[1] for c in calls] == ["mcp get thatch", f"mcp add --scope user thatch -- {BIN} mcp"]
    assert all(Path(c[0]).resolve() != project.resolve() for c in calls)
    assert f"  written  claude mcp add --scope user thatch -- {BIN} mcp" in result.stdout_lines()
    again = run(project, env, scope="global")
    assert f"  unchanged  claude mcp add --scope user thatch -- {BIN} mcp" in again.stdout_lines()


def test_local_after_global_writes_a_pointer_not_a_second_copy(
    tmp_path: Path, project: Path, env: dict[str, str]
) -> None:
    """With the block in the user-level CLAUDE.md, the project's CLAUDE.md gets the short
    pointer block; the full text is in context once."""
    run(project, env, scope="global")
    run(project, env)
    user_text = (tmp_path / "claude-config" / "CLAUDE.md").read_text()
    project_text = (project / "CLAUDE.md").read_text()
    assert user_text == BLOCK + "\n"
    assert project_text == POINTER_BLOCK + "\n"
    assert "# thatch — persistent memory" not in project_text
    assert "thatch setup --claude" in project_text


def test_global_after_local_shortens_the_projects_block_and_keeps_its_text(
    tmp_path: Path, project: Path, env: dict[str, str]
) -> None:
    """A global setup run in a locally set-up project replaces only the project's block
    with the pointer; the user's own CLAUDE.md text stays byte for byte; reruns of either
    scope change nothing."""
    (project / "CLAUDE.md").write_text("# Our rules\n\nTabs.\n")
    run(project, env)
    assert BLOCK in (project / "CLAUDE.md").read_text()
    result = run(project, env, scope="global")
    assert f"  written  {project / 'CLAUDE.md'}" in result.stdout_lines()
    assert (project / "CLAUDE.md").read_text() == "# Our rules\n\nTabs.\n\n" + POINTER_BLOCK + "\n"
    for scope in ("global", "local"):
        lines = run(project, env, scope=scope).stdout_lines()
        assert all(line.split()[0] in ("unchanged", "printed") for line in lines[1:]), lines


def test_global_in_a_project_without_a_block_leaves_it_alone(
    project: Path, env: dict[str, str]
) -> None:
    (project / "CLAUDE.md").write_text("# Our rules\n")
    result = run(project, env, scope="global")
    assert (project / "CLAUDE.md").read_text() == "# Our rules\n"
    assert not any(str(project) in line for line in result.stdout_lines())


def test_pointer_falls_back_to_the_full_block_without_a_global_setup(
    tmp_path: Path, project: Path, env: dict[str, str]
) -> None:
    """Once the user-level block is gone, a local setup writes the full block again."""
    run(project, env, scope="global")
    run(project, env)
    (tmp_path / "claude-config" / "CLAUDE.md").write_text("# mine\n")
    run(project, env)
    assert (project / "CLAUDE.md").read_text() == BLOCK + "\n"


def test_local_permission_rule_keeps_foreign_entries_and_says_what_it_wrote(
    project: Path, env: dict[str, str]
) -> None:
    """settings.local.json gains mcp__thatch next to the user's rules and keys; the line
    says so; a rerun changes nothing and prints no restart line."""
    settings = project / ".claude" / "settings.local.json"
    settings.parent.mkdir()
    foreign = {
        "permissions": {"allow": ["Bash(npm test)", "mcp__thatch__memory_recall"], "deny": ["X"]},
        "disabledMcpjsonServers": ["other"],
    }
    settings.write_text(json.dumps(foreign))
    lines = run(project, env).stdout_lines()
    doc = json.loads(settings.read_text())
    assert doc["permissions"] == {
        "allow": ["Bash(npm test)", "mcp__thatch__memory_recall", "mcp__thatch"],
        "deny": ["X"],
    }
    assert doc["disabledMcpjsonServers"] == ["other"]
    assert (
        f"  written  {settings}  (permissions.allow += mcp__thatch: thatch's tools run "
        "without asking)"
    ) in lines
    assert lines[-1] == "Restart Claude Code to load the changes."
    again = run(project, env).stdout_lines()
    assert f"  unchanged  {settings}" in again
    assert "Restart Claude Code to load the changes." not in again


def test_no_allow_tools_records_the_choice_in_permissions_ask(
    project: Path, env: dict[str, str]
) -> None:
    """--no-allow-tools moves exactly mcp__thatch from permissions.allow to permissions.ask
    (Claude Code asks, and the entry records the choice); the user's rules stay; containers
    our rule alone filled disappear; --allow-tools moves it back."""
    settings = project / ".claude" / "settings.local.json"
    lines = run(project, env, allow_tools=False).stdout_lines()
    assert json.loads(settings.read_text()) == {"permissions": {"ask": ["mcp__thatch"]}}
    assert (
        f"  created  {settings}  (permissions.ask += mcp__thatch: Claude asks before each "
        "thatch tool call)" in lines
    )
    lines = run(project, env, allow_tools=True).stdout_lines()
    assert json.loads(settings.read_text()) == {"permissions": {"allow": ["mcp__thatch"]}}
    assert (
        f"  written  {settings}  (permissions.allow += mcp__thatch; permissions.ask -= "
        "mcp__thatch: thatch's tools run without asking)" in lines
    )
    settings.write_text(json.dumps({"permissions": {"allow": ["mcp__thatch"]}, "env": {}}))
    lines = run(project, env, allow_tools=False).stdout_lines()
    assert (
        f"  written  {settings}  (permissions.allow -= mcp__thatch; permissions.ask += "
        "mcp__thatch: Claude asks before each thatch tool call)" in lines
    )
    assert json.loads(settings.read_text()) == {
        "permissions": {"ask": ["mcp__thatch"]},
        "env": {},
    }
    settings.write_text(json.dumps({"permissions": {"allow": ["mcp__thatch", "Read"]}}))
    run(project, env, allow_tools=False)
    assert json.loads(settings.read_text()) == {
        "permissions": {"allow": ["Read"], "ask": ["mcp__thatch"]}
    }


def test_no_allow_tools_writes_through_a_symlinked_settings_file(
    tmp_path: Path, project: Path, env: dict[str, str]
) -> None:
    """A settings.local.json that is a link stays a link: the choice is written into its
    target (it once deleted the link and left the rule in the target)."""
    target = tmp_path / "dotfiles-settings.json"
    target.write_text(json.dumps({"permissions": {"allow": ["mcp__thatch"]}}, indent=2) + "\n")
    settings = project / ".claude" / "settings.local.json"
    settings.parent.mkdir()
    settings.symlink_to(target)
    run(project, env, allow_tools=False)
    assert settings.is_symlink()
    assert json.loads(target.read_text()) == {"permissions": {"ask": ["mcp__thatch"]}}


def test_global_rule_and_hooks_share_one_file_and_one_line(
    tmp_path: Path, project: Path, env: dict[str, str]
) -> None:
    settings = tmp_path / "claude-config" / "settings.json"
    lines = run(project, env, scope="global").stdout_lines()
    assert [line for line in lines if str(settings) in line] == [
        f"  created  {settings}  (permissions.allow += mcp__thatch: thatch's tools run "
        "without asking)"
    ]
    doc = json.loads(settings.read_text())
    assert doc["permissions"] == {"allow": ["mcp__thatch"]}
    assert set(doc["hooks"]) == {
        "SessionStart",
        "PostToolBatch",
        "UserPromptSubmit",
        "Stop",
        "SessionEnd",
        "SubagentStop",
    }


def test_permissions_of_the_wrong_shape_are_a_conflict(project: Path, env: dict[str, str]) -> None:
    settings = project / ".claude" / "settings.local.json"
    settings.parent.mkdir()
    settings.write_text('{"permissions": {"allow": "all"}}\n')
    result = run(project, env)
    assert settings.read_text() == '{"permissions": {"allow": "all"}}\n'
    assert f"  conflict  {settings}" in result.stdout_lines()
    assert result.exit_code == 1


def test_dry_run_describes_the_rule_without_writing(project: Path, env: dict[str, str]) -> None:
    lines = run(project, env, dry_run=True).stdout_lines()
    settings = project / ".claude" / "settings.local.json"
    assert (
        f"  would-write  {settings}  (missing; permissions.allow += mcp__thatch: thatch's "
        "tools run "
        "without asking)" in lines
    )
    assert not settings.exists()
    assert "Restart Claude Code to load the changes." not in lines


def test_cli_flag(
    tmp_path: Path, project: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`thatch setup --claude --no-allow-tools` writes no rule, and a rerun without the flag
    keeps it out; `--allow-tools` writes it, and a rerun keeps it."""
    settings = project / ".claude" / "settings.local.json"
    monkeypatch.chdir(project)
    monkeypatch.setenv("THATCH_PROJECT_DIR", str(project))
    script = tmp_path / "bin" / "thatch"  # hook commands are thatch's by the name "thatch"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.setattr(sys, "argv", [str(script), "setup"])
    done = CliRunner().invoke(cli, ["setup", "--claude", "--no-allow-tools"])
    assert done.exit_code == 0, done.output
    assert json.loads(settings.read_text()) == {"permissions": {"ask": ["mcp__thatch"]}}
    done = CliRunner().invoke(cli, ["setup", "--claude"])
    assert done.exit_code == 0, done.output
    assert json.loads(settings.read_text()) == {"permissions": {"ask": ["mcp__thatch"]}}
    assert "Restart" not in done.stdout
    done = CliRunner().invoke(cli, ["setup", "--claude", "--allow-tools"])
    assert done.exit_code == 0, done.output
    assert "mcp__thatch" in (project / ".claude" / "settings.local.json").read_text()
    assert done.stdout.splitlines()[-1] == "Restart Claude Code to load the changes."
    done = CliRunner().invoke(cli, ["setup", "--claude"])
    assert "Restart" not in done.stdout


def test_block_tells_how_to_load_deferred_tools() -> None:
    """Claude Code may defer MCP tools behind ToolSearch: the block says how to load them."""
    assert '`ToolSearch`, query "select:<full names>"' in BLOCK
    assert "`mcp__thatch__<name>`" in BLOCK
    assert BLOCK.startswith(BEGIN) and POINTER_BLOCK.endswith(END)


@pytest.mark.parametrize(
    ("listed", "expected"),
    [
        (f"thatch:\n  Scope: User config\n  Type: stdio\n  Command: {BIN}\n  Args: mcp\n", "same"),
        ("thatch:\n  Scope: User config\n", "same"),
        ("thatch:\n  Type: stdio\n  Command: /old/thatch\n  Args: mcp\n", "stale"),
    ],
)
def test_user_entry_with_another_command_is_not_unchanged(
    tmp_path: Path, project: Path, env: dict[str, str], listed: str, expected: str
) -> None:
    """A user-level thatch server running another binary is reported with the commands
    that replace it, never as unchanged; one without a Command line is taken as current."""
    (tmp_path / "listing").write_text(listed)
    script = tmp_path / "bin" / "claude"
    script.write_text(
        f'#!/bin/sh\nif [ "$2" = "get" ]; then while IFS= read -r l; do printf "%s\\n" "$l"; '
        f'done < "{tmp_path / "listing"}"; exit 0; fi\nexit 1\n'
    )
    script.chmod(0o755)
    result = run(project, env, scope="global")
    line = result.stdout_lines()[1]
    add = f"claude mcp add --scope user thatch -- {BIN} mcp"
    if expected == "same":
        assert line == f"  unchanged  {add}"
    else:
        remove = "claude mcp remove --scope user thatch"
        assert line == f"  printed  {remove} && {add}  ({RUN_IT_AGAIN})"
        assert any("runs /old/thatch, not" in d for d in result.details())


def test_user_entry_naming_thatch_on_path_is_the_same_binary(
    tmp_path: Path, project: Path, env: dict[str, str]
) -> None:
    """`Command: thatch` where PATH's thatch links to the binary setup runs: unchanged."""
    real = tmp_path / "real" / "thatch"
    real.parent.mkdir()
    real.write_text("#!/bin/sh\n")
    real.chmod(0o755)
    (tmp_path / "bin" / "thatch").symlink_to(real)
    script = tmp_path / "bin" / "claude"
    script.write_text('#!/bin/sh\nprintf "thatch:\\n  Command: thatch\\n"\nexit 0\n')
    script.chmod(0o755)
    request = SetupRequest(
        hosts=["claude"],
        project_dir=project,
        env=env,
        bin_path=str(real),
        version="1",
        scope="global",
    )
    assert run_setup(request).stdout_lines()[1].startswith("  unchanged  claude mcp add")


def test_feature_switches_in_thatch_entries_survive_setup(
    project: Path, env: dict[str, str]
) -> None:
    """THATCH_ENGINES / THATCH_CHAT set in thatch's MCP entry (docs/tools.md §switches) stay
    when setup rewrites the entry, for Claude Code and opencode, as do the user's own
    variables beside them."""
    run(project, env)
    mcp = project / ".mcp.json"
    doc = json.loads(mcp.read_text())
    doc["mcpServers"]["thatch"]["env"] = {"THATCH_CHAT": "off", "OTHER": "x"}
    mcp.write_text(json.dumps(doc))
    run(project, env)
    entry_env = json.loads(mcp.read_text())["mcpServers"]["thatch"]["env"]
    assert entry_env == {"THATCH_CHAT": "off", "OTHER": "x"}
    run_setup(
        SetupRequest(hosts=["opencode"], project_dir=project, env=env, bin_path=BIN, version="1")
    )
    opencode = project / "opencode.json"
    doc = json.loads(opencode.read_text())
    doc["mcp"]["thatch"]["environment"]["THATCH_ENGINES"] = "off"
    opencode.write_text(json.dumps(doc))
    run_setup(
        SetupRequest(hosts=["opencode"], project_dir=project, env=env, bin_path=BIN, version="1")
    )
    environment = json.loads(opencode.read_text())["mcp"]["thatch"]["environment"]
    assert environment == {"THATCH_HOST": "opencode", "THATCH_ENGINES": "off"}


def test_no_engines_and_no_chat_switch_the_project_and_doctor_agrees(
    project: Path, env: dict[str, str]
) -> None:
    """setup --no-engines --no-chat: thatch's entry carries both switches and the block
    drops the engines' sections; a plain rerun keeps that and doctor sees no drift;
    --engines turns the engines back on (docs/tools.md §switches)."""
    from thatch.frontend.setup.check import doctor_status

    def entry_env() -> object:
        return json.loads((project / ".mcp.json").read_text())["mcpServers"]["thatch"].get("env")

    def block_has_engines() -> bool:
        return "[thatch] User decision model" in (project / "CLAUDE.md").read_text()

    run(project, env, switches={"engines": False, "chat": False})
    assert entry_env() == {"THATCH_ENGINES": "off", "THATCH_CHAT": "off"}
    assert not block_has_engines()
    again = run(project, env)
    assert all(line.status == "unchanged" for line in again.reports[0].lines), again
    assert doctor_status("claude", project, env, bin_path=BIN, version="1")[0] == "ok"
    run(project, env, switches={"engines": True})
    assert entry_env() == {"THATCH_CHAT": "off"}
    assert block_has_engines()
    run(project, env, switches={"chat": True})
    assert entry_env() is None


def test_shared_agents_md_keeps_the_engines_while_either_host_has_them(
    project: Path, env: dict[str, str]
) -> None:
    """Cursor and opencode read one AGENTS.md: with the engines off for cursor only, the
    block keeps the engines' sections (opencode's agents use them), reruns of either host
    change nothing and doctor sees no drift; off for both, the sections go."""
    from thatch.frontend.setup.check import doctor_status

    agents = project / "AGENTS.md"

    def setup(host: str, **switches: bool) -> SetupResult:
        request = SetupRequest(
            hosts=[host], project_dir=project, env=env, bin_path=BIN, version="1", switches=switches
        )
        return run_setup(request)

    setup("cursor", engines=False)
    assert "[thatch] User decision model" not in agents.read_text()
    setup("opencode")
    assert "[thatch] User decision model" in agents.read_text()
    for host in ("cursor", "opencode", "cursor"):
        again = setup(host)
        assert all(line.status == "unchanged" for line in again.reports[0].lines), again
        assert doctor_status(host, project, env, bin_path=BIN, version="1")[0] == "ok", host
    setup("opencode", engines=False)
    assert "[thatch] User decision model" not in agents.read_text()
    again = setup("cursor")
    assert all(line.status == "unchanged" for line in again.reports[0].lines), again


def test_cli_switch_flags(
    tmp_path: Path, project: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`thatch setup --claude --no-chat` writes the switch; with --global it is a usage error."""
    monkeypatch.chdir(project)
    monkeypatch.setenv("THATCH_PROJECT_DIR", str(project))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    script = tmp_path / "bin" / "thatch"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.setattr(sys, "argv", [str(script), "setup"])
    done = CliRunner().invoke(cli, ["setup", "--claude", "--no-chat"])
    assert done.exit_code == 0, done.output
    entry = json.loads((project / ".mcp.json").read_text())["mcpServers"]["thatch"]
    assert entry["env"] == {"THATCH_CHAT": "off"}
    refused = CliRunner().invoke(cli, ["setup", "--claude", "--global", "--no-chat"])
    assert refused.exit_code == 2 and "without --global" in refused.output


def test_without_claude_on_path_setup_reads_the_user_file(
    tmp_path: Path, project: Path, env: dict[str, str]
) -> None:
    """No `claude` on PATH: the command is printed with a note saying it was not run and
    must be; once Claude Code's user file holds the server it is unchanged, and one running
    another executable gets the commands that replace it."""
    add = f"claude mcp add --scope user thatch -- {BIN} mcp"
    lines = run(project, env, scope="global").stdout_lines()
    assert lines[1] == f"  printed  {add}  ({RUN_IT})"
    assert RUN_IT == "not run: run it yourself; Claude Code has no thatch tools until then"
    user_file = tmp_path / "claude-config" / ".claude.json"
    for command, expected in ((BIN, f"  unchanged  {add}"), ("/old/thatch", None)):
        entry = {"type": "stdio", "command": command, "args": ["mcp"], "env": {}}
        user_file.write_text(json.dumps({"mcpServers": {"thatch": entry}, "projects": {}}))
        line = run(project, env, scope="global").stdout_lines()[1]
        remove = "claude mcp remove --scope user thatch"
        assert line == (expected or f"  printed  {remove} && {add}  ({RUN_IT_AGAIN})")
    assert RUN_IT_AGAIN == (
        "not run: run it yourself; until then Claude Code runs the other executable"
    )


@pytest.mark.parametrize("claude_on_path", [False, True])
def test_a_user_server_run_through_uvx_is_said_to_run_thatch(
    tmp_path: Path, project: Path, env: dict[str, str], claude_on_path: bool
) -> None:
    """A user-level server `uvx --from thatch thatch mcp` runs thatch, maybe another version
    than the hooks run: setup says so, not "another executable", and still prints the
    commands that make it run the hooks' thatch. The user may have chosen uvx, which setup
    cannot tell: the line says how to keep it, and that setup then exits 1 each run."""
    args = ["--from", "thatch", "thatch", "mcp"]
    if claude_on_path:
        script = tmp_path / "bin" / "claude"
        script.write_text(
            '#!/bin/sh\nif [ "$2" = "get" ]; then '
            'printf "thatch:\\n  Command: uvx\\n  Args: --from thatch thatch mcp\\n"; '
            "exit 0; fi\nexit 1\n"
        )
        script.chmod(0o755)
    else:
        user_file = tmp_path / "claude-config" / ".claude.json"
        user_file.parent.mkdir()
        entry = {"type": "stdio", "command": "uvx", "args": args, "env": {}}
        user_file.write_text(json.dumps({"mcpServers": {"thatch": entry}}))
    result = run(project, env, scope="global")
    add = f"claude mcp add --scope user thatch -- {BIN} mcp"
    remove = "claude mcp remove --scope user thatch"
    note = RUN_THROUGH.format(runner="uvx")
    assert result.stdout_lines()[1] == f"  printed  {remove} && {add}  ({note})"
    assert note == (
        "not run: run it yourself; until then Claude Code runs thatch through uvx, "
        "maybe another version than the hooks'; to keep that, leave it: each setup run then "
        "prints this and exits 1"
    )
    assert result.exit_code == 1
    assert any(
        d.startswith("the user-level thatch server runs thatch through uvx, maybe another")
        for d in result.details()
    ), result.details()


@pytest.mark.parametrize(
    ("command", "args", "expected"),
    [
        ("uvx", ["thatch", "mcp"], "uvx"),
        ("/home/u/.local/bin/uvx", ["--from", "thatch==2.0", "thatch", "mcp"], "uvx"),
        ("uv", ["tool", "run", "thatch", "mcp"], "uv"),
        ("pipx", ["run", "thatch[team]", "mcp"], "pipx"),
        ("uvx", ["other-server", "mcp"], None),
        ("uvx", ["thatch", "reminder"], None),
        ("npx", ["thatch", "mcp"], None),
        ("uvx", "thatch mcp", None),
    ],
)
def test_runner_names_only_a_runner_of_thatchs_server(
    command: str, args: object, expected: str | None
) -> None:
    """An entry runs thatch through a package runner when the runner is uvx, uv or pipx
    and its arguments name thatch and `mcp`."""
    from thatch.frontend.setup.claude_servers import runner

    assert runner(command, args) == expected


def test_cli_post_tool_use_is_kept_until_post_tool_batch(
    tmp_path: Path, project: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--post-tool-use` stays through a plain rerun; `--post-tool-batch` undoes it."""
    monkeypatch.chdir(project)
    monkeypatch.setenv("THATCH_PROJECT_DIR", str(project))
    script = tmp_path / "bin" / "thatch"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.setattr(sys, "argv", [str(script), "setup"])
    settings = project / ".claude" / "settings.json"
    for flags, event in (
        (["--post-tool-use"], "PostToolUse"),
        ([], "PostToolUse"),
        (["--post-tool-batch"], "PostToolBatch"),
        ([], "PostToolBatch"),
    ):
        done = CliRunner().invoke(cli, ["setup", "--claude", *flags])
        assert done.exit_code == 0, done.output
        hooks = json.loads(settings.read_text())["hooks"]
        other = {"PostToolUse", "PostToolBatch"} - {event}
        assert event in hooks and not other & set(hooks), flags


LEGACY_BLOCK = (
    "# Persistence\n\nThatch provides persistent memory across sessions.\n\nold rules\n"
    '"Forget X" means forget it.\n'
)


@pytest.mark.parametrize("origin", ["teammate", "typescript", "global"])
def test_a_first_setup_where_the_committed_files_exist_adds_the_rule(
    tmp_path: Path, project: Path, env: dict[str, str], origin: str
) -> None:
    """A teammate's clone (or a new worktree) has the committed CLAUDE.md, hooks and
    .mcp.json but not the personal settings.local.json; a project the TypeScript release
    set up has its `# Persistence` block, hooks and server but never had a rule; a global
    setup of those days likewise. No record of --no-allow-tools: the rule is added."""
    scope = "global" if origin == "global" else "local"
    run(project, env, scope=scope)
    if scope == "local":
        allow_file = project / ".claude" / "settings.local.json"
        allow_file.unlink()  # not committed: a clone does not have it
        if origin == "typescript":
            (project / "CLAUDE.md").write_text(LEGACY_BLOCK)
    else:
        allow_file = tmp_path / "claude-config" / "settings.json"
        doc = json.loads(allow_file.read_text())
        del doc["permissions"]
        allow_file.write_text(json.dumps(doc, indent=2) + "\n")
        (tmp_path / "claude-config" / "CLAUDE.md").write_text(LEGACY_BLOCK)
    lines = run(project, env, scope=scope).stdout_lines()
    assert json.loads(allow_file.read_text())["permissions"] == {"allow": ["mcp__thatch"]}
    assert any(
        str(allow_file) in line and "permissions.allow += mcp__thatch" in line for line in lines
    )


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ('{\n  // my rules\n  "permissions": {"allow": ["Read", "mcp__thatch"]},\n}\n', True),
        ('{\n  // mine\n  "permissions": {"ask": ["mcp__thatch"]},\n}\n', False),
        ('{"permissions": {"allow": ["mcp__thatch"]}, oops}', True),
        ('{"permissions": {"ask": ["mcp__thatch"]}, oops}', False),
        ("not json at all", True),
    ],
)
def test_a_rerun_reads_the_choice_as_the_writer_reads_the_file(
    project: Path, env: dict[str, str], text: str, rule: bool
) -> None:
    """The choice is read as the writer reads the file (JSONC too), and a file no parser
    reads keeps what its text shows: a comment once deleted the user's rule, and a file
    that was no JSON lost its rule as if the user had opted out."""
    run(project, env)
    settings = project / ".claude" / "settings.local.json"
    settings.write_text(text)
    run(project, env)
    permissions = json.loads(settings.read_text())["permissions"]
    assert ("mcp__thatch" in permissions.get("allow", [])) is rule
    assert ("mcp__thatch" in permissions.get("ask", [])) is not rule
    assert list(project.glob(".claude/settings.local.json.bak-*"))  # the original is kept


@pytest.mark.parametrize("broken", [False, True])
def test_a_rerun_keeps_post_tool_use_in_a_hooks_file_no_strict_parser_reads(
    project: Path, env: dict[str, str], broken: bool
) -> None:
    """A JSONC (or damaged) hooks file holding thatch's buffer hook under PostToolUse keeps
    it there on a plain rerun (it silently moved back to PostToolBatch)."""
    run(project, env, post_tool_use=True)
    settings = project / ".claude" / "settings.json"
    text = "{\n  // team hooks\n" + settings.read_text()[1:]
    settings.write_text(text.replace('"hooks"', '"x": nope,\n  "hooks"', 1) if broken else text)
    run(project, env)
    doc = json.loads(settings.read_text())
    assert "PostToolUse" in doc["hooks"] and "PostToolBatch" not in doc["hooks"]
