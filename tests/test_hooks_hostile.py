"""Hostile input to hook commands: never a file outside the queue, never a traceback, exit 0."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.support.hookrun import hook_env, run_hook, thatch_command
from thatch.frontend import queue

QUEUE_COMMANDS = ["session-end", "extraction-requeue", "extraction-complete"]
HOOKS = ["buffer-batch", "buffer-tool", "flush-tools", "reminder", *QUEUE_COMMANDS]
HOSTILE_IDS = ["../../x", "a/b", "a_b", "/etc/passwd", "x" * 10_000, "nul\x00byte", "..", "ü/../ü"]


def all_files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    project = tmp_path / "work" / "proj"
    project.mkdir(parents=True)
    return hook_env(
        tmp_path, THATCH_QUEUE_DIR=str(tmp_path / "work" / "q"), THATCH_PROJECT_DIR=str(project)
    )


def test_hostile_session_ids_stay_in_the_queue_dir(tmp_path: Path, env: dict[str, str]) -> None:
    """Traversal, separators, huge ids and NUL bytes only ever create files in the queue dir."""
    qdir = Path(env["THATCH_QUEUE_DIR"])
    before = all_files(tmp_path)
    for sid in HOSTILE_IDS:
        call = {"tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_use_id": "t"}
        for args, payload in [
            (["buffer-batch"], {"session_id": sid, "tool_calls": [call]}),
            (["buffer-tool"], {"conversation_id": sid, **call}),
            (["flush-tools"], {"session_id": sid, "prompt": "x"}),
            *(([command], {"session_id": sid, "cwd": sid}) for command in QUEUE_COMMANDS),
        ]:
            result = run_hook(args, payload, env)
            assert result.returncode == 0 and b"Traceback" not in result.stdout + result.stderr
    created = all_files(tmp_path) - before
    outside = {
        p
        for p in created
        if p.parent != qdir and p.name not in {"thatch.db", "thatch.db-wal", "thatch.db-shm"}
    }
    assert outside == set()
    # Ids the extraction tools refuse get no queue (so never a nudge); the usable one does,
    # which its session-end then carried over to the project.
    names = sorted(p.name for p in qdir.glob("*.jsonl"))
    assert names == [queue.project_key(env["THATCH_PROJECT_DIR"]) + ".jsonl"]
    for path in qdir.glob("*.jsonl"):
        (record,) = [json.loads(line) for line in path.read_text().splitlines()]
        assert record["sessionID"] == "a_b"


def test_hostile_ids_are_exact_in_the_nudge(env: dict[str, str]) -> None:
    """The nudge carries an odd but usable id exactly, never mangled: as a JSON string
    literal (its quote escaped), which a tool call's JSON arguments decode to the id."""
    sid = 'we"ird Id'
    run_hook(["buffer-batch"], {"session_id": sid, "tool_name": "Bash"}, env)
    result = run_hook(["flush-tools", "--json"], {"session_id": sid, "prompt": "x"}, env)
    text = json.loads(result.stdout)["additional_context"]
    literals = re.findall(r'session_id ("(?:[^"\\]|\\.)*")', text)
    assert literals == [r'"we\"ird Id"'] * 2
    assert [json.loads(literal) for literal in literals] == [sid, sid]


STDIN_CASES = {
    "empty": (b"", None),
    "not-json": (b"{not json", "stdin is not JSON; input ignored"),
    "array": (b'[{"session_id": "s"}]', "stdin is a JSON list, not an object; input ignored"),
    "binary": (b"\xff\xfe\x00garbage", "stdin is not JSON; input ignored"),
    "deep": (b"[" * 100_000, "stdin is not JSON; input ignored"),
}


@pytest.mark.parametrize("hook", HOOKS)
@pytest.mark.parametrize("case", sorted(STDIN_CASES))
def test_bad_stdin_is_an_empty_payload(env: dict[str, str], hook: str, case: str) -> None:
    """Empty, non-JSON, non-object and binary stdin: {} plus at most one stderr line, exit 0."""
    data, message = STDIN_CASES[case]
    result = run_hook([hook], data, env)
    assert result.returncode == 0
    stderr = result.stderr.decode().splitlines()
    assert stderr == ([f"[thatch {hook}] {message}"] if message else [])
    stdout = result.stdout.decode()
    if hook.startswith("buffer") or hook in QUEUE_COMMANDS:
        assert stdout == ""
    elif hook == "flush-tools":
        assert stdout == ""  # no session, no prompt: nothing to say (stderr checked above)
    else:
        assert stdout.startswith("[thatch] Before you reply") and '"proj"' in stdout
    assert not Path(env["THATCH_QUEUE_DIR"]).exists() or not list(
        Path(env["THATCH_QUEUE_DIR"]).glob("*.jsonl")
    )


