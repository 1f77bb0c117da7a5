"""The session-start reminder: exact text per host, hygiene paragraph only when needed."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.support.embedder_proc import embedder_process
from tests.support.hookrun import hook_env, run_hook
from tests.support.host_payloads import host_payload
from thatch.frontend.store.memory_store import Store

CURSOR_TEXT = (
    "[thatch] Before you reply, load what earlier sessions learned:\n"
    "(1) the user's preferences and working style,\n"
    '(2) architecture and conventions of the project store "{store}",\n'
    "(3) if you are not on the main branch, notes scoped to this branch.\n"
    "Call store_list and memory_list to see what exists, then memory_recall for what you need."
)
# Claude Code may defer MCP tools behind ToolSearch: its reminder says how to load exactly
# the ones it names.
CLAUDE_TEXT = CURSOR_TEXT + (
    "\nTools not listed? Load them with ToolSearch (query: select:mcp__thatch__store_list,"
    "mcp__thatch__memory_list,mcp__thatch__memory_recall)."
)
# With the hygiene paragraph, its tools too.
CLAUDE_HYGIENE_TEXT = CLAUDE_TEXT[: -len(").")] + (
    ",mcp__thatch__find_duplicates,mcp__thatch__memory_show,mcp__thatch__memory_forget)."
)


def reminder(env: dict[str, str], payload: object, *args: str) -> str:
    result = run_hook(["reminder", *args], payload, env)
    assert result.returncode == 0, result.stderr
    assert result.stderr == b""
    return result.stdout.decode()


def without_chat_line(text: str) -> str:
    """The reminder with its chat line (docs/chat.md §2) checked and taken off."""
    body, line = text.rstrip("\n").rsplit("\n\n", 1)
    assert re.fullmatch(
        r'\[thatch\] chat: you are ([a-z]+-\d{5}) \(0 unread\)\. Pass "as": "\1:[0-9a-f]{16}" to '
        r"the chat tool; the part after the colon is your key: never write it anywhere else\.",
        line,
    ), line
    return body + text[len(text.rstrip("\n")) :]


def git_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "i"]):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@e", *args],
            cwd=path,
            check=True,
            capture_output=True,
        )
    return path


@pytest.mark.parametrize("source", ["startup", "resume"])
def test_claude_session_start_uses_payload_cwd(tmp_path: Path, source: str) -> None:
    """Claude Code's recorded SessionStart: its cwd picks the project; a healthy store adds
    no hygiene paragraph."""
    project = tmp_path / "shop-api"
    project.mkdir()
    env = hook_env(tmp_path)
    payload = host_payload(f"claude-SessionStart-{source}")
    payload["cwd"] = str(project)  # the recorded /home/dev/... path does not exist here
    out = without_chat_line(reminder(env, payload))
    assert out == CLAUDE_TEXT.format(store="shop-api") + "\n"


def test_cursor_json_uses_workspace_root(tmp_path: Path) -> None:
    """Cursor's sessionStart: workspace_roots[0] is the project; output is one JSON line."""
    project = tmp_path / "web-ui"
    project.mkdir()
    env = hook_env(tmp_path)
    payload = {"conversation_id": "c1", "workspace_roots": [str(project), "/elsewhere"]}
    out = reminder(env, payload, "--json", "--host", "cursor")
    assert out.count("\n") == 1
    context = json.loads(out)["additional_context"]
    assert without_chat_line(context) == CURSOR_TEXT.format(store="web-ui")


def test_opencode_names_are_prefixed(tmp_path: Path) -> None:
    """opencode's reminder names thatch_ tools; env project dir beats the payload's cwd."""
    project = tmp_path / "proj"
    project.mkdir()
    env = hook_env(tmp_path, THATCH_PROJECT_DIR=str(project))
    out = without_chat_line(
        reminder(env, {"session_id": "ses_1", "cwd": "/"}, "--host", "opencode")
    )
    assert out.endswith(
        '"proj",\n(3) if you are not on the main branch, notes scoped to this branch.\n'
        "Call thatch_store_list and thatch_memory_list to see what exists, then "
        "thatch_memory_recall for what you need.\n"
    )


