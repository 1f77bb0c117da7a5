"""The nine default behaviors and their seeding into ``global`` (engines.md §6).

Each default is keyed by a stamp appended to its rationale,
`` seed-key:<key> seed-version:<thatch version>``. Seeding reads the stamps of the
``global`` behaviors first and embeds only what must change: a missing default is
created, one of another version is upgraded in place (its learned counts, confidence and
provenance kept), one of this version is left alone. Behaviors without a stamp are never
touched. Every write re-checks the stamps inside its transaction, so servers starting at
once seed each default exactly once.

``thatch mcp`` runs a ``DefaultSeeder`` in the background once the embedder answers;
failures go to stderr and never affect tool calls.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from thatch.embedder.client.errors import EmbedderUnavailable
from thatch.embedder.client.kind import Kind
from thatch.frontend.store.engine_store import BEHAVIORS, Item, SeedPlan
from thatch.frontend.store.memory_store import Store
from thatch.frontend.tools.background import Background
from thatch.frontend.tools.context import Embedder
from thatch.frontend.tools.seed_stamps import SEED_STORE, STAMP_MARKER, parse_stamp, stamp

__all__ = [
    "DEFAULTS",
    "SEED_EMBED_TIMEOUT",
    "SEED_RETRY_MAX_SECONDS",
    "SEED_RETRY_SECONDS",
    "SEED_WAIT_SECONDS",
    "Default",
    "DefaultSeeder",
    "SeedReport",
    "seed_defaults",
]

# How long a server keeps trying for an embedder (the first start downloads the model).
SEED_WAIT_SECONDS = 600.0
# Each attempt may spawn a local embedder (as a prompt hook's would): back off, so an
# embedder that cannot start is not respawned every few seconds.
SEED_RETRY_SECONDS = 2.0
SEED_RETRY_MAX_SECONDS = 60.0
SEED_EMBED_TIMEOUT = 30.0


@dataclass(frozen=True)
class Default:
    key: str
    situation: str
    behavior: str
    why: str


DEFAULTS: tuple[Default, ...] = (
    Default(
        "session-wrap-up",
        "wrapping up a session or handing work back to the user",
        "Run a read-only check for uncommitted changes, untracked files and leftover scratch "
        "files, and report what you find; do not fix or delete anything.",
        "Work left uncommitted or scattered is lost or confusing in the next session.",
    ),
    Default(
        "work-finalization",
        "committing, merging or closing out a piece of work",
        "Check for uncommitted, untracked and scratch files, list the branch's memories "
        "that should be archived and the follow-ups that should be filed, and report them.",
        "Finished work leaves loose ends that nobody picks up later.",
    ),
    Default(
        "research-new-project",
        "starting work in an unfamiliar codebase or area",
        "Before changing anything, study the tests, naming drift, half-finished migrations "
        "and the existing patterns for this kind of change.",
        "Changes that ignore local conventions get rewritten in review.",
    ),
    Default(
        "day-turnover-coding",
        "resuming work on a branch from a previous day",
        "Fetch and check how far origin/main has moved past the branch point; if it moved, "
        "suggest rebasing before writing more code.",
        "A stale base turns into conflicts and surprises at merge time.",
    ),
    Default(
        "day-turnover-pr",
        "resuming work on a branch that has an open pull request",
        "Check the pull request for new review comments before continuing to code.",
        "Reviewers' feedback changes what the next commit should be.",
    ),
    Default(
        "day-turnover-review",
        "resuming a code review started earlier",
        "Check for new comments, replies to yours and commits pushed since your last pass "
        "before continuing the review.",
        "A review of an outdated state wastes everyone's time.",
    ),
    Default(
        "snag-dead-end",
        "an approach turned out to be a dead end",
        "Save a memory naming the dead end, why it failed and the real cause, so that no "
        "later session tries it again.",
        "Dead ends are rediscovered at full cost when nobody writes them down.",
    ),
    Default(
        "debugging-git-archaeology",
        "debugging a failure or unexpected behavior",
        "Read the history of the affected code (git log -p, git blame) before proposing a fix.",
        "The commit that introduced a bug usually explains it.",
    ),
    Default(
        "planning-git-archaeology",
        "planning a change to an existing design",
        "Read the commits and discussions behind the current design (git log, git blame) "
        "before proposing to change it.",
        "Designs often encode constraints that are invisible in the code alone.",
    ),
)


@dataclass(frozen=True)
class SeedReport:
    created: int = 0
    upgraded: int = 0
    current: int = 0


def seed_defaults(
    store: Store,
    embedder: Embedder,
    *,
    version: str,
    defaults: tuple[Default, ...] = DEFAULTS,
    start_wait: float = 0.0,
) -> SeedReport:
    """Create missing defaults and upgrade those of another version (engines.md §6).

    Raises EmbedderUnavailable when something must change and no embedder answers.
    """
    engines = store.engines(BEHAVIORS)
    off = engines.defaults_off()
    defaults = tuple(default for default in defaults if default.key not in off)
    stamped: dict[str, Item] = {}
    for item in engines.stamped(SEED_STORE, STAMP_MARKER):
        parsed = parse_stamp(item.rationale)
        if parsed is not None:
            stamped.setdefault(parsed[0], item)
    todo: list[tuple[Default, Item | None]] = []
    current = 0
    for default in defaults:
        existing = stamped.get(default.key)
        if existing is not None and parse_stamp(existing.rationale) == (default.key, version):
            current += 1
        else:
            todo.append((default, existing))
    if not todo:
        return SeedReport(current=current)
    texts = [text for default, _ in todo for text in (default.behavior, default.situation)]
    result = embedder.embed(texts, Kind.PASSAGE, timeout=SEED_EMBED_TIMEOUT, start_wait=start_wait)
    created = upgraded = 0
    for index, (default, existing) in enumerate(todo):
        plan = SeedPlan(
            statement=default.behavior,
            rationale=default.why + stamp(default.key, version),
            situation=default.situation,
            statement_vector=result.vectors[2 * index],
            situation_vector=result.vectors[2 * index + 1],
            model=result.model_id,
            existing=existing,
            key=default.key,
        )
        if existing is not None:
            old = (parse_stamp(existing.rationale) or ("", "?"))[1]
            plan.detail = f"seed upgrade {old} → {version}"
            plan.stamp_check = existing.rationale or ""
        # The key followed by a space: "day-turnover" must not match "day-turnover-pr".
        if engines.seed(SEED_STORE, plan, f"{STAMP_MARKER}{default.key} "):
            if existing is None:
                created += 1
            else:
                upgraded += 1
    return SeedReport(created, upgraded, current)


class DefaultSeeder(Background):
    """Seeds the defaults in a background thread once the embedder answers.

    ``close`` stops the waiting and joins; a seeder stopped while waiting makes one last
    attempt that does not wait for a start, so a server whose embedder is up always
    leaves the defaults seeded, however short its life.
    """

    name = "thatch-seed"

    def __init__(self, store: Store, embedder: Embedder, *, version: str) -> None:
        self._store = store
        self._embedder = embedder
        self._version = version
        self.report: SeedReport | None = None
        super().__init__()

    def _run(self) -> None:
        deadline = time.monotonic() + SEED_WAIT_SECONDS
        delay = SEED_RETRY_SECONDS
        while True:
            last = self._stop.is_set()
            try:
                self.report = seed_defaults(self._store, self._embedder, version=self._version)
                return
            except EmbedderUnavailable as error:
                if last:
                    return
                if time.monotonic() > deadline:
                    print(f"[thatch] default behaviors not seeded: {error}", file=sys.stderr)
                    return
            except Exception as error:  # never affects tool calls
                print(f"[thatch] seeding default behaviors failed: {error}", file=sys.stderr)
                return
            self._stop.wait(delay)
            delay = min(delay * 2, SEED_RETRY_MAX_SECONDS)
