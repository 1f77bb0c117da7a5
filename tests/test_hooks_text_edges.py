"""Text that real hosts send and that broke hooks: line separators inside a tool's output,
an emoji halved by a JavaScript ``slice``, a NUL in ``cwd``, no stdout at all, a batch of
thousands of calls. Real processes, as hosts run them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.hookrun import hook_env, run_hook, thatch_command
from thatch.frontend import queue
from thatch.frontend.queue.records import seq_of


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    project = tmp_path / "proj"
    project.mkdir()
    return hook_env(tmp_path, THATCH_PROJECT_DIR=str(project))


def bash(use_id: str, output: object) -> dict[str, object]:
    return {
        "tool_name": "Bash",
        "tool_input": {"command": "cat notes.txt"},
        "tool_use_id": use_id,
        "tool_response": output,
    }


def queued(env: dict[str, str], session_id: str) -> list[dict[str, object]]:
    """The queue file's records, read apart from the code under test (lines end at "\n")."""
    path = queue.queue_paths(Path(env["THATCH_QUEUE_DIR"]), session_id)[0]
    lines = path.read_text(encoding="utf-8").split("\n")
    return [json.loads(line) for line in lines if line]


def pending(env: dict[str, str], session_id: str) -> int:
    result = run_hook(["extraction-status"], {"session_id": session_id}, env)
    assert (result.returncode, result.stderr) == (0, b"")
    value = json.loads(result.stdout)["pending"]
    assert isinstance(value, int)
    return value


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85"])
def test_a_line_separator_inside_a_tool_output_keeps_the_record(
    env: dict[str, str], separator: str
) -> None:
    """str.splitlines cuts at U+2028, U+2029 and U+0085: the record used to be read back
    as two broken halves, skipped, and dropped by the next write."""
    for n, text in enumerate([f"line one{separator}line two", "plain"]):
        payload = {"session_id": "sep", "tool_calls": [bash(f"t{n}", text)]}
        result = run_hook(["buffer-batch"], payload, env)
        assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")
    assert pending(env, "sep") == 2
    assert [record["tool_use_id"] for record in queued(env, "sep")] == ["t0", "t1"]
    assert f"line one{separator}line two" in json.dumps(queued(env, "sep")[0], ensure_ascii=False)


def test_an_emoji_cut_in_half_costs_one_character_not_the_batch(env: dict[str, str]) -> None:
    """A lone surrogate (``JSON.stringify`` of a string sliced inside an emoji) cannot be
    written as UTF-8: it used to fail the whole batch, the unrelated calls with it."""
    raw = (
        '{"session_id":"cut","cwd":"/tmp/a\\udc80b","tool_calls":['
        '{"tool_name":"Read","tool_input":{"file_path":"/x/README.md"},"tool_use_id":"r1",'
        '"tool_response":"important readme"},'
        '{"tool_name":"Bash","tool_input":{"command":"cat log"},"tool_use_id":"b1",'
        '"tool_response":{"stdout":"emoji cut \\ud83d","stderr":""}},'
        '{"tool_name":"Bash","tool_input":{"command":"echo"},"tool_use_id":"b2",'
        '"tool_response":"a whole one \\ud83d\\ude00"}]}'
    )
    result = run_hook(["buffer-batch"], raw, env)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")
    records = queued(env, "cut")
    assert [record["tool_use_id"] for record in records] == ["r1", "b1", "b2"]
    text = json.dumps(records, ensure_ascii=False)
    assert "emoji cut \ufffd" in text and "a whole one \U0001f600" in text


def test_a_nul_in_cwd_is_no_project_dir_and_the_reminder_still_comes(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    env.pop("THATCH_PROJECT_DIR", None)
    env.pop("CLAUDE_PROJECT_DIR", None)
    result = run_hook(["reminder"], {"session_id": "n", "cwd": "/tmp/a\x00b"}, env, cwd=tmp_path)
    assert result.returncode == 0 and result.stderr == b""
    assert b"[thatch]" in result.stdout


@pytest.mark.parametrize(
    "args",
    [["buffer-batch"], ["reminder"], ["extraction-status"], ["chat-notify", "--host", "cursor"]],
)
def test_a_hook_run_without_stdout_exits_0_silently(env: dict[str, str], args: list[str]) -> None:
    """With descriptor 1 closed, Python's sys.stdout is None: writing, or even flushing
    with nothing to say, used to end the hook with status 1 and a traceback."""
    result = subprocess.run(
        ["bash", "-c", '"$@" >&-', "bash", *thatch_command(*args)],
        input=json.dumps({"session_id": "closed", "tool_calls": [bash("t", "x")]}).encode(),
        env=env,
        stderr=subprocess.PIPE,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stderr) == (0, b"")


def test_a_batch_of_thousands_of_calls_is_queued_in_one_pass(env: dict[str, str]) -> None:
    """What a batch of thousands writes: the newest 20, numbered on, a repeated id still
    skipped after the batch trimmed what it holds. (Its speed, which this cannot show:
    each call was checked against every record before it, 39 s for 40,000 calls holding
    the session's lock; a set of ids now, 0.36 s.)"""
    calls = [bash(f"t{n}", "x") for n in range(6000)]
    calls.insert(3000, bash("t5", "a repeat of an id already queued: skipped"))
    result = run_hook(["buffer-batch"], {"session_id": "many", "tool_calls": calls}, env)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")
    records = queued(env, "many")
    assert [record["tool_use_id"] for record in records] == [f"t{n}" for n in range(5980, 6000)]
    assert [seq_of(record) for record in records] == list(range(5981, 6001))
