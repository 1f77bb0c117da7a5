"""Tool hooks as hosts run them: golden payloads in, exact queue files out, silent, exit 0."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.hookrun import hook_env, read_jsonl, run_hook, thatch_command

CLAUDE_SESSION = "3f2b8c1e-6a4d-4e0b-9d1c-2f7a5b8e9c01"
CURSOR_CONVERSATION = "c0ffee00-1234-4abc-8def-00000000cafe"

CLAUDE_BATCH = {
    "session_id": CLAUDE_SESSION,
    "transcript_path": "/home/u/.claude/projects/app/3f2b.jsonl",
    "cwd": "/home/u/app",
    "hook_event_name": "PostToolBatch",
    "tool_calls": [
        {
            "tool_name": "Bash",
            "tool_input": {"command": "pytest -q tests/", "description": "Run tests"},
            "tool_use_id": "toolu_01A",
            "tool_response": "12 passed in 0.4s",
        },
        {
            "tool_name": "Read",
            "tool_input": {"file_path": "/home/u/app/pyproject.toml"},
            "tool_use_id": "toolu_01B",
            "tool_response": [{"type": "text", "text": '[project]\nname = "app"'}],
        },
        {
            "tool_name": "Edit",
            "tool_input": {
                "file_path": "/home/u/app/src/main.py",
                "old_string": "a",
                "new_string": "b",
            },
            "tool_use_id": "toolu_01C",
            "tool_response": {"filePath": "/home/u/app/src/main.py", "success": True},
        },
        {
            "tool_name": "mcp__thatch__memory_recall",
            "tool_input": {"query": "test command"},
            "tool_use_id": "toolu_01D",
            "tool_response": "[]",
        },
        {
            "tool_name": "Task",
            "tool_input": {"prompt": "explore"},
            "tool_use_id": "toolu_01E",
            "tool_response": "done",
        },
    ],
}

CLAUDE_BATCH_LINES = [
    '{"tool":"Bash","sessionID":"3f2b8c1e-6a4d-4e0b-9d1c-2f7a5b8e9c01","args":{"command":'
    '"pytest -q tests/","description":"Run tests"},"title":"pytest -q tests/","output":'
    '"12 passed in 0.4s","tool_use_id":"toolu_01A"}',
    '{"tool":"Read","sessionID":"3f2b8c1e-6a4d-4e0b-9d1c-2f7a5b8e9c01","args":{"file_path":'
    '"/home/u/app/pyproject.toml"},"title":"pyproject.toml","output":'
    '"[{\\"type\\":\\"text\\",\\"text\\":\\"[project]\\\\nname = \\\\\\"app\\\\\\"\\"}]",'
    '"tool_use_id":"toolu_01B"}',
    '{"tool":"Edit","sessionID":"3f2b8c1e-6a4d-4e0b-9d1c-2f7a5b8e9c01","args":{"file_path":'
    '"/home/u/app/src/main.py","old_string":"a","new_string":"b"},"title":"main.py","output":'
    '"{\\"filePath\\":\\"/home/u/app/src/main.py\\",\\"success\\":true}",'
    '"tool_use_id":"toolu_01C"}',
]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return hook_env(tmp_path)


def queue_file(env: dict[str, str], stem: str) -> Path:
    return Path(env["THATCH_QUEUE_DIR"]) / f"{stem}.jsonl"


def assert_silent_ok(result: subprocess.CompletedProcess[bytes]) -> None:
    assert result.returncode == 0, result.stderr
    assert result.stdout == b""
    assert result.stderr == b""


def test_claude_post_tool_batch_golden(env: dict[str, str]) -> None:
    """PostToolBatch with string, array and object responses writes exactly these lines."""
    result = run_hook(["buffer-batch"], CLAUDE_BATCH, env)
    assert_silent_ok(result)
    assert queue_file(env, CLAUDE_SESSION).read_text() == "\n".join(CLAUDE_BATCH_LINES) + "\n"
    # The same batch again (a host retry) adds nothing: tool_use_ids are already queued.
    assert_silent_ok(run_hook(["buffer-batch"], CLAUDE_BATCH, env))
    assert len(read_jsonl(queue_file(env, CLAUDE_SESSION))) == 3


def test_claude_single_post_tool_use(env: dict[str, str]) -> None:
    """A PostToolUse payload (one call at top level) is queued like a batch of one."""
    payload = {
        "session_id": CLAUDE_SESSION,
        "hook_event_name": "PostToolUse",
        "tool_name": "Grep",
        "tool_input": {"pattern": "def main", "path": "src"},
        "tool_use_id": "toolu_02",
        "tool_response": {"mode": "files_with_matches", "filenames": ["src/main.py"]},
    }
    assert_silent_ok(run_hook(["buffer-batch"], payload, env))
    assert queue_file(env, CLAUDE_SESSION).read_text() == (
        '{"tool":"Grep","sessionID":"3f2b8c1e-6a4d-4e0b-9d1c-2f7a5b8e9c01","args":'
        '{"pattern":"def main","path":"src"},"title":"def main","output":'
        '"{\\"mode\\":\\"files_with_matches\\",\\"filenames\\":[\\"src/main.py\\"]}",'
        '"tool_use_id":"toolu_02"}\n'
    )


@pytest.mark.parametrize(
    "field", ["tool_output", "tool_result", "tool_response", "result_json", "result", "output"]
)
def test_cursor_post_tool_use_response_fields(env: dict[str, str], field: str) -> None:
    """Cursor's postToolUse: each response field name becomes the record's output."""
    payload = {
        "conversation_id": CURSOR_CONVERSATION,
        "generation_id": "gen-1",
        "hook_event_name": "postToolUse",
        "workspace_roots": ["/home/u/app"],
        "tool_name": "Shell",
        "tool_input": {"command": "npm run build"},
        "tool_use_id": "call_9",
        field: "built in 2.1s",
    }
    assert_silent_ok(run_hook(["buffer-tool"], payload, env))
    assert queue_file(env, CURSOR_CONVERSATION).read_text() == (
        '{"tool":"Shell","sessionID":"c0ffee00-1234-4abc-8def-00000000cafe","args":'
        '{"command":"npm run build"},"title":"npm run build",'
        '"output":"built in 2.1s","tool_use_id":"call_9"}\n'
    )


def test_cursor_response_field_precedence_and_missing_tool(env: dict[str, str]) -> None:
    """The first present response field wins; a call without tool_name is ignored."""
    payload = {
        "conversation_id": CURSOR_CONVERSATION,
        "tool_name": "Read",
        "tool_input": {"file_path": "/a/README.md"},
        "output": "last",
        "tool_result": {"text": "first"},
    }
    assert_silent_ok(run_hook(["buffer-tool"], payload, env))
    assert_silent_ok(run_hook(["buffer-tool"], {"conversation_id": CURSOR_CONVERSATION}, env))
    records = read_jsonl(queue_file(env, CURSOR_CONVERSATION))
    assert [(r["title"], r["output"]) for r in records] == [("README.md", '{"text":"first"}')]


def test_opencode_plugin_payload(env: dict[str, str]) -> None:
    """The opencode plugin's buffer-tool call keeps the ses_ id as its file name."""
    payload = {
        "session_id": "ses_7fA2bC9dE1",
        "tool_name": "read",
        "tool_input": {"filePath": "/w/src/index.ts"},
        "tool_use_id": "call_x1",
        "tool_response": "export {}",
    }
    assert_silent_ok(run_hook(["buffer-tool", "--host", "opencode"], payload, env))
    (record,) = read_jsonl(queue_file(env, "ses_7fA2bC9dE1"))
    assert record["sessionID"] == "ses_7fA2bC9dE1" and record["title"] == "index.ts"


