"""The generated opencode plugin when a session goes idle (docs/hooks.md §opencode): direct
extraction through a ``thatch-extraction`` child session, and the chat wake. Run under node
against a fake opencode client that records every call and a fake ``thatch`` that logs
its commands and answers from files the test writes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tests.support.host_payloads import host_payload
from tests.test_setup_opencode_plugin import NODE
from thatch.frontend.setup.opencode_plugin import render

TOP = "ses_top"
CHILD = "ses_child1"  # the fake client's first created session
POINTER = (
    "[thatch] System notification, not user input: 1 unread chat message(s) from "
    'ruby-00001. Read them with chat {"action": "read", "as": "jade-00002"}. Reply only if '
    "it matters to your current work; otherwise carry on."
)

# Fake thatch: logs "<args>\t<stdin>"; prints <dir>/<command>.out if present, else
# <dir>/<command>.once (then deletes it: an answer given once, as chat-notify's window).
FAKE = """#!/bin/sh
input=$(cat)
printf '%s\\t%s\\n' "$*" "$input" >> "{dir}/calls.log"
[ -p "{dir}/$1.gate" ] && read line < "{dir}/$1.gate"
if [ -f "{dir}/$1.out" ]; then cat "{dir}/$1.out"; exit 0; fi
if [ -f "{dir}/$1.once" ]; then cat "{dir}/$1.once"; rm -f "{dir}/$1.once"; exit 0; fi
case "$1" in
  reminder) printf '{{"additional_context": "REMINDER"}}\\n' ;;
  flush-tools) printf '{{"additional_context": "NUDGE"}}\\n' ;;
