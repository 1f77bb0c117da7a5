"""Merging spilled batches (docs/hooks.md §spilled-batches), in process: what the lock's
holder does with the spills it finds, at each step a holder may fail or die, and what a
spill file written by anything does to it. A holder that dies is a child process killed
(``os._exit``) at that step; every wait is for its exit."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from thatch.frontend import queue
from thatch.frontend.queue import append, files, spill

S = "ses_merge"


def call(use_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "tool_name": "Bash",
        "tool_input": {"command": use_id},
        "tool_use_id": use_id,
        "tool_response": "ok",
        **extra,
    }


def ids(directory: Path, session: str = S) -> list[str]:
    return [str(r.get("tool_use_id")) for r in queue.peek_records(directory, session)]


def spills(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.endswith(".spill"))


def marker(directory: Path, session: str = S) -> Path:
    return directory / f"{queue.safe_name(session)}.spilled"


def spill_calls(
    directory: Path, *use_ids: str, at_ms: int | None = None, project: str = ""
) -> None:
    """What a tool hook that found the lock busy writes: its calls, in a spill file."""
    jsonl = queue.queue_paths(directory, S)[0]
    now = time.time_ns() // 1_000_000 if at_ms is None else at_ms
    origin = spill.Origin(now, project=project)
    events = [{"record": queue.make_record(S, call(i), None, origin.at_ms)} for i in use_ids]
    assert spill.write_spill(jsonl, spill.Spill(origin, None, events))


_DIES = """
import importlib, os, sys
from pathlib import Path
from thatch.frontend import queue
module, _, where = sys.argv[2].rpartition(".")
*owners, name = where.split(":")
target = importlib.import_module(module)
for owner in owners:
    target = getattr(target, owner)
