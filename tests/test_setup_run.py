"""thatch setup end to end through the library: files per host and scope, idempotence,
preservation of foreign content, dry runs, broken blocks and Claude's user-scope MCP."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

import pytest

from thatch.frontend.setup import SetupRequest, SetupResult, run_setup
from thatch.frontend.setup.block import BEGIN, END
from thatch.frontend.setup.hooks import HOOK_SUBCOMMANDS
from thatch.frontend.setup.run import RUN_IT

BIN = "/opt/thatch tools/bin/thatch"  # a space forces shell quoting in hook commands
HOOK_COMMANDS = {
    "reminder",
    "buffer-batch",
    "buffer-tool",
    "flush-tools",
    "chat-notify",
    "session-end",
    "extraction-complete",
}


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Host config dirs under tmp_path and a PATH without any `claude`."""
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


def run(project: Path, env: dict[str, str], hosts: list[str], **options: Any) -> SetupResult:
    request = SetupRequest(
        hosts=hosts, project_dir=project, env=env, bin_path=BIN, version="9.9.9", **options
    )
    return run_setup(request)


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def check_command(command: str, host: str | None = None) -> str:
    words = shlex.split(command)
    assert words[0] == BIN
    assert words[1] in HOOK_COMMANDS
    rest = words[2:]
    if "--json" in rest:
        rest.remove("--json")
    if host is not None:
        assert rest == ["--host", host]
    else:
        assert rest == []
    return words[1]


def expected_files(tmp: Path, project: Path, host: str, scope: str) -> set[Path]:
    claude, cursor = tmp / "claude-config", tmp / "cursor-config"
    opencode = tmp / "home" / ".config" / "opencode"
    skills_dir = {"claude": claude, "cursor": cursor, "opencode": opencode}[host] / "skills"
    skills = {
        skills_dir / n / "SKILL.md"
        for n in ("thatch-fact-extractor", "thatch-dedup-classifier", "thatch-project-primer")
    }
    local = scope == "local"
    files = {
        "claude": {
            project / ".mcp.json",
            project / "CLAUDE.md",
            project / ".claude/settings.json",
            project / ".claude/settings.local.json",
        }
        if local
        else {claude / "CLAUDE.md", claude / "settings.json"},
        "cursor": {
            project / ".cursor/mcp.json",
            project / "AGENTS.md",
            project / ".cursor/hooks.json",
        }
        if local
        else {cursor / "mcp.json", cursor / "AGENTS.md", cursor / "hooks.json"},
        "opencode": {
            project / "opencode.json",
            project / "AGENTS.md",
            project / ".opencode/plugins/thatch.js",
        }
        if local
        else {opencode / "opencode.json", opencode / "AGENTS.md", opencode / "plugins/thatch.js"},
    }[host]
    return files | skills