esac
"""

# A fake opencode client. FAKE_CONFIG: sessions (id -> info), status (the session.status
# map), fail (method names that answer an error), sync (no promptAsync), steps. A step
# is {event}, {tool: {input, output}}, {chat: {session, parts}} or {dispose: true}; ids
# "$child1"… stand for the sessions the fake created.
DRIVER = """
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { ThatchPlugin } from "./plugin.mjs";
const config = JSON.parse(process.env.FAKE_CONFIG);
const calls = [];
const sessions = { ...config.sessions };
let created = 0;
const fail = new Set(config.fail ?? []);
const answer = (name, data) => {
  if (fail.has(name)) return Promise.resolve({ error: { name: "UnknownError" } });
  return Promise.resolve({ data });
};
const session = {
  get: (o) => {
    const info = sessions[o.path.id];
    return Promise.resolve(info ? { data: { id: o.path.id, ...info } } : { error: {} });
  },
  messages: () => Promise.resolve({ data: [] }),
  create: (o) => {
    calls.push(["create", o.body]);
    if (fail.has("create")) return answer("create");
    const id = "ses_child" + ++created;
    sessions[id] = { parentID: o.body.parentID, title: o.body.title };
    return answer("create", { id, ...sessions[id] });
  },
  promptAsync: (o) => {
    calls.push(["promptAsync", o.path.id, o.body.parts]);
    return answer("promptAsync");
  },
  prompt: (o) => {
    calls.push(["prompt", o.path.id, o.body.parts]);
    return answer("prompt", { info: { role: "assistant" }, parts: [] });
  },
  delete: (o) => {
    calls.push(["delete", o.path.id]);
    return answer("delete", true);
  },
  status: () => answer("status", config.status ?? {}),
};
if (config.sync) delete session.promptAsync;
const client = { session, tui: { showToast: (o) => {
  calls.push(["toast", o.body]);
  return answer("toast", true);
} } };
const hooks = await ThatchPlugin({ client, directory: "/tmp" });
const ids = (value) => JSON.parse(JSON.stringify(value).replace(/\\$child(\\d)/g, "ses_child$1"));
const chats = [];
for (const raw of config.steps) {
  const step = ids(raw);
  if (step.event) await hooks.event({ event: step.event });
  else if (step.tool) await hooks["tool.execute.after"](step.tool.input, step.tool.output);
  else if (step.compacting) await hooks["experimental.session.compacting"](step.compacting, {});
  else if (step.dispose) await hooks.dispose();
  else if (step.during) {
    // step.during.event runs while thatch's step.during.command waits at its gate.
    const first = hooks.event({ event: step.during.first });
    const log = "bin/calls.log";
    const started = () =>
      existsSync(log) && readFileSync(log, "utf8").includes(step.during.command);
    while (!started()) await new Promise((resolve) => setTimeout(resolve, 5));
    await hooks.event({ event: step.during.event });
    writeFileSync(`bin/${step.during.command}.gate`, "go\\n");
    await first;
  }
  else if (step.chat) {
    const output = { message: { id: "msg_x", sessionID: step.chat.session },
                     parts: step.chat.parts };
    await hooks["chat.message"]({ sessionID: step.chat.session }, output);
    chats.push(output.parts);
  }
}
// Work the plugin does not await (the blocking prompt's answer) ends before this fires:
// node runs out of work only then.
let printed = false;
process.on("beforeExit", () => {
  if (!printed) console.log(JSON.stringify({ calls, chats }));
  printed = true;
});
"""


def idle(session: str) -> dict[str, Any]:
    return {
        "event": {
            "type": "session.status",
            "properties": {"sessionID": session, "status": {"type": "idle"}},
        }
    }


def busy(session: str) -> dict[str, Any]:
    return {
        "event": {
            "type": "session.status",
            "properties": {"sessionID": session, "status": {"type": "busy"}},
        }
    }


def recorded_tool(name: str, session: str) -> dict[str, Any]:
    """A recorded opencode tool.execute.after call, moved to ``session``."""
    saved = host_payload(f"opencode-plugin-tool.execute.after-{name}")
    return {"tool": {"input": {**saved["input"], "sessionID": session}, "output": saved["output"]}}


class Run:
    """One node run of the plugin: the client's calls and thatch's commands."""

    def __init__(self, calls: list[list[Any]], chats: list[Any], log: list[tuple[str, Any]]):
        self.calls = calls
        self.chats = chats
        self.log = log

    def commands(self, *names: str) -> list[tuple[str, Any]]:
        return [(c, p) for c, p in self.log if c.split()[0] in names]

    def client(self, *names: str) -> list[list[Any]]:
        return [c for c in self.calls if c[0] in names]


def run(
    tmp_path: Path,
    steps: list[dict[str, Any]],
    *,
    files: dict[str, str] | None = None,
    sessions: dict[str, Any] | None = None,
    **config: Any,
) -> Run:
    assert NODE is not None, "node is required for the plugin tests"
    fake_dir = tmp_path / "bin"
    fake_dir.mkdir(exist_ok=True)
    script = fake_dir / "thatch"
    script.write_text(FAKE.format(dir=fake_dir))
    script.chmod(0o755)
    for name, text in (files or {}).items():
        (fake_dir / name).write_text(text + "\n")
    (tmp_path / "plugin.mjs").write_text(render("1.2.3", str(script)))
    (tmp_path / "driver.mjs").write_text(DRIVER)
    all_sessions = {TOP: {}, **(sessions or {})}
    fake = {"sessions": all_sessions, "steps": steps, **config}
    done = subprocess.run(
        [NODE, "driver.mjs"],
        cwd=tmp_path,
        env={**os.environ, "FAKE_CONFIG": json.dumps(fake)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    log_path = fake_dir / "calls.log"
    lines = log_path.read_text().splitlines() if log_path.exists() else []
    log = [
        (args, json.loads(stdin) if stdin else None)
        for args, stdin in (line.split("\t", 1) for line in lines)
        if not args.startswith("embedder")
    ]
    return Run(result["calls"], result["chats"], log)


PENDING = {"extraction-status.out": '{"pending": 2, "accepted": false}'}


def test_idle_session_with_queued_calls_is_extracted_by_a_child(tmp_path: Path) -> None:
    """Idle with 2 calls queued: one child titled thatch-extraction under the session,
    prompted to fetch with the parent's id; its saves are not queued; its idle completes
    the parent's snapshot, a toast names what it wrote, and the child is deleted."""
    steps = [
        idle(TOP),
        {"event": {"type": "session.idle", "properties": {"sessionID": TOP}}},  # same idle
        {
            "event": {
                "type": "session.created",
                "properties": {"info": {"id": "$child1", "parentID": TOP}},
            }
        },
        busy("$child1"),
        recorded_tool("thatch_get_extraction_payload", "$child1"),
        recorded_tool("thatch_memory_remember", "$child1"),
        recorded_tool("read", "$child1"),
        recorded_tool("thatch_extraction_done", "$child1"),
        idle("$child1"),
        idle("$child1"),  # a repeated idle does nothing more
        idle(TOP),  # the child did its job: the next idle may start another
    ]
    result = run(tmp_path, steps, files=PENDING)
    assert (
        result.commands("extraction-status")
        == [("extraction-status --host opencode", {"session_id": TOP})] * 2
    )
    assert (
        result.client("create") == [["create", {"parentID": TOP, "title": "thatch-extraction"}]] * 2
    )
    ((_, target, parts), _second) = result.client("promptAsync")
    assert target == CHILD
    (part,) = parts
    assert part["type"] == "text"
    assert 'thatch_get_extraction_payload with session_id "ses_top"' in part["text"]
    assert 'thatch_extraction_done with session_id "ses_top"' in part["text"]
    assert "thatch-fact-extractor" in part["text"]
    assert result.commands("buffer-tool") == []
    assert result.commands("extraction-complete", "extraction-requeue") == [
        ("extraction-complete --host opencode", {"session_id": TOP})
    ]
    ((_, toast),) = result.client("toast")
    assert toast["title"] == "thatch" and toast["variant"] == "success"
    assert toast["message"] == 'Extraction saved 1 memory ("Widgets spin an even number of times").'
    assert result.client("delete") == [["delete", CHILD]]
    assert [c[0] for c in result.calls] == [
        "create",
        "promptAsync",
        "toast",
        "delete",
        "create",
        "promptAsync",
    ]


