"""The hygiene report: what in a store needs tending (docs/hooks.md §reminder, docs/database.md
§hygiene-queries).

Thatch never deletes anything for hygiene; the report only names counts, and the
session-start reminder asks the agent to tend the store after the user's request.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from thatch.frontend.untrusted import inline, quoted, token

if TYPE_CHECKING:
    from thatch.frontend.anchors.check import Drift
    from thatch.frontend.anchors.recheck import DriftPass
    from thatch.frontend.store.duplicates import DuplicateSummary

__all__ = [
    "COUNTED_UP_TO",
    "GLOBAL_STORE",
    "AnchorRefresh",
    "Hygiene",
    "HygieneQueries",
    "StoreHygiene",
    "hygiene",
    "hygiene_report",
]

GLOBAL_STORE = "global"
# The stale, other-model, pending and conflict counts the session start and the UI show
# stop one row past this, then say "more than 10000": each count reads every index entry
# it counts (8-25 ms each at 100k memories, at every session start). A store of
# the spec's 5,000 memories all of another model (after a model switch) still reads
# exactly. ``thatch hygiene`` counts exactly.
COUNTED_UP_TO = 10_000
# Conflict versions ``thatch hygiene`` names (the report names the first).
CONFLICTS_NAMED = 50
# Deleted branches the report names: it goes before the agent at every session start, and
# a store can hold hundreds (`thatch hygiene --json` lists them all).
NAMED_BRANCHES = 3


class HygieneQueries(Protocol):
    """The store queries of docs/database.md §hygiene-queries (``frontend.store.memory_store.Store``
    provides them)."""

    def stale_count(
        self, store: str, now: datetime | None = None, *, up_to: int | None = None
    ) -> int: ...
    def branches_in_store(self, store: str) -> list[str]: ...
    def live_counts_on(self, store: str, branches: Sequence[str]) -> dict[str, int]: ...
    def duplicate_summary(
        self, store: str, threshold: float = ..., *, up_to: int | None = None
    ) -> DuplicateSummary: ...
    def model_mismatch_count(
        self, store: str, active_model: str, *, up_to: int | None = None
    ) -> int: ...
    def pending_count(self, store: str, *, up_to: int | None = None) -> int: ...


def _plural(n: int, one: str, many: str, more: bool = False) -> str:
    """``<n> <noun>``; ``more``: the count stopped at n, so ``more than <n> <many>``."""
    if more:
        return f"more than {n} {many}"
    return f"{n} {one if n == 1 else many}"


def _capped(count: int, up_to: int | None) -> tuple[int, bool]:
    """A count taken with ``up_to`` (past it, it reads ``up_to + 1``): (count, more)."""
    if up_to is None or count <= up_to:
        return count, False
    return up_to, True


@dataclass(frozen=True)
class AnchorRefresh:
    """How a hygiene pass brings the code anchors up to date. A page counting every
    store takes the git events and follows the renames once (they cover every store's
    anchors) and gives the stores one re-check budget between them."""

    renames: bool = True  # the git hooks' events consumed, then renames followed
    budget: float | None = None  # seconds re-checking files; None: recheck.HYGIENE_BUDGET


@dataclass(frozen=True)
class StoreHygiene:
    """Counts for one store; ``orphaned_branches`` only lists deleted branches that still
    have live memories."""

    store: str
    duplicates: int = 0  # memories with an unreviewed duplicate candidate
    duplicates_more: bool = False  # more than ``duplicates`` (counting stopped there)
    stale: int = 0
    orphaned_branches: tuple[str, ...] = ()
    orphaned: int = 0
    other_model: int = 0
    pending: int = 0
    active_model: str = ""
    # More than ``stale``, ``other_model``, ``pending`` or ``conflicts``: counting stopped
    # there (hygiene's ``up_to``), as for ``duplicates_more``.
    stale_more: bool = False
    other_model_more: bool = False
    pending_more: bool = False
    # Of the live embedded memories, how many were compared with the store so far: until
    # all are, ``duplicates`` counts only what is known (the report says so). Counted up to
    # hygiene's ``up_to``: with all checked, 0 of 0 (not counted); else more than
    # ``duplicates_total`` embedded memories (``_total_more``), more than ``total -
    # checked`` of them unchecked (``_unchecked_more``), as ``DuplicateSummary`` says.
    duplicates_checked: int = 0
    duplicates_total: int = 0
    duplicates_total_more: bool = False
    duplicates_unchecked_more: bool = False
    # Memories whose anchored code changed since saved, or that depend on one whose code
    # did (docs/tools.md §code-anchors): slug → the changed paths (``via`` its label).
    drifted: Mapping[str, Drift] = field(default_factory=dict)
    # The store has live anchors past those a pass reads (anchor_queries.HYGIENE_ROWS):
    # ``drifted`` is what the first ones show, at least that many.
    anchors_unread: bool = False
    # Second versions team sync kept of concurrently edited memories (docs/team.md
    # §conflicts): their count and the first ones by label, (label, original's label).
    conflicts: int = 0
    conflicts_named: tuple[tuple[str, str], ...] = ()
    conflicts_more: bool = False

    def conflict_part(self) -> str | None:
        if not self.conflicts:
            return None
        first = ""
        if self.conflicts_named:
            label, original = self.conflicts_named[0]
            first = quoted(label) + (f" of {quoted(original)}" if original else "")
            if self.conflicts_more:
                first += " and others"
            elif self.conflicts > 1:
                first += f" and {self.conflicts - 1} more"
            first += "; "
        return (
            _plural(self.conflicts, "conflict version", "conflict versions", self.conflicts_more)
            + f" from team sync ({first}merge each into its original, then forget it)"
        )

    def duplicate_progress(self) -> str:
        """``<checked> of <total> checked``; past the cap, how many are not checked yet."""
        from thatch.frontend.store.duplicates import DuplicateProgress
        from thatch.frontend.tools.formatting import check_progress

        return check_progress(
            DuplicateProgress(
                self.duplicates_checked,
                self.duplicates_total,
                self.duplicates_total_more,
                self.duplicates_unchecked_more,
            )
        )

    def model_parts(self) -> list[str]:
        parts = []
        if self.other_model:
            parts.append(
                _plural(self.other_model, "memory", "memories", self.other_model_more)
                + f" embedded with another model than {inline(self.active_model)}"
            )
        if self.pending:
            parts.append(
                _plural(self.pending, "memory", "memories", self.pending_more) + " not embedded yet"
            )
        return parts

    def parts(self) -> list[str]:
        parts = []
        counting = self.duplicates_checked < self.duplicates_total
        if self.duplicates:
            parts.append(
                _plural(self.duplicates, "memory", "memories", self.duplicates_more)
                + " with duplicate candidates pending review"
                + (" so far" if counting else "")
            )
        if counting:
            parts.append(f"duplicates: counting ({self.duplicate_progress()})")
        if self.stale:
            parts.append(
                _plural(self.stale, "memory", "memories", self.stale_more)
                + " neither updated nor recalled in 90+ days"
            )
        if self.orphaned:
            named = list(map(token, self.orphaned_branches[:NAMED_BRANCHES]))
            if len(self.orphaned_branches) > NAMED_BRANCHES:
                named.append(f"and {len(self.orphaned_branches) - NAMED_BRANCHES} more")
            parts.append(
                _plural(self.orphaned, "memory", "memories")
                + f" scoped to deleted branches ({', '.join(named)})"
            )
        if self.drifted:
            via = sum(1 for drift in self.drifted.values() if drift.via is not None)
            inherited = ""
            if via:
                whose = "a memory it depends on" if via == 1 else "memories they depend on"
                inherited = f"{via} via {whose}; "
            parts.append(
                ("at least " if self.anchors_unread else "")
                + _plural(len(self.drifted), "memory", "memories")
                + f" whose code changed since saved ({inherited}recall them, check, update"
                " or forget)"
            )
            if self.anchors_unread:
                # Only beside a finding: alone it would say the same, with nothing to do,
                # at every session start of a store that big.
                from thatch.frontend.store.anchor_queries import HYGIENE_ROWS

                parts.append(f"code anchors past the first {HYGIENE_ROWS} not checked")
        conflict = self.conflict_part()
        if conflict:
            parts.append(conflict)
        return parts + self.model_parts()


@dataclass(frozen=True)
class EngineHygiene:
    """The engines' matchers and items (both engines, every store) embedded with another
    model, or not embedded: ``thatch reembed`` fixes both. ``_more``: counting stopped
    there (hygiene's ``up_to``), more than that many."""

    other_model: int = 0
    pending: int = 0
    active_model: str = ""
    other_model_more: bool = False
    pending_more: bool = False

    def sentence(self) -> str | None:
        parts = []
        if self.other_model:
            parts.append(
                ("more than " if self.other_model_more else "")
                + f"{self.other_model} embedded with another model than {inline(self.active_model)}"
            )
        if self.pending:
            parts.append(
                ("more than " if self.pending_more else "") + f"{self.pending} not embedded yet"
            )
        if not parts:
            return None
        return f"Engine rows (predictions, behaviors): {'; '.join(parts)}."

    @classmethod
    def of(cls, db: object, active_model: str, up_to: int | None = None) -> EngineHygiene:
        """Counted over the memory Store's connection; other query objects have no engines.
        ``up_to``: each count stops past it (m032's indexes: flat in the engines' rows)."""
        from thatch.frontend.store.engine_store import BEHAVIORS, PREDICTIONS
        from thatch.frontend.store.memory_store import Store

        if not isinstance(db, Store):
            return cls(active_model=active_model)
        other = pending = 0
        for engine in (PREDICTIONS, BEHAVIORS):
            counts = db.engines(engine).embedding_counts(active_model, up_to=up_to)
            other, pending = other + counts[0], pending + counts[1]
        other, other_more = _capped(other, up_to)
        pending, pending_more = _capped(pending, up_to)
        return cls(other, pending, active_model, other_more, pending_more)


@dataclass(frozen=True)
class Hygiene:
    """The project store's counts, the global store's model/pending counts (None when the
    project store is ``global``) and the report text (None when healthy)."""

    project: StoreHygiene
    global_store: StoreHygiene | None = None
    report: str | None = field(default=None)
    engines: EngineHygiene = field(default_factory=EngineHygiene)

    def as_json(self) -> dict[str, Any]:
        """The ``thatch hygiene --json`` document (docs/cli.md §store-commands), for exact
        results only (``up_to=None``, as ``thatch hygiene --json`` passes): of the "more
        than" flags it holds only ``duplicates_more``, so capped counts would read as
        exact, and a fully checked store's progress as 0 of 0."""
        return {
            "store": self.project.store,
            "report": self.report,
            "duplicates": self.project.duplicates,
            "duplicates_more": self.project.duplicates_more,
            "duplicates_checked": {
                "checked": self.project.duplicates_checked,
                "total": self.project.duplicates_total,
            },
            "stale": self.project.stale,
            "orphaned": {
                "branches": list(self.project.orphaned_branches),
                "count": self.project.orphaned,
            },
            "other_model": self.project.other_model,
            "pending": self.project.pending,
            "code_changed": len(self.project.drifted),
            "code_anchors_unread": self.project.anchors_unread,
            "conflicts": self.project.conflicts,
            "engines": {"other_model": self.engines.other_model, "pending": self.engines.pending},
        }


def _store_hygiene(
    db: HygieneQueries,
    name: str,
    active_model: str,
    live_branches: Sequence[str],
    now: datetime | None,
    duplicate_threshold: float,
    project_dir: Path,
    env: Mapping[str, str] | None,
    refresh: AnchorRefresh,
    up_to: int | None,
) -> StoreHygiene:
    orphaned_branches: list[str] = []
    orphaned = 0
    # Without a branch list (not a git repo, git failed) every branch would look deleted.
    if live_branches:
        live = set(live_branches)
        deleted = [b for b in db.branches_in_store(name) if b not in live]
        # One grouped query for them all: a query per deleted branch cost a repository
        # that deleted 400 of them half the reminder's budget.
        counts = db.live_counts_on(name, deleted)
        orphaned_branches = [b for b in deleted if counts.get(b, 0) > 0]
        orphaned = sum(counts.values())
    summary = db.duplicate_summary(name, duplicate_threshold, up_to=up_to)
    counted, conflicts_named = _conflict_versions(db, name, up_to)
    conflicts, conflicts_more = _capped(counted, up_to)
    drift = _drifted(db, name, project_dir, env, refresh)
    stale, stale_more = _capped(db.stale_count(name, now, up_to=up_to), up_to)
    return StoreHygiene(
        conflicts=conflicts,
        conflicts_named=tuple(conflicts_named),
        conflicts_more=conflicts_more,
        drifted=drift.drifted,
        anchors_unread=drift.unread,
        store=name,
        duplicates=summary.memories,
        duplicates_more=summary.more,
        duplicates_checked=summary.checked,
        duplicates_total=summary.total,
        duplicates_total_more=summary.total_more,
        duplicates_unchecked_more=summary.unchecked_more,
        stale=stale,
        stale_more=stale_more,
        orphaned_branches=tuple(orphaned_branches),
        orphaned=orphaned,
        **_model_counts(db, name, active_model, up_to),
    )


def _model_counts(
    db: HygieneQueries, name: str, active_model: str, up_to: int | None
) -> dict[str, Any]:
    """StoreHygiene's other-model and pending fields, counted up to ``up_to``."""
    other_model, other_model_more = _capped(
        db.model_mismatch_count(name, active_model, up_to=up_to), up_to
    )
    pending, pending_more = _capped(db.pending_count(name, up_to=up_to), up_to)
    return {
        "other_model": other_model,
        "other_model_more": other_model_more,
        "pending": pending,
        "pending_more": pending_more,
        "active_model": active_model,
    }


def _conflict_versions(
    db: object, name: str, up_to: int | None
) -> tuple[int, list[tuple[str, str]]]:
    """Memory Stores only (other query objects hold no team sync tables)."""
    from thatch.frontend.store.memory_store import Store

    if not isinstance(db, Store):
        return 0, []
    return db.conflict_versions(name, CONFLICTS_NAMED, up_to=up_to)


def _drifted(
    db: object,
    name: str,
    project_dir: Path,
    env: Mapping[str, str] | None,
    refresh: AnchorRefresh,
) -> DriftPass:
    """Memory Stores only (other query objects have no anchors): renames followed first
    (``project_dir``'s checkout first) unless ``refresh`` says they were, then the
    store's anchors re-checked within its budget."""
    from thatch.frontend.anchors.recheck import DriftPass
    from thatch.frontend.store.memory_store import Store

    if not isinstance(db, Store):
        return DriftPass({}, unread=False)
    import contextlib
    import sqlite3

    from thatch.frontend.anchors.check import AnchorCheck
    from thatch.frontend.anchors.recheck import HYGIENE_BUDGET, drift_pass, follow_renames
    from thatch.frontend.errors import StoreError

    if refresh.renames:
        # A database refusing the write: the anchors stay where they were.
        with contextlib.suppress(sqlite3.Error, StoreError):
            follow_renames(db, env, project_dir)
    try:
        budget = HYGIENE_BUDGET if refresh.budget is None else refresh.budget
        return drift_pass(db, name, AnchorCheck(), budget)
    except sqlite3.Error:
        return DriftPass({}, unread=False)  # a file the earlier release left without anchors


def _default_branches(project_dir: Path) -> list[str]:
    from thatch.frontend.project import list_branches

    return list(list_branches(project_dir))


def hygiene(
    db: HygieneQueries,
    project_store: str,
    project_dir: Path,
    active_model: str,
    *,
    now: datetime | None = None,
    list_branches: Callable[[Path], Sequence[str]] | None = None,
    env: Mapping[str, str] | None = None,
    refresh: AnchorRefresh | None = None,
    up_to: int | None = COUNTED_UP_TO,
) -> Hygiene:
    """Counts and report for ``project_store`` (plus global's model/pending parts).

    Duplicate candidates are pairs at the active model's duplicate threshold (``env``'s
    THATCH_DUPLICATE_THRESHOLD first; docs/tools.md §thresholds). ``refresh``: how the
    code anchors are brought up to date (default: the whole pass). The stale, other-model,
    pending and conflict counts stop past ``up_to`` ("more than"; None: exact, which
    reads every row they count); the duplicate count always stops past its own cap."""
    from thatch.frontend.anchors.events import consume_quietly
    from thatch.frontend.thresholds import in_force

    duplicate = in_force(env or {}, active_model).values.duplicate
    branches = (list_branches or _default_branches)(project_dir)
    # The git hooks' events since the last pass: their changed files' anchors re-checked
    # first (docs/tools.md §code-anchors), before the store's pass below.
    refresh = refresh or AnchorRefresh()
    if refresh.renames:
        consume_quietly(db, project_dir, env)
    project = _store_hygiene(
        db, project_store, active_model, branches, now, duplicate, project_dir, env, refresh, up_to
    )
    global_store = None
    if project_store != GLOBAL_STORE:
        global_store = StoreHygiene(
            store=GLOBAL_STORE, **_model_counts(db, GLOBAL_STORE, active_model, up_to)
        )
    sentences = []
    parts = project.parts()
    if parts:
        sentences.append(f"Store {quoted(project_store)}: {'; '.join(parts)}.")
    global_parts = global_store.model_parts() if global_store else []
    if global_parts:
        sentences.append(f"Store {quoted(GLOBAL_STORE)}: {'; '.join(global_parts)}.")
    engines = EngineHygiene.of(db, active_model, up_to)
    engine_sentence = engines.sentence()
    if engine_sentence:
        sentences.append(engine_sentence)
    report = " ".join(sentences) or None
    return Hygiene(project=project, global_store=global_store, report=report, engines=engines)


def hygiene_report(
    store: HygieneQueries,
    project_store: str,
    project_dir: Path,
    active_model: str,
    *,
    now: datetime | None = None,
    env: Mapping[str, str] | None = None,
) -> str | None:
    """``Store "<S>": <parts>.`` (plus global's model/pending parts), or None when healthy."""
    return hygiene(store, project_store, project_dir, active_model, now=now, env=env).report


@dataclass(frozen=True)
class Named:
    """What the counts of ``thatch hygiene`` are made of, so a person can act on them."""

    pairs: list[tuple[str, str, float]]  # (label_a, label_b, score), best first
    stale: list[str]  # labels
    orphaned: list[tuple[str, str]]  # (label, deleted branch)
    # (label, changed paths, the label of the memory it depends on whose code changed)
    code_changed: list[tuple[str, tuple[str, ...], str | None]] = field(default_factory=list)
    # (label, the original's label or "") of the conflict versions team sync kept
    conflicts: list[tuple[str, str]] = field(default_factory=list)

    def lines(self, store: str) -> list[str]:
        out: list[str] = []
        if self.pairs:
            out.append(f"Duplicate candidates in {quoted(store)} (thatch dedup to review):")
            out += [
                f"  [score:{score:.3f}] {quoted(a)} ↔ {quoted(b)}" for a, b, score in self.pairs
            ]
        if self.stale:
            out.append(f"Stale in {quoted(store)} (neither updated nor recalled in 90+ days):")
            out += [f"  {quoted(label)}" for label in self.stale]
        if self.orphaned:
            out.append(f"Scoped to deleted branches in {quoted(store)}:")
            out += [
                f"  {quoted(label)} (branch:{token(branch)})" for label, branch in self.orphaned
            ]
        if self.code_changed:
            out.append(f"Code changed since saved in {quoted(store)}:")
            out += [
                f"  {quoted(label)} ({', '.join(map(token, paths))}"
                + (f" via {quoted(via)})" if via is not None else ")")
                for label, paths, via in self.code_changed
            ]
        if self.conflicts:
            out.append(
                f"Conflict versions from team sync in {quoted(store)} (merge each into its "
                "original, then forget it):"
            )
            out += [
                f"  {quoted(label)}" + (f" of {quoted(original)}" if original else "")
                for label, original in self.conflicts
            ]
        return out

    def as_json(self) -> dict[str, Any]:
        return {
            "duplicate_pairs": [
                {"label_a": a, "label_b": b, "score": round(score, 6)} for a, b, score in self.pairs
            ],
            "stale_labels": list(self.stale),
            "orphaned_memories": [
                {"label": label, "branch": branch} for label, branch in self.orphaned
            ],
            "code_changed_memories": [
                {"label": label, "paths": list(paths), "via": via}
                for label, paths, via in self.code_changed
            ],
            "conflict_versions": [
                {"label": label, "of": original or None} for label, original in self.conflicts
            ],
        }


def named(store: Any, result: Hygiene, threshold: float, now: datetime) -> Named:
    """The pairs, stale memories and memories of deleted branches ``result`` counts (the
    project store), from a memory ``Store``."""
    from datetime import timedelta

    from thatch.frontend.store.memory import STALE_DAYS
    from thatch.frontend.timefmt import format_timestamp

    project = result.project
    pairs = []
    if project.duplicates:
        # The first page of clusters (thatch dedup pages through all of them).
        page = store.duplicate_page(project.store, threshold)
        pairs = [
            (p.label_a, p.label_b, p.score) for cluster in page.clusters for p in cluster.pairs
        ]
    cutoff = format_timestamp(now - timedelta(days=STALE_DAYS))
    deleted = set(project.orphaned_branches)
    stale: list[str] = []
    orphaned: list[tuple[str, str]] = []
    code_changed: list[tuple[str, tuple[str, ...], str | None]] = []
    for memory in store.list(project.store):
        if memory.archived:
            continue
        drift = project.drifted.get(memory.slug)
        if drift is not None:
            code_changed.append((memory.label, drift.paths, drift.via))
        if project.stale and max(memory.updated_at, memory.last_recalled_at or "") < cutoff:
            stale.append(memory.label)
        if memory.branch in deleted:
            orphaned.append((memory.label, memory.branch))
    return Named(pairs, stale, orphaned, code_changed, list(project.conflicts_named))
