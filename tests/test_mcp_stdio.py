"""``thatch mcp`` as a real subprocess on stdio, with a real embedder process and DB file."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
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
    invalid = exchange('{"jsonrpc": "2.0", "id": 4}')  # JSON, no message: its id is kept
    assert invalid["id"] == 4 and invalid["error"] == {
        "code": -32600,
        "message": "Invalid Request: not a JSON-RPC 2.0 request, notification or response",
    }
    batch = exchange("[1, 2, 3]")  # no batches before initialize negotiated 2025-03-26
    assert batch["id"] is None and batch["error"]["code"] == -32600
    assert exchange(json.dumps({"jsonrpc": "2.0", "id": 7, "method": "ping"}))["id"] == 7
    process.stdin.close()
    assert process.wait(30) == 0
    process.stdout.close()
    assert process.stderr is not None
    process.stderr.close()


# -- every request answered: stdin EOF, hostile lines, batches ---------------------------

DEEP = "[" * 100_000 + "]" * 100_000


def _initialize(version: str) -> list[dict[str, object]]:
    return [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
    ]


def _call(request_id: int | str, name: str, arguments: dict[str, object]) -> dict[str, object]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


def _lines(*messages: object) -> bytes:
    return b"".join(
        (message if isinstance(message, bytes) else json.dumps(message).encode()) + b"\n"
        for message in messages
    )


def _run_to_eof(env: dict[str, str], data: bytes) -> tuple[list[object], str]:
    """Write everything at once, close stdin, and collect every reply until exit."""
    done = subprocess.run([THATCH, "mcp"], input=data, env=env, capture_output=True, timeout=120)
    err = done.stderr.decode(errors="replace")
    assert done.returncode == 0, err
    assert "Traceback" not in err
    return [json.loads(line) for line in done.stdout.splitlines()], err


def test_every_request_read_is_answered_when_stdin_closes(
    tmp_path: Path, server_env: dict[str, str]
) -> None:
    """Requests still running at stdin EOF are answered before the server exits."""
    calls = [
        _call(2, "memory_remember", {"content": "# Drain one\n\nAnswered before exit."}),
        _call(3, "memory_recall", {"query": "answered before exit"}),
        _call(4, "store_list", {}),
        _call(5, "memory_remember", {"content": "# Drain two\n\nAlso acknowledged."}),
        _call(6, "memory_list", {}),
        {"jsonrpc": "2.0", "id": 7, "method": "ping"},
    ]
    replies, _ = _run_to_eof(server_env, _lines(*_initialize("2025-06-18"), *calls))
    by_id: dict[Any, Any] = {reply["id"]: reply for reply in replies}  # type: ignore[index]
    assert sorted(by_id) == [1, 2, 3, 4, 5, 6, 7] and len(replies) == 7
    assert all("result" in reply for reply in by_id.values()), replies
    assert not any(by_id[i]["result"].get("isError") for i in range(2, 7))
    assert by_id[2]["result"]["content"][0]["text"] == "[saved] myproject :: Drain one"
    assert by_id[5]["result"]["content"][0]["text"] == "[saved] myproject :: Drain two"
    db = tmp_path / "db" / "thatch.db"
    assert rows(db, "SELECT slug FROM entries ORDER BY slug") == [("drain-one",), ("drain-two",)]


def test_hostile_lines_are_answered_with_the_callers_id(
    tmp_path: Path, server_env: dict[str, str]
) -> None:
    """Lone surrogates are served; huge integers and deep nesting get errors with their id."""
    process = subprocess.Popen(
        [THATCH, "mcp"],
        env=server_env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdin is not None and process.stdout is not None
    stdin, stdout = process.stdin, process.stdout

    def exchange(data: bytes) -> dict[str, object]:
        stdin.write(data)
        stdin.flush()
        reply: dict[str, object] = json.loads(stdout.readline())
        return reply

    init, initialized = _initialize("2025-06-18")
    assert "result" in exchange(_lines(init))
    stdin.write(_lines(initialized))
    # What JavaScript's JSON.stringify writes for a string holding half a surrogate pair.
    surrogate = json.dumps(
        _call(2, "memory_remember", {"content": "# Half pair\n\nbroken HALF emoji"})
    ).replace("HALF", "\\ud800")
    saved = exchange(_lines(surrogate.encode()))
    assert saved["id"] == 2 and saved["result"]["content"][0]["text"] == (  # type: ignore[index]
        "[saved] myproject :: Half pair"
    )
    db = tmp_path / "db" / "thatch.db"
    assert rows(db, "SELECT content FROM entries") == [("# Half pair\n\nbroken \ufffd emoji",)]

    huge = b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": '
    huge += b'"memory_recall", "arguments": {"query": "x", "limit": ' + b"9" * 5000 + b"}}}"
    assert exchange(_lines(huge)) == {
        "jsonrpc": "2.0",
        "id": 3,
        "error": {"code": -32700, "message": "Parse error: an integer with more than 4300 digits"},
    }
    deep = '{"jsonrpc": "2.0", "method": "tools/call", "params": ' + DEEP + ', "id": "deep"}'
    assert exchange(_lines(deep.encode())) == {
        "jsonrpc": "2.0",
        "id": "deep",
        "error": {"code": -32700, "message": "Parse error: nested too deeply"},
    }
    big = exchange(_lines(_call(4, "memory_remember", {"content": "# Big\n\n" + "x" * 10**7})))
    assert big["id"] == 4 and big["result"]["isError"] is True  # type: ignore[index]
    assert "too long" in big["result"]["content"][0]["text"]  # type: ignore[index]
    over = b'{"jsonrpc": "2.0", "id": 77, "method": "ping", "params": {"x": "'
    over += b"a" * (33 * 1024 * 1024) + b'"}}'
    assert exchange(_lines(over)) == {
        "jsonrpc": "2.0",
        "id": 77,
        "error": {"code": -32700, "message": "Parse error: line longer than 33554432 bytes"},
    }
    for garbage in (b"{" * 10**7, b"x" * 10**7, bytes(range(256)).replace(b"\n", b"")):
        assert exchange(_lines(garbage)) == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32700, "message": "Parse error"},
        }
    # Blank lines are no messages: the next reply is the ping's.
    assert exchange(b"\n  \n\r\n" + _lines({"jsonrpc": "2.0", "id": 5, "method": "ping"})) == {
        "jsonrpc": "2.0",
        "id": 5,
        "result": {},
    }
    stdin.close()
    assert process.wait(60) == 0
    assert stdout.read() == b""
    assert process.stderr is not None
    err = process.stderr.read().decode(errors="replace")
    process.stdout.close()
    process.stderr.close()
    assert all(line.startswith("[thatch]") for line in err.splitlines() if line.strip()), err
    assert rows(db, "SELECT slug FROM entries") == [("half-pair",)]


def test_non_object_arguments_are_a_tool_error(server_env: dict[str, str]) -> None:
    """Arguments that are no JSON object get the spec's isError result, batched or not."""
    text = 'Invalid arguments: expected an object of named arguments, e.g. {"query": "…"}'
    calls = [
        {**_call(2, "memory_recall", {}), "params": {"name": "memory_recall", "arguments": ["q"]}},
        {**_call(3, "memory_list", {}), "params": {"name": "memory_list", "arguments": "x"}},
        {**_call(4, "nope", {}), "params": {"name": "nope", "arguments": 5}},
        {**_call(5, "store_list", {}), "params": {"name": "store_list", "arguments": None}},
    ]
    replies, _ = _run_to_eof(server_env, _lines(*_initialize("2025-03-26"), *calls, calls[:2]))
    arrays = [reply for reply in replies if isinstance(reply, list)]
    singles = {reply["id"]: reply for reply in replies if isinstance(reply, dict)}
    assert sorted(singles) == [1, 2, 3, 4, 5] and len(arrays) == 1, replies
    for reply in [singles[2], singles[3], singles[4], *arrays[0]]:
        assert reply["result"] == {"content": [{"text": text, "type": "text"}], "isError": True}
    assert singles[5]["result"]["content"][0]["text"] == "- global"


