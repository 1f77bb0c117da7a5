"""The prompt hook's chat line (docs/chat.md §liveness-and-delivery): what refreshing
``last_seen`` on every prompt costs beside refreshing it at most once a minute.

    python bench/chat_line.py [--repeats 300]

In one process, on one database, interleaved call by call: ``chat_line`` as
``flush-tools`` runs it, A with a refresh window of 0 (a write transaction every prompt,
as before) and B with the hook's window (a session seen within the minute is only read).
Twice: with no other connection open (the hook's close then checkpoints what it wrote:
the cold path, no ``thatch mcp``), and with one held open, as a session's ``thatch mcp``
holds it. Medians and p90 in ms; the machine's load is printed beside.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from thatch.frontend.hooks import chat_anchor  # noqa: E402
from thatch.frontend.store.memory_store import Store  # noqa: E402


def run(env: dict[str, str], repeats: int) -> tuple[list[float], list[float]]:
    payload = {"session_id": "bench-chat", "prompt": "hi"}
    every, minute = [], []
    refresh = chat_anchor.SEEN_REFRESH
    for _ in range(repeats):
        for window, times in ((timedelta(0), every), (refresh, minute)):
            chat_anchor.SEEN_REFRESH = window  # the module's constant, as the hook reads it
            start = time.perf_counter()
            chat_anchor.chat_line("flush-tools", payload, env, "claude", always=False)
            times.append((time.perf_counter() - start) * 1000)
    chat_anchor.SEEN_REFRESH = refresh
    return every, minute


def row(name: str, times: list[float]) -> str:
    p90 = statistics.quantiles(times, n=10)[-1]
    return f"{name:<54} median {statistics.median(times):6.2f} ms   p90 {p90:6.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="thatch-chat-line-"))
    project = root / "project"
    project.mkdir()
    env = {
        **os.environ,
        "THATCH_DB_PATH": str(root / "thatch.db"),
        "THATCH_PROJECT_DIR": str(project),
        "XDG_CACHE_HOME": str(root / "cache"),
    }
    Store.open(env["THATCH_DB_PATH"]).close()
    anchored = {"session_id": "bench-chat"}
    chat_anchor.chat_line("reminder", anchored, env, "claude", always=True)
    with open("/proc/loadavg") as load:
        print(f"load at start: {' '.join(load.read().split()[:3])}")
    for held in (False, True):
        server = Store.open(env["THATCH_DB_PATH"]) if held else None
        try:
            every, minute = run(env, args.repeats)
        finally:
            if server is not None:
                server.close()
        where = "a connection held (warm)" if held else "no other connection (cold)"
        print(row(f"{where}, A: write every prompt", every))
        ratio = statistics.median(minute) / statistics.median(every)
        print(row(f"{where}, B: at most once a minute", minute) + f"  (B/A {ratio:.2f})")
    with open("/proc/loadavg") as load:
        print(f"load at end: {' '.join(load.read().split()[:3])}")


if __name__ == "__main__":
    main()
