"""What a user adds to thatch's own entries survives `thatch setup`: extra env keys and
options of thatch's MCP entry and hooks are kept, a rerun rewrites nothing and doctor sees
no drift; a value thatch must set wins, and setup says which one it replaced
(docs/hooks.md §setup-files)."""

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
from thatch.frontend.setup.check import doctor_status

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


def run(
    project: Path,
    env: dict[str, str],
    host: str,
    switches: dict[str, bool] | None = None,
    post_tool_use: bool = False,
) -> SetupResult:
    request = SetupRequest(hosts=[host], project_dir=project, env=env, bin_path=BIN,
                           version="1", switches=switches or {},
                           post_tool_use=post_tool_use)  # fmt: skip
    return run_setup(request)


def edit(path: Path, change: Any) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc, indent=2) + "\n")


def rerun_changes_nothing(project: Path, env: dict[str, str], host: str) -> None:
    again = run(project, env, host)
    assert all(line.status == "unchanged" for line in again.reports[0].lines), again
    assert again.details() == []
    assert doctor_status(host, project, env, bin_path=BIN, version="1")[0] == "ok"


def test_claude_keeps_the_users_env(project: Path, env: dict[str, str]) -> None:
    """An env of thatch's .mcp.json entry stays through a rerun, which then writes nothing
    (doctor: ok)."""
    run(project, env, "claude")
    mcp = project / ".mcp.json"
    edit(mcp, lambda d: d["mcpServers"]["thatch"].update(env={"THATCH_DB_PATH": "/data/team.db"}))
    run(project, env, "claude")
    entry = json.loads(mcp.read_text())["mcpServers"]["thatch"]
    assert entry["env"] == {"THATCH_DB_PATH": "/data/team.db"}
    rerun_changes_nothing(project, env, "claude")


def test_claude_keeps_the_users_hook_options(project: Path, env: dict[str, str]) -> None:
    """A timeout on thatch's SessionStart hook and a matcher on its group stay through a
    rerun, which then writes nothing (doctor: ok)."""
    run(project, env, "claude")
    settings = project / ".claude" / "settings.json"

    def hook_options(doc: dict[str, Any]) -> None:
        group = doc["hooks"]["SessionStart"][0]
        group["matcher"] = "startup"
        group["hooks"][0]["timeout"] = 30

    edit(settings, hook_options)
    run(project, env, "claude")
    group = json.loads(settings.read_text())["hooks"]["SessionStart"][0]
    assert group["matcher"] == "startup" and group["hooks"][0]["timeout"] == 30
    rerun_changes_nothing(project, env, "claude")


def test_claude_buffer_hook_keeps_the_users_keys_across_events(
    project: Path, env: dict[str, str]
) -> None:
    """A timeout and an env on thatch's buffer hook move with it from PostToolBatch to
    PostToolUse (--post-tool-use) and back; the group's matcher is the event's own."""
    run(project, env, "claude")
    settings = project / ".claude" / "settings.json"
    mine = {"timeout": 30, "env": {"MINE": "1"}}
    edit(settings, lambda d: d["hooks"]["PostToolBatch"][0]["hooks"][0].update(mine))
    run(project, env, "claude", post_tool_use=True)
    events = json.loads(settings.read_text())["hooks"]
    assert "PostToolBatch" not in events
    assert events["PostToolUse"] == [
        {"matcher": "*", "hooks": [{"type": "command", "command": f"{BIN} buffer-batch", **mine}]}
    ]
    run(project, env, "claude")
    events = json.loads(settings.read_text())["hooks"]
    assert "PostToolUse" not in events
    assert events["PostToolBatch"] == [
        {"hooks": [{"type": "command", "command": f"{BIN} buffer-batch", **mine}]}
    ]
    rerun_changes_nothing(project, env, "claude")


