"""Keep a personal file out of git: ``.git/info/exclude`` of the repository holding it.

Setup writes ``.claude/settings.local.json`` (a personal permission grant). Claude Code
ignores it in git only for files it created itself, so setup makes sure git ignores ours
too: the exclude file is per clone and never committed, unlike ``.gitignore``, which
would be a change in the user's working tree for teammates to see.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

__all__ = ["ensure_excluded"]

GIT_TIMEOUT_SECONDS = 5


def _git(directory: Path, *args: str) -> subprocess.CompletedProcess[str] | None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    try:
        return subprocess.run(
            ["git", "-C", str(directory), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_SECONDS,
            env=env,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None


def exclude_target(path: Path) -> tuple[Path, str] | None:
    """(the exclude file, the pattern to add) when git would track ``path``; else None.

    None too when ``path`` is not in a git work tree, git is missing, or git already
    ignores it (any rule: .gitignore, the exclude file, the user's global excludes).
    """
    directory = path.parent if path.parent.is_dir() else path.parent.parent
    top = _git(directory, "rev-parse", "--show-toplevel")
    if top is None or top.returncode != 0 or not top.stdout.strip():
        return None
    root = Path(top.stdout.strip())
    try:
        relative = path.resolve().relative_to(root.resolve())
    except ValueError:
        return None
    ignored = _git(root, "check-ignore", "-q", "--no-index", str(relative))
    if ignored is None or ignored.returncode != 1:  # 0: ignored already; other: git failed
        return None
    exclude = _git(root, "rev-parse", "--git-path", "info/exclude")
    if exclude is None or exclude.returncode != 0 or not exclude.stdout.strip():
        return None
    exclude_path = Path(exclude.stdout.strip())
    if not exclude_path.is_absolute():
        exclude_path = root / exclude_path
    # A leading slash anchors the pattern at the repository root; glob characters in a
    # directory name are escaped so the pattern names this one file.
    pattern = "/" + "".join(f"\\{c}" if c in "*?[]!#\\" else c for c in relative.as_posix())
    return exclude_path, pattern


def ensure_excluded(path: Path, *, dry_run: bool) -> Path | None:
    """Add ``path`` to its repository's exclude file when git would track it.

    Returns the exclude file changed (or, in a dry run, that would be), else None.
    """
    target = exclude_target(path)
    if target is None:
        return None
    exclude_path, pattern = target
    if dry_run:
        return exclude_path
    exclude_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        old = exclude_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        old = ""
    separator = "" if not old or old.endswith("\n") else "\n"
    comment = "# thatch setup: a personal Claude Code permission file\n"
    with exclude_path.open("a", encoding="utf-8") as handle:
        handle.write(f"{separator}{comment}{pattern}\n")
    return exclude_path
