"""`thatch setup` on the command line: usage errors, help, output, exit codes, <bin>."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from thatch.cli.main import cli
from thatch.common.environment import project_dir_from_env
from thatch.frontend.setup.block import BEGIN
from thatch.frontend.setup.hosts import resolve_bin


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project dir as cwd, host config dirs in tmp, and an installed-looking thatch script."""
    proj = tmp_path / "proj"
    proj.mkdir()
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    script = bin_dir / "thatch"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.chdir(proj)
    monkeypatch.setattr(sys, "argv", [str(script), "setup"])
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude-config"))
    monkeypatch.setenv("CURSOR_CONFIG_DIR", str(tmp_path / "cursor-config"))
    return proj


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "Error: choose at least one host: --claude, --cursor, --opencode."),
        (["--local"], "Error: choose at least one host: --claude, --cursor, --opencode."),
        (
            ["--claude", "--local", "--global"],
            "Error: --local and --global are mutually exclusive.",
        ),
    ],
)
def test_usage_errors(project: Path, args: list[str], message: str) -> None:
    """Missing host or both scopes → exit 2 with the exact message; nothing written."""
    result = CliRunner().invoke(cli, ["setup", *args])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1] == message
    assert list(project.iterdir()) == []


def test_help() -> None:
    """--help lists every option."""
    result = CliRunner().invoke(cli, ["setup", "--help"])
    assert result.exit_code == 0
    for option in [
        "--claude",
        "--cursor",
        "--opencode",
        "--local",
        "--global",
        "--post-tool-use",
        "--dry-run",
    ]:
        assert option in result.stdout