def test_claude_switches_keep_the_users_env(project: Path, env: dict[str, str]) -> None:
    """--no-chat adds its switch beside the user's variable and --chat takes only its own
    switch out again."""
    run(project, env, "claude")
    mcp = project / ".mcp.json"
    edit(mcp, lambda d: d["mcpServers"]["thatch"].update(env={"THATCH_DB_PATH": "/data/t.db"}))
    run(project, env, "claude", switches={"chat": False})
    entry_env = json.loads(mcp.read_text())["mcpServers"]["thatch"]["env"]
    assert entry_env == {"THATCH_DB_PATH": "/data/t.db", "THATCH_CHAT": "off"}
    run(project, env, "claude", switches={"chat": True})
    entry_env = json.loads(mcp.read_text())["mcpServers"]["thatch"]["env"]
    assert entry_env == {"THATCH_DB_PATH": "/data/t.db"}


def test_cursor_keeps_the_users_env(project: Path, env: dict[str, str]) -> None:
    """A variable beside thatch's own in .cursor/mcp.json stays; thatch's are still there."""
    run(project, env, "cursor")
    mcp = project / ".cursor" / "mcp.json"
    edit(mcp, lambda d: d["mcpServers"]["thatch"]["env"].update(THATCH_DB_PATH="/data/team.db"))
    run(project, env, "cursor")
    assert json.loads(mcp.read_text())["mcpServers"]["thatch"]["env"] == {
        "THATCH_PROJECT_DIR": "${workspaceFolder}",
        "THATCH_HOST": "cursor",
        "THATCH_DB_PATH": "/data/team.db",
    }
    rerun_changes_nothing(project, env, "cursor")


def test_cursor_keeps_the_users_hook_options(project: Path, env: dict[str, str]) -> None:
    """A timeout on thatch's sessionStart hook stays beside the stop hook's loop_limit."""
    run(project, env, "cursor")
    hook_file = project / ".cursor" / "hooks.json"
    edit(hook_file, lambda d: d["hooks"]["sessionStart"][0].update(timeout=30))
    run(project, env, "cursor")
    events = json.loads(hook_file.read_text())["hooks"]
    assert events["sessionStart"][0]["timeout"] == 30
    assert events["stop"][0]["loop_limit"] == 3
    rerun_changes_nothing(project, env, "cursor")


@pytest.mark.parametrize("nested", [False, True])
def test_opencode_keeps_the_users_environment_and_options(
    project: Path, env: dict[str, str], nested: bool
) -> None:
    """A variable in thatch's environment and an option of the entry stay, in both places
    opencode keeps servers (mcp.thatch and mcp.servers.thatch)."""
    config = project / "opencode.json"
    if nested:
        config.write_text(json.dumps({"mcp": {"servers": {}}}))
    run(project, env, "opencode")

    def entry(doc: dict[str, Any]) -> dict[str, Any]:
        servers = doc["mcp"]["servers"] if nested else doc["mcp"]
        found: dict[str, Any] = servers["thatch"]
        return found

    def add(doc: dict[str, Any]) -> None:
        entry(doc)["environment"]["THATCH_DB_PATH"] = "/data/team.db"
        entry(doc)["timeout"] = 20000

    edit(config, add)
    run(project, env, "opencode")
    written = entry(json.loads(config.read_text()))
    assert written["environment"] == {"THATCH_HOST": "opencode", "THATCH_DB_PATH": "/data/team.db"}
    assert written["timeout"] == 20000
    rerun_changes_nothing(project, env, "opencode")


def test_a_value_thatch_must_set_in_its_entry_wins_and_is_named(
    project: Path, env: dict[str, str]
) -> None:
    """THATCH_HOST changed by hand in Cursor's entry is drift; setup puts thatch's value
    back, keeps the user's other key and names the replaced one in a detail (stderr)."""
    run(project, env, "cursor")
    mcp = project / ".cursor" / "mcp.json"
    edit(mcp, lambda d: d["mcpServers"]["thatch"]["env"].update(THATCH_HOST="x", MINE="1"))
    assert doctor_status("cursor", project, env, bin_path=BIN, version="1")[0] == "warn"
    result = run(project, env, "cursor")
    assert json.loads(mcp.read_text())["mcpServers"]["thatch"]["env"] == {
        "THATCH_PROJECT_DIR": "${workspaceFolder}",
        "THATCH_HOST": "cursor",
        "MINE": "1",
    }
    assert result.details() == [
        f'{mcp}: mcpServers.thatch.env.THATCH_HOST was "x"; replaced by thatch\'s "cursor"'
    ]
    rerun_changes_nothing(project, env, "cursor")


