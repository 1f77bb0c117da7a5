"""Checking anchors cheaply at recall (docs/tools.md §code-anchors).

Per anchor: ``stat`` first (same mtime and size as at save: unchanged, nothing read),
then the file's blob id computed in process (the same: unchanged), then the span's hash
(the span unchanged, even moved within the file: unchanged). A file that is gone from a
git checkout that still exists is a change; a file gone outside git, or unreadable, is
"unverifiable", never "changed".

``AnchorCheck`` owns the process's cache of file facts, keyed by (path, mtime, size), so
a long-lived server reads a file once per version (256 files, 32 MiB at most); each call
checks at most ``MAX_FILES`` files and stops at its deadline (~30 ms), the rest left
unverified. The search for a line span that moved stops there too, even in the first
file: hashing every window of a large span in a large file takes seconds.
"""

from __future__ import annotations

import math
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from thatch.frontend.anchors.span import (
    OutOfTime,
    blob_id,
    find_lines,
    find_window,
    lines_of,
    locate_symbol,
    span_hash,
)
from thatch.frontend.regular_files import open_regular

if TYPE_CHECKING:
    from thatch.frontend.store.anchor_queries import Anchor, Key

__all__ = [
    "CHANGED",
    "FRESH",
    "GONE",
    "UNVERIFIABLE",
    "AnchorCheck",
    "Drift",
    "anchor_file",
    "database_files",
    "depends_on",
    "inherit",
]

FRESH = "fresh"
CHANGED = "changed"
# A change too, of a kind a rename explains: the file is gone from a checkout that exists.
GONE = "gone"
UNVERIFIABLE = "unverifiable"

BUDGET_SECONDS = 0.030
MAX_FILES = 32
# Past the budget, anchors whose stored verdict is ``changed`` are still marked while
# their file's stat is the one that verdict saw: one stat each, at most this many.
MAX_STORED = 256
CACHE_FILES = 256
# The cache's bound in bytes of file text kept (their lines): a cache costs time, never
# memory without bound.
CACHE_BYTES = 32 * 1024 * 1024
MAX_READ_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class Drift:
    """Why a recalled memory is marked: the anchored paths whose code changed, and the
    memory it depends on when the change is that one's (None: its own)."""

    paths: tuple[str, ...]
    via: str | None = None  # the label of the memory it supplements or depends on
    gone: bool = False  # one of the files is gone from its checkout (renamed?)


class _Facts:
    __slots__ = ("blob", "lines", "size")

    def __init__(self, blob: str, lines: list[str] | None, size: int) -> None:
        self.blob = blob
        self.lines = lines
        self.size = size


def database_files(path: object) -> frozenset[str]:
    """The database file at ``path`` and its sidecars, resolved: never opened as code.
    Closing any descriptor of a file drops every POSIX lock the process holds on it, so
    a process that reads its own database as an anchor would corrupt it (rule of
    docs/architecture.md §the-database-core)."""
    if not isinstance(path, str | os.PathLike):
        return frozenset()
    base = os.path.realpath(path)
    return frozenset(base + suffix for suffix in ("", "-wal", "-shm", "-journal"))


def anchor_file(anchor: Anchor) -> str:
    return os.path.join(anchor.root, anchor.path) if anchor.root else anchor.path


class AnchorQuerySource(Protocol):
    """What ``AnchorCheck.drift`` reads from the store (``Store`` provides it)."""

    def anchors_of(self, keys: Iterable[Key]) -> dict[Key, list[Anchor]]: ...
    def supplements_of(self, keys: Iterable[Key]) -> dict[Key, list[tuple[str, str]]]: ...
    def related_of(self, keys: Iterable[Key]) -> dict[Key, list[tuple[str, str]]]: ...