def test_memory_write_in_batch_drains(env: dict[str, str]) -> None:
    """A batch holding mcp__thatch__memory_remember deletes the queue and its count."""
    assert_silent_ok(run_hook(["buffer-batch"], CLAUDE_BATCH, env))
    count = Path(env["THATCH_QUEUE_DIR"]) / f"{CLAUDE_SESSION}.count"
    count.write_text("2\n")
    write = {
        "session_id": CLAUDE_SESSION,
        "tool_calls": [
            {"tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_use_id": "t9"},
            {
                "tool_name": "mcp__thatch__memory_remember",
                "tool_input": {"label": "Test command", "content": "pytest -q"},
                "tool_use_id": "t10",
                "tool_response": "[saved] acme/app :: Test command",
            },
        ],
    }
    assert_silent_ok(run_hook(["buffer-batch"], write, env))
    assert not queue_file(env, CLAUDE_SESSION).exists()
    assert not count.exists()


def _spawn_buffer_tool(env: dict[str, str], session: str, i: int) -> subprocess.Popen[bytes]:
    payload = {**_payload(session, i), "tool_output": "x" * 1500}
    stem = session.replace("/", "%")
    stdin = Path(env["THATCH_QUEUE_DIR"]).parent / f"stdin-{stem}-{i}"
    stdin.write_text(json.dumps(payload))
    with stdin.open("rb") as handle:
        return subprocess.Popen(
            thatch_command("buffer-tool"),
            stdin=handle,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )


