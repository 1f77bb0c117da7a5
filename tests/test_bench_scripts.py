"""Every bench script still starts: its imports follow the code it measures (a moved
function once left bench/int8_formats.py failing at import, unnoticed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
# _common.py is a library for the scripts; echo_server.py is a child another script starts.
NOT_SCRIPTS = {"_common.py", "echo_server.py"}


@pytest.mark.parametrize(
    "script", sorted(p.name for p in BENCH.glob("*.py") if p.name not in NOT_SCRIPTS)
)
def test_bench_script_answers_help(script: str) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=BENCH,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
