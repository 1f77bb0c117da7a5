"""The extraction queue library: file names, classification, records, append, drain, payload."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.embedder_cleanup import wait_until
from thatch.common.environment import queue_dir
from thatch.frontend import queue
from thatch.frontend.queue import files as queue_files


def call(name: str, use_id: str | None = None, **extra: object) -> dict[str, object]:
    result: dict[str, object] = {"tool_name": name, "tool_input": extra or {}}
    if use_id is not None:
        result["tool_use_id"] = use_id
    result["tool_response"] = f"output of {use_id or name}"
    return result


@pytest.fixture
def qdir(tmp_path: Path) -> Path:
    return tmp_path / "queue"


def test_queue_dir_prefers_variable_then_xdg_cache() -> None:
    """THATCH_QUEUE_DIR wins; otherwise $XDG_CACHE_HOME/thatch/queue; empty counts as unset."""
    assert queue_dir({"THATCH_QUEUE_DIR": "/q", "XDG_CACHE_HOME": "/c"}) == Path("/q")
    assert queue_dir({"THATCH_QUEUE_DIR": "", "XDG_CACHE_HOME": "/c"}) == Path("/c/thatch/queue")
    assert queue_dir({"HOME": "/h"}) == Path("/h/.cache/thatch/queue")


@pytest.mark.parametrize(
    "session_id",
    ["3f2b8c1e-6a4d-4e0b-9d1c-2f7a5b8e9c01", "ses_4Ab9XyZ01kLmN", "MixedCase_id-7"],
)
def test_safe_ids_map_to_themselves(session_id: str) -> None:
    """UUIDs, opencode ids and other safe ids are their own file stems."""
    assert queue.safe_name(session_id) == session_id


def test_unsafe_and_long_ids_get_a_hash_suffix() -> None:
    """Sanitised ids get sha256 suffixes, so a/b and a_b differ; long ids are bounded."""
    digest = hashlib.sha256(b"a/b").hexdigest()[:16]
    assert queue.safe_name("a/b") == f"a_b-{digest}"
    assert queue.safe_name("a_b") == "a_b"
    long_id = "x" * 200
    assert (
        queue.safe_name(long_id)
        == "x" * 64 + "-" + hashlib.sha256(long_id.encode()).hexdigest()[:16]
    )
    assert queue.safe_name("../../etc").startswith("______etc-")


def test_queue_paths_stay_in_the_directory(qdir: Path) -> None:
    """Every hostile id maps to files whose parent is the queue directory."""
    for hostile in ["../../x", "/abs/path", "..", ".", "a\x00b", "é" * 300]:
        for path in queue.queue_paths(qdir, hostile):
            assert path.parent == qdir
    with pytest.raises(queue.QueueError):
        queue.queue_paths(qdir, "")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("mcp__thatch__memory_remember", ("thatch", "memory_remember")),
        ("MCP__Thatch__Memory_Recall", ("thatch", "memory_recall")),
        ("thatch_extraction_done", ("thatch", "extraction_done")),
        ("thatch:store_list", ("thatch", "store_list")),
        ("thatch.memory_show", ("thatch", "memory_show")),
        ("mcp_thatch_find_duplicates", ("thatch", "find_duplicates")),
        ("mcp:memory_forget", ("thatch", "memory_forget")),
        ("memory_list", ("thatch", "memory_list")),
        ("  Skill ", ("meta", None)),
        ("task", ("meta", None)),
        ("Agent", ("meta", None)),
        ("ToolSearch", ("meta", None)),
        # Built-ins a host adds later are meta by the same rule (issue 22 §1).
        ("ListAgents", ("meta", None)),
        ("TaskOutput", ("meta", None)),
        ("TodoWrite", ("meta", None)),
        ("send_to_agent", ("meta", None)),
        ("Bash", ("other", None)),
        ("WebFetch", ("other", None)),
        ("ReportFindings", ("other", None)),
        ("mcp__tracker__list_tasks", ("other", None)),
        ("tools:agent", ("other", None)),
        ("mcp__github__create_issue", ("other", None)),
        ("taskmaster", ("other", None)),
    ],
)
def test_classification(name: str, expected: tuple[str, str | None]) -> None:
    """Tool names classify as thatch's own, meta or other (docs/hooks.md §classification)."""
    assert queue.classify(name) == expected


