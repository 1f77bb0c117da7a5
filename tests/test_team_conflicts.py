"""Conflict versions on a machine (docs/team.md §conflicts), on real SQLite files: a second
version the hub kept is pulled as an ordinary memory under its own label, the replica
records what it is a version of (m021), hygiene names it, and an edit or a forget of it by
that label leaves the outbox as a normal write."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from thatch.frontend.hooks.reminder import reminder_text
from thatch.frontend.store.memory_store import Store
from thatch.frontend.tools.hygiene import Hygiene, hygiene, hygiene_report, named
from thatch.hub.v1 import hub_pb2
from thatch.teamsync import outbox
from thatch.teamsync.links import add_link, get_link, remove_link
from thatch.teamsync.replica import apply_page

SHARED = "acme/app"
STAMP = "2026-12-04T17:00:00.000Z"
NOW = datetime(2026, 12, 4, 18, 0, tzinfo=UTC)
MODEL = "test/model-a"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "thatch.db", clock=lambda: NOW) as opened:
        add_link(
            opened.conn,
            store=SHARED,
            hub_url="https://hub.test:443",
            team="acme",
            member="ann",
            hub_model="m",
            now=STAMP,
        )
        yield opened


def change(slug: str, label: str, rev: int, conflict_of: str = "") -> hub_pb2.Change:
    # Distinct unit vectors of the local model: embedded, and no duplicate candidates.
    vector = np.zeros(8, dtype="<f4")
    vector[zlib.crc32(slug.encode()) % 8] = 1.0
    memory = hub_pb2.Memory(
        store=SHARED,
        slug=slug,
        label=label,
        content=f"# {label}\n\ntext of {slug} at {rev}",
        archived=False,
        created_at=STAMP,
        updated_at=STAMP,
        model=MODEL,
        vector=vector.tobytes(),
    )
    return hub_pb2.Change(store=SHARED, slug=slug, rev=rev, conflict_of=conflict_of, memory=memory)


def pull(store: Store, *changes: hub_pb2.Change, at: int) -> None:
    link = get_link(store.conn, SHARED)
    assert link is not None
    page = hub_pb2.PullResponse(changes=list(changes), next=hub_pb2.Cursor(txid=at, seq=at))
    apply_page(store.conn, link, page, local_model=MODEL)


def checked(store: Store, tmp_path: Path) -> Hygiene:
    """Hygiene as ``thatch hygiene`` computes it: the pulled rows compared first."""
    store.check_all_duplicates(SHARED)
    return hygiene(store, SHARED, tmp_path, MODEL, now=NOW, list_branches=lambda _: [])


def report(store: Store, tmp_path: Path) -> str | None:
    return checked(store, tmp_path).report


def versions(store: Store) -> list[tuple[str, str]]:
    rows = store.conn.execute("SELECT slug, conflict_of FROM team_conflict_versions ORDER BY slug")
    return [(str(slug), str(of)) for slug, of in rows]


def test_a_pulled_conflict_version_is_named_by_hygiene_until_it_is_gone(
    store: Store, tmp_path: Path
) -> None:
    pull(
        store,
        change("build", "Build", 2),
        change("build-conflict-2", "Build (conflict 2)", 1, conflict_of="build"),
        at=1,
    )
    assert versions(store) == [("build-conflict-2", "build")]
    assert store.show(SHARED, "Build (conflict 2)") is not None  # addressed by its label
    result = checked(store, tmp_path)
    assert result.report == (
        'Store "acme/app": 1 conflict version from team sync ("Build (conflict 2)" of '
        '"Build"; merge each into its original, then forget it).'
    )
    assert result.as_json()["conflicts"] == 1
    # The session start's reminder carries the same report.
    session = reminder_text(
        SHARED, "claude", hygiene_report(store, SHARED, tmp_path, MODEL, now=NOW)
    )
    assert f"[thatch hygiene] {result.report}" in session
    names = named(store, result, 0.85, NOW)
    assert names.lines(SHARED) == [
        'Conflict versions from team sync in "acme/app" (merge each into its original, '
        "then forget it):",
        '  "Build (conflict 2)" of "Build"',
    ]
    assert names.as_json()["conflict_versions"] == [{"label": "Build (conflict 2)", "of": "Build"}]
    # A second one: counted, the first named.
    pull(store, change("build-conflict-3", "Build (conflict 3)", 1, conflict_of="build"), at=2)
    assert report(store, tmp_path) == (
        'Store "acme/app": 2 conflict versions from team sync ("Build (conflict 2)" of '
        '"Build" and 1 more; merge each into its original, then forget it).'
    )
    # The hub's tombstone (forgotten on another machine) and a row recreated afresh under
    # the label (no conflict_of) both clear it.
    pull(
        store,
        hub_pb2.Change(store=SHARED, slug="build-conflict-2", rev=2),
        change("build-conflict-3", "Build (conflict 3)", 2),
        at=3,
    )
    assert versions(store) == []
    assert report(store, tmp_path) is None


def test_a_conflict_version_is_edited_and_forgotten_here_by_its_label_as_a_normal_write(
    store: Store, tmp_path: Path
) -> None:
    pull(
        store,
        change("build", "Build", 2),
        change("build-conflict-2", "Build (conflict 2)", 1, conflict_of="build"),
        at=1,
    )
    edited = np.eye(8, dtype="<f4")[3]
    store.remember(SHARED, "Build", "# Build\n\nmake or ninja", edited, MODEL, overwrite=True)
    assert store.forget(SHARED, "Build (conflict 2)") is not None
    rows = outbox.waiting(store.conn, SHARED, 10)
    assert [(r.op, r.slug, r.label, r.base_rev) for r in rows] == [
        ("remember", "build", "Build", 2),
        ("forget", "build-conflict-2", "Build (conflict 2)", 1),
    ]
    assert [outbox.check(row) for row in rows] == [None, None]  # nothing set aside
    # Forgotten here, it is no longer named (the hub's tombstone clears the record).
    assert report(store, tmp_path) is None


def test_a_row_whose_slug_is_not_its_labels_is_still_set_aside(store: Store) -> None:
    """A conflict version pulled from a hub before versions had labels of their own (slug
    ``<slug>--conflict-<n>``, the original's label): a write of it by label would touch
    the original, so it stays here with the reason."""
    store.conn.execute(
        "INSERT INTO team_outbox (store, slug, op, base_rev, label, content, queued_at) "
        "VALUES (?, 'build--conflict-2', 'forget', 1, 'Build', NULL, ?)",
        (SHARED, STAMP),
    )
    (row,) = outbox.waiting(store.conn, SHARED, 10)
    assert outbox.check(row) == (
        "the hub cannot address slug 'build--conflict-2' by its label (edit it on the hub)"
    )


def test_leaving_drops_the_records(store: Store) -> None:
    pull(store, change("x-conflict-2", "X (conflict 2)", 1, conflict_of="x"), at=1)
    remove_link(store.conn, SHARED)
    assert versions(store) == []
    assert store.show(SHARED, "X (conflict 2)") is not None  # the personal copy stays
