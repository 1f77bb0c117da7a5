"""Running ``thatch`` hook commands as real processes, the way hosts run them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# Port 1 on loopback refuses at once, and a TCP address is never auto-started: the
# "no embedder anywhere" setting for hook tests that must not spawn one.
NO_EMBEDDER = "127.0.0.1:1"


def hook_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The test process's (isolated) environment plus a queue dir, a DB and ``extra``."""
    env = dict(os.environ)
    env.setdefault("THATCH_QUEUE_DIR", str(tmp_path / "queue"))
    env.setdefault("THATCH_DB_PATH", str(tmp_path / "thatch.db"))
    env.setdefault("THATCH_EMBEDDER_ADDR", NO_EMBEDDER)
    env.update(extra)
    return env


def thatch_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "thatch.cli", *args]


def run_hook(
    args: list[str],
    payload: object,
    env: Mapping[str, str],
    *,
    cwd: Path | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``thatch <args>`` with ``payload`` on stdin (dicts as JSON)."""
    if payload is None:
        data = b""
    elif isinstance(payload, bytes):
        data = payload
    elif isinstance(payload, str):
        data = payload.encode()
    else:
        data = json.dumps(payload).encode()
    return subprocess.run(
        thatch_command(*args),
        input=data,
        capture_output=True,
        env=dict(env),
        cwd=cwd,
        timeout=timeout,
        check=False,
    )


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# Cursor's beforeSubmitPrompt answer, whatever the hook found (it cannot add context).
CURSOR_PROMPT_ANSWER = b'{"continue": true}\n'


def cursor_prompt(
    env: Mapping[str, str], payload: Mapping[str, Any], *args: str, host: str = "cursor"
) -> str:
    """Cursor's prompt as its model hears it: ``flush-tools`` answers only
    ``{"continue": true}``, and the session's next postToolUse (here one naming no tool,
    which queues nothing) carries the prompt's nudge as ``additional_context`` ("" when
    there is none). ``args``: the prompt hook's options (``--json`` and ``--host cursor``
    by default); ``host=""`` runs the probe without ``--host``, as Cursor runs an earlier
    setup's hooks."""
    options = args or ("--json", "--host", "cursor")
    result = run_hook(["flush-tools", *options], payload, env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == CURSOR_PROMPT_ANSWER, result.stdout
    session = payload.get("conversation_id") or payload.get("session_id")
    probe = ["buffer-tool", *(["--host", host] if host else [])]
    after = run_hook(probe, {"conversation_id": session}, env)
    assert after.returncode == 0, after.stderr
    if not after.stdout:
        return ""
    answer = json.loads(after.stdout)
    assert list(answer) == ["additional_context"], answer
    return str(answer["additional_context"])
