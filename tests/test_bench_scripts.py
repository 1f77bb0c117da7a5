"""Every bench script still starts: its imports follow the code it measures (a moved
function once left bench/int8_formats.py failing at import, unnoticed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
# echo_server.py is a child another script starts, with arguments of its own.
CHILDREN = {"echo_server.py"}
FILES = sorted(p for p in BENCH.glob("*.py") if p.name not in CHILDREN)
SCRIPTS = [p.name for p in FILES if 'if __name__ == "__main__":' in p.read_text()]
LIBRARIES = [p.stem for p in FILES if p.name not in SCRIPTS]


@pytest.mark.parametrize("library", LIBRARIES)
def test_bench_library_imports(library: str) -> None:
    """The modules the scripts share (the dev sets, the levers, _common) import."""
    done = subprocess.run(
        [sys.executable, "-c", f"import {library}"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=BENCH,
    )
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("script", SCRIPTS)
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