def test_aggregator_calls_are_searched_for_thatch_tools() -> None:
    """An `execute` aggregator naming a thatch tool counts as thatch's own; writes win."""
    assert queue.classify("mcp__hub__execute", {"tool": "memory_recall"}) == (
        "thatch",
        "memory_recall",
    )
    assert queue.classify("hub:execute", {"steps": ["memory_recall", "extraction_done"]}) == (
        "thatch",
        "memory_remember",
    )
    assert queue.classify("mcp__hub__execute", {"tool": "xmemory_recallx"}) == ("other", None)
    assert queue.classify("execute", {"cmd": "ls"}) == ("other", None)
    # "engine" and "chat" are common words: an aggregator's input naming them is not thatch's.
    assert queue.classify("mcp__hub__execute", {"cmd": "grep chat engine"}) == ("other", None)


def test_record_fields_and_cuts() -> None:
    """Records cut strings in args to 500 and output to 2,000; titles follow the tool."""
    record = queue.make_record(
        "S",
        {
            "tool_name": "Read",
            "tool_input": {"file_path": "/a/b/c.py", "note": "n" * 900},
            "tool_use_id": "u1",
            "tool_response": {"content": "y" * 5000},
        },
    )
    assert list(record) == ["tool", "sessionID", "args", "title", "output", "tool_use_id"]
    assert record["title"] == "c.py"
    assert record["args"]["note"] == "n" * 500
    assert record["output"] == "y" * 2000  # the text of {content}, not its JSON
    bash = queue.make_record("S", {"tool_name": "bash", "tool_input": {"command": "c" * 100}})
    assert bash["title"] == "c" * 80 and bash["output"] == ""
    grep = queue.make_record("S", {"tool_name": "Grep", "tool_input": {"pattern": "TODO"}})
    assert grep["title"] == "TODO" and "tool_use_id" not in grep
    scalar = queue.make_record("S", {"tool_name": "x", "tool_input": "plain"})
    assert scalar["args"] == {"value": "plain"}
    assert scalar["title"] == '{"value":"plain"}'
    absent = queue.make_record("S", {"tool_name": "x"})
    assert absent["args"] == {} and absent["title"] == "{}"


def test_append_keeps_newest_twenty_in_arrival_order(qdir: Path) -> None:
    """25 calls leave the newest 20, oldest first, one JSON object per line."""
    for i in range(25):
        queue.append_calls(qdir, "s1", [call("Bash", f"id{i}", command=f"echo {i}")])
    lines = (qdir / "s1.jsonl").read_text().splitlines()
    assert [json.loads(line)["tool_use_id"] for line in lines] == [f"id{i}" for i in range(5, 25)]


def test_append_skips_duplicates_own_and_meta_tools(qdir: Path) -> None:
    """A queued tool_use_id, thatch's own and meta tools are not queued."""
    queue.append_calls(qdir, "s", [call("Bash", "a"), call("Bash", "a"), call("Read", "")])
    queue.append_calls(
        qdir, "s", [call("Bash", "a"), call("mcp__thatch__memory_recall", "r"), call("Task", "t")]
    )
    records = queue.peek_records(qdir, "s")
    assert [(r["tool"], r.get("tool_use_id")) for r in records] == [("Bash", "a"), ("Read", None)]


def saved(name: str, use_id: str, text: str = "[saved] o/r :: l") -> dict[str, object]:
    return {**call(name, use_id), "tool_response": [{"type": "text", "text": text}]}


def test_memory_write_in_batch_drains_the_queue_not_its_batch(qdir: Path) -> None:
    """A successful memory_remember drains the queue and the count; the batch's other calls
    ran beside it and stay; extraction_done without a handed-out snapshot drains nothing."""
    queue.append_calls(qdir, "s", [call("Bash", "old")])
    queue.increment_count(qdir, "s")
    queue.append_calls(
        qdir,
        "s",
        [call("Edit", "before"), saved("mcp__thatch__memory_remember", "w"), call("Grep", "after")],
    )
    assert [r["tool_use_id"] for r in queue.peek_records(qdir, "s")] == ["before", "after"]
    assert queue.read_count(qdir, "s") == 0
    queue.append_calls(qdir, "s", [saved("thatch_extraction_done", "d", "[acknowledged]")])
    assert [r["tool_use_id"] for r in queue.peek_records(qdir, "s")] == ["before", "after"]
    queue.accept(qdir, "s")
    queue.append_calls(qdir, "s", [saved("thatch_extraction_done", "d2", "[acknowledged]")])
    assert not (qdir / "s.jsonl").exists()
    assert queue.peek_records(qdir, "s") == []