@pytest.mark.parametrize("scope", ["local", "global"])
@pytest.mark.parametrize("host", ["claude", "cursor", "opencode"])
def test_fresh_run_creates_exactly_the_hosts_files(
    tmp_path: Path, project: Path, env: dict[str, str], host: str, scope: str
) -> None:
    """A fresh run creates exactly docs/hooks.md §setup-files's files, each with valid thatch
    content."""
    result = run(project, env, [host], scope=scope)
    # No `claude` on PATH: `claude mcp add` is printed, not run, and needs the user.
    assert result.exit_code == (1 if (host, scope) == ("claude", "global") else 0)
    created = {p for p in tmp_path.rglob("*") if p.is_file()}
    assert created == expected_files(tmp_path, project, host, scope)
    by_name = {p.name: p for p in created}
    block_file = by_name["CLAUDE.md" if host == "claude" else "AGENTS.md"]
    text = block_file.read_text()
    assert text.startswith(BEGIN + "\n") and text.endswith(END + "\n")
    if host == "claude":
        settings = json.loads(by_name["settings.json"].read_text())
        events = settings["hooks"]
        assert list(events) == [
            "SessionStart",
            "PostToolBatch",
            "UserPromptSubmit",
            "Stop",
            "SessionEnd",
            "SubagentStop",
        ]
        subs = [check_command(g["hooks"][0]["command"]) for e in events.values() for g in e]
        assert subs == [
            "reminder",
            "buffer-batch",
            "flush-tools",
            "chat-notify",
            "session-end",
            "extraction-complete",
        ]
        allow_file = by_name["settings.local.json" if scope == "local" else "settings.json"]
        assert json.loads(allow_file.read_text())["permissions"] == {"allow": ["mcp__thatch"]}
        if scope == "local":
            mcp = json.loads(by_name[".mcp.json"].read_text())
            assert mcp == {
                "mcpServers": {"thatch": {"type": "stdio", "command": BIN, "args": ["mcp"]}}
            }
        else:
            lines = result.stdout_lines()
            add = f"claude mcp add --scope user thatch -- '{BIN}' mcp"
            assert f"  printed  {add}  ({RUN_IT})" in lines
    elif host == "cursor":
        doc = json.loads(by_name["hooks.json"].read_text())
        assert doc["version"] == 1
        subs = [
            check_command(e["command"], "cursor")  # every Cursor command names its host
            for event, v in doc["hooks"].items()
            for e in v
        ]
        assert subs == ["reminder", "buffer-tool", "flush-tools", "chat-notify", "session-end"]
        assert doc["hooks"]["stop"][0]["loop_limit"] == 3
        assert doc["hooks"]["stop"][0]["command"].endswith(" chat-notify --host cursor")
        assert doc["hooks"]["sessionStart"][0]["command"].endswith(" reminder --json --host cursor")
        mcp = json.loads(by_name["mcp.json"].read_text())["mcpServers"]["thatch"]
        assert mcp["command"] == BIN and mcp["args"] == ["mcp"]
        assert mcp["env"] == {"THATCH_PROJECT_DIR": "${workspaceFolder}", "THATCH_HOST": "cursor"}
    else:
        doc = json.loads(by_name["opencode.json"].read_text())
        assert doc["mcp"]["thatch"] == {
            "type": "local",
            "command": [BIN, "mcp"],
            "enabled": True,
            "environment": {"THATCH_HOST": "opencode"},
        }
        plugin = by_name["thatch.js"].read_text()
        assert plugin.startswith("// Generated by thatch setup 9.9.9. Do not edit")
        assert json.dumps(BIN) in plugin


@pytest.mark.parametrize("scope", ["local", "global"])
def test_rerun_rewrites_nothing(
    tmp_path: Path, project: Path, env: dict[str, str], scope: str
) -> None:
    """A second run leaves every byte and mtime alone and reports every file unchanged."""
    hosts = ["claude", "cursor", "opencode"]
    run(project, env, hosts, scope=scope)
    before = snapshot(tmp_path)
    result = run(project, env, hosts, scope=scope)
    assert snapshot(tmp_path) == before
    statuses = {line.split()[0] for line in result.stdout_lines() if line.startswith("  ")}
    assert statuses == ({"unchanged", "printed"} if scope == "global" else {"unchanged"})
    assert result.exit_code == (1 if scope == "global" else 0)  # `claude mcp add` not run


def test_output_format(project: Path, env: dict[str, str]) -> None:
    """Output is a host header, one indented line per artifact and the restart line."""
    lines = run(project, env, ["cursor"]).stdout_lines()
    assert lines[0] == "Cursor (local):"
    assert lines[1] == f"  created  {project / '.cursor' / 'mcp.json'}"
    assert lines[2] == f"  created  {project / 'AGENTS.md'}"
    assert lines[3] == f"  created  {project / '.cursor' / 'hooks.json'}"
    assert len(lines) == 8 and lines[-1] == "Restart Cursor to load the changes."


def test_dry_run_changes_nothing(tmp_path: Path, project: Path, env: dict[str, str]) -> None:
    """--dry-run prints would-write lines and leaves the tree byte-identical."""
    (project / "CLAUDE.md").write_text("# Mine\n")
    (project / ".mcp.json").write_text("{oops")
    before = snapshot(tmp_path)
    result = run(project, env, ["claude", "cursor", "opencode"], dry_run=True)
    assert snapshot(tmp_path) == before
    statuses = {line.split()[0] for line in result.stdout_lines() if line.startswith("  ")}
    assert statuses == {"would-write"}
    assert result.exit_code == 0