def test_no_toast_when_nothing_was_written(tmp_path: Path) -> None:
    """A child that fetched and saved nothing still completes the snapshot (the no-save
    drain) and is deleted; no toast."""
    steps = [
        idle(TOP),
        busy("$child1"),
        recorded_tool("thatch_get_extraction_payload", "$child1"),
        idle("$child1"),
        idle(TOP),
    ]
    result = run(tmp_path, steps, files=PENDING)
    assert [c for c, _ in result.commands("extraction-complete")] == [
        "extraction-complete --host opencode"
    ]
    assert result.client("toast") == []
    assert result.client("delete") == [["delete", CHILD]]
    assert len(result.client("create")) == 2


def test_child_that_never_fetched_backs_off(tmp_path: Path) -> None:
    """A child that ended without fetching (a model ignoring the prompt): its end still
    runs extraction-complete (which deletes nothing without a snapshot), and the parent's
    next idle starts no new child: no model call on every idle."""
    steps = [idle(TOP), busy("$child1"), idle("$child1"), idle(TOP)]
    result = run(tmp_path, steps, files=PENDING)
    assert [c for c, _ in result.commands("extraction-complete")] == [
        "extraction-complete --host opencode"
    ]
    assert len(result.client("create")) == 1


def test_child_error_requeues_and_backs_off(tmp_path: Path) -> None:
    """The child errors: the parent's snapshot is requeued (never completed), the child is
    deleted, no toast; the parent's next idles start no child (the nudge takes over)."""
    steps = [
        idle(TOP),
        busy("$child1"),
        recorded_tool("thatch_memory_remember", "$child1"),
        {
            "event": {
                "type": "session.error",
                "properties": {"sessionID": "$child1", "error": {"name": "APIError"}},
            }
        },
        idle("$child1"),
        idle(TOP),
    ]
    result = run(tmp_path, steps, files=PENDING)
    assert result.commands("extraction-complete", "extraction-requeue") == [
        ("extraction-requeue --host opencode", {"session_id": TOP})
    ]
    assert result.client("toast") == []
    assert result.client("delete") == [["delete", CHILD]]
    assert len(result.client("create")) == 1
    assert len(result.commands("extraction-status")) == 1


def test_deleted_child_requeues(tmp_path: Path) -> None:
    """Someone deletes the child mid-extraction: requeue; nothing deletes it again."""
    steps = [
        idle(TOP),
        busy("$child1"),
        {"event": {"type": "session.deleted", "properties": {"info": {"id": "$child1"}}}},
        idle("$child1"),
    ]
    result = run(tmp_path, steps, files=PENDING)
    assert [c for c, _ in result.commands("extraction-complete", "extraction-requeue")] == [
        "extraction-requeue --host opencode"
    ]
    assert result.client("delete") == []


