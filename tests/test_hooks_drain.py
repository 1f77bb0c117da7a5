"""Draining the extraction queue from the real hosts' payloads: only a visible success
drains, a sub-agent or extraction_done drains exactly the handed-out snapshot, a failed
extractor requeues, and a session's last calls carry over to the project's next session
(docs/hooks.md §snapshot, §carry-over)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.hookrun import hook_env, read_jsonl, run_hook, thatch_command
from tests.support.host_payloads import host_payload
from thatch.frontend import queue

SESSION = "c246e25f-2b7e-4f9a-ae4d-8952afdc55c9"  # the recorded Claude Code session


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return hook_env(tmp_path)


def qdir(env: dict[str, str]) -> Path:
    return Path(env["THATCH_QUEUE_DIR"])


def ok(result: subprocess.CompletedProcess[bytes]) -> None:
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")


def queue_calls(env: dict[str, str], *ids: str) -> None:
    """Queue Bash calls (the recorded PostToolUse-Bash payload with new ids)."""
    for use_id in ids:
        payload = host_payload("claude-PostToolUse-Bash")
        payload["tool_use_id"] = use_id
        ok(run_hook(["buffer-batch"], payload, env))


def queued_ids(env: dict[str, str], session: str = SESSION) -> list[str]:
    return [r["tool_use_id"] for r in queue.peek_records(qdir(env), session)]


def remember(response: object, *, subagent: bool = False) -> dict[str, object]:
    """The recorded memory_remember PostToolUse, answered with ``response``."""
    payload = host_payload("claude-PostToolUse-mcp-thatch-memory_remember")
    payload["tool_response"] = response
    if subagent:
        payload["agent_id"] = host_payload("claude-PostToolBatch-subagent")["agent_id"]
    return payload


@pytest.mark.parametrize(
    "response",
    [
        [{"type": "text", "text": "Invalid arguments: content: required"}],
        "Error: No such tool available: mcp__thatch__memory_remember",
        "<tool_use_error>Error: No such tool available: mcp__thatch__memory_remember"
        "</tool_use_error>",
        {"content": [{"type": "text", "text": "[saved] x :: y"}], "isError": True},
        None,
    ],
)
def test_failed_save_drains_nothing(env: dict[str, str], response: object) -> None:
    """A save that failed (or whose answer is unknown) leaves queue and count alone."""
    queue_calls(env, "a", "b")
    queue.increment_count(qdir(env), SESSION)
    ok(run_hook(["buffer-batch"], remember(response), env))
    assert queued_ids(env) == ["a", "b"]
    assert queue.read_count(qdir(env), SESSION) == 1


def test_successful_save_of_the_session_drains(env: dict[str, str]) -> None:
    """The recorded successful save (content blocks, "[saved] …") in the recorded batch
    consumes the session's queue and count: the agent saved what it learned."""
    queue_calls(env, "a", "b")
    queue.increment_count(qdir(env), SESSION)
    ok(run_hook(["buffer-batch"], host_payload("claude-PostToolBatch"), env))
    assert queued_ids(env) == []
    assert queue.read_count(qdir(env), SESSION) == 0


def test_subagent_save_without_snapshot_drains_nothing(env: dict[str, str]) -> None:
    """A sub-agent (agent_id) shares its parent's session_id: its save must not consume
    the parent's queue."""
    queue_calls(env, "a", "b")
    ok(run_hook(["buffer-batch"], remember(host_payload_saved(), subagent=True), env))
    assert queued_ids(env) == ["a", "b"]


def host_payload_saved() -> object:
    return host_payload("claude-PostToolUse-mcp-thatch-memory_remember")["tool_response"]


def test_subagent_save_completes_only_the_snapshot(env: dict[str, str]) -> None:
    """The recorded sub-agent flow: payload fetched (a, b handed out), c queued meanwhile,
    the sub-agent's save drains a and b; c survives and nudges later."""
    queue_calls(env, "a", "b")
    handed = queue.accept(qdir(env), SESSION)
    assert [r["tool_use_id"] for r in handed] == ["a", "b"]
    assert queue.nudge_records(qdir(env), SESSION) == []  # accepted: the nudge is quiet
    queue_calls(env, "c")
    batch = host_payload("claude-PostToolBatch-subagent")
    batch["tool_calls"] = [
        {
            "tool_name": "mcp__thatch__memory_remember",
            "tool_input": {"label": "l", "content": "c"},
            "tool_use_id": "toolu_save",
            "tool_response": host_payload_saved(),
        }
    ]
    ok(run_hook(["buffer-batch"], batch, env))
    assert queued_ids(env) == ["c"]
    assert [r["tool_use_id"] for r in queue.nudge_records(qdir(env), SESSION)] == ["c"]
    # The recorded extraction_done that follows (hook side) finds no snapshot: c stays.
    ok(
        run_hook(
            ["buffer-batch"], host_payload("claude-PostToolUse-mcp-thatch-extraction_done"), env
        )
    )
    assert queued_ids(env) == ["c"]