def test_failed_or_unknown_writes_drain_nothing(qdir: Path) -> None:
    """Only an answer starting with the success marker drains; errors and unknown answers
    (the tool does not exist, invalid arguments) are neither drained nor queued."""
    queue.append_calls(qdir, "s", [call("Bash", "a")])
    for response in (
        "Invalid arguments: content: required",
        [{"type": "text", "text": "No such tool available: mcp__thatch__memory_remember"}],
        {"content": [{"type": "text", "text": "[saved] x"}], "isError": True},
        "",
    ):
        queue.append_calls(
            qdir,
            "s",
            [{**call("mcp__thatch__memory_remember", "w"), "tool_response": response}],
        )
    assert [r["tool_use_id"] for r in queue.peek_records(qdir, "s")] == ["a"]
    aggregated = {
        "tool_name": "mcp__hub__execute",
        "tool_input": {"tool": "memory_remember"},
        "tool_response": '{"result": "[saved] o/r :: l"}',
    }
    queue.append_calls(qdir, "s", [{**aggregated, "tool_response": "error"}])
    assert len(queue.peek_records(qdir, "s")) == 1
    queue.append_calls(qdir, "s", [aggregated])
    assert queue.peek_records(qdir, "s") == []


def test_sequence_numbers_survive_drains_and_caps(qdir: Path) -> None:
    """Sequence numbers only grow: past the 20-record cap, and past a snapshot whose
    records were all drained, so a cursor never covers a newer record."""
    for i in range(25):
        queue.append_calls(qdir, "s", [call("Bash", f"id{i}")])
    assert [r["seq"] for r in queue.peek_records(qdir, "s")] == list(range(6, 26))
    queue.accept(qdir, "s")
    queue.append_calls(qdir, "s", [call("Bash", "late")])
    assert queue.peek_records(qdir, "s")[-1]["seq"] == 26  # the cap dropped seq 6
    assert queue.complete(qdir, "s") == 19  # seq 7-25 were handed out and are still queued
    assert [r["tool_use_id"] for r in queue.peek_records(qdir, "s")] == ["late"]


def test_response_text_shapes() -> None:
    """The meaningful text of each known response shape; other objects as JSON."""
    text = queue.response_text
    assert text({"stdout": "out", "stderr": "err", "interrupted": False}) == ("out\nerr", False)
    assert text({"type": "text", "file": {"content": "body", "numLines": 1}}) == ("body", False)
    assert text([{"type": "text", "text": "a"}, {"type": "image", "data": "x"}]) == (
        "a\n[image]",
        False,
    )
    assert text({"content": [{"type": "text", "text": "e"}], "isError": True}) == ("e", True)
    assert text({"filePath": "/a", "success": True}) == ('{"filePath":"/a","success":true}', False)
    assert text(None) == ("", False)


def test_count_increments_and_drain_removes_both(qdir: Path) -> None:
    """increment_count returns the previous value; drain deletes .jsonl and .count."""
    assert queue.read_count(qdir, "s") == 0
    assert [queue.increment_count(qdir, "s") for _ in range(3)] == [0, 1, 2]
    assert queue.read_count(qdir, "s") == 3
    (qdir / "s.count").write_text("garbage")
    assert queue.read_count(qdir, "s") == 0
    queue.append_calls(qdir, "s", [call("Bash", "x")])
    queue.consume(qdir, "s")
    assert not (qdir / "s.jsonl").exists() and not (qdir / "s.count").exists()
    queue.consume(tmp_missing := qdir / "nope", "s")
    assert not tmp_missing.exists()


def test_peek_skips_damaged_lines(qdir: Path) -> None:
    """A torn or foreign line does not hide the valid records."""
    qdir.mkdir()
    (qdir / "s.jsonl").write_text('{"tool":"a"}\n{broken\n[1]\n\n{"tool":"b"}\n')
    assert [r["tool"] for r in queue.peek_records(qdir, "s")] == ["a", "b"]


