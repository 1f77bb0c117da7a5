"""The answers ``thatch mcp`` gives before the SDK has loaded (docs/tools.md §server).

Importing the MCP SDK takes most of a second (seconds on a loaded machine), and hosts
snapshot their tools when their first request goes out. So the SDK's own answers to the
opening requests (``initialize`` for each handshake version, ``server/discover``, and
``tools/list`` in either era) are recorded once, by running the real server over memory
(``build_sheet``), and kept in ``$XDG_CACHE_HOME/thatch/mcp-answers.json``; the next
``thatch mcp`` answers from that sheet while the SDK loads (``cli/mcp_start.py``).

The sheet is keyed by what its answers derive from: the installed distributions of thatch,
``mcp`` and ``mcp_types`` (their ``METADATA`` files) and thatch's tool and server sources
(size and modification time). A sheet with another key is never used; the server that
finds it missing or stale writes a new one. This module imports only the standard
library: the quick path reads it before anything else loads.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp.server import Server

__all__ = [
    "HANDSHAKE_VERSIONS",
    "MODERN_VERSION",
    "build_sheet",
    "load_sheet",
    "sheet_key",
    "sheet_path",
    "write_sheet",
]

SHEET_FORMAT = 1
# The handshake versions the sheet answers initialize for (the SDK's, mcp 2.3); a client
# asking another goes to the SDK.
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSION = "2026-07-28"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
    "io.modelcontextprotocol/clientInfo": {"name": "thatch-sheet", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
_DISTRIBUTIONS = ("thatch-", "mcp-", "mcp_types-")
_HERE = Path(__file__).resolve().parent  # frontend/mcp
_SOURCES = (_HERE, _HERE.parent / "tools")


def sheet_path(env: Mapping[str, str]) -> Path:
    """One sheet per set of tools served: projects that switch features off
    (switches.py) list fewer tools."""
    from thatch.common.environment import thatch_cache_dir
    from thatch.frontend.switches import features_off

    off = "".join(f"-no-{feature}" for feature in sorted(features_off(env)))
    return thatch_cache_dir(env) / f"mcp-answers{off}.json"


def sheet_key() -> str:
    """A digest of everything the answers derive from (see the module docstring)."""
    digest = hashlib.sha256(f"{SHEET_FORMAT} {sys.version}".encode())
    for entry in sys.path:
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info") and name.startswith(_DISTRIBUTIONS):
                _add_stat(digest, os.path.join(entry, name, "METADATA"))
    for directory in _SOURCES:
        for name in sorted(os.listdir(directory)):
            if name.endswith(".py"):
                _add_stat(digest, str(directory / name))
    return digest.hexdigest()


def _add_stat(digest: Any, path: str) -> None:
    try:
        st = os.stat(path)
    except OSError:
        return
    digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())


def load_sheet(env: Mapping[str, str], key: str) -> dict[str, Any] | None:
    """The sheet when it exists and was written for ``key``; else None."""
    try:
        sheet = json.loads(sheet_path(env).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(sheet, dict) or sheet.get("key") != key:
        return None
    return sheet


# -- writing (the full server's side) -------------------------------------------------


def canned_requests() -> list[dict[str, Any]]:
    """What ``build_sheet`` asks a fresh server, one session per list entry."""
    return [
        {"method": "initialize", "params": _initialize_params(version)}
        for version in HANDSHAKE_VERSIONS
    ] + [
        {"method": "server/discover", "params": {"_meta": MODERN_META}},
        {"method": "tools/list", "params": {"_meta": MODERN_META}},
    ]


def _initialize_params(version: str) -> dict[str, Any]:
    return {
        "protocolVersion": version,
        "capabilities": {},
        "clientInfo": {"name": "thatch-sheet", "version": "1"},
    }


def build_sheet(server: Server[Any], key: str) -> dict[str, Any]:
    """The SDK's answers, as ``server`` gives them over thatch's stdio transport."""
    initialize: dict[str, str] = {}
    for version in HANDSHAKE_VERSIONS:
        listed = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        first, second = served(server, [_request("initialize", _initialize_params(version)),
                                        {"jsonrpc": "2.0", "method": "notifications/initialized"},
                                        listed])  # fmt: skip
        initialize[version] = first
        tools = second
    discover, modern_tools = served(
        server,
        [
            _request("server/discover", {"_meta": MODERN_META}),
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": MODERN_META}},
        ],
    )
    return {
        "key": key,
        "initialize": initialize,
        "tools": tools,
        "discover": discover,
        "modern_tools": modern_tools,
    }


def _request(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def served(server: Server[Any], messages: list[dict[str, Any]]) -> list[str]:
    """The ``result`` member, as written on the wire, of each answer to ``messages``."""
    import io

    import anyio

    from thatch.frontend.mcp.stdio import serve_streams

    source = io.BytesIO(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
    out = io.BytesIO()
    anyio.run(serve_streams, server, source, out)
    results = []
    for line in out.getvalue().decode("utf-8").splitlines():
        prefix = line[: line.index(',"result":') + len(',"result":')]
        assert line.endswith("}") and '"error"' not in prefix, line
        results.append(line[len(prefix) : -1])
    return results


def write_sheet(env: Mapping[str, str], server: Server[Any]) -> Path:
    """Build and store the sheet for this installation (atomically: readers see the old
    file or the new one) from ``server``, whose tools are those ``env`` serves
    (``server.listing_server``)."""
    path = sheet_path(env)
    path.parent.mkdir(parents=True, exist_ok=True)
    sheet = build_sheet(server, sheet_key())
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(sheet, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)
    return path
