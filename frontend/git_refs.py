"""What git says about a repository's branches (docs/database.md §branch-lifecycle).

``common_dir``, ``fingerprint`` and ``refs_from_files`` read files only (the prompt hook
calls them on every prompt), and so does ``head_commit`` (the rename pass reads it for
checkouts other than the current one); ``read_refs`` runs git only for a repository whose
refs are not in files (reftable), ``merged_into`` runs git, with the cleaned environment and
timeout of ``project.git_result``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from thatch.frontend.identifiers import not_utf8
from thatch.frontend.project import checkout_git_dir, git_result
from thatch.frontend.regular_files import open_regular, read_regular

if TYPE_CHECKING:
    import subprocess

__all__ = [
    "EVENTS_FILE",
    "HEADS",
    "REMOTE",
    "GitUnanswered",
    "Refs",
    "common_dir",
    "default_targets",
    "fingerprint",
    "head_commit",
    "is_object_id",
    "merged_into",
    "read_refs",
    "refs_from_files",
    "stat_key",
]

HEADS = "refs/heads/"
REMOTE = "origin"
_REMOTES = f"refs/remotes/{REMOTE}/"
# Files git writes, read as regular files only (a FIFO there would hold a hook for good).
_SMALL = 1 << 16
_PACKED_MAX = 1 << 30
# Appended to by the optional git hooks (``thatch setup --git-hooks``), in the common dir.
EVENTS_FILE = "thatch-events"


def common_dir(directory: Path) -> Path | None:
    """The repository's common git dir (shared by all its worktrees), read from files:
    ``.git`` a directory, or a file ``gitdir: <dir>`` whose ``commondir`` names it."""
    found = checkout_git_dir(directory)
    if found is None:
        return None
    checkout, gitdir = found
    if gitdir == checkout / ".git":
        return gitdir  # a plain checkout: its .git is the common dir
    try:
        common = read_regular(gitdir / "commondir", _SMALL).decode("utf-8").strip()
    except FileNotFoundError:
        return gitdir  # a submodule's or separate git dir: its own common dir
    except (OSError, UnicodeDecodeError):
        return None
    path = Path(common)
    return Path(os.path.normpath(path if path.is_absolute() else gitdir / path))


def fingerprint(common: Path) -> str:
    """A digest of what changes whenever a branch or remote-tracking ref is written or
    deleted: the size and mtime of ``packed-refs`` (and of reftable's table list, and of
    the optional hooks' events file), and the mtime of every directory under
    ``refs/heads`` and ``refs/remotes`` (git writes a loose ref by renaming a lock file
    into its directory, and deletes it there). Stat calls only."""
    parts: list[str] = []
    for name in ("packed-refs", "reftable/tables.list", EVENTS_FILE):
        parts.append(f"{name}:{stat_key(common / name)}")
    for top in ("refs/heads", "refs/remotes"):
        for root, dirs, _files in os.walk(common / top):
            dirs.sort()
            parts.append(f"{root}:{stat_key(Path(root))}")
    return hashlib.sha256("\n".join(parts).encode("utf-8", "replace")).hexdigest()[:32]


def stat_key(path: Path) -> str:
    """``path``'s mtime, size and inode as one cache key part ("-" when it is absent)."""
    try:
        info = path.stat()
    except OSError:
        return "-"
    return f"{info.st_mtime_ns}/{info.st_size}/{info.st_ino}"


# A NamedTuple, not a dataclass: the prompt hook imports this module (dataclasses
# imports inspect, ~5 ms).
class Refs(NamedTuple):
    """Branch and remote-tracking refs (full name → commit), origin/HEAD's target, and
    each ref's tree (full name → tree; what a squash-merge check compares with)."""

    commits: dict[str, str]
    origin_head: str | None  # e.g. "refs/remotes/origin/main"
    trees: Mapping[str, str] = {}  # never written to: each read makes its own


def read_refs(directory: Path, env: Mapping[str, str] | None = None) -> Refs | None:
    """Heads and remotes, read from the refs files (no git process) when the repository
    keeps them there, else by one ``git for-each-ref``; None when neither can say."""
    common = common_dir(Path(os.path.abspath(directory)))
    if common is not None:
        found = refs_from_files(common)
        if found is not None:
            return found
    return _refs_from_git(directory, env)


def refs_from_files(common: Path) -> Refs | None:
    """What ``git for-each-ref refs/heads refs/remotes`` lists, from the files backend's
    files: loose refs first, then ``packed-refs`` (git packs a ref by writing
    ``packed-refs`` before it deletes the loose file, so a ref is in one of them
    throughout; a loose ref wins). None for a reftable repository, or a file that is not
    as expected (git is asked instead). Trees are left to ``merged_into``."""
    if (common / "reftable").exists():
        return None
    values: dict[str, str] = {}
    for top in ("refs/heads", "refs/remotes"):
        for root, dirs, files in os.walk(common / top):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(".lock"):
                    continue  # a ref being written: its old value is in place until renamed
                path = os.path.join(root, name)
                if os.path.islink(path):
                    return None
                try:
                    with open_regular(path) as handle:
                        text = handle.read(4096).decode("ascii").strip()
                except FileNotFoundError:
                    continue  # deleted meanwhile
                except (OSError, UnicodeDecodeError):
                    return None
                ref = os.path.relpath(path, common).replace(os.sep, "/")
                # git allows any bytes in a branch name, the snapshot's text does not: a
                # ref that is not UTF-8 is left out, as a branch the snapshot never saw.
                if not not_utf8(ref):
                    values[ref] = text
    try:
        packed = read_regular(common / "packed-refs", _PACKED_MAX).decode(
            "utf-8", "surrogateescape"
        )
    except FileNotFoundError:
        packed = ""
    except (OSError, UnicodeDecodeError):
        return None
    for line in packed.splitlines():
        if not line or line[0] in "#^":
            continue  # the header, and a tag's peeled commit
        commit, _, ref = line.partition(" ")
        if not is_object_id(commit) or not ref:
            return None
        if ref.startswith((HEADS, "refs/remotes/")) and not not_utf8(ref):
            values.setdefault(ref, commit)
    commits: dict[str, str] = {}
    origin_head = None
    for ref, value in values.items():
        if value.startswith("ref: "):
            if ref == f"{_REMOTES}HEAD":
                origin_head = value[len("ref: ") :]
            continue  # a symbolic ref: for-each-ref's %(symref) lines are skipped too
        if not is_object_id(value):
            return None
        commits[ref] = value
    return Refs(commits, origin_head)


def head_commit(checkout: Path) -> str | None:
    """The commit HEAD is at in ``checkout`` (a worktree's own), read from files: no git
    process. None when the files cannot say: an unborn branch, a reftable repository, a
    file not as expected."""
    found = checkout_git_dir(checkout)
    common = common_dir(checkout)
    if found is None or common is None:
        return None
    try:
        # A branch name is any bytes to git: kept as the file system's path names them.
        text = read_regular(found[1] / "HEAD", _SMALL).decode("utf-8", "surrogateescape").strip()
    except OSError:
        return None
    if is_object_id(text):
        return text  # detached
    ref = text.removeprefix("ref: ")
    if ref == text or not ref.startswith(HEADS) or ".." in ref.split("/"):
        return None
    value: str | None
    try:
        value = read_regular(common / ref, _SMALL).decode("ascii").strip()
    except FileNotFoundError:
        value = _packed_ref(common, ref)
    except (OSError, UnicodeDecodeError):
        return None
    return value if value is not None and is_object_id(value) else None


def _packed_ref(common: Path, ref: str) -> str | None:
    try:
        packed = read_regular(common / "packed-refs", _PACKED_MAX)
    except OSError:
        return None
    for line in packed.decode("utf-8", "surrogateescape").splitlines():
        commit, _, name = line.partition(" ")
        if name == ref:
            return commit
    return None


def is_object_id(text: str) -> bool:
    """Whether ``text`` is a full object id (sha1 or sha256, lower-case hex): never an
    option or a revision expression when passed to git."""
    return len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text)