def test_unhealthy_store_adds_hygiene_paragraph(tmp_path: Path) -> None:
    """Pending and deleted-branch memories: a blank line, the report, then the advice."""
    project = git_repo(tmp_path / "acme")
    env = hook_env(tmp_path, THATCH_PROJECT_DIR=str(project), THATCH_MODEL="test/model-a")
    with Store.open(env["THATCH_DB_PATH"]) as store:
        store.remember("acme", "pending one", "# pending one\n\nx", None, None)
        vector = np.ones(8, dtype=np.float32)
        store.remember("acme", "orphan", "# orphan\n\nx", vector, "test/model-a", branch="old-wip")
    out = reminder(env, {})
    base, hygiene_block = out.rstrip("\n").split("\n\n")
    report, advice = hygiene_block.split("\n")
    assert base == CLAUDE_HYGIENE_TEXT.format(store="acme")
    assert report == (
        '[thatch hygiene] Store "acme": 1 memory scoped to deleted branches (old-wip); '
        "1 memory not embedded yet."
    )
    assert "after you have handled the user's request (never before)" in advice.lower()
    for word in (
        "find_duplicates",
        "thatch-dedup-classifier",
        "memory_show",
        "archived",
        "thatch reembed",
    ):
        assert word in advice


def test_active_model_comes_from_running_embedder(tmp_path: Path, short_tmp: Path) -> None:
    """With an embedder answering Info, its model is the active one (here "mock")."""
    project = tmp_path / "proj"
    project.mkdir()
    env_srv = {**os.environ, "THATCH_EMBEDDER_EXIT_SECONDS": "0"}
    with embedder_process("mock", socket_dir=short_tmp, env=env_srv) as proc:
        env = hook_env(
            tmp_path,
            THATCH_PROJECT_DIR=str(project),
            THATCH_EMBEDDER_ADDR=proc.address,
            THATCH_MODEL="configured/other",
        )
        with Store.open(env["THATCH_DB_PATH"]) as store:
            vector = np.ones(8, dtype=np.float32)
            store.remember("proj", "a", "# a\n\nx", vector, "configured/other")
            store.remember("proj", "b", "# b\n\nx", -vector, "mock")
        out = reminder(env, {}, "--json")
    text = json.loads(out)["additional_context"]
    assert '[thatch hygiene] Store "proj": 1 memory embedded with another model than mock.' in text


def test_pending_memories_are_filled_when_an_embedder_serves(
    tmp_path: Path, short_tmp: Path
) -> None:
    """A memory saved while the embedder was down is embedded by the session-start hook
    when one is serving, so the reminder does not call it "not embedded yet" (issue 12 §5)."""
    project = tmp_path / "proj"
    project.mkdir()
    env_srv = {**os.environ, "THATCH_EMBEDDER_EXIT_SECONDS": "0"}
    with embedder_process("mock", socket_dir=short_tmp, env=env_srv) as proc:
        env = hook_env(
            tmp_path,
            THATCH_PROJECT_DIR=str(project),
            THATCH_EMBEDDER_ADDR=proc.address,
            THATCH_MODEL="mock",
        )
        with Store.open(env["THATCH_DB_PATH"]) as store:
            store.remember("proj", "saved offline", "# saved offline\n\nx", None, None)
        out = reminder(env, {})
        assert "[thatch hygiene]" not in out and "not embedded yet" not in out
        with Store.open(env["THATCH_DB_PATH"]) as store:
            assert store.pending_count() == 0


@pytest.mark.parametrize(
    ("host", "prefix"), [("claude", ""), ("cursor", ""), ("opencode", "thatch_")]
)
def test_every_text_names_tools_by_one_rule_per_host(host: str, prefix: str) -> None:
    """Nudges, the sub-agent prompt and the reminder name every tool the same way for a
    host: bare for Claude Code and Cursor, thatch_ for opencode (issue 12 §4)."""
    import re

    from thatch.frontend.hooks.nudges import extraction_nudge, recall_nudge
    from thatch.frontend.hooks.reminder import reminder_text
    from thatch.frontend.tools.registry import SPECS_BY_NAME

    texts = [
        *(extraction_nudge(host, "sid-1", 2, missed) for missed in (0, 2, 3)),
        recall_nudge(host, ["L"]) or "",
        reminder_text("acme", host, 'Store "acme": 1 memory not embedded yet.'),
    ]
    # Claude Code's load hints are the one place full names appear: ToolSearch selects by them.
    select = re.compile(r"query: select:([\w,]+)")
    texts = [select.sub("query: select:", text) for text in texts]
    tool = re.compile(r"\b(?:mcp__thatch__|thatch_)?(?:" + "|".join(SPECS_BY_NAME) + r")\b")
    named = {match.group(0) for text in texts for match in tool.finditer(text)}
    assert named >= {f"{prefix}get_extraction_payload", f"{prefix}memory_recall"}
    assert all(name.startswith(prefix) and "mcp__" not in name for name in named), named
    if not prefix:
        assert not any(name.startswith("thatch_") for name in named), named


