"""``thatch mcp``'s first moments: answer the opening requests while the SDK loads.

A host starts ``thatch mcp`` and sends ``initialize`` (or ``server/discover``) and
``tools/list`` at once; Claude Code snapshots its tools when its first model request goes
out, ready or not. Importing the MCP SDK alone takes most of a second, so this module,
which imports only the standard library and ``answer_sheet``, answers those requests from
the answers the SDK gave last time (answer_sheet.py) while a thread imports the server.

It answers only requests whose answer the sheet holds word for word: ``initialize`` at a
handshake version the sheet has, with plain params; ``tools/list`` after it; and
``server/discover`` and ``tools/list`` carrying the 2026-07-28 envelope. As soon as the
server has loaded, or a line arrives that it does not answer, it hands stdin over: the
full server (``mcp_cmd.serve_after_quick_start``) reads the ``initialize`` and
notifications already answered (so the SDK's session knows them) without answering them
again, then everything not yet answered, then the rest of stdin. Without a sheet for this
installation (first run, upgrade) the full server starts at once and writes one.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from thatch.frontend.mcp.answer_sheet import MODERN_VERSION, load_sheet, sheet_key

__all__ = ["Answer", "QuickSession", "main"]

# A line longer than this is never one of the opening requests: hand it over unread.
LINE_LIMIT = 1 << 20
_SIMPLE_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
_MODERN_KEY = "io.modelcontextprotocol/protocolVersion"
_CLIENT_INFO_KEY = "io.modelcontextprotocol/clientInfo"
_CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
# What the full server imports; loaded in the background while the sheet answers.
SERVER_MODULES = (
    "thatch.cli.mcp_cmd",
    "thatch.cli.errors",
    "thatch.frontend.mcp.server",
    "thatch.frontend.tools.context",
    "thatch.frontend.tools.memory_tools",
    "thatch.embedder.client.embedder_client",
    "thatch.frontend.hooks.recall_scan",
    "thatch.frontend.tools.default_behaviors",
)


@dataclass(frozen=True)
class Answer:
    text: bytes  # the line to write ("" for a notification)
    replay: bool  # the full server must read this line too (it changes session state)
    request_id: str | int | None = None


class QuickSession:
    """What the opening requests get from the sheet; None for anything else."""

    def __init__(self, sheet: Mapping[str, Any]) -> None:
        self._sheet = sheet
        self._initialized = False  # an initialize was answered: a handshake session

    def answer(self, line: bytes) -> Answer | None:
        try:
            message = json.loads(line)
        except ValueError:
            return None
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return None
        method = message.get("method")
        if not isinstance(method, str) or not set(message) <= {"jsonrpc", "id", "method", "params"}:
            return None
        if "id" not in message:
            return Answer(b"", replay=True) if method.startswith("notifications/") else None
        request_id = message["id"]
        if not _simple_id(request_id):
            return None
        result = self._result(method, message.get("params"))
        if result is None:
            return None
        text = '{"jsonrpc":"2.0","id":' + json.dumps(request_id) + ',"result":' + result + "}\n"
        return Answer(text.encode("utf-8"), method == "initialize", request_id)

    def _result(self, method: str, params: Any) -> str | None:
        sheet = self._sheet
        if method == "initialize":
            version = _plain_initialize(params)
            if self._initialized or version not in sheet["initialize"]:
                return None
            self._initialized = True
            return str(sheet["initialize"][version])
        if method == "tools/list" and self._initialized and params in (None, {}):
            return str(sheet["tools"])
        if self._initialized or not _modern_envelope(params):
            return None
        if method == "tools/list":
            return str(sheet["modern_tools"])
        if method == "server/discover":
            return str(sheet["discover"])
        return None


def _simple_id(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return -(2**53) < value < 2**53
    return isinstance(value, str) and _SIMPLE_ID.fullmatch(value) is not None


def _client_info(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("name"), str)
        and isinstance(value.get("version"), str)
    )


def _plain_initialize(params: Any) -> str | None:
    """The protocol version a well-formed, ordinary initialize asks for."""
    if not isinstance(params, dict) or set(params) != {
        "protocolVersion",
        "capabilities",
        "clientInfo",
    }:
        return None
    version, capabilities = params["protocolVersion"], params["capabilities"]
    # Every client capability is an object (the SDK refuses anything else as invalid).
    plain = isinstance(capabilities, dict) and all(
        isinstance(v, dict) for v in capabilities.values()
    )
    if not plain or not _client_info(params["clientInfo"]):
        return None
    return version if isinstance(version, str) else None


def _modern_envelope(params: Any) -> bool:
    """Params that are exactly a complete 2026-07-28 envelope."""
    if not isinstance(params, dict) or set(params) != {"_meta"}:
        return False
    meta = params["_meta"]
    return (
        isinstance(meta, dict)
        and set(meta) == {_MODERN_KEY, _CLIENT_INFO_KEY, _CLIENT_CAPABILITIES_KEY}
        and meta[_MODERN_KEY] == MODERN_VERSION
        and _client_info(meta[_CLIENT_INFO_KEY])
        and isinstance(meta[_CLIENT_CAPABILITIES_KEY], dict)
    )


def _load_server() -> None:
    import importlib

    for name in SERVER_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # the full server meets the same error and reports it
            return


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def main() -> None:
    """``thatch mcp``: the quick start, then the full server."""
    sheet = load_sheet(os.environ, sheet_key()) if _open(0) and _open(1) else None
    if sheet is None:
        from thatch.cli.main import main as click_main

        click_main()
        return
    loaded = threading.Event()
    wake_read, wake_write = os.pipe()

    def load() -> None:
        try:
            _load_server()
        finally:
            loaded.set()
            os.write(wake_write, b"x")

    loading = threading.Thread(target=load, name="thatch-load-server", daemon=True)
    loading.start()
    # Until the full server installs its own: SQLite transactions make an exit safe.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: os._exit(0))
    session = QuickSession(sheet)
    replayed: list[bytes] = []
    quiet: list[str | int] = []
    pending = b""
    try:
        while not loaded.is_set():
            end = pending.find(b"\n")
            if end < 0:
                if len(pending) > LINE_LIMIT:
                    break
                # Wait for stdin or the server, whichever comes first: a host that waits
                # for nothing more must not keep the server (its recall scan, the
                # embedder start) from starting.
                ready, _, _ = select.select([0, wake_read], [], [])
                if wake_read in ready:
                    break
                chunk = os.read(0, 65536)
                if not chunk:
                    break
                pending += chunk
                continue
            answer = session.answer(pending[: end + 1])
            if answer is None:
                break
            if answer.replay:
                replayed.append(pending[: end + 1])
                if answer.request_id is not None:
                    quiet.append(answer.request_id)
            pending = pending[end + 1 :]
            if answer.text:
                _write_all(1, answer.text)
    except OSError:
        pass  # stdin or stdout failed: the full server meets it and ends as it does
    loading.join()
    os.close(wake_read)
    os.close(wake_write)
    from thatch.cli.mcp_cmd import serve_after_quick_start

    serve_after_quick_start(b"".join(replayed) + pending, quiet)
