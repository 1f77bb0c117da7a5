"""Which store a project directory belongs to (docs/database.md §project-store), asked of git.

Every git command runs in the directory with a 2-second timeout and a cleaned
environment; any failure just moves detection to the next step, never raises.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

GIT_TIMEOUT_SECONDS = 2.0
UNKNOWN = "unknown"
GLOBAL_STORE = "global"

# Variables that would point git at some other repository than the directory's own.
_GIT_LOCATION_VARS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_COMMON_DIR",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_CEILING_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
)

_SEGMENTS = r"(?P<path>[^/]+(?:/[^/]+)*)/(?P<name>[^/]+)"
_REMOTE_FORMS = [
    re.compile(rf"^git@(?P<host>[^/:]+):{_SEGMENTS}$"),
    re.compile(rf"^https?://(?P<host>[^/]+)/{_SEGMENTS}$"),
    re.compile(rf"^ssh://git@(?P<host>[^/]+)/{_SEGMENTS}$"),
    re.compile(rf"^git://(?P<host>[^/]+)/{_SEGMENTS}$"),
]


def parse_remote(url: str) -> str | None:
    """``PATH/NAME`` of a hosted remote URL (``owner/repo``), or None for anything else."""
    text = url.strip().rstrip("/")
    if text.endswith(".git"):
        text = text[: -len(".git")]
    for form in _REMOTE_FORMS:
        match = form.match(text)
        if match:
            return f"{match['path']}/{match['name']}"
    return None


def detect_store(directory: Path, env: Mapping[str, str] | None = None) -> str:
    """The project's store name: ``owner/repo``, else the repository or directory name."""
    directory = Path(os.path.abspath(directory))
    if directory.is_dir():
        remote = _git(directory, env, "remote", "get-url", "origin")
        parsed = parse_remote(remote) if remote else None
        if parsed:
            return parsed
        common = _common_dir(directory, env)
        if common is not None:
            name = common.parent.name if common.name == ".git" else common.name
            if name:
                return name
    if directory.exists() and directory.name:
        return directory.name
    return UNKNOWN


def project_store(directory: Path, env: Mapping[str, str] | None = None) -> str:
    """The detected store, with ``unknown`` mapped to ``global``."""
    name = detect_store(directory, env)
    return GLOBAL_STORE if name == UNKNOWN else name


def list_branches(directory: Path, env: Mapping[str, str] | None = None) -> list[str]:
    """Local branch names of the repository at ``directory``; [] when git cannot say."""
    output = _git(Path(directory), env, "for-each-ref", "--format=%(refname:short)", "refs/heads")
    if output is None:
        return []
    return [line for line in output.splitlines() if line]


def _common_dir(directory: Path, env: Mapping[str, str] | None) -> Path | None:
    output = _git(
        directory, env, "rev-parse", "--path-format=absolute", "--git-common-dir"
    ) or _git(directory, env, "rev-parse", "--git-common-dir")
    if not output:
        return None
    # git older than 2.31 echoes the unknown --path-format flag; the answer is the last line.
    lines = [line for line in output.splitlines() if line and not line.startswith("--")]
    if not lines:
        return None
    path = Path(lines[-1])
    return Path(os.path.normpath(path if path.is_absolute() else directory / path))


def _git(directory: Path, env: Mapping[str, str] | None, *args: str) -> str | None:
    """Trimmed stdout of a successful git command, else None (timeout, no git, error)."""
    clean = {
        key: value
        for key, value in (os.environ if env is None else env).items()
        if key not in _GIT_LOCATION_VARS
    }
    clean["GIT_TERMINAL_PROMPT"] = "0"
    clean["LC_ALL"] = "C"
    try:
        result = subprocess.run(
            ["git", *args],
            cwd=directory,
            env=clean,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=GIT_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if result.returncode != 0:
        return None
    text = result.stdout.decode("utf-8", errors="replace").strip()
    return text or None
