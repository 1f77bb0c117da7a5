"""Cursor's prompt nudge reaches its model through the next postToolUse (docs/hooks.md §cursor).

Cursor's beforeSubmitPrompt output is ``continue`` and ``user_message`` only: context added
there never reaches the model. So ``flush-tools --host cursor`` answers ``{"continue": true}``
and holds its nudge, and the session's next ``buffer-tool --host cursor`` prints it once as
``additional_context`` (which Cursor adds after the tool's result). Real hook processes.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

from tests.support.hookrun import (
    CURSOR_PROMPT_ANSWER,
    cursor_prompt,
    hook_env,
    run_hook,
    thatch_command,
)
from thatch.frontend import queue
from thatch.frontend.queue import held_nudge

CID = "c0ffee00-1234-4abc-8def-00000000cafe"
PROMPT = "keep going with the parser refactor please"


def tool_call(tool_use_id: str, session: str = CID) -> dict[str, object]:
    return {
        "conversation_id": session,
        "tool_name": "Shell",
        "tool_input": {"command": "make test"},
        "tool_output": "ok",
        "tool_use_id": tool_use_id,
    }


def prompt_hook(env: dict[str, str], payload: object) -> subprocess.CompletedProcess[bytes]:
    return run_hook(["flush-tools", "--json", "--host", "cursor"], payload, env)


def tool_hook(env: dict[str, str], payload: object) -> subprocess.CompletedProcess[bytes]:
    return run_hook(["buffer-tool", "--host", "cursor"], payload, env)


def held_path(env: dict[str, str], session: str = CID) -> Path:
    return Path(env["THATCH_QUEUE_DIR"]) / f"{queue.safe_name(session)}.nudge"


def test_the_nudge_goes_out_with_the_next_tool_result_once(tmp_path: Path) -> None:
    """The prompt hook prints only the answer Cursor reads; the next tool call's hook
    prints the nudge the prompt hook used to print, and the one after it nothing."""
    env = hook_env(tmp_path)
    assert tool_hook(env, tool_call("t1")).stdout == b""
    asked = prompt_hook(env, {"conversation_id": CID, "prompt": PROMPT})
    assert (asked.returncode, asked.stdout) == (0, CURSOR_PROMPT_ANSWER)
    first = tool_hook(env, tool_call("t2"))
    assert first.returncode == 0
    answer = json.loads(first.stdout)
    assert list(answer) == ["additional_context"]
    text = answer["additional_context"]
    assert text.startswith("[thatch] 1 tool interaction is queued for fact extraction.")
    assert f'session_id "{CID}"' in text
    assert tool_hook(env, tool_call("t3")).stdout == b""
    queued = queue.peek_records(Path(env["THATCH_QUEUE_DIR"]), CID)
    assert [r["tool_use_id"] for r in queued] == ["t1", "t2", "t3"]


def test_parallel_tool_hooks_hand_it_over_exactly_once(tmp_path: Path) -> None:
    """Cursor runs the hooks of a turn's parallel tool calls at once: one of them says
    the nudge, and every call is queued."""
    env = hook_env(tmp_path)
    tool_hook(env, tool_call("t0"))
    prompt_hook(env, {"conversation_id": CID, "prompt": PROMPT})
    hooks = [
        subprocess.Popen(
            thatch_command("buffer-tool", "--host", "cursor"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        for _ in range(6)
    ]
    outputs = [
        hook.communicate(json.dumps(tool_call(f"p{i}")).encode(), timeout=60)[0]
        for i, hook in enumerate(hooks)
    ]
    assert all(hook.returncode == 0 for hook in hooks)
    said = [out for out in outputs if out]
    assert len(said) == 1
    assert json.loads(said[0])["additional_context"].startswith("[thatch] 1 tool interaction")
    assert not held_path(env).exists()
    queued = queue.peek_records(Path(env["THATCH_QUEUE_DIR"]), CID)
    assert sorted(r["tool_use_id"] for r in queued) == ["p0", "p1", "p2", "p3", "p4", "p5", "t0"]


def test_a_later_prompt_drops_what_an_earlier_one_held(tmp_path: Path) -> None:
    """A turn without tool calls leaves its nudge held; the next prompt's hook replaces it
    (here with nothing: the queue was drained meanwhile), so no tool result ever carries a
    nudge about another prompt."""
    env = hook_env(tmp_path)
    tool_hook(env, tool_call("t1"))
    prompt_hook(env, {"conversation_id": CID, "prompt": PROMPT})
    assert held_path(env).is_file()
    queue.consume(Path(env["THATCH_QUEUE_DIR"]), CID)
    assert cursor_prompt(env, {"conversation_id": CID, "prompt": PROMPT}) == ""
    assert not held_path(env).exists()


def test_session_end_drops_the_held_nudge(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    tool_hook(env, tool_call("t1"))
    prompt_hook(env, {"conversation_id": CID, "prompt": PROMPT})
    assert held_path(env).is_file()
    ended = run_hook(
        ["session-end", "--host", "cursor"],
        {"conversation_id": CID, "workspace_roots": [str(tmp_path)]},
        env,
    )
    assert (ended.returncode, ended.stdout) == (0, b"")
    assert not held_path(env).exists()


def test_other_hosts_tool_hooks_never_take_it(tmp_path: Path) -> None:
    """opencode's plugin reads the prompt hook's own answer; its buffer-tool (and Claude's
    buffer-batch) print nothing, and a Cursor nudge of the same id stays held."""
    env = hook_env(tmp_path)
    tool_hook(env, tool_call("t1"))
    prompt_hook(env, {"conversation_id": CID, "prompt": PROMPT})
    other = {"session_id": CID, "tool_name": "read", "tool_use_id": "o1"}
    assert run_hook(["buffer-tool", "--host", "opencode"], other, env).stdout == b""
    batch = {"session_id": CID, "tool_calls": [{"tool_name": "Read", "tool_use_id": "c1"}]}
    assert run_hook(["buffer-batch", "--host", "claude"], batch, env).stdout == b""
    assert held_path(env).is_file()


def test_bad_input_still_lets_the_prompt_through(tmp_path: Path) -> None:
    """Empty, malformed, huge and non-object stdin, a path-traversing id and a queue path
    that is a file: the prompt hook exits 0 and answers `{"continue": true}`, nothing else
    on stdout."""
    env = hook_env(tmp_path)
    blocked = hook_env(tmp_path, THATCH_QUEUE_DIR=str(tmp_path / "a-file"))
    (tmp_path / "a-file").write_text("x")
    cases: list[tuple[dict[str, str], object]] = [
        (env, b""),
        (env, b"{not json"),
        (env, b"[1, 2]"),
        (env, {"conversation_id": CID, "prompt": "x" * 3_000_000}),
        (env, {"conversation_id": "../../../etc/passwd", "prompt": PROMPT}),
        (blocked, {"conversation_id": CID, "prompt": PROMPT}),
    ]
    for case_env, payload in cases:
        result = prompt_hook(case_env, payload)
        assert (result.returncode, result.stdout) == (0, CURSOR_PROMPT_ANSWER), payload
        assert b"Traceback" not in result.stderr
    # The traversing id's files stay inside the queue directory.
    outside = [p for p in tmp_path.rglob("*.nudge") if p.parent != tmp_path / "queue"]
    assert outside == []


def test_what_is_at_the_held_path_is_never_followed(tmp_path: Path) -> None:
    """A symlink, a directory or a FIFO where the nudge is held: the tool hook queues its
    call, exits 0 and says nothing (never another file's text, never a wait)."""
    env = hook_env(tmp_path)
    tool_hook(env, tool_call("t0"))
    secret = tmp_path / "secret.txt"
    secret.write_text("ssh key material")
    path = held_path(env)
    for i, make in enumerate(
        [
            lambda: path.symlink_to(secret),
            lambda: path.mkdir(),
            lambda: os.mkfifo(path),
        ]
    ):
        make()
        result = tool_hook(env, tool_call(f"h{i}"))
        assert (result.returncode, result.stdout) == (0, b"")
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        else:
            path.unlink()
    assert secret.read_text() == "ssh key material"
    queued = queue.peek_records(Path(env["THATCH_QUEUE_DIR"]), CID)
    assert [r["tool_use_id"] for r in queued] == ["t0", "h0", "h1", "h2"]


@pytest.mark.parametrize(
    "content",
    [b"\xff" + b"n" * 10_000_000, b"plain text, not thatch's", b"[1]", b'{"extraction": 1}'],
    ids=["huge", "text", "list", "wrong-type"],
)
def test_a_held_file_thatch_did_not_write_is_dropped_unsaid(tmp_path: Path, content: bytes) -> None:
    """Anything at the held path that is not the prompt hook's JSON (thatch holds a few
    kilobytes at most): read 64 KiB at most, never said, removed."""
    env = hook_env(tmp_path)
    tool_hook(env, tool_call("t0"))
    held_path(env).write_bytes(content)
    result = tool_hook(env, tool_call("t1"))
    assert (result.returncode, result.stdout) == (0, b"")
    assert not held_path(env).exists()


def test_the_extraction_nudge_is_counted_when_it_is_handed_over(tmp_path: Path) -> None:
    """Turns without tool calls never show their held nudge: the next one the agent sees
    is still the polite first one, and only a handed-over nudge counts as missed."""
    env = hook_env(tmp_path)
    directory = Path(env["THATCH_QUEUE_DIR"])
    tool_hook(env, tool_call("t1"))
    for _ in range(3):
        prompt_hook(env, {"conversation_id": CID, "prompt": PROMPT})
    assert queue.read_count(directory, CID) == 0
    said = cursor_prompt(env, {"conversation_id": CID, "prompt": PROMPT})
    assert said.startswith("[thatch] 1 tool interaction is queued for fact extraction.")
    assert queue.read_count(directory, CID) == 1
    for _ in range(2):
        cursor_prompt(env, {"conversation_id": CID, "prompt": PROMPT})
    assert cursor_prompt(env, {"conversation_id": CID, "prompt": PROMPT}).startswith(
        "[thatch] EXTRACTION NUDGES HAVE BEEN IGNORED 3 TIMES."
    )


def test_thatchs_own_tools_leave_it_and_a_drained_queue_is_not_nudged(tmp_path: Path) -> None:
    """An extractor's calls (thatch's tools) do not take the prompt's nudge; once the
    queue is drained, the next tool call says no extraction nudge."""
    env = hook_env(tmp_path)
    tool_hook(env, tool_call("t1"))
    prompt_hook(env, {"conversation_id": CID, "prompt": PROMPT})
    for name in ("get_extraction_payload", "MCP:memory_remember", "mcp__thatch__memory_recall"):
        own = {"conversation_id": CID, "tool_name": name, "tool_output": "{}"}
        assert tool_hook(env, own).stdout == b""
    assert held_path(env).is_file()
    queue.consume(Path(env["THATCH_QUEUE_DIR"]), CID)
    # A postToolUse naming no tool queues nothing: the queue stays drained.
    assert tool_hook(env, {"conversation_id": CID}).stdout == b""
    assert not held_path(env).exists()
    assert queue.read_count(Path(env["THATCH_QUEUE_DIR"]), CID) == 0


def test_claudes_own_prompt_event_keeps_claudes_answer(tmp_path: Path) -> None:
    """Claude Code's prompt hook names no host: run where the environment says Cursor,
    its UserPromptSubmit still gets the text Claude adds to the context."""
    env = hook_env(tmp_path, THATCH_HOST="cursor")
    sid = "5d2c9f0e-1111-4a2b-8c3d-000000000abc"
    calls = [{"tool_name": "Read", "tool_input": {"file_path": "a"}, "tool_use_id": "c1"}]
    run_hook(["buffer-batch", "--host", "claude"], {"session_id": sid, "tool_calls": calls}, env)
    payload = {"session_id": sid, "prompt": PROMPT, "hook_event_name": "UserPromptSubmit"}
    result = run_hook(["flush-tools"], payload, env)
    assert result.stdout.decode().startswith("[thatch] 1 tool interaction is queued")
    assert list(Path(env["THATCH_QUEUE_DIR"]).glob("*.nudge")) == []


def test_an_unusable_queue_is_one_plain_line(tmp_path: Path) -> None:
    """A queue path that is a file, or a directory where the nudge is held: the prompt
    still goes on, and stderr says what the queue's other hooks say, without a path."""
    (tmp_path / "a-file").write_text("x")
    blocked = hook_env(tmp_path, THATCH_QUEUE_DIR=str(tmp_path / "a-file"))
    result = prompt_hook(blocked, {"conversation_id": CID, "prompt": PROMPT})
    assert (result.returncode, result.stdout) == (0, CURSOR_PROMPT_ANSWER)
    assert result.stderr.decode().splitlines() == [
        "[thatch flush-tools] cannot use the queue: Not a directory"
    ]
    env = hook_env(tmp_path)
    tool_hook(env, tool_call("t1"))
    held_path(env).mkdir()
    result = prompt_hook(env, {"conversation_id": CID, "prompt": PROMPT})
    assert (result.returncode, result.stdout) == (0, CURSOR_PROMPT_ANSWER)
    assert "internal error" not in result.stderr.decode()
    assert "cannot use the queue: Is a directory" in result.stderr.decode()
    assert held_path(env).is_dir()


def test_take_is_exactly_once_under_contention(tmp_path: Path) -> None:
    """Eight threads released together take one held nudge: exactly one gets it, every
    round (a read-then-delete would hand it out twice)."""
    directory = tmp_path / "queue"
    for round_ in range(100):
        held_nudge.hold(directory, CID, f"extraction {round_}", "rest")
        gate = threading.Barrier(8)
        got: list[tuple[str, str] | None] = []
        threads = [threading.Thread(target=taker, args=(gate, got, directory)) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [g for g in got if g is not None] == [(f"extraction {round_}", "rest")]
    assert list(directory.iterdir()) == []


def taker(gate: threading.Barrier, got: list[tuple[str, str] | None], directory: Path) -> None:
    gate.wait()
    got.append(held_nudge.take(directory, CID))


def test_a_busy_lock_costs_the_handover_only_its_count(tmp_path: Path) -> None:
    """Cursor runs a turn's tool hooks at once, so the lock may be busy when one hands the
    nudge over: its call spills (after the usual wait), the nudge still goes out, and the
    hook says nothing on stderr (no second 2-second wait for the count, which is skipped)."""
    env = hook_env(tmp_path)
    directory = Path(env["THATCH_QUEUE_DIR"])
    tool_hook(env, tool_call("t1"))
    prompt_hook(env, {"conversation_id": CID, "prompt": PROMPT})
    lock = queue.queue_paths(directory, CID)[2]
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        result = tool_hook(env, tool_call("t2"))
    finally:
        os.close(fd)
    assert result.returncode == 0
    assert result.stderr == b""
    said = json.loads(result.stdout)["additional_context"]
    assert said.startswith("[thatch] 1 tool interaction is queued for fact extraction.")
    assert queue.read_count(directory, CID) == 0
    assert list(directory.glob("*.spill"))  # the call waits in its spill, not lost
    assert tool_hook(env, tool_call("t3")).stdout == b""
    queued = queue.peek_records(directory, CID)
    assert [r["tool_use_id"] for r in queued] == ["t1", "t2", "t3"]
