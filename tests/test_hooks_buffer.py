"""Tool hooks as hosts run them: golden payloads in, exact queue files out, silent, exit 0."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.hookrun import hook_env, read_jsonl, run_hook, thatch_command
from tests.support.host_payloads import host_payload, opencode_buffer_stdin
from thatch.frontend import queue

CLAUDE_SESSION = "c246e25f-2b7e-4f9a-ae4d-8952afdc55c9"  # the recorded Claude Code session
CURSOR_CONVERSATION = "c0ffee00-1234-4abc-8def-00000000cafe"


def recorded_call(name: str) -> dict[str, object]:
    """One call of a PostToolBatch, from Claude Code's recorded PostToolUse payload."""
    payload = host_payload(f"claude-PostToolUse-{name}")
    return {
        key: payload[key] for key in ("tool_name", "tool_input", "tool_use_id", "tool_response")
    }


def claude_batch(*calls: dict[str, object]) -> dict[str, object]:
    """Claude Code's recorded PostToolBatch envelope around ``calls``."""
    batch = host_payload("claude-PostToolBatch")
    batch["tool_calls"] = list(calls)
    return batch


# Bash and Read as Claude Code 2.1.197 answered them (structured tool_response), thatch's
# own recall (a content-block list), the Agent meta-tool, and ToolSearch (not recorded:
# the scripted model had no deferred tools; its shape is Claude's tool-call shape).
CLAUDE_BATCH = claude_batch(
    recorded_call("Bash"),
    recorded_call("Read"),
    recorded_call("mcp-thatch-memory_recall"),
    recorded_call("Agent"),
    {
        "tool_name": "ToolSearch",
        "tool_input": {"query": "thatch"},
        "tool_use_id": "toolu_search",
        "tool_response": [{"type": "text", "text": "Loaded 10 tools"}],
    },
)