setattr(target, name, lambda *args, **kwargs: os._exit(9))
call = {"tool_name": "Bash", "tool_input": {}, "tool_use_id": sys.argv[3], "tool_response": "ok"}
queue.append_calls(Path(sys.argv[1]), sys.argv[4], [call])
"""


def holder_dies(directory: Path, where: str, use_id: str) -> None:
    """A tool hook queueing ``use_id``, killed as it calls ``where`` (``module.name``, or
    ``module.Class:name``, patched in that child process only)."""
    args = [sys.executable, "-c", _DIES, str(directory), where, use_id, S]
    done = subprocess.run(args, capture_output=True, timeout=60, check=False)
    assert done.returncode == 9, done.stderr


def test_a_holder_that_dies_before_writing_the_queue_leaves_the_spill_to_the_next(
    tmp_path: Path,
) -> None:
    """The holder found the marker and read the spill, then died before it wrote the
    queue: the marker stays, so the next holder merges the spill; nothing is lost (before,
    the marker went first and no holder, session-end or daily pass looked again)."""
    directory = tmp_path / "queue"
    queue.append_calls(directory, S, [call("a")])
    spill_calls(directory, "b")
    holder_dies(directory, "thatch.frontend.queue.append._Batch:_write", "dead")
    assert ids(directory) == ["a"] and marker(directory).exists()
    queue.append_calls(directory, S, [call("c")])
    assert ids(directory) == ["a", "b", "c"]
    assert spills(directory) == [] and not marker(directory).exists()


def test_a_holder_that_dies_after_writing_the_queue_extracts_nothing_twice(
    tmp_path: Path,
) -> None:
    """The holder wrote the merged queue, then died before it deleted the spill: the
    marker stays, the next holder merges the spill again at once (its call still queued:
    skipped) and deletes it; an extractor gets each call once, and a later spill brings
    back none of them (before, the spill waited unmarked for the next one, and its call
    was extracted again)."""
    directory = tmp_path / "queue"
    queue.append_calls(directory, S, [call("a")])
    spill_calls(directory, "b")
    holder_dies(directory, "thatch.frontend.queue.spill.forget_spills", "c")
    assert ids(directory) == ["a", "b", "c"] and marker(directory).exists()
    queue.append_calls(directory, S, [call("d")])
    assert ids(directory) == ["a", "b", "c", "d"]
    assert spills(directory) == [] and not marker(directory).exists()
    first = [r["tool_use_id"] for r in queue.accept(directory, S)]
    assert queue.complete(directory, S) == 4
    spill_calls(directory, "e")
    queue.append_calls(directory, S, [call("f")])
    second = [r["tool_use_id"] for r in queue.accept(directory, S)]
    assert (first, second) == (["a", "b", "c", "d"], ["e", "f"])


def spilled_completion(directory: Path, *use_ids: str) -> dict[str, Any]:
    """What an extractor's save (a sub-agent's) whose hook found the lock busy spills: its
    calls and the save, seeing the snapshot handed out now (returned: ``.state``)."""
    jsonl = queue.queue_paths(directory, S)[0]
    state = json.loads(files.state_path(jsonl).read_text())
    origin = spill.Origin(time.time_ns() // 1_000_000, subagent=True, agent_id="extractor")
    events: list[dict[str, Any]] = [
        {"record": queue.make_record(S, call(i), None, origin.at_ms)} for i in use_ids
    ]
    events.append({"drain": "memory_remember", "started": None})
    seen = files.Seen(state["cursor"], state["accepted_at"])
    assert spill.write_spill(jsonl, spill.Spill(origin, seen, events))
    return dict(state)


@pytest.mark.parametrize(
    "where",
    ["thatch.frontend.queue.append.write_records", "thatch.frontend.queue.append.unlink"],
    ids=["writing-the-queue", "after-the-queue"],
)
def test_a_holder_dying_as_it_completes_a_spilled_snapshot_extracts_nothing_twice(
    tmp_path: Path, where: str
) -> None:
    """An extractor fetched a, b; its save's hook spilled. The holder merging it dies as
    it writes: before the queue (the snapshot state was deleted first: the next holder's
    replay of the save found no snapshot to complete, and a, b were pending again,
    extracted twice), or after the queue and before the state (the state is written last
    now: the replay completes the snapshot again, whose records are gone already)."""
    directory = tmp_path / "queue"
    queue.append_calls(directory, S, [call("a"), call("b")])
    assert [r["tool_use_id"] for r in queue.accept(directory, S)] == ["a", "b"]
    spilled_completion(directory, "c")
    holder_dies(directory, where, "dead")
    assert marker(directory).exists()
    queue.append_calls(directory, S, [call("d")])
    assert [i for i in ids(directory) if i != "dead"] == ["c", "d"]
    assert not files.state_path(queue.queue_paths(directory, S)[0]).exists()
    assert spills(directory) == [] and not marker(directory).exists()


@pytest.mark.parametrize("split", [False, True], ids=["whole", "split"])
def test_a_spill_written_while_the_holder_merges_stays_marked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, split: bool
) -> None:
    """Another hook spills right after the holder listed the spills (so the holder
    merges without it): ``whole``, the writer renames its spill and writes the marker
    before the holder removes the marker (the holder's listing again must mark it
    afresh); ``split``, the writer's marker comes only after the holder is done (the
    writer must rename its spill before it marks, never the other way). Either way the
    spill stays marked and the next holder merges it."""
    directory = tmp_path / "queue"
    queue.append_calls(directory, S, [call("a")])
    spill_calls(directory, "b")
    listing, real_write = spill._spill_paths, files.write_atomic
    phase = "before"
    writer_writes: list[Path] = []
    deferred: list[Callable[[], None]] = []

    def listed(jsonl: Path) -> list[Path]:
        nonlocal phase
        found = listing(jsonl)
        if phase == "before":  # the holder's first listing (the writer's own lists too)
            phase = "writing"
            spill_calls(directory, "w")
            phase = "after"
        return found

    def write_atomic(path: Path, text: str) -> None:
        if phase == "writing":
            writer_writes.append(path)
            if split and len(writer_writes) == 2:
                deferred.append(lambda: real_write(path, text))
                return
        real_write(path, text)

    monkeypatch.setattr(spill, "_spill_paths", listed)
    monkeypatch.setattr(spill, "write_atomic", write_atomic)
    queue.append_calls(directory, S, [call("c")])
    for step in deferred:
        step()
    monkeypatch.undo()
    assert ids(directory) == ["a", "b", "c"]
    assert len(spills(directory)) == 1 and marker(directory).exists()
    queue.append_calls(directory, S, [call("d")])
    assert sorted(ids(directory)) == ["a", "b", "c", "d", "w"]
    assert spills(directory) == [] and not marker(directory).exists()


def write_raw(directory: Path, name: str, value: object) -> Path:
    """A file named like one of the session's spills, holding ``value`` (JSON text as is),
    and the session's marker."""
    path = directory / f"{queue.safe_name(S)}.{name}.spill"
    path.write_text(value if isinstance(value, str) else json.dumps(value))
    marker(directory).touch()
    return path


