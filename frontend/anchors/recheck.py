"""The passes off the prompt path (docs/tools.md §code-anchors): following git's renames
and re-checking a store's anchors for the hygiene report. Session start and ``thatch
hygiene`` run both; a recall that finds an anchored file gone, or its checkout gone, runs
the rename pass (after its answer in ``thatch mcp``); the prompt hook never asks git.
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
]

# How many (repository, captured commit) pairs one rename pass diffs: one git process
# each, plus two per repository (its HEAD, its staged renames).
MAX_COMMITS = 8
# How many captured commits of gone checkouts one pass asks git about (one process).
MAX_GONE_COMMITS = 64
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
    (a worktree removed once its branch merged, a directory no longer a checkout) when
    they were of its repository: git there knows a commit they were captured at, which
    every worktree of a repository shares. Else they would stay unverifiable for good.
    One git process at most, only when such checkouts are found; the anchors moved."""
    from thatch.frontend.project import checkout_git_dir

    found = checkout_git_dir(Path(os.path.abspath(here)))
    if found is None:
        return 0
    top = os.path.realpath(found[0])
    gone: dict[str, list[str]] = {}
    for root, commit in pairs:
        if root != top and is_object_id(commit) and not _is_checkout(root):
            gone.setdefault(root, []).append(commit)
    if not gone:
        return 0
    asked = [commit for commits in gone.values() for commit in commits][:MAX_GONE_COMMITS]
    known = _known_commits(top, env, asked)
    ours = [root for root, commits in gone.items() if known.intersection(commits)]
    return store.reroot_anchors(ours, top) if ours else 0


def _is_checkout(root: str) -> bool:
    """Whether ``root`` is still the top of a checkout, from files: its ``.git`` there, a
    worktree's naming a git dir that still exists."""
    from thatch.frontend.project import checkout_git_dir, is_directory

    found = checkout_git_dir(Path(root))
    return found is not None and str(found[0]) == root and is_directory(found[1])


def _known_commits(top: str, env: Mapping[str, str] | None, commits: list[str]) -> set[str]:
    """Those of ``commits`` (checked object ids, never options) the repository at ``top``
    holds; none when git cannot say. One process for them all."""
    from thatch.frontend.project import git_result

    result = git_result(
        Path(top), env, "rev-list", "--no-walk=unsorted", "--ignore-missing", *commits, "--"
    )
    if result is None or result.returncode != 0:
        return set()
    return set(result.stdout.decode("ascii", "replace").split())


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


def drifted(store: Store, name: str, check: AnchorCheck) -> dict[str, Drift]:
    """The live memories of store ``name`` with an anchor whose code changed, by slug:
    checked now within ``HYGIENE_BUDGET``, the rest by their last stored verdict; then
    the live memories that depend on one of them, marked ``via`` its label as a recall
    marks them. Verdicts are stored when the database takes the write."""
    anchored = store.anchored_in(name)
    every = [anchor for anchors in anchored.values() for anchor in anchors]
    before = {(a.slug, a.seq): (a.status, a.checked_mtime_ns, a.checked_size) for a in every}
    verdicts = check.recheck(
        every, HYGIENE_BUDGET, never_open=database_files(store.path), saved=GitSavedLines()
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
