"""Every queued field is bounded, and only usable session ids get a queue (and a nudge)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.fake_embedder import tool_context
from tests.support.hookrun import hook_env, run_hook
from thatch.frontend import queue
from thatch.frontend.identifiers import session_id_problem
from thatch.frontend.tools.memory_tools import Tools

SESSION = "ses_caps"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    project = tmp_path / "proj"
    project.mkdir()
    return hook_env(tmp_path, THATCH_PROJECT_DIR=str(project))


def payload_of(tmp_path: Path, session: str) -> str:
    with tool_context(tmp_path) as ctx:
        tools = Tools(ctx)
        result = tools.call("get_extraction_payload", {"session_id": session})
    assert not result.is_error, result.text
    return result.text


def test_huge_tool_name_is_capped_in_queue_and_payload(tmp_path: Path, env: dict) -> None:
    """A 5 MB tool_name (once a 10 MB queue and a 10,000,161-character payload)."""
    call = {"tool_name": "T" * 5_000_000, "tool_input": {"k": "v"}, "tool_use_id": "u1"}
    result = run_hook(["buffer-batch"], {"session_id": SESSION, "tool_calls": [call]}, env)
    assert result.returncode == 0 and result.stderr == b""
    jsonl = queue.queue_paths(Path(env["THATCH_QUEUE_DIR"]), SESSION)[0]
    (record,) = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert record["tool"] == "T" * queue.TOOL_NAME_LIMIT
    assert jsonl.stat().st_size < queue.RECORD_CHARS_LIMIT
    payload = payload_of(tmp_path, SESSION)
    assert len(payload) < 1000
    assert json.loads(payload)["interactions"][0]["tool"] == "T" * queue.TOOL_NAME_LIMIT


def test_keys_ids_values_and_nesting_are_capped() -> None:
    deep: object = "bottom"
    for _ in range(5000):
        deep = [deep]
    record = queue.make_record(
        SESSION,
        {
            "tool_name": "Bash",
            "tool_input": {
                "K" * 1_000_000: "v",
                "many": list(range(100_000)),
                "keys": {f"k{i}": i for i in range(100_000)},
                "deep": deep,
                "int": 10**5000,
                "command": "c" * 1_000_000,
            },
            "tool_use_id": "U" * 1_000_000,
            "tool_response": "r" * 1_000_000,
        },
    )
    text = json.dumps(record)  # a 5,000-digit integer would not even print
    assert len(text) <= queue.RECORD_CHARS_LIMIT
    args = record["args"]
    assert "K" * queue.KEY_LIMIT in args
    assert args["int"] == "…"
    assert record["tool_use_id"] == "U" * queue.ID_LIMIT
    assert len(record["output"]) == queue.OUTPUT_LIMIT
    assert len(record["title"]) <= queue.TITLE_LIMIT


def test_long_tool_use_ids_still_deduplicate(tmp_path: Path) -> None:
    call = {"tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_use_id": "U" * 10_000}
    queue.append_calls(tmp_path, SESSION, [call])
    queue.append_calls(tmp_path, SESSION, [call])
    assert len(queue.peek_records(tmp_path, SESSION)) == 1


def test_full_queue_and_foreign_files_stay_bounded(tmp_path: Path) -> None:
    """Twenty maximal records fit the per-queue cap; a 10 MB file written by someone else
    (an older release) is read from its end only, each record capped again."""
    big = {"command": "c" * 10_000, **{f"a{i}": "v" * 600 for i in range(200)}}
    calls = [
        {
            "tool_name": "X" * 500,
            "tool_input": big,
            "tool_use_id": f"{i}",
            "tool_response": "o" * 9999,
        }
        for i in range(40)
    ]
    queue.append_calls(tmp_path, SESSION, calls)
    jsonl = queue.queue_paths(tmp_path, SESSION)[0]
    assert jsonl.stat().st_size <= queue.QUEUE_BYTES_LIMIT
    assert len(queue.peek_records(tmp_path, SESSION)) == queue.MAX_RECORDS
    foreign = {"tool": "F" * 5_000_000, "sessionID": SESSION, "args": {}, "output": "x"}
    jsonl.write_text(json.dumps(foreign) + "\n" + json.dumps({**foreign, "tool": "ok"}) + "\n")
    records = queue.peek_records(tmp_path, SESSION)
    assert [r["tool"] for r in records] == ["ok"]  # the 5 MB line lies before the window
    payload = queue.build_payload(records, "proj")
    assert payload is not None and len(payload) < 1000


USABLE = ["ses_dcc66450bffep2Ud0biMgDPOtj", "c246e25f-2b7e-4f9a-ae4d-8952afdc55c9", "a.b", "we ird"]
UNUSABLE = [
    "x" * 10_000,
    "first\nsecond",
    "bell\x07",
    "nul\x00byte",
    "\u202eevil",
    "../../etc/passwd",
    "a/b",
    "back\\slash",
    "..",
    " padded",
]


@pytest.mark.parametrize("session", USABLE + UNUSABLE)
def test_nudge_only_for_ids_the_tools_accept(tmp_path: Path, env: dict, session: str) -> None:
    """Real hooks: an id gets queued and named in a nudge exactly when the extraction
    tools accept it; the same predicate decides both."""
    call = {"tool_name": "Bash", "tool_input": {"command": "make"}, "tool_use_id": "t"}
    run_hook(["buffer-batch"], {"session_id": session, "tool_calls": [call]}, env)
    flush = run_hook(["flush-tools"], {"session_id": session, "prompt": "next"}, env)
    assert flush.returncode == 0 and b"Traceback" not in flush.stderr
    nudged = "get_extraction_payload" in flush.stdout.decode()
    with tool_context(tmp_path) as ctx:
        tools = Tools(ctx)
        accepted = not tools.call("get_extraction_payload", {"session_id": session}).is_error
        done = tools.call("extraction_done", {"session_id": session})
    assert accepted == (session in USABLE) == (session_id_problem(session) is None)
    assert nudged == accepted
    assert done.is_error == (not accepted)
    if not accepted:
        assert done.text.startswith("Invalid arguments: session_id: ")
        assert len(flush.stdout) < 1000


def test_a_fifo_or_a_link_in_the_queue_hangs_nothing_and_hands_over_nothing(
    tmp_path: Path, env: dict
) -> None:
    """A FIFO at a session's queue file hung its hooks and its extraction tool for good;
    a symlink to another session's queue, or an id shaped like that queue's hashed stem
    (``a_b-<16 hex>`` for ``a.b``), handed that session's records over."""
    import os

    directory = tmp_path / "queue"
    secret = {
        "tool_name": "Bash",
        "tool_input": {"command": "echo SECRET_OF_A"},
        "tool_use_id": "s",
    }
    for victim in ("victim", "a.b"):
        run_hook(["buffer-batch"], {"session_id": victim, "tool_calls": [secret]}, env)
    os.mkfifo(directory / "fifo1.jsonl")
    os.mkfifo(directory / "fifo2.state")
    os.mkfifo(directory / "fifo3.count")
    (directory / "fifo3.jsonl").write_text(json.dumps({"seq": 1, "tool": "Bash"}) + "\n")
    (directory / "linked.jsonl").symlink_to(directory / "victim.jsonl")
    (directory / "dirlock.lock").mkdir()
    lookalike = queue.safe_name("a.b")
    assert lookalike == "a_b-" + lookalike.rpartition("-")[2]
    call = {"tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_use_id": "t"}
    for session in ("fifo1", "fifo2", "fifo3", "linked", lookalike, "dirlock"):
        for hook, payload in [
            ("flush-tools", {"session_id": session, "prompt": "next"}),
            ("buffer-batch", {"session_id": session, "tool_calls": [call]}),
        ]:
            done = run_hook([hook], payload, env)  # a hang fails at run_hook's timeout
            assert done.returncode == 0 and b"SECRET_OF_A" not in done.stdout, (session, hook)
        with tool_context(tmp_path) as ctx:
            tools = Tools(ctx)
            shown = tools.call("get_extraction_payload", {"session_id": session})
            done_call = tools.call("extraction_done", {"session_id": session})
        assert "SECRET_OF_A" not in shown.text, session
        assert "Errno" not in shown.text + done_call.text, (shown.text, done_call.text)
    assert "SECRET_OF_A" in payload_of(tmp_path, "victim")
    assert "SECRET_OF_A" in payload_of(tmp_path, "a.b")