def bad_record() -> dict[str, Any]:
    return {"record": queue.make_record(S, call("bad"))}


@pytest.mark.parametrize(
    "hostile",
    [
        {"at": 10**20},  # no plausible time (calls' times: below 1e14 ms)
        {"at": 1.5},
        {"at": True},
        {"events": [{"drain": ["memory_remember"]}, bad_record()]},
    ],
    ids=["at-huge", "at-float", "at-bool", "drain-list"],
)
def test_a_hostile_spill_is_deleted_and_jams_no_holder(
    tmp_path: Path, hostile: dict[str, Any]
) -> None:
    """A file named like a spill, written by anything, between two good spills: the next
    holder deletes it (its calls not merged, but for the drain that names no tool: that
    event alone goes) and merges the good ones with its own call, and so does every holder
    after it."""
    directory = tmp_path / "queue"
    queue.append_calls(directory, S, [call("a")])
    spill_calls(directory, "good1")
    value = {"at": 1, "subagent": False, "agent_id": "", "project": "", "snapshot": None}
    value["events"] = [bad_record()]
    value.update(hostile)
    write_raw(directory, "1-1-hostile", value)
    spill_calls(directory, "good2")
    queue.append_calls(directory, S, [call("live")])
    kept = ["bad"] if "events" in hostile else []
    assert sorted(ids(directory)) == sorted(["a", *kept, "good1", "good2", "live"])
    assert spills(directory) == [] and not marker(directory).exists()
    queue.append_calls(directory, S, [call("next")])
    assert ids(directory)[-1] == "next"


ACCEPTED = object()  # the accepted_at of the snapshot handed out, filled in


@pytest.mark.parametrize(
    "unusable",
    [
        {"seen": 10**400},  # an earlier release's key: accepted_at alone
        {"seen": float("nan")},  # written as NaN, which json reads back
        {"seen": float("inf")},
        {"seen": "1"},
        {"seen": True},
        {"seen": [1]},
        {"snapshot": {"cursor": 1, "accepted_at": float("nan")}},
        {"snapshot": {"cursor": 1, "accepted_at": 10**400}},
        {"snapshot": {"cursor": True, "accepted_at": ACCEPTED}},
        {"snapshot": {"cursor": -1, "accepted_at": ACCEPTED}},
        {"snapshot": {"accepted_at": ACCEPTED}},
        {"snapshot": [1, ACCEPTED]},
        {"snapshot": ACCEPTED, "seen": ACCEPTED},  # no snapshot, and the old key ignored
    ],
    ids=[
        *("seen-" + i for i in ("huge", "nan", "infinity", "text", "bool", "list")),
        *("snapshot-" + i for i in ("nan", "huge", "cursor-bool", "cursor-negative")),
        *("snapshot-" + i for i in ("no-cursor", "list", "number")),
    ],
)
def test_a_spills_unusable_seen_is_none_and_costs_no_call(
    tmp_path: Path, unusable: dict[str, Any]
) -> None:
    """A spill whose snapshot (``snapshot``, or an earlier release's ``seen``) is no
    cursor and finite ``accepted_at`` (a 400-digit integer, NaN or Infinity as json reads
    them back, anything else): its calls are merged, and its extractor's save completes no
    snapshot, as for a spill that saw none (before, the whole spill was deleted as
    implausible, calls and all; a 400-digit ``seen`` first raised in every holder)."""
    directory = tmp_path / "queue"
    queue.append_calls(directory, S, [call("a")])
    queue.accept(directory, S)
    state = files.state_path(queue.queue_paths(directory, S)[0])
    handed_out = state.read_bytes()
    accepted = json.loads(handed_out)["accepted_at"]
    text = json.dumps(unusable, default=lambda _: accepted)
    at_ms = time.time_ns() // 1_000_000
    value = {"at": at_ms, "subagent": True, "agent_id": "x", "project": "", **json.loads(text)}
    value["events"] = [
        {"record": queue.make_record(S, call("spilled"), None, at_ms)},
        {"drain": "memory_remember", "started": None},
    ]
    write_raw(directory, f"{at_ms}-1-unseen", value)
    queue.append_calls(directory, S, [call("b")])
    assert ids(directory) == ["a", "spilled", "b"]
    assert state.read_bytes() == handed_out
    assert spills(directory) == [] and not marker(directory).exists()