def test_lock_timeout_spills_an_append_and_gives_up_anything_else(qdir: Path) -> None:
    """A lock held elsewhere past the timeout: append spills its batch (the queue file
    unchanged until the next holder merges it), a requeue gives up with QueueError."""
    import fcntl

    qdir.mkdir()
    fd = os.open(qdir / "s.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        queue.append_calls(qdir, "s", [call("Bash", "x")])
        with pytest.raises(queue.QueueError, match="busy"):
            queue.requeue(qdir, "s")
    finally:
        os.close(fd)
    assert not (qdir / "s.jsonl").exists()
    assert len(list(qdir.glob("s.*.spill"))) == 1
    queue.append_calls(qdir, "s", [call("Bash", "y")])
    assert [r["tool_use_id"] for r in queue.peek_records(qdir, "s")] == ["x", "y"]


def test_queue_dir_is_private(qdir: Path) -> None:
    """The queue directory is created 0700."""
    queue.append_calls(qdir, "s", [call("Bash", "x")])
    assert (qdir.stat().st_mode & 0o777) == 0o700


def test_cleanup_removes_week_old_files_once_a_day(qdir: Path) -> None:
    """Files untouched for 7 days go; fresh ones stay; a second run within a day is a no-op."""
    queue.append_calls(qdir, "old", [call("Bash", "x")])
    queue.append_calls(qdir, "new", [call("Bash", "y")])
    now = time.time()
    week_ago = now - 8 * 24 * 3600
    for suffix in (".jsonl", ".lock"):
        os.utime(qdir / f"old{suffix}", (week_ago, week_ago))
    assert queue.cleanup(qdir, now=now) == 2
    assert sorted(p.name for p in qdir.iterdir() if not p.name.startswith(".")) == [
        "new.jsonl",
        "new.lock",
    ]
    os.utime(qdir / "new.jsonl", (week_ago, week_ago))
    assert queue.cleanup(qdir, now=now + 3600) == 0
    assert queue.cleanup(qdir, now=now + 25 * 3600) == 1


def test_payload_shape_and_summaries() -> None:
    """The payload is compact, non-ASCII-escaped JSON with summarised args, oldest first."""
    records = [
        queue.make_record(
            "S", {"tool_name": "Edit", "tool_input": {"filePath": "/x/é.py"}, "tool_response": "o"}
        ),
        queue.make_record(
            "S",
            {"tool_name": "bash", "tool_input": {"command": "z" * 300}, "tool_response": "q" * 600},
        ),
        queue.make_record("S", {"tool_name": "glob", "tool_input": {"pattern": "*.md"}}),
        queue.make_record("S", {"tool_name": "WebFetch", "tool_input": {"url": "u" * 200}}),
    ]
    text = queue.build_payload(records, "acme/app")
    assert text is not None and "é" in text and ", " not in text[:40]
    payload = json.loads(text)
    assert list(payload) == ["interactions", "projectStore", "globalStore"]
    assert payload["projectStore"] == "acme/app" and payload["globalStore"] == "global"
    first, second, third, fourth = payload["interactions"]
    assert list(first) == ["tool", "title", "args", "output"]
    assert first["args"] == "file: /x/é.py" and first["title"] == "é.py"
    assert second["args"] == "z" * 120 and second["output"] == "q" * 500 + "..."
    assert third["args"] == "pattern: *.md"
    assert fourth["args"] == json.dumps({"url": "u" * 200}, separators=(",", ":"))[:120]
    assert queue.build_payload([], "acme/app") is None


def test_payload_writes_format_characters_escaped() -> None:
    """A queued answer's bidi override or tag characters (invisible ASCII) reach the
    extractor as \\uXXXX, not raw; the payload decodes to the same text and keeps readable
    non-ASCII as it is."""
    output = "résumé \u202eevil\u2066 \U000e0041\U000e0042 \x9b end"
    call = {"tool_name": "WebFetch", "tool_input": {"url": "u\u200b"}, "tool_response": output}
    text = queue.build_payload([queue.make_record("S", call)], "acme/app")
    assert text is not None and text.startswith('{"interactions":[{')
    assert "résumé \\u202eevil\\u2066 \\udb40\\udc41\\udb40\\udc42 \\u009b end" in text
    assert text.isprintable()
    (interaction,) = json.loads(text)["interactions"]
    assert interaction["output"] == output
    assert interaction["args"] == interaction["title"] == '{"url":"u\u200b"}'


HOLDER = """
import sys
from pathlib import Path
from thatch.frontend.queue.files import locked as _locked
with _locked(Path(sys.argv[1]), timeout=120):
    print("held", flush=True)
    sys.stdin.readline()
"""


def lock_holder(lock: Path) -> subprocess.Popen[str]:
    """A process that takes the queue lock and holds it until its stdin gets a line."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    return holder


def release(holder: subprocess.Popen[str]) -> None:
    """Tell a holder (or waiter) to let go, and wait for it to exit."""
    holder.communicate("\n", timeout=60)
    assert holder.returncode == 0


def lock_is_free(lock: Path) -> bool:
    """Whether the file now at ``lock`` can be flocked (the lock every new taker gets)."""
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def test_cleanup_keeps_a_lock_another_process_holds(qdir: Path) -> None:
    """A week-old lock held by a live process stays (same inode), so the next taker waits
    for it instead of locking a fresh file beside it; once released, cleanup removes it."""
    queue.append_calls(qdir, "busy", [call("Bash", "x")])
    lock = qdir / "busy.lock"
    holder = lock_holder(lock)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        inode = lock.stat().st_ino
        later = time.time() + 8 * 24 * 3600  # the holder touched it now: a week from now
        for name in ("busy.jsonl", "busy.lock"):
            os.utime(qdir / name, (later - 8 * 24 * 3600, later - 8 * 24 * 3600))
        assert queue.cleanup(qdir, now=later, force=True) == 1  # the .jsonl only
        assert lock.stat().st_ino == inode
        assert not lock_is_free(lock)
    finally:
        release(holder)
    assert queue.cleanup(qdir, now=later, force=True) == 1
    assert not lock.exists()


WAITER = """
import os, sys
from pathlib import Path
from thatch.frontend.queue.files import locked as _locked
with _locked(Path(sys.argv[1]), timeout=120):
    print(os.stat(sys.argv[1]).st_ino, flush=True)
    sys.stdin.readline()
"""


def has_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has ``path`` open (its /proc fd links)."""
    fds = Path(f"/proc/{pid}/fd")
    try:
        return any(os.readlink(fd) == str(path) for fd in fds.iterdir())
    except (FileNotFoundError, ProcessLookupError):
        return False


def held_and_awaited(
    qdir: Path,
) -> tuple[Path, subprocess.Popen[str], subprocess.Popen[str]]:
    """Session s's queue lock, a process holding it, and a process started to wait for it."""
    queue.append_calls(qdir, "s", [call("Bash", "x")])
    lock = qdir / "s.lock"
    holder = lock_holder(lock)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    waiter = subprocess.Popen(
        [sys.executable, "-c", WAITER, str(lock)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    return lock, holder, waiter


def test_taker_of_a_removed_lock_file_locks_the_file_now_at_the_path(qdir: Path) -> None:
    """A process waiting on a lock file that is unlinked meanwhile (by cleanup, whoever) does
    not go on holding the orphan: it locks the file at the path, so others wait for it."""
    lock, first, waiter = held_and_awaited(qdir)
    try:
        # It opened the lock file and waits on it.
        wait_until(lambda: has_open(waiter.pid, lock), 60, "the waiter to open the lock")
        lock.unlink()
        release(first)
        assert waiter.stdout is not None
        held_inode = int(waiter.stdout.readline())
        assert lock.stat().st_ino == held_inode
        assert not lock_is_free(lock)
    finally:
        release(waiter)


# flock(2)'s number in /proc/<pid>/syscall, per machine
FLOCK_SYSCALL = {"x86_64": 73, "aarch64": 32}


def in_flock(pid: int) -> bool:
    """Whether process ``pid`` is blocked in flock(2) now (its /proc syscall line)."""
    try:
        fields = Path(f"/proc/{pid}/syscall").read_text().split()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return bool(fields) and fields[0] == str(FLOCK_SYSCALL[platform.machine()])


def test_a_waiting_hook_is_queued_in_the_kernel_not_polling(qdir: Path) -> None:
    """A hook waiting for the queue lock sleeps in flock(2), so the release wakes it at once:
    polling with sleeps lost the lock again and again to later hooks under heavy load."""
    lock, holder, waiter = held_and_awaited(qdir)
    try:
        wait_until(lambda: in_flock(waiter.pid), 60, "the waiter to block in flock(2)")
        release(holder)
        assert waiter.stdout is not None
        assert int(waiter.stdout.readline()) == lock.stat().st_ino
    finally:
        release(waiter)


@pytest.fixture
def no_alarm() -> Iterator[None]:
    """The test process without pytest-timeout's alarm (put back after the test)."""
    handler = signal.getsignal(signal.SIGALRM)
    delay, interval = signal.setitimer(signal.ITIMER_REAL, 0)
    try:
        yield
    finally:
        signal.signal(signal.SIGALRM, handler)
        if delay > 0:
            signal.setitimer(signal.ITIMER_REAL, delay, interval)


def test_a_lock_timeout_leaves_the_alarm_as_it_was(qdir: Path, no_alarm: None) -> None:
    """The timed wait restores the process's SIGALRM handler and leaves no timer running;
    a process whose own alarm is set keeps it (and waits all the same)."""
    qdir.mkdir()
    lock = qdir / "s.lock"

    def mine(signum: int, frame: object) -> None:
        raise AssertionError("the caller's alarm handler ran")

    signal.signal(signal.SIGALRM, mine)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another open file: it conflicts within one process
        with (
            pytest.raises(queue.QueueError, match=r"busy for 0\.05 s"),
            queue_files.locked(lock, timeout=0.05),
        ):
            pass
        assert signal.getsignal(signal.SIGALRM) is mine
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
        signal.setitimer(signal.ITIMER_REAL, 3600)
        with (
            pytest.raises(queue.QueueError, match=r"busy for 0\.05 s"),
            queue_files.locked(lock, timeout=0.05),
        ):
            pass
        assert signal.getsignal(signal.SIGALRM) is mine
        assert 3000 < signal.getitimer(signal.ITIMER_REAL)[0] <= 3600
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        os.close(fd)
    with queue_files.locked(lock, timeout=5):
        assert not lock_is_free(lock)


def test_a_thread_other_than_main_waits_for_the_lock_too(qdir: Path) -> None:
    """The MCP server's worker threads cannot take signals: they wait for the lock (and give
    up) all the same."""
    qdir.mkdir()
    lock = qdir / "s.lock"
    outcomes: list[str] = []

    def take(timeout: float) -> None:
        try:
            with queue_files.locked(lock, timeout=timeout):
                outcomes.append("held")
        except queue.QueueError as error:
            outcomes.append(str(error))

    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        worker = threading.Thread(target=take, args=(0.05,))
        worker.start()
        worker.join()
    finally:
        os.close(fd)
    worker = threading.Thread(target=take, args=(5,))
    worker.start()
    worker.join()
    assert outcomes == ["queue lock s.lock busy for 0.05 s; gave up", "held"]


NEAR_DEADLINE = """
import fcntl, os, signal, sys, time
from thatch.frontend.queue import files
lock = sys.argv[1]
holder = os.open(lock, os.O_RDWR | os.O_CREAT)
fcntl.flock(holder, fcntl.LOCK_EX)
fd = os.open(lock, os.O_RDWR)
for left in [micro * 1e-6 for micro in range(1, 201)] * 30:
    assert files._flock_until(fd, time.monotonic() + left) is False
assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
assert signal.getsignal(signal.SIGALRM) is signal.SIG_DFL
print("gave up 6000 times")
"""


def test_a_wait_that_ends_microseconds_away_still_gives_up(qdir: Path) -> None:
    """An alarm that goes off before flock(2) starts to block cannot be missed: the timer
    repeats, so the wait still ends (with one tick only, it waited for the holder)."""
    qdir.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", NEAR_DEADLINE, str(qdir / "s.lock")],
        capture_output=True,
        text=True,
        timeout=60,  # only so a hang fails the test instead of stalling the suite
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "gave up 6000 times\n", "")