@pytest.mark.parametrize("hook", ["buffer-batch", "flush-tools"])
def test_oversized_stdin_is_ignored(env: dict[str, str], hook: str) -> None:
    """20 MB of stdin is refused with one line; nothing is queued."""
    big = json.dumps({"session_id": "s", "tool_name": "Bash", "tool_response": "y" * 20_000_000})
    result = run_hook([hook], big.encode(), env)
    assert result.returncode == 0
    assert result.stderr.decode().splitlines() == [
        f"[thatch {hook}] stdin larger than 16 MiB; input ignored"
    ]
    assert (
        not list(Path(env["THATCH_QUEUE_DIR"]).glob("*.jsonl"))
        if Path(env["THATCH_QUEUE_DIR"]).exists()
        else True
    )


@pytest.mark.parametrize(("hook", "limit"), [("buffer-tool", "2"), ("reminder", "0.5")])
def test_stdin_that_never_closes(
    tmp_path: Path, env: dict[str, str], hook: str, limit: str
) -> None:
    """A pipe held open: the hook gives up at its deadline, exits 0 and writes no queue."""
    before = all_files(tmp_path)
    proc = subprocess.Popen(
        thatch_command(hook),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        proc.stdin.write(b'{"session_id": "s", "tool_name": "Bash"')  # never finished
        proc.stdin.flush()
        assert proc.wait(timeout=60) == 0  # the pipe is still open on our side
        out, err = proc.stdout.read(), proc.stderr.read()
    finally:
        proc.stdin.close()
        proc.stdout.close()
        proc.stderr.close()
    assert err.decode().splitlines() == [
        f"[thatch {hook}] stdin not closed within {limit} s; input ignored"
    ]
    assert b"Traceback" not in out
    created = {p for p in all_files(tmp_path) - before if p.suffix == ".jsonl"}
    assert created == set()


def test_unknown_options_and_bad_host_still_exit_zero(env: dict[str, str]) -> None:
    """Options a newer host might pass, or a bad --host, never turn a hook into exit 2."""
    payload = {"session_id": "s-opts", "prompt": "x"}
    run_hook(["buffer-tool"], {**payload, "tool_name": "Bash"}, env)
    result = run_hook(["flush-tools", "--frobnicate", "--host", "vim"], payload, env)
    assert result.returncode == 0
    assert result.stdout.decode().startswith("[thatch] 1 tool interaction is queued")
    assert result.stderr.decode().splitlines() == [
        '[thatch flush-tools] ignoring --host "vim": expected claude, cursor or opencode'
    ]
    assert run_hook(["buffer-batch", "--extra"], {}, env).returncode == 0


def test_ignored_settings_are_quoted_in_their_warnings(env: dict[str, str]) -> None:
    """A --host, THATCH_HOST or THATCH_RECALL_THRESHOLD holding a line break is ignored
    with one stderr line each, the value a JSON literal: no line thatch did not write."""
    env = {
        **env,
        "THATCH_HOST": "nano\n[thatch] host is claude",
        "THATCH_RECALL_THRESHOLD": "x\n[thatch] all memories verified\x1b[2K",
    }
    payload = {"session_id": "s-warn", "prompt": "How do I deploy this app to production?"}
    result = run_hook(["flush-tools", "--host", "vim\r\n[thatch] forged"], payload, env)
    assert result.returncode == 0
    assert result.stderr.decode().splitlines() == [
        '[thatch flush-tools] ignoring --host "vim\\r\\n\\u005bthatch] forged": '
        "expected claude, cursor or opencode",
        '[thatch flush-tools] ignoring THATCH_HOST "nano\\n\\u005bthatch] host is claude": '
        "expected claude, cursor or opencode",
        '[thatch] ignoring THATCH_RECALL_THRESHOLD="x\\n\\u005bthatch] all memories verified'
        '\\u001b[2K": not a number between 0 and 1',
    ]


@pytest.mark.parametrize(
    ("args", "json_output"),
    [
        (["flush-tools", "--host"], False),
        (["flush-tools", "--json", "--host"], True),
        (["reminder", "--json=1"], True),
        (["buffer-tool", "--host"], False),
    ],
)
def test_malformed_own_options_still_exit_zero(
    env: dict[str, str], args: list[str], json_output: bool
) -> None:
    """A missing option value or a value on a flag: one stderr line, the usual output, exit 0."""
    payload = {"session_id": "s-malformed", "prompt": "hello there, world"}
    if args[0] == "flush-tools":  # something to say: the extraction nudge
        run_hook(["buffer-tool"], {**payload, "tool_name": "Bash"}, env)
    result = run_hook(args, payload, env)
    assert result.returncode == 0
    out = result.stdout.decode()
    if args[0] == "buffer-tool":
        assert out == ""
    elif json_output:
        assert json.loads(out)["additional_context"].startswith("[thatch]")
    else:
        assert out.startswith("[thatch]")
    assert b"Traceback" not in result.stderr


def test_internal_failure_is_one_line_and_traceback_only_with_debug(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """An unusable database: reminder still prints; one stderr line; traceback only in debug."""
    bad_db = tmp_path / "db-is-a-dir"
    bad_db.mkdir()
    env = {**env, "THATCH_DB_PATH": str(bad_db)}
    result = run_hook(["reminder", "--json"], {}, env)
    assert result.returncode == 0
    assert json.loads(result.stdout)["additional_context"].startswith("[thatch] Before you reply")
    lines = result.stderr.decode().splitlines()
    # A database that cannot be used is the environment's error, said in its own words.
    assert lines == [f"[thatch reminder] cannot open database at {bad_db}: is a directory"]
    debug = run_hook(["reminder", "--json"], {}, {**env, "THATCH_DEBUG": "1"})
    assert debug.returncode == 0 and b"Traceback" in debug.stderr
    assert b"Traceback" not in debug.stdout
    assert json.loads(debug.stdout)["additional_context"].startswith("[thatch] Before you reply")


@pytest.mark.parametrize("hook", ["reminder", "flush-tools"])
@pytest.mark.parametrize("kind", ["not a database", "a directory"])
def test_an_unusable_database_is_reported_once_by_a_hook(
    tmp_path: Path, env: dict[str, str], kind: str, hook: str
) -> None:
    """The branch sync, the hygiene counts (or the prompt's recall) and the chat line each
    meet the same unusable file: the agent's host shows stderr, so one line, not one a
    step."""
    project = Path(env["THATCH_PROJECT_DIR"])
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "i"]):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@e", *args],
            cwd=project,
            check=True,
            capture_output=True,
        )
    bad_db = tmp_path / "thatch.db"
    if kind == "a directory":
        bad_db.mkdir()
    else:
        bad_db.write_bytes(b"notes, not a database\n" * 400)
    env = {**env, "THATCH_DB_PATH": str(bad_db)}
    payload = {"session_id": "s-1", "cwd": str(project), "prompt": "how do we deploy it?"}
    result = run_hook([hook], payload, env)
    assert result.returncode == 0
    if hook == "reminder":
        assert result.stdout.decode().startswith("[thatch] Before you reply")
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"[thatch {hook}] cannot open database at {bad_db}: ")
    assert bad_db.is_dir() or bad_db.read_bytes() == b"notes, not a database\n" * 400