@pytest.mark.parametrize("handed_out", [-5000, 5000], ids=["before-its-hook", "while-it-waited"])
def test_a_spill_of_the_release_before_completes_only_a_snapshot_handed_out_before_it(
    tmp_path: Path, handed_out: int
) -> None:
    """A spill of the release before this one (``seen``: the ``accepted_at`` its hook read
    after its wait) pending across the upgrade: its extractor's save completes the
    snapshot only if it was handed out before the hook began, as that release checked;
    one handed out while it waited is another extractor's, and stays (before, such a spill
    was read as one whose ``seen`` came before its wait, and completed it)."""
    directory = tmp_path / "queue"
    queue.append_calls(directory, S, [call("a"), call("b")])
    began = time.time_ns() // 1_000_000
    queue.accept(directory, S, now=(began + handed_out) / 1000)
    state = files.state_path(queue.queue_paths(directory, S)[0])
    other = state.read_bytes()
    value = {"at": began, "subagent": True, "agent_id": "old", "project": ""}
    value["seen"] = json.loads(other)["accepted_at"]
    value["events"] = [{"drain": "memory_remember", "started": None}]
    write_raw(directory, f"{began}-1-old", value)
    queue.append_calls(directory, S, [call("c")])
    if handed_out < 0:
        assert ids(directory) == ["c"] and not state.exists()
    else:
        assert ids(directory) == ["a", "b", "c"] and state.read_bytes() == other


def test_a_spill_of_the_release_before_with_the_largest_time_jams_no_holder(
    tmp_path: Path,
) -> None:
    """A damaged ``.state`` whose ``accepted_at`` is finite but near the largest float,
    and a spill of the release before that saw it: that release's check (the snapshot
    handed out before the hook's ``at``, in ms) overflowed in every holder; the spill is
    merged, and its save completes nothing."""
    directory = tmp_path / "queue"
    queue.append_calls(directory, S, [call("a")])
    state = files.state_path(queue.queue_paths(directory, S)[0])
    state.write_text('{"cursor": 1, "accepted_at": 1.7e308}')
    at_ms = time.time_ns() // 1_000_000
    value = {"at": at_ms, "subagent": True, "agent_id": "old", "project": "", "seen": 1.7e308}
    value["events"] = [
        {"record": queue.make_record(S, call("b"), None, at_ms)},
        {"drain": "memory_remember", "started": None},
    ]
    write_raw(directory, f"{at_ms}-1-old", value)
    queue.append_calls(directory, S, [call("c")])
    assert ids(directory) == ["a", "b", "c"] and files.read_state(state)["cursor"] == 1