def test_setup_writes_with_script_path(project: Path) -> None:
    """Not on PATH → hook commands use the running script's absolute path."""
    result = CliRunner().invoke(cli, ["setup", "--claude"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == "Claude Code (local):"
    assert result.stdout.splitlines()[-1] == "Restart Claude Code to load the changes."
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    command = settings["hooks"]["SessionStart"][0]["hooks"][0]["command"]
    assert command == f"{sys.argv[0]} reminder"


def test_broken_block_exit_1_and_reason(project: Path) -> None:
    """A broken block → exit 1, a `broken` line on stdout and the reason on stderr."""
    (project / "AGENTS.md").write_text(f"{BEGIN}\n")
    result = CliRunner().invoke(cli, ["setup", "--cursor", "--opencode"])
    assert result.exit_code == 1
    assert f"  broken  {project / 'AGENTS.md'}" in result.stdout.splitlines()
    assert "remove the partial block" in result.stderr
    assert (project / ".cursor" / "hooks.json").is_file()


def test_a_global_claude_setup_whose_mcp_command_was_not_run_exits_1(
    project: Path, tmp_path: Path
) -> None:
    """No `claude` on PATH: setup writes everything else, prints `claude mcp add …` for
    the user to run and exits 1, as a script running setup must notice (Claude Code has no
    thatch tools until then); once Claude Code's user file holds the server, exit 0."""
    result = CliRunner().invoke(cli, ["setup", "--claude", "--global"])
    assert result.exit_code == 1, result.output
    add = shlex.join(
        ["claude", "mcp", "add", "--scope", "user", "thatch", "--", sys.argv[0], "mcp"]
    )
    assert any(
        line.startswith(f"  printed  {add}  (not run: ") for line in result.stdout.splitlines()
    )
    assert f"run this yourself: {add}" in result.stderr
    config = tmp_path / "claude-config"
    assert (
        "thatch"
        in json.loads((config / "settings.json").read_text())["hooks"]["Stop"][0]["hooks"][0][
            "command"
        ]
    )
    assert (config / "CLAUDE.md").read_text().startswith(BEGIN)
    entry = {"type": "stdio", "command": sys.argv[0], "args": ["mcp"]}
    (config / ".claude.json").write_text(json.dumps({"mcpServers": {"thatch": entry}}))
    again = CliRunner().invoke(cli, ["setup", "--claude", "--global"])
    assert again.exit_code == 0, again.output
    assert f"  unchanged  {add}" in again.stdout.splitlines()


def test_dry_run_exits_as_the_real_run_would(project: Path, tmp_path: Path) -> None:
    """`--dry-run` exits 1 where the real run would (a `claude mcp add` it would print,
    with no `claude` on PATH) and 0 where it would not, writing nothing either way; the
    help says so."""
    dry = CliRunner().invoke(cli, ["setup", "--claude", "--global", "--dry-run"])
    assert dry.exit_code == 1, dry.output
    assert any(line.startswith("  printed  claude mcp add ") for line in dry.stdout.splitlines())
    config = tmp_path / "claude-config"
    assert not config.exists()
    config.mkdir()
    entry = {"type": "stdio", "command": sys.argv[0], "args": ["mcp"]}
    (config / ".claude.json").write_text(json.dumps({"mcpServers": {"thatch": entry}}))
    again = CliRunner().invoke(cli, ["setup", "--claude", "--global", "--dry-run"])
    assert again.exit_code == 0, again.output
    assert sorted(p.name for p in config.iterdir()) == [".claude.json"]
    real = CliRunner().invoke(cli, ["setup", "--claude", "--global"])
    assert real.exit_code == 0, real.output
    shown = " ".join(CliRunner().invoke(cli, ["setup", "--help"]).output.split())
    assert "--dry-run Show what would change; change nothing. Exits 1 in the same cases" in shown


def test_dry_run_cli(project: Path, tmp_path: Path) -> None:
    """--dry-run prints would-write lines and creates nothing."""
    result = CliRunner().invoke(cli, ["setup", "--opencode", "--global", "--dry-run"])
    assert result.exit_code == 0
    assert "  would-write  " in result.stdout
    assert not (tmp_path / "home" / ".config" / "opencode").exists()
    assert list(project.iterdir()) == []


def test_resolve_bin(tmp_path: Path) -> None:
    """`thatch` when PATH finds the running script (through a symlink too), else its path."""
    real = tmp_path / "venv" / "thatch"
    real.parent.mkdir()
    real.write_text("#!/bin/sh\n")
    real.chmod(0o755)
    linked = tmp_path / "path"
    linked.mkdir()
    (linked / "thatch").symlink_to(real)
    assert resolve_bin(str(real), {"PATH": str(linked)}) == "thatch"
    other = tmp_path / "other"
    other.mkdir()
    (other / "thatch").write_text("#!/bin/sh\n")
    (other / "thatch").chmod(0o755)
    assert resolve_bin(str(real), {"PATH": str(other)}) == str(real)
    assert resolve_bin(str(real), {"PATH": ""}) == str(real)


def test_project_dir_order() -> None:
    """THATCH_PROJECT_DIR → CURSOR_PROJECT_DIR → CLAUDE_PROJECT_DIR → None (setup: the
    cwd); `${` ignored."""
    assert project_dir_from_env({}) is None
    env = {"CLAUDE_PROJECT_DIR": "/c", "CURSOR_PROJECT_DIR": "/u"}
    assert project_dir_from_env(env) == Path("/u")
    env["THATCH_PROJECT_DIR"] = "${workspaceFolder}"
    assert project_dir_from_env(env) == Path("/u")
    env["THATCH_PROJECT_DIR"] = "~/p"
    env["HOME"] = "/home/x"
    assert project_dir_from_env(env) == Path("/home/x/p")


def test_setup_below_a_checkouts_top_says_where_hosts_look(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run in repo/src, setup wrote repo/src's files in silence: a host started at the
    repository's top never saw them. It still writes where it was run, and says so; at
    the top, and outside any checkout, it says nothing."""
    for name in ("THATCH_PROJECT_DIR", "CLAUDE_PROJECT_DIR", "CURSOR_PROJECT_DIR"):
        monkeypatch.delenv(name, raising=False)
    (project / ".git").mkdir()
    sub = project / "src"
    sub.mkdir()
    monkeypatch.chdir(sub)
    result = CliRunner().invoke(cli, ["setup", "--claude"])
    assert result.exit_code == 0, result.stderr
    assert (sub / ".mcp.json").is_file()
    assert result.stderr.splitlines()[-1] == (
        f'[thatch setup] note: "{sub}" is inside the git checkout "{project}": a host started '
        f'there reads the files there, not these (run thatch setup in "{project}", or start '
        "the host here)"
    )
    monkeypatch.chdir(project)
    at_top = CliRunner().invoke(cli, ["setup", "--claude"])
    assert at_top.exit_code == 0 and "note:" not in at_top.stderr
    # named relatively, or through a symlink, the directory is where it really is
    from thatch.cli.setup_cmd import subdirectory_note

    (project.parent / "link").symlink_to(sub)
    assert subdirectory_note(project.parent / "link") == subdirectory_note(sub) is not None
    monkeypatch.chdir(sub)
    assert subdirectory_note(Path(".")) == subdirectory_note(sub)


def test_help_names_every_git_hook_setup_writes() -> None:
    """--git-hooks' help left out post-rewrite, which it writes."""
    from thatch.frontend.setup.git_hooks import HOOKS

    text = " ".join(CliRunner().invoke(cli, ["setup", "--help"]).stdout.split())
    text = text.replace("- ", "-")  # the help wraps at hyphens
    assert [hook for hook in HOOKS if hook not in text] == []


def test_paths_are_shown_as_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A project directory an agent named (a newline, an ANSI escape, a bidi override) is
    one escaped path in setup's lines: every stdout line is setup's own."""
    named = tmp_path / "p\n  written  forged\x1b[2K\u202e"
    named.mkdir()
    monkeypatch.chdir(named)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude-config"))
    (named / "AGENTS.md").write_text(f"{BEGIN}\n")
    # Replaced, and said: its value's line separators and bidi override shown escaped.
    (named / ".mcp.json").write_text(
        json.dumps({"mcpServers": {"thatch": "x\u202e\u2028\u0085[thatch setup] ok"}})
    )
    for args in (["--dry-run"], []):
        result = CliRunner().invoke(cli, ["setup", "--opencode", "--claude", *args])
        lines = result.stdout.splitlines()
        said = [line for line in lines if not line.startswith("Restart ")]
        heads = ["opencode (local):", "Claude Code (local):"]
        assert all(re.match(r"  [a-z-]+  \S", line) or line in heads for line in said), lines
        assert not any("\x1b" in line or "\u202e" in line for line in lines), lines
        assert "\\n  written  forged\\u001b[2K\\u202e" in result.stdout
        errors = result.stderr.splitlines()  # str.splitlines: at U+2028 and U+0085 too
        assert all(line.startswith("[thatch setup] ") for line in errors), errors
        assert "\x1b" not in result.stderr and "\\u202e/AGENTS.md: damaged" in result.stderr
        assert "\\u202e/.mcp.json: mcpServers.thatch was" in result.stderr
        assert 'was "x\\u202e\\u2028\\u0085[thatch setup] ok"' in result.stderr
