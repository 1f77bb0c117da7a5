"""The passes off the prompt path (docs/tools.md §code-anchors): following git's renames
and re-checking a store's anchors for the hygiene report. Session start and ``thatch
hygiene`` run both; a recall that finds an anchored file gone runs the rename pass (after
its answer in ``thatch mcp``); the prompt hook never asks git.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from thatch.frontend.anchors.check import (
    CHANGED,
    AnchorCheck,
    Drift,
    database_files,
    depends_on,
    inherit,
)
from thatch.frontend.errors import StoreError

if TYPE_CHECKING:
    from thatch.frontend.store.anchor_queries import Key
    from thatch.frontend.store.memory_store import Store

__all__ = ["HYGIENE_BUDGET", "MAX_COMMITS", "drifted", "follow_renames", "parse_renames"]

# How many (repository, captured commit) pairs one rename pass diffs: one git process each.
MAX_COMMITS = 8
# How long the hygiene pass may spend checking files; past it, the last stored verdicts.
HYGIENE_BUDGET = 0.25


def parse_renames(output: str) -> list[tuple[str, str]]:
    """(old, new) of each ``R<score>\\told\\tnew`` line of ``git diff --name-status -M``."""
    renames = []
    for line in output.splitlines():
        fields = line.split("\t")
        if len(fields) == 3 and fields[0].startswith("R"):
            renames.append((fields[1], fields[2]))
    return renames


def follow_renames(store: Store, env: Mapping[str, str] | None = None) -> int:
    """Move the anchors whose files git reports renamed since their captured commit (the
    working tree included, so a staged ``git mv`` counts); the anchors moved."""
    from thatch.frontend.project import run_git

    moved = 0
    for root, commit in store.anchor_commits()[:MAX_COMMITS]:
        if not Path(root).is_dir():
            continue
        head = run_git(Path(root), env, "rev-parse", "--verify", "--quiet", "HEAD")
        output = run_git(Path(root), env, "diff", "--name-status", "-M", commit)
        if head is None or output is None:
            continue  # unknown commit (a shallow clone, a rewritten history): stay put
        renames = parse_renames(output)
        if renames or head != commit:
            moved += store.move_anchors(root, commit, renames, head)
    return moved


def drifted(store: Store, name: str, check: AnchorCheck) -> dict[str, Drift]:
    """The live memories of store ``name`` with an anchor whose code changed, by slug:
    checked now within ``HYGIENE_BUDGET``, the rest by their last stored verdict; then
    the live memories that depend on one of them, marked ``via`` its label as a recall
    marks them. Verdicts are stored when the database takes the write."""
    anchored = store.anchored_in(name)
    every = [anchor for anchors in anchored.values() for anchor in anchors]
    before = {(a.slug, a.seq): (a.status, a.checked_mtime_ns, a.checked_size) for a in every}
    verdicts = check.recheck(every, HYGIENE_BUDGET, never_open=database_files(store.path))
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
