"""The feature switches in thatch's MCP entries (docs/tools.md §switches).

A project switches the engines or chat off with ``THATCH_ENGINES=off`` / ``THATCH_CHAT=off``
in thatch's MCP entry (``thatch setup --no-engines`` / ``--no-chat`` write it). Setup keeps
what the entry says when it rewrites the entry (frontend/setup/own_keys.py keeps every
variable thatch does not write), unless a flag says otherwise, and leaves the engines'
sections out of the instruction block where the engines are off.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from thatch.frontend.setup import jsonfiles
from thatch.frontend.switches import features_off, variable

__all__ = [
    "OFF",
    "entry_off",
    "env_key",
    "thatch_entry",
    "with_switches",
]


OFF = "off"


def env_key(host: str) -> str:
    """Where a host's MCP entry keeps its environment."""
    return "environment" if host == "opencode" else "env"


def with_switches(entry: dict[str, Any], key: str, flags: Mapping[str, bool]) -> dict[str, Any]:
    """``entry`` (already holding the old entry's switches) with ``flags`` (feature → on)
    applied to its ``key`` map; a map left empty by a flag goes with it."""
    if not flags:
        return entry
    env = entry.get(key)
    switched = dict(env) if isinstance(env, dict) else {}
    for feature, on in flags.items():
        if on:
            switched.pop(variable(feature), None)
        else:
            switched[variable(feature)] = OFF
    if switched:
        return {**entry, key: switched}
    return {name: value for name, value in entry.items() if name != key}


def thatch_entry(host: str, mcp_file: Path | None) -> object:
    """thatch's entry in ``mcp_file`` (None when the file or the entry is not there)."""
    if mcp_file is None:
        return None
    try:
        doc = jsonfiles.load_object(mcp_file).data
    except OSError:  # the entry's own step reports the file; the block goes on
        return None
    servers = doc.get("mcp" if host == "opencode" else "mcpServers")
    if isinstance(servers, dict) and isinstance(servers.get("servers"), dict):
        servers = servers["servers"]
    return servers.get("thatch") if isinstance(servers, dict) else None


def entry_off(host: str, mcp_file: Path | None, flags: Mapping[str, bool]) -> frozenset[str]:
    """The features off in thatch's entry of ``mcp_file`` once setup has run with ``flags``."""
    entry = thatch_entry(host, mcp_file)
    env = entry.get(env_key(host)) if isinstance(entry, dict) else None
    if not isinstance(env, dict):
        env = {}
    off = set(features_off({k: v for k, v in env.items() if isinstance(v, str)}))
    for feature, on in flags.items():
        (off.discard if on else off.add)(feature)
    return frozenset(off)