class AnchorCheck:
    """Verdicts on anchors, with the file-facts cache this process keeps."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, never_open: Iterable[str] = ()
    ) -> None:
        self._clock = clock
        self._never_open = frozenset(never_open)
        self._facts: OrderedDict[tuple[str, int, int], _Facts] = OrderedDict()
        self._bytes = 0

    def status(self, anchor: Anchor) -> str:
        """``fresh``, ``changed`` or ``unverifiable`` for one anchor, now."""
        return self._verdict(anchor)[0]

    def _verdict(
        self,
        anchor: Anchor,
        deadline: float = math.inf,
        saved: SavedLines | None = None,
        resolved: dict[str, str] | None = None,
    ) -> tuple[str, os.stat_result | None]:
        """The status and the file's stat it was reached on (None: no stat). The stat is
        taken before the file is read, so a later write changes it. A span searched for
        past ``deadline`` (by ``self._clock``) has the verdict a pass stored on the file as
        it is, else is unverifiable. ``resolved``: the paths resolved so far in this pass.
        """
        path = anchor_file(anchor)
        if self._never_opened(path, resolved):
            return UNVERIFIABLE, None
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            gone_from_git = bool(anchor.root) and os.path.isdir(anchor.root)
            return (GONE if gone_from_git else UNVERIFIABLE), None
        except OSError:
            return UNVERIFIABLE, None
        if stat.st_mtime_ns == anchor.mtime_ns and stat.st_size == anchor.size:
            return FRESH, stat
        facts = self._read(path, stat.st_mtime_ns, stat.st_size)
        if facts is None:
            return UNVERIFIABLE, stat
        if facts.blob == anchor.blob:
            return FRESH, stat
        if anchor.span_hash is None:
            return CHANGED, stat
        if facts.lines is None:
            return UNVERIFIABLE, stat
        try:
            same = _span_same(facts.lines, anchor, lambda: self._clock() > deadline, saved)
        except OutOfTime:
            return self._stored(anchor) or UNVERIFIABLE, stat
        return (FRESH if same else CHANGED), stat

    def _never_opened(self, path: str, resolved: dict[str, str] | None) -> bool:
        # A pass resolves each file once: thousands of anchors share a few files, and a
        # resolution is a system call per directory of the path.
        if resolved is None:
            return os.path.realpath(path) in self._never_open
        if path not in resolved:
            resolved[path] = os.path.realpath(path)
        return resolved[path] in self._never_open

    def _stored(self, anchor: Anchor) -> str | None:
        """``changed`` when a pass stored that verdict on the file's stat as it is now
        (a re-save replaces the row, so a stored verdict is always on what was saved);
        None: unknown."""
        if anchor.status != CHANGED or anchor.checked_mtime_ns is None:
            return None
        path = anchor_file(anchor)
        if os.path.realpath(path) in self._never_open:
            return None
        try:
            stat = os.stat(path)
        except OSError:
            return None
        same = (stat.st_mtime_ns, stat.st_size) == (anchor.checked_mtime_ns, anchor.checked_size)
        return CHANGED if same else None

    def _read(self, path: str, mtime_ns: int, size: int) -> _Facts | None:
        key = (path, mtime_ns, size)
        facts = self._facts.get(key)
        if facts is not None:
            self._facts.move_to_end(key)
            return facts
        try:
            with open_regular(path) as handle:
                content = handle.read(MAX_READ_BYTES + 1)
        except OSError:
            return None
        small = len(content) <= MAX_READ_BYTES
        if not small:
            return None  # the blob id would need the whole file: not within a recall
        facts = _Facts(blob_id(content), lines_of(content), len(content))
        self._facts[key] = facts
        self._bytes += facts.size
        while len(self._facts) > CACHE_FILES or self._bytes > CACHE_BYTES:
            self._bytes -= self._facts.popitem(last=False)[1].size
        return facts

    def drift(
        self,
        source: AnchorQuerySource,
        keys: Sequence[Key],
        budget: float = BUDGET_SECONDS,
        gone_checkouts: set[str] | None = None,
    ) -> dict[Key, Drift]:
        """The memories among ``keys`` whose anchored code changed, or that depend on
        one whose code did (dedup verdict "supplement", or ``related`` at save), within
        ``budget`` seconds and ``MAX_FILES`` files; an anchor not reached is marked by its
        stored verdict while that still holds (``_stored``), else left unmarked. Into
        ``gone_checkouts``, when given, the roots of the anchors checked unverifiable
        because their checkout's directory is gone: a pass off the prompt path may find
        that a checkout of the same repository takes them over (``take_over_gone``)."""
        self._never_open |= database_files(getattr(source, "path", None))
        supplements = depends_on(source, keys)
        partners = {
            (store, slug): label
            for (store, _), pairs in supplements.items()
            for slug, label in pairs
        }
        anchors = source.anchors_of([*keys, *partners])
        # The budget is the files' (the queries above are the database's), and the first
        # file is always checked: a stalled process still marks what it can.
        deadline = self._clock() + budget
        changed: dict[Key, Drift] = {}
        files = stored = 0
        for key in [*keys, *partners]:
            paths: list[str] = []
            gone = False
            for anchor in anchors.get(key, []):
                verdict: str | None
                if files >= MAX_FILES or (files and self._clock() > deadline):
                    files = MAX_FILES  # past the deadline once: past it for the rest
                    if stored >= MAX_STORED:
                        break
                    stored += 1
                    verdict = self._stored(anchor)
                else:
                    files += 1
                    verdict = self._verdict(anchor, deadline)[0]
                    if gone_checkouts is not None and _checkout_gone(verdict, anchor):
                        gone_checkouts.add(anchor.root)
                if verdict in (CHANGED, GONE) and anchor.path not in paths:
                    paths.append(anchor.path)
                    gone = gone or verdict == GONE
            if paths:
                changed[key] = Drift(tuple(paths), gone=gone)
        return inherit(keys, supplements, changed)

    def recheck(
        self,
        anchors: Iterable[Anchor],
        budget: float,
        never_open: Iterable[str] = (),
        saved: SavedLines | None = None,
    ) -> list[tuple[Anchor, str]]:
        """Verdicts for as many of ``anchors`` as ``budget`` seconds allow (hygiene);
        ``saved`` the saved lines of a span not at its place, when they can be had."""
        deadline = self._clock() + budget
        self._never_open |= frozenset(never_open)
        verdicts: list[tuple[Anchor, str]] = []
        resolved: dict[str, str] = {}
        for anchor in anchors:
            if verdicts and self._clock() > deadline:
                break
            verdict, stat = self._verdict(anchor, deadline, saved, resolved)
            # Only a ``changed`` verdict is ever read back (``_stored``): the others keep
            # no stat, so a pass over unchanged code writes nothing.
            seen: tuple[int | None, int | None] = (None, None)
            if verdict == CHANGED and stat is not None:
                seen = (stat.st_mtime_ns, stat.st_size)
            if seen != (anchor.checked_mtime_ns, anchor.checked_size):
                # Carried to the store with the verdict (set_anchor_status).
                anchor = replace(anchor, checked_mtime_ns=seen[0], checked_size=seen[1])
            verdicts.append((anchor, CHANGED if verdict == GONE else verdict))
        return verdicts


def _checkout_gone(verdict: str, anchor: Anchor) -> bool:
    # Asked of unverifiable anchors only: one more stat, on a path already missing. An
    # anchor with no commit (saved before the first) no pass can move: none is asked for.
    if verdict != UNVERIFIABLE or not anchor.root or anchor.commit_id is None:
        return False
    from thatch.frontend.git_refs import is_object_id

    return is_object_id(anchor.commit_id) and not os.path.isdir(anchor.root)


def depends_on(source: AnchorQuerySource, keys: Iterable[Key]) -> dict[Key, list[tuple[str, str]]]:
    """Per memory, the (slug, label) of those it depends on, in the order a marker is
    inherited: those it supplements (either order of the verdict's pair), then its
    ``related``, each by slug."""
    keys = list(keys)
    partners = source.supplements_of(keys)
    for key, pairs in source.related_of(keys).items():
        known = partners.setdefault(key, [])
        known.extend(pair for pair in pairs if pair not in known)
    return partners


def inherit(
    keys: Iterable[Key],
    partners: Mapping[Key, Sequence[tuple[str, str]]],
    changed: Mapping[Key, Drift],
) -> dict[Key, Drift]:
    """The drift of each of ``keys``: its own, else that of the first memory it depends
    on whose code changed (``via`` its label). Recall, the hygiene report and the
    extraction payload all mark through this one rule."""
    found: dict[Key, Drift] = {}
    for key in keys:
        if key in changed:
            found[key] = changed[key]
            continue
        for slug, label in partners.get(key, []):
            partner = (key[0], slug)
            if partner in changed and changed[partner].via is None:
                found[key] = Drift(changed[partner].paths, label, changed[partner].gone)
                break
    return found


def _span_same(
    lines: list[str],
    anchor: Anchor,
    out_of_time: Callable[[], bool],
    saved: SavedLines | None = None,
) -> bool:
    """Whether the anchor's span is in ``lines`` as saved (OutOfTime: a line span searched
    for until ``out_of_time``). ``saved``, when it has the span's saved lines, makes the
    search for a moved span a file's length (``find_lines``)."""
    if anchor.symbol is not None:
        found = locate_symbol(lines, anchor.symbol)
        return found is not None and span_hash(lines[found[0] : found[1] + 1]) == anchor.span_hash
    if anchor.line_start is None or anchor.line_end is None or anchor.span_hash is None:
        return False
    size = anchor.line_end - anchor.line_start + 1
    near = anchor.line_start - 1
    here = lines[near : anchor.line_end]
    if len(here) == size and span_hash(here) == anchor.span_hash:
        return True
    if saved is None:
        return find_window(lines, size, anchor.span_hash, near, out_of_time) is not None
    # Off the prompt path: the places near the old lines first, in process (a span moved
    # by the lines edited above it, the common case; bounded work, a few milliseconds, so
    # not cut by the deadline); then the saved lines from git, a file's length to look
    # for; every window only without them.
    nearby = max(1, NEAR_LINES_HASHED // size)
    if find_window(lines, size, anchor.span_hash, near, limit=nearby) is not None:
        return True
    before = saved(anchor)
    if before is not None and len(before) == size and span_hash(before) == anchor.span_hash:
        return find_lines(lines, before, near, out_of_time) is not None
    return find_window(lines, size, anchor.span_hash, near, out_of_time) is not None


# How many lines the nearby windows hash before a pass asks git for the saved lines.
NEAR_LINES_HASHED = 100_000
# The saved lines of an anchor's span, or None: not to be had (``GitSavedLines``).
SavedLines = Callable[["Anchor"], "list[str] | None"]


class GitSavedLines:
    """The spans' lines as saved, from the saved files' blobs in the anchors' repositories
    (committed or staged since), for one pass off the prompt path: each blob read once
    (``git cat-file blob``, one process), however many of its spans are looked for."""

    def __init__(self) -> None:
        self._files: dict[tuple[str, str], list[str] | None] = {}
        self.reads = 0

    def __call__(self, anchor: Anchor) -> list[str] | None:
        if anchor.line_start is None or anchor.line_end is None or not anchor.root:
            return None
        from thatch.frontend.git_refs import is_object_id

        if not is_object_id(anchor.blob) or (anchor.size or 0) > MAX_READ_BYTES:
            return None  # too big to read within a pass (its size is the saved file's)
        key = (anchor.root, anchor.blob)
        if key not in self._files:
            self._files[key] = self._read(*key)
        lines = self._files[key]
        return None if lines is None else lines[anchor.line_start - 1 : anchor.line_end]

    def _read(self, root: str, blob: str) -> list[str] | None:
        from pathlib import Path

        from thatch.frontend.project import git_result

        self.reads += 1
        result = git_result(Path(root), None, "cat-file", "blob", blob)
        if result is None or result.returncode != 0:
            return None
        return lines_of(result.stdout)