def test_foreign_content_is_preserved(project: Path, env: dict[str, str]) -> None:
    """User text, other MCP servers, other hooks and other keys survive byte for byte."""
    before, after = "# My rules\n\nUse tabs.\n\n", "\n## Later\nkeep me\n"
    old_block = f"{BEGIN}\nold thatch text\n{END}"
    (project / "CLAUDE.md").write_text(before + old_block + after)
    (project / ".mcp.json").write_text(
        json.dumps(
            {"mcpServers": {"other": {"command": "x"}, "thatch": {"command": "old"}}, "z": 1}
        )
    )
    settings = {
        "permissions": {"allow": ["Bash(ls)"]},
        "hooks": {
            "SessionStart": [
                {
                    "hooks": [
                        {"type": "command", "command": "echo thatch"},
                        {"type": "command", "command": "thatch reminder"},
                    ]
                },
                {
                    "matcher": "x",
                    "hooks": [{"type": "command", "command": "thatch reminder --json"}],
                },
            ],
            "Stop": [{"hooks": [{"type": "command", "command": "say done"}]}],
        },
    }
    (project / ".claude").mkdir()
    (project / ".claude" / "settings.json").write_text(json.dumps(settings, indent=4))
    run(project, env, ["claude"])
    text = (project / "CLAUDE.md").read_text()
    assert text.startswith(before + BEGIN + "\n") and text.endswith(END + after)
    assert "old thatch text" not in text
    mcp = json.loads((project / ".mcp.json").read_text())
    assert list(mcp) == ["mcpServers", "z"] and list(mcp["mcpServers"]) == ["other", "thatch"]
    assert mcp["mcpServers"]["other"] == {"command": "x"}
    assert mcp["mcpServers"]["thatch"]["command"] == BIN
    new = json.loads((project / ".claude" / "settings.json").read_text())
    assert new["permissions"] == settings["permissions"]
    stop = new["hooks"]["Stop"]
    assert stop[0] == settings["hooks"]["Stop"][0]  # foreign Stop hook kept, ours after it
    assert len(stop) == 2 and check_command(stop[1]["hooks"][0]["command"]) == "chat-notify"
    start = new["hooks"]["SessionStart"]
    assert start[0] == {"hooks": [{"type": "command", "command": "echo thatch"}]}
    assert len(start) == 2 and check_command(start[1]["hooks"][0]["command"]) == "reminder"


def test_cursor_and_opencode_foreign_entries_preserved(project: Path, env: dict[str, str]) -> None:
    """Cursor's other hooks and opencode's other servers (mcp.servers form) are kept."""
    (project / ".cursor").mkdir()
    hooks_doc = {
        "hooks": {
            "postToolUse": [{"command": "lint.sh"}, {"command": "thatch buffer-tool"}],
            "stop": [{"command": "thatch-other reminder"}],
        }
    }
    (project / ".cursor" / "hooks.json").write_text(json.dumps(hooks_doc))
    (project / "opencode.json").write_text(
        json.dumps({"theme": "dark", "mcp": {"servers": {"gh": {"type": "remote"}}}})
    )
    run(project, env, ["cursor", "opencode"])
    doc = json.loads((project / ".cursor" / "hooks.json").read_text())
    assert list(doc) == ["version", "hooks"] and doc["version"] == 1
    stop = doc["hooks"]["stop"]
    assert stop[0] == {"command": "thatch-other reminder"} and len(stop) == 2
    assert check_command(stop[1]["command"], "cursor") == "chat-notify"
    assert stop[1]["loop_limit"] == 3
    tool = doc["hooks"]["postToolUse"]
    assert tool[0] == {"command": "lint.sh"} and len(tool) == 2
    assert check_command(tool[1]["command"], "cursor") == "buffer-tool"
    oc = json.loads((project / "opencode.json").read_text())
    assert oc["theme"] == "dark" and oc["mcp"]["servers"]["gh"] == {"type": "remote"}
    assert oc["mcp"]["servers"]["thatch"] == {
        "type": "local",
        "command": [BIN, "mcp"],
        "environment": {"THATCH_HOST": "opencode"},
    }
    assert "thatch" not in oc["mcp"]


def test_existing_opencode_jsonc_is_used(project: Path, env: dict[str, str]) -> None:
    """An existing opencode.jsonc is the target; its comments force a backup first."""
    (project / "opencode.jsonc").write_text('{\n  // mine\n  "theme": "dark",\n}\n')
    result = run(project, env, ["opencode"])
    assert not (project / "opencode.json").exists()
    doc = json.loads((project / "opencode.jsonc").read_text())
    assert doc["theme"] == "dark" and "thatch" in doc["mcp"]
    backups = list(project.glob("opencode.jsonc.bak-*"))
    assert len(backups) == 1 and "// mine" in backups[0].read_text()
    assert f"  backed-up  {backups[0]}" in result.stdout_lines()


