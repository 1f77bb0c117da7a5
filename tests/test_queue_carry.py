"""Carried-over calls (docs/hooks.md §carry-over): what an extraction nudge names can be
fetched and completed with exactly its arguments, whichever session-end moved the calls
in between, and every carried call is extracted once and only once, by real hook
processes racing each other."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.embedder_cleanup import wait_until
from tests.support.fake_embedder import tool_context
from tests.support.hookrun import cursor_prompt, hook_env, run_hook, thatch_command
from tests.support.host_payloads import host_payload
from thatch.frontend import queue
from thatch.frontend.queue.files import read_lines
from thatch.frontend.tools.memory_tools import Tools

S = "c246e25f-2b7e-4f9a-ae4d-8952afdc55c9"  # the recorded Claude Code session
T = "5d0c5a51-7b4e-4f0e-9a35-0c2b7f0e1a11"  # the project's next session
G = "9e1c4b2a-6d3f-4c8e-b7a5-2f0d1e3c4b5a"  # a session whose host died: no session-end
AGENT = "a173cf817a18f6fa8"
HOUR = 3600
NUDGE = re.compile(rb'\[thatch\] (\d+) tool interactions? (?:is|are) queued.*?session_id ("[^"]*")')
EMPTY = "No queued tool interactions found for this session."


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return hook_env(tmp_path)


def qdir(tmp_path: Path) -> Path:
    return tmp_path / "queue"


def ok(result: subprocess.CompletedProcess[bytes]) -> None:
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")


def queue_calls(env: dict[str, str], project: Path, session: str, *ids: str) -> None:
    for use_id in ids:
        payload = host_payload("claude-PostToolUse-Bash")
        payload.update(tool_use_id=use_id, session_id=session, cwd=str(project))
        ok(run_hook(["buffer-batch"], payload, env))


def session_end(env: dict[str, str], project: Path, session: str, reason: str = "other") -> None:
    payload = host_payload("claude-SessionEnd")
    payload.update(session_id=session, cwd=str(project), reason=reason)
    ok(run_hook(["session-end"], payload, env))


def prompt_payload(project: Path, session: str) -> dict[str, object]:
    payload = host_payload("claude-UserPromptSubmit-task-notification")
    payload.update(prompt="continue with the widgets", session_id=session, cwd=str(project))
    return payload


def nudge(env: dict[str, str], project: Path, session: str) -> tuple[int, str] | None:
    """(n, the session id it names) of the prompt hook's extraction nudge, or None."""
    result = run_hook(["flush-tools"], prompt_payload(project, session), env)
    assert result.returncode == 0, result.stderr
    found = NUDGE.search(result.stdout)
    return (int(found.group(1)), json.loads(found.group(2))) if found else None


def carried(tmp_path: Path) -> list[dict[str, object]]:
    return [r for p in qdir(tmp_path).glob("~carry-*.jsonl") for r in read_lines(p)]


def age_queue(tmp_path: Path, session: str, seconds: float) -> None:
    """Every file of the session's queue last touched ``seconds`` ago, and the queue's daily
    pass due (its marker as old)."""
    then = time.time() - seconds
    directory = qdir(tmp_path)
    marker = directory / ".last-cleanup"
    paths = [*directory.glob(f"{queue.safe_name(session)}.*")]
    for path in [*paths, marker] if marker.exists() else paths:
        os.utime(path, (then, then), follow_symlinks=False)


def queued_ids(tmp_path: Path, session: str) -> list[str]:
    return [str(r.get("tool_use_id")) for r in queue.peek_records(qdir(tmp_path), session)]


def prompts_at_once(
    tmp_path: Path, env: dict[str, str], project: Path, sessions: tuple[str, ...]
) -> list[re.Match[bytes] | None]:
    """Real flush-tools processes of ``sessions`` started together: each one's nudge match."""
    procs = []
    for session in sessions:
        stdin = tmp_path / f"prompt-{session}.json"
        stdin.write_text(json.dumps(prompt_payload(project, session)))
        with stdin.open("rb") as handle:
            procs.append(
                subprocess.Popen(
                    thatch_command("flush-tools"),
                    stdin=handle,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=env,
                )
            )
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert (proc.returncode, err) == (0, b"")
        outs.append(NUDGE.search(out))
    return outs


def fetched_ids(tools: Tools, session: str) -> list[str]:
    """The Bash commands' ids get_extraction_payload hands out (none: [])."""
    text = tools.call("get_extraction_payload", {"session_id": session}).text
    if text == EMPTY:
        return []
    return [i["title"] for i in json.loads(text)["interactions"]]


