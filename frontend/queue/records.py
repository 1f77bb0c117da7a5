"""What one queued tool call holds: the record made from a host's call, bounded.

Hosts hand calls over in several shapes (docs/hooks.md §record); a record keeps the tool's
name, its arguments (strings cut, size bounded: ``limits``), a title, the response's text
and the call's id and end time. ``capped`` bounds a record read back from a file the same
way, so an older or foreign file is bounded too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from thatch.frontend.identifiers import SESSION_ID_MAX
from thatch.frontend.queue.limits import (
    ARG_DEPTH_LIMIT,
    ARG_ITEMS_LIMIT,
    ARG_STRING_LIMIT,
    ARGS_CHARS_LIMIT,
    ID_LIMIT,
    KEY_LIMIT,
    OUTPUT_LIMIT,
    TITLE_LIMIT,
    TOOL_NAME_LIMIT,
)

__all__ = [
    "Origin",
    "call_time",
    "capped",
    "compact",
    "first_string",
    "make_record",
    "response_text",
    "seq_of",
]


class Origin(NamedTuple):
    """Who queued a batch, and when (ms since the epoch: as its hook began, the calls had
    ended)."""

    at_ms: int
    subagent: bool = False
    agent_id: str = ""
    project: str = ""


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _cut_strings(value: Any) -> Any:
    """``value`` with every string cut to 500 characters and its size bounded (the caps)."""
    return _bounded(value, 0, [ARGS_CHARS_LIMIT])


def _bounded(value: Any, depth: int, budget: list[int]) -> Any:
    if isinstance(value, str):
        value = value[: max(0, min(ARG_STRING_LIMIT, budget[0]))]
        budget[0] -= len(value) + 2
        return value
    if value is None or isinstance(value, bool | float):
        budget[0] -= 5
        return value
    if isinstance(value, int):  # a 5,000-digit integer cannot even be printed as JSON
        budget[0] -= 20
        return value if -(2**63) <= value < 2**63 else "…"
    if isinstance(value, dict | list):
        if depth >= ARG_DEPTH_LIMIT:
            budget[0] -= 3
            return "…"
        items = value.items() if isinstance(value, dict) else enumerate(value)
        out: dict[str, Any] = {}
        for index, (key, item) in enumerate(items):
            if index >= ARG_ITEMS_LIMIT or budget[0] <= 0:
                break
            name = str(key)[:KEY_LIMIT]
            budget[0] -= len(name) + 4 if isinstance(value, dict) else 1
            out[name] = _bounded(item, depth + 1, budget)
        return out if isinstance(value, dict) else list(out.values())
    return _bounded(str(value), depth, budget)


def _cut(value: object, limit: int) -> str:
    return value[:limit] if isinstance(value, str) else ""


def first_string(args: Mapping[str, Any], *names: str) -> str:
    """The first present non-empty string among ``names`` (docs/hooks.md's ``a`` → ``b``)."""
    for name in names:
        value = args.get(name)
        if isinstance(value, str) and value:
            return value
    return ""


def _title(tool: str, args: Mapping[str, Any]) -> str:
    name = tool.strip().lower()
    if name in ("read", "edit", "write"):
        return first_string(args, "filePath", "file_path").rsplit("/", 1)[-1]
    if name in ("bash", "shell"):
        return first_string(args, "command")[:80]
    if name in ("grep", "glob"):
        return first_string(args, "pattern")
    return compact(args)[:80]


def _block_texts(blocks: list[Any], depth: int) -> str:
    parts = []
    for block in blocks:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict):
            text = block.get("text")
            if isinstance(text, str):
                parts.append(text)
            elif block.get("type") in ("image", "audio"):
                parts.append(f"[{block['type']}]")
            else:
                parts.append(response_text(block, depth + 1)[0])
        else:
            parts.append(compact(block))
    return "\n".join(part for part in parts if part)


