"""The ``get_extraction_payload`` answer: the handed-out records, summarised."""

from __future__ import annotations

from typing import Any

from thatch.frontend.queue.limits import PAYLOAD_OUTPUT_LIMIT
from thatch.frontend.queue.records import compact, first_string

__all__ = [
    "build_payload",
]


def _summarize_args(tool: str, args: Any) -> str:
    name = tool.strip().lower()
    mapping = args if isinstance(args, dict) else {}
    if name in ("read", "edit", "write"):
        return "file: " + first_string(mapping, "filePath", "file_path")
    if name in ("bash", "shell"):
        return first_string(mapping, "command")[:120]
    if name in ("grep", "glob"):
        return "pattern: " + first_string(mapping, "pattern")
    return compact(args)[:120]


def build_payload(
    records: list[dict[str, Any]],
    project_store: str,
    code_changed: list[dict[str, Any]] | None = None,
) -> str | None:
    """The ``get_extraction_payload`` JSON (docs/hooks.md §payload), or None when nothing is
    queued; ``code_changed`` (the project's memories whose anchored code changed, to
    revisit) is added last when there are any."""
    if not records:
        return None
    interactions = []
    for record in records:
        tool = record.get("tool")
        tool = tool if isinstance(tool, str) else ""
        output = record.get("output")
        output = output if isinstance(output, str) else compact(output)
        if len(output) > PAYLOAD_OUTPUT_LIMIT:
            output = output[:PAYLOAD_OUTPUT_LIMIT] + "..."
        title = record.get("title")
        interactions.append(
            {
                "tool": tool,
                "title": title if isinstance(title, str) else "",
                "args": _summarize_args(tool, record.get("args", {})),
                "output": output,
            }
        )
    document: dict[str, Any] = {
        "interactions": interactions,
        "projectStore": project_store,
        "globalStore": "global",
    }
    if code_changed:
        document["codeChanged"] = code_changed
    # Format characters as \uXXXX: a web page's tag characters (invisible ASCII) or bidi
    # overrides reach the extractor visible, and decode to the same text. Imported here:
    # the tool hooks import this module and only the queue (tests/test_hooks_buffer.py).
    from thatch.frontend.untrusted import json_document

    return json_document(document, compact=True)