def loaded_by_hints(text: str) -> set[str]:
    import re

    selected = re.findall(r"ToolSearch,? \(?query: select:([\w,]+)", text)
    return {name.removeprefix("mcp__thatch__") for group in selected for name in group.split(",")}


def named_tools(text: str) -> set[str]:
    import re

    from thatch.frontend.tools.registry import SPECS_BY_NAME

    text = re.sub(r"query: select:[\w,]+", "", text)
    return set(re.findall(r"\b(?:" + "|".join(SPECS_BY_NAME) + r")\b", text))


def test_claude_load_hints_select_exactly_the_tools_each_text_names() -> None:
    """ToolSearch's keyword query "thatch" returned its 5 best matches, none of them the
    tools the text named (issue 22 §1): each hint selects exactly the named ones."""
    import re

    from thatch.frontend.hooks.chat_notify import pointer
    from thatch.frontend.hooks.nudges import extraction_nudge, recall_nudge
    from thatch.frontend.hooks.reminder import reminder_text

    extractor = {"get_extraction_payload", "memory_recall", "memory_remember", "extraction_done"}
    for missed in (0, 2, 3):
        nudge = extraction_nudge("claude", "sid-1", 2, missed)
        found = re.search(r'(?i)prompt: "(.*?)" then call', nudge)
        assert found is not None, nudge
        prompt = found.group(1)
        assert loaded_by_hints(prompt) == extractor  # what the sub-agent calls
        outside = nudge.replace(prompt, "")
        assert loaded_by_hints(outside) == named_tools(outside) == {"extraction_done"}
    for text in (
        recall_nudge("claude", ["L"]) or "",
        recall_nudge("claude", ["L", "M", "N"]) or "",
        reminder_text("acme", "claude"),
        reminder_text("acme", "claude", 'Store "acme": 1 memory not embedded yet.'),
        pointer(1, ["bob"], "alice", "0123456789abcdef", "claude"),
    ):
        assert named_tools(text), text
        assert loaded_by_hints(text) == named_tools(text), text
    for host in ("cursor", "opencode"):
        assert "ToolSearch" not in pointer(1, ["bob"], "alice", "0123456789abcdef", host)
        assert "ToolSearch" not in (recall_nudge(host, ["L"]) or "")


_HOLD_WRITE_LOCK = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
"""


def test_a_long_write_elsewhere_costs_the_hooks_own_writes_not_the_reminder(
    tmp_path: Path,
) -> None:
    """The hook's own writes (chat heartbeat, branch sync) are done again by the next hook:
    they wait HOOK_BUSY_TIMEOUT_MS for another writer, not the 5 s every other writer
    waits (two of them made a reminder take 10.5 s). The reminder itself still comes."""
    import sys

    from thatch.frontend.hooks.chat_anchor import open_chat
    from thatch.frontend.store import db
    from thatch.frontend.store.branch_lifecycle import opened_records

    repo = git_repo(tmp_path / "acme")
    env = hook_env(tmp_path, THATCH_PROJECT_DIR=str(repo))
    payload = {"session_id": "busy", "cwd": str(repo)}
    assert "[thatch]" in reminder(env, payload)  # creates and migrates the database
    chat = open_chat(env)
    try:
        (timeout,) = chat.conn.execute("PRAGMA busy_timeout").fetchone()
    finally:
        chat.conn.close()
    with opened_records(Path(env["THATCH_DB_PATH"])) as records:
        assert records is not None
        assert records.conn.execute("PRAGMA busy_timeout").fetchone() == (timeout,)
    assert timeout == db.HOOK_BUSY_TIMEOUT_MS < db.BUSY_TIMEOUT_MS

    with subprocess.Popen(
        [sys.executable, "-c", _HOLD_WRITE_LOCK, env["THATCH_DB_PATH"]],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        try:
            result = run_hook(["reminder"], {**payload, "session_id": "busy-2"}, env)
        finally:
            holder.communicate("")
    assert result.returncode == 0
    assert result.stdout.decode().startswith("[thatch] ")
    assert b"Traceback" not in result.stderr