def test_a_hook_option_thatch_sets_wins_and_is_named(project: Path, env: dict[str, str]) -> None:
    """SessionEnd's timeout lowered by hand is put back (session-end needs it) and named;
    the dry run doctor makes calls it drift first."""
    run(project, env, "claude")
    settings = project / ".claude" / "settings.json"
    edit(settings, lambda d: d["hooks"]["SessionEnd"][0]["hooks"][0].update(timeout=1))
    assert doctor_status("claude", project, env, bin_path=BIN, version="1")[0] == "warn"
    result = run(project, env, "claude")
    hook = json.loads(settings.read_text())["hooks"]["SessionEnd"][0]["hooks"][0]
    assert hook["timeout"] == 10
    assert result.details() == [
        f"{settings}: the timeout of thatch's SessionEnd hook was 1; replaced by thatch's 10"
    ]
    rerun_changes_nothing(project, env, "claude")


def test_cli_names_the_replaced_key_on_stderr(
    tmp_path: Path, project: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`thatch setup --opencode` over a hand-edited THATCH_HOST: stdout lists the files,
    stderr says which key was replaced."""
    monkeypatch.chdir(project)
    monkeypatch.setenv("THATCH_PROJECT_DIR", str(project))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    script = tmp_path / "bin" / "thatch"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.setattr(sys, "argv", [str(script), "setup"])
    first = CliRunner().invoke(cli, ["setup", "--opencode"])
    assert first.exit_code == 0, first.output
    config = project / "opencode.json"
    edit(config, lambda d: d["mcp"]["thatch"]["environment"].update(THATCH_HOST="claude"))
    done = CliRunner().invoke(cli, ["setup", "--opencode"])
    assert done.exit_code == 0, done.output
    assert f"  written  {config}" in done.stdout.splitlines()
    assert done.stderr.splitlines() == [
        f"[thatch setup] {config}: mcp.thatch.environment.THATCH_HOST was "
        '"claude"; replaced by thatch\'s "opencode"'
    ]


@pytest.mark.parametrize(("value", "shown"), [("x", '"x"'), (["mcp"], '["mcp"]'), (None, "null")])
def test_an_entry_that_is_no_object_is_replaced_and_named(
    project: Path, env: dict[str, str], value: object, shown: str
) -> None:
    """A "thatch" server that is a string, a list or null holds nothing setup can keep:
    thatch's entry takes its place, and a detail (stderr) names the file and the key."""
    mcp = project / ".mcp.json"
    mcp.write_text(json.dumps({"mcpServers": {"thatch": value, "other": {"command": "o"}}}))
    result = run(project, env, "claude")
    servers = json.loads(mcp.read_text())["mcpServers"]
    assert servers == {
        "thatch": {"type": "stdio", "command": BIN, "args": ["mcp"]},
        "other": {"command": "o"},
    }
    assert result.details() == [f"{mcp}: mcpServers.thatch was {shown}; replaced by thatch's entry"]
    rerun_changes_nothing(project, env, "claude")


def test_an_opencode_entry_that_is_no_object_is_named_in_a_dry_run(
    project: Path, env: dict[str, str]
) -> None:
    """In opencode's nested servers map the detail names mcp.servers.thatch; a dry run says
    it would be replaced and writes nothing."""
    config = project / "opencode.json"
    config.write_text(json.dumps({"mcp": {"servers": {"thatch": "x"}}}))
    request = SetupRequest(hosts=["opencode"], project_dir=project, env=env, bin_path=BIN,
                           version="1", dry_run=True)  # fmt: skip
    result = run_setup(request)
    assert json.loads(config.read_text()) == {"mcp": {"servers": {"thatch": "x"}}}
    assert result.details() == [
        f'{config}: mcp.servers.thatch was "x"; would be replaced by thatch\'s entry'
    ]
