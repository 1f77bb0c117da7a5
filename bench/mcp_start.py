"""How soon ``thatch mcp`` answers after spawn (prints figures; not a test).

    .venv/bin/python bench/mcp_start.py [--runs 7]

Each run spawns the ``thatch`` script as a host does (``thatch mcp``), writes
``initialize``, ``notifications/initialized`` and ``tools/list`` at once, and times the
``initialize`` answer and the ``tools/list`` answer from spawn; the same with
``server/discover`` (Claude Code 2.1.332 opens with it); and ``initialize`` once more
without the quick start's answer sheet (a fresh cache: the full server answers, as every
start did before the sheet). The baseline, measured in the
same run, is a bare interpreter's whole life (``python -c pass``). Medians of ``--runs``;
the machine's load average beside them. The embedder address points at nothing (no
embedder starts) and the database is a fresh temp file each run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

THATCH = str(Path(sys.executable).with_name("thatch"))
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"},
    },
}
MODERN = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
HANDSHAKE = [
    INITIALIZE,
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
]
DISCOVER = [
    {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": MODERN}},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": MODERN}},
]


def bare_python() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - start


def mcp_answers(messages: list[dict[str, object]], env: dict[str, str]) -> tuple[float, float]:
    """Seconds from spawn to the first answer and to the tools/list answer."""
    data = b"".join(json.dumps(m).encode() + b"\n" for m in messages)
    start = time.perf_counter()
    proc = subprocess.Popen(
        [THATCH, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(data)
    proc.stdin.flush()
    first = listed = 0.0
    for line in proc.stdout:
        reply = json.loads(line)
        if reply.get("id") == 1:
            first = time.perf_counter() - start
            assert "result" in reply, reply
        elif reply.get("id") == 2:
            listed = time.perf_counter() - start
            assert reply["result"]["tools"], reply
            break
    proc.stdin.close()
    proc.wait(60)
    return first, listed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="thb-") as tmp:
        base = {
            **os.environ,
            "THATCH_EMBEDDER_ADDR": f"unix://{tmp}/no-embedder.sock",
            "XDG_CACHE_HOME": f"{tmp}/cache",
            "THATCH_PROJECT_DIR": tmp,
        }
        keys = ("python", "cold", "init", "list", "disc", "dlist")
        rows: dict[str, list[float]] = {k: [] for k in keys}
        for run in range(args.runs):
            env = {**base, "THATCH_DB_PATH": f"{tmp}/db{run}/thatch.db"}
            rows["python"].append(bare_python())
            # No answer sheet yet (first start after an install or upgrade, before setup).
            cold = {**env, "XDG_CACHE_HOME": f"{tmp}/cold{run}"}
            rows["cold"].append(mcp_answers(HANDSHAKE, cold)[0])
            first, listed = mcp_answers(HANDSHAKE, env)
            rows["init"].append(first)
            rows["list"].append(listed)
            first, listed = mcp_answers(DISCOVER, env)
            rows["disc"].append(first)
            rows["dlist"].append(listed)
    med = {k: statistics.median(v) * 1000 for k, v in rows.items()}
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    print(f"thatch mcp start, median of {args.runs} (load {' '.join(load)})")
    print(f"  python -c pass (whole life)          {med['python']:7.0f} ms")
    for key, label in (
        ("cold", "initialize answered, no answer sheet"),
        ("init", "initialize answered"),
        ("list", "tools/list answered (after initialize)"),
        ("disc", "server/discover answered"),
        ("dlist", "tools/list answered (after discover)"),
    ):
        over = med[key] - med["python"]
        print(f"  {label:<38} {med[key]:7.0f} ms  ({over:+.0f} ms over bare python)")


if __name__ == "__main__":
    main()