def test_a_socket_or_an_unreadable_file_in_the_queue_is_replaced_and_a_huge_count_capped(
    tmp_path: Path,
) -> None:
    """A socket at the queue path failed every tool call of the session (ENXIO at open,
    before the regular-file check); a file this user may not read (left by a sudo run)
    reads as empty and the next write replaces it. A count file holding a 32-digit number
    was shouted back at the agent as the times it ignored a nudge."""
    import os
    import socket

    from thatch.frontend.queue import files

    jsonl, count, _lock = queue.queue_paths(tmp_path, SESSION)
    count.write_text("9" * 32)
    assert files.read_number(count) == files.LARGEST_COUNT
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(jsonl))
        assert files.read_lines(jsonl) == []
    call = {"tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_use_id": "a"}
    queue.append_calls(tmp_path, SESSION, [call])
    assert [r["tool_use_id"] for r in queue.peek_records(tmp_path, SESSION)] == ["a"]
    if os.geteuid() != 0:  # root reads any file
        jsonl.chmod(0)
        assert files.read_lines(jsonl) == []


def test_a_fifo_left_for_the_next_prompts_chat_line_is_not_waited_on(
    tmp_path: Path, env: dict
) -> None:
    import os

    from thatch.frontend.hooks import chat_anchor

    told = chat_anchor._told_path(env, "k" * 16)
    told.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(told)
    assert chat_anchor._told_before(env, "k" * 16) is None  # a blocking open never returned
