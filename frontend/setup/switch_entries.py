"""The feature switches in thatch's MCP entries (docs/tools.md §switches).

A project switches the engines or chat off with ``THATCH_ENGINES=off`` / ``THATCH_CHAT=off``
in thatch's MCP entry (``thatch setup --no-engines`` / ``--no-chat`` write it). Setup keeps
what the entry says when it rewrites the entry, unless a flag says otherwise, and leaves
the engines' sections out of the instruction block where the engines are off.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from thatch.frontend.setup import jsonfiles
from thatch.frontend.switches import FEATURES, features_off, variable

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


def with_switches(
    entry: dict[str, Any], old: object, key: str, flags: Mapping[str, bool]
) -> dict[str, Any]:
    """``entry`` with the switches of thatch's ``old`` entry, then ``flags`` (feature → on)."""
    old_env = old.get(key) if isinstance(old, dict) else None
    switches = {
        name: old_env[name]
        for name in map(variable, FEATURES)
        if isinstance(old_env, dict) and isinstance(old_env.get(name), str)
    }
    for feature, on in flags.items():
        if on:
            switches.pop(variable(feature), None)
        else:
            switches[variable(feature)] = OFF
    if not switches:
        return entry
    return {**entry, key: {**entry.get(key, {}), **switches}}


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