def _refs_from_git(directory: Path, env: Mapping[str, str] | None) -> Refs | None:
    result = git_result(
        directory,
        env,
        "for-each-ref",
        "--format=%(objectname) %(tree) %(refname) %(symref)",
        "refs/heads",
        "refs/remotes",
    )
    if result is None or result.returncode != 0:
        return None
    commits: dict[str, str] = {}
    trees: dict[str, str] = {}
    origin_head = None
    for line in result.stdout.decode("utf-8", "surrogateescape").splitlines():
        fields = line.split(" ")
        if len(fields) != 4:
            continue
        commit, tree, ref, symref = fields
        if not_utf8(line):
            continue
        if symref:
            if ref == f"{_REMOTES}HEAD":
                origin_head = symref
            continue
        commits[ref] = commit
        if tree:
            trees[ref] = tree
    return Refs(commits, origin_head, trees)


def default_targets(refs: Refs, current: str | None) -> list[str]:
    """The refs a merged branch's work is found in: the default branch, local and on
    origin. The default is origin/HEAD's target, else ``main``, else ``master``, else
    ``current`` (the branch checked out)."""
    name = None
    if refs.origin_head and refs.origin_head.startswith(_REMOTES):
        name = refs.origin_head[len(_REMOTES) :]
    else:
        for candidate in ("main", "master"):
            if HEADS + candidate in refs.commits or _REMOTES + candidate in refs.commits:
                name = candidate
                break
        if name is None:
            name = current
    if name is None:
        return []
    return [ref for ref in (HEADS + name, _REMOTES + name) if ref in refs.commits]