def test_post_tool_use_switches_event(project: Path, env: dict[str, str]) -> None:
    """--post-tool-use moves buffering to PostToolUse with matcher * and --post-tool-batch
    back again."""
    run(project, env, ["claude"])
    run(project, env, ["claude"], post_tool_use=True)
    hooks = json.loads((project / ".claude" / "settings.json").read_text())["hooks"]
    assert "PostToolBatch" not in hooks
    assert hooks["PostToolUse"][0]["matcher"] == "*"
    assert check_command(hooks["PostToolUse"][0]["hooks"][0]["command"]) == "buffer-batch"
    run(project, env, ["claude"])  # a rerun without the flag keeps the choice
    assert "PostToolUse" in json.loads((project / ".claude" / "settings.json").read_text())["hooks"]
    run(project, env, ["claude"], post_tool_use=False)  # --post-tool-batch
    hooks = json.loads((project / ".claude" / "settings.json").read_text())["hooks"]
    assert "PostToolUse" not in hooks and len(hooks["PostToolBatch"]) == 1


def test_broken_block_reports_and_finishes_other_steps(project: Path, env: dict[str, str]) -> None:
    """A damaged block leaves CLAUDE.md untouched, says broken, still writes the rest, exits 1."""
    damaged = f"mine\n{BEGIN}\npartial\n"
    (project / "CLAUDE.md").write_text(damaged)
    result = run(project, env, ["claude"])
    assert (project / "CLAUDE.md").read_text() == damaged
    assert f"  broken  {project / 'CLAUDE.md'}" in result.stdout_lines()
    assert (project / ".claude" / "settings.json").is_file()
    assert result.exit_code == 1
    assert any("remove the partial block" in d for d in result.details())


def test_conflicting_hooks_shape_is_left_alone(project: Path, env: dict[str, str]) -> None:
    """A settings.json whose hooks is not an object is not rewritten: conflict, exit 1."""
    (project / ".claude").mkdir()
    (project / ".claude" / "settings.json").write_text('{"hooks": "nope"}\n')
    result = run(project, env, ["claude"])
    assert (project / ".claude" / "settings.json").read_text() == '{"hooks": "nope"}\n'
    assert result.exit_code == 1


def test_file_mode_is_kept(project: Path, env: dict[str, str]) -> None:
    """Rewriting an existing file keeps its permission bits."""
    path = project / ".mcp.json"
    path.write_text("{}")
    path.chmod(0o600)
    run(project, env, ["claude"])
    assert path.stat().st_mode & 0o777 == 0o600
    assert "thatch" in json.loads(path.read_text())["mcpServers"]


def _fake_claude(tmp_path: Path, known: bool) -> Path:
    log = tmp_path / "claude.log"
    script = tmp_path / "bin" / "claude"
    script.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$*" >> "{log}"\n'
        f'if [ "$2" = "get" ]; then exit {0 if known else 1}; fi\n'
        "exit 0\n"
    )
    script.chmod(0o755)
    return log


def test_claude_global_mcp_runs_claude(tmp_path: Path, project: Path, env: dict[str, str]) -> None:
    """With claude on PATH and no thatch server, setup runs `claude mcp add --scope user`."""
    log = _fake_claude(tmp_path, known=False)
    result = run(project, env, ["claude"], scope="global")
    calls = log.read_text().splitlines()
    assert calls == ["mcp get thatch", f"mcp add --scope user thatch -- {BIN} mcp"]
    assert f"  written  claude mcp add --scope user thatch -- '{BIN}' mcp" in result.stdout_lines()


def test_claude_global_mcp_known_is_unchanged(
    tmp_path: Path, project: Path, env: dict[str, str]
) -> None:
    """When `claude mcp get thatch` succeeds nothing is added."""
    log = _fake_claude(tmp_path, known=True)
    result = run(project, env, ["claude"], scope="global")
    assert log.read_text().splitlines() == ["mcp get thatch"]
    assert result.stdout_lines()[1].startswith("  unchanged  claude mcp add")


def test_hook_subcommand_list_matches_spec() -> None:
    """The recognised subcommands are exactly docs/hooks.md §hook-entries's list."""
    assert (
        frozenset(
            {
                "reminder",
                "buffer-batch",
                "buffer-tool",
                "flush-tools",
                "flush-predictions",
                "chat-notify",
                "session-end",
                "extraction-complete",
                "extraction-requeue",
                "echo",
            }
        )
        == HOOK_SUBCOMMANDS
    )


def test_unreadable_path_reported_other_steps_done(project: Path, env: dict[str, str]) -> None:
    """A config path that cannot be read (a directory) is a conflict; the rest is written."""
    (project / ".mcp.json").mkdir()
    result = run(project, env, ["claude"])
    assert result.exit_code == 1
    assert f"  conflict  {project / '.mcp.json'}" in result.stdout_lines()
    assert (project / "CLAUDE.md").is_file() and (project / ".claude" / "settings.json").is_file()
