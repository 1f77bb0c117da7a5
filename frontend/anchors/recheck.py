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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
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
    import subprocess

    from thatch.frontend.store.anchor_queries import Key
    from thatch.frontend.store.memory_store import Store

__all__ = [
    "HYGIENE_BUDGET",
    "MAX_COMMITS",
    "DriftPass",
    "drift_pass",
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
    """Re-root onto the main checkout holding ``here`` the anchors of checkouts that are
    gone (a worktree removed once its branch merged, a directory no longer a checkout)
    that were captured at a commit merged into its HEAD, on content that commit (or that
    HEAD) holds: its code holds what they were saved on. Anchors at commits not merged
    there (a branch left unmerged, a sibling worktree branched earlier, another
    repository), saved on uncommitted edits, or of a worktree git still lists stay
    unverifiable. A linked worktree never claims: its branch may be abandoned. Each
    checkout is asked about a gone root once per HEAD of its own: up to four git
    processes then, none after. The anchors moved."""
    top = _claiming_checkout(here)
    others = [(root, commit) for root, commit in pairs if root != top]
    head = head_commit(Path(top)) if top is not None and others else None
    if top is None or head is None:
        return 0
    # Roots asked about at this HEAD are left out before any is looked at on disk: those
    # nothing can claim stay for good, and a stat walk each per pass grew with them.
    asked = store.gone_asked(top, head)
    unasked = [pair for pair in others if pair[0] not in asked]
    if not unasked:
        return 0
    # Only what was a linked worktree of this checkout's repository, looked up before any
    # is looked at on disk: a missing main checkout (another clone) may be on a disk
    # unplugged for now, and its code is not this one's.
    mains = store.worktree_mains({root for root, _ in unasked})
    strangers = {root for root, _ in unasked if mains.get(root) != top}
    gone = _gone([pair for pair in unasked if pair[0] not in strangers], top)
    if not gone and not strangers:
        return 0  # only this checkout's living worktrees: nothing to ask or remember
    taken = _merged(top, head, env, gone) if gone else {}
    committed = _committed(top, head, env, store.anchor_files(taken)) if taken else []
    if taken is None or committed is None:
        return 0  # git cannot say: the next pass asks again
    return store.reroot_anchors(committed, top, head, asked=list(gone), strangers=strangers)


def unasked_gone(store: Store, roots: set[str], here: Path) -> bool:
    """Whether the main checkout holding ``here`` has yet to be asked at its current HEAD
    about one of ``roots`` (gone checkouts): files and one query, no git process."""
    top = _claiming_checkout(here)
    if top is None:
        return False
    head = head_commit(Path(top))
    return head is not None and bool(roots - {top} - store.gone_asked(top, head))


def worktree_main(top: str) -> str | None:
    """The main checkout of the repository whose linked worktree is the checkout at
    ``top`` (its git dir names the common one in ``commondir``), as a real path; None for
    a main checkout, a bare repository's worktree, or what cannot be read. Files only."""
    from thatch.frontend.project import checkout_git_dir
    from thatch.frontend.regular_files import read_regular

    found = checkout_git_dir(Path(top))
    if found is None:
        return None
    try:
        common = read_regular(found[1] / "commondir", 1 << 16).decode("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    common_dir = Path(os.path.realpath(found[1] / common))
    return str(common_dir.parent) if common_dir.name == ".git" and common else None


def _claiming_checkout(here: Path) -> str | None:
    """The top of the checkout holding ``here`` when it is a main one (the repository's
    own checkout, a clone's, a submodule's), as a real path; None for a linked worktree
    (its git dir names the common one in ``commondir``) or outside git. It claims only
    the anchors of its own gone worktrees (``worktree_main``): a submodule's worktrees,
    or a repository's whose git dir is not ``<checkout>/.git``, name no main checkout,
    and theirs stay unverifiable."""
    from thatch.frontend.project import checkout_git_dir

    found = checkout_git_dir(Path(os.path.abspath(here)))
    if found is None or os.path.exists(found[1] / "commondir"):
        return None
    return os.path.realpath(found[0])


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
    listed = _worktrees(top, env, gone)
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


def _committed(
    top: str,
    head: str,
    env: Mapping[str, str] | None,
    files: list[tuple[str, str, str, str]],
) -> list[tuple[str, str, str, str]] | None:
    """The (root, commit, path, blob) of ``files`` whose blob is the file at its commit or
    at ``head``: saved on committed content. One saved on edits never committed would
    read as code changed in a checkout that never held them. None: git cannot say."""
    # A path holding a newline cannot be one line of git's input: it stays unverifiable.
    asked = [file for file in files if "\n" not in file[2]]
    if not asked:
        return []
    lines = "".join(f"{rev}:{path}\n" for _, commit, path, _ in asked for rev in (commit, head))
    result = _no_fetch_git(
        top,
        env,
        lines.encode("utf-8", "surrogateescape"),
        "cat-file",
        "--batch-check=%(objectname)",
    )
    if result is None:
        return None
    answers = result.stdout.decode("utf-8", "replace").split("\n")
    if result.returncode != 0 or len(answers) < 2 * len(asked):
        # A partial clone lacking one of those blobs fails the batch (it may not fetch
        # it): none moves, and the same HEAD is not asked again.
        return []
    return [
        file
        for i, file in enumerate(asked)
        if file[3] in (answers[2 * i].strip(), answers[2 * i + 1].strip())
        and _on_disk(top, file[2], answers[2 * i + 1].strip())
    ]


def _on_disk(top: str, path: str, at_head: str) -> bool:
    """Whether the checkout at ``top`` holds ``path`` on disk, when its HEAD does: a sparse
    checkout (or a skip-worktree file) lacks it, and it would read there as gone. A path
    HEAD lacks (renamed since) is the rename pass's to follow."""
    return not is_object_id(at_head) or os.path.isfile(os.path.join(top, path))


def _no_fetch_git(
    top: str, env: Mapping[str, str] | None, stdin: bytes, *args: str
) -> subprocess.CompletedProcess[bytes] | None:
    """git ``args`` in ``top`` reading ``stdin``; a partial clone must not fetch what it
    lacks from its remote (a round trip, up to git's timeout, per pass)."""
    from thatch.frontend.project import git_result

    local = {**(os.environ if env is None else env), "GIT_NO_LAZY_FETCH": "1"}
    return git_result(Path(top), local, *args, stdin=stdin)


def _rev_list(
    top: str, env: Mapping[str, str] | None, commits: set[str], *options: str
) -> set[str] | None:
    """``git rev-list`` of ``commits`` (checked object ids, on its input: no argument
    limit) and ``options``, commits it lacks left out; None when git cannot say. A
    partial clone must not fetch them from its remote (a round trip per pass)."""
    lines = "".join(f"{commit}\n" for commit in sorted(commits)).encode("ascii")
    result = _no_fetch_git(
        top, env, lines, "rev-list", "--ignore-missing", "--missing=allow-any", *options,
        "--stdin", "--",
    )  # fmt: skip
    if result is None or result.returncode != 0:
        return None
    return set(result.stdout.decode("ascii", "replace").split())


# git's exit status for a usage error: an option this version lacks.
_USAGE = 129


def _worktrees(top: str, env: Mapping[str, str] | None, roots: Iterable[str]) -> set[str] | None:
    """The worktrees git still lists for the repository at ``top``, as real paths: one
    whose directory is missing (an unplugged disk) is gone only once ``git worktree
    remove`` or ``prune`` drops it. None when git cannot say now. A git that cannot list
    them at all counts every one of ``roots`` as listed: they stay where they are, and
    are not asked about again at every pass."""
    from thatch.frontend.project import git_result

    result = git_result(Path(top), env, "worktree", "list", "--porcelain", "-z")
    if result is not None and result.returncode == _USAGE:
        # git before 2.36 has no -z: one line per field, a path holding a newline unparsed.
        result = git_result(Path(top), env, "worktree", "list", "--porcelain")
        if result is not None and result.returncode == _USAGE:
            return set(roots)
        # A path git quotes there (a newline, a quote in it) is left out, not unquoted.
        lines = result.stdout.split(b"\n") if result is not None else []
        fields = [line for line in lines if not line.startswith(b'worktree "')]
    else:
        fields = result.stdout.split(b"\0") if result is not None else []
    if result is None or result.returncode != 0:
        return None
    return {
        os.path.realpath(field.decode("utf-8", "surrogateescape").removeprefix("worktree "))
        for field in fields
        if field.startswith(b"worktree ")
    }


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


@dataclass(frozen=True)
class DriftPass:
    """What a pass found (``drifted``'s answer) and whether the store has live anchors
    past the HYGIENE_ROWS it read: then it found at least that much, not all of it."""

    drifted: dict[str, Drift]
    unread: bool


def drifted(
    store: Store, name: str, check: AnchorCheck, budget: float = HYGIENE_BUDGET
) -> dict[str, Drift]:
    """The live memories of store ``name`` with an anchor whose code changed, by slug
    (``drift_pass``'s; of the first HYGIENE_ROWS anchors only)."""
    return drift_pass(store, name, check, budget).drifted


def drift_pass(
    store: Store, name: str, check: AnchorCheck, budget: float = HYGIENE_BUDGET
) -> DriftPass:
    """The live memories of store ``name`` with an anchor whose code changed, by slug:
    of its first HYGIENE_ROWS anchors (a pass reads no more, whatever the store's size),
    checked now within ``budget`` seconds (the first one always), the rest by their last
    stored verdict; then the live memories that depend on one of them, marked ``via`` its
    label as a recall marks them. Verdicts are stored when the database takes the write."""
    from thatch.frontend.store.anchor_queries import HYGIENE_ROWS

    # One row past the cap says whether the store has anchors this pass does not read.
    anchored = store.anchored_in(name, HYGIENE_ROWS + 1)
    unread = sum(map(len, anchored.values())) > HYGIENE_ROWS
    if unread:
        last = next(reversed(anchored))
        anchored[last].pop()
        if not anchored[last]:
            del anchored[last]
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
    return DriftPass({key[1]: drift for key, drift in [*own.items(), *inherited.items()]}, unread)
