"""Cursor's prompt nudge reaches its model through the next postToolUse (docs/hooks.md §cursor).

Cursor's beforeSubmitPrompt output is ``continue`` and ``user_message`` only: context added
there never reaches the model. So ``flush-tools --host cursor`` answers ``{"continue": true}``
and holds its nudge, and the session's next ``buffer-tool --host cursor`` prints it once as
``additional_context`` (which Cursor adds after the tool's result). Real hook processes.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.support.hookrun import (
    CURSOR_PROMPT_ANSWER,
    cursor_prompt,
    hook_env,
    run_hook,
    thatch_command,
)
from thatch.frontend import queue
from thatch.frontend.queue.held_nudge import HELD_BYTES_LIMIT

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


def test_an_oversized_held_file_is_read_only_in_part(tmp_path: Path) -> None:
    """Not thatch's writing (thatch holds a few kilobytes at most): 64 KiB of it at most,
    undecodable bytes replaced."""
    env = hook_env(tmp_path)
    tool_hook(env, tool_call("t0"))
    held_path(env).write_bytes(b"\xff" + b"n" * 10_000_000)
    result = tool_hook(env, tool_call("t1"))
    text = json.loads(result.stdout)["additional_context"]
    assert text.startswith("\ufffd") and len(text) == HELD_BYTES_LIMIT
    assert not held_path(env).exists()