def test_failed_prompt_requeues_and_deletes(tmp_path: Path) -> None:
    """opencode refuses the child's prompt: requeue, delete the child."""
    result = run(tmp_path, [idle(TOP)], files=PENDING, fail=["promptAsync"])
    assert [c for c, _ in result.commands("extraction-requeue")] == [
        "extraction-requeue --host opencode"
    ]
    assert result.client("delete") == [["delete", CHILD]]


def test_failed_create_changes_nothing(tmp_path: Path) -> None:
    result = run(tmp_path, [idle(TOP)], files=PENDING, fail=["create"])
    assert result.commands("extraction-complete", "extraction-requeue") == []
    assert result.client("promptAsync", "delete") == []


def test_blocking_prompt_fallback_completes_when_it_answers(tmp_path: Path) -> None:
    """A client without promptAsync: the blocking prompt's answer is the child's end."""
    result = run(tmp_path, [idle(TOP)], files=PENDING, sync=True)
    assert [c[0] for c in result.calls] == ["create", "prompt", "delete"]
    assert [c for c, _ in result.commands("extraction-complete")] == [
        "extraction-complete --host opencode"
    ]


def test_no_second_child_while_one_runs(tmp_path: Path) -> None:
    """Idles of the parent while its child works start nothing; the queue is not even
    asked again."""
    steps = [idle(TOP), busy(TOP), idle(TOP), busy("$child1"), idle(TOP)]
    result = run(tmp_path, steps, files=PENDING)
    assert len(result.client("create")) == 1
    assert len(result.commands("extraction-status")) == 1


def test_nothing_pending_or_already_accepted_starts_nothing(tmp_path: Path) -> None:
    for status in ('{"pending": 0, "accepted": false}', '{"pending": 3, "accepted": true}', ""):
        files = {"extraction-status.out": status} if status else {}
        result = run(tmp_path, [idle(TOP)], files=files)
        assert len(result.commands("extraction-status")) == 1
        assert result.calls == []
        (tmp_path / "bin" / "calls.log").unlink()
        (tmp_path / "bin" / "extraction-status.out").unlink(missing_ok=True)


def test_child_sessions_never_extract(tmp_path: Path) -> None:
    """A task sub-agent's session and the extraction child itself: their idles neither ask
    the queue nor wake for chat; an unknown session (opencode did not answer) neither."""
    sessions = {"ses_kid": {"parentID": TOP}}
    steps = [idle("ses_kid"), idle("ses_unknown")]
    result = run(tmp_path, steps, files=PENDING, sessions=sessions)
    assert result.log == [] and result.calls == []
    # The extraction child's own idle before it began (no busy, no call) ends nothing.
    result = run(tmp_path, [idle(TOP), idle("$child1")], files=PENDING)
    assert result.commands("extraction-complete", "extraction-requeue") == []
    assert result.client("delete") == []


def test_busy_or_compacting_session_gets_nothing(tmp_path: Path) -> None:
    """An idle while opencode reports the session busy, or while it compacts: no
    extraction, no chat wake. After session.compacted the next idle proceeds."""
    files = {**PENDING, "chat-notify.out": json.dumps({"decision": "block", "reason": POINTER})}
    result = run(tmp_path, [idle(TOP)], files=files, status={TOP: {"type": "busy"}})
    assert result.log == [] and result.calls == []
    steps = [
        {"compacting": {"sessionID": TOP}},
        idle(TOP),
        {"chat": {"session": TOP, "parts": [{"type": "text", "text": "go on"}]}},
        {"event": {"type": "session.compacted", "properties": {"sessionID": TOP}}},
        idle(TOP),
    ]
    (tmp_path / "bin" / "calls.log").unlink(missing_ok=True)
    result = run(tmp_path, steps, files=files)
    assert result.chats == [[{"type": "text", "text": "go on"}]]  # no nudge while compacting
    assert sorted(c for c, _ in result.commands("extraction-status", "chat-notify")) == [
        "chat-notify --host opencode",
        "extraction-status --host opencode",
    ]
    assert sorted((c[0], c[1] if c[0] == "promptAsync" else "") for c in result.calls) == [
        ("create", ""),
        ("promptAsync", CHILD),
        ("promptAsync", TOP),
    ]


