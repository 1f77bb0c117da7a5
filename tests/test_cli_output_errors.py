"""Output that cannot be written (a full disk under a redirect, a terminal gone): one
error line and exit 1, where click used to end in an OSError traceback. Real processes
writing to /dev/full."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    "args", [["stores"], ["--version"], ["list", "--help"], ["list"], ["list", "--json"]]
)
def test_output_to_a_full_disk_is_one_error_line(tmp_path: Path, args: list[str]) -> None:
    env = {
        **os.environ,
        "THATCH_DB_PATH": str(tmp_path / "thatch.db"),
        "THATCH_PROJECT_DIR": str(tmp_path),
        "THATCH_MODEL": "mock",
    }
    with open("/dev/full", "wb") as full:
        result = subprocess.run(
            [sys.executable, "-m", "thatch.cli", *args],
            env=env, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr == "Error: cannot write the output: No space left on device\n"