def test_a_fetch_gets_what_a_session_end_carried_after_the_nudge(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The nudge names S; a session-end of S runs before its extractor fetches (Claude's
    SessionEnd of an earlier process of S, a second process of S): the fetch with the
    nudge's arguments still gets both calls, extraction_done removes them from everywhere,
    and the next prompt has no nudge."""
    queue_calls(env, tmp_path, S, "a", "b")
    assert nudge(env, tmp_path, S) == (2, S)
    session_end(env, tmp_path, S)
    assert len(carried(tmp_path)) == 2
    with tool_context(tmp_path) as ctx:
        tools = Tools(ctx)
        interactions = json.loads(tools.call("get_extraction_payload", {"session_id": S}).text)[
            "interactions"
        ]
        assert [i["tool"] for i in interactions] == ["Bash", "Bash"]
        assert tools.call("extraction_done", {"session_id": S}).text == "[acknowledged]"
    assert queue.peek_records(qdir(tmp_path), S) == [] and carried(tmp_path) == []
    assert nudge(env, tmp_path, S) is None
    assert nudge(env, tmp_path, T) is None


def test_session_end_on_clear_holds_a_fetched_snapshot_for_its_extractor(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """/clear ends S while its background extractor has fetched S's calls: the project's
    next session is not nudged about them (that would extract them twice); the
    extractor's extraction_done(S) removes them; a call queued after the fetch goes on."""
    queue_calls(env, tmp_path, S, "a", "b")
    with tool_context(tmp_path) as ctx:
        tools = Tools(ctx)
        assert len(fetched_ids(tools, S)) == 2
        queue_calls(env, tmp_path, S, "c")  # after the fetch: not part of the snapshot
        session_end(env, tmp_path, S, reason="clear")
        assert nudge(env, tmp_path, T) == (1, T)
        assert [r["tool_use_id"] for r in queue.peek_records(qdir(tmp_path), T)] == ["c"]
        assert tools.call("extraction_done", {"session_id": S}).text == "[acknowledged]"
    assert carried(tmp_path) == []
    assert [r["tool_use_id"] for r in queue.peek_records(qdir(tmp_path), T)] == ["c"]


def test_session_end_for_good_makes_a_fetched_snapshot_pending_again(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Any other end takes the extractor with the session: the next session adopts and is
    nudged about every call at once."""
    queue_calls(env, tmp_path, S, "a", "b")
    queue.accept(qdir(tmp_path), S)
    session_end(env, tmp_path, S, reason="prompt_input_exit")
    assert nudge(env, tmp_path, T) == (2, T)


def test_held_calls_are_released_by_requeue_and_by_expiry(
    tmp_path: Path, env: dict[str, str]
) -> None:
    directory = qdir(tmp_path)
    queue_calls(env, tmp_path, S, "a")
    queue.accept(directory, S)
    session_end(env, tmp_path, S, reason="resume")
    assert queue.adopt_carried(directory, T, str(tmp_path)) == 0
    ok(run_hook(["extraction-requeue"], {"session_id": S, "cwd": str(tmp_path)}, env))
    assert nudge(env, tmp_path, T) == (1, T)
    assert carried(tmp_path) == []

    queue_calls(env, tmp_path, S, "b")
    queue.accept(directory, S)
    session_end(env, tmp_path, S, reason="clear")
    later = time.time() + queue.ACCEPTED_TTL_SECONDS + 1
    assert queue.adopt_carried(directory, "third", str(tmp_path), now=later) == 1


def test_subagent_stop_completes_only_its_own_carried_snapshot(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The extractor's SubagentStop (agent_id) completes the snapshot it fetched even after
    /clear carried it; another sub-agent's stop leaves it held."""
    directory = qdir(tmp_path)
    queue_calls(env, tmp_path, S, "a", "b")
    queue.accept(directory, S)
    fetch = host_payload("claude-PostToolBatch-subagent")
    fetch.update(session_id=S, agent_id=AGENT, cwd=str(tmp_path))
    fetch["tool_calls"] = [
        {
            "tool_name": "mcp__thatch__get_extraction_payload",
            "tool_input": {"session_id": S},
            "tool_use_id": "f1",
            "tool_response": [{"type": "text", "text": '{"interactions":[]}'}],
        }
    ]
    ok(run_hook(["buffer-batch"], fetch, env))
    session_end(env, tmp_path, S, reason="clear")
    stop = {"session_id": S, "agent_id": "someone-else", "cwd": str(tmp_path)}
    ok(run_hook(["extraction-complete"], stop, env))
    assert len(carried(tmp_path)) == 2
    ok(run_hook(["extraction-complete"], {**stop, "agent_id": AGENT}, env))
    assert carried(tmp_path) == []


def test_the_project_is_one_key_through_a_symlink(tmp_path: Path, env: dict[str, str]) -> None:
    """The hooks name the project as the host passes it (a symlinked path); the MCP server
    by its working directory (symlinks resolved): its fetch finds the carried calls."""
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    queue_calls(env, link, S, "a")
    session_end(env, link, S)
    directory = qdir(tmp_path)
    assert [r["tool_use_id"] for r in queue.accept(directory, S, project=str(real))] == ["a"]


def test_two_sessions_prompting_at_once_adopt_carried_calls_once(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Real processes: sessions A and B of the project prompt at the same moment, each
    round after a session-end carried two calls: exactly one of them is nudged about
    them, and the calls end up queued exactly once."""
    project = tmp_path
    for round_ in range(4):
        ids = (f"r{round_}a", f"r{round_}b")
        queue_calls(env, project, S, *ids)
        session_end(env, project, S)
        outs = prompts_at_once(tmp_path, env, project, (f"A{round_}", f"B{round_}"))
        nudged = [json.loads(m.group(2)) for m in outs if m]
        assert len(nudged) == 1 and outs[[bool(m) for m in outs].index(True)].group(1) == b"2"
        queued = [
            r["tool_use_id"]
            for session in (f"A{round_}", f"B{round_}")
            for r in queue.peek_records(qdir(tmp_path), session)
        ]
        assert sorted(queued) == sorted(ids)
        assert [r["tool_use_id"] for r in queue.peek_records(qdir(tmp_path), nudged[0])] == list(
            ids
        )
        assert carried(tmp_path) == []


def test_a_prompt_and_a_fetch_racing_share_carried_calls_once(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Real processes: a prompt of session A (flush-tools) and a fetch of session B (the MCP
    tool, in this process) at once: each carried call ends up in exactly one queue."""
    for round_ in range(4):
        ids = (f"q{round_}a", f"q{round_}b")
        queue_calls(env, tmp_path, S, *ids)
        session_end(env, tmp_path, S)
        queue.increment_count(qdir(tmp_path), f"B{round_}")  # B's nudge named B earlier
        stdin = tmp_path / "prompt.json"
        stdin.write_text(json.dumps(prompt_payload(tmp_path, f"A{round_}")))
        with stdin.open("rb") as handle:
            proc = subprocess.Popen(
                thatch_command("flush-tools"),
                stdin=handle,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
            )
        fetched = queue.accept(qdir(tmp_path), f"B{round_}", project=str(tmp_path))
        out, err = proc.communicate(timeout=120)
        assert (proc.returncode, err) == (0, b"")
        in_a = queue.peek_records(qdir(tmp_path), f"A{round_}")
        got = [r["tool_use_id"] for r in [*fetched, *in_a]]
        assert sorted(got) == sorted(ids)
        assert (NUDGE.search(out) is not None) == bool(in_a)
        assert carried(tmp_path) == []
    assert os.path.isdir(qdir(tmp_path))


def test_a_fetch_by_a_session_no_nudge_named_adopts_nothing(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """An id the queue never saw (an opencode task child fetching with its own id) gets
    nothing, and the carried calls stay for a session whose nudge announces them: adopted
    under the child's id they would never be announced again."""
    queue_calls(env, tmp_path, S, "a")
    session_end(env, tmp_path, S)
    with tool_context(tmp_path) as ctx:
        assert fetched_ids(Tools(ctx), "ses_child_never_nudged") == []
    assert len(carried(tmp_path)) == 1
    assert nudge(env, tmp_path, T) == (1, T)


def test_a_session_of_another_host_adopts_carried_calls_once(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Claude Code's session ends; the next prompt in the project is opencode's (the
    plugin's payload has no cwd: the hook's working directory is the project): its nudge
    names its own session with opencode's tool names, its fetch gets the call, and a Claude
    session prompting afterwards is not nudged about it again."""
    queue_calls(env, tmp_path, S, "a")
    session_end(env, tmp_path, S)
    opencode = "ses_2f0a6c1d3ffeQx8mB2kq7Lr1Zt"
    result = run_hook(
        ["flush-tools", "--json", "--host", "opencode"],
        {"session_id": opencode, "prompt": "continue with the widgets"},
        env,
        cwd=tmp_path,
    )
    text = json.loads(result.stdout)["additional_context"]
    assert "1 tool interaction is queued" in text
    assert f'thatch_get_extraction_payload with session_id "{opencode}"' in text
    assert nudge(env, tmp_path, T) is None
    with tool_context(tmp_path) as ctx:
        tools = Tools(ctx)
        assert len(fetched_ids(tools, opencode)) == 1
        tools.call("extraction_done", {"session_id": opencode})
    assert queue.peek_records(qdir(tmp_path), opencode) == [] and carried(tmp_path) == []


def test_a_cursor_session_is_its_conversation_id_in_every_hook(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Cursor's payloads may carry a session_id beside the conversation_id every event
    has: the tool hook, the prompt hook, extraction-status and session-end (run as
    Cursor runs them: CURSOR_PROJECT_DIR set, no --host) all name one queue."""
    env = {**env, "CURSOR_PROJECT_DIR": str(tmp_path)}
    ids = {"conversation_id": "conv-7", "session_id": "sess-7"}
    call = {"tool_name": "Shell", "tool_input": {"command": "make test"}, "tool_output": "ok"}
    ok(run_hook(["buffer-tool"], {**ids, **call, "tool_use_id": "cu1"}, env))
    text = cursor_prompt(env, {**ids, "prompt": "ok"}, "--json", host="")
    assert "1 tool interaction is queued" in text and 'session_id "conv-7"' in text
    status = run_hook(["extraction-status"], ids, env)
    assert json.loads(status.stdout) == {"pending": 1, "accepted": False}
    ok(run_hook(["buffer-tool"], {**ids, **call, "tool_use_id": "cu2"}, env))
    ok(run_hook(["session-end"], {**ids, "workspace_roots": [str(tmp_path)]}, env))
    assert [r["tool_use_id"] for r in carried(tmp_path)] == ["cu1", "cu2"]
    assert queue.peek_records(qdir(tmp_path), "conv-7") == []


def git_init(directory: Path) -> None:
    subprocess.run(["git", "init", "-q", str(directory)], check=True, capture_output=True)


def test_a_session_in_a_subdirectory_carries_to_the_whole_checkout(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A session whose directory is proj/src/widgets ends; the next session of the project
    prompts at proj's root: it is nudged about the carried call (the carry file is the
    checkout's, not the exact directory's), and a session in another subdirectory then
    finds nothing left."""
    project = tmp_path / "proj"
    sub = project / "src" / "widgets"
    sub.mkdir(parents=True)
    (project / "docs").mkdir()
    git_init(project)
    queue_calls(env, sub, S, "a")
    session_end(env, sub, S)
    assert nudge(env, project, T) == (1, T)
    assert nudge(env, project / "docs", "other-session") is None


def test_calls_carried_under_a_directory_key_are_still_adopted_there(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A carry file named by the exact directory (as before carry files were named by the
    checkout: here, the directory was not in a checkout yet) is adopted by the next
    session prompting in that directory."""
    project = tmp_path / "proj"
    sub = project / "src"
    sub.mkdir(parents=True)
    queue_calls(env, sub, S, "a")
    session_end(env, sub, S)
    git_init(project)
    assert nudge(env, sub, T) == (1, T)
    assert carried(tmp_path) == []


def test_adopting_both_carry_files_counts_the_calls_the_queue_kept(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """proj/src has a carry file under its own name (15 calls of an hour ago, carried
    before proj was a checkout) and one under the checkout's (15 calls of two hours ago).
    S, with one call of its own, adopts both: the second file's calls push out 11 of the
    first's, and adoption says the 19 its queue kept, not 30."""
    project = tmp_path / "proj"
    sub = project / "src"
    sub.mkdir(parents=True)
    now_ms = int(time.time() * 1000)
    opencode_calls(env, sub, "L", "l", now_ms - HOUR * 1000, 15)
    session_end(env, sub, "L")
    git_init(project)
    opencode_calls(env, sub, "C", "c", now_ms - 2 * HOUR * 1000, 15)
    session_end(env, sub, "C")
    assert len(list(qdir(tmp_path).glob("~carry-*.jsonl"))) == 2
    claude_batch(env, sub, S, "s0")
    assert queue.adopt_carried(qdir(tmp_path), S, str(sub)) == 19
    assert queued_ids(tmp_path, S) == [
        *(f"c{i}" for i in range(11, 15)),
        *(f"l{i}" for i in range(15)),
        "s0",
    ]
    assert carried(tmp_path) == []


def lock_taken(path: Path) -> bool:
    """Whether another process holds the flock on ``path`` (probed without waiting)."""
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases a flock this probe took
    return False


def waits_for_lock(pid: int, path: Path) -> bool:
    """Whether process ``pid`` is blocked in flock on ``path`` (Linux: /proc/locks lists a
    waiter as ``-> FLOCK ... <pid> <dev>:<inode>``)."""
    inode = f":{os.stat(path).st_ino} "
    return any(
        "->" in line and f" {pid} " in line and inode in line
        for line in Path("/proc/locks").read_text().splitlines()
    )


def test_a_busy_carry_file_costs_the_adopting_session_none_of_its_own_calls(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """S's prompt adopts the project's two carry files while holding S's own lock, and a
    tool hook of S comes in meanwhile: the first carry file is freed only once that hook
    waits, the second stays locked (a process stopped while merging). Adoption waited 2 s
    for it, past the waiting hook's own 2 s, and the hook dropped S's call. Adoption now
    waits a moment for a carry file and leaves it for a later prompt: the call is queued,
    and the next prompt adopts every carried call."""
    project = tmp_path / "proj"
    sub = project / "src"
    sub.mkdir(parents=True)
    queue_calls(env, sub, "L", "l0")
    session_end(env, sub, "L")  # under the directory's own name: proj is no checkout yet
    git_init(project)
    queue_calls(env, sub, "C", "c0")
    session_end(env, sub, "C")  # under the checkout's: adopted first
    checkout, legacy = (
        paths[1] for paths in queue.carry._carry_paths_read(qdir(tmp_path), str(sub))
    )
    holders = {path: os.open(path, os.O_RDWR) for path in (checkout, legacy)}
    for fd in holders.values():
        fcntl.flock(fd, fcntl.LOCK_EX)
    prompt_stdin = tmp_path / "prompt.json"
    prompt_stdin.write_text(json.dumps(prompt_payload(sub, S)))
    tool_stdin = tmp_path / "tool.json"
    payload = host_payload("claude-PostToolUse-Bash")
    payload.update(tool_use_id="s0", session_id=S, cwd=str(sub))
    tool_stdin.write_text(json.dumps(payload))
    session_lock = queue.queue_paths(qdir(tmp_path), S)[2]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for command, stdin in (("flush-tools", prompt_stdin), ("buffer-batch", tool_stdin)):
            if command == "buffer-batch":
                wait_until(
                    lambda: lock_taken(session_lock) or procs[0].poll() is not None,
                    60,
                    "the prompt to take S's lock, or to end",
                )
            with stdin.open("rb") as handle:
                procs.append(
                    subprocess.Popen(
                        thatch_command(command),
                        stdin=handle,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        env=env,
                    )
                )
        tool = procs[1]
        wait_until(
            lambda: tool.poll() is not None or waits_for_lock(tool.pid, session_lock),
            60,
            "the tool hook to wait for S's lock, or to end",
        )
        os.close(holders.pop(checkout))
        outs = [proc.communicate(timeout=120) for proc in procs]
    finally:
        for fd in holders.values():
            os.close(fd)
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert [proc.returncode for proc in procs] == [0, 0], outs
    assert "s0" in queued_ids(tmp_path, S), outs[1]
    found = nudge(env, sub, S)
    assert found is not None and found[0] == 3
    assert sorted(queued_ids(tmp_path, S)) == ["c0", "l0", "s0"]
    assert carried(tmp_path) == []


def test_a_session_whose_end_never_ran_is_adopted_by_the_projects_next_prompt(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """G queued two calls and its host died (killed, crashed, SessionEnd timed out): no
    session-end ran. A day later the project's next session prompts: it takes G's calls
    over as if G's session-end had run late, its nudge announces them, its fetch gets them
    and its extraction_done removes them; G's queue is gone."""
    queue_calls(env, tmp_path, G, "a", "b")
    age_queue(tmp_path, G, 25 * HOUR)
    assert nudge(env, tmp_path, T) == (2, T)
    assert queued_ids(tmp_path, T) == ["a", "b"]
    assert queued_ids(tmp_path, G) == [] and carried(tmp_path) == []
    with tool_context(tmp_path) as ctx:
        tools = Tools(ctx)
        assert len(fetched_ids(tools, T)) == 2
        assert tools.call("extraction_done", {"session_id": T}).text == "[acknowledged]"
    assert nudge(env, tmp_path, T) is None
    assert nudge(env, tmp_path, "third-session") is None


def test_an_abandoned_session_of_another_project_goes_to_that_project(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """G worked in another project: a session of this one is not nudged about G's call;
    the next session of G's project is."""
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    mine.mkdir()
    theirs.mkdir()
    queue_calls(env, theirs, G, "a")
    age_queue(tmp_path, G, 25 * HOUR)
    assert nudge(env, mine, T) is None
    assert queued_ids(tmp_path, T) == []
    assert nudge(env, theirs, "their-next") == (1, "their-next")


def test_a_session_idle_for_less_than_a_day_keeps_its_queue(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """S has been idle for 23 hours (its window may still be open): its calls stay its
    own, while G's, untouched for 25 hours, are taken over."""
    queue_calls(env, tmp_path, S, "a")
    queue_calls(env, tmp_path, G, "b")
    age_queue(tmp_path, S, 23 * HOUR)
    age_queue(tmp_path, G, 25 * HOUR)
    assert nudge(env, tmp_path, T) == (1, T)
    assert queued_ids(tmp_path, T) == ["b"]
    assert queued_ids(tmp_path, S) == ["a"]


def test_a_session_with_a_fresh_snapshot_keeps_its_queue(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """An extractor fetched S's calls moments ago (however old its files look): they stay
    S's, for that extractor to complete; G's are taken over."""
    queue_calls(env, tmp_path, S, "a")
    assert [r["tool_use_id"] for r in queue.accept(qdir(tmp_path), S)] == ["a"]
    queue_calls(env, tmp_path, G, "b")
    age_queue(tmp_path, S, 25 * HOUR)
    age_queue(tmp_path, G, 25 * HOUR)
    assert nudge(env, tmp_path, T) == (1, T)
    assert queued_ids(tmp_path, T) == ["b"]
    assert queued_ids(tmp_path, S) == ["a"]


def test_queues_that_do_not_say_their_project_are_left_alone(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Beside G's abandoned queue: a queue an earlier release wrote (no project recorded),
    a FIFO and a symlink to a live session's queue where a queue would be, and a project
    file that is a FIFO or names no absolute directory. The prompt neither hangs on nor
    follows them, takes G's call over, and leaves every other file as it was."""
    directory = qdir(tmp_path)
    queue_calls(env, tmp_path, G, "g")
    queue_calls(env, tmp_path, S, "live")  # S is working right now
    record = (directory / f"{G}.jsonl").read_text().replace('"g"', '"x"')
    project_file = json.dumps({"project": str(tmp_path)})  # as the tool hooks record it
    (directory / "earlier.jsonl").write_text(record)
    os.mkfifo(directory / "fifo.jsonl")
    (directory / "fifo.project").write_text(project_file)
    (directory / "link.jsonl").symlink_to(directory / f"{S}.jsonl")
    (directory / "link.project").write_text(project_file)
    (directory / "odd.jsonl").write_text(record)
    os.mkfifo(directory / "odd.project")
    (directory / "relative.jsonl").write_text(record)
    (directory / "relative.project").write_text(json.dumps({"project": "proj"}))
    for session in (G, "earlier", "fifo", "link", "odd", "relative"):
        age_queue(tmp_path, session, 25 * HOUR)
    assert nudge(env, tmp_path, T) == (1, T)
    assert queued_ids(tmp_path, T) == ["g"]
    assert queued_ids(tmp_path, S) == ["live"]
    assert (directory / f"{S}.jsonl").is_file() and (directory / "link.jsonl").is_symlink()
    for stem in ("earlier", "odd", "relative"):
        assert (directory / f"{stem}.jsonl").read_text() == record
    assert carried(tmp_path) == []


def test_two_sessions_prompting_at_once_take_an_abandoned_queue_once(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Real processes: sessions A and B of the project prompt at the same moment, each
    round after a session died with two calls queued: exactly one of them is nudged about
    them, and the calls end up queued exactly once."""
    for round_ in range(4):
        ids = (f"r{round_}a", f"r{round_}b")
        dead = f"dead-{round_}"
        queue_calls(env, tmp_path, dead, *ids)
        age_queue(tmp_path, dead, 25 * HOUR)
        sessions = (f"A{round_}", f"B{round_}")
        outs = prompts_at_once(tmp_path, env, tmp_path, sessions)
        nudged = [(m.group(1), json.loads(m.group(2))) for m in outs if m]
        assert len(nudged) == 1 and nudged[0][0] == b"2"
        assert sorted(i for s in sessions for i in queued_ids(tmp_path, s)) == sorted(ids)
        assert queued_ids(tmp_path, nudged[0][1]) == list(ids)
        assert queued_ids(tmp_path, dead) == [] and carried(tmp_path) == []


def test_a_pass_carries_a_hundred_sessions_oldest_first_and_the_next_prompt_goes_on(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """101 sessions died, each with one call (files as the tool hooks write them). The
    first prompt's pass carries the 100 oldest (its bound), the carry file keeping the
    newest 20 calls as ever; the next prompt's pass goes on at once, not a day later,
    and carries the last one."""
    directory = qdir(tmp_path)
    directory.mkdir(mode=0o700)
    project_file = json.dumps({"project": str(tmp_path)})
    now = time.time()
    for i in range(101):
        stem = f"dead-{i:03}"
        record = {"tool": "Bash", "sessionID": stem, "args": {}, "title": "", "output": "ok"}
        (directory / f"{stem}.jsonl").write_text(json.dumps({**record, "tool_use_id": stem}))
        (directory / f"{stem}.project").write_text(project_file)
        then = now - 25 * HOUR - (101 - i) * 60  # dead-100 died last
        for suffix in (".jsonl", ".project"):
            os.utime(directory / f"{stem}{suffix}", (then, then))
    assert nudge(env, tmp_path, T) == (20, T)
    assert queued_ids(tmp_path, T) == [f"dead-{i:03}" for i in range(80, 100)]
    assert nudge(env, tmp_path, "next-session") == (1, "next-session")
    assert queued_ids(tmp_path, "next-session") == ["dead-100"]
    assert list(directory.glob("dead-*.jsonl")) == [] and carried(tmp_path) == []


def timed_calls(prefix: str, ended_at_ms: int, count: int) -> list[dict[str, object]]:
    """``count`` Bash calls ``<prefix>0``… that ended a millisecond apart from ``ended_at_ms``
    (times as the opencode plugin passes them)."""
    return [
        {
            "tool_name": "Bash",
            "tool_input": {"command": f"{prefix}{i}"},
            "tool_use_id": f"{prefix}{i}",
            "tool_response": "ok",
            "ended_at": ended_at_ms + i,
        }
        for i in range(count)
    ]


def test_the_twenty_call_cap_keeps_the_newest_calls_when_queues_merge(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Dead ran 20 calls 30 hours ago and died; Fresh ran 20 an hour ago and ended. The
    pass carries Dead's calls after Fresh's: the carry file keeps Fresh's 20. Live, which
    ran 10 calls just now, then adopts them: it keeps its own 10 and Fresh's newest 10."""
    directory = qdir(tmp_path)
    now_ms = int(time.time() * 1000)
    project = str(tmp_path)
    queue.append_calls(
        directory, "dead", timed_calls("old", now_ms - 30 * HOUR * 1000, 20), project=project
    )
    age_queue(tmp_path, "dead", 30 * HOUR)
    queue.append_calls(
        directory, "fresh", timed_calls("new", now_ms - HOUR * 1000, 20), project=project
    )
    queue.carry_over(directory, "fresh", project)
    assert queue.cleanup(directory, force=True) >= 0
    assert [r["tool_use_id"] for r in carried(tmp_path)] == [f"new{i}" for i in range(20)]
    queue.append_calls(directory, "live", timed_calls("live", now_ms, 10), project=project)
    assert queue.adopt_carried(directory, "live", project) == 10  # the cap dropped 10
    assert queued_ids(tmp_path, "live") == [
        *(f"new{i}" for i in range(10, 20)),
        *(f"live{i}" for i in range(10)),
    ]


def test_the_cap_drops_calls_an_extractor_has_before_calls_waiting_for_one(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """S queued 20 calls now and its extractor fetched them; Ended's 5 calls of an hour ago
    wait in the carry file. S's next prompt adopts them while the extractor works: the cap
    drops S's handed-out calls (the extractor has them, its completion deletes them), not
    Ended's 5, which sorted as the oldest calls and were lost unextracted."""
    directory = qdir(tmp_path)
    now_ms = int(time.time() * 1000)
    project = str(tmp_path)
    queue.append_calls(
        directory, "ended", timed_calls("old", now_ms - HOUR * 1000, 5), project=project
    )
    queue.carry_over(directory, "ended", project)
    queue.append_calls(directory, "s", timed_calls("s", now_ms, 20), project=project)
    assert len(queue.accept(directory, "s")) == 20
    assert queue.adopt_carried(directory, "s", project) == 5
    assert queue.complete(directory, "s") == 15
    assert queued_ids(tmp_path, "s") == [f"old{i}" for i in range(5)]


def test_a_hold_run_out_is_merged_as_a_call_waiting_again(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A's call was held for its extractor when A cleared; the hold ran out (the extractor
    died). B then ends with 20 calls of an hour ago: A's call, pending again and the
    newest, stays in the carry file, where it had sorted first, as an extractor's, and
    was dropped by the cap."""
    from thatch.frontend.queue.limits import ACCEPTED_TTL_SECONDS

    directory = qdir(tmp_path)
    now_ms = int(time.time() * 1000)
    project = str(tmp_path)
    queue.append_calls(directory, "a", timed_calls("a", now_ms, 1), project=project)
    assert len(queue.accept(directory, "a")) == 1
    queue.carry_over(directory, "a", project, hold=True)
    assert [r.get("held_by") for r in carried(tmp_path)] == ["a"]
    queue.append_calls(directory, "b", timed_calls("b", now_ms - HOUR * 1000, 20), project=project)
    queue.carry_over(directory, "b", project, now=time.time() + ACCEPTED_TTL_SECONDS + 60)
    assert [r["tool_use_id"] for r in carried(tmp_path)][-1] == "a0"


def test_queues_that_fail_every_pass_go_at_seven_days_and_do_not_jam_it(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """101 abandoned queues that fail every pass (their lock is a directory) fill a pass's
    100 and stop it: they still go at 7 days (they were spared as "not reached", so every
    pass stopped on them for good), and the next pass carries the healthy one."""
    import shutil

    from thatch.frontend.queue.limits import ABANDONED_PER_PASS

    directory = qdir(tmp_path)
    now_ms = int(time.time() * 1000)
    project = str(tmp_path)
    broken = [f"broken-{i}" for i in range(ABANDONED_PER_PASS + 1)]
    for i, session in enumerate(broken):
        queue.append_calls(directory, session, timed_calls(session, now_ms, 1), project=project)
        lock = directory / f"{session}.lock"
        lock.unlink()
        lock.mkdir()
        age_queue(tmp_path, session, 8 * DAY - i)  # oldest first: broken-0
    queue.append_calls(directory, "healthy", timed_calls("ok", now_ms, 1), project=project)
    age_queue(tmp_path, "healthy", 2 * DAY)
    queue.cleanup(directory, force=True)  # 100 fail and go; the 101st was not reached
    assert [s for s in broken if (directory / f"{s}.jsonl").exists()] == [broken[-1]]
    queue.cleanup(directory, force=True)
    assert not any((directory / f"{s}.jsonl").exists() for s in broken)
    assert [r["tool_use_id"] for r in carried(tmp_path)] == ["ok0"]
    for session in broken:
        shutil.rmtree(directory / f"{session}.lock", ignore_errors=True)


DAY = 24 * HOUR


def age_files(tmp_path: Path, session: str, seconds: float, *suffixes: str) -> None:
    """The session's queue files with these suffixes last touched ``seconds`` ago."""
    then = time.time() - seconds
    for suffix in suffixes:
        os.utime(qdir(tmp_path) / f"{queue.safe_name(session)}{suffix}", (then, then))


def test_a_session_that_lived_a_week_is_carried_when_its_host_dies(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """G noted its project eight days ago, queued its last call and died 25 hours ago:
    the pass carries its call (the week-old project note was deleted first, stranding it)."""
    queue_calls(env, tmp_path, G, "a")
    age_queue(tmp_path, G, 25 * HOUR)
    age_files(tmp_path, G, 8 * DAY, ".project")
    assert nudge(env, tmp_path, T) == (1, T)
    assert queued_ids(tmp_path, T) == ["a"]


def test_a_live_session_keeps_its_week_old_project_note(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """S has worked for eight days and queued a call two hours ago: the daily pass keeps
    its project note, so S's calls are still carried should its host die later."""
    queue_calls(env, tmp_path, S, "a")
    age_queue(tmp_path, S, 2 * HOUR)
    age_files(tmp_path, S, 8 * DAY, ".project")
    assert not (qdir(tmp_path) / ".last-cleanup").exists()  # the pass is due
    assert nudge(env, tmp_path, T) is None
    assert (qdir(tmp_path) / f"{S}.project").is_file()
    age_queue(tmp_path, S, 25 * HOUR)  # then its host died
    assert nudge(env, tmp_path, T) == (1, T)


def test_a_queue_stranded_for_more_than_a_week_is_carried_not_deleted(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """G's host died and the machine stayed off for ten days: the first pass after carries
    G's call instead of deleting it as a week old."""
    queue_calls(env, tmp_path, G, "a")
    age_queue(tmp_path, G, 10 * DAY)
    assert nudge(env, tmp_path, T) == (1, T)
    assert queued_ids(tmp_path, T) == ["a"]


def test_a_damaged_project_note_costs_only_its_own_queue(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Evil's project note is damaged (a lone surrogate: no file name can hold it):
    the pass leaves Evil's queue alone and still carries G's, and the prompt is nudged
    with no error line (the pass had stopped there every day, costing the nudge)."""
    queue_calls(env, tmp_path, "evil", "e")
    (qdir(tmp_path) / "evil.project").write_text('{"project": "/tmp/\\ud800"}\n')
    queue_calls(env, tmp_path, G, "g")
    age_queue(tmp_path, "evil", 40 * HOUR)
    age_queue(tmp_path, G, 30 * HOUR)
    result = run_hook(["flush-tools"], prompt_payload(tmp_path, T), env)
    assert (result.returncode, result.stderr) == (0, b"")
    assert NUDGE.search(result.stdout) is not None
    assert queued_ids(tmp_path, T) == ["g"]
    assert queued_ids(tmp_path, "evil") == ["e"]


@pytest.mark.parametrize("idle", [30 * HOUR, 8 * DAY])
def test_a_stuck_project_lock_costs_one_wait_per_pass(
    tmp_path: Path, env: dict[str, str], idle: float
) -> None:
    """Another process holds the project's carry lock (hung): the pass gives up on the
    first abandoned queue after its 2 s and leaves the others for the next pass, untouched,
    instead of waiting 2 s for each of them; and not deleted when over a week old (the
    7-day deletion that follows the carry spares what the pass did not get to)."""
    from thatch.frontend.queue.carry import checkout_root

    dead = ("dead-0", "dead-1", "dead-2")
    for i, session in enumerate(dead):
        queue_calls(env, tmp_path, session, session)
        age_queue(tmp_path, session, idle - i * 60)
    key = queue.project_key(checkout_root(str(tmp_path)))
    fd = os.open(qdir(tmp_path) / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        locks = {s: (qdir(tmp_path) / f"{s}.lock").stat().st_mtime for s in dead}
        assert nudge(env, tmp_path, T) is None
        after = {s: (qdir(tmp_path) / f"{s}.lock").stat().st_mtime for s in dead}
    finally:
        os.close(fd)
    assert after["dead-0"] > locks["dead-0"]  # the oldest was tried
    assert [after[s] for s in dead[1:]] == [locks[s] for s in dead[1:]]
    assert all(queued_ids(tmp_path, s) == [s] for s in dead)


def test_a_session_that_took_its_lock_during_the_pass_keeps_its_queue(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """G looked abandoned when the pass listed the queues, but took its lock just then (a
    step that changed nothing else: a call of thatch's own): the pass, which waited for
    that lock, sees it touched and leaves G's queue to G."""
    from tests.test_queue import in_flock

    queue_calls(env, tmp_path, G, "a")
    age_queue(tmp_path, G, 25 * HOUR)
    lock = qdir(tmp_path) / f"{G}.lock"
    stdin = tmp_path / "prompt.json"
    stdin.write_text(json.dumps(prompt_payload(tmp_path, T)))
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with stdin.open("rb") as handle:
            proc = subprocess.Popen(
                thatch_command("flush-tools"),
                stdin=handle,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
            )
        wait_until(lambda: in_flock(proc.pid), 60, "the pass to wait for G's lock")
        os.utime(fd)  # G's step
    finally:
        os.close(fd)
    out, err = proc.communicate(timeout=120)
    assert (proc.returncode, err, NUDGE.search(out)) == (0, b"", None)
    assert queued_ids(tmp_path, G) == ["a"]


def opencode_calls(
    env: dict[str, str], project: Path, session: str, prefix: str, ended_at_ms: int, n: int
) -> None:
    """``n`` real buffer-tool runs of the opencode plugin: calls ``<prefix>0``… that ended a
    millisecond apart from ``ended_at_ms`` (the plugin passes each call's times)."""
    for i in range(n):
        stdin = host_payload("opencode-thatch-stdin-oc-buffer-tool")
        stdin.update(
            session_id=session,
            tool_name="bash",
            tool_input={"command": f"{prefix}{i}"},
            tool_use_id=f"{prefix}{i}",
            tool_response="ok",
            ended_at=ended_at_ms + i,
            cwd=str(project),
        )
        ok(run_hook(["buffer-tool", "--host", "opencode"], stdin, env))


def claude_batch(env: dict[str, str], project: Path, session: str, *ids: str) -> None:
    """One real PostToolBatch of Claude Code with a Bash call per id."""
    payload = host_payload("claude-PostToolBatch")
    payload.update(session_id=session, cwd=str(project))
    payload["tool_calls"] = [
        {"tool_name": "Bash", "tool_input": {"command": i}, "tool_use_id": i, "tool_response": "ok"}
        for i in ids
    ]
    ok(run_hook(["buffer-batch"], payload, env))


def earlier_release_queue(
    tmp_path: Path, session: str, *ids: str, adopted: tuple[str, ...] = ()
) -> None:
    """The session's queue as a process of an earlier release leaves it (an MCP server not
    restarted since the upgrade completing a snapshot rewrites it): no ``ended_at``. Then
    ``adopted``, G's calls, as a release before ended_at merged carried calls: after the
    session's own, whenever they ended."""
    directory = qdir(tmp_path)
    directory.mkdir(mode=0o700, exist_ok=True)
    records = [
        {
            "tool": "Bash",
            "sessionID": owner,
            "args": {"command": i},
            "title": i,
            "output": "ok",
            "tool_use_id": i,
            "seq": seq,
        }
        for seq, (owner, i) in enumerate(
            [*((session, i) for i in ids), *((G, i) for i in adopted)], 1
        )
    ]
    (directory / f"{session}.jsonl").write_text(
        "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
    )


def test_adoption_counts_the_carried_calls_the_cap_kept(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """G's host died after 3 calls 30 hours ago; S has just run 19. The pass carries G's
    calls, S adopts them and the cap keeps G's newest one: adoption says 1, not 3, and the
    nudge announces the 20 calls S's queue holds."""
    now_ms = int(time.time() * 1000)
    opencode_calls(env, tmp_path, G, "g", now_ms - 30 * HOUR * 1000, 3)
    age_queue(tmp_path, G, 30 * HOUR)
    claude_batch(env, tmp_path, S, *(f"s{i}" for i in range(19)))
    directory = qdir(tmp_path)
    assert queue.cleanup(directory) >= 0
    assert [r["tool_use_id"] for r in carried(tmp_path)] == ["g0", "g1", "g2"]
    assert queue.adopt_carried(directory, S, str(tmp_path)) == 1
    assert queued_ids(tmp_path, S) == ["g2", *(f"s{i}" for i in range(19))]
    assert nudge(env, tmp_path, S) == (20, S)


def test_calls_of_an_earlier_release_keep_their_place_among_their_neighbours(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """S's 15 calls lost their times to an earlier release's rewrite; S then ran 2 more.
    G's 10 calls of 30 hours ago, carried by the pass, come to S's prompt: the cap drops
    G's 7 oldest, not S's own 7 oldest, which had sorted as the oldest of all."""
    now_ms = int(time.time() * 1000)
    opencode_calls(env, tmp_path, G, "g", now_ms - 30 * HOUR * 1000, 10)
    age_queue(tmp_path, G, 30 * HOUR)
    earlier_release_queue(tmp_path, S, *(f"s{i}" for i in range(15)))
    claude_batch(env, tmp_path, S, "n0", "n1")
    assert nudge(env, tmp_path, S) == (20, S)
    assert queued_ids(tmp_path, S) == [
        *(f"g{i}" for i in range(7, 10)),
        *(f"s{i}" for i in range(15)),
        "n0",
        "n1",
    ]


def test_calls_an_earlier_release_adopted_are_not_taken_for_recent_ones(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """S's queue, from a release before ended_at: its own 10 calls, then G's 10 of a day
    ago that it adopted (merged after S's own). S runs one more call; then H, whose calls
    ended an hour ago, ends and S adopts them. H's calls are kept and G's dropped: G's are
    no calls of S's, so their place in S's file says nothing of when they ended (before,
    they counted as just before S's next call and pushed out all of H's)."""
    now_ms = int(time.time() * 1000)
    earlier_release_queue(
        tmp_path, S, *(f"s{i}" for i in range(10)), adopted=tuple(f"g{i}" for i in range(10))
    )
    claude_batch(env, tmp_path, S, "n0")
    opencode_calls(env, tmp_path, "H", "h", now_ms - HOUR * 1000, 10)
    session_end(env, tmp_path, "H")
    directory = qdir(tmp_path)
    assert queue.adopt_carried(directory, S, str(tmp_path)) == 10
    assert queued_ids(tmp_path, S) == [
        *(f"h{i}" for i in range(10)),
        *(f"s{i}" for i in range(1, 10)),
        "n0",
    ]


def test_a_session_that_moved_to_another_project_is_carried_where_it_worked_last(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """G queued a call in one project, then one in another, and its host died: the pass
    carries both where G worked last, as G's session-end would have."""
    first, last = tmp_path / "first", tmp_path / "last"
    first.mkdir()
    last.mkdir()
    queue_calls(env, first, G, "a")
    queue_calls(env, last, G, "b")
    age_queue(tmp_path, G, 25 * HOUR)
    assert nudge(env, first, T) is None
    assert nudge(env, last, "next-there") == (2, "next-there")


def test_the_pass_carries_to_the_project_noted_when_it_holds_the_lock(
    tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """G worked in one project and looks abandoned; just before the pass takes G's lock, a
    step of G notes another project, on a file system whose times do not show it (here
    set back): the pass carries G's calls to the project noted under the lock."""
    from thatch.frontend.queue import carry
    from thatch.frontend.queue.carry import checkout_root
    from thatch.frontend.queue.files import locked

    first, last = tmp_path / "first", tmp_path / "last"
    first.mkdir()
    last.mkdir()
    queue_calls(env, first, G, "a")
    age_queue(tmp_path, G, 25 * HOUR)
    directory = qdir(tmp_path)
    session_lock = directory / f"{queue.safe_name(G)}.lock"

    def stepped_before(lock_path: Path, *args: float) -> contextlib.AbstractContextManager[float]:
        if lock_path == session_lock:
            note = directory / f"{queue.safe_name(G)}.project"
            note.write_text(json.dumps({"project": str(last)}) + "\n")
            age_queue(tmp_path, G, 25 * HOUR)
        return locked(lock_path, *args)

    monkeypatch.setattr(carry, "locked", stepped_before)
    assert carry.carry_abandoned(directory, time.time()).carried == 1
    key = queue.project_key(checkout_root(str(last)))
    assert [r["tool_use_id"] for r in read_lines(directory / f"{key}.jsonl")] == ["a"]


def test_adopting_under_a_relative_directory_keeps_the_sessions_own_project(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A host may name the project relative to where its hooks run: calls carried there are
    adopted, and the adopting session's recorded project (where the daily pass would carry
    its calls) stays the absolute one it had; the relative one names no place later."""
    from thatch.frontend.queue.files import project_path, read_project

    project = tmp_path / "proj"
    project.mkdir()
    queue_calls(env, project, "ended", "t1")
    session_end(env, project, "ended")
    queue_calls(env, project, "live", "t2")
    jsonl = qdir(tmp_path) / f"{queue.safe_name('live')}.jsonl"
    assert read_project(project_path(jsonl)) == str(project)
    payload = prompt_payload(Path("proj"), "live")
    assert run_hook(["flush-tools"], payload, env, cwd=tmp_path).returncode == 0
    assert sorted(queued_ids(tmp_path, "live")) == ["t1", "t2"]
    assert read_project(project_path(jsonl)) == str(project)
