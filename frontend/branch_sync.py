"""Branch memory that follows git (docs/database.md §branch-lifecycle).

At session start (``reminder``) and, when the refs' fingerprint changed, on a prompt
(``flush-tools``), the refs git lists now are compared with the snapshot thatch stored at
the last sync. A branch that scoped memories and is gone has them moved to the one new
branch at its tip whose reflog records a rename or copy of it, else promoted to
project-wide when its work is in the default branch (local or origin's), else archived
(``thatch restore-branch`` undoes that). A branch whose remote-tracking ref a fetch pruned
and whose tip is in origin's default branch (merged on the host) is promoted too, even if
its local ref is still there.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol

from thatch.common.environment import default_db_path, thatch_cache_dir
from thatch.frontend import git_refs
from thatch.frontend.project import current_branch

if TYPE_CHECKING:
    from thatch.frontend.store.branch_lifecycle import BranchChange, Restored
    from thatch.frontend.store.transactions import Transactions

__all__ = [
    "MAX_CHECKS",
    "SyncResult",
    "fingerprint_file",
    "prompt_sync",
    "restore_branch",
    "shown_branch",
    "sync_branches",
]

# Gone branches whose merge state one sync decides (each costs up to four git calls);
# the others keep their snapshot entry and are decided by the next syncs.
MAX_CHECKS = 16
# Snapshot rows for a deleted local branch whose origin copy still exists: its decision
# waits until that copy goes or the default branch moves (the host may merge it yet).
WAITING = "waiting:"
# The optional git hooks' events file is emptied past this size (when a sync starts), once
# the code anchors' pass has read it all; past the larger one, whatever it read (a pass
# that never runs must not let it grow; one that finds it cut re-checks every anchor).
EVENTS_KEPT_BYTES = 64 * 1024
EVENTS_MAX_BYTES = 1024 * 1024
# A branch name echoed back in a message is cut here: NAME may be anything typed (100 KB).
SHOWN_NAME_CHARS = 200


class HasTransactions(Protocol):
    """A memory ``Store`` (``frontend.store.memory_store.Store``)."""

    tx: Transactions


class SyncResult(NamedTuple):  # not a dataclass: the prompt hook imports this module
    changes: list[BranchChange]
    counts: dict[str, int]  # memories changed per branch


def sync_branches(
    store: HasTransactions,
    project: str,
    directory: Path,
    now_ms: int,
    env: Mapping[str, str] | None = None,
) -> SyncResult | None:
    """Compare git's refs with the stored snapshot and promote or archive the memories of
    gone branches; None when ``directory`` is not in a git repository or git failed (then
    nothing changes). The first sync of a repository only stores the snapshot."""
    common = git_refs.common_dir(Path(os.path.abspath(directory)))
    if common is None:
        return None
    refs = git_refs.read_refs(directory, env)
    if refs is None:
        return None
    from thatch.frontend.store.branch_lifecycle import BranchRecords

    records = BranchRecords(store.tx)
    if not records.present():  # a read-only file left unmigrated: nothing is synced
        return None
    repo = _repo_key(common)
    before = records.snapshot(project, repo)
    changes: list[BranchChange] = []
    kept: dict[str, str] = {}
    if before:
        checks = 0
        # Only a gone branch, or one whose remote-tracking ref went, needs a decision: the
        # usual sync (a commit moved a ref) reads no memory and asks git nothing more.
        candidates = _candidates(before, refs)
        live = records.live_branches(project, candidates) if candidates else []
        targets = git_refs.default_targets(refs, current_branch(directory, env)) if live else []
        moved = any(before.get(ref) != refs.commits.get(ref) for ref in targets)
        appeared = _appeared(before, refs) if live else {}
        for branch in live:
            local, remote = git_refs.HEADS + branch, f"refs/remotes/{git_refs.REMOTE}/{branch}"
            waiting = WAITING + local
            renamed = _renamed(appeared, before, refs, branch, common)
            if renamed is not None:
                changes.append(renamed)
                continue
            if waiting in before and not moved and _same(before, refs, remote):
                kept.update({local: before[local], waiting: before[local]})
                continue  # still waiting for its pushed copy, and nothing it waits on moved
            if checks >= MAX_CHECKS:
                kept.update({ref: before[ref] for ref in (local, remote, waiting) if ref in before})
                continue
            checks += 1
            try:
                change = _decide(directory, env, refs, before, targets, branch, local)
            except git_refs.GitUnanswered:
                # The refs were read from files, but git cannot be run: nothing is decided
                # (the rest is kept too), the next sync asks again.
                checks = MAX_CHECKS
                kept.update({ref: before[ref] for ref in (local, remote, waiting) if ref in before})
                continue
            if change is None and local not in refs.commits:
                kept.update({local: before[local], waiting: before[local]})
            elif change is not None:
                changes.append(change)
    counts = records.apply(project, repo, {**kept, **refs.commits}, changes, now_ms)
    return SyncResult(changes, counts)


def _repo_key(common: Path) -> str:
    """The snapshot's name for a repository: the realpath of its common dir, with any
    bytes that are not UTF-8 (SQLite text cannot hold them) written as ``\\xNN``."""
    return os.fsencode(os.path.realpath(common)).decode("utf-8", "backslashreplace")


def _same(before: Mapping[str, str], refs: git_refs.Refs, remote: str) -> bool:
    """Whether ``remote`` still exists at the commit the snapshot has."""
    return remote in refs.commits and before.get(remote) == refs.commits[remote]


def _appeared(before: Mapping[str, str], refs: git_refs.Refs) -> dict[str, list[str]]:
    """Local branches the snapshot did not have, by their commit."""
    found: dict[str, list[str]] = {}
    for ref, commit in sorted(refs.commits.items()):
        if ref.startswith(git_refs.HEADS) and ref not in before:
            found.setdefault(commit, []).append(ref[len(git_refs.HEADS) :])
    return found


def _renamed(
    appeared: Mapping[str, list[str]],
    before: Mapping[str, str],
    refs: git_refs.Refs,
    branch: str,
    common: Path,
) -> BranchChange | None:
    """A gone branch renamed (``git branch -m``, or copied with ``git branch -c`` then
    deleted): exactly one new local branch is at its last commit, and its reflog says it
    was renamed or copied from this one. A branch merely made at that commit (after a
    fast-forward merge, the next piece of work) carries nothing on."""
    local = git_refs.HEADS + branch
    if local in refs.commits:
        return None
    new = appeared.get(before[local], [])
    if len(new) != 1 or not _carried_on(common, new[0], local):
        return None
    from thatch.frontend.store.branch_lifecycle import RENAMED, BranchChange

    return BranchChange(branch, RENAMED, before[local], new[0])


# How much of a branch's reflog is read, from its end: a rename or copy appends its line
# to the history it carries, and the sync after it finds that line among the last.
_REFLOG_TAIL = 1 << 16


def _carried_on(common: Path, new: str, old_ref: str) -> bool:
    """Whether branch ``new``'s reflog records a rename or copy of ``old_ref`` (``Branch:
    renamed refs/heads/a to refs/heads/b``, ``Branch: copied …``) among its last lines.
    A file read, no git process; no reflog (core.logAllRefUpdates off): not known."""
    records = (f"Branch: renamed {old_ref} to ", f"Branch: copied {old_ref} to ")
    if (common / "reftable").is_dir():
        # A reftable repository keeps no log files: git says (one process, and only for
        # a branch gone with one new one at its tip).
        from thatch.frontend.project import git_result

        shown = git_result(common, None, "reflog", "show", "--format=%gs", "-n", "50",
                           f"{git_refs.HEADS}{new}", "--")  # fmt: skip
        if shown is None or shown.returncode != 0:
            return False
        messages = shown.stdout.decode("utf-8", "replace").splitlines()
        return any(message.startswith(records) for message in messages)
    from thatch.frontend.regular_files import open_regular

    try:
        with open_regular(common / "logs" / "refs" / "heads" / new) as handle:
            size = os.fstat(handle.fileno()).st_size
            handle.seek(max(0, size - _REFLOG_TAIL))
            tail = handle.read(_REFLOG_TAIL)
    except (OSError, ValueError):
        return False
    for line in tail.decode("utf-8", "replace").splitlines():
        if line.partition("\t")[2].startswith(records):
            return True
    return False


def _candidates(before: Mapping[str, str], refs: git_refs.Refs) -> list[str]:
    """Branches the snapshot had locally that are gone now, or whose origin ref is gone."""
    remotes = f"refs/remotes/{git_refs.REMOTE}/"
    found = set()
    for ref in before:
        if ref in refs.commits:
            continue
        if ref.startswith(WAITING):
            continue
        if ref.startswith(git_refs.HEADS):
            found.add(ref[len(git_refs.HEADS) :])
        elif ref.startswith(remotes) and git_refs.HEADS + ref[len(remotes) :] in before:
            found.add(ref[len(remotes) :])
    return sorted(found)


def _decide(
    directory: Path,
    env: Mapping[str, str] | None,
    refs: git_refs.Refs,
    before: Mapping[str, str],
    targets: list[str],
    branch: str,
    local: str,
) -> BranchChange | None:
    from thatch.frontend.store.branch_lifecycle import BranchChange

    if local in refs.commits:  # its remote-tracking ref was pruned by a fetch
        tip = refs.commits[local]
        if git_refs.merged_into(directory, tip, refs, targets, env):
            return BranchChange(branch, "promoted", tip)
        return None
    last = before[local]
    if git_refs.merged_into(directory, last, refs, targets, env):
        return BranchChange(branch, "promoted", last)
    if f"refs/remotes/{git_refs.REMOTE}/{branch}" in refs.commits:
        return None  # pushed: wait for the host to merge it (or the ref to go)
    return BranchChange(branch, "archived", last)


def trim_events(common: Path, env: Mapping[str, str]) -> None:
    """Empty the git hooks' events file once it is past ``EVENTS_KEPT_BYTES`` and this
    database's code-anchors pass has read all of it (the branch sync needs none of its
    lines: they only change the fingerprint), or past ``EVENTS_MAX_BYTES`` whatever."""
    path = common / git_refs.EVENTS_FILE
    try:
        size = path.stat().st_size
        if size <= EVENTS_KEPT_BYTES:
            return
        from thatch.frontend.anchors.events import CUT_LINE, read_to_end

        read = read_to_end(env, str(default_db_path(env)), common, size)
        if not read and size <= EVENTS_MAX_BYTES:
            return  # the session's hygiene pass reads them next; a later start trims
        os.truncate(path, 0)
        if not read:
            with open(path, "ab") as handle:
                handle.write(CUT_LINE)
    except OSError:
        pass  # no hooks, or not ours to write: nothing to trim


def fingerprint_file(env: Mapping[str, str], common: Path) -> Path:
    """Where the refs' fingerprint at the last sync is kept, per database and repository:
    a cache (a lost or stale file costs one sync, never a wrong answer)."""
    key = f"{default_db_path(env)}\n{os.path.realpath(common)}"
    digest = hashlib.sha256(key.encode("utf-8", "replace")).hexdigest()[:24]
    return thatch_cache_dir(env) / "branches" / digest


def note_fingerprint(path: Path, value: str) -> None:
    """Overwritten in place, not renamed over: ext4 writes a file renamed over another out
    at once (~5 ms a prompt under load). Every value has the same length and one small
    write is whole to other writers; a torn read only fails to match (one more sync)."""
    data = value.encode("ascii")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
        finally:
            os.close(fd)
    except OSError:
        pass  # a cache that cannot be written is none: the next prompt syncs again


def prompt_sync(
    project: str,
    directory: Path,
    env: Mapping[str, str],
    open_store: Callable[[], AbstractContextManager[HasTransactions | None]],
    now_ms: int,
) -> SyncResult | None:
    """The prompt hook's check: stat calls and one small file read while the refs are as
    at the last sync; a sync (``open_store`` for the database, None: none to sync) only
    after they changed."""
    common = git_refs.common_dir(Path(os.path.abspath(directory)))
    if common is None:
        return None
    value = git_refs.fingerprint(common)
    path = fingerprint_file(env, common)
    try:
        if path.read_text(encoding="ascii") == value:
            return None
    except (OSError, UnicodeDecodeError):
        pass
    with open_store() as store:
        if store is None:
            return None  # no database yet, or not migrated yet: the session start will
        result = sync_branches(store, project, directory, now_ms, env)
    if result is not None:
        note_fingerprint(path, value)
    return result


def session_sync(
    store: HasTransactions, project: str, directory: Path, env: Mapping[str, str], now_ms: int
) -> SyncResult | None:
    """The session-start sync: always (git is asked once per session), then the
    fingerprint is noted so the session's prompts stay on the stat-only path."""
    common = git_refs.common_dir(Path(os.path.abspath(directory)))
    if common is None:
        return None
    trim_events(common, env)
    value = git_refs.fingerprint(common)
    result = sync_branches(store, project, directory, now_ms, env)
    if result is not None:
        note_fingerprint(fingerprint_file(env, common), value)
    return result