WIDGETS_PY = (
    '"""Widgets."""\n\ndef spin(n: int) -> int:\n    """Spin a widget n times; widgets must be '
    'spun an even number of times."""\n    return n * 2'
)
# Exact lines, keys in the documented order; the outputs are the meaningful text of the
# structured responses (Bash's stdout, Read's file content), not their JSON.
CLAUDE_BATCH_RECORDS = [
    {
        "tool": "Bash",
        "sessionID": CLAUDE_SESSION,
        "args": {"command": "cat widgets.py", "description": "Show widgets.py"},
        "title": "cat widgets.py",
        "output": WIDGETS_PY,
        "tool_use_id": "toolu_4affc7cd7c194097b46f",
        "seq": 1,
    },
    {
        "tool": "Read",
        "sessionID": CLAUDE_SESSION,
        "args": {"file_path": "/home/dev/src/widgets/README.md"},
        "title": "README.md",
        "output": "# widgets\nA tiny widget library. Build with `make`, test with `make test`.\n",
        "tool_use_id": "toolu_81262d6d84c349fa9c51",
        "seq": 2,
    },
]
CLAUDE_BATCH_LINES = [
    json.dumps(record, ensure_ascii=False, separators=(",", ":")) for record in CLAUDE_BATCH_RECORDS
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


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def untimed(path: Path, since_ms: int) -> str:
    """The queue file's text without its records' ``ended_at``, each of which must be the
    hook's clock when it queued the call (after ``since_ms``, by now): the host gave none."""
    lines = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        assert since_ms <= record.pop("ended_at") <= now_ms(), line
        lines.append(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
    return "".join(lines)


def test_claude_post_tool_batch_golden(env: dict[str, str]) -> None:
    """Claude Code's recorded PostToolBatch: Bash and Read are queued as their text; thatch's
    own recall, Agent and ToolSearch are not."""
    since = now_ms()
    result = run_hook(["buffer-batch"], CLAUDE_BATCH, env)
    assert_silent_ok(result)
    assert untimed(queue_file(env, CLAUDE_SESSION), since) == "\n".join(CLAUDE_BATCH_LINES) + "\n"
    # The same batch again (a host retry) adds nothing: tool_use_ids are already queued.
    assert_silent_ok(run_hook(["buffer-batch"], CLAUDE_BATCH, env))
    assert len(read_jsonl(queue_file(env, CLAUDE_SESSION))) == 2


@pytest.mark.parametrize("name", ["Bash", "Read"])
def test_claude_single_post_tool_use(env: dict[str, str], name: str) -> None:
    """A recorded PostToolUse payload (one call at top level, a --post-tool-use setup) is
    queued like a batch of one: its text, never the structured response's JSON."""
    since = now_ms()
    assert_silent_ok(run_hook(["buffer-batch"], host_payload(f"claude-PostToolUse-{name}"), env))
    (record,) = read_jsonl(queue_file(env, CLAUDE_SESSION))
    expected = next(r for r in CLAUDE_BATCH_RECORDS if r["tool"] == name)
    assert since <= record.pop("ended_at") <= now_ms()
    assert record == {**expected, "seq": 1}
    assert "interrupted" not in record["output"] and "numLines" not in record["output"]


@pytest.mark.parametrize("name", ["Bash", "Read"])
def test_claude_2_1_332_post_tool_use_queues_the_output_text(
    env: dict[str, str], name: str
) -> None:
    """The latest tested Claude Code's recorded payloads (fixtures claude-2.1.332/): the
    call is queued with its text output, and its Agent call (now always in the
    background) is not."""
    payload = host_payload(f"claude-PostToolUse-{name}", claude="2.1.332")
    session = payload["session_id"]
    assert_silent_ok(run_hook(["buffer-batch"], payload, env))
    (record,) = read_jsonl(queue_file(env, session))
    assert record["tool"] == name and record["output"].strip(), record
    assert not record["output"].lstrip().startswith("{"), record
    agent = host_payload("claude-PostToolUse-Agent", claude="2.1.332")
    assert agent["tool_response"]["status"] == "async_launched"  # what changed in 2.1.332
    assert_silent_ok(run_hook(["buffer-batch"], agent, env))
    agent_queue = queue_file(env, agent["session_id"])
    queued = read_jsonl(agent_queue) if agent_queue.exists() else []
    assert "Agent" not in [r["tool"] for r in queued]


@pytest.mark.parametrize("name", ["Agent", "mcp-thatch-memory_recall"])
def test_claude_meta_and_own_calls_are_not_queued(env: dict[str, str], name: str) -> None:
    """The recorded Agent call and thatch's own recall queue nothing."""
    assert_silent_ok(run_hook(["buffer-batch"], host_payload(f"claude-PostToolUse-{name}"), env))
    assert not queue_file(env, CLAUDE_SESSION).exists()


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
    since = now_ms()
    assert_silent_ok(run_hook(["buffer-tool"], payload, env))
    assert untimed(queue_file(env, CURSOR_CONVERSATION), since) == (
        '{"tool":"Shell","sessionID":"c0ffee00-1234-4abc-8def-00000000cafe","args":'
        '{"command":"npm run build"},"title":"npm run build",'
        '"output":"built in 2.1s","tool_use_id":"call_9","seq":1}\n'
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


@pytest.mark.parametrize("name", ["read", "bash"])
def test_opencode_plugin_payload(env: dict[str, str], name: str) -> None:
    """The recorded opencode read/bash calls keep the ses_ id as the file name and their
    output text."""
    stdin = opencode_buffer_stdin(name)
    assert_silent_ok(run_hook(["buffer-tool", "--host", "opencode"], stdin, env))
    (record,) = read_jsonl(queue_file(env, stdin["session_id"]))
    assert record["sessionID"] == stdin["session_id"] == "ses_dcc66450bffep2Ud0biMgDPOtj"
    assert record["output"] == stdin["tool_response"] and record["output"]
    assert record["title"] == {"read": "README.md", "bash": "cat widgets.py"}[name]


def test_opencode_recorded_plugin_stdin_for_task_is_not_queued(env: dict[str, str]) -> None:
    """What the generated plugin passed for opencode's `task` tool: a meta-tool, skipped."""
    stdin = host_payload("opencode-thatch-stdin-oc-buffer-tool")
    assert_silent_ok(run_hook(["buffer-tool", "--host", "opencode"], stdin, env))
    assert not Path(env["THATCH_QUEUE_DIR"]).exists() or not any(
        Path(env["THATCH_QUEUE_DIR"]).glob("*.jsonl")
    )


def _other_mcp_stdin(response: object, **extra: object) -> dict[str, object]:
    """Another MCP server's tool as opencode reports it: {content, isError} (recorded shape)."""
    stdin = opencode_buffer_stdin("thatch_memory_recall", **extra)
    stdin["tool_name"] = "github_search_issues"
    stdin["tool_response"] = response
    return stdin


@pytest.mark.parametrize(
    ("response", "output"),
    [
        # The plugin's three forms: output.content/isError, a bare block list, a string.
        ({"content": [{"type": "text", "text": "issue #4: spin"}], "isError": False}, None),
        ([{"type": "text", "text": "issue #4: spin"}], None),
        ("issue #4: spin", None),
        (
            {"content": [{"type": "text", "text": "rate limited"}], "isError": True},
            "[error] rate limited",
        ),
    ],
)
def test_opencode_mcp_results_are_queued_with_text_and_error(
    env: dict[str, str], response: object, output: str | None
) -> None:
    """opencode MCP results carry content, not output: their text is queued (never empty),
    and isError marks the record so a failure is not learnt as a fact."""
    stdin = _other_mcp_stdin(response)
    assert_silent_ok(run_hook(["buffer-tool", "--host", "opencode"], stdin, env))
    (record,) = read_jsonl(queue_file(env, str(stdin["session_id"])))
    assert record["output"] == (output or "issue #4: spin")


@pytest.mark.parametrize("field", ["isError", "is_error"])
def test_opencode_is_error_field_marks_the_record(env: dict[str, str], field: str) -> None:
    """A top-level error flag is kept: the generated plugin passes ``is_error`` (see
    tests/test_setup_opencode_plugin.py), MCP's own spelling is ``isError``."""
    stdin = _other_mcp_stdin("boom", **{field: True})
    assert_silent_ok(run_hook(["buffer-tool", "--host", "opencode"], stdin, env))
    (record,) = read_jsonl(queue_file(env, str(stdin["session_id"])))
    assert record["output"] == "[error] boom"


def test_opencode_child_calls_are_queued_under_the_parent(env: dict[str, str]) -> None:
    """A task child's call (parent_session_id from the plugin) joins the parent's queue: a
    child is never nudged, so its own queue would strand the call."""
    parent = "ses_dcc66450bffep2Ud0biMgDPOtj"
    child = "ses_dcc6612aaffeTuohhBFjGIqW71"  # the recorded task child
    stdin = opencode_buffer_stdin("bash", session_id=child, parent_session_id=parent)
    assert_silent_ok(run_hook(["buffer-tool", "--host", "opencode"], stdin, env))
    assert [r["tool"] for r in read_jsonl(queue_file(env, parent))] == ["bash"]
    assert not queue_file(env, child).exists()


def test_memory_write_in_batch_drains(env: dict[str, str]) -> None:
    """A batch holding mcp__thatch__memory_remember consumes the queue and its count; the
    batch's other calls ran beside the save (the agent had not seen their results), so
    they stay queued."""
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
    assert [r["tool_use_id"] for r in read_jsonl(queue_file(env, CLAUDE_SESSION))] == ["t9"]
    assert not count.exists()


def test_opencode_save_keeps_the_calls_that_ran_beside_it(env: dict[str, str]) -> None:
    """opencode runs a step's calls in parallel and reports each on its own, in any order:
    a save consumes the calls that ended before it started (their results were seen) and
    keeps those that ended after (siblings), whichever hook process lands first."""
    session = "ses_dcc66450bffep2Ud0biMgDPOtj"
    hook = ["buffer-tool", "--host", "opencode"]
    seen = opencode_buffer_stdin("bash", session_id=session, started_at=1_000, ended_at=1_100)
    seen["tool_use_id"] = "earlier-step"
    sibling = opencode_buffer_stdin("read", session_id=session, started_at=2_000, ended_at=2_300)
    sibling["tool_use_id"] = "same-step"
    save = opencode_buffer_stdin(
        "thatch_memory_remember", session_id=session, started_at=2_000, ended_at=2_050
    )
    save["tool_response"] = "[saved] acme/app :: Widgets"
    for stdin in (seen, sibling, save):  # the sibling's hook landed before the save's
        assert_silent_ok(run_hook(hook, stdin, env))
    assert [r["tool_use_id"] for r in read_jsonl(queue_file(env, session))] == ["same-step"]
    # Without times (an older plugin) a save consumes every queued call, as before.
    del save["started_at"]
    assert_silent_ok(run_hook(hook, save, env))
    assert not queue_file(env, session).exists()


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


def test_the_stores_the_warm_hooks_open_bring_no_numpy(env: dict[str, str]) -> None:
    """The chat store (chat-notify, every hook's chat line) and the branch records (the
    prompt hook's branch sync) ask what an unmigrated file lacks: that question's module
    must not bring the migrations, whose numpy cost the warm hooks 100 ms each."""
    probe = (
        "import sys\n"
        "import thatch.frontend.store.branch_lifecycle, thatch.frontend.store.chat_store\n"
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, env=env, check=True, text=True
    )
    assert set(result.stdout.split()) & HEAVY == {"sqlite3"}


@pytest.mark.parametrize(
    "hook",
    ["buffer-batch", "buffer-tool", "session-end", "extraction-requeue", "extraction-complete"],
)
def test_tool_hooks_import_only_the_queue(env: dict[str, str], hook: str) -> None:
    """Tool hooks and the queue commands load no click, gRPC, numpy, model runtime, MCP SDK
    or sqlite3."""
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
        "thatch.frontend.queue",
        "thatch.frontend.queue.append",
        "thatch.frontend.queue.carry",
        "thatch.frontend.queue.classify",
        "thatch.frontend.queue.counts",
        "thatch.frontend.queue.files",
        "thatch.frontend.queue.limits",
        "thatch.frontend.queue.payload",
        "thatch.frontend.queue.records",
        "thatch.frontend.queue.snapshot",
        "thatch.frontend.regular_files",  # errno, os and stat: a queue file is opened safely
    }
    if hook.startswith("buffer"):
        assert len(read_jsonl(queue_file(env, "s"))) == 1


def hook_modules(hook: str, payload: dict[str, object], env: dict[str, str]) -> set[str]:
    """The modules a real ``thatch <hook>`` process had loaded when it was done."""
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE, hook],
        input=json.dumps(payload).encode(),
        capture_output=True,
        env=env,
        check=True,
    )
    assert result.stdout == b""
    return set(result.stderr.decode().split())