def test_thirty_parallel_hooks_keep_newest_twenty(env: dict[str, str]) -> None:
    """30 concurrent buffer-tool processes: valid JSONL, 20 distinct records, no tearing."""
    procs = [_spawn_buffer_tool(env, "par", i) for i in range(30)]
    outputs = [proc.communicate(timeout=120) for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * 30
    assert all(out == b"" and err == b"" for out, err in outputs)
    path = queue_file(env, "par")
    records = read_jsonl(path)  # every line parses: no torn writes
    ids = [r["tool_use_id"] for r in records]
    assert len(ids) == 20 and len(set(ids)) == 20
    assert set(ids) <= {f"par-call-{i}" for i in range(30)}
    assert all(r["output"] == "x" * 1500 for r in records)
    # Each process appended exactly one record and kept the newest 20, so a new arrival
    # is always last and pushes out the oldest of the 20.
    assert_silent_ok(run_hook(["buffer-tool"], {**_payload("par", 99)}, env))
    after = [r["tool_use_id"] for r in read_jsonl(path)]
    assert after == [*ids[1:], "par-call-99"]
    leftovers = [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


def _payload(session: str, i: int) -> dict[str, object]:
    return {
        "conversation_id": session,
        "tool_name": "Shell",
        "tool_input": {"command": f"step {i}"},
        "tool_use_id": f"{session}-call-{i}",
        "tool_output": "x",
    }


def test_sessions_never_share_a_file(env: dict[str, str]) -> None:
    """Parallel hooks for a.b and a_b (alike once sanitised) write two files, each its own."""
    procs = [_spawn_buffer_tool(env, session, i) for i in range(6) for session in ("a.b", "a_b")]
    for proc in procs:
        proc.communicate(timeout=120)
        assert proc.returncode == 0
    qdir = Path(env["THATCH_QUEUE_DIR"])
    files = sorted(p.name for p in qdir.glob("*.jsonl"))
    assert len(files) == 2 and "a_b.jsonl" in files
    for name in files:
        sessions = {r["sessionID"] for r in read_jsonl(qdir / name)}
        assert len(sessions) == 1
        assert len(read_jsonl(qdir / name)) == 6


IMPORT_PROBE = """
import runpy, sys
sys.argv = ["thatch", sys.argv[1]]
try:
    runpy.run_module("thatch.cli", run_name="__main__")
except SystemExit:
    pass
print(" ".join(sorted(sys.modules)), file=sys.stderr)
"""
HEAVY = {
    "grpc",
    "numpy",
    "onnxruntime",
    "tokenizers",
    "huggingface_hub",
    "mcp",
    "sqlite3",
    "google",
    "click",
}


@pytest.mark.parametrize("hook", ["buffer-batch", "buffer-tool"])
def test_tool_hooks_import_only_the_queue(env: dict[str, str], hook: str) -> None:
    """Tool hooks load no click, gRPC, numpy, model runtime, MCP SDK or sqlite3."""
    payload = json.dumps({"session_id": "s", "tool_name": "Bash", "tool_use_id": "i"})
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE, hook],
        input=payload.encode(),
        capture_output=True,
        env=env,
        check=True,
    )
    assert result.stdout == b""
    modules = set(result.stderr.decode().split())
    assert {m.split(".")[0] for m in modules} & HEAVY == set()
    assert {m for m in modules if m.startswith("thatch")} == {
        "thatch",
        "thatch.cli",
        "thatch.cli.entry",
        "thatch.common",
        "thatch.common.environment",
        "thatch.frontend",
        "thatch.frontend.hooks",
        "thatch.frontend.hooks.runner",
        "thatch.frontend.hooks.hookio",
        "thatch.frontend.identifiers",
        "thatch.frontend.hooks.queue",
    }
    assert len(read_jsonl(queue_file(env, "s"))) == 1
