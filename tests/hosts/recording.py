"""Writing what the real hosts handed thatch as fixtures (tests/fixtures/host-payloads/).

Off by default. With ``THATCH_RECORD_FIXTURES=1`` the scenarios that walk the whole story (Claude
Code's end-to-end and ``--post-tool-use`` tests, opencode's module) write the hook stdin
they recorded, one file per kind of payload (the first one seen), named as the files
already there and with the test's paths rewritten to ``/home/dev/...``:

    THATCH_RECORD_FIXTURES=1 .venv/bin/pytest -q tests/hosts

Claude Code: ``claude-<event>[-<detail>].json`` (thatch's own hooks, plus PreToolUse,
PostToolUse, Stop, SubagentStop and SessionEnd through a recording-only hook added in
``.claude/settings.local.json``). opencode: ``opencode-thatch-stdin-oc-<command>.json``,
what the generated plugin passed to thatch's commands, and
``opencode-plugin-<hook>[-<tool>].json``, the arguments opencode passed to a
recording-only plugin (``{t, hook, input, output}``, as thatch's plugin receives them).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tests.hosts.hostkit import HERE, HookCall, Sandbox

FIXTURES = HERE.parent / "fixtures" / "host-payloads"
FLAG = "THATCH_RECORD_FIXTURES"
# Events thatch does not hook, recorded only when fixtures are being written.
EXTRA_CLAUDE_EVENTS = ("PreToolUse", "PostToolUse", "Stop", "SubagentStop", "SessionEnd")
RECORDER = """#!/bin/sh
# Recording-only hook (tests/hosts): saves the event's stdin, prints nothing.
f="$THATCH_TEST_HOOK_LOG/$(date +%s%N)-$$-record"
cat > "$f.in"
: > "$f.out"
: > "$f.err"
echo 0 > "$f.rc"
"""


RECORDING_PLUGIN = """// Recording-only plugin (tests/hosts): saves hook arguments, changes nothing.
import { writeFileSync } from "node:fs";

const dir = process.env.THATCH_TEST_HOOK_LOG;

function save(hook, input, output) {
  try {
    const ns = BigInt(Date.now()) * 1000000n + (process.hrtime.bigint() % 1000000n);
    const base = `${dir}/${ns}-${process.pid}-plugin`;
    const doc = { t: Date.now() / 1000, hook, input, output };
    writeFileSync(base + ".in", JSON.stringify(doc));
    writeFileSync(base + ".out", "");
    writeFileSync(base + ".err", "");
    writeFileSync(base + ".rc", "0\\n");
  } catch {}
}

export const RecordPlugin = async (input) => {
  const keys = Object.keys(input || {});
  save("init", { keys, directory: input?.directory, worktree: input?.worktree }, null);
  return {
    "tool.execute.before": async (i, o) => save("tool.execute.before", i, o),
    "tool.execute.after": async (i, o) => save("tool.execute.after", i, o),
    "chat.message": async (i, o) => save("chat.message", i, o),
  };
};
"""


def add_opencode_recorder(sandbox: Sandbox) -> None:
    plugins = sandbox.project / ".opencode" / "plugins"
    plugins.mkdir(parents=True, exist_ok=True)
    (plugins / "record.js").write_text(RECORDING_PLUGIN)


def recording(env: Mapping[str, str] | None = None) -> bool:
    return (env if env is not None else os.environ).get(FLAG) == "1"


def add_claude_recorder(sandbox: Sandbox, post_tool_use: bool) -> None:
    """Hook every event thatch does not (the ones it does are recorded by the shim)."""
    script = sandbox.hook_log.parent / "shim" / "record-hook"
    script.write_text(RECORDER)
    script.chmod(0o755)
    events = [e for e in EXTRA_CLAUDE_EVENTS if not (post_tool_use and e == "PostToolUse")]
    hooks: dict[str, Any] = {}
    for event in events:
        group: dict[str, Any] = {"hooks": [{"type": "command", "command": str(script)}]}
        if event in ("PreToolUse", "PostToolUse"):
            group = {"matcher": "*", **group}
        hooks[event] = [group]
    path = sandbox.project / ".claude" / "settings.local.json"
    path.write_text(json.dumps({"hooks": hooks}, indent=2))


def claude_name(payload: Mapping[str, Any]) -> str:
    event = str(payload.get("hook_event_name", "unknown"))
    detail = ""
    if event == "SessionStart":
        detail = str(payload.get("source", ""))
    elif event in ("PreToolUse", "PostToolUse"):
        detail = re.sub(r"_{2}", "-", str(payload.get("tool_name", "")))
    elif event == "PostToolBatch" and payload.get("agent_id"):
        detail = "subagent"
    elif event == "UserPromptSubmit" and str(payload.get("prompt", "")).lstrip().startswith(
        "<task-notification>"
    ):
        detail = "task-notification"
    return f"claude-{event}-{detail}.json" if detail else f"claude-{event}.json"


def opencode_name(call: HookCall, payload: Mapping[str, Any]) -> str:
    if call.command != "plugin":
        return f"opencode-thatch-stdin-oc-{call.command}.json"
    hook = str(payload.get("hook", "unknown"))
    tool = (payload.get("input") or {}).get("tool") if hook.startswith("tool.") else None
    return f"opencode-plugin-{hook}-{tool}.json" if tool else f"opencode-plugin-{hook}.json"


def anonymise(text: str, sandbox: Sandbox) -> str:
    """The test's own paths as a developer's (``/home/dev/...``), whatever quoting."""
    home, project = str(sandbox.home), str(sandbox.project)
    root = str(sandbox.hook_log.parent)
    pairs = [
        (project, "/home/dev/src/widgets"),
        (re.sub(r"[^A-Za-z0-9]", "-", project), "-home-dev-src-widgets"),
        (home, "/home/dev"),
        (root, "/home/dev/tmp"),
    ]
    for old, new in pairs:
        text = text.replace(old, new)
    return text


def write_fixtures(
    host: str, calls: Iterable[HookCall], sandbox: Sandbox, dest: Path = FIXTURES
) -> list[Path]:
    """Write the first payload of each kind; the files written."""
    dest.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    written: list[Path] = []
    for call in calls:
        try:
            payload = call.payload()
        except (ValueError, AssertionError):
            continue  # not JSON: nothing a fixture could hold
        name = claude_name(payload) if host == "claude" else opencode_name(call, payload)
        if name in seen:
            continue
        seen.add(name)
        text = json.dumps(payload, indent=1, ensure_ascii=False) + "\n"
        path = dest / name
        path.write_text(anonymise(text, sandbox))
        written.append(path)
    return written
