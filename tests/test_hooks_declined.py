"""A Claude Code project whose user declined thatch's MCP server: the hooks stop pointing
at tools that do not exist there (docs/claude-code.md §declining-the-server).

Real hook processes, the recorded Claude Code payloads, and the settings Claude Code
writes when the user answers its "new MCP server" dialog.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.hookrun import cursor_prompt, hook_env, run_hook
from tests.support.host_payloads import host_payload
from thatch.frontend.hooks.nudges import CLAUDE_DECLINED_NOTICE

SESSION = host_payload("claude-UserPromptSubmit")["session_id"]
# What would point an agent at thatch's tools, in any nudge, reminder or chat line.
TOOL_WORDS = ("memory_", "mcp__", "store_list", "ToolSearch", "extraction", "chat:")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "widgets"
    (path / ".claude").mkdir(parents=True)
    return path


def settings(project: Path, name: str, doc: dict[str, Any]) -> None:
    (project / ".claude" / name).write_text(json.dumps(doc, indent=2) + "\n")


def declined(project: Path) -> None:
    """As Claude Code records a "no" (next to the permission rule setup wrote)."""
    settings(
        project,
        "settings.local.json",
        {"permissions": {"allow": ["mcp__thatch"]}, "disabledMcpjsonServers": ["thatch"]},
    )


def payload(name: str, project: Path) -> dict[str, Any]:
    recorded = host_payload(name)
    recorded["cwd"] = str(project)
    return recorded


def hook(args: list[str], stdin: dict[str, Any], env: dict[str, str]) -> str:
    result = run_hook(args, stdin, env)
    assert result.returncode == 0, result.stderr
    assert result.stderr == b"", result.stderr
    return result.stdout.decode()


def queue_calls(project: Path, env: dict[str, str]) -> Path:
    """The recorded Bash and Read calls queued for the session (`--post-tool-use` shape):
    the extraction nudge is due."""
    for name in ("claude-PostToolUse-Bash", "claude-PostToolUse-Read"):
        assert hook(["buffer-batch"], payload(name, project), env) == ""
    jsonl = Path(env["THATCH_QUEUE_DIR"]) / f"{SESSION}.jsonl"
    assert jsonl.read_text().strip()
    return jsonl


def test_declined_prompt_hook_prints_nothing(tmp_path: Path, project: Path) -> None:
    """Queued calls, a long prompt, mail would be irrelevant: flush-tools prints nothing
    (`{}` with --json), bumps no nudge count, opens no database and keeps the queue."""
    env = hook_env(tmp_path)
    declined(project)
    jsonl = queue_calls(project, env)
    before = jsonl.read_bytes()
    prompt = payload("claude-UserPromptSubmit", project)
    assert hook(["flush-tools"], prompt, env) == ""
    assert hook(["flush-tools", "--json"], prompt, env) == "{}\n"
    assert jsonl.read_bytes() == before
    assert not jsonl.with_suffix(".count").exists()
    assert not Path(env["THATCH_DB_PATH"]).exists()  # no chat anchoring, no recall search


def test_declined_reminder_is_one_line_naming_no_tool(tmp_path: Path, project: Path) -> None:
    """Session start says once that thatch is off here and how to turn it on; no tool
    names, no ToolSearch hint, no hygiene, no chat name, no database opened."""
    env = hook_env(tmp_path)
    declined(project)
    for source in ("startup", "resume"):
        text = hook(["reminder"], payload(f"claude-SessionStart-{source}", project), env)
        assert text == CLAUDE_DECLINED_NOTICE + "\n"
    assert "\n" not in CLAUDE_DECLINED_NOTICE
    assert not any(word in CLAUDE_DECLINED_NOTICE for word in TOOL_WORDS)
    assert "/mcp" in CLAUDE_DECLINED_NOTICE and "disabledMcpjsonServers" in CLAUDE_DECLINED_NOTICE
    assert not Path(env["THATCH_DB_PATH"]).exists()


def test_declined_in_the_shared_settings_via_project_env(tmp_path: Path, project: Path) -> None:
    """A refusal committed to .claude/settings.json counts too, and the project may come
    from CLAUDE_PROJECT_DIR rather than the payload's cwd."""
    env = hook_env(tmp_path, CLAUDE_PROJECT_DIR=str(project))
    settings(project, "settings.json", {"disabledMcpjsonServers": ["other", "thatch"]})
    queue_calls(project, env)
    prompt = host_payload("claude-UserPromptSubmit")  # cwd elsewhere: the env decides
    assert hook(["flush-tools"], prompt, env) == ""
    assert hook(["reminder"], host_payload("claude-SessionStart-startup"), env) == (
        CLAUDE_DECLINED_NOTICE + "\n"
    )