def test_a_spilled_save_completes_no_snapshot_with_its_time_but_not_its_cursor(
    tmp_path: Path,
) -> None:
    """An extractor's save saw the snapshot of a; the records were handed out again (a, b:
    another extractor's) with the same ``accepted_at`` (the clock stepped back to it, or
    a coarse one). The save's spill names the cursor too, so merged it completes nothing
    of the other extractor's (before, ``accepted_at`` alone matched it)."""
    directory = tmp_path / "queue"
    jsonl = queue.queue_paths(directory, S)[0]
    now = time.time()
    queue.append_calls(directory, S, [call("a")])
    queue.accept(directory, S, now=now)
    seen = files.Seen(**json.loads(files.state_path(jsonl).read_text()))
    queue.append_calls(directory, S, [call("b")])
    queue.accept(directory, S, now=now)
    other = files.state_path(jsonl).read_bytes()
    origin = spill.Origin(time.time_ns() // 1_000_000, subagent=True, agent_id="x")
    drain = {"drain": "memory_remember", "started": None}
    assert spill.write_spill(jsonl, spill.Spill(origin, seen, [drain]))
    queue.append_calls(directory, S, [call("c")])
    assert ids(directory) == ["a", "b", "c"]
    assert files.state_path(jsonl).read_bytes() == other


def busy_hook(
    monkeypatch: pytest.MonkeyPatch, directory: Path, *calls: dict[str, Any], project: str = ""
) -> None:
    """A tool hook with ``calls`` whose session lock another holder keeps: it gives up at
    once (its 2 s wait cut to none) and spills."""
    fd = os.open(queue.queue_paths(directory, S)[2], os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with monkeypatch.context() as patched:
            patched.setattr(append, "locked", lambda path: files.locked(path, timeout=0))
            queue.append_calls(directory, S, list(calls), project=project)
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    ("tool", "reads"),
    [
        ("Bash", 1),
        ("mcp__thatch__memory_recall", 1),
        ("mcp__thatch__memory_remember", 2),
        ("mcp__thatch__extraction_done", 2),
        ("mcp__thatch__get_extraction_payload", 2),
    ],
    ids=["bash", "recall", "save", "done", "fetch"],
)
def test_a_hook_reads_the_snapshot_before_its_wait_only_for_a_save_or_fetch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tool: str, reads: int
) -> None:
    """A hook reads ``.state`` under the lock (its batch's drains act on it); before its
    wait too (the snapshot its spill may name) only when its batch may drain or fetch: a
    normal call reads it once (before, every tool hook read it twice)."""
    directory = tmp_path / "queue"
    queue.append_calls(directory, S, [call("a")])
    queue.accept(directory, S)
    real, read = files.read_state, []

    def counted(path: Path) -> dict[str, Any]:
        read.append(path)
        return real(path)

    monkeypatch.setattr(append, "read_state", counted)
    queue.append_calls(directory, S, [call("b", tool_name=tool, tool_response="[saved] x")])
    assert len(read) == reads


@pytest.mark.parametrize(
    "accepted_at",
    ["NaN", "Infinity", "-Infinity", "1e400", "9" * 400, "true", '"1"'],
    ids=["nan", "infinity", "minus-infinity", "1e400", "400-digits", "bool", "text"],
)
def test_a_damaged_snapshot_state_costs_no_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, accepted_at: str
) -> None:
    """A ``.state`` whose ``accepted_at`` is no finite number reads as no snapshot: a hook
    that spills (its batch holds an ``extraction_done``, so it reads the state before its
    wait) notes none as the snapshot it saw (before, it copied NaN or Infinity into its
    spill, and the next holder deleted the spill, its call with it), and no hook fails on
    it (a 400-digit integer raised OverflowError in every tool hook, dropping its call)."""
    directory = tmp_path / "queue"
    queue.append_calls(directory, S, [call("a")])
    state = files.state_path(queue.queue_paths(directory, S)[0])
    state.write_text(f'{{"cursor": 1, "accepted_at": {accepted_at}}}')
    assert files.read_state(state) == {}
    done = call("done", tool_name="mcp__thatch__extraction_done", tool_response="[acknowledged]")
    busy_hook(monkeypatch, directory, call("b"), done)
    (written,) = spills(directory)
    value = json.loads(written.read_text())
    assert value["snapshot"] is None and value["events"][-1]["drain"] == "extraction_done"
    queue.append_calls(directory, S, [call("c")])
    assert ids(directory) == ["a", "b", "c"]