def test_requeue_command_makes_the_snapshot_pending(env: dict[str, str]) -> None:
    """extraction-requeue (stdin {session_id}): the nudge resumes, nothing is deleted, and
    a later extraction_done without a new fetch deletes nothing."""
    sid = "ses_dcc66450bffep2Ud0biMgDPOtj"
    stdin = host_payload("opencode-thatch-stdin-oc-buffer-tool")
    for i in range(2):
        ok(
            run_hook(
                ["buffer-tool", "--host", "opencode"],
                {**stdin, "tool_name": "bash", "tool_use_id": f"c{i}"},
                env,
            )
        )
    queue.accept(qdir(env), sid)
    assert queue.nudge_records(qdir(env), sid) == []
    ok(run_hook(["extraction-requeue", "--host", "opencode"], {"session_id": sid}, env))
    assert len(queue.nudge_records(qdir(env), sid)) == 2
    assert queue.complete(qdir(env), sid) == 0
    assert len(queue.peek_records(qdir(env), sid)) == 2
    queue.accept(qdir(env), sid)
    ok(run_hook(["extraction-complete", "--host", "opencode"], {"session_id": sid}, env))
    assert queue.peek_records(qdir(env), sid) == []


def test_stale_snapshot_nudges_again(env: dict[str, str]) -> None:
    """An extractor that died without a requeue strands nothing: after the expiry the
    records nudge again."""
    queue_calls(env, "a")
    queue.accept(qdir(env), SESSION, now=1000.0)
    assert queue.nudge_records(qdir(env), SESSION, now=1000.0 + 60) == []
    later = 1000.0 + queue.ACCEPTED_TTL_SECONDS + 1
    assert len(queue.nudge_records(qdir(env), SESSION, now=later)) == 1


def test_legacy_queue_file_is_read_and_drained(env: dict[str, str]) -> None:
    """A file of an older release (no seq): read, handed out, drained by completion; a
    record queued after the fetch survives."""
    qdir(env).mkdir(parents=True)
    legacy: list[dict[str, Any]] = [
        {
            "tool": "Bash",
            "sessionID": SESSION,
            "args": {},
            "title": "",
            "output": "o",
            "tool_use_id": u,
        }
        for u in ("old1", "old2")
    ]
    (qdir(env) / f"{SESSION}.jsonl").write_text(
        "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in legacy)
    )
    assert [r["tool_use_id"] for r in queue.accept(qdir(env), SESSION)] == ["old1", "old2"]
    queue_calls(env, "new")
    assert queue.peek_records(qdir(env), SESSION)[-1]["seq"] == 1
    assert queue.complete(qdir(env), SESSION) == 2
    assert queued_ids(env) == ["new"]


def test_session_end_carries_calls_to_the_next_session(env: dict[str, str]) -> None:
    """The recorded SessionEnd moves the session's calls to its project; the project's next
    session adopts them on its first prompt and gets the extraction nudge."""
    queue_calls(env, "a", "b")
    queue.accept(qdir(env), SESSION)  # an extractor that ends with the session
    ok(run_hook(["session-end"], host_payload("claude-SessionEnd"), env))
    assert queued_ids(env) == []
    for suffix in (".jsonl", ".count", ".state"):
        assert not (qdir(env) / f"{SESSION}{suffix}").exists()
    prompt = host_payload("claude-UserPromptSubmit-task-notification")
    prompt["prompt"] = "continue with the widgets"
    prompt["cwd"] = host_payload("claude-SessionEnd")["cwd"]
    result = run_hook(["flush-tools"], prompt, env)
    assert result.returncode == 0
    assert result.stdout.startswith(b"[thatch] 2 tool interactions are queued")
    assert prompt["session_id"].encode() in result.stdout
    assert queued_ids(env, str(prompt["session_id"])) == ["a", "b"]
    other = {**prompt, "session_id": "another-session", "cwd": "/home/dev/src/other"}
    assert not run_hook(["flush-tools"], other, env).stdout.startswith(b"[thatch] 2")