@pytest.mark.parametrize(
    "local",
    [
        {"enabledMcpjsonServers": ["thatch"]},
        {"enableAllProjectMcpServers": True},
        {"disabledMcpjsonServers": ["some-other-server"]},
    ],
)
def test_approved_or_silent_settings_keep_the_nudges(
    tmp_path: Path, project: Path, local: dict[str, Any]
) -> None:
    """Approving the server (or refusing only another one) brings the nudges back, even
    when the shared settings still refuse it: the local answer decides."""
    env = hook_env(tmp_path)
    settings(project, "settings.json", {"disabledMcpjsonServers": ["thatch"]})
    settings(project, "settings.local.json", local)
    if "some-other-server" in json.dumps(local):
        (project / ".claude" / "settings.json").unlink()
    queue_calls(project, env)
    text = hook(["flush-tools"], payload("claude-UserPromptSubmit", project), env)
    assert text.startswith("[thatch] 2 tool interactions are queued for fact extraction.")
    assert "Call get_extraction_payload" in text
    reminder = hook(["reminder"], payload("claude-SessionStart-startup", project), env)
    assert reminder.startswith("[thatch] Before you reply, load what earlier sessions learned")


@pytest.mark.parametrize("shape", ["nested too deep", "a fifo"])
def test_settings_no_parser_or_open_can_finish_say_nothing(
    tmp_path: Path, project: Path, shape: str
) -> None:
    """A settings file nested past the JSON parser's depth (a cloned project can ship it)
    used to end the reminder and the nudges with a RecursionError; a FIFO in its place
    would block the hook for good. Either says nothing: the nudges stay."""
    env = hook_env(tmp_path)
    path = project / ".claude" / "settings.json"
    if shape == "a fifo":
        os.mkfifo(path)
    else:
        path.write_text("[" * 100_000 + "]" * 100_000)
    queue_calls(project, env)
    text = hook(["flush-tools"], payload("claude-UserPromptSubmit", project), env)
    assert text.startswith("[thatch] 2 tool interactions are queued for fact extraction.")
    reminder = hook(["reminder"], payload("claude-SessionStart-startup", project), env)
    assert reminder.startswith("[thatch] Before you reply, load what earlier sessions learned")


def test_other_hosts_ignore_claudes_settings(tmp_path: Path, project: Path) -> None:
    """Claude's answer is about Claude's .mcp.json entry: Cursor in the same project is
    still nudged (its own mcp.json is unaffected)."""
    env = hook_env(tmp_path, CURSOR_PROJECT_DIR=str(project))
    declined(project)
    call = {
        "conversation_id": "conv-1",
        "tool_name": "Shell",
        "tool_input": {"command": "make test"},
        "tool_output": "ok",
    }
    assert hook(["buffer-tool"], call, env) == ""
    prompt = {"conversation_id": "conv-1", "prompt": "keep going with the parser refactor"}
    said = cursor_prompt(env, prompt, "--json", host="")
    assert said.startswith("[thatch] 1 tool interaction is queued")


# Runs one hook in-process and lists every module it loaded (stderr).
IMPORT_PROBE = """
import runpy, sys
sys.argv = ["thatch", *sys.argv[1:]]
try:
    runpy.run_module("thatch.cli", run_name="__main__")
except SystemExit:
    pass
print(" ".join(sorted(sys.modules)), file=sys.stderr)
"""
HEAVY = {"grpc", "numpy", "onnxruntime", "tokenizers", "mcp", "sqlite3", "click", "subprocess"}


@pytest.mark.parametrize("command", ["flush-tools", "reminder"])
def test_declined_hooks_stay_light(tmp_path: Path, project: Path, command: str) -> None:
    """Declined, the prompt hooks load no database driver, embedder client, git runner or
    other setup module: the answer costs two small file reads."""
    env = hook_env(tmp_path)
    declined(project)
    queue_calls(project, env)
    event = "claude-UserPromptSubmit" if command == "flush-tools" else "claude-SessionStart-startup"
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE, command],
        input=json.dumps(payload(event, project)).encode(),
        capture_output=True,
        env=env,
        check=True,
    )
    lines = result.stderr.decode().splitlines()
    modules = set(lines[-1].split())
    assert result.stdout.decode() == (
        "" if command == "flush-tools" else CLAUDE_DECLINED_NOTICE + "\n"
    )
    assert {m.split(".")[0] for m in modules} & HEAVY == set()
    setup_modules = {m for m in modules if m.startswith("thatch.frontend.setup")}
    assert setup_modules == {"thatch.frontend.setup", "thatch.frontend.setup.declined"}


def test_docs_quote_the_notice() -> None:
    """docs/hooks.md §reminder shows the line exactly as the hook prints it."""
    docs = Path(__file__).resolve().parent.parent / "docs" / "hooks.md"
    assert f"```\n{CLAUDE_DECLINED_NOTICE}\n```" in docs.read_text(encoding="utf-8")