def test_a_spill_is_read_no_further_than_a_hook_writes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spill file of a thousand events (a hook writes at most 20 records and 20
    drains or fetches): the holder reads only the newest 40, so the lock is not held for
    the rest (16 such files held it 13.6 s)."""
    directory = tmp_path / "queue"
    queue.append_calls(directory, S, [call("a")])
    at = time.time_ns() // 1_000_000
    records = [{"record": queue.make_record(S, call(f"r{i}"), None, at)} for i in range(1000)]
    write_raw(
        directory, f"{at}-1-many", {"at": at, "agent_id": "", "project": "", "events": records}
    )
    read: list[object] = []
    real = spill._event

    def counted(value: object) -> dict[str, Any] | None:
        read.append(value)
        return real(value)

    monkeypatch.setattr(spill, "_event", counted)
    queue.append_calls(directory, S, [call("b")])
    assert len(read) == 2 * queue.MAX_RECORDS
    assert ids(directory) == [*(f"r{i}" for i in range(981, 1000)), "b"]


@pytest.mark.parametrize("char", ["漢", "😀", "é"], ids=["cjk", "emoji", "latin"])
def test_a_spill_keeps_a_full_queue_of_records_in_any_script(tmp_path: Path, char: str) -> None:
    """A batch of 20 calls as large as records get, in a script ASCII JSON escapes (6
    bytes a character, 12 for an emoji, against UTF-8's 2 to 4): the spill keeps all 20,
    as the queue would have (before, it kept 15 of CJK ones and 7 of emoji ones)."""
    directory = tmp_path / "queue"
    batch = [
        call(
            f"id{i}", tool_input={f"k{j}": char * 500 for j in range(8)}, tool_response=char * 2000
        )
        for i in range(queue.MAX_RECORDS)
    ]
    queue.append_calls(directory / "live", S, batch)
    assert len(queue.peek_records(directory / "live", S)) == queue.MAX_RECORDS
    jsonl = queue.queue_paths(directory, S)[0]
    origin = spill.Origin(time.time_ns() // 1_000_000)
    events = [{"record": queue.make_record(S, c, None, origin.at_ms)} for c in batch]
    assert spill.write_spill(jsonl, spill.Spill(origin, None, events))
    queue.merge_spilled(directory, S)
    assert ids(directory) == [f"id{i}" for i in range(queue.MAX_RECORDS)]


def test_a_directory_at_the_marker_fails_no_hook_and_hides_no_spill(tmp_path: Path) -> None:
    """Something made a directory where the session's marker goes: a hook that spills
    still exits (its spill kept, unmarked), every lock holder (a tool hook, a fetch, the
    nudge's merge, a completion, session-end) still works and merges the spills it lists,
    and the directory is left alone. Before, each of them failed (IsADirectoryError)."""
    directory = tmp_path / "queue"
    queue.append_calls(directory, S, [call("a")])
    marker(directory).mkdir()
    spill_calls(directory, "b")
    queue.append_calls(directory, S, [call("c")])
    assert ids(directory) == ["a", "b", "c"] and spills(directory) == []
    spill_calls(directory, "d")
    queue.merge_spilled(directory, S)
    assert ids(directory) == ["a", "b", "c", "d"]
    spill_calls(directory, "e")
    assert [r["tool_use_id"] for r in queue.accept(directory, S)] == ["a", "b", "c", "d", "e"]
    spill_calls(directory, "f")
    assert queue.complete(directory, S) == 5
    assert ids(directory) == ["f"]
    assert queue.increment_count(directory, S) == 0
    spill_calls(directory, "g")
    assert queue.carry_over(directory, S, str(tmp_path)) == 2
    assert marker(directory).is_dir() and spills(directory) == []


def test_the_cap_drops_the_call_that_ended_first_not_the_one_merged_last(tmp_path: Path) -> None:
    """19 calls queued, then a spill of a call that ended before all of them, merged with
    a 20th: of the 21 the queue's cap drops the spilled one (the records are put in the
    order the calls ended), not the first queued (as appending it last would)."""
    directory = tmp_path / "queue"
    base = time.time_ns() // 1_000_000 - 60_000
    queue.append_calls(directory, S, [call(f"q{i}", ended_at=base + 1000 + i) for i in range(19)])
    spill_calls(directory, "early", at_ms=base)
    queue.append_calls(directory, S, [call("q19", ended_at=base + 2000)])
    assert ids(directory) == [f"q{i}" for i in range(20)]


def test_a_spilled_save_leaves_the_calls_that_ended_after_its_hook_began(tmp_path: Path) -> None:
    """The agent's save spilled; before it was merged another hook queued a call that
    ended after the save's hook began (its holder found no marker yet): merged, the save
    drains what ended before it, never that later call."""
    directory = tmp_path / "queue"
    base = time.time_ns() // 1_000_000 - 60_000
    queue.append_calls(directory, S, [call("before", ended_at=base)])
    jsonl = queue.queue_paths(directory, S)[0]
    save = spill.Spill(
        spill.Origin(base + 10), None, [{"drain": "memory_remember", "started": None}]
    )
    assert spill.write_spill(jsonl, save)
    marker(directory).unlink()  # as if the spill were renamed in after the next listing
    queue.append_calls(directory, S, [call("later", ended_at=base + 20)])
    assert ids(directory) == ["before", "later"]
    marker(directory).touch()  # its writer's marker
    queue.append_calls(directory, S, [call("next", ended_at=base + 30)])
    assert ids(directory) == ["later", "next"]


def test_a_save_merged_again_still_spares_its_own_call(tmp_path: Path) -> None:
    """A spill of the agent's call and its save beside it; the holder that merged it died
    before deleting it, so the next holder merges it again: the call, queued already, is
    still the save's own, and the save drains it no more than the first time."""
    directory = tmp_path / "queue"
    base = time.time_ns() // 1_000_000 - 60_000
    queue.append_calls(directory, S, [call("before", ended_at=base)])
    jsonl = queue.queue_paths(directory, S)[0]
    origin = spill.Origin(base + 10)
    own = {"record": queue.make_record(S, call("own"), None, origin.at_ms)}
    events: list[dict[str, Any]] = [own, {"drain": "memory_remember", "started": None}]
    assert spill.write_spill(jsonl, spill.Spill(origin, None, events))
    holder_dies(directory, "thatch.frontend.queue.spill.forget_spills", "c")
    assert ids(directory) == ["own", "c"] and marker(directory).exists()
    queue.append_calls(directory, S, [call("d")])
    assert ids(directory) == ["own", "c", "d"]
    assert spills(directory) == [] and not marker(directory).exists()


def test_a_spill_unreadable_for_now_is_kept_for_the_next_holder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read that fails for now (no file descriptor left in a long-running MCP server)
    deleted a good spill as if it were damaged, and its calls with it; it stays, marked,
    and the next holder merges it."""
    import errno

    directory = tmp_path / "queue"
    queue.append_calls(directory, S, [call("a")])
    spill_calls(directory, "b")
    from thatch.frontend.regular_files import read_regular as real

    def exhausted(path: Path, limit: int, *, follow_links: bool = True) -> bytes:
        raise OSError(errno.EMFILE, "Too many open files", str(path))

    monkeypatch.setattr(spill, "read_regular", exhausted)
    queue.append_calls(directory, S, [call("c")])
    assert ids(directory) == ["a", "c"]
    assert len(spills(directory)) == 1 and marker(directory).exists()
    monkeypatch.setattr(spill, "read_regular", real)
    queue.append_calls(directory, S, [call("d")])
    assert sorted(ids(directory)) == ["a", "b", "c", "d"]
    assert spills(directory) == [] and not marker(directory).exists()


def test_a_holder_dying_between_the_marker_and_its_listing_strands_no_spill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spill renamed after the holder's listing, its writer's marker before the holder
    removed it: the holder keeps the marker while any spill is left, so dying before its
    listing after the unlink strands nothing (before, the marker went first)."""
    directory = tmp_path / "queue"
    queue.append_calls(directory, S, [call("a")])
    spill_calls(directory, "b")
    listing = spill._spill_paths
    calls = 0

    def listed(jsonl: Path) -> list[Path]:
        nonlocal calls
        calls += 1
        found = listing(jsonl)
        if calls == 1:  # the holder's first listing: another hook spills right after
            spill_calls(directory, "w")
        return found

    def dies(path: Path) -> None:
        path.unlink(missing_ok=True)
        if path.name.endswith(".spilled"):  # gone, and the holder with it
            raise SystemExit("the holder died after removing the marker")

    monkeypatch.setattr(spill, "_spill_paths", listed)
    monkeypatch.setattr(spill, "_remove", dies)
    with contextlib.suppress(SystemExit):
        queue.append_calls(directory, S, [call("c")])
    monkeypatch.undo()
    assert len(spills(directory)) == 1 and marker(directory).exists()
    queue.append_calls(directory, S, [call("d")])
    assert sorted(ids(directory)) == ["a", "b", "c", "d", "w"]


def test_session_end_carries_a_spill_whose_marker_went_missing(tmp_path: Path) -> None:
    """The session ends: its spills go with the rest even without their marker, not a
    day later by the daily pass."""
    directory = tmp_path / "queue"
    project = tmp_path / "proj"
    project.mkdir()
    queue.append_calls(directory, S, [call("a")])
    spill_calls(directory, "b")
    marker(directory).unlink()
    assert queue.carry_over(directory, S, str(project)) == 2
    assert spills(directory) == []


def project_noted(directory: Path) -> Path:
    return directory / f"{queue.safe_name(S)}.project"


@pytest.mark.parametrize(
    "project",
    [
        "src/../../../etc",  # relative: the directory of whatever process reads it
        "../../.ssh",
        "/home/dev/src\x00/etc",
        "/home/dev/src/\ud800",  # a lone surrogate: no file name holds it
        "/" + "a" * 1_000_000,  # within a spill's bound, no path's
    ],
    ids=["relative", "dotdot", "nul", "surrogate", "1-mb"],
)
def test_a_spills_project_that_names_no_directory_is_not_noted(
    tmp_path: Path, project: str
) -> None:
    """A spill, written by anything, whose project is no absolute path a file name can
    hold: its calls are merged, and the session's project stays the one its hooks noted
    (before, the spill's string replaced it, and the daily pass could carry the session
    nowhere, or to the directory a relative path names where the pass runs)."""
    directory, own = tmp_path / "queue", str(tmp_path / "proj")
    queue.append_calls(directory, S, [call("a")], project=own)
    noted = project_noted(directory).read_bytes()
    at_ms = time.time_ns() // 1_000_000
    value = {"at": at_ms, "subagent": False, "agent_id": "", "project": project, "snapshot": None}
    value["events"] = [{"record": queue.make_record(S, call("spilled"), None, at_ms)}]
    write_raw(directory, f"{at_ms}-1-hostile", value)
    queue.append_calls(directory, S, [call("b")])
    assert ids(directory) == ["a", "spilled", "b"]
    assert project_noted(directory).read_bytes() == noted
    assert spills(directory) == []


@pytest.mark.parametrize(
    "project",
    ["/home/dev/src/widgets/../../../../etc", "/tmp/a\nb\x1b[2J\u202e\udcff"],
    ids=["dotdot", "control"],
)
def test_a_spills_project_is_noted_as_a_hooks_own_would_be(tmp_path: Path, project: str) -> None:
    """An absolute path with ``..`` or control characters (and a byte no UTF-8 holds) names
    a directory, as a host's ``cwd`` may: noted as the hooks note their own, as one line of
    ASCII JSON, and read back as it was (no queue file is named by it: a carry file's name
    is a hash)."""
    directory = tmp_path / "queue"
    queue.append_calls(directory, S, [call("a")], project=str(tmp_path))
    spill_calls(directory, "b", project=project)
    queue.append_calls(directory, S, [call("c")])
    assert ids(directory) == ["a", "b", "c"]
    text = project_noted(directory).read_text("ascii")
    assert text.count("\n") == 1 and json.loads(text) == {"project": project}
    assert files.read_project(project_noted(directory)) == project


def test_a_hook_whose_project_no_directory_has_still_spills_its_calls(tmp_path: Path) -> None:
    """A hook's project of 10 MB (a host's ``cwd``, its stdin may hold 16 MiB) spilled with
    its calls made the spill too large, and the next holder deleted it, calls and all: the
    spill leaves out such a project, and its calls are merged."""
    directory = tmp_path / "queue"
    queue.append_calls(directory, S, [call("a")], project=str(tmp_path))
    spill_calls(directory, "b", project="/" + "a" * 10_000_000)
    (written,) = spills(directory)
    assert json.loads(written.read_text())["project"] == ""
    queue.append_calls(directory, S, [call("c")])
    assert ids(directory) == ["a", "b", "c"]
    assert files.read_project(project_noted(directory)) == str(tmp_path)


@pytest.mark.parametrize("spilled", [False, True], ids=["direct", "spilled"])
@pytest.mark.parametrize(
    "project",
    ["src", "/home/dev/src\x00/etc", "/" + "a" * 1_000_000],
    ids=["relative", "nul", "1-mb"],
)
def test_a_hooks_project_that_names_no_directory_is_noted_by_neither_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, project: str, spilled: bool
) -> None:
    """A hook whose project is no directory ``.project`` may hold queues its call, and
    the session's project stays the one its hooks noted, whether the hook gets the lock or
    spills (before, only a spill's was checked: a hook that got the lock replaced the
    session's project with one the daily pass reads as none)."""
    directory, own = tmp_path / "queue", str(tmp_path / "proj")
    queue.append_calls(directory, S, [call("a")], project=own)
    noted = project_noted(directory).read_bytes()
    if spilled:
        busy_hook(monkeypatch, directory, call("b"), project=project)
    else:
        queue.append_calls(directory, S, [call("b")], project=project)
    queue.append_calls(directory, S, [call("c")])
    assert ids(directory) == ["a", "b", "c"]
    assert project_noted(directory).read_bytes() == noted
