"""Spilled batches (docs/hooks.md §queue-files): a tool hook whose session lock stays busy
for its 2 s keeps its calls in a spill file of its own, and whoever next holds the lock
merges them, so no call is lost to a busy lock and none is extracted twice. Real hook
processes; the busy lock is one this test holds (as a stopped process would), and every
wait is for something a process did (its exit, or /proc/locks showing it waiting)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.embedder_cleanup import wait_until
from tests.support.fake_embedder import tool_context
from tests.support.hookrun import hook_env, run_hook, thatch_command
from tests.support.host_payloads import host_payload
from tests.test_queue_carry import (
    AGENT,
    HOUR,
    S,
    T,
    age_queue,
    carried,
    fetched_ids,
    git_init,
    lock_taken,
    nudge,
    ok,
    qdir,
    queue_calls,
    queued_ids,
    session_end,
    waits_for_lock,
)
from thatch.frontend import queue
from thatch.frontend.queue.limits import SPILL_BYTES_LIMIT
from thatch.frontend.tools.memory_tools import Tools

GAVE_UP = b"busy"  # what the hook's stderr line says when it drops a batch


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return hook_env(tmp_path)


@contextlib.contextmanager
def held(path: Path) -> Iterator[None]:
    """The flock on ``path`` held by this test process for the block (a process that
    stopped while holding it, as far as the hooks can tell)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def session_lock(tmp_path: Path, session: str) -> Path:
    return queue.queue_paths(qdir(tmp_path), session)[2]


def spills(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in qdir(tmp_path).iterdir() if p.name.endswith(".spill"))


def bash_call(project: Path, session: str, use_id: str) -> dict[str, object]:
    """The recorded Bash PostToolUse, its command and id ``use_id`` (its payload title)."""
    payload = host_payload("claude-PostToolUse-Bash")
    payload.update(tool_use_id=use_id, session_id=session, cwd=str(project))
    payload["tool_input"] = {"command": use_id}
    return payload


def calls(env: dict[str, str], project: Path, session: str, *ids: str) -> None:
    for use_id in ids:
        ok(run_hook(["buffer-batch"], bash_call(project, session, use_id), env))


def handed_out(tmp_path: Path, session: str, project: Path) -> list[str]:
    """What get_extraction_payload hands out (it adopts the project's carried calls)."""
    return [str(r["title"]) for r in queue.accept(qdir(tmp_path), session, project=str(project))]


@pytest.mark.parametrize("session", [S, "ses.weird id"])
def test_a_call_whose_lock_stays_busy_is_queued_by_the_locks_next_holder(
    tmp_path: Path, env: dict[str, str], session: str
) -> None:
    """The session's lock stays taken past the tool hook's 2 s: the hook exits 0 and says
    nothing, its call waits in a spill file inside the queue directory (named by the
    session's stem, whatever its id), and the next tool hook merges it, in the order the
    calls ended. Before, the hook dropped the call with a stderr line."""
    queue_calls(env, tmp_path, session, "a")
    with held(session_lock(tmp_path, session)):
        ok(run_hook(["buffer-batch"], bash_call(tmp_path, session, "b"), env))
        assert queued_ids(tmp_path, session) == ["a"]
    (spill,) = spills(tmp_path)
    assert spill.startswith(queue.safe_name(session) + ".")
    assert (qdir(tmp_path) / spill).stat().st_mode & 0o777 == 0o600
    queue_calls(env, tmp_path, session, "c")
    assert queued_ids(tmp_path, session) == ["a", "b", "c"]
    assert spills(tmp_path) == []
    assert not list(qdir(tmp_path).glob("*.spilled"))