SPILL_MODULE = "thatch.frontend.queue.spill"


@pytest.mark.parametrize("hook", ["buffer-batch", "buffer-tool"])
def test_a_normal_append_imports_no_spill_code(env: dict[str, str], hook: str) -> None:
    """A tool hook that finds no spill marker and gets the lock asks one ``lstat`` and
    loads no spill code (it cost every hook ~2 ms of imports); with the marker there, the
    hook loads it and merges the spill waiting for the session."""

    def payload(use_id: str) -> dict[str, object]:
        return {"session_id": "s", "tool_name": "Bash", "tool_use_id": use_id}

    assert SPILL_MODULE not in hook_modules(hook, payload("first"), env)  # a new queue
    assert SPILL_MODULE not in hook_modules(hook, payload("second"), env)  # a queue to extend
    # What a hook that found the lock busy leaves: its call in a spill, and the marker.
    queue_dir, at_ms = Path(env["THATCH_QUEUE_DIR"]), int(time.time() * 1000)
    record = queue.make_record("s", payload("spilled"), None, at_ms)
    spilled = {"at": at_ms, "subagent": False, "agent_id": "", "project": "", "snapshot": None}
    spilled["events"] = [{"record": record}]
    (queue_dir / f"s.{at_ms}-1-spill.spill").write_text(json.dumps(spilled))
    (queue_dir / "s.spilled").touch()
    assert SPILL_MODULE in hook_modules(hook, payload("third"), env)
    queued = [r["tool_use_id"] for r in read_jsonl(queue_file(env, "s"))]
    assert queued == ["first", "second", "spilled", "third"]
    assert not (queue_dir / "s.spilled").exists()