class GitUnanswered(Exception):
    """Git could not be run (not installed, timed out): nothing may be decided."""


def merged_into(
    directory: Path,
    commit: str,
    refs: Refs,
    targets: Sequence[str],
    env: Mapping[str, str] | None = None,
) -> bool:
    """Whether ``commit``'s work is in one of ``targets`` (refs of ``refs``); raises
    GitUnanswered when git cannot be run.

    Fast-forward and merge commits: ``commit`` is an ancestor of a target, asked of all
    targets by one ``git for-each-ref --contains``. Squash and rebase merges leave no
    ancestry: merging ``commit`` into the target (``git merge-tree --write-tree``) then
    changes nothing, the result is the target's own tree (read with the targets' commits
    by one more ``for-each-ref``, unless ``refs`` has them); targets at one commit are
    merged once. A target that changed the same lines again since the squash makes that
    merge conflict: the branch then counts as unmerged (its memories are archived,
    restorable). Git calls: one when an ancestor, else two plus one per distinct target
    commit.
    """
    targets = [target for target in targets if target in refs.commits]
    if not targets:
        return False
    contains = _git_or_raise(
        directory, env, "for-each-ref", f"--contains={commit}", "--format=%(refname)", *targets
    )
    if contains.returncode == 0 and contains.stdout.strip():
        return True
    merged: set[str] = set()
    for tip, tree in _target_trees(directory, env, refs, targets):
        if tip in merged:
            continue
        merged.add(tip)
        merge = _git_or_raise(directory, env, "merge-tree", "--write-tree", tip, commit)
        if merge.returncode != 0:
            continue
        written = merge.stdout.decode("ascii", "replace").splitlines()
        if written and written[0].strip() == tree:
            return True
    return False


def _target_trees(
    directory: Path, env: Mapping[str, str] | None, refs: Refs, targets: Sequence[str]
) -> list[tuple[str, str]]:
    """(commit, tree) of each target: from ``refs`` when it has the trees, else as git
    lists them now (one call; a target moved since the refs were read is merged at its
    new commit, with that commit's tree)."""
    if all(target in refs.trees for target in targets):
        return [(refs.commits[target], refs.trees[target]) for target in targets]
    listed = _git_or_raise(
        directory, env, "for-each-ref", "--format=%(objectname) %(tree)", *targets
    )
    if listed.returncode != 0:
        return []
    pairs = []
    for line in listed.stdout.decode("ascii", "replace").splitlines():
        tip, _, tree = line.partition(" ")
        if tip and tree:
            pairs.append((tip, tree))
    return pairs


def _git_or_raise(
    directory: Path, env: Mapping[str, str] | None, *args: str
) -> subprocess.CompletedProcess[bytes]:
    result = git_result(directory, env, *args)
    if result is None:
        raise GitUnanswered(args[0])
    return result