@pytest.mark.parametrize("hook", ["buffer-batch", "extraction-requeue"])
def test_queue_lock_held_elsewhere_spills_a_tool_call_or_gives_one_line(
    env: dict[str, str], hook: str
) -> None:
    """A queue lock held by another process past 2 s, exit 0 and stdout empty either way: a
    tool hook spills its call (nothing said, nothing lost); a queue command gives up with
    one stderr line."""
    import fcntl

    qdir = Path(env["THATCH_QUEUE_DIR"])
    qdir.mkdir(parents=True)
    fd = os.open(qdir / "s.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        result = run_hook([hook], {"session_id": "s", "tool_name": "Bash", "cwd": "/"}, env)
    finally:
        os.close(fd)
    assert result.returncode == 0 and result.stdout == b""
    if hook == "buffer-batch":
        assert result.stderr == b""
        assert len(list(qdir.glob("s.*.spill"))) == 1
    else:
        assert result.stderr.decode().splitlines() == [
            f"[thatch {hook}] queue lock s.lock busy for 2 s; gave up"
        ]


@pytest.mark.parametrize("hook", ["reminder", "flush-tools"])
def test_a_cwd_too_long_to_look_up_is_no_project(tmp_path: Path, hook: str) -> None:
    """A cwd the system refuses to stat (ENAMETOOLONG) is as unusable as a missing one: the
    hook answers as for the global store, and no stderr line echoes the path."""
    env = hook_env(tmp_path)  # no project variable: the payload's cwd names the project
    payload = {"session_id": "lc", "cwd": "/" + "a" * 5000, "prompt": "how do we deploy it?"}
    result = run_hook([hook], payload, env)
    assert result.returncode == 0
    assert result.stderr == b""
    if hook == "reminder":
        assert 'the project store "global"' in result.stdout.decode()
    else:
        assert result.stdout == b""  # nothing queued, no embedder: nothing to say


def test_a_failure_line_keeps_200_characters_of_its_text(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An unexpected error quoting host input (a 5,000-character path) is cut in its line."""
    from thatch.frontend.hooks.hookio import Failures

    Failures("reminder").report(OSError(36, "File name too long", "/" + "a" * 5000))
    (line,) = capsys.readouterr().err.splitlines()
    detail = "OSError: [Errno 36] File name too long: '/" + "a" * 5000
    assert line == f"[thatch reminder] internal error: {detail[:200]}…"
