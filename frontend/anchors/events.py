"""Git events re-check anchors off the prompt path (docs/tools.md §code-anchors).

The optional hooks (``thatch setup --git-hooks``) append a line per checkout, merge or
rewrite (pull, rebase, amend) to ``thatch-events`` in the common git dir:
``<hook> <old commit|-> <new commit|-> <worktree>``. At session start (the hygiene pass)
``consume_git_events`` reads the lines written since its last offset, asks git which
files changed between the recorded commits (``git diff --name-only``; ``-`` new: the
worktree's HEAD now), marks the anchors on those files ``recheck`` and re-checks them
as a recall would (stat, blob id, span hash), storing each verdict: a later recall or
nudge finds it without asking git. A commit git does not know (a clone's first
checkout, a pruned one) or a missing one marks every anchor of that worktree.

The file is written by anyone who can write the repository: a line that is not exactly
one of those three shapes, names a worktree of another repository, or is longer than
``MAX_LINE`` is ignored, silently. Without the hooks nothing happens here and a recall's
stat check still sees every change.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from thatch.frontend.anchors.check import AnchorCheck, database_files
from thatch.frontend.errors import StoreError
from thatch.frontend.regular_files import open_regular

if TYPE_CHECKING:
    from thatch.frontend.store.anchor_queries import Anchor
    from thatch.frontend.store.memory_store import Store

__all__ = [
    "CUT_LINE",
    "EVENT_HOOKS",
    "RECHECK",
    "GitEvent",
    "consume_git_events",
    "consume_quietly",
    "parse_events",
    "read_to_end",
]

EVENT_HOOKS = ("post-checkout", "post-merge", "post-rewrite")
# The status of an anchor whose file git changed and that no pass has re-checked yet.
RECHECK = "recheck"
MAX_LINE = 4096
# Read per pass; the rest waits for the next one (the hooks' file is trimmed at 64 KiB).
MAX_READ = 1024 * 1024
# git processes per pass: past them, a worktree's anchors are all re-checked instead.
MAX_DIFFS = 4
# Distinct worktree paths looked at per pass (a repository has a few; the rest: noise).
MAX_WORKTREES = 32
# How many anchors a pass marks and re-checks at most, and for how long it checks files.
MAX_ANCHORS = 5000
# Within the session start's hygiene pass (answered within 0.6 s by thatch mcp).
BUDGET_SECONDS = 0.1
# The bytes before the offset, kept with it: a file truncated and written again since
# (the session start trims it) no longer ends them there, and is read from its start.
_TAIL = 64
# Written where the session start cut lines no pass had read: the next pass re-checks its
# checkout (an offset of 0, or a short one, cannot tell a file emptied since by itself).
# Anyone could write it: it costs a budgeted re-check, nothing more.
CUT_LINE = b"cut\n"
_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


@dataclass(frozen=True)
class GitEvent:
    hook: str
    old: str | None  # None: unknown, every anchor of the worktree is re-checked
    new: str | None  # None: the worktree's HEAD when the event is read
    worktree: str


def _commit(field: str) -> str | None:
    """A commit id; None for ``-`` or git's all-zero id (no commit); ValueError: not one."""
    if field == "-":
        return None
    if not _COMMIT.fullmatch(field):
        raise ValueError(field)
    return field if field.strip("0") else None


def parse_events(data: bytes) -> list[GitEvent]:
    """The well-formed event lines of ``data`` (complete lines only); others ignored."""
    events = []
    for raw in data.split(b"\n"):
        if len(raw) > MAX_LINE:
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        fields = line.split(" ", 3)
        if len(fields) != 4 or fields[0] not in EVENT_HOOKS:
            continue
        hook, old_field, new_field, worktree = fields
        try:
            old, new = _commit(old_field), _commit(new_field)
        except ValueError:
            continue
        if not os.path.isabs(worktree) or any(ord(c) < 32 or c == "\x7f" for c in worktree):
            continue
        events.append(GitEvent(hook, old, new, worktree))
    return events


def _offset_file(env: Mapping[str, str], database: str, common: Path) -> Path:
    """Where this database's offset in this repository's events file is kept: a cache (a
    lost file re-reads the events: re-checking is idempotent)."""
    from thatch.common.environment import thatch_cache_dir

    key = f"{os.path.realpath(database)}\n{os.path.realpath(common)}"
    digest = hashlib.sha256(key.encode("utf-8", "replace")).hexdigest()[:24]
    return thatch_cache_dir(env) / "anchor-events" / digest


def _tail(handle: BinaryIO, offset: int) -> str:
    start = max(0, offset - _TAIL)
    handle.seek(start)
    return hashlib.sha256(handle.read(offset - start)).hexdigest()


def _noted_offset(handle: BinaryIO, marker: Path, size: int) -> tuple[int, bool]:
    """(where to read from, whether events noted as read were since cut away)."""
    try:
        noted, tail = marker.read_text(encoding="ascii").split(" ", 1)
        offset = int(noted)
    except (OSError, ValueError, UnicodeDecodeError):
        return 0, False
    if offset < 0 or offset > size or _tail(handle, offset) != tail:
        return 0, True
    return offset, False


def _read_new(path: Path, marker: Path) -> tuple[bytes, int, str, bool] | None:
    """(complete new lines, the offset after them, its tail, whether the file was cut
    since the last pass) or None: no file to read."""
    try:
        with open_regular(path) as handle:
            offset, cut = _noted_offset(handle, marker, os.fstat(handle.fileno()).st_size)
            handle.seek(offset)
            chunk = handle.read(MAX_READ)
            end = chunk.rfind(b"\n")
            # No line ends in a whole read: one garbage line, skipped; in a shorter read a
            # line may be being written, left for the next pass.
            used = end + 1 if end >= 0 else (len(chunk) if len(chunk) >= MAX_READ else 0)
            return chunk[:used], offset + used, _tail(handle, offset + used), cut
    except OSError:
        return None


