"""The recorded payloads of real hosts (tests/fixtures/host-payloads/README.md)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

HOST_PAYLOADS = Path(__file__).resolve().parent.parent / "fixtures" / "host-payloads"


def host_payload(name: str, claude: str | None = None) -> dict[str, Any]:
    """A fresh copy of ``<name>.json`` (tests may change it); with ``claude``, the one
    recorded from that other Claude Code release (``claude-<version>/``)."""
    directory = HOST_PAYLOADS / f"claude-{claude}" if claude else HOST_PAYLOADS
    value = json.loads((directory / f"{name}.json").read_text(encoding="utf-8"))
    assert isinstance(value, dict)
    return copy.deepcopy(value)


def opencode_buffer_stdin(name: str, **extra: Any) -> dict[str, Any]:
    """What the opencode plugin passes to ``buffer-tool`` for a recorded
    ``tool.execute.after`` call: the documented mapping (docs/hooks.md §opencode), with
    ``tool_response`` as the plugin passes it once it forwards MCP results (the output's
    ``content`` and ``isError`` when there is no ``output`` string)."""
    recorded = host_payload(f"opencode-plugin-tool.execute.after-{name}")
    hook_input, output = recorded["input"], recorded["output"]
    if isinstance(output.get("output"), str):
        response: Any = output["output"]
    else:
        response = {"content": output.get("content"), "isError": output.get("isError")}
    stdin = {
        "session_id": hook_input["sessionID"],
        "tool_name": hook_input["tool"],
        "tool_input": hook_input.get("args") or {},
        "tool_use_id": hook_input["callID"],
        "tool_response": response,
    }
    stdin.update(extra)
    return stdin