def test_a_tool_call_waiting_behind_a_completion_stuck_on_carry_files_is_kept(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The case that lost calls: S's extractor stops (extraction-complete) while the
    project's two carry files are locked (a process stopped while merging); the completion
    holds S's lock while it waits 2 s for each. A tool hook of S waits for S's lock
    meanwhile; the first carry file is freed once it waits, so the completion's wait for
    the second outlasts the hook's 2 s. The hook spills its call; the next fetch hands it
    out once, and extraction_done deletes it."""
    project = tmp_path / "proj"
    sub = project / "src"
    sub.mkdir(parents=True)
    calls(env, sub, "L", "l0")
    session_end(env, sub, "L")  # under the directory's own name: proj is no checkout yet
    git_init(project)
    calls(env, sub, "C", "c0")
    session_end(env, sub, "C")  # under the checkout's
    calls(env, sub, S, "s0")
    checkout, legacy = (
        paths[1] for paths in queue.carry._carry_paths_read(qdir(tmp_path), str(sub))
    )
    holders = {path: os.open(path, os.O_RDWR) for path in (checkout, legacy)}
    for fd in holders.values():
        fcntl.flock(fd, fcntl.LOCK_EX)
    stop_stdin = tmp_path / "stop.json"
    stop_stdin.write_text(json.dumps({"session_id": S, "cwd": str(sub), "agent_id": AGENT}))
    tool_stdin = tmp_path / "tool.json"
    tool_stdin.write_text(json.dumps(bash_call(sub, S, "s1")))
    procs: list[subprocess.Popen[bytes]] = []

    def start(command: str, stdin: Path) -> subprocess.Popen[bytes]:
        with stdin.open("rb") as handle:
            proc = subprocess.Popen(
                thatch_command(command),
                stdin=handle,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
            )
        procs.append(proc)
        return proc

    try:
        stop = start("extraction-complete", stop_stdin)
        wait_until(
            lambda: stop.poll() is not None or waits_for_lock(stop.pid, checkout),
            60,
            "the completion to wait for the first carry file, or to end",
        )
        assert lock_taken(session_lock(tmp_path, S))
        tool = start("buffer-batch", tool_stdin)
        wait_until(
            lambda: tool.poll() is not None or waits_for_lock(tool.pid, session_lock(tmp_path, S)),
            60,
            "the tool hook to wait for S's lock, or to end",
        )
        os.close(holders.pop(checkout))
        tool_out = tool.communicate(timeout=120)
        for fd in holders.values():
            os.close(fd)
        holders.clear()
        stop.communicate(timeout=120)
    finally:
        for fd in holders.values():
            os.close(fd)
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert (tool.returncode, *tool_out) == (0, b"", b""), tool_out
    assert len(spills(tmp_path)) == 1  # the completion held S's lock past the hook's 2 s
    assert sorted(handed_out(tmp_path, S, sub)) == ["c0", "l0", "s0", "s1"]
    assert queue.complete(qdir(tmp_path), S, project=str(sub)) == 4
    assert handed_out(tmp_path, S, sub) == []
    assert spills(tmp_path) == [] and carried(tmp_path) == []


def test_a_spilled_save_drains_what_its_agent_had_seen(tmp_path: Path, env: dict[str, str]) -> None:
    """The agent's own successful save found the lock busy: merged by the next tool hook,
    it consumes the calls queued before it, as it would have in time; the next hook's own
    call (after the save) stays."""
    queue_calls(env, tmp_path, S, "a", "b")
    save = host_payload("claude-PostToolUse-mcp-thatch-memory_remember")
    save.update(session_id=S, cwd=str(tmp_path))
    with held(session_lock(tmp_path, S)):
        ok(run_hook(["buffer-batch"], save, env))
    assert len(spills(tmp_path)) == 1
    queue_calls(env, tmp_path, S, "c")
    assert queued_ids(tmp_path, S) == ["c"]


def test_a_spill_reaches_the_projects_next_session_through_the_session_end(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """S's last call spilled; its session-end merges it and carries it with the rest: the
    project's next session is nudged about both."""
    queue_calls(env, tmp_path, S, "a")
    with held(session_lock(tmp_path, S)):
        ok(run_hook(["buffer-batch"], bash_call(tmp_path, S, "b"), env))
    session_end(env, tmp_path, S)
    assert spills(tmp_path) == []
    assert nudge(env, tmp_path, T) == (2, T)
    assert sorted(queued_ids(tmp_path, T)) == ["a", "b"]


def test_a_spill_after_the_session_end_is_carried_by_the_daily_pass(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A background sub-agent's call found S's lock busy just after S ended (its queue is
    gone): a day later the daily pass carries the spill to the project it names, and the
    project's next session is nudged about it."""
    calls(env, tmp_path, S, "a")
    session_end(env, tmp_path, S)
    assert nudge(env, tmp_path, T) == (1, T)
    with held(session_lock(tmp_path, S)):
        ok(run_hook(["buffer-batch"], bash_call(tmp_path, S, "b"), env))
    assert len(spills(tmp_path)) == 1 and queued_ids(tmp_path, S) == []
    with tool_context(tmp_path) as ctx:
        tools = Tools(ctx)
        assert fetched_ids(tools, T) == ["a"]
        assert tools.call("extraction_done", {"session_id": T}).text == "[acknowledged]"
    age_queue(tmp_path, S, 25 * HOUR)
    assert nudge(env, tmp_path, T) == (1, T)
    assert queued_ids(tmp_path, T) == ["b"]
    assert spills(tmp_path) == []


def test_the_nudge_counts_a_spilled_call_once_the_lock_is_free(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The session's only call spilled: the next prompt merges it before counting, and
    nudges about it."""
    with held(session_lock(tmp_path, S)):
        ok(run_hook(["buffer-batch"], bash_call(tmp_path, S, "a"), env))
    assert queued_ids(tmp_path, S) == []
    assert nudge(env, tmp_path, S) == (1, S)
    assert queued_ids(tmp_path, S) == ["a"] and spills(tmp_path) == []


def raw_spill(directory: Path, session: str, at_ms: int, use_id: str) -> Path:
    """A spill file as a tool hook writes it, holding one Bash call."""
    record = queue.make_record(
        session, {"tool_name": "Bash", "tool_input": {"command": use_id}, "tool_use_id": use_id}
    )
    record["ended_at"] = at_ms
    spill = {
        "at": at_ms,
        "subagent": False,
        "agent_id": "",
        "project": str(directory.parent),
        "snapshot": None,
        "events": [{"record": record}],
    }
    path = directory / f"{queue.safe_name(session)}.{at_ms}-1-{use_id}.spill"
    path.write_text(json.dumps(spill))
    path.chmod(0o600)
    (directory / f"{queue.safe_name(session)}.spilled").touch()
    return path


def test_sixteen_spills_at_most_wait_for_a_session(tmp_path: Path, env: dict[str, str]) -> None:
    """A lock held for good must not let a runaway session fill the disk: with 16 batches
    spilled, the next hook gives up as before (its stderr line says so), and the next
    holder merges the 16 (the newest 20 calls of the queue kept)."""
    queue_calls(env, tmp_path, S, "a")
    start = int(time.time() * 1000)
    for i in range(16):
        raw_spill(qdir(tmp_path), S, start + i, f"s{i:02}")
    with held(session_lock(tmp_path, S)):
        result = run_hook(["buffer-batch"], bash_call(tmp_path, S, "lost"), env)
    assert (result.returncode, result.stdout) == (0, b"")
    assert GAVE_UP in result.stderr and b"gave up" in result.stderr
    assert len(spills(tmp_path)) == 16
    queue_calls(env, tmp_path, S, "z")
    assert queued_ids(tmp_path, S) == ["a", *(f"s{i:02}" for i in range(16)), "z"]
    assert spills(tmp_path) == []


def test_damaged_and_foreign_spills_hide_no_others(tmp_path: Path, env: dict[str, str]) -> None:
    """A damaged spill file, one too large, a link named like a spill and another
    session's spill: the session's next holder merges its own good spill, deletes the
    damaged and oversized ones, and leaves the link (no file of its own) and the other
    session's spill alone."""
    queue_calls(env, tmp_path, S, "a")
    directory = qdir(tmp_path)
    stem = queue.safe_name(S)
    now_ms = int(time.time() * 1000)
    raw_spill(directory, S, now_ms, "good")
    other = raw_spill(directory, T, now_ms, "theirs")
    (directory / f"{stem}.{now_ms}-2-damaged.spill").write_text('{"at": 1, "events": [')
    too_large = raw_spill(directory, S, now_ms, "large")
    too_large.write_bytes(b" " * SPILL_BYTES_LIMIT + too_large.read_bytes())  # JSON, too long
    target = tmp_path / "elsewhere.json"
    target.write_text("{}")
    link = directory / f"{stem}.{now_ms}-4-link.spill"
    link.symlink_to(target)
    queue_calls(env, tmp_path, S, "b")
    assert queued_ids(tmp_path, S) == ["a", "good", "b"]
    assert spills(tmp_path) == sorted([link.name, other.name])
    assert target.read_text() == "{}"
    assert queued_ids(tmp_path, T) == []


@pytest.mark.parametrize("ended", [False, True], ids=["abandoned", "ended"])
def test_a_spill_whose_marker_went_missing_is_carried_by_the_daily_pass(
    tmp_path: Path, env: dict[str, str], ended: bool
) -> None:
    """A spill with no marker (its writer could not write one, or it went): no lock holder
    lists the directory for it, but a day later the daily pass carries it to the project
    its hook named, with the queue of its session (abandoned by its host) or alone (the
    session ended), and the project's next session is nudged about it."""
    directory = qdir(tmp_path)
    queue_calls(env, tmp_path, S, "a")
    if ended:
        session_end(env, tmp_path, S)
        assert nudge(env, tmp_path, T) == (1, T)
    raw_spill(directory, S, int(time.time() * 1000), "orphan")
    (directory / f"{queue.safe_name(S)}.spilled").unlink()
    queue_calls(env, tmp_path, S, "b")  # no marker: no holder looks
    assert queued_ids(tmp_path, S) == (["b"] if ended else ["a", "b"])
    assert len(spills(tmp_path)) == 1
    age_queue(tmp_path, S, 25 * HOUR)
    assert nudge(env, tmp_path, T) == (3, T)
    assert sorted(queued_ids(tmp_path, T)) == ["a", "b", "orphan"]
    assert spills(tmp_path) == []


def subagent_batch(project: Path, *ids: str) -> dict[str, object]:
    """A sub-agent's PostToolBatch of S: a Bash call per id, then its successful save."""
    batch = host_payload("claude-PostToolBatch-subagent")
    batch.update(session_id=S, cwd=str(project))
    saved = host_payload("claude-PostToolUse-mcp-thatch-memory_remember")["tool_response"]
    batch["tool_calls"] = [
        *({"tool_name": "Bash", "tool_input": {"command": i}, "tool_use_id": i} for i in ids),
        {
            "tool_name": "mcp__thatch__memory_remember",
            "tool_input": {"label": "l", "content": "c"},
            "tool_use_id": "toolu_save",
            "tool_response": saved,
        },
    ]
    return batch


@pytest.mark.parametrize("step", [0, HOUR], ids=["steady", "clock-stepped-back"])
def test_a_spilled_extractor_save_completes_the_snapshot_it_worked_on(
    tmp_path: Path, env: dict[str, str], step: float
) -> None:
    """The extractor's save (a sub-agent's) found the lock busy: merged later, it completes
    the snapshot it had fetched (a, b), and its own call stays queued. So it does when the
    clock stepped back an hour after the fetch (its ``accepted_at`` after the hook's
    ``at``): before, the snapshot had to be handed out before the hook's ``at`` by the
    clock, and the save completed nothing."""
    calls(env, tmp_path, S, "a", "b")
    fetched = queue.accept(qdir(tmp_path), S, now=time.time() + step)
    assert [r["title"] for r in fetched] == ["a", "b"]
    with held(session_lock(tmp_path, S)):
        ok(run_hook(["buffer-batch"], subagent_batch(tmp_path, "c"), env))
    assert queued_ids(tmp_path, S) == ["a", "b"]
    calls(env, tmp_path, S, "d")
    assert queued_ids(tmp_path, S) == ["c", "d"]
    assert queue.nudge_records(qdir(tmp_path), S) != []  # no snapshot handed out now


def test_a_spilled_extractor_save_leaves_a_snapshot_handed_out_since_alone(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """After the save's hook spilled (the snapshot it saw recorded), the lock's holder
    handed the records out again (a second fetch: a new snapshot, another extractor's).
    Merged later, the save completes only the snapshot it saw when it spilled: the new one
    and its records stay for their extractor, and the save's own call is queued."""
    calls(env, tmp_path, S, "a", "b")
    queue.accept(qdir(tmp_path), S)
    state = queue.queue_paths(qdir(tmp_path), S)[0].with_suffix(".state")
    with held(session_lock(tmp_path, S)):
        ok(run_hook(["buffer-batch"], subagent_batch(tmp_path, "c"), env))
        # What the holder did meanwhile: a fetch, as accept writes it under the lock.
        refetched = {"cursor": 2, "accepted_at": time.time()}
        state.write_text(json.dumps(refetched))
    calls(env, tmp_path, S, "d")
    assert queued_ids(tmp_path, S) == ["a", "b", "c", "d"]
    assert json.loads(state.read_text()) == refetched
    assert queue.nudge_records(qdir(tmp_path), S) == []  # the new snapshot is fresh


@pytest.mark.parametrize("step", [0, -HOUR], ids=["steady", "clock-stepped-back"])
def test_a_spilled_fetch_names_no_holder_of_a_snapshot_handed_out_while_it_waited(
    tmp_path: Path, env: dict[str, str], step: float
) -> None:
    """A sub-agent's fetch hook waits for the busy lock; meanwhile its snapshot is done
    with and the records are handed out again (another extractor's snapshot, after the
    hook began). The hook spills with the snapshot handed out as it began as the one it
    saw (it reads the state before its wait), and merged later its fetch names no holder
    of the other: the call fetched the earlier one. So it does when the clock stepped back
    an hour meanwhile (the other's ``accepted_at`` before the hook's ``at``): before, the
    hook read the state after its wait and the clock had to tell the two apart, and the
    sub-agent became the holder of the other's snapshot."""
    calls(env, tmp_path, S, "a", "b")
    queue.accept(qdir(tmp_path), S)
    lock = session_lock(tmp_path, S)
    state = lock.with_suffix(".state")
    accepted = json.loads(state.read_text())  # the snapshot the call fetched
    fetch = host_payload("claude-PostToolUse-mcp-thatch-get_extraction_payload")
    fetch.update(session_id=S, cwd=str(tmp_path))
    stdin = tmp_path / "fetch.json"
    stdin.write_text(json.dumps(fetch))
    with held(lock), stdin.open("rb") as handle:
        hook = subprocess.Popen(
            thatch_command("buffer-batch"),
            stdin=handle,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        try:
            wait_until(
                lambda: hook.poll() is not None or waits_for_lock(hook.pid, lock),
                60,
                "the fetch's hook to wait for the lock, or to end",
            )
            # As accept writes it (a millisecond on, as ``at`` counts whole ones), with the
            # clock as it is or stepped back an hour.
            refetched = {"cursor": 2, "accepted_at": time.time() + 0.001 + step}
            state.write_text(json.dumps(refetched))
            out = hook.communicate(timeout=120)
        finally:
            if hook.poll() is None:
                hook.kill()
                hook.wait()
    assert (hook.returncode, *out) == (0, b"", b""), out
    (spilled,) = spills(tmp_path)
    assert json.loads((qdir(tmp_path) / spilled).read_text())["snapshot"] == accepted
    calls(env, tmp_path, S, "c")
    assert json.loads(state.read_text()) == refetched  # no agent_id: nobody holds it yet
    assert queued_ids(tmp_path, S) == ["a", "b", "c"]


def test_a_spilled_call_no_utf_8_can_hold_jams_nothing(tmp_path: Path, env: dict[str, str]) -> None:
    """A spill (written by anything: the hooks make a payload's lone surrogates U+FFFD
    already) whose call and sub-agent id hold a lone surrogate, which JSON may carry and
    UTF-8 cannot: the next holder merges it with U+FFFD in its place, and the session's
    later calls are queued (a spill that could not be merged would fail every holder)."""
    calls(env, tmp_path, S, "a")
    queue.accept(qdir(tmp_path), S)
    state = queue.queue_paths(qdir(tmp_path), S)[0].with_suffix(".state")
    spill = raw_spill(qdir(tmp_path), S, int(time.time() * 1000), "odd")
    value = json.loads(spill.read_text())
    value["events"][0]["record"]["tool_use_id"] = "odd\ud800"
    # A sub-agent's fetch of the snapshot handed out: its id goes into the state file.
    value.update(subagent=True, agent_id="x\udcff", snapshot=json.loads(state.read_text()))
    value["events"].append({"fetch": True})
    spill.write_text(json.dumps(value))  # ASCII: the surrogates as \u escapes
    calls(env, tmp_path, S, "b")
    assert queued_ids(tmp_path, S) == ["a", "odd\ufffd", "b"]
    assert json.loads(state.read_text())["agent_id"] == "x\ufffd"
    assert spills(tmp_path) == []