def test_drain_while_hooks_append_keeps_new_calls(env: dict[str, str]) -> None:
    """Real processes: 20 buffer-batch hooks append while extraction_done (in this
    process) completes the snapshot; every call queued after the fetch survives."""
    queue_calls(env, "h0", "h1", "h2")
    handed = {r["tool_use_id"] for r in queue.accept(qdir(env), SESSION)}
    procs = []
    for i in range(20):
        payload = host_payload("claude-PostToolUse-Bash")
        payload["tool_use_id"] = f"n{i}"
        stdin = qdir(env).parent / f"stdin-{i}.json"
        stdin.write_text(json.dumps(payload))
        with stdin.open("rb") as handle:
            procs.append(
                subprocess.Popen(
                    thatch_command("buffer-batch"),
                    stdin=handle,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=env,
                )
            )
        if i == 10:
            assert queue.complete(qdir(env), SESSION) == 3  # exactly h0-h2
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert (proc.returncode, out, err) == (0, b"", b"")
    left = queued_ids(env)
    assert not handed & set(left)
    assert sorted(left) == sorted(f"n{i}" for i in range(20))
    assert read_jsonl(qdir(env) / f"{SESSION}.jsonl")  # every line parses


def test_opencode_child_save_completes_only_the_parent_snapshot(env: dict[str, str]) -> None:
    """The recorded opencode flow: the task child fetched the parent's payload; its
    successful thatch_memory_remember ({content, isError: false}, passed with
    parent_session_id) drains the handed-out records; a call queued meanwhile survives.
    The same save with isError true drains nothing."""
    from tests.support.host_payloads import opencode_buffer_stdin

    parent = "ses_dcc66450bffep2Ud0biMgDPOtj"
    child = "ses_dcc6612aaffeTuohhBFjGIqW71"
    command = ["buffer-tool", "--host", "opencode"]
    ok(run_hook(command, opencode_buffer_stdin("read"), env))
    queue.accept(qdir(env), parent)
    ok(run_hook(command, opencode_buffer_stdin("bash"), env))
    save = opencode_buffer_stdin(
        "thatch_memory_remember", session_id=child, parent_session_id=parent
    )
    failed = {**save, "tool_response": {**save["tool_response"], "isError": True}}
    ok(run_hook(command, failed, env))
    assert [r["tool"] for r in queue.peek_records(qdir(env), parent)] == ["read", "bash"]
    ok(run_hook(command, save, env))
    assert [r["tool"] for r in queue.peek_records(qdir(env), parent)] == ["bash"]
    assert not (qdir(env) / f"{child}.jsonl").exists()


def test_extractor_subagent_stop_completes_its_snapshot(env: dict[str, str]) -> None:
    """The recorded sub-agent batch (its get_extraction_payload, with agent_id) names the
    snapshot's holder; another sub-agent's stop completes nothing; the recorded
    SubagentStop of the holder, run as extraction-complete, drains exactly the snapshot
    (a no-save run that forgot extraction_done strands nothing)."""
    queue_calls(env, "a", "b")
    queue.accept(qdir(env), SESSION)  # the tool side of the recorded fetch
    ok(run_hook(["buffer-batch"], host_payload("claude-PostToolBatch-subagent"), env))
    queue_calls(env, "c")
    stop = host_payload("claude-SubagentStop")
    ok(run_hook(["extraction-complete"], {**stop, "agent_id": "another-agent"}, env))
    assert queued_ids(env) == ["a", "b", "c"]
    ok(run_hook(["extraction-complete"], stop, env))
    assert queued_ids(env) == ["c"]
    # A failed fetch by a sub-agent names no holder.
    queue.accept(qdir(env), SESSION)
    failed = host_payload("claude-PostToolBatch-subagent")
    failed["tool_calls"][0]["tool_response"] = [{"type": "text", "text": "Invalid arguments"}]
    ok(run_hook(["buffer-batch"], failed, env))
    ok(run_hook(["extraction-complete"], stop, env))
    assert queued_ids(env) == ["c"]