def test_unreadable_tool_calls_are_said_once_per_session(tmp_path: Path) -> None:
    """Tool calls in a shape thatch cannot read: nothing queued, one stderr line per
    session (a marker in the queue directory), never a non-zero exit (issue 12 §5)."""

    env = hook_env(tmp_path)
    odd = {"session_id": "s-odd", "tool_calls": [{"name": "Bash", "input": {"command": "ls"}}]}
    first = run_hook(["buffer-batch"], odd, env)
    assert first.returncode == 0 and first.stdout == b""
    said = first.stderr.decode()
    assert said.startswith("[thatch buffer-batch] tool calls in a payload shape thatch cannot read")
    assert "keys: session_id, tool_calls" in said and said.count("\n") == 1
    assert run_hook(["buffer-batch"], odd, env).stderr == b""
    queue_dir = Path(env["THATCH_QUEUE_DIR"])
    assert not list(queue_dir.glob("*.jsonl"))
    other = run_hook(["buffer-tool"], {"conversation_id": "c-odd", "tool": "read"}, env)
    assert b"[thatch buffer-tool] tool calls in a payload shape" in other.stderr
    # Nothing that looks like a tool call stays silent, as before.
    assert run_hook(["buffer-batch"], {"session_id": "s-none"}, env).stderr == b""
    assert run_hook(["buffer-batch"], {"session_id": "s-none", "tool_calls": []}, env).stderr == b""
