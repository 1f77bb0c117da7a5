"""The hooks' memo of which store a project directory belongs to (docs/database.md
§project-store): ``project_store``'s answer kept in a cache file, keyed by the facts of
every file git reads to give it, so a prompt in an unchanged checkout runs no git and
opens no database to name its store.

The key holds the directory's realpath, the checkout's ``.git`` and git dirs found by
files (none: not a checkout), a digest of the content of each config file git reads for
``remote get-url`` (the repository's, the worktree's, the global and system ones), the
``GIT_*`` variables, and the database's inode (a new file gets its repo identity row
written again). ``git remote set-url`` changes the key. A config that includes other
files is never memoized: their changes would not show in the key. A lost or stale file
costs git calls, never a wrong answer.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from thatch.common.environment import default_db_path, thatch_cache_dir
from thatch.frontend.git_refs import stat_key
from thatch.frontend.project import checkout_git_dir, is_directory, project_store
from thatch.frontend.regular_files import read_regular

__all__ = ["memo_file", "remembered_store"]

# A file larger than this is no config thatch would read for the include check.
_MAX_CONFIG_BYTES = 1024 * 1024


def remembered_store(directory: Path, env: Mapping[str, str]) -> str:
    """``project_store(directory, env)``, from the memo while its key still holds."""
    directory = Path(os.path.abspath(directory))
    facts = _facts(directory, env)
    if facts is None:
        return project_store(directory, env)
    key, memoizable = facts
    path = memo_file(env, directory)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        text = ""
    stored, _, name = text.rpartition("\n")
    if memoizable and stored == key and name:
        return name
    name = project_store(directory, env)
    # Written only when no file changed while git answered.
    again = _facts(directory, env)
    if memoizable and again == facts:
        _note(path, f"{key}\n{name}")
    return name


def memo_file(env: Mapping[str, str], directory: Path) -> Path:
    """The memo of ``directory`` for ``env``'s database."""
    where = f"{default_db_path(env)}\n{os.path.realpath(directory)}"
    digest = hashlib.sha256(where.encode("utf-8", "replace")).hexdigest()[:24]
    return thatch_cache_dir(env) / "projects" / digest


def _facts(directory: Path, env: Mapping[str, str]) -> tuple[str, bool] | None:
    """(the key, whether it may be memoized: no config includes another file); None for
    a directory that does not exist (``project_store`` then asks the repo identity
    cache)."""
    if not is_directory(directory):
        return None
    parts = [f"dir {os.path.realpath(directory)}"]
    found = checkout_git_dir(directory)
    configs = _global_configs(env)
    if found is None:
        parts.append("no checkout")
    else:
        checkout, gitdir = found
        dotgit = checkout / ".git"
        # A ``.git`` file names the git dir (a worktree's); a directory's mtime moves with
        # every index write, which changes nothing git answers here.
        kind = "dir" if gitdir == dotgit else stat_key(dotgit)
        parts += [f"checkout {checkout}", f".git {kind}", f"gitdir {gitdir}"]
        parts.append(f"commondir {stat_key(gitdir / 'commondir')}")
        common = gitdir
        try:
            named = read_regular(gitdir / "commondir", 1 << 16).decode("utf-8").strip()
        except (OSError, UnicodeDecodeError):
            named = ""
        if named:
            common = Path(os.path.normpath(gitdir / named))
        configs = [common / "config", gitdir / "config.worktree", *configs]
    memoizable = True
    for config in configs:
        digest, plain = _content(config)
        parts.append(f"{config} {digest}")
        memoizable = memoizable and plain
    parts += [f"{name}={value}" for name, value in sorted(env.items()) if name.startswith("GIT_")]
    parts.append(f"db {_identity(default_db_path(env))}")
    return "\t".join(parts).replace("\n", " "), memoizable


def _global_configs(env: Mapping[str, str]) -> list[Path]:
    home = env.get("HOME", "")
    xdg = env.get("XDG_CONFIG_HOME") or (os.path.join(home, ".config") if home else "")
    found = [
        env.get("GIT_CONFIG_GLOBAL") or (os.path.join(home, ".gitconfig") if home else ""),
        os.path.join(xdg, "git", "config") if xdg else "",
        env.get("GIT_CONFIG_SYSTEM") or "/etc/gitconfig",
    ]
    return [Path(path) for path in found if path]


def _identity(path: Path) -> str:
    try:
        info = path.stat()
    except OSError:
        return "-"
    return f"{info.st_dev}/{info.st_ino}"


def _content(config: Path) -> tuple[str, bool]:
    """(a digest of the file's bytes, "-" when absent; whether it includes no other file).
    By content, not stat: ``git branch -d`` rewrites the config file whole even when the
    branch had no section in it. Unreadable or huge: not memoizable."""
    from thatch.frontend.regular_files import open_regular

    try:
        with open_regular(config) as handle:  # a FIFO there would hold the prompt for good
            data = handle.read(_MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return "-", True
    except OSError:
        return "?", False
    plain = len(data) <= _MAX_CONFIG_BYTES and b"include" not in data.lower()
    return hashlib.sha256(data).hexdigest()[:32], plain


def _note(path: Path, value: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        temporary.write_text(value, encoding="utf-8")
        os.replace(temporary, path)
    except OSError:
        pass  # no memo: the next hook asks git again