def read_to_end(env: Mapping[str, str], database: str, common: Path, size: int) -> bool:
    """Whether this database's pass has read the events file through its ``size`` bytes
    (its offset there, and the bytes before it unchanged): only then may the session start
    trim it without losing lines no pass has read."""
    marker = _offset_file(env, database, common)
    if not marker.exists():
        return False  # no pass yet: every line is still to be read
    from thatch.frontend.git_refs import EVENTS_FILE

    try:
        with open_regular(common / EVENTS_FILE) as handle:
            offset, cut = _noted_offset(handle, marker, size)
    except OSError:
        return False
    return not cut and offset == size


def _note(marker: Path, offset: int, tail: str) -> None:
    marker.parent.mkdir(parents=True, exist_ok=True)
    temporary = marker.with_name(f"{marker.name}.{os.getpid()}.tmp")
    temporary.write_text(f"{offset} {tail}", encoding="ascii")
    os.replace(temporary, marker)


def _changed_files(
    root: str, events: list[GitEvent], env: Mapping[str, str], diffs: list[int]
) -> set[str] | None:
    """The files (relative to ``root``) git changed across ``events``; None: all of them."""
    from thatch.frontend.project import git_result

    pairs = {(event.old, event.new or "HEAD") for event in events}
    if any(old is None for old, _ in pairs):
        return None
    changed: set[str] = set()
    for old, new in sorted(pairs, key=str):
        if old == new:
            continue  # a file checkout, or a branch made at HEAD: no commit changed
        if diffs[0] >= MAX_DIFFS:
            return None
        diffs[0] += 1
        assert old is not None
        # Both revisions (checked hex, or HEAD) before ``--``: never options, never paths.
        result = git_result(
            Path(root), env, "diff", "--name-only", "-z", "--no-renames", old, new, "--"
        )
        if result is None or result.returncode != 0:
            return None
        names = result.stdout.decode("utf-8", "surrogateescape").split("\0")
        changed.update(name for name in names if name)
    return changed


def _worktree_root(worktree: str, common: Path) -> str | None:
    """``worktree`` resolved, when it is a checkout of the repository owning ``common``."""
    from thatch.frontend.git_refs import common_dir

    root = os.path.realpath(worktree)
    if not os.path.isdir(root):
        return None
    found = common_dir(Path(root))
    if found is None or os.path.realpath(found) != os.path.realpath(common):
        return None
    # The checkout's own top level, not a directory inside it.
    if not os.path.exists(os.path.join(root, ".git")):
        return None
    return root


def consume_git_events(
    store: Store,
    directory: Path,
    env: Mapping[str, str] | None = None,
    check: AnchorCheck | None = None,
) -> int:
    """Read the repository's new git events, mark the anchors on the files they changed
    and re-check them within ``BUDGET_SECONDS``, storing the verdicts; the anchors
    re-checked. The offset moves once the marks are stored (a refused write: the events
    are read again next time)."""
    from thatch.frontend.git_refs import EVENTS_FILE, common_dir
    from thatch.frontend.project import checkout_git_dir

    env = os.environ if env is None else env
    common = common_dir(Path(os.path.abspath(directory)))
    if common is None:
        return 0
    database = str(getattr(store, "path", "") or "")
    marker = _offset_file(env, database or "-", common)
    read = _read_new(common / EVENTS_FILE, marker)
    if read is None:
        return 0
    data, offset, tail, cut = read
    cut = cut or CUT_LINE[:-1] in data.split(b"\n")
    found = parse_events(data)
    checkout = checkout_git_dir(Path(os.path.abspath(directory)))
    if cut and checkout is not None:
        # Trimmed (the session start keeps it small) before this pass read it: what the
        # lost lines said is unknown, so this checkout's anchors are all re-checked.
        # (Another checkout's pass finds the cut by its own offset or the cut line.)
        found.append(GitEvent("post-checkout", None, None, str(checkout[0])))
    by_root: dict[str, list[GitEvent]] = {}
    roots: dict[str, str | None] = {}
    for event in found:
        if event.worktree not in roots and len(roots) < MAX_WORKTREES:
            roots[event.worktree] = _worktree_root(event.worktree, common)
        root = roots.get(event.worktree)
        if root is not None:
            by_root.setdefault(root, []).append(event)
    diffs = [0]
    marked: list[Anchor] = []
    for root, events in sorted(by_root.items()):
        files = _changed_files(root, events, env, diffs)
        anchors = store.anchors_under(root, MAX_ANCHORS)
        marked += [a for a in anchors if files is None or a.path in files][
            : MAX_ANCHORS - len(marked)
        ]
    # Marked first, so that anchors the budget leaves unchecked say so until a later pass
    # (the hygiene pass re-checks every anchor of the project's store).
    store.set_anchor_status([(a, RECHECK) for a in marked if a.status != RECHECK])
    with contextlib.suppress(OSError):
        _note(marker, offset, tail)
    if not marked:
        return 0
    check = check or AnchorCheck()
    verdicts = check.recheck(marked, BUDGET_SECONDS, never_open=database_files(database))
    store.set_anchor_status(verdicts)
    return len(verdicts)


def consume_quietly(store: object, directory: Path, env: Mapping[str, str] | None) -> None:
    """``consume_git_events`` for the hygiene pass: a database refusing the write, or one
    without the anchors' table, leaves the events for the next pass."""
    from thatch.frontend.store.memory_store import Store

    if isinstance(store, Store):
        with contextlib.suppress(sqlite3.Error, StoreError, OSError):
            consume_git_events(store, directory, env)
