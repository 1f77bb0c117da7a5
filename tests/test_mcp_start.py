"""``thatch mcp``'s quick start (cli/mcp_start.py) answers as the SDK does, then hands over."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.embedder_proc import EmbedderProcess
from tests.support.fake_embedder import tool_context
from thatch.cli.mcp_start import QuickSession
from thatch.frontend.mcp.answer_sheet import (
    HANDSHAKE_VERSIONS,
    MODERN_VERSION,
    build_sheet,
    sheet_key,
    sheet_path,
)
from thatch.frontend.mcp.server import build_server, make_server

THATCH = str(Path(sys.executable).with_name("thatch"))
# What Claude Code sends: capabilities and client names the sheet was not built with.
CLIENT = {"name": "claude-code", "version": "2.1.332"}
CAPABILITIES: dict[str, Any] = {"roots": {}, "elicitation": {}}
MODERN = {
    "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
    "io.modelcontextprotocol/clientInfo": CLIENT,
    "io.modelcontextprotocol/clientCapabilities": CAPABILITIES,
}


def initialize(request_id: int | str, version: str) -> dict[str, Any]:
    params = {"protocolVersion": version, "capabilities": CAPABILITIES, "clientInfo": CLIENT}
    return {"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": params}


def request(request_id: int | str, method: str, params: Any = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def sdk_lines(server: Any, messages: list[dict[str, Any]]) -> list[bytes]:
    """The full server's answers, byte for byte, as its stdio transport writes them."""
    import io

    import anyio

    from thatch.frontend.mcp.stdio import serve_streams

    source = io.BytesIO(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
    out = io.BytesIO()
    anyio.run(serve_streams, server, source, out)
    return out.getvalue().splitlines(keepends=True)


def quick_lines(sheet: dict[str, Any], messages: list[dict[str, Any]]) -> list[bytes]:
    session = QuickSession(sheet)
    out = []
    for message in messages:
        answer = session.answer(json.dumps(message).encode() + b"\n")
        assert answer is not None, message
        if answer.text:
            out.append(answer.text)
    return out


@pytest.mark.parametrize("request_id", [7, "req-7"])
def test_quick_answers_are_the_sdks_for_every_protocol_version(
    tmp_path: Path, request_id: int | str
) -> None:
    """For every handshake version and the 2026-07-28 era, with another client's names
    and capabilities and either kind of id: the same bytes as the SDK's."""
    with tool_context(tmp_path) as ctx:
        server = make_server(ctx)
        sheet = build_sheet(server, "k")
        for version in HANDSHAKE_VERSIONS:
            messages = [initialize(request_id, version), INITIALIZED, request(8, "tools/list")]
            assert quick_lines(sheet, messages) == sdk_lines(server, messages), version
        modern = [
            request(request_id, "server/discover", {"_meta": MODERN}),
            request(8, "tools/list", {"_meta": MODERN}),
        ]
        assert quick_lines(sheet, modern) == sdk_lines(server, modern)
    # What setup records without a database: the same answers.
    assert build_sheet(build_server(), "k") == sheet


def test_quick_start_leaves_other_requests_to_the_server(tmp_path: Path) -> None:
    with tool_context(tmp_path) as ctx:
        sheet = build_sheet(make_server(ctx), "k")
    session = QuickSession(sheet)
    for message in (
        request(1, "tools/list"),  # before initialize
        initialize(1, "2099-01-01"),  # a version the sheet has no answer for
        initialize(True, "2025-06-18"),  # type: ignore[arg-type]  # no valid id
        initialize('a"b', "2025-06-18"),
        {
            **initialize(1, "2025-06-18"),
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {"roots": True},
                "clientInfo": CLIENT,
            },
        },  # a capability that is no object
        request(1, "tools/call", {"name": "store_list", "arguments": {}}),
        request(1, "server/discover", {"_meta": {**MODERN, "extra": 1}}),
    ):
        assert session.answer(json.dumps(message).encode()) is None, message
    assert session.answer(b"[1, 2]") is None and session.answer(b"{nope") is None
    assert session.answer(json.dumps(initialize(1, "2025-06-18")).encode()) is not None
    assert session.answer(json.dumps(initialize(2, "2025-06-18")).encode()) is None  # twice
    # A handshake session refuses the envelope: the server says so, not the sheet.
    assert session.answer(json.dumps(request(3, "tools/list", {"_meta": MODERN})).encode()) is None


@pytest.fixture
def server_env(tmp_path: Path, mock_embedder: EmbedderProcess) -> dict[str, str]:
    project = tmp_path / "myproject"
    project.mkdir()
    return {
        **os.environ,
        "THATCH_DB_PATH": str(tmp_path / "db" / "thatch.db"),
        "THATCH_EMBEDDER_ADDR": mock_embedder.address,
        "THATCH_PROJECT_DIR": str(project),
    }


