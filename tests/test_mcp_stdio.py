"""``thatch mcp`` as a real subprocess on stdio, with a real embedder process and DB file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from tests.support.embedder_proc import EmbedderProcess
from tests.support.fake_embedder import rows

pytestmark = pytest.mark.anyio
THATCH = str(Path(sys.executable).with_name("thatch"))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


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


async def test_remember_then_recall_over_stdio(tmp_path: Path, server_env: dict[str, str]) -> None:
    """A host's view: initialize, remember, recall the memory back, all over real stdio."""
    params = StdioServerParameters(command=THATCH, args=["mcp"], env=server_env)
    async with Client(params, mode="legacy") as client:
        assert client.server_info is not None and client.server_info.name == "thatch"
        saved = await client.call_tool(
            "memory_remember", {"content": "# Test command\n\nRun make check before pushing."}
        )
        assert saved.content[0].text == "[saved] myproject :: Test command"
        found = await client.call_tool("memory_recall", {"query": "make check"})
        assert not found.is_error
        assert found.content[0].text.split("\n")[3:] == [
            "# Test command",
            "",
            "Run make check before pushing.",
        ]
    db = tmp_path / "db" / "thatch.db"
    assert rows(db, "SELECT store, slug, recall_count FROM entries") == [
        ("myproject", "test-command", 1)
    ]


def _start(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [THATCH, "mcp"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_stdout_is_protocol_only_and_eof_exits_zero(server_env: dict[str, str]) -> None:
    """initialize answers as thatch; stdout holds only JSON-RPC; stdin EOF → exit 0."""
    process = _start(server_env)
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    out, err = process.communicate(json.dumps(init) + "\n", timeout=60)
    assert process.returncode == 0, err
    replies = [json.loads(line) for line in out.splitlines()]
    assert len(replies) == 1
    result = replies[0]["result"]
    assert result["serverInfo"]["name"] == "thatch"
    assert result["protocolVersion"] == "2025-06-18"
    assert result["capabilities"]["tools"] == {"listChanged": False}
    assert "prompts" not in result["capabilities"] and "resources" not in result["capabilities"]
    assert all(line.startswith("[thatch]") for line in err.splitlines() if line.strip())


def test_sigterm_exits_zero(server_env: dict[str, str]) -> None:
    """SIGTERM while waiting for input ends the server with status 0."""
    process = _start(server_env)
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}) + "\n")
    process.stdin.flush()
    assert json.loads(process.stdout.readline())["id"] == 1  # serving (pre-init ping allowed)
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
    process.stdin.close()
    process.stdout.close()
    assert process.stderr is not None
    process.stderr.close()


def test_unparsable_lines_get_json_rpc_errors(server_env: dict[str, str]) -> None:
    """Garbage gets -32700 (id null), non-JSON-RPC JSON -32600, and the server keeps going."""
    process = _start(server_env)
    assert process.stdin is not None and process.stdout is not None

    def exchange(line: str) -> dict[str, object]:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(line + "\n")
        process.stdin.flush()
        reply: dict[str, object] = json.loads(process.stdout.readline())
        return reply

    parse = exchange("this is {not json")
    assert parse == {"jsonrpc": "2.0", "id": None, "error": parse["error"]}
    assert parse["error"] == {"code": -32700, "message": "Parse error"}
    invalid = exchange("[1, 2, 3]")
    assert invalid["id"] is None and invalid["error"] == {
        "code": -32600,
        "message": "Invalid Request",
    }
    assert exchange(json.dumps({"jsonrpc": "2.0", "id": 7, "method": "ping"}))["id"] == 7
    process.stdin.close()
    assert process.wait(30) == 0
    process.stdout.close()
    assert process.stderr is not None
    process.stderr.close()
