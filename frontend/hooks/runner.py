"""The queue's hook commands, and the dispatch of every hook command.

The hook commands run on every tool call, prompt and session start of every agent: the
``thatch`` entry point (``thatch.cli.entry``) runs them from here without importing click,
and the tool hooks import nothing beyond this module, ``hookio``, the queue package and
``thatch.common.environment``. What every hook command shares (running a body, reporting
its failure, reading options) is in ``hookio``, which the prompt hooks import too: they
never import this module, which imports them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from thatch.common.environment import queue_dir
from thatch.frontend import queue
from thatch.frontend.hooks import hookio

__all__ = [
    "run_buffer_hook",
    "run_extraction_status",
    "run_hook_command",
]

CURSOR_RESPONSE_FIELDS = (
    "tool_output",
    "tool_result",
    "tool_response",
    "result_json",
    "result",
    "output",
)


def _batch_calls(payload: Mapping[str, Any]) -> list[dict[str, Any]]:
    calls = payload.get("tool_calls")
    if isinstance(calls, list):
        return [call for call in calls if isinstance(call, dict)]
    if "tool_name" in payload:
        return [dict(payload)]
    return []


def buffer_batch_body(payload: Mapping[str, Any], env: Mapping[str, str], host: str) -> None:
    """Claude Code's PostToolBatch (or PostToolUse): queue the batch's calls.

    A sub-agent's calls carry its parent's ``session_id`` plus an ``agent_id``: they are
    queued under the parent, and a sub-agent's save completes only the handed-out
    snapshot (docs/hooks.md §append)."""
    session = hookio.host_session(payload, host)
    agent = hookio.first_string(payload, "agent_id")
    calls = _batch_calls(payload)
    if not any(_readable(call) for call in calls) and _has_tool_calls(payload):
        _unreadable(queue_dir(env), session, "buffer-batch", payload)
        return
    queue.append_calls(
        queue_dir(env),
        session,
        calls,
        subagent=bool(agent),
        agent_id=agent,
        project=_project(env, payload),
    )


def _project(env: Mapping[str, str], payload: Mapping[str, Any]) -> str:
    """The project directory a queue records (docs/hooks.md §queue-files), "" when there is
    none: a working directory deleted under the host must not cost the call."""
    try:
        return str(hookio.project_dir(env, payload))
    except OSError:
        return ""


def _readable(call: Mapping[str, Any]) -> bool:
    tool = call.get("tool_name")
    return isinstance(tool, str) and bool(tool.strip())


def _has_tool_calls(payload: Mapping[str, Any]) -> bool:
    """Whether the payload carries tool calls at all, in whatever shape."""
    calls = payload.get("tool_calls")
    if calls is not None:
        return calls not in ([], {})
    return any(key in payload for key in ("tool_name", "tool_input", "tool", "tool_use_id"))


def _unreadable(directory: Any, session: str, command: str, payload: Mapping[str, Any]) -> None:
    """Say once per session that tool calls arrived in a shape thatch cannot read: nothing
    is queued for them, and silence would look like a quiet session (docs/hooks.md §append)."""
    # The host's keys are its data: one short line each, never its formatting.
    keys = ", ".join(sorted(" ".join(str(key).split())[:40] for key in payload)[:12])

    def warn() -> None:
        hookio.warn(
            command,
            f"tool calls in a payload shape thatch cannot read (keys: {keys}); nothing was "
            "queued for fact extraction. Said once per session; please report your host "
            "and its version.",
        )

    queue.warn_unreadable_once(directory, session, warn)


def buffer_tool_body(payload: Mapping[str, Any], env: Mapping[str, str], host: str) -> None:
    """Cursor's postToolUse and opencode's plugin: queue one call.

    ``parent_session_id`` (the opencode plugin, for a ``task`` child session) queues the
    call under the parent, as Claude Code does for its sub-agents: a child is never
    nudged, so calls queued under it would be stranded."""
    session = hookio.host_session(payload, host)
    parent = hookio.first_string(payload, "parent_session_id")
    tool = payload.get("tool_name")
    if not isinstance(tool, str) or not tool.strip():
        if _has_tool_calls(payload):
            _unreadable(queue_dir(env), parent or session, "buffer-tool", payload)
        return
    response: Any = None
    for field in CURSOR_RESPONSE_FIELDS:
        if payload.get(field) is not None:
            response = payload[field]
            break
    call = {
        "tool_name": tool,
        "tool_input": payload.get("tool_input"),
        "tool_use_id": payload.get("tool_use_id"),
        "tool_response": response if response is not None else "",
        # the opencode plugin passes is_error; keep isError for callers of the MCP spelling
        "isError": payload.get("isError") is True or payload.get("is_error") is True,
        # opencode runs a step's calls in parallel: the times tell a save which calls'
        # results its agent had seen (queue.append_calls)
        "started_at": payload.get("started_at"),
        "ended_at": payload.get("ended_at"),
    }
    queue.append_calls(
        queue_dir(env),
        parent or session,
        [call],
        subagent=bool(parent),
        project=_project(env, payload),
    )


def _extraction_body(command: str) -> QueueBody:
    def body(payload: Mapping[str, Any], env: Mapping[str, str], host: str) -> None:
        session = hookio.host_session(payload, host)
        if not session:
            return  # nothing names a queue: as buffer-tool without a tool_name
        # The project names the carry file, where a session-end may have moved the
        # snapshot these commands finish (queue.carry_over).
        project = str(hookio.project_dir(env, payload))
        if command == "extraction-requeue":
            queue.requeue(queue_dir(env), session, project)
        elif command == "extraction-complete":
            # Claude Code's SubagentStop passes agent_id: only the extractor's stop counts.
            agent = hookio.first_string(payload, "agent_id")
            queue.complete(queue_dir(env), session, agent, project)
        else:  # session-end
            # /clear and /resume end a session inside a process that goes on, background
            # sub-agents (an extractor) included; any other end takes them with it.
            hold = hookio.first_string(payload, "reason") in HOLDING_END_REASONS
            queue.carry_over(queue_dir(env), session, project, hold=hold)
            if host == "cursor":
                from thatch.frontend.queue import held_nudge

                held_nudge.drop(queue_dir(env), session)  # spoke of this session's prompt

    return body


# Claude Code's SessionEnd reasons after which the host process (and its background
# sub-agents) carries on with another session.
HOLDING_END_REASONS = ("clear", "resume")

# Silent hook commands: they change the queue and print nothing.
QUEUE_COMMANDS = (
    "buffer-batch",
    "buffer-tool",
    "extraction-requeue",
    "extraction-complete",
    "session-end",
)


# A queue command's work: the payload, the environment and the resolved host.
QueueBody = Callable[[Mapping[str, Any], Mapping[str, str], str], None]


def run_buffer_hook(command: str, host: str | None = None) -> None:
    """Run one of QUEUE_COMMANDS: read stdin, change the queue, print nothing (but
    Cursor's ``buffer-tool``, which hands over a held prompt nudge). ``host`` (``--host``)
    decides, as for every hook, which payload field names the session."""
    body: QueueBody
    if command == "buffer-batch":
        body = buffer_batch_body
    elif command == "buffer-tool":
        body = buffer_tool_body
    else:
        body = _extraction_body(command)

    resolved = hookio.resolve_host(host, os.environ, command)

    def run() -> None:
        payload: Mapping[str, Any] = {}
        try:
            payload = hookio.read_payload(command)
            body(payload, os.environ, resolved)
        except queue.QueueError as error:
            hookio.warn(command, str(error))
        except OSError as error:
            hookio.warn(command, f"cannot write the queue: {error.strerror or error}")
        if command == "buffer-tool" and resolved == "cursor":
            hand_held_nudge(command, payload, os.environ)
        return None

    hookio.run_hook(command, run)


# How long a Cursor tool hook waits to count the nudge it hands over.
COUNT_WAIT_SECONDS = 0.25


def hand_held_nudge(command: str, payload: Mapping[str, Any], env: Mapping[str, str]) -> None:
    """Cursor's postToolUse: the nudge its prompt hook held (``queue.held_nudge``), as the
    ``additional_context`` Cursor adds after the tool's result; nothing when none is held.

    Not after thatch's own tools: an extractor's calls are not the prompt's turn, and a
    save may just have drained what the nudge speaks of. The extraction nudge goes only
    while the queue still has calls no extractor holds, and is counted when it goes."""
    session = hookio.host_session(payload, "cursor")
    tool = payload.get("tool_name")
    if not session or (isinstance(tool, str) and queue.classify(tool)[0] == "thatch"):
        return
    from thatch.frontend.queue import held_nudge

    directory = queue_dir(env)
    held = held_nudge.take(directory, session)
    if held is None:
        return
    extraction, rest = held
    try:
        if extraction and queue.nudge_records(directory, session):
            # Briefly: a busy lock already cost this hook its wait (its call spilled), and
            # the nudge goes out either way; only its count is skipped.
            queue.increment_count(directory, session, timeout=COUNT_WAIT_SECONDS)
        else:
            extraction = ""
    except queue.LockBusy:
        pass
    except queue.QueueError as error:
        hookio.warn(command, str(error))
    except OSError as error:
        hookio.warn(command, hookio.queue_problem(error))
    text = "\n\n".join(part for part in (extraction, rest) if part)
    if text:
        hookio.print_line(json.dumps({"additional_context": text}, ensure_ascii=False))


def extraction_status(
    payload: Mapping[str, Any], env: Mapping[str, str], host: str
) -> dict[str, Any]:
    """What the opencode plugin asks before it starts an extraction child: how many records
    the session has queued, and whether a fresh snapshot of them is handed out (an
    extractor holds them; the nudge is quiet). Reads only; never locks."""
    session = hookio.host_session(payload, host)
    records = queue.peek_records(queue_dir(env), session) if session else []
    held = bool(records) and not queue.nudge_records(queue_dir(env), session)
    return {"pending": len(records), "accepted": held}


def run_extraction_status(host: str | None = None) -> None:
    """``extraction-status``: one JSON line ``{"pending": n, "accepted": b}``; nothing when
    it fails (the plugin then starts nothing)."""
    command = "extraction-status"
    try:
        payload = hookio.read_payload(command)
        resolved = hookio.resolve_host(host, os.environ, command)
        line = json.dumps(extraction_status(payload, os.environ, resolved))
    except OSError as error:
        hookio.warn(command, hookio.queue_problem(error))
        return
    except Exception as error:  # a hook must never fail its host's turn
        hookio.report_failure(command, error)
        return
    hookio.print_line(line)


def run_hook_command(command: str, args: list[str]) -> None:
    """Run a hook command without click (see ``thatch.cli.entry``)."""
    options = hookio.hook_options(command, args)
    if command in QUEUE_COMMANDS:
        run_buffer_hook(command, options["host"])
        return
    if command == "extraction-status":
        run_extraction_status(options["host"])
        return
    from thatch.frontend.hooks.prompt_hooks import run_flush_tools, run_reminder

    run = run_flush_tools if command == "flush-tools" else run_reminder
    run(options["as_json"], options["host"])