@pytest.mark.parametrize("version", ["2025-03-26", "2024-11-05"])
def test_batches_are_served_where_the_protocol_has_them(
    tmp_path: Path, server_env: dict[str, str], version: str
) -> None:
    """One array answers a batch's requests; notifications get nothing; [] is invalid."""
    batch = [
        {"jsonrpc": "2.0", "id": 10, "method": "ping"},
        _call(11, "memory_remember", {"content": "# Batched\n\nSaved from a batch."}),
        {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
        {"jsonrpc": "2.0", "id": 12},
    ]
    notifications = [{"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}]
    ping = {"jsonrpc": "2.0", "id": 13, "method": "ping"}
    data = _lines(*_initialize(version), batch, notifications, [], ping)
    replies, _ = _run_to_eof(server_env, data)
    arrays = [reply for reply in replies if isinstance(reply, list)]
    singles = {reply["id"]: reply for reply in replies if isinstance(reply, dict)}
    assert len(replies) == 4 and len(arrays) == 1, replies
    assert sorted(singles, key=str) == [1, 13, None]
    assert singles[None]["error"] == {"code": -32600, "message": "Invalid Request: an empty batch"}
    by_id = {item["id"]: item for item in arrays[0]}
    assert sorted(by_id) == [10, 11, 12] and len(arrays[0]) == 3
    assert by_id[10]["result"] == {}
    assert by_id[11]["result"]["content"][0]["text"] == "[saved] myproject :: Batched"
    assert by_id[12]["error"]["code"] == -32600
    db = tmp_path / "db" / "thatch.db"
    assert rows(db, "SELECT slug FROM entries") == [("batched",)]


def test_batches_are_refused_where_the_protocol_removed_them(
    tmp_path: Path, server_env: dict[str, str]
) -> None:
    """At 2025-06-18 a batch gets one error naming the version, and nothing in it runs."""
    batch = [
        _call(10, "memory_remember", {"content": "# Never\n\nNot saved."}),
        {"jsonrpc": "2.0", "id": 11, "method": "ping"},
    ]
    ping = {"jsonrpc": "2.0", "id": 12, "method": "ping"}
    replies, _ = _run_to_eof(server_env, _lines(*_initialize("2025-06-18"), batch, ping))
    assert len(replies) == 3, replies
    init, refused, pong = replies
    assert init["id"] == 1 and pong == {"jsonrpc": "2.0", "id": 12, "result": {}}  # type: ignore[index]
    assert refused["id"] is None and refused["error"]["code"] == -32600  # type: ignore[index]
    message = refused["error"]["message"]  # type: ignore[index]
    assert "batches" in message and "2025-06-18" in message
    db = tmp_path / "db" / "thatch.db"
    assert rows(db, "SELECT count(*) FROM entries") == [(0,)]


@pytest.mark.parametrize("closed", [0, 1])
def test_a_closed_stdin_or_stdout_is_one_clear_error(
    tmp_path: Path, server_env: dict[str, str], closed: int
) -> None:
    """Started with fd 0 or 1 closed, thatch refuses before the database could take it.

    The shell closes it (``<&-``, ``>&-``): a ``preexec_fn`` runs Python in a forked copy
    of this test process, where gRPC's fork handlers restart its poller, which the child's
    closing of inherited descriptors then broke (a SIGABRT, once, in CI)."""
    redirect = "<&-" if closed == 0 else ">&-"
    done = subprocess.run(
        ["sh", "-c", f'exec "$@" {redirect}', "sh", THATCH, "mcp"],
        env=server_env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.decode().splitlines() == [
        "Error: thatch mcp speaks MCP on stdin and stdout, and one of them is closed."
    ]
    assert not (tmp_path / "db" / "thatch.db").exists()


MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def _discover(request_id: int) -> dict[str, object]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "server/discover",
        "params": {"_meta": MODERN_META},
    }


def test_discover_advertises_tools_only(server_env: dict[str, str]) -> None:
    """Over server/discover as over initialize: no prompts or resources (docs/tools.md)."""
    replies, _ = _run_to_eof(server_env, _lines(_discover(1)))
    (reply,) = replies
    assert isinstance(reply, dict)
    assert reply["result"]["capabilities"] == {"tools": {"listChanged": False}}
    assert reply["result"]["supportedVersions"] == ["2026-07-28"]


def test_initialize_after_discover_is_served_not_refused(server_env: dict[str, str]) -> None:
    """Claude Code 2.1.332 falls back to initialize when its server/discover is answered
    late, on the same stdin: the fallback opens a handshake session (issue 22 §1)."""
    listed = {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}
    data = _lines(_discover(1), *_initialize("2025-06-18"), listed)
    replies, _ = _run_to_eof(server_env, data)
    by_id = {reply["id"]: reply for reply in replies if isinstance(reply, dict)}
    assert set(by_id) == {1, 3}
    answers = [reply for reply in replies if isinstance(reply, dict) and reply["id"] == 1]
    assert [sorted(answer) for answer in answers] == [["id", "jsonrpc", "result"]] * 2, answers
    initialized = [a for a in answers if "protocolVersion" in a["result"]]
    assert [a["result"]["protocolVersion"] for a in initialized] == ["2025-06-18"]
    assert "memory_remember" in {tool["name"] for tool in by_id[3]["result"]["tools"]}
    # An enveloped request on a handshake session is still refused, as the SDK does.
    replies, _ = _run_to_eof(server_env, _lines(*_initialize("2025-06-18"), _discover(2)))
    assert [r["error"]["code"] for r in replies if isinstance(r, dict) and "error" in r] == [-32600]


@pytest.mark.parametrize(
    ("variables", "cause"),
    [
        ({"THATCH_EMBEDDER_ADDR": "bogus"}, 'invalid THATCH_EMBEDDER_ADDR "bogus"'),
        ({"THATCH_EMBEDDER_ADDR": "unix:///" + "s" * 120}, "socket path too long"),
        (
            {"THATCH_EMBEDDER_ADDR": "127.0.0.1:1", "THATCH_EMBEDDER_CA": "/nonexistent/ca"},
            "THATCH_EMBEDDER_CA",
        ),
    ],
)
def test_an_embedder_address_that_cannot_be_used_leaves_the_tools_serving(
    tmp_path: Path, server_env: dict[str, str], variables: dict[str, str], cause: str
) -> None:
    """Such an address made `thatch mcp` exit right after `initialize`: the agent lost
    every tool, and its save was neither answered nor stored."""
    env = {**server_env, **variables}
    calls = [
        _call(2, "memory_remember", {"content": "# Kept\n\nsaved without a vector"}),
        _call(3, "memory_recall", {"query": "saved"}),
    ]
    replies, _ = _run_to_eof(env, _lines(*_initialize("2025-06-18"), *calls))
    # The list in a server of its own: calls sent together are served concurrently, so a
    # list beside the save may be answered before the save is written.
    listed, _ = _run_to_eof(env, _lines(*_initialize("2025-06-18"), _call(4, "memory_list", {})))
    by_id: dict[Any, Any] = {reply["id"]: reply for reply in [*replies, *listed]}  # type: ignore[index]
    assert sorted(by_id) == [1, 2, 3, 4], replies
    saved, recalled = by_id[2]["result"], by_id[3]["result"]
    assert not saved.get("isError") and "Embedding pending" in saved["content"][0]["text"]
    assert cause in saved["content"][0]["text"]
    assert recalled["isError"] and recalled["content"][0]["text"].startswith(
        "Embedding service unavailable: "
    )
    assert cause in recalled["content"][0]["text"] and "Fix: " in recalled["content"][0]["text"]
    assert "Kept" in by_id[4]["result"]["content"][0]["text"]
    db = tmp_path / "db" / "thatch.db"
    assert rows(db, "SELECT slug, embedding IS NULL FROM entries") == [("kept", 1)]


def _damaged_at_open(db: Path) -> str:
    """A thatch database whose first page (the schema) is overwritten: no open gets past
    it. Returns the tools' line for it."""
    from thatch.frontend.store.memory_store import Store

    with Store.open(db) as store:
        store.remember("global", "Tabs", "# Tabs\n\nuser likes tabs", None, None)
    data = db.read_bytes()
    db.write_bytes(data[:100] + b"\xa5" * (4096 - 100) + data[4096:])
    quoted = shlex.quote(str(db))
    return (
        f"database {db} is damaged (database disk image is malformed): run sqlite3 {quoted} "
        f'"PRAGMA integrity_check". Fix: restore {db} from a backup, or move it aside '
        "(thatch starts a new one)"
    )


def _not_a_database(db: Path) -> str:
    db.write_bytes(b"this is not sqlite at all")
    quoted = shlex.quote(str(db))
    return (
        f"cannot open database at {db}: file is not a database (if it held memories, run "
        f'sqlite3 {quoted} "PRAGMA integrity_check"). Fix: move {db} aside (or restore it '
        "from a backup); thatch makes a new one"
    )


def _a_directory(db: Path) -> str:
    db.mkdir()
    return (
        f"cannot open database at {db}: is a directory. "
        f"Fix: set THATCH_DB_PATH to a file, e.g. {db / 'thatch.db'}"
    )


def _restore_a_backup(db: Path) -> None:
    from thatch.frontend.store.memory_store import Store

    backup = db.with_name("backup.db")
    with Store.open(backup) as store:
        store.remember("myproject", "Restored", "# Restored\n\nfrom the backup", None, None)
    os.replace(backup, db)


@pytest.mark.parametrize(
    ("spoil", "fix", "sheet"),
    [
        # With the quick start's answer sheet (a host's usual start) and without.
        (_not_a_database, _restore_a_backup, True),
        (_damaged_at_open, lambda db: os.replace(db, db.with_name("damaged.db")), True),
        (_a_directory, lambda db: db.rmdir(), False),
    ],
)
async def test_a_database_that_does_not_open_is_each_calls_error_until_fixed(
    tmp_path: Path, server_env: dict[str, str], spoil: Any, fix: Any, sheet: bool
) -> None:
    """Such a file made `thatch mcp` exit after tools/list (answered from the sheet): the
    agent saw "Connection closed". Now every call answers the open error and its Fix, and
    the call after the user fixed the file works in the same session."""
    from thatch.frontend.mcp.answer_sheet import write_sheet
    from thatch.frontend.mcp.server import listing_server

    db = tmp_path / "db" / "thatch.db"
    db.parent.mkdir()
    expected = spoil(db)
    if sheet:  # write_sheet runs an event loop of its own
        await anyio.to_thread.run_sync(write_sheet, server_env, listing_server(server_env))
    params = StdioServerParameters(command=THATCH, args=["mcp"], env=server_env)
    async with Client(params, mode="legacy") as client:
        assert len((await client.list_tools()).tools) == 12
        for name, arguments in [
            ("store_list", {}),
            ("memory_recall", {"query": "tabs"}),
            ("memory_remember", {"content": "# Lost\n\nnot saved"}),
        ]:
            result = await client.call_tool(name, arguments)
            assert (result.is_error, result.content[0].text) == (True, expected), name
        fix(db)
        saved = await client.call_tool("memory_remember", {"content": "# Kept\n\nsaved after"})
        assert (saved.is_error, saved.content[0].text) == (False, "[saved] myproject :: Kept")
        listed = await client.call_tool("memory_list", {})
        assert not listed.is_error and "Kept" in listed.content[0].text
    restored = [("myproject", "restored", "Restored")] if fix is _restore_a_backup else []
    assert rows(db) == sorted([*restored, ("myproject", "kept", "Kept")])
