"""Eight frontends writing through memory_remember at once lose nothing (issue: concurrency)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.embedder_proc import EmbedderProcess
from thatch.frontend.store.memory_store import Store

PROCESSES = 8
CALLS = 200

# One frontend process: its own ToolContext (Store + embedder client), like `thatch mcp`.
WRITER = """
import sys
from thatch.frontend.tools.context import ToolContext
from thatch.frontend.tools.memory_tools import Tools

worker, calls = int(sys.argv[1]), int(sys.argv[2])
with ToolContext.from_env(autostart=False) as ctx:
    tools = Tools(ctx)
    for i in range(calls):
        result = tools.call(
            "memory_remember",
            {"label": f"w{worker} note {i}", "content": f"worker {worker} learned fact {i}"},
        )
        if result.is_error or not result.text.startswith("[saved] "):
            print(result.text, file=sys.stderr)
            sys.exit(1)
print("ok")
"""


def test_eight_processes_remember_1600_memories(
    tmp_path: Path, mock_embedder: EmbedderProcess
) -> None:
    """8 processes × 200 memory_remember: exactly 1,600 indexed rows, no lock error seen."""
    project = tmp_path / "proj"
    project.mkdir()
    db = tmp_path / "thatch.db"
    env = {
        **os.environ,
        "THATCH_DB_PATH": str(db),
        "THATCH_PROJECT_DIR": str(project),
        "THATCH_EMBEDDER_ADDR": mock_embedder.address,
    }
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(worker), str(CALLS)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for worker in range(PROCESSES)
    ]
    results = [writer.communicate(timeout=300) for writer in writers]
    for writer, (out, err) in zip(writers, results, strict=True):
        assert "locked" not in err and "busy" not in err, err
        assert (writer.returncode, out.strip()) == (0, "ok"), err
    with Store.open(db) as store:
        assert store.store_counts() == {"global": 0, "proj": PROCESSES * CALLS}
        assert store.pending_count() == 0
        assert store.conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
