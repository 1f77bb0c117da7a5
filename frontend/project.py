"""Which store a project directory belongs to (docs/database.md §project-store), asked of git.

Every git command runs in the directory with a 2-second timeout and a cleaned
environment; any failure just moves detection to the next step, never raises.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from thatch.frontend.regular_files import read_regular

if TYPE_CHECKING:
    import subprocess

__all__ = [
    "RepoPathCache",
    "checkout_git_dir",
    "current_branch",
    "detect_store",
    "is_directory",
    "list_branches",
    "parse_remote",
    "project_store",
]

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


class RepoPathCache(Protocol):
    """The repo identity cache (docs/chat.md §8); ``store/repo_paths.RepoPaths`` is one."""

    def lookup(self, worktree_path: str) -> tuple[str, str] | None: ...

    def remember(self, worktree_path: str, main_path: str, repo_slug: str) -> None: ...

    def evict(self, worktree_path: str) -> None: ...

    def close(self) -> None: ...


def detect_store(
    directory: Path,
    env: Mapping[str, str] | None = None,
    cache: RepoPathCache | None = None,
) -> str:
    """The project's store name: ``owner/repo``, else the repository or directory name.

    With ``cache`` (docs/chat.md §8): a git answer is remembered for the directory, and a
    directory that no longer exists is named by what was remembered for it, never by its
    basename (a deleted worktree's basename is usually a branch name).
    """
    directory = Path(os.path.abspath(directory))
    if is_directory(directory):
        found = _git_identity(directory, env, main_wanted=cache is not None)
        if found is not None:
            slug, main = found
            if cache is not None:
                _quietly(lambda: cache.remember(_real(directory), _real(main), slug))
            return slug
    if _exists(directory) and directory.name:
        # A name that is not UTF-8 keeps a replacement character: no store can hold bytes.
        return directory.name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    if cache is not None:
        return _cached(directory, env, cache)
    return UNKNOWN


def _git_identity(
    directory: Path, env: Mapping[str, str] | None, *, main_wanted: bool = True
) -> tuple[str, Path] | None:
    """``(slug, main checkout)`` by remote, else by common dir; None when git cannot say.

    Without ``main_wanted`` a remote answer skips the common-dir call (the main checkout
    is then reported as ``directory``).
    """
    remote = _git(directory, env, "remote", "get-url", "origin")
    parsed = parse_remote(remote) if remote else None
    if parsed and not main_wanted:
        return parsed, directory
    common = _common_dir(directory, env)
    main = common.parent if common is not None and common.name == ".git" else common
    if parsed:
        return parsed, main or directory
    if common is not None:
        name = common.parent.name if common.name == ".git" else common.name
        if name:
            return name, main or directory
    return None


def _cached(directory: Path, env: Mapping[str, str] | None, cache: RepoPathCache) -> str:
    """A gone directory's remembered store; evicted when its main checkout now says else."""
    key = _real(directory)
    row = _quietly(lambda: cache.lookup(key)) or _quietly(lambda: cache.lookup(str(directory)))
    if row is None:
        return UNKNOWN
    main, slug = row
    if Path(main).is_dir():
        found = _git_identity(Path(main), env)
        if found is not None and found[0] != slug:
            # A definitive mismatch: the main checkout is now another repository.
            _quietly(lambda: cache.evict(key))
            _quietly(lambda: cache.evict(str(directory)))
            return UNKNOWN
    # Same identity, main checkout missing, or not a git checkout right now (a re-clone
    # may be in progress): the remembered name stands.
    return slug


def is_directory(path: Path) -> bool:
    """``path.is_dir()``, False for a path the system will not look up: a host's cwd may be
    too long a name or lie under a directory this user cannot search (ENAMETOOLONG, EACCES
    escape ``is_dir``), and such a directory is as unusable as a missing one."""
    try:
        return path.is_dir()
    except OSError:
        return False


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:
        return False


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:
        return False


T = TypeVar("T")


def _quietly(action: Callable[[], T]) -> T | None:
    """A cache that fails (locked, read-only, no such table) is no cache."""
    try:
        return action()
    except Exception:
        return None


def _real(path: Path) -> str:
    return os.path.realpath(path)


def repo_cache(env: Mapping[str, str] | None) -> RepoPathCache | None:
    """The cache in the database of ``env`` (None: no env given, no database yet)."""
    if env is None:
        return None
    from thatch.frontend.store.repo_paths import RepoPaths

    try:
        return RepoPaths.from_env(env)
    except Exception:  # an unopenable database: detection goes on without a cache
        return None


def project_store(
    directory: Path, env: Mapping[str, str] | None = None, cache: RepoPathCache | None = None
) -> str:
    """The detected store, with ``unknown`` mapped to ``global``.

    With ``env`` and no ``cache``, the repo identity cache of ``env``'s database is used.
    """
    opened = repo_cache(env) if cache is None else None
    try:
        name = detect_store(directory, env, cache or opened)
    finally:
        if opened is not None:
            _quietly(opened.close)
    return GLOBAL_STORE if name == UNKNOWN else name


def list_branches(directory: Path, env: Mapping[str, str] | None = None) -> list[str]:
    """Local branch names of the repository at ``directory``; [] when git cannot say.

    A directory that is gone (a deleted worktree) is asked through its main checkout,
    from the repo identity cache.
    """
    directory = Path(directory)
    if not _exists(directory):
        cache = repo_cache(os.environ if env is None else env)
        if cache is not None:
            try:
                row = _quietly(lambda: cache.lookup(_real(directory)))
            finally:
                _quietly(cache.close)
            if row is not None:
                directory = Path(row[0])
    output = _git(directory, env, "for-each-ref", "--format=%(refname:short)", "refs/heads")
    if output is None:
        return []
    return [line for line in output.splitlines() if line]


def current_branch(directory: Path, env: Mapping[str, str] | None = None) -> str | None:
    """The branch checked out in ``directory`` (a worktree's own), or None: not a git
    checkout, HEAD detached, or git cannot say. The prompt hook's recall nudge searches
    that branch plus unscoped memories, memory_recall's rule for a ``branch`` argument."""
    if not is_directory(Path(directory)):
        return None
    head = _head_file(Path(directory))
    if head is None:
        return None  # no .git here or above: not a checkout
    try:
        text = read_regular(head, _GIT_FILE_MAX).decode("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        text = ""
    # Read, not asked: this runs on every prompt, and a git process costs milliseconds.
    branch = text[len(_BRANCH_REF) :] if text.startswith(_BRANCH_REF) else ""
    if branch and branch != ".invalid":  # reftable repositories keep HEAD elsewhere
        return branch
    if len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text):
        return None  # detached
    return _git(directory, env, "symbolic-ref", "--quiet", "--short", "HEAD")


_BRANCH_REF = "ref: refs/heads/"
# HEAD and a worktree's .git file are one line; read as regular files only (a FIFO there
# would hold every prompt for good).
_GIT_FILE_MAX = 1 << 16


def checkout_git_dir(directory: Path) -> tuple[Path, Path] | None:
    """The nearest checkout holding ``directory`` and its own git dir: its ``.git``, or for
    a worktree (``.git`` a file ``gitdir: <dir>``) that dir. Files only, no git process;
    None when no ``.git`` is found or it cannot be read."""
    for candidate in (directory, *directory.parents):
        dotgit = candidate / ".git"
        if is_directory(dotgit):
            return candidate, dotgit
        if _is_file(dotgit):
            try:
                line = read_regular(dotgit, _GIT_FILE_MAX).decode("utf-8").strip()
            except (OSError, UnicodeDecodeError):
                return None
            if not line.startswith("gitdir: "):
                return None
            gitdir = Path(line.removeprefix("gitdir: "))
            return candidate, gitdir if gitdir.is_absolute() else candidate / gitdir
    return None


def _head_file(directory: Path) -> Path | None:
    """The HEAD file of the checkout holding ``directory`` (its own, a worktree's too)."""
    found = checkout_git_dir(directory)
    return None if found is None else found[1] / "HEAD"


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


def run_git(directory: Path, env: Mapping[str, str] | None, *args: str) -> str | None:
    """Trimmed stdout of a successful git command in ``directory``, else None."""
    return _git(directory, env, *args)


def git_result(
    directory: Path, env: Mapping[str, str] | None, *args: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes] | None:
    """The finished git command (any exit status), or None: no git, timeout, no directory.
    Same cleaned environment and timeout as every other git call here; ``stdin`` its
    input (none: it reads nothing)."""
    clean = {
        key: value
        for key, value in (os.environ if env is None else env).items()
        if key not in _GIT_LOCATION_VARS
    }
    clean["GIT_TERMINAL_PROMPT"] = "0"
    clean["LC_ALL"] = "C"
    # Imported here: a prompt whose checkout and refs are as before runs no git (~5 ms).
    import subprocess

    try:
        return subprocess.run(
            ["git", *args],
            cwd=directory,
            env=clean,
            input=stdin,
            stdin=subprocess.DEVNULL if stdin is None else None,
            capture_output=True,
            timeout=GIT_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None


def _git(directory: Path, env: Mapping[str, str] | None, *args: str) -> str | None:
    """Trimmed stdout of a successful git command, else None (timeout, no git, error)."""
    result = git_result(directory, env, *args)
    if result is None or result.returncode != 0:
        return None
    text = result.stdout.decode("utf-8", errors="replace").strip()
    return text or None