def test_extraction_nudge_is_dropped_while_a_child_extracts(tmp_path: Path) -> None:
    """Before the child fetched, the queue would still nudge: the plugin drops that nudge
    (no second extractor); other nudges pass."""
    nudge = {
        "additional_context": "[thatch] 2 tool interactions are queued … "
        "thatch_get_extraction_payload …"
    }
    files = {**PENDING, "flush-tools.out": json.dumps(nudge)}
    user = [{"type": "text", "text": "next question"}]
    steps = [idle(TOP), {"chat": {"session": TOP, "parts": user}}]
    result = run(tmp_path, steps, files=files)
    (parts,) = result.chats
    assert [p["text"] for p in parts[1:]] == ["REMINDER"]
    # Without a child the same nudge reaches the prompt.
    (tmp_path / "bin" / "calls.log").unlink()
    files["extraction-status.out"] = '{"pending": 0, "accepted": false}'
    result = run(tmp_path, [idle(TOP), {"chat": {"session": TOP, "parts": user}}], files=files)
    (parts,) = result.chats
    assert parts[1]["text"].endswith(nudge["additional_context"])


def test_dispose_requeues_a_running_extraction(tmp_path: Path) -> None:
    """opencode shuts down mid-extraction: the snapshot is requeued at once, the child
    deleted; an idle after dispose starts nothing."""
    steps = [idle(TOP), busy("$child1"), {"dispose": True}, idle(TOP)]
    result = run(tmp_path, steps, files=PENDING)
    assert [c for c, _ in result.commands("extraction-requeue", "extraction-status")] == [
        "extraction-status --host opencode",
        "extraction-requeue --host opencode",
    ]
    assert result.client("delete") == [["delete", CHILD]]


def test_chat_pointer_is_delivered_once_and_is_no_user_prompt(tmp_path: Path) -> None:
    """chat-notify's pointer (given once, as its window allows) becomes one new message in
    the idle session; that message gets no reminder or nudge; the next idle wakes nobody."""
    files = {"chat-notify.once": json.dumps({"decision": "block", "reason": POINTER})}
    wake = [{"type": "text", "text": POINTER, "metadata": {"thatch": "chat-wake"}}]
    steps = [
        idle(TOP),
        {"chat": {"session": TOP, "parts": wake}},
        busy(TOP),
        idle(TOP),
    ]
    result = run(tmp_path, steps, files=files)
    assert result.commands("chat-notify") == [
        ("chat-notify --host opencode", {"session_id": TOP}),
        ("chat-notify --host opencode", {"session_id": TOP}),
    ]
    assert result.client("promptAsync") == [["promptAsync", TOP, wake]]
    assert result.commands("reminder", "flush-tools") == []
    assert result.chats == [wake]


def test_chat_pointer_is_not_delivered_to_a_session_that_turned_busy(tmp_path: Path) -> None:
    """The session turns busy (a prompt arrived) while chat-notify runs: no wake message
    (that prompt's flush-tools carries the unread count). Busy before: not even asked."""
    files = {"chat-notify.out": json.dumps({"decision": "block", "reason": POINTER})}
    (tmp_path / "bin").mkdir()
    os.mkfifo(tmp_path / "bin" / "chat-notify.gate")
    during = {"first": idle(TOP)["event"], "command": "chat-notify", "event": busy(TOP)["event"]}
    result = run(tmp_path, [{"during": during}], files=files)
    assert len(result.commands("chat-notify")) == 1
    assert result.client("promptAsync") == []
    (tmp_path / "bin" / "calls.log").unlink()
    result = run(tmp_path, [idle(TOP)], files=files, status={TOP: {"type": "retry"}})
    assert result.commands("chat-notify") == [] and result.calls == []


def test_chat_notify_answers_that_are_no_pointer_are_not_delivered(tmp_path: Path) -> None:
    for answer in ("", "{}", '{"decision": "block", "reason": "hello"}', "not json"):
        files = {"chat-notify.out": answer} if answer else {}
        result = run(tmp_path, [idle(TOP)], files=files)
        assert result.client("promptAsync") == []
        (tmp_path / "bin" / "chat-notify.out").unlink(missing_ok=True)
