"""``thatch extraction-status``: the opencode plugin's check before it starts an extraction
child (docs/hooks.md §snapshot): pending records and whether a fresh snapshot is out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.hookrun import hook_env, run_hook
from tests.support.host_payloads import host_payload
from tests.test_hooks_buffer import HEAVY, IMPORT_PROBE
from thatch.frontend import queue

SID = "ses_dcc66450bffep2Ud0biMgDPOtj"  # the recorded opencode session


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return hook_env(tmp_path)


def status(env: dict[str, str], payload: object) -> dict[str, object]:
    result = run_hook(["extraction-status", "--host", "opencode"], payload, env)  # type: ignore[arg-type]
    assert (result.returncode, result.stderr) == (0, b"")
    (line,) = result.stdout.decode().splitlines()
    value: dict[str, object] = json.loads(line)
    return value


def buffer(env: dict[str, str], *ids: str) -> None:
    """Queue bash calls as the plugin passes them (the recorded stdin with new ids)."""
    for use_id in ids:
        payload = {
            **host_payload("opencode-thatch-stdin-oc-buffer-tool"),
            "tool_name": "bash",
            "tool_use_id": use_id,
        }
        result = run_hook(["buffer-tool", "--host", "opencode"], payload, env)
        assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")


def test_status_follows_the_snapshot_lifecycle(env: dict[str, str]) -> None:
    """Nothing queued → 0; queued → n; handed out → accepted (a call queued meanwhile
    counts); requeued → not accepted; completed → only the interleaved call is left.
    Asking changes nothing."""
    qdir = Path(env["THATCH_QUEUE_DIR"])
    assert status(env, {"session_id": SID}) == {"pending": 0, "accepted": False}
    buffer(env, "a", "b")
    assert status(env, {"session_id": SID}) == {"pending": 2, "accepted": False}
    queue.accept(qdir, SID)
    buffer(env, "c")
    assert status(env, {"session_id": SID}) == {"pending": 3, "accepted": True}
    queue.requeue(qdir, SID)
    assert status(env, {"session_id": SID}) == {"pending": 3, "accepted": False}
    queue.accept(qdir, SID)
    buffer(env, "d")
    queue.complete(qdir, SID)
    assert status(env, {"session_id": SID}) == {"pending": 1, "accepted": False}
    assert [r["tool_use_id"] for r in queue.peek_records(qdir, SID)] == ["d"]


def test_stale_snapshot_is_not_accepted(env: dict[str, str]) -> None:
    """A snapshot older than the expiry (its extractor died with opencode) counts as
    pending, so a new extraction may start."""
    buffer(env, "a")
    queue.accept(Path(env["THATCH_QUEUE_DIR"]), SID, now=1000.0)
    assert status(env, {"session_id": SID}) == {"pending": 1, "accepted": False}


@pytest.mark.parametrize(
    "stdin",
    [b"", b"not json", b"[1, 2]", json.dumps({"session_id": "../../etc/passwd"}).encode()],
)
def test_bad_input_reports_nothing_pending(env: dict[str, str], stdin: bytes) -> None:
    """Garbage or a session id the tools would refuse: nothing pending, exit 0, no file."""
    result = run_hook(["extraction-status"], stdin, env)
    assert result.returncode == 0
    assert json.loads(result.stdout) == {"pending": 0, "accepted": False}
    assert not Path(env["THATCH_QUEUE_DIR"]).exists()


def test_status_imports_only_the_queue(env: dict[str, str]) -> None:
    """Like the tool hooks: no click, gRPC, numpy, model runtime, MCP SDK or sqlite3."""
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE, "extraction-status"],
        input=json.dumps({"session_id": SID}).encode(),
        capture_output=True,
        env=env,
        check=True,
    )
    assert json.loads(result.stdout) == {"pending": 0, "accepted": False}
    modules = set(result.stderr.decode().split())
    assert {m.split(".")[0] for m in modules} & HEAVY == set()


def test_help_goes_through_click(env: dict[str, str]) -> None:
    result = run_hook(["extraction-status", "--help"], b"", env)
    assert result.returncode == 0
    assert b"pending" in result.stdout