def run_mcp(env: dict[str, str], messages: list[Any]) -> list[Any]:
    data = b"".join(json.dumps(m).encode() + b"\n" for m in messages)
    done = subprocess.run([THATCH, "mcp"], input=data, env=env, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert b"Traceback" not in done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_the_first_server_writes_the_sheet_the_next_one_answers_from(
    server_env: dict[str, str],
) -> None:
    """Without a sheet the full server answers and writes one; the next start answers the
    opening requests from it (a marked sheet shows whose answer arrived), hands over, and
    every request gets exactly one answer."""
    path = sheet_path(server_env)
    opening = [initialize(1, "2025-03-26"), INITIALIZED, request(2, "tools/list")]
    first = run_mcp(server_env, opening)
    assert [r["id"] for r in first] == [1, 2]
    sheet = json.loads(path.read_text())
    assert sheet["key"] == sheet_key()
    assert json.loads(sheet["tools"]) == first[1]["result"]

    marked = json.loads(sheet["tools"])
    marked["tools"][0]["description"] = "answered from the sheet"
    path.write_text(json.dumps({**sheet, "tools": json.dumps(marked)}))
    remember = {"label": "quick", "content": "the quick start hands over"}
    replies = run_mcp(
        server_env,
        [
            *opening,
            request(3, "tools/call", {"name": "memory_remember", "arguments": remember}),
            # A batch: the session's version (2025-03-26, negotiated by the sheet's
            # answer) reached the full server, which serves batches on it.
            [request(4, "ping"), request(5, "tools/list")],
        ],
    )
    singles = [r for r in replies if isinstance(r, dict)]
    assert [r["id"] for r in singles] == [1, 2, 3]
    assert singles[1]["result"]["tools"][0]["description"] == "answered from the sheet"
    assert singles[2]["result"]["content"][0]["text"].startswith("[saved]"), singles[2]
    (batch,) = [r for r in replies if isinstance(r, list)]
    assert sorted(r["id"] for r in batch) == [4, 5]
    tools = next(r for r in batch if r["id"] == 5)["result"]["tools"]
    assert tools[0]["description"] != "answered from the sheet"  # the server's own


def test_a_stale_sheet_is_never_used(server_env: dict[str, str]) -> None:
    path = sheet_path(server_env)
    opening = [initialize(1, "2025-06-18"), INITIALIZED, request(2, "tools/list")]
    run_mcp(server_env, opening)
    sheet = json.loads(path.read_text())
    marked = json.loads(sheet["tools"])
    marked["tools"][0]["description"] = "answered from the sheet"
    path.write_text(json.dumps({**sheet, "key": "another install", "tools": json.dumps(marked)}))
    replies = run_mcp(server_env, opening)
    assert replies[1]["result"]["tools"][0]["description"] != "answered from the sheet"
    assert json.loads(path.read_text())["key"] == sheet_key()  # rewritten


def test_setup_writes_the_sheet(tmp_path: Path) -> None:
    """A new user's first host session starts quick too: setup leaves the answers."""
    project = tmp_path / "proj"
    project.mkdir()
    env = {**os.environ, "THATCH_PROJECT_DIR": str(project), "PWD": str(project)}
    done = subprocess.run(
        [THATCH, "setup", "--claude"], cwd=project, env=env, capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    sheet = json.loads(sheet_path(env).read_text())
    assert sheet["key"] == sheet_key() and json.loads(sheet["tools"])["tools"]


def test_a_project_with_chat_off_gets_a_sheet_of_its_own(server_env: dict[str, str]) -> None:
    """THATCH_CHAT=off (a project's MCP entry sets it): the real server lists no chat tool,
    writes a sheet of its own, and the next start answers from that one; the sheet of
    projects with every feature on is another file and keeps chat."""
    off = {**server_env, "THATCH_CHAT": "off"}
    opening = [initialize(1, "2025-06-18"), INITIALIZED, request(2, "tools/list")]
    first = run_mcp(off, opening)
    names = [tool["name"] for tool in first[1]["result"]["tools"]]
    assert "chat" not in names and "engine" in names and "memory_recall" in names
    path = sheet_path(off)
    assert path != sheet_path(server_env) and path.name == "mcp-answers-no-chat.json"
    assert json.loads(json.loads(path.read_text())["tools"]) == first[1]["result"]
    again = run_mcp(off, opening)
    assert [tool["name"] for tool in again[1]["result"]["tools"]] == names
    on = run_mcp(server_env, opening)
    assert [tool["name"] for tool in on[1]["result"]["tools"]][-2:] == ["engine", "chat"]
    assert "chat" in json.loads(sheet_path(server_env).read_text())["tools"]