def response_text(value: Any, depth: int = 0) -> tuple[str, bool]:
    """The meaningful text of a tool response and whether the host marked it an error.

    Hosts hand responses over in several shapes (docs/hooks.md §record): a string; a list
    of MCP content blocks (Claude Code's MCP results); ``{content, isError}`` (opencode's
    MCP results); Claude Code's structured built-in results (Bash ``{stdout, stderr, …}``,
    Read ``{file: {content}}``). Anything else is its compact JSON.
    """
    if value is None:
        return "", False
    if isinstance(value, str):
        return value, False
    if depth >= ARG_DEPTH_LIMIT:
        return compact(value), False
    if isinstance(value, list):
        return _block_texts(value, depth), False
    if not isinstance(value, dict):
        return compact(value), False
    error = value.get("isError") is True or value.get("is_error") is True
    content = value.get("content")
    if isinstance(content, list):
        return _block_texts(content, depth), error
    if isinstance(content, str):
        return content, error
    stdout, stderr = value.get("stdout"), value.get("stderr")
    if isinstance(stdout, str) or isinstance(stderr, str):
        parts = [text for text in (stdout, stderr) if isinstance(text, str) and text]
        return "\n".join(parts), error
    file = value.get("file")
    if isinstance(file, dict) and isinstance(file.get("content"), str):
        return file["content"], error
    return compact(value), error


def make_record(
    session_id: str,
    call: Mapping[str, Any],
    seq: int | None = None,
    queued_at: int | None = None,
) -> dict[str, Any]:
    """The queue record of one call (``tool_name``, ``tool_input``, ``tool_use_id``,
    ``tool_response`` as the hosts send them; ``isError`` beside them when the host passes
    the error flag on its own). Its ``ended_at`` is the host's, else ``queued_at`` (ms
    since the epoch: the hook runs as the call ends), so merged queues keep the newest."""
    tool = call.get("tool_name")
    tool = (tool if isinstance(tool, str) else str(tool))[:TOOL_NAME_LIMIT]
    raw_input = call.get("tool_input")
    if isinstance(raw_input, dict):
        args: dict[str, Any] = _cut_strings(raw_input)
    elif raw_input is None:
        args = {}
    else:
        args = {"value": _cut_strings(raw_input)}
    output, error = response_text(call.get("tool_response"))
    if error or call.get("isError") is True:
        output = "[error] " + output  # the extractor must not learn a failure as a fact
    record: dict[str, Any] = {
        "tool": tool,
        "sessionID": session_id[:SESSION_ID_MAX],
        "args": args,
        "title": _title(tool, args)[:TITLE_LIMIT],
        "output": output[:OUTPUT_LIMIT],
    }
    use_id = call.get("tool_use_id")
    if isinstance(use_id, str) and use_id:
        record["tool_use_id"] = use_id[:ID_LIMIT]
    ended = call_time(call, "ended_at")
    if ended is None:
        ended = queued_at
    if ended is not None:
        record["ended_at"] = ended
    if seq is not None:
        record["seq"] = seq
    return record


def call_time(call: Mapping[str, Any], field: str) -> int | None:
    """A call's ``started_at``/``ended_at`` (ms since the epoch, passed by the opencode
    plugin), or None when absent or not a plausible time."""
    value = call.get(field)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value) if 0 < value < 1e14 else None


def seq_of(record: Mapping[str, Any]) -> int:
    """A record's sequence number; records of older releases (no ``seq``) count as 0, older
    than anything written since."""
    value = record.get("seq")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def capped(record: dict[str, Any]) -> dict[str, Any]:
    """A record read back, bounded like one written now (older or foreign files)."""
    capped: dict[str, Any] = {
        "tool": _cut(record.get("tool"), TOOL_NAME_LIMIT),
        "sessionID": _cut(record.get("sessionID"), SESSION_ID_MAX),
        "args": _cut_strings(record.get("args", {})),
        "title": _cut(record.get("title"), TITLE_LIMIT),
        "output": _cut(record.get("output"), OUTPUT_LIMIT),
    }
    use_id = record.get("tool_use_id")
    if isinstance(use_id, str) and use_id:
        capped["tool_use_id"] = use_id[:ID_LIMIT]
    ended = call_time(record, "ended_at")
    if ended is not None:
        capped["ended_at"] = ended
    if seq_of(record):
        capped["seq"] = seq_of(record)
    held_by = record.get("held_by")
    held_until = record.get("held_until")
    if (
        isinstance(held_by, str)
        and held_by
        and isinstance(held_until, int | float)
        and not isinstance(held_until, bool)
    ):
        capped["held_by"] = held_by[:SESSION_ID_MAX]
        capped["held_until"] = float(held_until)
        agent = record.get("held_agent")
        if isinstance(agent, str) and agent:
            capped["held_agent"] = agent[:ID_LIMIT]
    return capped
