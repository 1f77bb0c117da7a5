"""The passes off the prompt path (docs/tools.md §code-anchors): following git's renames
and re-checking a store's anchors for the hygiene report. Session start and ``thatch
hygiene`` run both; a recall that finds an anchored file gone, or its checkout's directory
gone and not yet asked about, runs the rename pass (after its answer in ``thatch mcp``);
the prompt hook never asks git.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from thatch.frontend.anchors.check import (
    CHANGED,
    AnchorCheck,
    Drift,
    GitSavedLines,
    database_files,
    depends_on,
    inherit,
)
from thatch.frontend.errors import StoreError
from thatch.frontend.git_refs import head_commit, is_object_id

if TYPE_CHECKING:
    from thatch.frontend.store.anchor_queries import Key
    from thatch.frontend.store.memory_store import Store

__all__ = [
    "HYGIENE_BUDGET",
    "MAX_COMMITS",
    "drifted",
    "follow_renames",
    "parse_renames",
    "take_over_gone",
    "unasked_gone",
]

# How many (repository, captured commit) pairs one rename pass diffs: one git process
# each, plus two per repository (its HEAD, its staged renames).
MAX_COMMITS = 8
# How long the hygiene pass may spend checking files; past it, the last stored verdicts.
HYGIENE_BUDGET = 0.25


def parse_renames(output: bytes) -> list[tuple[str, str]]:
    """(old, new) of each rename ``git diff --name-status -z -M`` reports: ``R<score>``,
    old and new, each ended by NUL. A name that is not UTF-8 is left out: a path stored
    in the database is text."""
    fields = output.split(b"\0")
    renames = []
    at = 0
    while at < len(fields) and fields[at]:
        status = fields[at][:1]
        names = 2 if status in (b"R", b"C") else 1
        if status == b"R" and at + 2 < len(fields):
            old, new = _text(fields[at + 1]), _text(fields[at + 2])
            if old is not None and new is not None:
                renames.append((old, new))
        at += 1 + names
    return renames


def _text(name: bytes) -> str | None:
    try:
        return name.decode("utf-8")
    except UnicodeDecodeError:
        return None


def follow_renames(
    store: Store, env: Mapping[str, str] | None = None, here: Path | None = None
) -> int:
    """Move the anchors whose files git reports renamed: since their captured commit
    (committed, re-based on HEAD), then in the working tree (staged: moved, kept on
    their commit's path, see ``Store.move_anchors``). First the checkout holding ``here``
    takes over the anchors of its repository's checkouts that are gone
    (``take_over_gone``). The pairs of that checkout come first; then those of other
    checkouts that exist and whose HEAD moved since (read from files), at most
    ``MAX_COMMITS`` pairs in all. The anchors moved."""
    pairs = store.anchor_commits()
    if here is not None and take_over_gone(store, pairs, here, env):
        pairs = store.anchor_commits()
    commits: dict[str, list[str]] = {}
    for root, commit in _worth_diffing(pairs, here)[:MAX_COMMITS]:
        commits.setdefault(root, []).append(commit)
    return sum(_follow(store, root, listed, env) for root, listed in commits.items())


def take_over_gone(
    store: Store, pairs: list[tuple[str, str]], here: Path, env: Mapping[str, str] | None
) -> int:
    """Re-root onto the checkout holding ``here`` the anchors of checkouts that are gone
    (a worktree removed once its branch merged, a directory no longer a checkout) that
    were captured at a commit merged into its HEAD: its code holds what they were saved
    on. Anchors at commits not merged there (a branch left unmerged, a sibling worktree
    branched earlier, another repository) stay unverifiable, and so do those of a
    worktree git still lists (locked on a disk unplugged). Each checkout is asked about a
    gone root once per HEAD of its own: up to three git processes then, none after. The
    anchors moved."""
    from thatch.frontend.project import checkout_git_dir

    found = checkout_git_dir(Path(os.path.abspath(here)))
    if found is None:
        return 0
    top = os.path.realpath(found[0])
    gone = _gone(pairs, top)
    head = head_commit(Path(top)) if gone else None
    if head is None:
        return 0
    for root in store.gone_asked(top, head):
        gone.pop(root, None)
    if not gone:
        return 0
    taken = _merged(top, head, env, gone)
    if taken is None:
        return 0  # git cannot say: the next pass asks again
    return store.reroot_anchors(taken, top, head, asked=list(gone))


def unasked_gone(store: Store, roots: set[str], here: Path) -> bool:
    """Whether the checkout holding ``here`` has yet to be asked at its current HEAD about
    one of ``roots`` (gone checkouts): files and one query, no git process."""
    from thatch.frontend.project import checkout_git_dir

    found = checkout_git_dir(Path(os.path.abspath(here)))
    if found is None:
        return False
    top = os.path.realpath(found[0])
    head = head_commit(Path(top))
    return head is not None and bool(roots - {top} - store.gone_asked(top, head))


def _gone(pairs: list[tuple[str, str]], top: str) -> dict[str, list[str]]:
    """The captured commits of each root in ``pairs`` that is no longer a checkout."""
    checkouts: dict[str, bool] = {}
    gone: dict[str, list[str]] = {}
    for root, commit in pairs:
        if root == top or not is_object_id(commit):
            continue
        if root not in checkouts:
            checkouts[root] = _is_checkout(root)
        if not checkouts[root]:
            gone.setdefault(root, []).append(commit)
    return gone


def _is_checkout(root: str) -> bool:
    """Whether ``root`` is still the top of a checkout, from files: its ``.git`` there, a
    worktree's naming a git dir that still exists."""
    from thatch.frontend.project import checkout_git_dir, is_directory

    found = checkout_git_dir(Path(root))
    return found is not None and str(found[0]) == root and is_directory(found[1])


def _merged(
    top: str, head: str, env: Mapping[str, str] | None, gone: dict[str, list[str]]
) -> dict[str, list[str]] | None:
    """Per root of ``gone``, its commits the repository at ``top`` holds merged into
    ``head``, leaving out the roots git still lists as worktrees; None: git cannot say."""
    known = _rev_list(top, env, {c for commits in gone.values() for c in commits}, "--no-walk")
    if not known:
        return None if known is None else {}  # none of its repository: one process
    listed = _worktrees(top, env)
    if listed is None:
        return None
    ours = {
        root: [commit for commit in commits if commit in known]
        for root, commits in gone.items()
        if root not in listed
    }
    asked = {commit for commits in ours.values() for commit in commits}
    unmerged = _rev_list(top, env, asked, f"^{head}") if asked else set()
    if unmerged is None:
        return None
    taken = {root: [c for c in commits if c not in unmerged] for root, commits in ours.items()}
    return {root: commits for root, commits in taken.items() if commits}


def _rev_list(
    top: str, env: Mapping[str, str] | None, commits: set[str], *options: str
) -> set[str] | None:
    """``git rev-list`` of ``commits`` (checked object ids, on its input: no argument
    limit) and ``options``, commits it lacks left out; None when git cannot say. A
    partial clone must not fetch them from its remote (a round trip per pass)."""
    from thatch.frontend.project import git_result

    local = {**(os.environ if env is None else env), "GIT_NO_LAZY_FETCH": "1"}
    result = git_result(
        Path(top),
        local,
        "rev-list",
        "--ignore-missing",
        "--missing=allow-any",
        *options,
        "--stdin",
        "--",
        stdin="".join(f"{commit}\n" for commit in sorted(commits)).encode("ascii"),
    )
    if result is None or result.returncode != 0:
        return None
    return set(result.stdout.decode("ascii", "replace").split())


def _worktrees(top: str, env: Mapping[str, str] | None) -> set[str] | None:
    """The worktrees git still lists for the repository at ``top`` whose directory may be
    back (locked, or not prunable), as real paths; None when git cannot say."""
    from thatch.frontend.project import git_result

    result = git_result(Path(top), env, "worktree", "list", "--porcelain", "-z")
    if result is None or result.returncode != 0:
        return None
    listed: set[str] = set()
    for block in result.stdout.split(b"\0\0"):
        fields = block.decode("utf-8", "surrogateescape").split("\0")
        labels = {field.split(" ", 1)[0] for field in fields}
        if fields[0].startswith("worktree ") and ("locked" in labels or "prunable" not in labels):
            listed.add(os.path.realpath(fields[0].removeprefix("worktree ")))
    return listed


def _worth_diffing(pairs: list[tuple[str, str]], here: Path | None) -> list[tuple[str, str]]:
    """``pairs`` under ``here``, then the others a diff could change, up to
    ``MAX_COMMITS``: a checkout deleted since, or one whose HEAD is still the captured
    commit, would take a slot of every pass for nothing."""
    inside = os.path.realpath(here) if here is not None else None
    first = [pair for pair in pairs if _holds(pair[0], inside)]
    rest: list[tuple[str, str]] = []
    heads: dict[str, str | None] = {}
    for root, commit in pairs:
        if len(first) + len(rest) >= MAX_COMMITS:
            break
        if _holds(root, inside) or not os.path.isdir(root):
            continue
        if root not in heads:
            heads[root] = head_commit(Path(root))
        if heads[root] != commit:
            rest.append((root, commit))
    return first + rest


def _holds(root: str, inside: str | None) -> bool:
    return inside is not None and (inside + os.sep).startswith(root.rstrip(os.sep) + os.sep)


def _follow(store: Store, root: str, commits: list[str], env: Mapping[str, str] | None) -> int:
    """One checkout's pass: its renames since each of ``commits``, then its staged ones."""
    from thatch.frontend.project import run_git

    head = run_git(Path(root), env, "rev-parse", "--verify", "--quiet", "HEAD")
    if head is None or not is_object_id(head):
        return 0  # no commit yet, or git cannot say: stay put
    committed: dict[str, list[tuple[str, str]]] = {}
    for commit in commits:
        if commit == head:
            continue
        renames = _renames(root, env, commit, head) if is_object_id(commit) else None
        if renames is None:
            if _known(root, env, commit):
                continue  # git failed (a timeout): the next pass tries again
            # A rewritten history: no diff can start there again. Re-based, the anchors
            # follow the renames from HEAD on, and stop taking a slot of every pass.
            renames = []
        committed[commit] = renames
    return store.move_anchors(root, head, committed, _renames(root, env, head))


def _renames(
    root: str, env: Mapping[str, str] | None, *revisions: str
) -> list[tuple[str, str]] | None:
    """The renames between ``revisions`` (one: it and the working tree); None: git failed.
    Revisions are checked object ids or HEAD, before ``--``: never options, never paths."""
    from thatch.frontend.project import git_result

    result = git_result(Path(root), env, "diff", "--name-status", "-z", "-M", *revisions, "--")
    if result is None or result.returncode != 0:
        return None
    return parse_renames(result.stdout)


def _known(root: str, env: Mapping[str, str] | None, commit: str) -> bool:
    """Whether git knows ``commit`` (or cannot say)."""
    from thatch.frontend.project import git_result

    if not is_object_id(commit):
        return False
    result = git_result(Path(root), env, "cat-file", "-e", f"{commit}^{{commit}}")
    return result is None or result.returncode == 0


def drifted(
    store: Store, name: str, check: AnchorCheck, budget: float = HYGIENE_BUDGET
) -> dict[str, Drift]:
    """The live memories of store ``name`` with an anchor whose code changed, by slug:
    checked now within ``budget`` seconds (the first one always), the rest by their last
    stored verdict; then the live memories that depend on one of them, marked ``via`` its
    label as a recall marks them. Verdicts are stored when the database takes the write."""
    anchored = store.anchored_in(name)
    every = [anchor for anchors in anchored.values() for anchor in anchors]
    before = {(a.slug, a.seq): (a.status, a.checked_mtime_ns, a.checked_size) for a in every}
    verdicts = check.recheck(
        every, budget, never_open=database_files(store.path), saved=GitSavedLines()
    )
    with contextlib.suppress(sqlite3.Error, StoreError):
        # Only the verdicts (or the stats they saw) that changed: most passes write nothing.
        store.set_anchor_status(
            [
                (a, v)
                for a, v in verdicts
                if (v, a.checked_mtime_ns, a.checked_size) != before[(a.slug, a.seq)]
            ]
        )
    status = {(a.slug, a.seq): verdict for a, verdict in verdicts}
    own: dict[Key, Drift] = {}
    for slug, anchors in anchored.items():
        paths = tuple(
            dict.fromkeys(
                a.path for a in anchors if status.get((a.slug, a.seq), a.status) == CHANGED
            )
        )
        if paths:
            own[(name, slug)] = Drift(paths)
    dependents = [(name, slug) for slug in store.dependents_of(name, [k[1] for k in own])]
    inherited = inherit(dependents, depends_on(store, dependents), own) if dependents else {}
    return {key[1]: drift for key, drift in [*own.items(), *inherited.items()]}
