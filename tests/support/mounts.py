"""Real read-only and full file systems for tests, in a private mount namespace.

Tests run as root, where ``chmod 0444`` stops nothing, so a read-only database is made
for real: ``unshare -m`` gives the commands their own mount table, in which a directory
is bind-mounted read-only over itself, or a small tmpfs is mounted and filled. Nothing
outside the namespace sees either mount. A read-only *file* uses ``chattr +i``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# Runs inside the namespace: mounts, then each command in turn (``["fill", dir]`` writes
# zeros into dir until the file system is full), then prints every result as JSON.
_DRIVER = r"""
import json, os, subprocess, sys
spec = json.loads(sys.argv[1])
for mount in spec["mounts"]:
    subprocess.run(mount, check=True)
results = []
for command in spec["commands"]:
    if command[0] == "fill":
        # Unbuffered: a buffered tail would be flushed again at close, past the try.
        with open(os.path.join(command[1], "filler"), "wb", buffering=0) as handle:
            try:
                while True:
                    handle.write(b"\0" * 65536)
            except OSError:
                pass
        results.append([0, "", ""])
        continue
    done = subprocess.run(command, capture_output=True, text=True, env=spec["env"])
    results.append([done.returncode, done.stdout, done.stderr])
print(json.dumps(results))
"""


@dataclass(frozen=True)
class Outcome:
    returncode: int
    stdout: str
    stderr: str


def in_namespace(
    mounts: Sequence[Sequence[str]],
    commands: Sequence[Sequence[str]],
    env: Mapping[str, str],
) -> list[Outcome]:
    """Run ``commands`` after ``mounts`` in a new mount namespace; one Outcome each."""
    spec = json.dumps({"mounts": mounts, "commands": commands, "env": dict(env)})
    done = subprocess.run(
        ["unshare", "--mount", "--", sys.executable, "-c", _DRIVER, spec],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [Outcome(*result) for result in json.loads(done.stdout)]


def read_only(directory: Path) -> list[list[str]]:
    """Mounts making ``directory`` read-only (a bind mount of itself, remounted ro)."""
    where = str(directory)
    return [
        ["mount", "--bind", where, where],
        ["mount", "-o", "remount,bind,ro", where],
    ]


def small_tmpfs(directory: Path, size: str = "3m") -> list[list[str]]:
    return [["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(directory)]]


@contextmanager
def immutable(path: Path) -> Iterator[Path]:
    """``chattr +i path`` for the block: even root cannot open it for writing."""
    subprocess.run(["chattr", "+i", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)