def shown_branch(name: str) -> str:
    """``name`` quoted for a message (rule 6: names are data), its first
    ``SHOWN_NAME_CHARS`` characters only, with "…" when there are more."""
    from thatch.frontend.untrusted import quoted

    cut = name if len(name) <= SHOWN_NAME_CHARS else name[:SHOWN_NAME_CHARS] + "…"
    return quoted(cut)


class NothingToRestoreError(ValueError):
    """No memory of the branch was archived by a sync (or all were restored already)."""


def restore_branch(store: HasTransactions, project: str, branch: str, now_ms: int) -> Restored:
    """Unarchive what syncs archived for ``branch`` in ``project``: how many memories, and
    how many were left as written since. Raises NothingToRestoreError naming the branches
    that can be restored."""
    from thatch.frontend.store.branch_lifecycle import BranchRecords

    records = BranchRecords(store.tx)
    done = records.restore(project, branch, now_ms)
    if done.restored:
        return done
    from thatch.frontend.untrusted import quoted, token

    # Branch and store names come from agents' memories: framed as data (rule 6).
    if done.left:
        one = done.left == 1
        noun, rest = ("memory", "stays as it is") if one else ("memories", "stay as they are")
        raise NothingToRestoreError(
            f"Nothing restored: the {done.left} {noun} of branch {shown_branch(branch)} in store "
            f"{quoted(project)} archived when the branch was deleted changed since "
            f"(unarchived, rescoped or written again) and {rest}."
        )
    others = records.archived_branches(project)
    hint = f" Archived branches: {', '.join(map(token, others))}." if others else ""
    raise NothingToRestoreError(
        f"No memories of branch {shown_branch(branch)} in store {quoted(project)} were archived "
        f"when the branch was deleted.{hint}"
    )
